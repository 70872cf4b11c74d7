/* A node span's encoded attributes in C: NodeEncoder.parts's usual case, byte for byte.
 *
 * otel_ort/profiles/node_encoding.py is the reference. This module handles a node only when
 * everything it meets is a case it knows and every cached piece it needs is in the Python
 * encoder's caches (which it reads, never writes); otherwise it answers NotImplemented and
 * the Python encoder does the whole node (filling its caches). So its output is the Python
 * encoder's output, and the node spans of a model's later runs, whose names, op types and
 * args repeat, are encoded here. A node's thread statistics, which change from run to run,
 * are parsed here; any form other than ORT's plain one goes back to Python.
 *
 * The GIL is held throughout: the work is reading Python objects and a few hundred bytes.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_json_text.h"

#define ATTRIBUTE_TAG 0x4A /* Span.attributes */
#define SMALL_BUFFER 512

/* -- an output buffer --------------------------------------------------------------- */

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
    char small[SMALL_BUFFER];
} Buffer;

static void buffer_init(Buffer *b) {
    b->data = b->small;
    b->size = 0;
    b->capacity = SMALL_BUFFER;
}

static void buffer_free(Buffer *b) {
    if (b->data != b->small) PyMem_Free(b->data);
}

static int buffer_reserve(Buffer *b, Py_ssize_t more) {
    if (b->size + more <= b->capacity) return 0;
    Py_ssize_t capacity = b->capacity;
    while (capacity < b->size + more) capacity *= 2;
    char *data = PyMem_Malloc((size_t)capacity);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(data, b->data, (size_t)b->size);
    if (b->data != b->small) PyMem_Free(b->data);
    b->data = data;
    b->capacity = capacity;
    return 0;
}

static int buffer_add(Buffer *b, const char *bytes, Py_ssize_t size) {
    if (buffer_reserve(b, size) < 0) return -1;
    memcpy(b->data + b->size, bytes, (size_t)size);
    b->size += size;
    return 0;
}

static int buffer_add_bytes(Buffer *b, PyObject *bytes) {
    return buffer_add(b, PyBytes_AS_STRING(bytes), PyBytes_GET_SIZE(bytes));
}

static int varint(char *out, uint64_t value) {
    int n = 0;
    while (value >= 0x80) {
        out[n++] = (char)((value & 0x7F) | 0x80);
        value >>= 7;
    }
    out[n++] = (char)value;
    return n;
}

/* field(tag, payload)'s header: the tag, then the length (one byte below 0x80). */
static int header(char *out, int tag, Py_ssize_t size) {
    out[0] = (char)tag;
    return 1 + varint(out + 1, (uint64_t)size);
}

/* attribute_entry(key_field, value): field(0x4A, key_field + field(0x12, value)). */
static int add_entry(Buffer *b, PyObject *key_field, const char *value, Py_ssize_t size) {
    char head[24];
    Py_ssize_t key_size = PyBytes_GET_SIZE(key_field);
    int inner = header(head + 12, 0x12, size);
    int outer = header(head, ATTRIBUTE_TAG, key_size + inner + size);
    if (buffer_reserve(b, outer + key_size + inner + size) < 0) return -1;
    buffer_add(b, head, outer);
    buffer_add(b, PyBytes_AS_STRING(key_field), key_size);
    buffer_add(b, head + 12, inner);
    buffer_add(b, value, size);
    return 0;
}

/* An int64 attribute: AnyValue.int_value (0x18), the varint of its two's complement. */
static int add_int(Buffer *b, PyObject *key_field, int64_t number) {
    char value[11];
    value[0] = 0x18;
    int n = varint(value + 1, (uint64_t)number);
    return add_entry(b, key_field, value, 1 + n);
}

/* A double attribute: AnyValue.double_value (0x21), little-endian. */
static int add_double(Buffer *b, PyObject *key_field, double number) {
    char value[9];
    uint64_t bits;
    memcpy(&bits, &number, sizeof bits);
    value[0] = 0x21;
    for (int i = 0; i < 8; i++) value[1 + i] = (char)(bits >> (8 * i));
    return add_entry(b, key_field, value, 9);
}

/* An array of int64 values: AnyValue.array_value (0x2A), each value a field 0x0A. */
static int add_int_array(Buffer *b, PyObject *key_field, const int64_t *numbers, Py_ssize_t n) {
    Buffer items;
    buffer_init(&items);
    int result = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        char item[13];
        item[0] = 0x0A;
        item[2] = 0x18;
        int size = varint(item + 3, (uint64_t)numbers[i]);
        item[1] = (char)(1 + size);
        if (buffer_add(&items, item, 3 + size) < 0) goto done;
    }
    char head[12];
    int h = header(head, 0x2A, items.size);
    if (buffer_reserve(&items, h) < 0) goto done;
    memmove(items.data + h, items.data, (size_t)items.size);
    memcpy(items.data, head, (size_t)h);
    items.size += h;
    result = add_entry(b, key_field, items.data, items.size);
