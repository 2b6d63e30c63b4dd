/* keys.c: key conversion (see keys.h). */
#include "keys.h"

#include <string.h>

#include "errors.h"

int lb_key_empty(lb_state *st)
{
    lb_raise(st, LB_ERR_EMPTY_KEY, NULL);
    return -1;
}

/* The decimal text of v (negative when neg) written backwards ending at end:
 * returns where it starts. */
static char *format_decimal(char *end, uint64_t v, int neg)
{
    char *p = end;
    do {
        *--p = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    if (neg)
        *--p = '-';
    return p;
}

/* An int key (not a bool): its decimal text, as str(int) writes it and
 * strconv.FormatInt / FormatUint of the ling-base Go library do.  Up to 64
 * bits (signed, or unsigned up to 2**64 - 1) the digits are written into the
 * hold with no Python object made; a larger int's text is int's own repr
 * (never a subclass's __str__), held by reference.  A ValueError past
 * sys.get_int_max_str_digits, as str() gives. */
static int int_key(PyObject *obj, lb_key *key, lb_key_hold *hold)
{
    char *end = hold->u.digits + LB_KEY_DIGITS;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && !overflow && PyErr_Occurred())
        return -1;
    if (!overflow) {
        uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        key->data = format_decimal(end, mag, v < 0);
        key->len = (size_t)(end - (const char *)key->data);
        hold->held = LB_HOLD_DIGITS;
        return 0;
    }
    if (overflow > 0) {
        unsigned long long u = PyLong_AsUnsignedLongLong(obj);
        if (!(u == (unsigned long long)-1 && PyErr_Occurred())) {
            key->data = format_decimal(end, (uint64_t)u, 0);
            key->len = (size_t)(end - (const char *)key->data);
            hold->held = LB_HOLD_DIGITS;
            return 0;
        }
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
    }
    PyObject *text = PyLong_Type.tp_repr(obj);
    if (!text)
        return -1;
    if (!PyUnicode_Check(text) || !PyUnicode_IS_COMPACT_ASCII(text)) { /* not expected */
        Py_DECREF(text);
        PyErr_SetString(PyExc_SystemError, "int's text is not ASCII");
        return -1;
    }
    hold->u.text = text;
    hold->held = LB_HOLD_TEXT;
    key->data = PyUnicode_DATA(text);
    key->len = (size_t)PyUnicode_GET_LENGTH(text);
    return 0;
}

int lb_key_small_int(PyObject *obj, char *digits, lb_key *key)
{
    char *end = digits + LB_KEY_DIGITS;
    int overflow;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (!overflow) {
        if (v == -1 && PyErr_Occurred()) { /* not expected of an int */
            PyErr_Clear();
            return 0;
        }
        uint64_t mag = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
        key->data = format_decimal(end, mag, v < 0);
        key->len = (size_t)(end - (const char *)key->data);
        return 1;
    }
    if (overflow < 0)
        return 0;
    unsigned long long u = PyLong_AsUnsignedLongLong(obj);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    key->data = format_decimal(end, (uint64_t)u, 0);
    key->len = (size_t)(end - (const char *)key->data);
    return 1;
}

/* A number that is not a key (float, complex, numpy's floating, complex and bool
 * scalars, Decimal, Fraction ...): the TypeError of any other type. */
static int not_a_key(PyObject *obj)
{
    /* bool too: True is not the key "1" (nor "True") */
    PyErr_Format(PyExc_TypeError, "key must be str, bytes, a bytes-like object or int, not %.200s",
                 Py_TYPE(obj)->tp_name);
    return -1;
}

/* An object with __index__ that is not an int (numpy's integer scalars, a 0-d
 * integer array, other int-likes): the key of the int it indexes to.  0, or
 * -1 with an exception. */
static int index_key(PyObject *obj, lb_key *key, lb_key_hold *hold)
{
    PyObject *v = PyNumber_Index(obj);
    if (!v)
        return -1;
    /* int_key keeps no reference to v (a large int's text is an object of
     * its own): v may go at once. */
    int r = int_key(v, key, hold);
    Py_DECREF(v);
    return r;
}

