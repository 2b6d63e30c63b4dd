/* errors.c: the exception table and the status -> exception map (see errors.h). */
#include "errors.h"

#include <string.h>

/* An exception named in a table: one of ling_bloom's (its slot in lb_state)
 * or a builtin. */
typedef struct {
    size_t slot;         /* offsetof(lb_state, ...); used when builtin is NULL */
    PyObject **builtin;  /* &PyExc_...; {0, NULL}: none */
} exc_ref;

#define OWN(name) {offsetof(lb_state, name), NULL}
#define BUILTIN(name) {0, &PyExc_##name}
#define NO_EXC {0, NULL}

/* Offset 0 holds a type, never an exception: {0, NULL} can mean "none". */
_Static_assert(offsetof(lb_state, BloomError) != 0, "an exception at offset 0");

static PyObject **slot_of(lb_state *st, size_t slot)
{
    return (PyObject **)((char *)st + slot);
}

static PyObject *resolve(lb_state *st, exc_ref r)
{
    if (r.builtin)
        return *r.builtin;
    return r.slot ? *slot_of(st, r.slot) : NULL;
}

/* ---- the exceptions ----------------------------------------------------- */

/* In the order they are made: every base before what derives from it. */
static const struct {
    size_t slot;
    const char *name;
    exc_ref base, also;  /* the bases: base, and also (none for most) */
    const char *doc;
} exceptions[] = {
    {offsetof(lb_state, BloomError), "BloomError", BUILTIN(Exception), NO_EXC,
     "Base of every ling_bloom error."},
    {offsetof(lb_state, ClosedError), "ClosedError", OWN(BloomError), NO_EXC,
     "The filter was closed."},
    {offsetof(lb_state, InvalidCapacityError), "InvalidCapacityError", OWN(BloomError),
     BUILTIN(ValueError), "Capacity (or m) is zero, negative or too large."},
    {offsetof(lb_state, InvalidFalsePositiveRateError), "InvalidFalsePositiveRateError",
     OWN(BloomError), BUILTIN(ValueError), "The false-positive rate is not in (0, 1)."},
    {offsetof(lb_state, EmptyKeyError), "EmptyKeyError", OWN(BloomError), BUILTIN(ValueError),
     "The key is empty."},
    {offsetof(lb_state, NotSupportedError), "NotSupportedError", OWN(BloomError), NO_EXC,
     "The operation is not supported by this filter."},
    {offsetof(lb_state, CorruptFileError), "CorruptFileError", OWN(BloomError),
     BUILTIN(ValueError),
     "The data is not a saved filter (garbage, truncated, damaged, of a newer "
     "format, or of another type than the one asked for)."},
    {offsetof(lb_state, GeometryMismatchError), "GeometryMismatchError", OWN(BloomError),
     BUILTIN(ValueError),
     "Two filters (or a filter and what Redis holds) differ in m, k or hash."},
    {offsetof(lb_state, RedisError), "RedisError", OWN(BloomError), NO_EXC,
     "Base of the errors of the Redis filters."},
    {offsetof(lb_state, RedisConnectionError), "RedisConnectionError", OWN(RedisError),
     BUILTIN(ConnectionError), "Could not connect to Redis, or the connection was lost."},
    {offsetof(lb_state, RedisTimeoutError), "RedisTimeoutError", OWN(RedisError),
     BUILTIN(TimeoutError), "Redis did not answer within the timeout."},
    {offsetof(lb_state, RedisResponseError), "RedisResponseError", OWN(RedisError), NO_EXC,
     "Redis answered with an error; .reply holds its text."},
    {offsetof(lb_state, WrongTypeError), "WrongTypeError", OWN(RedisResponseError), NO_EXC,
     "A Redis key holds another type; .key names it."},
    {offsetof(lb_state, FilterFullError), "FilterFullError", OWN(RedisResponseError), NO_EXC,
     "A non-scaling RedisBloom filter is full.  .processed: keys of the batch "
     "before the first one the filter rejected (all of them are in it; resume at "
     "keys[processed:]); .added: how many of those were new (None, both, when "
     "the server did not say)."},
    {offsetof(lb_state, FilterNotFoundError), "FilterNotFoundError", OWN(RedisResponseError),
     BUILTIN(KeyError),
     "No RedisBloom filter at the key (.key), and it was not to be created "
     "(no_create=True), or info()/dump() of a missing key; or no RedisFilter at "
     "the key and no geometry given (RedisFilter.open)."},
    {offsetof(lb_state, FilterLostError), "FilterLostError", OWN(FilterNotFoundError), NO_EXC,
     "The filter is gone from the Redis server although it was made without a ttl: "
     "the server restarted empty, was flushed, or evicted the key (.key).  Its "
     "answers would be wrong (every key absent), so none is given; a warm-up, "
     "reset() or restore() builds it again."},
    {offsetof(lb_state, KeyNotOwnedError), "KeyNotOwnedError", OWN(RedisError),
     BUILTIN(ValueError),
     "The Redis key (.key) holds data this library did not write (no meta key "
     "beside it); RedisFilter(..., adopt=True) takes a bitmap over on purpose."},
    {offsetof(lb_state, ModuleMissingError), "ModuleMissingError", OWN(RedisResponseError),
     OWN(NotSupportedError),
     "The Redis server has no RedisBloom module (no BF.* commands), or its BF.* commands "
     "lack one the call needs, an option or a BF.INFO field; the message names it and the "
     "server."},
    {offsetof(lb_state, RedisProtocolError), "RedisProtocolError", OWN(RedisError), NO_EXC,
     "Redis answered something that does not fit the command sent (type, length or "
     "value); the connection was dropped."},
    {offsetof(lb_state, EvictionWarning), "EvictionWarning", BUILTIN(RuntimeWarning), NO_EXC,
     "The Redis server's maxmemory-policy can evict the filter's keys (allkeys-*, or "
     "volatile-* for a filter with a ttl): under memory pressure the filter may be "
     "lost (a filter without a ttl then raises FilterLostError).  Warned once per "
     "filter, when its first check reads the server's INFO memory."},
};