done:
    buffer_free(&items);
    return result;
}

/* -- a node's thread statistics (ORT's plain JSON) ------------------------------------ */

/* What the summary reads; a field absent or null is not "has". */
typedef struct {
    const char *pool;
    Py_ssize_t pool_size;
    int has_main, has_run, has_wait, has_subs;
    int64_t run, wait;
    __int128 tasks;
    int64_t used;
} Stats;

static int main_thread(Text *t, Stats *s) {
    int is_null, first = 1, r, seen_pool = 0, seen_run = 0, seen_wait = 0;
    if (object_or_null(t, &is_null) != PARSED) return UNKNOWN;
    if (is_null) return PARSED;
    s->has_main = 1;
    const char *key;
    Py_ssize_t size;
    while ((r = next_member(t, &first, &key, &size)) == 1) {
        if (key_is(key, size, "thread_pool_name")) {
            if (seen_pool++) return UNKNOWN; /* a repeated key: which one counts is msgspec's */
            skip_space(t);
            if (t->at < t->end && *t->at == 'n') {
                if (skip_value(t) != PARSED) return UNKNOWN;
                continue;
            }
            if (plain_string(t, &s->pool, &s->pool_size) != PARSED) return UNKNOWN;
        } else if (key_is(key, size, "Run")) {
            if (seen_run++ || int_field(t, &s->has_run, &s->run) != PARSED) return UNKNOWN;
        } else if (key_is(key, size, "Wait")) {
            if (seen_wait++ || int_field(t, &s->has_wait, &s->wait) != PARSED) return UNKNOWN;
        } else if (skip_value(t) != PARSED) {
            return UNKNOWN;
        }
    }
    return r == 0 ? PARSED : UNKNOWN;
}

#define MAX_SUB_THREADS 256

static int sub_threads(Text *t, Stats *s) {
    int is_null, first = 1, r;
    const char *keys[MAX_SUB_THREADS];
    Py_ssize_t sizes[MAX_SUB_THREADS];
    int n = 0;
    if (object_or_null(t, &is_null) != PARSED) return UNKNOWN;
    if (is_null) return PARSED;
    s->has_subs = 1;
    const char *key;
    Py_ssize_t size;
    while ((r = next_member(t, &first, &key, &size)) == 1) {
        if (n == MAX_SUB_THREADS) return UNKNOWN;
        for (int i = 0; i < n; i++) /* a repeated thread: the dict keeps the last one */
            if (sizes[i] == size && memcmp(keys[i], key, (size_t)size) == 0) return UNKNOWN;
        keys[n] = key;
        sizes[n++] = size;
        if (expect(t, '{') != PARSED) return UNKNOWN; /* SubThreadStats: an object only */
        int inner_first = 1, q, seen = 0, has = 0;
        int64_t runs = 0;
        const char *name;
        Py_ssize_t name_size;
        while ((q = next_member(t, &inner_first, &name, &name_size)) == 1) {
            if (key_is(name, name_size, "num_run")) {
                if (seen++ || int_field(t, &has, &runs) != PARSED) return UNKNOWN;
            } else if (skip_value(t) != PARSED) {
                return UNKNOWN;
            }
        }
        if (q != 0) return UNKNOWN;
        if (has) { /* int_value(num_run) or 0 */
            s->tasks += runs;
            s->used += runs > 0;
        }
    }
    return r == 0 ? PARSED : UNKNOWN;
}

static int parse_stats(const char *text, Py_ssize_t size, Stats *s) {
    Text t = {text, text + size};
    int first = 1, r, seen_main = 0, seen_subs = 0;
    const char *key;
    Py_ssize_t key_size;
    memset(s, 0, sizeof *s);
    if (expect(&t, '{') != PARSED) return UNKNOWN;
    while ((r = next_member(&t, &first, &key, &key_size)) == 1) {
        if (key_is(key, key_size, "main_thread")) {
            if (seen_main++ || main_thread(&t, s) != PARSED) return UNKNOWN;
        } else if (key_is(key, key_size, "sub_threads")) {
            if (seen_subs++ || sub_threads(&t, s) != PARSED) return UNKNOWN;
        } else if (skip_value(&t) != PARSED) {
            return UNKNOWN;
        }
    }
    if (r != 0) return UNKNOWN;
    skip_space(&t);
    return t.at == t.end ? PARSED : UNKNOWN;
}

/* -- the encoder ---------------------------------------------------------------------- */

#define KEY_SLOTS 256 /* a power of two */
#define KEY_BYTES 48

struct KeySlot { /* an arg name's kind, found by the name's bytes (a new str each node) */
    uint64_t hash;
    Py_ssize_t size;
    char key[KEY_BYTES];
    PyObject *kind; /* NULL: an empty slot */
};

