/* Span drafts already measured (their ``encoded`` parts set) framed as ScopeSpans.spans
 * entries in C: what otlp_encoding.ProtobufSpans.span writes for each, byte for byte.
 *
 * The ids, the trace state and the times go around the two encoded parts. A draft whose
 * parts are not made yet, or with a value this code does not take (an id or a time that is
 * not an int of its width), is written by the Python ``span`` given as ``fallback``.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

static PyObject *s_encoded, *s_trace_id, *s_span_id, *s_parent_id, *s_start, *s_end,
    *s_trace_state;

static void big_endian(unsigned char *out, uint64_t value, int bytes) {
    for (int i = bytes - 1; i >= 0; i--) {
        out[i] = (unsigned char)(value & 0xFF);
        value >>= 8;
    }
}

static void little_endian(unsigned char *out, uint64_t value) {
    for (int i = 0; i < 8; i++) {
        out[i] = (unsigned char)(value & 0xFF);
        value >>= 8;
    }
}

static int varint(unsigned char *out, uint64_t value) {
    int n = 0;
    while (value >= 0x80) {
        out[n++] = (unsigned char)((value & 0x7F) | 0x80);
        value >>= 7;
    }
    out[n++] = (unsigned char)value;
    return n;
}

/* An int in [0, 2**64): 0 and sets *out, else 1 (the Python path's) or -1 (an error). */
static int unsigned64(PyObject *value, uint64_t *out) {
    if (!PyLong_CheckExact(value)) return 1;
    *out = PyLong_AsUnsignedLongLong(value);
    if (*out == (uint64_t)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return -1;
        PyErr_Clear();
        return 1;
    }
    return 0;
}

/* The draft's entry, or Py_None when it is the Python path's; NULL on an error. */
static PyObject *frame(PyObject *draft, PyObject **trace_key, PyObject **trace_bytes) {
    PyObject *attrs[7] = {NULL};
    PyObject *names[7] = {s_encoded, s_trace_id, s_span_id, s_parent_id, s_start, s_end,
                          s_trace_state};
    PyObject *result = NULL;
    for (int i = 0; i < 7; i++) {
        attrs[i] = PyObject_GetAttr(draft, names[i]);
        if (attrs[i] == NULL) goto done;
    }
    PyObject *encoded = attrs[0], *trace_id = attrs[1];
    if (!PyTuple_CheckExact(encoded) || PyTuple_GET_SIZE(encoded) != 2 ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(encoded, 0)) ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(encoded, 1)) || !PyLong_CheckExact(trace_id)) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    int has_state = PyObject_IsTrue(attrs[6]);
    if (has_state < 0) goto done;
    uint64_t span_id, parent_id, start, end;
    int r = unsigned64(attrs[2], &span_id);
    if (r == 0) r = unsigned64(attrs[3], &parent_id);
    if (r == 0) r = unsigned64(attrs[4], &start);
    if (r == 0) r = unsigned64(attrs[5], &end);
    if (r < 0) goto done;
    if (r > 0 || has_state) {
        result = Py_None;
        Py_INCREF(result);
        goto done;
    }
    if (*trace_key == NULL || (*trace_key != trace_id &&
                               PyObject_RichCompareBool(*trace_key, trace_id, Py_EQ) != 1)) {
        if (PyErr_Occurred()) goto done;
        PyObject *bytes = PyObject_CallMethod(trace_id, "to_bytes", "is", 16, "big");
        if (bytes == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) goto done;
            PyErr_Clear();
            result = Py_None;
            Py_INCREF(result);
            goto done;
        }
        Py_INCREF(trace_id);
        Py_XSETREF(*trace_key, trace_id);
        Py_XSETREF(*trace_bytes, bytes);
    }
    PyObject *head = PyTuple_GET_ITEM(encoded, 0), *tail = PyTuple_GET_ITEM(encoded, 1);
    unsigned char ids[64];
    int n = 0;
    ids[n++] = 0x0A;
    ids[n++] = 0x10;
    memcpy(ids + n, PyBytes_AS_STRING(*trace_bytes), 16);
    n += 16;
    ids[n++] = 0x12;
    ids[n++] = 0x08;
    big_endian(ids + n, span_id, 8);
    n += 8;
    if (parent_id) {
        ids[n++] = 0x22;
        ids[n++] = 0x08;
        big_endian(ids + n, parent_id, 8);
        n += 8;
    }
    unsigned char times[18];
    int t = 0;
    if (start) {
        times[t++] = 0x39;
        little_endian(times + t, start);
        t += 8;
    }
    if (end) {
        times[t++] = 0x41;
        little_endian(times + t, end);
        t += 8;
    }
    Py_ssize_t size = n + PyBytes_GET_SIZE(head) + t + PyBytes_GET_SIZE(tail);
    unsigned char prefix[11];
    prefix[0] = 0x12;
    int p = 1 + varint(prefix + 1, (uint64_t)size);
    result = PyBytes_FromStringAndSize(NULL, p + size);
    if (result == NULL) goto done;
    char *out = PyBytes_AS_STRING(result);
    memcpy(out, prefix, (size_t)p);
    out += p;
    memcpy(out, ids, (size_t)n);
    out += n;
    memcpy(out, PyBytes_AS_STRING(head), (size_t)PyBytes_GET_SIZE(head));
    out += PyBytes_GET_SIZE(head);
    memcpy(out, times, (size_t)t);
    out += t;
    memcpy(out, PyBytes_AS_STRING(tail), (size_t)PyBytes_GET_SIZE(tail));