static int add_exception(PyObject *module, lb_state *st, size_t i)
{
    char full[128];
    PyOS_snprintf(full, sizeof(full), "ling_bloom.%s", exceptions[i].name);
    PyObject *base = resolve(st, exceptions[i].base);
    PyObject *also = resolve(st, exceptions[i].also);
    PyObject *bases = also ? PyTuple_Pack(2, base, also) : PyTuple_Pack(1, base);
    if (!bases)
        return -1;
    PyObject **slot = slot_of(st, exceptions[i].slot);
    *slot = PyErr_NewExceptionWithDoc(full, exceptions[i].doc, bases, NULL);
    Py_DECREF(bases);
    if (!*slot)
        return -1;
    Py_INCREF(*slot);
    if (PyModule_AddObject(module, exceptions[i].name, *slot) < 0) {
        Py_DECREF(*slot);
        return -1;
    }
    return 0;
}

int lb_errors_add(PyObject *module, lb_state *st)
{
    for (size_t i = 0; i < sizeof(exceptions) / sizeof(exceptions[0]); i++)
        if (add_exception(module, st, i) < 0)
            return -1;
    return 0;
}

/* ---- the status map ----------------------------------------------------- */

/* Attributes an exception carries (set on the instance, None when the caller
 * has no value): */
enum {
    ATTR_REPLY = 1,  /* .reply: the server's text */
    ATTR_KEY = 2,    /* .key: the Redis key */
    ATTR_FULL = 4,   /* .processed, .added */
    ATTR_BARE = 8    /* no message: MemoryError as PyErr_NoMemory raises it */
};

#define REDIS(name) [LB_REDIS_CODE(LB_REDIS_##name)]