typedef struct {
    PyObject_HEAD
    PyObject *names;      /* name -> (head, name entry) */
    PyObject *op_types;   /* op type -> entry */
    PyObject *providers;  /* provider -> entry */
    PyObject *pools;      /* thread pool name -> entry */
    PyObject *raw;        /* arg name -> {raw text: entry} | None */
    PyObject *handlers;   /* arg name -> (kind, key field, cache) */
    PyObject *int_kind;   /* the kind of an arg read as an integer */
    struct KeySlot *keys; /* each arg name's kind, by the name's bytes: see key_kind */
    int keys_used, keys_stale;
    PyObject *extra;      /* extra key -> (key field, cache) */
    PyObject *duration_key, *thread_id_key, *run_key, *wait_key, *used_key, *tasks_key;
    PyObject *end;        /* the fields after the attributes */
    PyObject *raw_args_type;
    PyObject *stats_arg;  /* "thread_scheduling_stats" */
} Encoder;

static void clear_keys(Encoder *self) {
    if (self->keys == NULL) return;
    for (int i = 0; i < KEY_SLOTS; i++) Py_CLEAR(self->keys[i].kind);
    self->keys_used = 0;
    self->keys_stale = 0;
}

static PyObject *s_name, *s_op_type, *s_provider, *s_dur, *s_tid, *s_args, *s_text, *s_ts,
    *s_kernels, *s_encoded;

