/* functions.h: the module-level functions of ling_bloom._core. */
#ifndef LB_PY_FUNCTIONS_H
#define LB_PY_FUNCTIONS_H

#include "state.h"

/* The module's method table: _set_hooks (state.c), _saved_length, estimate, geometry, indices,
 * hash_pair, key_bytes, _key (the module state is an lb_state). */
extern PyMethodDef lb_module_functions[];

#endif