/* What a buffer of no dimensions holds (a numpy scalar, a 0-d array, a ctypes
 * number): 'i' an integer, 'n' another number (floating, complex, bool), 0
 * anything else (bytes "5s", text "1w", a record ...).  A format is a struct
 * code, maybe after a byte order, and 'Z' before a complex one. */
static char scalar_kind(const Py_buffer *view)
{
    if (view->ndim != 0 || !view->format)
        return 0;
    const char *f = view->format;
    if (*f == '@' || *f == '=' || *f == '<' || *f == '>' || *f == '!')
        f++;
    if (*f == 'Z')
        return f[1] != '\0' && f[2] == '\0' && strchr("efdg", f[1]) ? 'n' : 0;
    if (*f == '\0' || f[1] != '\0')
        return 0;
    if (strchr("bBhHiIlLqQnN", *f))
        return 'i';
    return strchr("?efdgFDG", *f) ? 'n' : 0;
}

/* A buffer whose bytes are not a key although it has bytes: items of Python
 * objects ('O', numpy's object arrays: the bytes are the objects' addresses,
 * another key in every process) or of 4-byte characters ('w', numpy's str
 * arrays: not the UTF-8 of their text, the key of the same str).  The
 * format's field names (between colons) are skipped.  'O' or 'w', or 0. */
static char unkeyable_items(const Py_buffer *view)
{
    const char *f = view->format;
    if (!f)
        return 0;
    for (; *f; f++) {
        if (*f == ':') {
            const char *end = strchr(f + 1, ':');
            if (!end)
                return 0;
            f = end;
        }
        else if (*f == 'O' || *f == 'w') {
            return *f;
        }
    }
    return 0;
}

int lb_key_get_other(lb_state *st, PyObject *obj, lb_key *key, lb_key_hold *hold)
{
    hold->held = LB_HOLD_NONE;
    if (PyUnicode_Check(obj)) {
        Py_ssize_t len;
        const char *s = PyUnicode_AsUTF8AndSize(obj, &len);
        if (!s)
            return -1;
        key->data = s;
        key->len = (size_t)len;
    }
    else if (PyLong_Check(obj)) {
        if (PyBool_Check(obj))
            return not_a_key(obj);
        return int_key(obj, key, hold); /* never empty */
    }
    else if (PyFloat_Check(obj) || PyComplex_Check(obj)) {
        return not_a_key(obj); /* numpy's float64 and complex128 are these */
    }
    else {
        PyNumberMethods *nb = Py_TYPE(obj)->tp_as_number;
        int has_index = nb && nb->nb_index;
        if (!PyObject_CheckBuffer(obj))
            return has_index ? index_key(obj, key, hold) : not_a_key(obj);
        /* PyBUF_ND | PyBUF_FORMAT: C-contiguous as PyBUF_SIMPLE, and the
         * shape and items that tell a number from bytes: numpy's scalars
         * export a buffer too, whose raw bytes are not the key of their
         * number. */
        if (PyObject_GetBuffer(obj, &hold->u.view, PyBUF_ND | PyBUF_FORMAT) < 0) {
            if (PyErr_ExceptionMatches(PyExc_BufferError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "key must be a contiguous buffer; %.200s is not",
                             Py_TYPE(obj)->tp_name);
            }
            return -1;
        }
        hold->held = LB_HOLD_VIEW;
        char kind = scalar_kind(&hold->u.view);
        if (kind) {
            /* A number: an integer one is the key of its int (__index__:
             * numpy's integer scalars, a 0-d integer array); any other
             * (numpy's floating, complex and bool scalars) is refused as a
             * float is. */
            lb_key_release(hold);
            if (kind == 'i' && has_index)
                return index_key(obj, key, hold); /* never empty */
            return not_a_key(obj);
        }
        char items = unkeyable_items(&hold->u.view);
        if (items) {
            lb_key_release(hold);
            PyErr_Format(PyExc_TypeError,
                         "key must be str, bytes, a bytes-like object or int, not %.200s of %s",
                         Py_TYPE(obj)->tp_name,
                         items == 'O' ? "Python objects (its bytes are their addresses)"
                                      : "4-byte characters (use the str)");
            return -1;
        }
        key->data = hold->u.view.buf;
        key->len = (size_t)hold->u.view.len;
    }
    if (key->len == 0) {
        lb_key_release(hold);
        return lb_key_empty(st);
    }
    return 0;
}