static int Encoder_init(Encoder *self, PyObject *args, PyObject *kwds) {
    static char *keywords[] = {
        "names", "op_types", "providers", "pools", "raw", "extra", "duration_key",
        "thread_id_key", "run_key", "wait_key", "used_key", "tasks_key", "end",
        "raw_args_type", "stats_arg", "handlers", "int_kind", NULL,
    };
    PyObject *o[17];
    if (!PyArg_ParseTupleAndKeywords(
            args, kwds, "O!O!O!O!O!O!SSSSSSSOUO!O!:Encoder", keywords, &PyDict_Type, &o[0],
            &PyDict_Type, &o[1], &PyDict_Type, &o[2], &PyDict_Type, &o[3], &PyDict_Type,
            &o[4], &PyDict_Type, &o[5], &o[6], &o[7], &o[8], &o[9], &o[10], &o[11], &o[12],
            &o[13], &o[14], &PyDict_Type, &o[15], &PyLong_Type, &o[16]))
        return -1;
    PyObject **fields[] = {
        &self->names, &self->op_types, &self->providers, &self->pools, &self->raw,
        &self->extra, &self->duration_key, &self->thread_id_key, &self->run_key,
        &self->wait_key, &self->used_key, &self->tasks_key, &self->end,
        &self->raw_args_type, &self->stats_arg, &self->handlers, &self->int_kind,
    };
    for (int i = 0; i < 17; i++) {
        Py_INCREF(o[i]);
        Py_XSETREF(*fields[i], o[i]);
    }
    clear_keys(self);
    if (self->keys == NULL) self->keys = PyMem_Calloc(KEY_SLOTS, sizeof(struct KeySlot));
    if (self->keys == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int Encoder_traverse(Encoder *self, visitproc visit, void *arg) {
    Py_VISIT(self->names);
    Py_VISIT(self->op_types);
    Py_VISIT(self->providers);
    Py_VISIT(self->pools);
    Py_VISIT(self->raw);
    Py_VISIT(self->handlers);
    if (self->keys != NULL)
        for (int i = 0; i < KEY_SLOTS; i++) Py_VISIT(self->keys[i].kind);
    Py_VISIT(self->extra);
    Py_VISIT(self->raw_args_type);
    return 0;
}

static int Encoder_clear(Encoder *self) {
    Py_CLEAR(self->names);
    Py_CLEAR(self->op_types);
    Py_CLEAR(self->providers);
    Py_CLEAR(self->pools);
    Py_CLEAR(self->raw);
    Py_CLEAR(self->handlers);
    Py_CLEAR(self->int_kind);
    clear_keys(self);
    Py_CLEAR(self->extra);
    Py_CLEAR(self->duration_key);
    Py_CLEAR(self->thread_id_key);
    Py_CLEAR(self->run_key);
    Py_CLEAR(self->wait_key);
    Py_CLEAR(self->used_key);
    Py_CLEAR(self->tasks_key);
    Py_CLEAR(self->end);
    Py_CLEAR(self->raw_args_type);
    Py_CLEAR(self->stats_arg);
    return 0;
}

static void Encoder_dealloc(Encoder *self) {
    PyObject_GC_UnTrack(self);
    Encoder_clear(self);
    PyMem_Free(self->keys);
    self->keys = NULL;
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The outcome of one step: done, not this node (Python's turn), or an exception. */
enum { OK = 0, PYTHON = 1, ERROR = -1 };

/* A cached entry of a str value (the caches map only str keys to bytes). */
static int cached_str(Buffer *b, PyObject *cache, PyObject *text, Py_ssize_t *count) {
    if (!PyUnicode_CheckExact(text)) return PYTHON;
    PyObject *piece = PyDict_GetItemWithError(cache, text);
    if (piece == NULL) return PyErr_Occurred() ? ERROR : PYTHON;
    if (!PyBytes_CheckExact(piece)) return PYTHON;
    (*count)++;
    return buffer_add_bytes(b, piece) < 0 ? ERROR : OK;
}

/* An exact int within int64 (a bool or a bigger int is Python's). */
static int exact_int64(PyObject *value, int64_t *out) {
    if (!PyLong_CheckExact(value)) return PYTHON;
    int overflow;
    long long number = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow) return PYTHON;
    if (number == -1 && PyErr_Occurred()) return ERROR;
    *out = (int64_t)number;
    return OK;
}

static int record_pieces(Encoder *self, Buffer *b, PyObject *node, Py_ssize_t *count) {
    PyObject *value = NULL;
    int r;
    value = PyObject_GetAttr(node, s_op_type);
    if (value == NULL) return ERROR;
    r = cached_str(b, self->op_types, value, count);
    Py_DECREF(value);
    if (r != OK) return r;
    value = PyObject_GetAttr(node, s_provider);
    if (value == NULL) return ERROR;
    r = cached_str(b, self->providers, value, count);
    Py_DECREF(value);
    if (r != OK) return r;
    value = PyObject_GetAttr(node, s_dur);
    if (value == NULL) return ERROR;
    double dur;
    if (PyFloat_CheckExact(value)) {
        dur = PyFloat_AS_DOUBLE(value);
    } else if (PyLong_CheckExact(value)) {
        dur = PyLong_AsDouble(value);
        if (dur == -1.0 && PyErr_Occurred()) {
            Py_DECREF(value);
            if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return ERROR;
            PyErr_Clear();
            return PYTHON;
        }
    } else {
        Py_DECREF(value);
        return PYTHON;
    }
    Py_DECREF(value);
    if (add_double(b, self->duration_key, dur) < 0) return ERROR;
    (*count)++;
    value = PyObject_GetAttr(node, s_tid);
    if (value == NULL) return ERROR;
    if (value != Py_None) {
        int64_t tid;
        r = exact_int64(value, &tid);
        if (r == OK) {
            r = add_int(b, self->thread_id_key, tid) < 0 ? ERROR : OK;
            (*count)++;
        }
        if (r != OK) {
            Py_DECREF(value);
            return r;
        }
    }
    Py_DECREF(value);
    return OK;
}

static int stats_pieces(Encoder *self, Buffer *b, const char *text, Py_ssize_t size,
                        Py_ssize_t *count) {
    Stats s;
    if (parse_stats(text, size, &s) != PARSED) return PYTHON;
    if (s.has_main) {
        if (s.pool != NULL) {
            PyObject *pool = PyUnicode_DecodeUTF8(s.pool, s.pool_size, "strict");
            if (pool == NULL) {
                if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return ERROR;
                PyErr_Clear();
                return PYTHON;
            }
            int r = cached_str(b, self->pools, pool, count);
            Py_DECREF(pool);
            if (r != OK) return r;
        }
        if (s.has_run) {
            if (add_int(b, self->run_key, s.run) < 0) return ERROR;
            (*count)++;
        }
        if (s.has_wait) {
            if (add_int(b, self->wait_key, s.wait) < 0) return ERROR;
            (*count)++;
        }
    }
    if (s.has_subs) {
        if (s.tasks < INT64_MIN) return PYTHON; /* Python appends an empty piece for it */
        int64_t tasks = s.tasks > INT64_MAX ? INT64_MAX : (int64_t)s.tasks;
        if (add_int(b, self->used_key, 1 + s.used) < 0) return ERROR;
        if (add_int(b, self->tasks_key, tasks) < 0) return ERROR;
        *count += 2;
    }
    return OK;
}

/* How an arg is encoded, by its name (a new reference): what the Python encoder's caches
 * say, as (kind, key field or None, texts or None); NULL with no error when they do not know
 * the name yet. key_kind keeps it, so that an arg costs one look-up. */
enum { KIND_INT = 0, KIND_SHAPE = 1, KIND_NONE = 2, KIND_STATS = 3 };

static PyObject *arg_kind(Encoder *self, PyObject *key) {
    PyObject *kind;
    int is_stats = PyUnicode_CheckExact(key) ? PyUnicode_Compare(key, self->stats_arg) : 1;
    if (is_stats == -1 && PyErr_Occurred()) return NULL;
    if (is_stats == 0) {
        kind = Py_BuildValue("(iOO)", KIND_STATS, Py_None, Py_None);
    } else {
        PyObject *texts = PyDict_GetItemWithError(self->raw, key);
        if (texts == NULL || (texts != Py_None && !PyDict_CheckExact(texts))) return NULL;
        if (texts == Py_None) { /* an arg that is no attribute */
            kind = Py_BuildValue("(iOO)", KIND_NONE, Py_None, Py_None);
        } else {
            PyObject *handler = PyDict_GetItemWithError(self->handlers, key);
            if (handler == NULL || !PyTuple_CheckExact(handler) ||
                PyTuple_GET_SIZE(handler) != 3 || !PyBytes_CheckExact(PyTuple_GET_ITEM(handler, 1)))
                return NULL;
            int is_int =
                PyObject_RichCompareBool(PyTuple_GET_ITEM(handler, 0), self->int_kind, Py_EQ);
            if (is_int < 0) return NULL;
            kind = is_int ? Py_BuildValue("(iOO)", KIND_INT, PyTuple_GET_ITEM(handler, 1), Py_None)
                          : Py_BuildValue("(iOO)", KIND_SHAPE, Py_None, texts);
        }
    }
    return kind;
}

/* The kind of the arg named by ``key`` (its bytes), borrowed, and its slot; NULL with no
 * error when it is Python's (a long name, a name arg_kind does not know). */
static PyObject *key_kind(Encoder *self, const char *key, Py_ssize_t size, int *slot) {
    if (size > KEY_BYTES) return NULL;
    uint64_t hash = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < size; i++) hash = (hash ^ (unsigned char)key[i]) * 1099511628211ULL;
    for (int probe = 0; probe < KEY_SLOTS; probe++) {
        int at = (int)((hash + (uint64_t)probe) & (KEY_SLOTS - 1));
        struct KeySlot *entry = &self->keys[at];
        if (entry->kind == NULL) { /* not known yet: the encoder's caches say */
            PyObject *name = PyUnicode_DecodeUTF8(key, size, "strict");
            if (name == NULL) {
                if (PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) PyErr_Clear();
                return NULL;
            }
            PyObject *kind = arg_kind(self, name);
            Py_DECREF(name);
            if (kind == NULL) return NULL;
            if (self->keys_used >= KEY_SLOTS / 2) { /* full: Python's */
                Py_DECREF(kind);
                return NULL;
            }
            entry->hash = hash;
            entry->size = size;
            memcpy(entry->key, key, (size_t)size);
            entry->kind = kind; /* the slot holds it */
            self->keys_used++;
            *slot = at;
            return kind;
        }
        if (entry->hash == hash && entry->size == size && memcmp(entry->key, key, (size_t)size) == 0) {
            *slot = at;
            return entry->kind;
        }
    }
    return NULL;
}

/* The args object's attributes, in its order; *indexes: whether it names both index args. */
static int arg_pieces(Encoder *self, Buffer *b, const char *text, Py_ssize_t size,
                      Py_ssize_t *count, int *indexes) {
    Text t = {text, text + size};
    uint64_t seen[KEY_SLOTS / 64] = {0};
    int first = 1, m, node_index = 0, graph_index = 0;
    const char *key;
    Py_ssize_t key_size;
    if (expect(&t, '{') != PARSED) return PYTHON; /* not an object: Python's */
    while ((m = next_member(&t, &first, &key, &key_size)) == 1) {
        skip_space(&t);
        const char *value = t.at;
        if (skip_value(&t) != PARSED) return PYTHON;
        Py_ssize_t value_size = t.at - value;
        int slot = -1;
        PyObject *kind = key_kind(self, key, key_size, &slot);
        if (kind == NULL) return PyErr_Occurred() ? ERROR : PYTHON;
        if (seen[slot / 64] & (1ULL << (slot % 64))) return PYTHON; /* a repeated name */
        seen[slot / 64] |= 1ULL << (slot % 64);
        node_index |= key_is(key, key_size, "node_index");
        graph_index |= key_is(key, key_size, "graph_index");
        long code = PyLong_AsLong(PyTuple_GET_ITEM(kind, 0));
        int r = OK;
        if (code == KIND_NONE) continue;
        if (code == KIND_STATS) {
            r = stats_pieces(self, b, value, value_size, count);
        } else if (code == KIND_INT) { /* "1024" or 1024: read here, as int_of reads it */
            Text v = {value, value + value_size};
            int has = 0;
            int64_t number = 0;
            r = int_field(&v, &has, &number) == PARSED && has && v.at == v.end ? OK : PYTHON;
            if (r == OK) {
                r = add_int(b, PyTuple_GET_ITEM(kind, 1), number) < 0 ? ERROR : OK;
                (*count)++;
            }
        } else { /* a shape: the Python encoder's piece for this text, if it has one */
            PyObject *bytes = PyBytes_FromStringAndSize(value, value_size);
            if (bytes == NULL) return ERROR;
            PyObject *piece = PyDict_GetItemWithError(PyTuple_GET_ITEM(kind, 2), bytes);
            Py_DECREF(bytes);
            if (piece == NULL || !PyBytes_CheckExact(piece)) {
                r = PyErr_Occurred() ? ERROR : PYTHON;
                self->keys_stale = 1; /* its texts may be a dict the encoder started again */
            } else if (PyBytes_GET_SIZE(piece)) {
                r = buffer_add_bytes(b, piece) < 0 ? ERROR : OK;
                (*count)++;
            }
        }
        if (r != OK) return r;
    }
    if (m != 0) return PYTHON;
    skip_space(&t);
    if (t.at != t.end) return PYTHON;
    *indexes = node_index && graph_index;
    return OK;
}

#define MAX_SPLIT 1024

static int extra_pieces(Encoder *self, Buffer *b, PyObject *extra, Py_ssize_t *count) {
    PyObject *key, *value;
    Py_ssize_t position = 0;
    while (PyDict_Next(extra, &position, &key, &value)) {
        PyObject *cached = PyDict_GetItemWithError(self->extra, key);
        if (cached == NULL) return PyErr_Occurred() ? ERROR : PYTHON;
        if (!PyTuple_CheckExact(cached) || PyTuple_GET_SIZE(cached) != 2) return PYTHON;
        PyObject *key_field = PyTuple_GET_ITEM(cached, 0);
        if (!PyBytes_CheckExact(key_field)) return PYTHON;
        int r;
        if (PyLong_CheckExact(value)) { /* a perf count */
            int64_t number;
            r = exact_int64(value, &number);
            if (r != OK) return r;
            if (add_int(b, key_field, number) < 0) return ERROR;
        } else if (PyList_CheckExact(value)) { /* its split by thread */
            Py_ssize_t n = PyList_GET_SIZE(value);
            int64_t numbers[MAX_SPLIT];
            if (n > MAX_SPLIT) return PYTHON;
            for (Py_ssize_t i = 0; i < n; i++) {
                r = exact_int64(PyList_GET_ITEM(value, i), &numbers[i]);
                if (r != OK) return r;
            }
            if (add_int_array(b, key_field, numbers, n) < 0) return ERROR;
        } else {
            return PYTHON;
        }
        (*count)++;
    }
    return OK;
}

static int node_parts(Encoder *self, PyObject *node, PyObject *extra, PyObject *max_attributes,
                      Buffer *b, PyObject **head) {
    PyObject *args = NULL, *text = NULL, *name = NULL, *named = NULL;
    Py_buffer view;
    int has_view = 0, indexes = 0;
    Py_ssize_t count = 0;
    int r = ERROR;
    args = PyObject_GetAttr(node, s_args);
    if (args == NULL) goto done;
    if ((PyObject *)Py_TYPE(args) != self->raw_args_type) {
        r = PYTHON;
        goto done;
    }
    if (self->keys_stale) clear_keys(self); /* the encoder's caches may have started again */
    text = PyObject_GetAttr(args, s_text);
    if (text == NULL) goto done;
    if (PyObject_GetBuffer(text, &view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();
        r = PYTHON;
        goto done;
    }
    has_view = 1;
    name = PyObject_GetAttr(node, s_name);
    if (name == NULL) goto done;
    named = PyUnicode_CheckExact(name) ? PyDict_GetItemWithError(self->names, name) : NULL;
    if (named == NULL) {
        r = PyErr_Occurred() ? ERROR : PYTHON;
        goto done;
    }
    Py_INCREF(named); /* held: what follows may run Python code (a collection) */
    if (!PyTuple_CheckExact(named) || PyTuple_GET_SIZE(named) != 2 ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(named, 0)) ||
        !PyBytes_CheckExact(PyTuple_GET_ITEM(named, 1))) {
        r = PYTHON;
        goto done;
    }
    if (buffer_add_bytes(b, PyTuple_GET_ITEM(named, 1)) < 0) goto done;
    count = 1;
    if ((r = record_pieces(self, b, node, &count)) != OK) goto done;
    if ((r = arg_pieces(self, b, view.buf, view.len, &count, &indexes)) != OK) goto done;
    if (indexes) { /* both become onnxruntime.node.index: the dict path's */
        *head = Py_None;
        Py_INCREF(Py_None);
        goto done;
    }
    if (extra != Py_None) {
        if (!PyDict_CheckExact(extra)) {
            r = PYTHON;
            goto done;
        }
        if ((r = extra_pieces(self, b, extra, &count)) != OK) goto done;
    }
    if (max_attributes != Py_None) {
        Py_ssize_t limit = PyNumber_AsSsize_t(max_attributes, NULL);
        if (limit == -1 && PyErr_Occurred()) {
            r = ERROR;
            goto done;
        }
        if (count > limit) {
            *head = Py_None;
            Py_INCREF(Py_None);
            r = OK;
            goto done;
        }
    }
    if (buffer_add_bytes(b, self->end) < 0) {
        r = ERROR;
        goto done;
    }
    *head = PyTuple_GET_ITEM(named, 0);
    Py_INCREF(*head);
    r = OK;
done:
    if (has_view) PyBuffer_Release(&view);
    Py_XDECREF(args);
    Py_XDECREF(text);
    Py_XDECREF(name);
    Py_XDECREF(named);
    return r;
}

static PyObject *Encoder_parts(Encoder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "parts(node, extra, max_attributes)");
        return NULL;
    }
    if (self->keys == NULL) { /* (set last by __init__) */
        PyErr_SetString(PyExc_ValueError, "Encoder not initialised");
        return NULL;
    }
    Buffer b;
    buffer_init(&b);
    PyObject *head = NULL, *result = NULL;
    int r = node_parts(self, args[0], args[1], args[2], &b, &head);
    if (r == OK) {
        if (head == Py_None) {
            result = head;
        } else {
            PyObject *body = PyBytes_FromStringAndSize(b.data, b.size);
            if (body != NULL) result = PyTuple_Pack(2, head, body);
            Py_XDECREF(body);
            Py_DECREF(head);
        }
    } else if (r == PYTHON) {
        result = Py_NotImplemented;
        Py_INCREF(result);
    }
    buffer_free(&b);
    return result;
}

