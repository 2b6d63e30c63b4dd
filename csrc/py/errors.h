/* errors.h: the exceptions of ling_bloom, made from one table, and the one map
 * from a status of the core (an lb_status, or an lb_redis_status of the
 * Redis client) to the exception it raises: which exception, its message
 * when the caller has none, and the attributes it carries (.reply, .key,
 * .processed, .added).  Every status -> exception decision belongs here: the
 * binding's other raisers (redis_common.c's lb_raise_redis, RedisBloomFilter's
 * reply errors) hand their text and key to lb_raise_redis_status. */
#ifndef LB_PY_ERRORS_H
#define LB_PY_ERRORS_H

#include "state.h"
#include "status.h"

/* Make every exception (BloomError and the 17 below it), store each in st and
 * add it to the module (module exec).  0, or -1 with an exception. */
int lb_errors_add(PyObject *module, lb_state *st);

/* A key of the map: an lb_status as it is, an lb_redis_status shifted past
 * them (LB_REDIS_CODE). */
typedef int lb_error_code;
#define LB_CORE_CODES ((int)LB_ERR_BACKEND + 1)
#define LB_REDIS_CODE(rs) (LB_CORE_CODES + (int)(rs))

/* What a caller knows beyond the code; every field may be NULL. */
typedef struct {
    const char *text;     /* the message (UTF-8); NULL or "": the map's text for the code,
                             for a Redis code the status's name */
    PyObject *reply;      /* .reply of a RedisResponseError: NULL = the message as a str */
    PyObject *key;        /* .key where the exception has one: NULL = None */
    PyObject *processed;  /* .processed and .added of FilterFullError: NULL = None */
    PyObject *added;
} lb_error_detail;

/* Raise the exception of code, with detail (NULL: none).  Returns NULL. */
PyObject *lb_raise_code(lb_state *st, lb_error_code code, const lb_error_detail *detail);

/* lb_raise_code for a core status, detail the message (NULL: the map's). */
PyObject *lb_raise(lb_state *st, lb_status status, const char *detail);

/* lb_raise_code for a status of the Redis client. */
PyObject *lb_raise_redis_status(lb_state *st, lb_redis_status status,
                                const lb_error_detail *detail);

/* The constructor of a filter type (tp_new, which sizes the filter from the
 * call's arguments) failed for type: when type is a subclass whose __init__
 * is its own and the error is a TypeError (exactly), the message says so (such a
 * subclass defines __new__ too; not when a class of type's defines __new__,
 * which is then not own, the filter type's tp_new).  Returns NULL. */
PyObject *lb_hint_subclass_new(PyTypeObject *type, newfunc own);

#endif
