/* state.h: the bottom of the binding.  Python.h (with the one shim older
 * versions need), the core's status codes, and the module state: the types and
 * exceptions of ling_bloom._core, found from any of its types. */
#ifndef LB_PY_STATE_H
#define LB_PY_STATE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "pythread.h"

#if PY_VERSION_HEX < 0x030A0000
static inline PyObject *Py_NewRef(PyObject *o)
{
    Py_INCREF(o);
    return o;
}
#endif

#include "common.h"
#include "hash.h"

/* The few Python callables the binding needs from the package that wraps it
 * (the binding never imports ling_bloom: the package hands them over once, at
 * import, with _core._set_hooks; their names are lb_hook_names in state.c). */
typedef enum {
    LB_HOOK_ATOMIC_WRITE,      /* atomic_write(path, data): save() */
    LB_HOOK_READ_FILE,         /* read_file(path) -> bytes: load() */
    LB_HOOK_UMASK,             /* umask() -> int: MemoryFilter.open's new file */
    LB_HOOK_HTML,              /* html(filter) -> str: _repr_html_ */
    LB_HOOK_CONNECTION_KWARGS, /* connection_kwargs(client) -> dict: from_redis */
    LB_HOOK_BLOOM_INFO,        /* bloom_info(capacity, size, filters, items,
                                  expansion): RedisBloomFilter.info() */
    LB_HOOK_COUNT
} lb_hook_id;

/* Nothing but PyObject pointers: module.c visits and clears them as an array.
 * The exceptions are made from the table in errors.c. */
typedef struct {
    PyTypeObject *MemoryFilter;
    PyTypeObject *CountingFilter;
    PyTypeObject *ScalableFilter;
    PyTypeObject *RedisFilter;
    PyTypeObject *RedisBloomFilter;
    PyTypeObject *BlockedFilter;
    PyTypeObject *BoolArray;
    PyObject *BloomError;
    PyObject *ClosedError;
    PyObject *InvalidCapacityError;
    PyObject *InvalidFalsePositiveRateError;
    PyObject *EmptyKeyError;
    PyObject *NotSupportedError;
    PyObject *GeometryMismatchError;
    PyObject *CorruptFileError;
    PyObject *RedisError;
    PyObject *RedisConnectionError;
    PyObject *RedisTimeoutError;
    PyObject *RedisResponseError;
    PyObject *WrongTypeError;
    PyObject *FilterFullError;
    PyObject *ModuleMissingError;
    PyObject *FilterNotFoundError;
    PyObject *KeyNotOwnedError;
    PyObject *FilterLostError;
    PyObject *RedisProtocolError;
    PyObject *EvictionWarning;
    PyObject *hooks[LB_HOOK_COUNT];
} lb_state;

/* The definition of the module whose state lb_state_from_type finds: set once,
 * by PyInit__core, before any type exists. */
void lb_state_set_def(PyModuleDef *def);

/* The state of the module that defined type (or one of its bases: a Python
 * subclass of a filter has no module of its own).  NULL with TypeError for a
 * type that is none of ours. */
lb_state *lb_state_from_type(PyTypeObject *type);

/* The hook's callable (borrowed), or NULL with RuntimeError when the package
 * has not handed it over (the module imported outside ling_bloom). */
PyObject *lb_hook(lb_state *st, lb_hook_id which);

/* _core._set_hooks(**hooks): the package hands its callables over (keyword
 * names as lb_hook_id's comments; an unknown name or a non-callable is a
 * TypeError, and nothing is set). */
PyObject *lb_set_hooks(PyObject *module, PyObject *args, PyObject *kwargs);

#endif