/* -- a node's span draft ----------------------------------------------------------------- */

/* base + int(us * 1000), as Python computes it for an int or a float number of µs. */
static int ns_of(int64_t base, int exact, int64_t whole, double fraction, int64_t *out) {
    int64_t rel;
    if (exact) {
        if (whole > INT64_MAX / 1000 || whole < INT64_MIN / 1000) return PYTHON;
        rel = whole * 1000;
    } else {
        double ns = fraction * 1000.0;
        if (!(ns > -9.2e18 && ns < 9.2e18)) return PYTHON; /* NaN, inf, out of int64 */
        rel = (int64_t)ns;                                 /* toward zero, as int() */
    }
    if ((rel > 0 && base > INT64_MAX - rel) || (rel < 0 && base < INT64_MIN - rel)) return PYTHON;
    *out = base + rel;
    return OK;
}

/* An exact int (within +-2**53, so that float() of it is exact) or a float. */
static int number_of(PyObject *value, int *exact, int64_t *whole, double *fraction) {
    if (PyFloat_CheckExact(value)) {
        *exact = 0;
        *fraction = PyFloat_AS_DOUBLE(value);
        return OK;
    }
    int64_t v;
    int r = exact_int64(value, &v);
    if (r != OK) return r;
    if (v > (1LL << 53) || v < -(1LL << 53)) return PYTHON;
    *exact = 1;
    *whole = v;
    *fraction = (double)v;
    return OK;
}