done:
    for (int i = 0; i < 7; i++) Py_XDECREF(attrs[i]);
    return result;
}

static PyObject *entries(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyCallable_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "entries(drafts: list, fallback)");
        return NULL;
    }
    PyObject *drafts = args[0], *fallback = args[1];
    Py_ssize_t count = PyList_GET_SIZE(drafts);
    PyObject *out = PyList_New(count);
    PyObject *trace_key = NULL, *trace_bytes = NULL;
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (i >= PyList_GET_SIZE(drafts)) { /* the list changed under a fallback */
            PyErr_SetString(PyExc_RuntimeError, "the drafts changed while being framed");
            Py_DECREF(out);
            out = NULL;
            break;
        }
        PyObject *draft = PyList_GET_ITEM(drafts, i);
        Py_INCREF(draft); /* held: the fallback runs Python code */
        PyObject *entry = frame(draft, &trace_key, &trace_bytes);
        if (entry == Py_None) {
            Py_DECREF(entry);
            entry = PyObject_CallOneArg(fallback, draft);
        }
        Py_DECREF(draft);
        if (entry == NULL) {
            Py_DECREF(out);
            out = NULL;
            break;
        }
        PyList_SET_ITEM(out, i, entry);
    }
    Py_XDECREF(trace_key);
    Py_XDECREF(trace_bytes);
    return out;
}

static PyMethodDef methods[] = {
    {"entries", (PyCFunction)(void (*)(void))entries, METH_FASTCALL,
     "entries(drafts, fallback): each draft's ScopeSpans.spans entry (fallback(draft) for "
     "one this code does not take)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otel_ort.export._span_frame",
    "Measured span drafts framed as OTLP protobuf in C (see otlp_encoding.py).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__span_frame(void) {
    s_encoded = PyUnicode_InternFromString("encoded");
    s_trace_id = PyUnicode_InternFromString("trace_id");
    s_span_id = PyUnicode_InternFromString("span_id");
    s_parent_id = PyUnicode_InternFromString("parent_id");
    s_start = PyUnicode_InternFromString("start");
    s_end = PyUnicode_InternFromString("end");
    s_trace_state = PyUnicode_InternFromString("trace_state");
    if (!s_encoded || !s_trace_id || !s_span_id || !s_parent_id || !s_start || !s_end ||
        !s_trace_state)
        return NULL;
    return PyModule_Create(&module);
}
