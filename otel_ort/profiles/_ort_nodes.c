/* The Node events of a file read by type made into NodeRecords in C: what reader.py's
 * _Parsed.add_ort does with each, for the events it keeps as nodes.
 *
 * ORT writes one complete ("X") Node event named "<node>_kernel_time" per node run: most of
 * a file. Each becomes a NodeRecord holding the event's args as RawArgs, its op type and
 * provider found in the args' text and read through the reader's cache of texts. Any other
 * event, a time that is not a valid one, args in another form (not an object, a name twice,
 * an escaped name), an op type or provider not cached yet go to the reader's Python.
 *
 * The records are made without calling the classes' __init__ (which runs Python code): each
 * is allocated and its fields set by name, as __init__ sets them (NodeRecord's ``kernels`` a
 * new empty list; RawArgs' ``text`` the args' text, ``_raw`` and ``_parsed`` None).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#include "_json_text.h"

#define SUFFIX "_kernel_time"
#define MAX_TIME_US 1e15 /* reader._MAX_TIME_US */

static PyObject *s_ph, *s_ts, *s_dur, *s_cat, *s_name, *s_args, *s_tid, *s_op_type,
    *s_provider, *s_kernels, *s_raw, *s_parsed, *s_unknown, *s_x, *s_node, *s_text;

