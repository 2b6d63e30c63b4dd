/* module.h: everything the binding's files share, in one include.
 *
 * The parts, each with its own header and file:
 *   state.h     the module state (types, exceptions) and finding it from a type
 *   errors.h    the exception table and the one status -> exception map
 *   base.h      the base of every filter: enter/leave, GIL-free sections, fork,
 *               close() and the context manager, len() and truth
 *   args.h      argument parsing: hash names, numbers, a fixed filter's geometry
 *   keys.h      Python objects -> keys
 *   batch.h     add_many / update / test_many and the batch drivers
 *   saveload.h  the saved format read back, save/load, pickling, _repr_html_
 *   fixed.h     what MemoryFilter, CountingFilter and BlockedFilter share
 *   filters.h   the types, one file each (module.c registers them)
 *   functions.h the module-level functions
 * A file may include just the parts it uses; none of them includes this one. */
#ifndef LB_PY_MODULE_H
#define LB_PY_MODULE_H

#include "state.h"
#include "errors.h"
#include "base.h"
#include "args.h"
#include "keys.h"
#include "batch.h"
#include "saveload.h"
#include "fixed.h"
#include "filters.h"
#include "functions.h"

#endif
