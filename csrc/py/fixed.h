/* fixed.h: what the fixed-size types share (MemoryFilter, CountingFilter,
 * BlockedFilter): the object's common part, construction and close, the
 * single-key calls, the batches, reset, ==, the statistics, the geometry
 * getters, the saved format, repr, and copy, union and intersection with their
 * operators.  Each type supplies an lb_fixed_impl: its storage operations. */
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
    uint64_t *cells_used;  /* bits set, or counters above zero */
    const struct lb_fixed_impl_s *impl;
} lb_fixed_filter;

/* What differs between the fixed types: a table of storage operations, each a
 * call into csrc/core.  Every method written on top of them (add, test, in,
 * reset, ==, copy, union, the batches, to_bytes, from_bytes, nbytes, ...) is
 * fixed.c's, once for the three types.
 *
 * The storage holds m cells, ceil(m / cells_per_byte) bytes at cells_of(f)
 * (NULL once released).  init allocates it for m cells and points cells_used at
 * its count; release frees it. */
typedef struct lb_fixed_impl_s {
    const char *name;        /* "MemoryFilter" */
    const char *cells;       /* "bits", "counters" (for messages) */
    unsigned cells_per_byte;
    int saved_kind;          /* LB_KIND_MEMORY, ... (to_bytes, from_bytes) */
    /* The offset in lb_state of the type (union, ==: both sides must be of it). */
    size_t type_slot;
    /* tp_new's arguments (NULL: lb_parse_fixed_args). */
    int (*parse_args)(lb_state *st, PyObject *args, PyObject *kwargs, lb_fixed_args *out);
    lb_status (*init)(lb_fixed_filter *f, uint64_t m);
    void (*release)(lb_base *b);
    /* Storage other processes change (a mapped file, not this object's memory):
     * bring *cells_used of f (of this impl's storage layout) up to date before it
     * is read (NULL: this process's count is exact). */
    void (*recount)(lb_fixed_filter *f);
    uint8_t *(*cells_of)(const lb_fixed_filter *f);
    /* One key's bytes (not empty), with the GIL held and no Python code run:
     * 1 when it was absent (add) / is present (test). */
    int (*add_key)(lb_fixed_filter *f, const void *key, size_t len);
    int (*test_key)(const lb_fixed_filter *f, const void *key, size_t len);
    /* Batches of hash pairs hashed with key_scheme (LB_FIXED_OWN_SCHEME: the
     * filter's own), one byte of out per pair (out may be NULL for add). */
    int key_scheme;
    void (*add_hashed)(lb_fixed_filter *f, const lb_hash_pair *pairs, size_t n, uint8_t *out);
    void (*test_hashed)(const lb_fixed_filter *f, const lb_hash_pair *pairs, size_t n,
                        uint8_t *out);
    void (*clear)(lb_fixed_filter *f);
    /* dst |= src / dst &= src (OR and AND of bits; saturating sum and minimum of
     * counters); same geometry, both entered. */
    void (*merge)(lb_fixed_filter *dst, const lb_fixed_filter *src, int is_union);
    /* The saved payload (nbytes long): export gives it (NULL: cells_of; a buffer
     * it allocated goes to *to_free; NULL with nothing allocated: no memory),
     * import fills a new filter's storage from it and counts its cells. */
    const uint8_t *(*export)(const lb_fixed_filter *f, uint8_t **to_free);
    void (*import)(lb_fixed_filter *f, const uint8_t *payload, size_t len);
    /* The impl of a copy or a union's result (NULL: this one; a mapped file's
     * copy is a filter in memory), and the bytes its allocation holds past
     * nbytes (__sizeof__). */
    const struct lb_fixed_impl_s *copy_impl;
    size_t alloc_slack;
} lb_fixed_impl;

#define LB_FIXED_OWN_SCHEME (-1)

/* The three types' tables (memory_filter.c, blocked_filter.c, counting_filter.c). */
extern const lb_fixed_impl lb_memory_impl;
extern const lb_fixed_impl lb_blocked_impl;
extern const lb_fixed_impl lb_counting_impl;

/* A new, empty filter of a fixed type (type may be a subclass); NULL with an
 * exception (MemoryError saying how many bytes it asked for). */
lb_fixed_filter *lb_fixed_new(PyTypeObject *type, const lb_fixed_args *a,
                              const lb_fixed_impl *impl);
/* The impl of a fixed type or a subclass of one (NULL: none). */
const lb_fixed_impl *lb_fixed_impl_of(lb_state *st, PyTypeObject *type);
/* tp_new, tp_dealloc, tp_traverse and close() of a fixed type. */
PyObject *lb_fixed_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs);
void lb_fixed_dealloc(PyObject *self);
int lb_fixed_traverse(PyObject *self, visitproc visit, void *arg);
PyObject *lb_fixed_close(PyObject *self, PyObject *unused);

/* Single keys: add(key), test(key) and `key in f` (sq_contains) through the
 * impl's add_key and test_key. */
PyObject *lb_fixed_add(PyObject *self, PyObject *key);
PyObject *lb_fixed_test(PyObject *self, PyObject *key);
int lb_fixed_contains(PyObject *self, PyObject *key);
/* Convert key, enter the filter (for a read, or not) and hash it with the
 * filter's scheme: 0 (the caller leaves with lb_leave), or -1 with an
 * exception (for a type's own single-key methods: CountingFilter.remove). */
int lb_fixed_enter_hashed(lb_fixed_filter *f, PyObject *key, int read_only, lb_hash_pair *h);

/* reset(), ==/!= (tp_richcompare), to_bytes(), from_bytes() (a class method),
 * __sizeof__ and the getters nbytes and bits_set (cells in use). */
PyObject *lb_fixed_reset(PyObject *self, PyObject *unused);
PyObject *lb_fixed_richcompare(PyObject *self, PyObject *other, int op);
PyObject *lb_fixed_to_bytes_method(PyObject *self, PyObject *unused);
PyObject *lb_fixed_from_bytes(PyObject *cls, PyObject *data);
PyObject *lb_fixed_sizeof(PyObject *self, PyObject *unused);
PyObject *lb_fixed_get_nbytes(PyObject *self, void *unused);
PyObject *lb_fixed_get_cells_used(PyObject *self, void *unused);

/* The storage's size in bytes: ceil(m / cells_per_byte). */
static inline size_t lb_fixed_nbytes(const lb_fixed_filter *f)
{
    return (size_t)((f->args.m + f->impl->cells_per_byte - 1) / f->impl->cells_per_byte);
}

/* A new filter of src's type and geometry holding src's cells (src entered). */
lb_fixed_filter *lb_fixed_copy_of(lb_fixed_filter *src);

/* The batch table of every fixed type (through the impl's add_hashed,
 * test_hashed and key_scheme). */
extern const lb_batch_ops lb_fixed_batch;

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
 * (through their impl's storage and merge).  The binary operators answer
 * NotImplemented unless both sides are of the impl's type. */
PyObject *lb_fixed_copy(PyObject *self, PyObject *unused);
PyObject *lb_fixed_union(PyObject *self, PyObject *other);
PyObject *lb_fixed_intersection(PyObject *self, PyObject *other);
PyObject *lb_fixed_nb_or(PyObject *a, PyObject *b);
PyObject *lb_fixed_nb_and(PyObject *a, PyObject *b);
PyObject *lb_fixed_nb_ior(PyObject *a, PyObject *b);
PyObject *lb_fixed_nb_iand(PyObject *a, PyObject *b);

#endif
