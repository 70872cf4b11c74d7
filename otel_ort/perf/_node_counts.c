/* A counted run's records on their way to node counts, in C: the usual case of
 * otel_ort/perf/records.py's flight-ring reading (parse_recent, trim_recent, reaches) and of
 * otel_ort/perf/report.py's node attributes from columns (_from_columns), giving what the
 * Python code gives. They are the reference: a ring with any record other than a switch or
 * a sparse sample is NotImplemented here, and read there.
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

static Record record_at(const char *data, Py_ssize_t index) {
    Record r;
    memcpy(&r, data + index * RECORD, sizeof r); /* (x86_64 and aarch64: little-endian) */
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

static int parse_window(PyObject *const *args, Py_ssize_t nargs, Py_buffer *view,
                        int64_t *since, int64_t *until) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "(data, since, until)");
        return -1;
    }
    *since = PyLong_AsLongLong(args[1]);
    if (*since == -1 && PyErr_Occurred()) return -1;
    *until = PyLong_AsLongLong(args[2]);
    if (*until == -1 && PyErr_Occurred()) return -1;
    return PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE);
}

/* recent_records(data, since, until) -> (switches, events, reached) | NotImplemented:
 * parse_recent's usual case. switches: (time, switched out) in ring order; events: sample
 * times by event id (ids ascending, times in ring order). */
static PyObject *recent_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    Py_buffer view;
    int64_t since, until;
    if (parse_window(args, nargs, &view, &since, &until) < 0) return NULL;
    const char *data = view.buf;
    Py_ssize_t count = view.len / RECORD;
    PyObject *result = NULL, *switches = NULL, *events = NULL, *ids = NULL;
    char *keep = NULL;
    if (!plain(data, count)) {
        result = Py_NewRef(Py_NotImplemented);
        goto done;
    }
    keep = PyMem_Malloc(count > 0 ? (size_t)count : 1);
    if (keep == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int reached;
    select_window(data, count, since, until, keep, &reached);
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
    int64_t since, until;
    if (parse_window(args, nargs, &view, &since, &until) < 0) return NULL;
    const char *data = view.buf;
    Py_ssize_t count = view.len / RECORD, kept = 0;
    PyObject *result = NULL, *bytes = NULL;
    char *keep = NULL;
    if (!plain(data, count)) {
        result = Py_NewRef(Py_NotImplemented);
        goto done;
    }
    keep = PyMem_Malloc(count > 0 ? (size_t)count : 1);
    if (keep == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int reached;
    select_window(data, count, since, until, keep, &reached);
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
    int64_t since = PyLong_AsLongLong(args[1]);
    if (since == -1 && PyErr_Occurred()) return NULL;
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
    Py_buffer ints, on_cpu, uncounted;
    if (PyObject_GetBuffer(args[4], &ints, PyBUF_C_CONTIGUOUS) < 0) return NULL;
    if (PyObject_GetBuffer(args[5], &on_cpu, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&ints);
        return NULL;
    }
    if (PyObject_GetBuffer(args[6], &uncounted, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&ints);
        PyBuffer_Release(&on_cpu);
        return NULL;
    }
    PyObject *out = NULL;
    Py_ssize_t nodes = uncounted.len, rows = width * (1 + threads);
    if (ints.itemsize != 8 || ints.len != rows * nodes * 8 || on_cpu.len != threads * nodes) {
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
    PyBuffer_Release(&ints);
    PyBuffer_Release(&on_cpu);
    PyBuffer_Release(&uncounted);
    return out;
}

static PyMethodDef methods[] = {
    {"recent_records", (PyCFunction)(void (*)(void))recent_records, METH_FASTCALL,
     "recent_records(data, since, until): (switches, events, reached), or NotImplemented."},
    {"trimmed_records", (PyCFunction)(void (*)(void))trimmed_records, METH_FASTCALL,
     "trimmed_records(data, since, until): (kept bytes, reached), or NotImplemented."},
    {"reaches_back", (PyCFunction)(void (*)(void))reaches_back, METH_FASTCALL,
     "reaches_back(data, since, switches): bool, or NotImplemented."},
    {"node_dicts", (PyCFunction)(void (*)(void))node_dicts, METH_FASTCALL,
     "node_dicts(value_keys, split_keys, ids_key, tids, ints, on_cpu, uncounted): per node, "
     "its perf attributes (None where uncounted)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otel_ort.perf._node_counts",
    "A counted run's records to node counts, the usual case in C (see records.py, report.py).",
    -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__node_counts(void) { return PyModule_Create(&module); }
