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
    else if (PyLong_Check(obj) && !PyBool_Check(obj)) {
        return int_key(obj, key, hold); /* never empty */
    }
    else if (PyObject_CheckBuffer(obj)) {
        if (PyObject_GetBuffer(obj, &hold->u.view, PyBUF_SIMPLE) < 0) {
            if (PyErr_ExceptionMatches(PyExc_BufferError)) {
                PyErr_Clear();
                PyErr_Format(PyExc_TypeError,
                             "key must be a contiguous buffer; %.200s is not",
                             Py_TYPE(obj)->tp_name);
            }
            return -1;
        }
        hold->held = LB_HOLD_VIEW;
        key->data = hold->u.view.buf;
        key->len = (size_t)hold->u.view.len;
    }
    else {
        /* bool too: True is not the key "1" (nor "True") */
        PyErr_Format(PyExc_TypeError,
                     "key must be str, bytes, a bytes-like object or int, not %.200s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    if (key->len == 0) {
        lb_key_release(hold);
        return lb_key_empty(st);
    }
    return 0;
}