static Py_ssize_t framed(Py_ssize_t size) {
    char scratch[11];
    return 1 + varint(scratch, (uint64_t)size) + size;
}

/* SpanBuilder._measured's usual case: (draft, size), or PYTHON. */
static int node_draft(Encoder *self, PyObject *const *args, PyObject **result) {
    PyObject *node = args[0], *extra = args[1], *max_attributes = args[2], *kit = args[6];
    PyObject *ts = NULL, *dur = NULL, *name = NULL, *kernels = NULL, *parts = NULL,
             *attributes = NULL, *draft = NULL, *start_obj = NULL, *end_obj = NULL;
    int r = ERROR;
    int64_t base, start, end;
    if (!PyTuple_CheckExact(kit) || PyTuple_GET_SIZE(kit) != 6) {
        PyErr_SetString(PyExc_TypeError, "kit: (draft type, deferred type, make, resource, "
                                         "scope, max text)");
        return ERROR;
    }
    if ((r = exact_int64(args[3], &base)) != OK) return r;
    ts = PyObject_GetAttr(node, s_ts);
    dur = ts ? PyObject_GetAttr(node, s_dur) : NULL;
    name = dur ? PyObject_GetAttr(node, s_name) : NULL;
    kernels = name ? PyObject_GetAttr(node, s_kernels) : NULL;
    if (kernels == NULL) goto done;
    r = PYTHON;
    Py_ssize_t max_text = PyLong_AsSsize_t(PyTuple_GET_ITEM(kit, 5));
    if (max_text == -1 && PyErr_Occurred()) {
        r = ERROR;
        goto done;
    }
    if (!PyUnicode_CheckExact(name) || PyUnicode_GET_LENGTH(name) > max_text) goto done;
    if (!PyList_CheckExact(kernels) || PyList_GET_SIZE(kernels)) goto done; /* GPU kernels */
    int ts_exact, dur_exact;
    int64_t ts_whole = 0, dur_whole = 0;
    double ts_fraction, dur_fraction;
    if ((r = number_of(ts, &ts_exact, &ts_whole, &ts_fraction)) != OK) goto done;
    if ((r = number_of(dur, &dur_exact, &dur_whole, &dur_fraction)) != OK) goto done;
    if ((r = ns_of(base, ts_exact, ts_whole, ts_fraction, &start)) != OK) goto done;
    int both = ts_exact && dur_exact; /* node.end = ts + dur */
    if (both && ((dur_whole > 0 && ts_whole > INT64_MAX - dur_whole) ||
                 (dur_whole < 0 && ts_whole < INT64_MIN - dur_whole))) {
        r = PYTHON;
        goto done;
    }
    if ((r = ns_of(base, both, ts_whole + (both ? dur_whole : 0), ts_fraction + dur_fraction,
                   &end)) != OK)
        goto done;
    PyObject *part_args[3] = {node, extra, max_attributes};
    parts = Encoder_parts(self, part_args, 3);
    if (parts == NULL) {
        r = ERROR;
        goto done;
    }
    if (!PyTuple_CheckExact(parts)) { /* None (the dict path's) or NotImplemented */
        r = PYTHON;
        goto done;
    }
    PyObject *make_args[3] = {PyTuple_GET_ITEM(kit, 2), node, extra};
    attributes = PyObject_Vectorcall(PyTuple_GET_ITEM(kit, 1), make_args, 3, NULL);
    start_obj = PyLong_FromLongLong(start);
    end_obj = PyLong_FromLongLong(end);
    if (attributes == NULL || start_obj == NULL || end_obj == NULL) {
        r = ERROR;
        goto done;
    }
    PyObject *zero = PyLong_FromLong(0);
    PyObject *draft_args[9] = {args[4], zero, args[5], name, start_obj, end_obj, attributes,
                               PyTuple_GET_ITEM(kit, 3), PyTuple_GET_ITEM(kit, 4)};
    draft = zero ? PyObject_Vectorcall(PyTuple_GET_ITEM(kit, 0), draft_args, 9, NULL) : NULL;
    Py_XDECREF(zero);
    if (draft == NULL || PyObject_SetAttr(draft, s_encoded, parts) < 0) {
        r = ERROR;
        goto done;
    }
    int parent = PyObject_IsTrue(args[5]); /* measure_parts: 10 bytes for a parent id */
    if (parent < 0) {
        r = ERROR;
        goto done;
    }
    Py_ssize_t size = PyBytes_GET_SIZE(PyTuple_GET_ITEM(parts, 0)) +
                      PyBytes_GET_SIZE(PyTuple_GET_ITEM(parts, 1)) + 28 + (parent ? 10 : 0) +
                      (start ? 9 : 0) + (end ? 9 : 0);
    *result = Py_BuildValue("(On)", draft, framed(size));
    r = *result ? OK : ERROR;
done:
    Py_XDECREF(ts);
    Py_XDECREF(dur);
    Py_XDECREF(name);
    Py_XDECREF(kernels);
    Py_XDECREF(parts);
    Py_XDECREF(attributes);
    Py_XDECREF(draft);
    Py_XDECREF(start_obj);
    Py_XDECREF(end_obj);
    return r;
}

