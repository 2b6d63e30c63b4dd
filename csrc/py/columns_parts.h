/* columns_parts.h: what the parts of a column call of each other: columns.c
 * (keys, checks, a buffer of integers, array-likes) and columns_arrow.c (Arrow
 * arrays and streams). */
#ifndef LB_PY_COLUMNS_PARTS_H
#define LB_PY_COLUMNS_PARTS_H

#include "columns.h"

/* A new, zeroed segment at the end of c's; NULL with MemoryError. */
lb_col_seg *lb_column_add_seg(lb_column *c);

/* The exporter's call failed: -2 (the iterable path decides) when it could
 * not make Arrow (or a numpy array) of the object, else -1 (the exception
 * stands). */
int lb_column_export_failed(void);

/* obj's Arrow array (__arrow_c_array__) or stream (__arrow_c_stream__) into
 * c: 0, -1 with an exception, or -2 (no Arrow of it: the iterable path
 * decides).  c is the caller's to close either way. */
int lb_column_open_arrow_array(lb_column *c, PyObject *obj);
int lb_column_open_arrow_stream(lb_column *c, PyObject *obj);

#endif
