/* A counted run's records on their way to node counts, in C: the usual case of
 * otel_ort/perf/records.py's flight-ring reading (parse_recent, trim_recent, reaches), of
 * otel_ort/perf/attribution.py's per-thread values (_OnCpu, _thread_values: the time,
 * switches and sparse kinds) and of otel_ort/perf/report.py's node attributes from columns
 * (_from_columns), giving what the Python code gives. That code is the reference: a ring
 * with any record other than a switch or a sparse sample, a time past int64 or a dense event
 * is NotImplemented here (or not sent), and done there.
 *
 * Rings hold 32-byte records, the newest first: u32 type, u16 misc, u16 size, then three
 * u64 (a switch record: pid/tid, time, id; a sample: id, pid/tid, time).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define RECORD 32
#define SAMPLE 9
#define SWITCH 14
#define SWITCH_OUT (1u << 13)

typedef struct {
    uint32_t type;
    uint16_t misc, size;
    uint64_t a, b, c;
} Record;
_Static_assert(sizeof(Record) == RECORD, "a record is 32 bytes");

/* A record as the kernel wrote it (in this machine's byte order), wherever it lies. */
static Record record_at(const char *data, Py_ssize_t index) {
    Record r;
    memcpy(&r, data + index * RECORD, sizeof r);
    return r;
}

static int64_t record_time(const Record *r) {
    return (int64_t)(r->type == SWITCH ? r->b : r->c);
}

/* Whether every whole record is a switch or a sample of 32 bytes (numpy's _plain_records). */
static int plain(const char *data, Py_ssize_t count) {
    for (Py_ssize_t i = 0; i < count; i++) {
        Record r = record_at(data, i);
        if (r.size != RECORD || (r.type != SWITCH && r.type != SAMPLE)) return 0;
    }
    return 1;
}

/* _select's keep: the window's records and the newest switch before it; and reached. */
static void select_window(const char *data, Py_ssize_t count, int64_t since, int64_t until,
                          char *keep, int *reached) {
    int before_found = 0;
    int64_t oldest = INT64_MAX;
    for (Py_ssize_t i = 0; i < count; i++) {
        Record r = record_at(data, i);
        int64_t time = record_time(&r);
        keep[i] = time >= since && time <= until;
        if (!before_found && r.type == SWITCH && time < since) {
            keep[i] = 1;
            before_found = 1;
        }
        if (time < oldest) oldest = time;
    }
    *reached = count > 0 && oldest < since;
}

/* A time argument within int64; 1 when it is not (an overflow: Python's turn), -1 on error. */
static int time_arg(PyObject *value, int64_t *out) {
    *out = PyLong_AsLongLong(value);
    if (*out != -1 || !PyErr_Occurred()) return 0;
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
    PyErr_Clear();
    return 1;
}

/* The data's buffer and the window; 1: a time past int64 (NotImplemented), -1: an error. */
static int parse_window(PyObject *const *args, Py_ssize_t nargs, Py_buffer *view,
                        int64_t *since, int64_t *until) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "(data, since, until)");
        return -1;
    }
    int r = time_arg(args[1], since);
    if (r == 0) r = time_arg(args[2], until);
    if (r != 0) return r;
    return PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE);
}

/* The records a window (data, since, until) keeps: 0 with ``view`` held and ``keep`` (to
 * free) and ``reached`` set; 1: a time past int64 or records not all plain (Python's);
 * -1: an error. Neither holds anything. */
static int selected(PyObject *const *args, Py_ssize_t nargs, Py_buffer *view, Py_ssize_t *count,
                    char **keep, int *reached) {
    int64_t since, until;
    int status = parse_window(args, nargs, view, &since, &until);
    if (status != 0) return status;
    *count = view->len / RECORD;
    if (!plain(view->buf, *count)) {
        PyBuffer_Release(view);
        return 1;
    }
    *keep = PyMem_Malloc(*count > 0 ? (size_t)*count : 1);
    if (*keep == NULL) {
        PyBuffer_Release(view);
        PyErr_NoMemory();
        return -1;
    }
    select_window(view->buf, *count, since, until, *keep, reached);
    return 0;
}

/* recent_records(data, since, until) -> (switches, events, reached) | NotImplemented:
 * parse_recent's usual case. switches: (time, switched out) in ring order; events: sample
 * times by event id (ids ascending, times in ring order). */