static const struct {
    exc_ref exc;
    const char *text;  /* the message when the caller has none; NULL: the status's name */
    unsigned attrs;
} status_map[] = {
    [LB_OK] = {OWN(BloomError), "internal error", 0},
    [LB_ERR_CAPACITY] = {OWN(InvalidCapacityError), "capacity must be greater than zero", 0},
    [LB_ERR_FPR] = {OWN(InvalidFalsePositiveRateError), "false-positive rate must be in (0, 1)",
                    0},
    [LB_ERR_RANGE] = {OWN(InvalidCapacityError),
                      "the filter would be too large (more than 2**48 bits)", 0},
    [LB_ERR_ARG] = {BUILTIN(ValueError), "invalid argument", 0},
    [LB_ERR_NOMEM] = {BUILTIN(MemoryError), "out of memory", 0},
    [LB_ERR_FORMAT] = {OWN(CorruptFileError), "not a valid saved filter", 0},
    [LB_ERR_MISMATCH] = {OWN(GeometryMismatchError), "filters differ in m, k or hash", 0},
    [LB_ERR_EMPTY_KEY] = {OWN(EmptyKeyError), "key must not be empty", 0},
    /* the caller raises a backend's error itself (lb_base.raise_backend) */
    [LB_ERR_BACKEND] = {OWN(BloomError), "internal error", 0},

    REDIS(OK) = {OWN(RedisError), NULL, 0},
    REDIS(ERR_CONNECT) = {OWN(RedisConnectionError), NULL, 0},
    REDIS(ERR_IO) = {OWN(RedisConnectionError), NULL, 0},
    REDIS(ERR_TIMEOUT) = {OWN(RedisTimeoutError), NULL, 0},
    REDIS(ERR_PROTOCOL) = {OWN(RedisProtocolError), NULL, 0},
    REDIS(ERR_REPLY) = {OWN(RedisResponseError), NULL, ATTR_REPLY},
    REDIS(ERR_WRONGTYPE) = {OWN(WrongTypeError), NULL, ATTR_REPLY | ATTR_KEY},
    REDIS(ERR_AUTH) = {OWN(RedisConnectionError), NULL, 0},
    REDIS(ERR_URL) = {BUILTIN(ValueError), NULL, 0},
    REDIS(ERR_TLS) = {OWN(NotSupportedError), NULL, 0},
    REDIS(ERR_MISMATCH) = {OWN(GeometryMismatchError), NULL, 0},
    REDIS(ERR_NOTFOUND) = {OWN(FilterNotFoundError), NULL, ATTR_REPLY | ATTR_KEY},
    REDIS(ERR_ARG) = {BUILTIN(ValueError), NULL, 0},
    REDIS(ERR_NOMEM) = {BUILTIN(MemoryError), NULL, ATTR_BARE},
    REDIS(ERR_FULL) = {OWN(FilterFullError), NULL, ATTR_REPLY | ATTR_KEY | ATTR_FULL},
    REDIS(ERR_NOMODULE) = {OWN(ModuleMissingError), NULL, ATTR_REPLY},
    REDIS(ERR_TOOLARGE) = {OWN(InvalidCapacityError), NULL, 0},
    REDIS(ERR_NOTOWNED) = {OWN(KeyNotOwnedError), NULL, ATTR_KEY},
    REDIS(ERR_LOST) = {OWN(FilterLostError), NULL, ATTR_REPLY | ATTR_KEY},
};

#define MAP_SIZE ((lb_error_code)(sizeof(status_map) / sizeof(status_map[0])))

/* The entry of code: a code the map does not know takes its family's
 * fallback, the entry of LB_OK or of LB_REDIS_OK. */
static lb_error_code entry_of(lb_error_code code)
{
    if (code >= 0 && code < MAP_SIZE &&
        (status_map[code].exc.builtin || status_map[code].exc.slot))
        return code;
    return code >= LB_CORE_CODES ? LB_REDIS_CODE(LB_REDIS_OK) : LB_OK;
}

static const char *message_of(lb_error_code code, lb_error_code e, const lb_error_detail *d)
{
    if (d && d->text && *d->text)
        return d->text;
    if (status_map[e].text)
        return status_map[e].text;
    return lb_redis_status_name((lb_redis_status)(code - LB_CORE_CODES));
}

