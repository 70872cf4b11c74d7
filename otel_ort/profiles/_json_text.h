/* Reading JSON text that was decoded once already (so it is valid JSON) in C, for the parts
 * of a profile's conversion that read ORT's args as text. Every function stops at the end
 * of its text, whatever it holds; anything but the plain forms they know is UNKNOWN, for
 * the caller to leave to its Python code.
 */
#ifndef OTEL_ORT_JSON_TEXT_H
#define OTEL_ORT_JSON_TEXT_H

#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    const char *at, *end;
} Text;

enum { PARSED = 0, UNKNOWN = 1 }; /* UNKNOWN: a form left to Python */

static inline void skip_space(Text *t) {
    while (t->at < t->end && (*t->at == ' ' || *t->at == '\n' || *t->at == '\r' || *t->at == '\t'))
        t->at++;
}

static inline int expect(Text *t, char c) {
    skip_space(t);
    if (t->at >= t->end || *t->at != c) return UNKNOWN;
    t->at++;
    return PARSED;
}

/* A string without escapes: its bytes between the quotes. */
static inline int plain_string(Text *t, const char **start, Py_ssize_t *size) {
    skip_space(t);
    if (t->at >= t->end || *t->at != '"') return UNKNOWN;
    const char *s = t->at + 1;
    const char *quote = memchr(s, '"', (size_t)(t->end - s));
    if (quote == NULL || memchr(s, '\\', (size_t)(quote - s)) != NULL) return UNKNOWN;
    *start = s; /* (valid JSON: no raw control characters in a string) */
    *size = quote - s;
    t->at = quote + 1;
    return PARSED;
}
static inline int digits(const char *s, Py_ssize_t size, int64_t *out) {
    Py_ssize_t i = 0;
    int negative = 0;
    if (size > 0 && s[0] == '-') {
        negative = 1;
        i = 1;
    }
    if (i >= size) return UNKNOWN;
    uint64_t value = 0;
    for (; i < size; i++) {
        if (s[i] < '0' || s[i] > '9') return UNKNOWN;
        if (value > (UINT64_MAX - 9) / 10) return UNKNOWN;
        value = value * 10 + (uint64_t)(s[i] - '0');
    }
    if (negative) {
        if (value > (uint64_t)INT64_MAX + 1) return UNKNOWN;
        *out = (int64_t)(0 - value);
    } else {
        if (value > (uint64_t)INT64_MAX) return UNKNOWN;
        *out = (int64_t)value;
    }
    return PARSED;
}

/* An int | str | null field read by int_value: a JSON integer, a string of [-]digits, or
 * null (*has = 0). A string int() refuses gives None in Python: left to Python too. */
static inline int int_field(Text *t, int *has, int64_t *out) {
    skip_space(t);
    if (t->at >= t->end) return UNKNOWN;
    if (*t->at == 'n') {
        if (t->end - t->at < 4 || memcmp(t->at, "null", 4) != 0) return UNKNOWN;
        t->at += 4;
        *has = 0;
        return PARSED;
    }
    const char *s;
    Py_ssize_t size;
    if (*t->at == '"') {
        if (plain_string(t, &s, &size) != PARSED) return UNKNOWN;
    } else {
        s = t->at;
        while (t->at < t->end && (*t->at == '-' || (*t->at >= '0' && *t->at <= '9'))) t->at++;
        size = t->at - s;
        if (t->at < t->end && (*t->at == '.' || *t->at == 'e' || *t->at == 'E')) return UNKNOWN;
    }
    if (digits(s, size, out) != PARSED) return UNKNOWN;
    *has = 1;
    return PARSED;
}

/* Any JSON value, passed over (the text was already decoded once: it is valid JSON; any
 * surprise is still UNKNOWN, never a read past the end). */
/* Past a string (at its opening quote), escapes and all. */
static inline int skip_string(Text *t) {
    const char *from = t->at + 1;
    for (;;) {
        const char *quote = memchr(from, '"', (size_t)(t->end - from));
        if (quote == NULL) return UNKNOWN;
        const char *slash = quote;
        while (slash > from && slash[-1] == '\\') slash--;
        if (((quote - slash) & 1) == 0) { /* not escaped: an even run of backslashes */
            t->at = quote + 1;
            return PARSED;
        }
        from = quote + 1;
    }
}

/* Past any JSON value. The texts read here were decoded once already, so they are valid
 * JSON: a container is passed over by counting its brackets outside strings. */
static inline int skip_value(Text *t) {
    skip_space(t);
    if (t->at >= t->end) return UNKNOWN;
    char c = *t->at;
    if (c == '"') return skip_string(t);
    if (c == '{' || c == '[') {
        int level = 0;
        while (t->at < t->end) {
            char ch = *t->at;
            if (ch == '"') {
                if (skip_string(t) != PARSED) return UNKNOWN;
                continue;
            }
            if (ch == '{' || ch == '[') {
                level++;
            } else if (ch == '}' || ch == ']') {
                if (--level == 0) {
                    t->at++;
                    return PARSED;
                }
            }
            t->at++;
        }
        return UNKNOWN;
    }
    const char *s = t->at; /* a number, true, false or null */
    while (t->at < t->end) {
        char ch = *t->at;
        if (ch == ',' || ch == '}' || ch == ']' || ch == ' ' || ch == '\n' || ch == '\r' ||
            ch == '\t' || ch == '\0')
            break;
        t->at++;
    }
    return t->at > s ? PARSED : UNKNOWN;
}

static inline int next_member(Text *t, int *first, const char **key, Py_ssize_t *key_size) {
    skip_space(t);
    if (t->at >= t->end) return -1;
    if (*first) {
        *first = 0;
        if (*t->at == '}') {
            t->at++;
            return 0;
        }
    } else {
        if (*t->at == '}') {
            t->at++;
            return 0;
        }
        if (*t->at != ',') return -1;
        t->at++;
    }
    if (plain_string(t, key, key_size) != PARSED) return -1;
    if (expect(t, ':') != PARSED) return -1;
    return 1;
}

static inline int key_is(const char *key, Py_ssize_t size, const char *name) {
    return (size_t)size == strlen(name) && memcmp(key, name, (size_t)size) == 0;
}

/* null or an object; *is_null says which. */
static inline int object_or_null(Text *t, int *is_null) {
    skip_space(t);
    if (t->at < t->end && *t->at == 'n') {
        if (t->end - t->at < 4 || memcmp(t->at, "null", 4) != 0) return UNKNOWN;
        t->at += 4;
        *is_null = 1;
        return PARSED;
    }
    *is_null = 0;
    return expect(t, '{');
}

#endif