static PyObject *recent_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    Py_ssize_t count;
    char *keep;
    int reached, status = selected(args, nargs, &view, &count, &keep, &reached);
    if (status != 0) return status < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    const char *data = view.buf;
    PyObject *result = NULL, *switches = NULL, *events = NULL, *ids = NULL;
    switches = PyList_New(0);
    events = PyDict_New();
    ids = PyList_New(0); /* each sample id once, in order of first sight */
    if (switches == NULL || events == NULL || ids == NULL) goto done;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (!keep[i]) continue;
        Record r = record_at(data, i);
        PyObject *time = PyLong_FromLongLong(record_time(&r));
        if (time == NULL) goto done;
        if (r.type == SWITCH) {
            PyObject *item = PyTuple_Pack(2, time, (r.misc & SWITCH_OUT) ? Py_True : Py_False);
            Py_DECREF(time);
            if (item == NULL || PyList_Append(switches, item) < 0) {
                Py_XDECREF(item);
                goto done;
            }
            Py_DECREF(item);
            continue;
        }
        PyObject *id = PyLong_FromUnsignedLongLong(r.a);
        if (id == NULL) {
            Py_DECREF(time);
            goto done;
        }
        PyObject *times = PyDict_GetItemWithError(events, id); /* borrowed */
        if (times == NULL && !PyErr_Occurred()) {
            times = PyList_New(0);
            if (times == NULL || PyDict_SetItem(events, id, times) < 0 ||
                PyList_Append(ids, id) < 0) {
                Py_XDECREF(times);
                Py_DECREF(id);
                Py_DECREF(time);
                goto done;
            }
            Py_DECREF(times); /* the dict holds it */
        }
        Py_DECREF(id);
        if (times == NULL || PyList_Append(times, time) < 0) {
            Py_DECREF(time);
            goto done;
        }
        Py_DECREF(time);
    }
    if (PyList_Size(ids) > 1) { /* numpy's unique: the ids ascending */
        if (PyList_Sort(ids) < 0) goto done;
        PyObject *ordered = PyDict_New();
        if (ordered == NULL) goto done;
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(ids); i++) {
            PyObject *id = PyList_GET_ITEM(ids, i);
            if (PyDict_SetItem(ordered, id, PyDict_GetItem(events, id)) < 0) {
                Py_DECREF(ordered);
                goto done;
            }
        }
        Py_SETREF(events, ordered);
    }
    result = Py_BuildValue("(OOO)", switches, events, reached ? Py_True : Py_False);
done:
    PyMem_Free(keep);
    Py_XDECREF(switches);
    Py_XDECREF(events);
    Py_XDECREF(ids);
    PyBuffer_Release(&view);
    return result;
}

/* trimmed_records(data, since, until) -> (bytes, reached) | NotImplemented: trim_recent's
 * usual case, the kept records' bytes in ring order. */
static PyObject *trimmed_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    Py_ssize_t count, kept = 0;
    char *keep;
    int reached, status = selected(args, nargs, &view, &count, &keep, &reached);
    if (status != 0) return status < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    const char *data = view.buf;
    PyObject *result = NULL, *bytes = NULL;
    for (Py_ssize_t i = 0; i < count; i++) kept += keep[i];
    bytes = PyBytes_FromStringAndSize(NULL, kept * RECORD);
    if (bytes == NULL) goto done;
    char *out = PyBytes_AS_STRING(bytes);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (keep[i]) {
            memcpy(out, data + i * RECORD, RECORD);
            out += RECORD;
        }
    }
    result = Py_BuildValue("(OO)", bytes, reached ? Py_True : Py_False);
done:
    PyMem_Free(keep);
    Py_XDECREF(bytes);
    PyBuffer_Release(&view);
    return result;
}

/* reaches_back(data, since, switches) -> bool | NotImplemented: reaches's usual case. */
static PyObject *reaches_back(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "reaches_back(data, since, switches)");
        return NULL;
    }
    int64_t since;
    int status = time_arg(args[1], &since);
    if (status != 0) return status < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    int switches = PyObject_IsTrue(args[2]);
    if (switches < 0) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(args[0], &view, PyBUF_SIMPLE) < 0) return NULL;
    const char *data = view.buf;
    Py_ssize_t count = view.len / RECORD;
    PyObject *result;
    if (!plain(data, count)) {
        result = Py_NewRef(Py_NotImplemented);
    } else {
        int falls = 1, found = 0;
        int64_t previous = 0;
        for (Py_ssize_t i = 0; i < count; i++) {
            Record r = record_at(data, i);
            int64_t time = record_time(&r);
            if (i > 0 && time > previous) falls = 0; /* the clock set back: cannot tell */
            previous = time;
            if (time < since && (!switches || r.type == SWITCH)) found = 1;
        }
        result = Py_NewRef(falls && found ? Py_True : Py_False);
    }
    PyBuffer_Release(&view);
    return result;
}