static PyObject *Encoder_draft(Encoder *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError,
                        "draft(node, extra, max_attributes, base, trace_id, parent_id, kit)");
        return NULL;
    }
    if (self->keys == NULL) { /* (set last by __init__) */
        PyErr_SetString(PyExc_ValueError, "Encoder not initialised");
        return NULL;
    }
    PyObject *result = NULL;
    int r = node_draft(self, args, &result);
    if (r == PYTHON) {
        result = Py_NotImplemented;
        Py_INCREF(result);
    }
    return r == ERROR ? NULL : result;
}

static PyMethodDef Encoder_methods[] = {
    {"parts", (PyCFunction)(void (*)(void))Encoder_parts, METH_FASTCALL,
     "parts(node, extra, max_attributes): NodeEncoder.parts's answer, or NotImplemented when "
     "the node is the Python encoder's."},
    {"draft", (PyCFunction)(void (*)(void))Encoder_draft, METH_FASTCALL,
     "draft(node, extra, max_attributes, base, trace_id, parent_id, kit): SpanBuilder's "
     "(draft, size) of a node span without kernels, or NotImplemented (kit: the draft type, "
     "the deferred attributes' type and maker, the resource, the scope, the longest name)."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject EncoderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "otel_ort.profiles._node_parts.Encoder",
    .tp_basicsize = sizeof(Encoder),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A NodeEncoder's usual case in C, reading its caches.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Encoder_init,
    .tp_dealloc = (destructor)Encoder_dealloc,
    .tp_traverse = (traverseproc)Encoder_traverse,
    .tp_clear = (inquiry)Encoder_clear,
    .tp_methods = Encoder_methods,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "otel_ort.profiles._node_parts",
    "Node span attributes encoded in C (see node_encoding.py).", -1, NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__node_parts(void) {
    if (PyType_Ready(&EncoderType) < 0) return NULL;
    s_name = PyUnicode_InternFromString("name");
    s_op_type = PyUnicode_InternFromString("op_type");
    s_provider = PyUnicode_InternFromString("provider");
    s_dur = PyUnicode_InternFromString("dur");
    s_tid = PyUnicode_InternFromString("tid");
    s_args = PyUnicode_InternFromString("args");
    s_text = PyUnicode_InternFromString("text");
    s_ts = PyUnicode_InternFromString("ts");
    s_kernels = PyUnicode_InternFromString("kernels");
    s_encoded = PyUnicode_InternFromString("encoded");
    if (!s_name || !s_op_type || !s_provider || !s_dur || !s_tid || !s_args || !s_text || !s_ts ||
        !s_kernels || !s_encoded)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    Py_INCREF(&EncoderType);
    if (PyModule_AddObject(m, "Encoder", (PyObject *)&EncoderType) < 0) {
        Py_DECREF(&EncoderType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
