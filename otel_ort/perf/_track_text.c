/* perf counter tracks written as Chrome-trace JSON text in C: what orjson writes for each
 * event otel_ort/perf/tracks.py's counter_events makes, joined by commas.
 *
 * A node's count at its start and 0 at its stop, per alias, in node order. Each event is
 * its alias's two pieces of fixed text around the time and the value. Anything but an int
 * (within int64) or a float (finite) as a time, or an int within int64 or None as a value,
 * is NotImplemented: tracks.py then makes the events in Python.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
} Text;

static int text_add(Text *t, const char *bytes, Py_ssize_t size) {
    if (t->size + size > t->capacity) {
        Py_ssize_t capacity = t->capacity ? t->capacity : 4096;
        while (capacity < t->size + size) capacity *= 2;
        char *data = PyMem_Realloc(t->data, (size_t)capacity);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        t->data = data;
        t->capacity = capacity;
    }
    memcpy(t->data + t->size, bytes, (size_t)size);
    t->size += size;
    return 0;
}

enum { OK = 0, PYTHON = 1, ERROR = -1 };

/* An exact int within int64, or a finite float as repr() writes it (orjson's text for a
 * float is the shortest that reads back the same: repr()'s digits). */
static int number_text(PyObject *value, char *out, Py_ssize_t *size, int floats) {
    if (PyLong_CheckExact(value)) {
        int overflow;
        long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
        if (overflow) return PYTHON;
        if (number == -1 && PyErr_Occurred()) return ERROR;
        *size = snprintf(out, 32, "%lld", number);
        return OK;
    }
    if (floats && PyFloat_CheckExact(value)) {
        double number = PyFloat_AS_DOUBLE(value);
        if (!isfinite(number)) return PYTHON;
        char *text = PyOS_double_to_string(number, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
        if (text == NULL) return ERROR;
        size_t n = strlen(text);
        int r = PYTHON;
        if (n < 40 && !strchr(text, 'e')) { /* orjson writes exponents its own way */
            memcpy(out, text, n);
            *size = (Py_ssize_t)n;
            r = OK;
        }
        PyMem_Free(text);
        return r;
    }
    return PYTHON;
}

static int add_event(Text *t, PyObject *prefix, const char *ts, Py_ssize_t ts_size,
                     PyObject *middle, const char *value, Py_ssize_t value_size) {
    if (t->size && text_add(t, ",", 1) < 0) return ERROR;
    if (text_add(t, PyBytes_AS_STRING(prefix), PyBytes_GET_SIZE(prefix)) < 0) return ERROR;
    if (text_add(t, ts, ts_size) < 0) return ERROR;
    if (text_add(t, PyBytes_AS_STRING(middle), PyBytes_GET_SIZE(middle)) < 0) return ERROR;
    if (text_add(t, value, value_size) < 0) return ERROR;
    return text_add(t, "}}", 2) < 0 ? ERROR : OK;
}

static int events(PyObject *templates, PyObject *starts, PyObject *stops, PyObject *rows,
                  Text *t) {
    Py_ssize_t aliases = PyList_GET_SIZE(templates), nodes = PyList_GET_SIZE(starts);
    if (PyList_GET_SIZE(stops) != nodes || PyList_GET_SIZE(rows) != aliases) return PYTHON;
    for (Py_ssize_t a = 0; a < aliases; a++) {
        PyObject *row = PyList_GET_ITEM(rows, a), *template = PyList_GET_ITEM(templates, a);
        if (!PyList_CheckExact(row) || PyList_GET_SIZE(row) != nodes) return PYTHON;
        if (!PyTuple_CheckExact(template) || PyTuple_GET_SIZE(template) != 2 ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(template, 0)) ||
            !PyBytes_CheckExact(PyTuple_GET_ITEM(template, 1)))
            return PYTHON;
    }
    for (Py_ssize_t i = 0; i < nodes; i++) {
        char start[40], stop[40];
        Py_ssize_t start_size, stop_size;
        int r = number_text(PyList_GET_ITEM(starts, i), start, &start_size, 1);
        if (r != OK) return r;
        r = number_text(PyList_GET_ITEM(stops, i), stop, &stop_size, 1);
        if (r != OK) return r;
        for (Py_ssize_t a = 0; a < aliases; a++) {
            PyObject *value = PyList_GET_ITEM(PyList_GET_ITEM(rows, a), i);
            if (value == Py_None) continue; /* not counted during this node */
            char count[40];
            Py_ssize_t count_size;
            r = number_text(value, count, &count_size, 0);
            if (r != OK) return r;
            PyObject *template = PyList_GET_ITEM(templates, a);
            PyObject *prefix = PyTuple_GET_ITEM(template, 0), *middle = PyTuple_GET_ITEM(template, 1);
            if (add_event(t, prefix, start, start_size, middle, count, count_size) < 0) return ERROR;
            if (add_event(t, prefix, stop, stop_size, middle, "0", 1) < 0) return ERROR;
        }
    }
    return OK;
}

static PyObject *counter_text(PyObject *module, PyObject *const *args, Py_ssize_t nargs) {
    (void)module;
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) ||
        !PyList_CheckExact(args[2]) || !PyList_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "counter_text(templates, starts, stops, rows): lists");
        return NULL;
    }
    Text t = {NULL, 0, 0};
    int r = events(args[0], args[1], args[2], args[3], &t);
    PyObject *result = NULL;
    if (r == OK) {
        result = PyBytes_FromStringAndSize(t.data ? t.data : "", t.size);
    } else if (r == PYTHON) {
        result = Py_NotImplemented;
        Py_INCREF(result);
    }
    PyMem_Free(t.data);
    return result;
}

static PyMethodDef methods[] = {
    {"counter_text", (PyCFunction)(void (*)(void))counter_text, METH_FASTCALL,
     "counter_text(templates, starts, stops, rows): the counter events' JSON joined by commas "
     "(templates: per alias, the text before the time and between the time and the value; "
     "rows: per alias, each node's count or None), or NotImplemented."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otel_ort.perf._track_text",
    "perf counter tracks as JSON text in C (see tracks.py).", -1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__track_text(void) { return PyModule_Create(&module); }