/* Take the C-contiguous buffers of ``objects``: all or none (-1, an error set). */
static int take_buffers(PyObject *const *objects, Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) {
        if (PyObject_GetBuffer(objects[i], &views[i], PyBUF_C_CONTIGUOUS) < 0) {
            while (i-- > 0) PyBuffer_Release(&views[i]);
            return -1;
        }
    }
    return 0;
}

static void release_buffers(Py_buffer *views, int n) {
    for (int i = 0; i < n; i++) PyBuffer_Release(&views[i]);
}

/* node_dicts(value_keys, split_keys, ids_key, tids, ints, on_cpu, uncounted) -> list:
 * _from_columns's dicts. ints: int64, rows = the totals per alias, then each thread's values
 * alias by alias, one column per node; on_cpu: bool, a row per thread (set only where two or
 * more threads were on a CPU); uncounted: bool per node (None there, for Python to fill). */
static PyObject *node_dicts(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 7 || !PyTuple_CheckExact(args[0]) || !PyTuple_CheckExact(args[1]) ||
        !PyUnicode_CheckExact(args[2]) || !PyTuple_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "node_dicts(value_keys, split_keys, ids_key, tids, ints, on_cpu, "
                        "uncounted): tuples, a str, buffers");
        return NULL;
    }
    PyObject *value_keys = args[0], *split_keys = args[1], *ids_key = args[2], *tids = args[3];
    Py_ssize_t width = PyTuple_GET_SIZE(value_keys), threads = PyTuple_GET_SIZE(tids);
    if (PyTuple_GET_SIZE(split_keys) != width || width == 0) {
        PyErr_SetString(PyExc_ValueError, "node_dicts: a split key per value key, one at least");
        return NULL;
    }
    Py_buffer views[3]; /* ints, on_cpu, uncounted */
    if (take_buffers(args + 4, views, 3) < 0) return NULL;
    Py_buffer ints = views[0], on_cpu = views[1], uncounted = views[2];
    PyObject *out = NULL;
    Py_ssize_t nodes = uncounted.len, rows = width * (1 + threads);
    if (ints.itemsize != 8 || on_cpu.itemsize != 1 || uncounted.itemsize != 1 ||
        ints.len != rows * nodes * 8 || on_cpu.len != threads * nodes) {
        PyErr_SetString(PyExc_ValueError, "node_dicts: arrays of other shapes than said");
        goto done;
    }
    const int64_t *values = ints.buf;
    const char *on = on_cpu.buf, *skip = uncounted.buf;
    out = PyList_New(nodes);
    if (out == NULL) goto done;
    for (Py_ssize_t node = 0; node < nodes; node++) {
        if (skip[node]) {
            PyList_SET_ITEM(out, node, Py_NewRef(Py_None));
            continue;
        }
        PyObject *dict = PyDict_New();
        if (dict == NULL) goto fail;
        PyList_SET_ITEM(out, node, dict);
        for (Py_ssize_t a = 0; a < width; a++) {
            PyObject *number = PyLong_FromLongLong(values[a * nodes + node]);
            if (number == NULL || PyDict_SetItem(dict, PyTuple_GET_ITEM(value_keys, a), number)) {
                Py_XDECREF(number);
                goto fail;
            }
            Py_DECREF(number);
        }
        Py_ssize_t members = 0;
        for (Py_ssize_t t = 0; t < threads; t++) members += on[t * nodes + node] != 0;
        if (members == 0) continue;
        PyObject *ids = PyList_New(members);
        if (ids == NULL) goto fail;
        for (Py_ssize_t t = 0, m = 0; t < threads; t++)
            if (on[t * nodes + node]) PyList_SET_ITEM(ids, m++, Py_NewRef(PyTuple_GET_ITEM(tids, t)));
        int failed = PyDict_SetItem(dict, ids_key, ids);
        Py_DECREF(ids);
        if (failed) goto fail;
        for (Py_ssize_t a = 0; a < width; a++) {
            PyObject *split = PyList_New(members);
            if (split == NULL) goto fail;
            for (Py_ssize_t t = 0, m = 0; t < threads; t++) {
                if (!on[t * nodes + node]) continue;
                PyObject *number = PyLong_FromLongLong(values[(width * (1 + t) + a) * nodes + node]);
                if (number == NULL) {
                    Py_DECREF(split);
                    goto fail;
                }
                PyList_SET_ITEM(split, m++, number);
            }
            failed = PyDict_SetItem(dict, PyTuple_GET_ITEM(split_keys, a), split);
            Py_DECREF(split);
            if (failed) goto fail;
        }
    }
    goto done;
