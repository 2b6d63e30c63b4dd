/* filters.h: the filter types, each made by its own file from its spec. */
#ifndef LB_PY_FILTERS_H
#define LB_PY_FILTERS_H

#include "state.h"

/* A new heap type of the module; NULL with an exception. */
PyTypeObject *lb_memory_filter_type(PyObject *module);
PyTypeObject *lb_counting_filter_type(PyObject *module);
PyTypeObject *lb_scalable_filter_type(PyObject *module);
PyTypeObject *lb_blocked_filter_type(PyObject *module);
PyTypeObject *lb_redis_filter_type(PyObject *module);
PyTypeObject *lb_redisbloom_filter_type(PyObject *module);

#endif
