/* fixed.h: what the fixed-size types share (MemoryFilter, CountingFilter,
 * BlockedFilter): the object's common part, construction and close, the
 * statistics, the geometry getters, the saved format, repr, and copy, union
 * and intersection with their operators.  Each type supplies an lb_fixed_impl:
 * its storage, and how to copy and merge it. */
#ifndef LB_PY_FIXED_H
#define LB_PY_FIXED_H

#include "args.h"
#include "base.h"
#include "batch.h"
#include "format.h"

struct lb_fixed_impl_s;

/* The part of a fixed type that is the same: the base, the arguments it was
 * built from and the geometry. */
typedef struct {
    lb_base base;
    lb_fixed_args args;
    lb_geometry geo;
    const uint64_t *cells_used;  /* bits set, or counters above zero */
    const struct lb_fixed_impl_s *impl;
} lb_fixed_filter;

/* What differs between the fixed types: their storage (allocated for m cells
 * by init, which also points cells_used at its count; freed by release), how
 * many cells a byte holds, and their batch table. */
typedef struct lb_fixed_impl_s {
    const char *name;        /* "MemoryFilter" */
    const char *cells;       /* "bits", "counters" (for messages) */
    unsigned cells_per_byte;
    lb_status (*init)(lb_fixed_filter *f, uint64_t m);
    void (*release)(lb_base *b);
    const lb_batch_ops *batch;
    /* Storage other processes change (a mapped file): bring *cells_used up to
     * date before it is read (NULL: this process's count is exact). */
    void (*recount)(lb_fixed_filter *f);
    /* Union and intersection (lb_fixed_union, ...): the offset in lb_state of the
     * type both sides must be, a new filter with src's contents (src entered), and
     * dst |= src / dst &= src (OR and AND of bits; saturating sum and minimum of
     * counters). */
    size_t type_slot;
    lb_fixed_filter *(*copy)(lb_fixed_filter *src);
    void (*merge)(lb_fixed_filter *dst, const lb_fixed_filter *src, int is_union);
} lb_fixed_impl;

/* A new, empty filter of a fixed type (type may be a subclass); NULL with an
 * exception (MemoryError saying how many bytes it asked for). */
lb_fixed_filter *lb_fixed_new(PyTypeObject *type, const lb_fixed_args *a,
                              const lb_fixed_impl *impl);
/* tp_new, tp_dealloc, tp_traverse and close() of a fixed type. */
PyObject *lb_fixed_type_new(PyTypeObject *type, PyObject *args, PyObject *kwargs,
                            const lb_fixed_impl *impl);
void lb_fixed_dealloc(PyObject *self);
int lb_fixed_traverse(PyObject *self, visitproc visit, void *arg);
PyObject *lb_fixed_close(PyObject *self, PyObject *unused);

/* The key_scheme of lb_batch_ops for an lb_fixed_filter: its geometry's. */
lb_hash_scheme lb_fixed_key_scheme(lb_base *b);

/* approximate_count(), fill_ratio() and current_error_rate() of an
 * lb_fixed_filter, from m, k and *cells_used. */
PyObject *lb_fixed_approximate_count(PyObject *self, PyObject *unused);
PyObject *lb_fixed_fill_ratio(PyObject *self, PyObject *unused);
PyObject *lb_fixed_current_error_rate(PyObject *self, PyObject *unused);

/* Getters for m, k, hash, capacity, error_rate: the closure of their
 * PyGetSetDef is the offset of the object's lb_fixed_args (LB_FIXED_ARGS for
 * an lb_fixed_filter). */
#define LB_FIXED_ARGS ((void *)offsetof(lb_fixed_filter, args))
PyObject *lb_fixed_get_m(PyObject *self, void *offset);
PyObject *lb_fixed_get_k(PyObject *self, void *offset);
PyObject *lb_fixed_get_hash(PyObject *self, void *offset);
PyObject *lb_fixed_get_capacity(PyObject *self, void *offset);
PyObject *lb_fixed_get_error_rate(PyObject *self, void *offset);

/* to_bytes of a fixed filter: f's args, saved_kind (LB_KIND_MEMORY, ...) and
 * the payload. */
PyObject *lb_fixed_to_bytes(lb_fixed_filter *f, int saved_kind, const uint8_t *payload,
                            size_t len);
/* Parse a saved fixed filter of saved_kind: fills args and returns the payload
 * through view (held on success; the caller releases it).  -1 with
 * CorruptFileError (a ValueError) on any problem. */
int lb_fixed_read(lb_state *st, PyObject *data, Py_buffer *view, int saved_kind,
                  const char *type_name, lb_fixed_args *args, const uint8_t **payload,
                  size_t *len);

/* "<MemoryFilter m=... k=... hash=... extra>" style repr. */
PyObject *lb_fixed_repr(lb_fixed_filter *f, const char *extra);

/* For union, intersection and ==: check that other is a filter of type (the
 * type of self's impl) with the same m, k and hash (TypeError /
 * GeometryMismatchError), and enter both.  0: the caller leaves both with
 * lb_fixed_leave2. */
int lb_fixed_enter_like(lb_fixed_filter *self, PyObject *other, PyTypeObject *type);
void lb_fixed_leave2(PyObject *a, PyObject *b);

/* What the fixed types share for copy(), union(), intersection(), |, &, |= and &=
 * (through their impl's copy and merge).  The binary operators answer
 * NotImplemented unless both sides are of the impl's type. */
PyObject *lb_fixed_copy(PyObject *self, PyObject *unused);
PyObject *lb_fixed_union(PyObject *self, PyObject *other);
PyObject *lb_fixed_intersection(PyObject *self, PyObject *other);
PyObject *lb_fixed_nb_or(PyObject *a, PyObject *b);
PyObject *lb_fixed_nb_and(PyObject *a, PyObject *b);
PyObject *lb_fixed_nb_ior(PyObject *a, PyObject *b);
PyObject *lb_fixed_nb_iand(PyObject *a, PyObject *b);

#endif