fail:
    Py_CLEAR(out);
done:
    release_buffers(views, 3);
    return out;
}

/* -- one thread's values per node (attribution.py's _OnCpu and _thread_values) ------------ */

typedef struct {
    int64_t time;
    int out;
} Switch;

static int switch_order(const void *x, const void *y) { /* numpy's lexsort: time, then out */
    const Switch *a = x, *b = y;
    if (a->time != b->time) return a->time < b->time ? -1 : 1;
    return (a->out > b->out) - (a->out < b->out);
}

typedef struct {
    double *starts, *lengths, *before; /* on-CPU intervals, ns since origin; before: n + 1 */
    Py_ssize_t n;
    double *switched_out; /* ns since origin, in time order */
    Py_ssize_t outs;
} OnCpu;

static void on_cpu_free(OnCpu *c) {
    PyMem_Free(c->starts);
    PyMem_Free(c->lengths);
    PyMem_Free(c->before);
    PyMem_Free(c->switched_out);
}

static int64_t clip64(int64_t value, int64_t low, int64_t high) { /* np.clip's order */
    int64_t raised = value < low ? low : value;
    return raised > high ? high : raised;
}

/* Whether ``time - origin`` fits int64 (numpy would wrap it: such a time is Python's). */
static int fits(int64_t time, int64_t origin) {
    int64_t difference;
    return !__builtin_sub_overflow(time, origin, &difference);
}

/* _OnCpu.__init__: the thread's on-CPU intervals inside [begin, end] from its switches. */
static int on_cpu_make(Switch *table, Py_ssize_t count, int64_t begin, int64_t end,
                       int running, int64_t origin, OnCpu *c) {
    memset(c, 0, sizeof *c);
    qsort(table, (size_t)count, sizeof *table, switch_order);
    Py_ssize_t room = count + 1;
    c->starts = PyMem_Malloc(sizeof(double) * (size_t)room);
    c->lengths = PyMem_Malloc(sizeof(double) * (size_t)room);
    c->before = PyMem_Malloc(sizeof(double) * (size_t)(room + 1));
    c->switched_out = PyMem_Malloc(sizeof(double) * (size_t)room);
    if (!c->starts || !c->lengths || !c->before || !c->switched_out) {
        PyErr_NoMemory();
        return -1;
    }
    int first = count ? table[0].out : running;
    int64_t previous = begin; /* the time before each switch, clipped: lefts */
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t time = clip64(table[i].time, begin, end);
        int was_on = i == 0 ? first : !table[i - 1].out;
        if (table[i].out) {
            c->switched_out[c->outs++] = (double)(table[i].time - origin);
            if (was_on) { /* switched out while on one: an interval ends */
                c->starts[c->n] = (double)(previous - origin);
                c->lengths[c->n] = (double)(time - origin) - c->starts[c->n];
                c->n++;
            }
        }
        previous = time;
    }
    if (count ? !table[count - 1].out : first) { /* on a CPU until the end */
        c->starts[c->n] = (double)((count ? previous : begin) - origin);
        c->lengths[c->n] = (double)(end - origin) - c->starts[c->n];
        c->n++;
    }
    c->before[0] = 0.0;
    for (Py_ssize_t i = 0; i < c->n; i++) c->before[i + 1] = c->before[i] + c->lengths[i];
    return 0;
}

/* _OnCpu.at: on-CPU time from the window's start up to ``time``. */
static double on_cpu_at(const OnCpu *c, double time) {
    if (c->n == 0) return 0.0;
    Py_ssize_t low = 0, high = c->n; /* searchsorted(starts, time, "right") */
    while (low < high) {
        Py_ssize_t mid = (low + high) / 2;
        if (c->starts[mid] <= time) low = mid + 1; else high = mid;
    }
    Py_ssize_t index = low - 1 < 0 ? 0 : low - 1;
    double inside = time - c->starts[index];
    inside = inside < 0 ? 0 : inside;
    inside = inside > c->lengths[index] ? c->lengths[index] : inside;
    return time >= c->starts[0] ? c->before[index] + inside : 0.0;
}