/* The instance, with the attributes its entry names. */
static PyObject *with_attrs(PyObject *exc, PyObject *msg, unsigned attrs,
                            const lb_error_detail *d)
{
    static const lb_error_detail none = {NULL, NULL, NULL, NULL, NULL};
    if (!d)
        d = &none;
    PyObject *value = PyObject_CallOneArg(exc, msg);
    if (!value)
        return NULL;
    if (((attrs & ATTR_REPLY) &&
         PyObject_SetAttrString(value, "reply", d->reply ? d->reply : msg) < 0) ||
        ((attrs & ATTR_FULL) &&
         (PyObject_SetAttrString(value, "processed", d->processed ? d->processed : Py_None) < 0 ||
          PyObject_SetAttrString(value, "added", d->added ? d->added : Py_None) < 0)) ||
        ((attrs & ATTR_KEY) &&
         PyObject_SetAttrString(value, "key", d->key ? d->key : Py_None) < 0)) {
        Py_DECREF(value);
        return NULL;
    }
    return value;
}

PyObject *lb_raise_code(lb_state *st, lb_error_code code, const lb_error_detail *detail)
{
    lb_error_code e = entry_of(code);
    unsigned attrs = status_map[e].attrs;
    if (attrs & ATTR_BARE)
        return PyErr_NoMemory();
    PyObject *exc = resolve(st, status_map[e].exc);
    const char *text = message_of(code, e, detail);
    /* A server's text need not be UTF-8: undecodable bytes are replaced,
     * so the exception is the one the map names, never a UnicodeDecodeError. */
    PyObject *msg = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
    if (!msg)
        return NULL;
    if (!attrs) {
        PyErr_SetObject(exc, msg);
    }
    else {
        PyObject *value = with_attrs(exc, msg, attrs, detail);
        if (value) {
            PyErr_SetObject(exc, value);
            Py_DECREF(value);
        }
    }
    Py_DECREF(msg);
    return NULL;
}

PyObject *lb_raise(lb_state *st, lb_status status, const char *detail)
{
    lb_error_detail d = {detail, NULL, NULL, NULL, NULL};
    return lb_raise_code(st, (lb_error_code)status, &d);
}

PyObject *lb_raise_redis_status(lb_state *st, lb_redis_status status,
                                const lb_error_detail *detail)
{
    return lb_raise_code(st, LB_REDIS_CODE(status), detail);
}

PyObject *lb_hint_subclass_new(PyTypeObject *type, newfunc own)
{
    if (type->tp_init == PyBaseObject_Type.tp_init || type->tp_new != own)
        return NULL;
    PyObject *exc, *val, *tb;
    PyErr_Fetch(&exc, &val, &tb);
    if (exc != PyExc_TypeError) { /* a subclass keeps its class: `except` still catches it */
        PyErr_Restore(exc, val, tb);
        return NULL;
    }
    PyErr_NormalizeException(&exc, &val, &tb);
    PyObject *msg = val ? PyObject_Str(val) : NULL;
    if (!msg) {
        PyErr_Restore(exc, val, tb);
        return NULL;
    }
    PyErr_Format(PyExc_TypeError,
                 "%U (%.200s is a subclass whose __init__ is its own, but the filter is made, "
                 "and sized, by __new__ from the same arguments: define __new__ too, calling "
                 "super().__new__(cls, ...) with the filter's arguments)",
                 msg, type->tp_name);
    Py_DECREF(msg);
    PyObject *e2, *v2, *tb2;
    PyErr_Fetch(&e2, &v2, &tb2);
    PyErr_NormalizeException(&e2, &v2, &tb2);
    if (v2 && val) {
        Py_INCREF(val);
        PyException_SetCause(v2, val);
        PyException_SetContext(v2, Py_NewRef(val));
    }
    PyErr_Restore(e2, v2, tb2);
    Py_XDECREF(exc);
    Py_XDECREF(val);
    Py_XDECREF(tb);
    return NULL;
}
