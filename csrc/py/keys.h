/* keys.h: turning Python objects into keys (batch.h walks batches of them).
 *
 * A key is a str (hashed as its UTF-8; a compact ASCII str is used in place,
 * with no encoding and no copy; any other str uses the UTF-8 that CPython
 * caches on the object), bytes, any object with the buffer protocol, or an
 * int (not a bool), hashed as its decimal text: 42 is the key "42", -42 is
 * "-42", an int past 64 bits its full decimal text (an int subclass by its
 * value, never its str()).  An int-like (__index__: numpy's integer scalars, a
 * 0-d integer array) is the key of its int, looked at before the buffer that
 * numpy's scalars export too.  Other numbers are a TypeError, as a float is:
 * float and complex and their subclasses, a 0-d buffer of a number format
 * (numpy's floating, complex and bool scalars); so is a buffer of Python
 * objects or 4-byte characters (numpy's object and str arrays), and any
 * other type.  An
 * empty key is EmptyKeyError. */
#ifndef LB_PY_KEYS_H
#define LB_PY_KEYS_H

#include "base.h"

/* What a converted key's bytes live in, when they are not the object's own. */
typedef enum {
    LB_HOLD_NONE = 0,  /* the bytes of the object itself (str, bytes) */
    LB_HOLD_VIEW,      /* a buffer view, released after use */
    LB_HOLD_DIGITS,    /* an int of at most 64 bits, formatted into digits[] */
    LB_HOLD_TEXT       /* a larger int: its decimal str, a reference dropped after use */
} lb_hold_kind;

/* Room for the decimal text of any 64-bit integer: "-9223372036854775808" and
 * "18446744073709551615" are 20 characters. */
#define LB_KEY_DIGITS 24

typedef struct {
    lb_hold_kind held;
    union {
        Py_buffer view;
        char digits[LB_KEY_DIGITS];
        PyObject *text;
    } u;
} lb_key_hold;

/* The slow path of lb_key_get (not an exact compact-ASCII str, not exact
 * bytes): a str subclass or non-ASCII str, an int or int-like, a buffer.  The key's
 * bytes may live in *hold (a view, an int's digits, its text): keep the hold
 * where it is, unmoved, until lb_key_release. */
int lb_key_get_other(lb_state *st, PyObject *obj, lb_key *key, lb_key_hold *hold);
int lb_key_empty(lb_state *st);

/* An int (PyLong_Check, not a bool: the caller's to check) of at most 64 bits
 * (signed, or unsigned up to 2**64 - 1): its decimal text written into the
 * LB_KEY_DIGITS bytes of digits, *key set to it, 1.  0 for a larger int
 * (nothing set: lb_key_get_other gives its key).  Runs no Python code and
 * leaves no exception. */
int lb_key_small_int(PyObject *obj, char *digits, lb_key *key);

/* The keys used in place, with nothing held: 1 and the bytes of an exact str
 * (compact ASCII) or exact bytes (maybe empty), 0 for anything else. */
static inline int lb_key_direct(PyObject *obj, const void **data, size_t *len)
{
    if (PyUnicode_CheckExact(obj) && PyUnicode_IS_COMPACT_ASCII(obj)) {
        *data = PyUnicode_DATA(obj);
        *len = (size_t)PyUnicode_GET_LENGTH(obj);
        return 1;
    }
    if (PyBytes_CheckExact(obj)) {
        *data = PyBytes_AS_STRING(obj);
        *len = (size_t)PyBytes_GET_SIZE(obj);
        return 1;
    }
    return 0;
}

static inline int lb_key_get(lb_state *st, PyObject *obj, lb_key *key, lb_key_hold *hold)
{
    hold->held = LB_HOLD_NONE;
    if (!lb_key_direct(obj, &key->data, &key->len))
        return lb_key_get_other(st, obj, key, hold);
    if (key->len == 0)
        return lb_key_empty(st);
    return 0;
}

/* A batch's keys as a sequence that no Python code can change while they are
 * converted and used: a tuple as it is, a list (or list subclass) copied into
 * a tuple, anything else iterated into a new list (PySequence_Fast, whose
 * TypeError is msg).  A key's __index__ or buffer exporter runs Python code
 * that may shrink or refill the caller's list: a walk over that list with a
 * length read before would read past its items, and a key whose bytes are
 * its object's (a str) would be dropped with the list while still in use.
 * A new reference, or NULL with an exception. */
static inline PyObject *lb_keys_fixed(PyObject *keys, const char *msg)
{
    if (PyList_Check(keys))
        return PyList_AsTuple(keys);
    return PySequence_Fast(keys, msg);
}

/* Give back what a converted key held; the key's bytes are gone afterwards.
 * The hold is NONE again, so a second release does nothing. */
static inline void lb_key_release(lb_key_hold *hold)
{
    if (hold->held == LB_HOLD_VIEW)
        PyBuffer_Release(&hold->u.view);
    else if (hold->held == LB_HOLD_TEXT)
        Py_DECREF(hold->u.text);
    hold->held = LB_HOLD_NONE;
}

/* One key of a single-key call: convert it, then enter the filter (reading
 * only, or not).  The key is converted first because a buffer's exporter can
 * run Python code.  0, or -1 with an exception and nothing held; after 0,
 * lb_key_leave gives both back. */
static inline int lb_key_enter(lb_base *b, PyObject *obj, lb_key *key, lb_key_hold *hold,
                               int read_only)
{
    if (lb_key_get(b->st, obj, key, hold) < 0)
        return -1;
    if ((read_only ? lb_enter_read(b) : lb_enter(b)) < 0) {
        lb_key_release(hold);
        return -1;
    }
    return 0;
}

static inline void lb_key_leave(lb_base *b, lb_key_hold *hold)
{
    lb_leave(b);
    lb_key_release(hold);
}

/* The common single-key call, checked in a few instructions, for an in-memory
 * type whose operation runs with the GIL held and calls no Python code: 1
 * when obj is an exact compact-ASCII str or exact bytes, not empty (*data,
 * *len set), and the filter is open, writable for a write, has no fork to
 * recover from and no other thread's GIL-free section to wait for (a read
 * goes on during one where the type allows it).  The caller then runs its
 * core call at once, without a claim: from this check to its return it holds
 * the GIL and runs no Python code, so no close() can come between.  0: take
 * the full path (lb_key_enter), which raises or waits as it must. */
static inline int lb_key_fast(lb_base *b, PyObject *obj, int write, const void **data,
                              size_t *len)
{
    return lb_key_direct(obj, data, len) && *len != 0 && !b->closed &&
           !lb_must_wait(b, !write) && !(write && b->read_only);
}

#endif