static int compare_doubles(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

static Py_ssize_t count_below(const double *sorted, Py_ssize_t n, double value) {
    Py_ssize_t low = 0, high = n; /* searchsorted(sorted, value, "left") */
    while (low < high) {
        Py_ssize_t mid = (low + high) / 2;
        if (sorted[mid] < value) low = mid + 1; else high = mid;
    }
    return low;
}

/* _counts_in: per node, the times inside the thread's window that fall in [start, end);
 * the window's count is the total. ``times`` is sorted here. */
static Py_ssize_t counts_in(double *times, Py_ssize_t n, double low, double high,
                            const double *starts, const double *ends, Py_ssize_t nodes,
                            double *out) {
    Py_ssize_t kept = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (times[i] >= low && times[i] <= high) times[kept++] = times[i];
    qsort(times, (size_t)kept, sizeof *times, compare_doubles);
    for (Py_ssize_t k = 0; k < nodes; k++)
        out[k] = (double)(count_below(times, kept, ends[k]) - count_below(times, kept, starts[k]));
    return kept;
}

enum { TIME = 0, SWITCHES = 1, SPARSE = 2 };

/* thread_values(switches, begin, end, running, origin, starts, ends, outermost, aliases)
 * -> [(values, total, between)] per alias: _thread_values for the time, switches and sparse
 * kinds. switches: (time, switched out) records; starts, ends: float64 node windows (ns
 * since origin); outermost: bool per node; aliases: (kind, sample times or None, whether its
 * records are incomplete) each. values: a bytearray of float64 per node. */
static PyObject *thread_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 9 || !PyTuple_CheckExact(args[8])) {
        PyErr_SetString(PyExc_TypeError, "thread_values(switches, begin, end, running, origin, "
                                         "starts, ends, outermost, aliases)");
        return NULL;
    }
    int64_t begin, end, origin;
    int overflow = time_arg(args[1], &begin);
    if (overflow == 0) overflow = time_arg(args[2], &end);
    if (overflow == 0) overflow = time_arg(args[4], &origin);
    if (overflow != 0) return overflow < 0 ? NULL : Py_NewRef(Py_NotImplemented);
    if (!PyList_CheckExact(args[0]) || !PyBool_Check(args[3]) || !fits(begin, origin) ||
        !fits(end, origin))
        return Py_NewRef(Py_NotImplemented);
    int running = args[3] == Py_True;
    Py_buffer views[3]; /* starts, ends, outermost */
    if (take_buffers(args + 5, views, 3) < 0) return NULL;
    Py_buffer starts_view = views[0], ends_view = views[1], outer_view = views[2];
    PyObject *result = NULL, *switches = args[0], *aliases = args[8];
    Py_ssize_t count = PyList_GET_SIZE(switches), nodes = outer_view.len;
    Switch *table = NULL;
    double *times = NULL;
    OnCpu c;
    memset(&c, 0, sizeof c);
    if (starts_view.itemsize != 8 || ends_view.itemsize != 8 || outer_view.itemsize != 1 ||
        starts_view.len != nodes * 8 || ends_view.len != nodes * 8) {
        PyErr_SetString(PyExc_ValueError, "thread_values: windows of other shapes than said");
        goto done;
    }
    const double *starts = starts_view.buf, *ends = ends_view.buf;
    const char *outermost = outer_view.buf;
    table = PyMem_Malloc(sizeof *table * (size_t)(count + 1));
    if (table == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *item = PyList_GET_ITEM(switches, i);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 2 ||
            !PyBool_Check(PyTuple_GET_ITEM(item, 1))) { /* records.py's (int, bool) only */
            result = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        int r = time_arg(PyTuple_GET_ITEM(item, 0), &table[i].time);
        if (r != 0 || !fits(table[i].time, origin)) {
            if (r >= 0) result = Py_NewRef(Py_NotImplemented);
            goto done;
        }
        table[i].out = PyTuple_GET_ITEM(item, 1) == Py_True;
    }
    if (on_cpu_make(table, count, begin, end, running, origin, &c) < 0) goto done;
    double low = (double)(begin - origin), high = (double)(end - origin);
    Py_ssize_t n_aliases = PyTuple_GET_SIZE(aliases);
    result = PyList_New(n_aliases);
    if (result == NULL) goto done;
    for (Py_ssize_t a = 0; a < n_aliases; a++) {
        PyObject *spec = PyTuple_GET_ITEM(aliases, a);
        long kind;
        int incomplete;
        PyObject *samples;
        if (!PyTuple_CheckExact(spec) || PyTuple_GET_SIZE(spec) != 3 ||
            (kind = PyLong_AsLong(PyTuple_GET_ITEM(spec, 0))) < TIME || kind > SPARSE ||
            (incomplete = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 2))) < 0) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "thread_values: a bad alias");
            goto fail;
        }
        samples = PyTuple_GET_ITEM(spec, 1);
        PyObject *values = PyByteArray_FromStringAndSize(NULL, nodes * 8);
        if (values == NULL) goto fail;
        double *out = (double *)PyByteArray_AS_STRING(values), total, recorded;
        if (kind == TIME) {
            for (Py_ssize_t k = 0; k < nodes; k++)
                out[k] = on_cpu_at(&c, ends[k]) - on_cpu_at(&c, starts[k]);
            recorded = total = c.before[c.n];
        } else {
            Py_ssize_t n = 0;
            const double *source = c.switched_out;
            if (kind == SPARSE) {
                if (!PyList_CheckExact(samples)) { /* records.py's list only */
                    Py_DECREF(values);
                    Py_SETREF(result, Py_NewRef(Py_NotImplemented));
                    goto done;
                }
                n = PyList_GET_SIZE(samples);
            } else {
                n = c.outs;
            }
            PyMem_Free(times);
            times = PyMem_Malloc(sizeof *times * (size_t)(n + 1));
            if (times == NULL) {
                Py_DECREF(values);
                PyErr_NoMemory();
                goto fail;
            }
            for (Py_ssize_t i = 0; i < n; i++) {
                if (kind == SPARSE) {
                    int64_t moment;
                    int r = time_arg(PyList_GET_ITEM(samples, i), &moment);
                    if (r != 0 || !fits(moment, origin)) {
                        Py_DECREF(values);
                        if (r >= 0) {
                            Py_SETREF(result, Py_NewRef(Py_NotImplemented));
                            goto done;
                        }
                        goto fail;
                    }
                    times[i] = (double)(moment - origin);
                } else {
                    times[i] = source[i];
                }
            }
            recorded = total = (double)counts_in(times, n, low, high, starts, ends, nodes, out);
        }
        if (incomplete) { /* its records are not all there: unknown */
            for (Py_ssize_t k = 0; k < nodes; k++) out[k] = Py_NAN;
            total = Py_NAN;
        }
        double outer = 0.0; /* whole numbers: any order sums them exactly, as numpy's does */
        for (Py_ssize_t k = 0; k < nodes; k++)
            if (outermost[k]) outer += out[k];
        PyObject *item = Py_BuildValue("(Ndd)", values, total, recorded - outer);
        if (item == NULL) goto fail;
        PyList_SET_ITEM(result, a, item);
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    on_cpu_free(&c);
    PyMem_Free(table);
    PyMem_Free(times);
    release_buffers(views, 3);
    return result;
}