/* reader._time: an int or float, not negative and below 31 years of µs. */
static int valid_time(PyObject *value) {
    if (PyFloat_CheckExact(value)) {
        double v = PyFloat_AS_DOUBLE(value);
        return v >= 0 && v < MAX_TIME_US;
    }
    if (PyLong_CheckExact(value)) {
        int overflow;
        long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (v == -1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return !overflow && v >= 0 && v < (long long)MAX_TIME_US;
    }
    return 0;
}

/* The raw text of the args' "op_name" and "provider" values (start NULL: absent); UNKNOWN
 * for args that are not a plain object or that name either twice. */
static int find_texts(const char *text, Py_ssize_t size, Text *op_name, Text *provider) {
    Text t = {text, text + size};
    int first = 1, m;
    const char *key;
    Py_ssize_t key_size;
    op_name->at = provider->at = NULL;
    if (expect(&t, '{') != PARSED) return UNKNOWN;
    while ((m = next_member(&t, &first, &key, &key_size)) == 1) {
        skip_space(&t);
        const char *value = t.at;
        if (skip_value(&t) != PARSED) return UNKNOWN;
        Text *found = key_is(key, key_size, "op_name")    ? op_name
                      : key_is(key, key_size, "provider") ? provider
                                                          : NULL;
        if (found != NULL) {
            if (found->at != NULL) return UNKNOWN; /* named twice */
            found->at = value;
            found->end = t.at;
        }
    }
    if (m != 0) return UNKNOWN;
    skip_space(&t);
    return t.at == t.end ? PARSED : UNKNOWN;
}

/* reader._Parsed._text's cached answer for a value's text (a new reference), NULL with no
 * error when it is not cached (Python's turn). */
static PyObject *cached_text(Text *value, PyObject *texts) {
    if (value->at == NULL) {
        Py_INCREF(s_unknown);
        return s_unknown;
    }
    PyObject *text = PyBytes_FromStringAndSize(value->at, value->end - value->at);
    if (text == NULL) return NULL;
    PyObject *known = PyDict_GetItemWithError(texts, text);
    Py_DECREF(text);
    Py_XINCREF(known);
    return known;
}

static PyObject *new_instance(PyObject *type) {
    PyTypeObject *t = (PyTypeObject *)type;
    return t->tp_alloc(t, 0);
}

static int set_fields(PyObject *obj, PyObject **names, PyObject **values, int count) {
    for (int i = 0; i < count; i++)
        if (PyObject_SetAttr(obj, names[i], values[i]) < 0) return -1;
    return 0;
}

/* The event's record, Py_None when it is Python's, NULL on an error. */
static PyObject *node_record(PyObject *event, PyObject *texts, PyObject *node_type,
                             PyObject *args_type, PyObject *suffix) {
    PyObject *f[7] = {NULL}; /* ph, ts, dur, cat, name, args, tid */
    PyObject *names[7] = {s_ph, s_ts, s_dur, s_cat, s_name, s_args, s_tid};
    PyObject *result = NULL, *op_type = NULL, *provider = NULL, *short_name = NULL,
             *args = NULL, *kernels = NULL, *record = NULL;
    for (int i = 0; i < 7; i++) {
        f[i] = PyObject_GetAttr(event, names[i]);
        if (f[i] == NULL) goto done;
    }
    PyObject *ph = f[0], *ts = f[1], *dur = f[2], *cat = f[3], *name = f[4], *raw = f[5];
    if (!PyUnicode_CheckExact(ph) || !PyUnicode_CheckExact(cat) || !PyUnicode_CheckExact(name))
        goto python;
    int is_x = PyUnicode_Compare(ph, s_x), is_node = PyUnicode_Compare(cat, s_node);
    if (PyErr_Occurred()) goto done;
    if (is_x != 0 || is_node != 0 || !valid_time(ts) || !valid_time(dur)) goto python;
    Py_ssize_t ends = PyUnicode_Tailmatch(name, suffix, 0, PY_SSIZE_T_MAX, 1);
    if (ends < 0) goto done;
    if (!ends) goto python;
    Py_buffer view;
    if (PyObject_GetBuffer(raw, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        goto python;
    }
    Text op_text, provider_text;
    int found = find_texts(view.buf, view.len, &op_text, &provider_text);
    if (found == PARSED) op_type = cached_text(&op_text, texts);
    if (op_type != NULL) provider = cached_text(&provider_text, texts);
    PyBuffer_Release(&view);
    if (op_type == NULL || provider == NULL) goto python;
    short_name = PyUnicode_Substring(name, 0, PyUnicode_GET_LENGTH(name) - PyUnicode_GET_LENGTH(suffix));
    args = new_instance(args_type);
    kernels = PyList_New(0);
    record = new_instance(node_type);
    if (short_name == NULL || args == NULL || kernels == NULL || record == NULL) goto done;
    PyObject *arg_names[3] = {s_text, s_raw, s_parsed}, *arg_values[3] = {raw, Py_None, Py_None};
    if (set_fields(args, arg_names, arg_values, 3) < 0) goto done;
    PyObject *record_names[8] = {s_ts, s_dur, s_name, s_op_type, s_provider, s_tid, s_args,
                                 s_kernels};
    PyObject *record_values[8] = {ts, dur, short_name, op_type, provider, f[6], args, kernels};
    if (set_fields(record, record_names, record_values, 8) < 0) goto done;
    result = record;
    record = NULL;
    goto done;
python:
    if (PyErr_Occurred()) goto done;
    result = Py_None;
    Py_INCREF(result);
done:
    for (int i = 0; i < 7; i++) Py_XDECREF(f[i]);
    Py_XDECREF(op_type);
    Py_XDECREF(provider);
    Py_XDECREF(short_name);
    Py_XDECREF(args);
    Py_XDECREF(kernels);
    Py_XDECREF(record);
    return result;
}

static PyObject *node_records(PyObject *module, PyObject *const *argv, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 6 || !PyList_CheckExact(argv[0]) || !PyList_CheckExact(argv[1]) ||
        !PyDict_CheckExact(argv[2]) || !PyType_Check(argv[4]) || !PyType_Check(argv[5])) {
        PyErr_SetString(PyExc_TypeError, "node_records(events: list, nodes: list, texts: dict, "
                                         "other, node_type, args_type)");
        return NULL;
    }
    PyObject *events = argv[0], *nodes = argv[1], *texts = argv[2], *other = argv[3];
    PyObject *suffix = PyUnicode_FromString(SUFFIX);
    if (suffix == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(events); i++) {
        PyObject *event = PyList_GET_ITEM(events, i);
        Py_INCREF(event); /* held: other(event) runs Python code */
        PyObject *record = node_record(event, texts, argv[4], argv[5], suffix);
        if (record == Py_None) { /* other(event) adds it, to nodes too if it is one */
            Py_DECREF(record);
            record = PyObject_CallOneArg(other, event);
            Py_DECREF(event);
            Py_XDECREF(record);
            if (record == NULL) goto error;
            continue;
        }
        Py_DECREF(event);
        if (record == NULL) goto error;
        int added = PyList_Append(nodes, record);
        Py_DECREF(record);
        if (added < 0) goto error;
    }
    Py_DECREF(suffix);
    Py_RETURN_NONE;
error:
    Py_DECREF(suffix);
    return NULL;
}

static PyMethodDef methods[] = {
    {"node_records", (PyCFunction)(void (*)(void))node_records, METH_FASTCALL,
     "node_records(events, nodes, texts, other, node_type, args_type): appends to nodes the "
     "NodeRecord of each event ORT writes per node run; other(event) for any other event."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otel_ort.profiles._ort_nodes",
    "A typed read's Node events made into records in C (see reader.py).", -1, methods, NULL,
    NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ort_nodes(void) {
    struct {
        PyObject **slot;
        const char *text;
    } strings[] = {
        {&s_ph, "ph"}, {&s_ts, "ts"}, {&s_dur, "dur"}, {&s_cat, "cat"}, {&s_name, "name"},
        {&s_args, "args"}, {&s_tid, "tid"}, {&s_op_type, "op_type"},
        {&s_provider, "provider"}, {&s_kernels, "kernels"}, {&s_raw, "_raw"},
        {&s_parsed, "_parsed"}, {&s_unknown, "unknown"}, {&s_x, "X"}, {&s_node, "Node"},
        {&s_text, "text"},
    };
    for (size_t i = 0; i < sizeof strings / sizeof strings[0]; i++) {
        *strings[i].slot = PyUnicode_InternFromString(strings[i].text);
        if (*strings[i].slot == NULL) return NULL;
    }
    return PyModule_Create(&module);
}
