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
} lb_state;

/* The definition of the module whose state lb_state_from_type finds: set once,
 * by PyInit__core, before any type exists. */
void lb_state_set_def(PyModuleDef *def);

/* The state of the module that defined type (or one of its bases: a Python
 * subclass of a filter has no module of its own).  NULL with TypeError for a
 * type that is none of ours. */
lb_state *lb_state_from_type(PyTypeObject *type);

#endif