static PyMethodDef methods[] = {
    {"recent_records", (PyCFunction)(void (*)(void))recent_records, METH_FASTCALL,
     "recent_records(data, since, until): (switches, events, reached), or NotImplemented."},
    {"trimmed_records", (PyCFunction)(void (*)(void))trimmed_records, METH_FASTCALL,
     "trimmed_records(data, since, until): (kept bytes, reached), or NotImplemented."},
    {"reaches_back", (PyCFunction)(void (*)(void))reaches_back, METH_FASTCALL,
     "reaches_back(data, since, switches): bool, or NotImplemented."},
    {"thread_values", (PyCFunction)(void (*)(void))thread_values, METH_FASTCALL,
     "thread_values(switches, begin, end, running, origin, starts, ends, outermost, aliases): "
     "per alias, (float64 values per node, total, between), or NotImplemented."},
    {"node_dicts", (PyCFunction)(void (*)(void))node_dicts, METH_FASTCALL,
     "node_dicts(value_keys, split_keys, ids_key, tids, ints, on_cpu, uncounted): per node, "
     "its perf attributes (None where uncounted)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otel_ort.perf._node_counts",
    "A counted run's records to node counts, the usual case in C (see records.py, "
    "attribution.py, report.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__node_counts(void) { return PyModule_Create(&module); }
