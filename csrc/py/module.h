/* module.h: what the binding's files share: the module state (types and
 * exceptions), the base every filter object starts with, and the mapping
 * from core status codes to Python exceptions. */
#ifndef LB_PY_MODULE_H
#define LB_PY_MODULE_H

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

typedef struct {
    PyTypeObject *MemoryFilter;
    PyTypeObject *CountingFilter;
    PyTypeObject *ScalableFilter;
    PyTypeObject *RedisFilter;
    PyTypeObject *RedisBloomFilter;
    PyTypeObject *BlockedFilter;
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
    PyObject *RedisProtocolError;
} lb_state;

extern PyModuleDef lb_module_def;

/* len(f): the estimated number of distinct keys, approximate_count() (card()
 * for RedisBloomFilter: BF.CARD), a round trip for the Redis types.  A filter
 * is always true (lb_bool_true), so `if f:` neither asks Redis nor depends on
 * the filter being empty. */
Py_ssize_t lb_len_approximate(PyObject *self);
Py_ssize_t lb_len_card(PyObject *self);
int lb_bool_true(PyObject *self);

/* The state of the module that defined type (or one of its bases). */
lb_state *lb_state_from_type(PyTypeObject *type);

/* Every filter object starts with this.
 *
 * The rule: every operation either completes against a live filter or raises
 * ClosedError.  One mechanism holds it: an operation enters the filter
 * (lb_enter: wait for a GIL-free section of another thread to end, check the
 * filter is open, claim it) and leaves it (lb_leave) when it no longer needs
 * its storage.  close() marks the filter closed at once, so later entries
 * raise ClosedError, and frees the storage when the last claim is given back:
 * an operation that entered never sees its storage freed under it, whatever
 * it waits for, allocates or calls on the way.
 *
 * GIL-free sections: single-key operations on in-memory filters run with the
 * GIL held and never release it.  A batch releases the GIL while it hashes and
 * probes a chunk of keys; for that chunk it holds `lock` and sets `busy`
 * (lb_busy_begin / lb_busy_end), as does a Redis round trip.  Entering waits
 * for the section to end (with the GIL released), except reads of a type whose
 * storage never moves (`reads_during_batch`): they go on, and see each bit of a
 * key being added either set or not yet set.  Between chunks a batch lets every
 * waiter in before it goes on, so a long warm-up does not stall request
 * threads.  Whatever the section leaves for the caller (an error text, a
 * count) is read before lb_busy_end, while no other thread can use the
 * object.
 *
 * Fork: a forked child has only the thread that called fork(), which held the
 * GIL, so no other thread of the child is inside the filter; but the parent's
 * threads may have been (waiting, claiming, or in a GIL-free section).  The
 * first entry in the child (lb_fork_generation changed) starts the lock state
 * afresh: a new lock (the old one is left alone, as CPython does with its
 * own), no waiters, no claims, not busy.  When another thread was in a
 * GIL-free section at the fork (busy was set), what it was changing is
 * suspect: the type's after_fork hook replaces it without touching it (the
 * Redis types abandon the connection and build a new one). */
struct lb_base_s;

/* How a type runs batches: its chunk functions (see keys.h), the GIL policy
 * and the keys per chunk.  add_many, update and test_many are then the same
 * methods for every type (lb_add_many_method, ... in keys.c).
 *
 * A type whose batches need only each key's hash pair gives add_hashed,
 * test_hashed and key_scheme (the scheme the pairs are hashed with): the batch
 * driver then reads and hashes every key in one pass and hands the chunks
 * pairs (lb_run_hashed_batch); add and test are then not used by the batch
 * methods.  They return LB_OK or a status as add and test do, *done telling
 * how many pairs they handled. */
typedef struct {
    lb_status (*add)(struct lb_base_s *self, const lb_key *keys, size_t n, uint8_t *out,
                     size_t *done);
    lb_status (*test)(struct lb_base_s *self, const lb_key *keys, size_t n, uint8_t *out,
                      size_t *done);
    int gil_always;   /* release the GIL for every chunk (network round trips) */
    /* out may be NULL for add_hashed (no per-key result wanted). */
    lb_status (*add_hashed)(struct lb_base_s *self, const lb_hash_pair *pairs, size_t n,
                            uint8_t *out, size_t *done);
    lb_status (*test_hashed)(struct lb_base_s *self, const lb_hash_pair *pairs, size_t n,
                             uint8_t *out, size_t *done);
    lb_hash_scheme (*key_scheme)(struct lb_base_s *self);
} lb_batch_ops;

typedef struct lb_base_s {
    PyObject_HEAD
    lb_state *st;
    PyThread_type_lock lock;
    int busy;
    unsigned long fork_generation;
    int waiters;
    long users;       /* operations that entered and have not left */
    int reads_during_batch;
    int closed;       /* close() was called: entering raises ClosedError */
    int released;     /* the storage is freed (closed and users == 0) */
    int read_only;    /* storage that must not change (a file mapped with mode "r"):
                         add, update, add_many, reset raise NotSupportedError */
    void (*release)(struct lb_base_s *self);  /* frees the storage; set by close() */
    /* In a forked child, when another thread of the parent was in a GIL-free
     * section on this filter: replace what it owned (may be NULL).  -1 with
     * an exception when that fails (the filter is then closed). */
    int (*after_fork)(struct lb_base_s *self);
    /* For filters backed by a server: sets the Python exception for the
     * LB_ERR_BACKEND a chunk returned (the details are in the object). */
    void (*raise_backend)(struct lb_base_s *self);
    const lb_batch_ops *batch;
    size_t chunk;     /* keys per chunk; 0: LB_CHUNK */
    PyObject *weakrefs;
} lb_base;

/* NotSupportedError for a change to a read-only filter; returns -1. */
int lb_read_only_error(lb_base *b);

/* Initialise the base in tp_new (allocates the lock). */
int lb_base_init(lb_base *b, PyTypeObject *type);
void lb_base_fini(lb_base *b);

/* Bumped in the child after every fork (pthread_atfork). */
extern unsigned long lb_fork_generation;

/* The slow path of lb_wait_open: a fork to recover from, or a GIL-free
 * section to wait for.  0, or -1 with an exception. */
int lb_base_wait(lb_base *b, int read_only);

static inline int lb_closed_error(lb_base *b)
{
    PyErr_SetString(b->st->ClosedError, "filter is closed");
    return -1;
}

/* 1 when an entry must first go through lb_base_wait: a fork to recover from,
 * or another thread's GIL-free section (unless read_only and the type allows
 * reads during one). */
static inline int lb_must_wait(const lb_base *b, int read_only)
{
    return b->fork_generation != lb_fork_generation ||
           (b->busy && !(read_only && b->reads_during_batch));
}

/* Wait for another thread's GIL-free section (unless read_only and the type
 * allows reads during one), then check the filter is open, without claiming
 * it: for the chunks of a batch that entered already.  0, or -1 with an
 * exception (ClosedError). */
static inline int lb_wait_open(lb_base *b, int read_only)
{
    if (lb_must_wait(b, read_only) && lb_base_wait(b, read_only) < 0)
        return -1;
    if (b->closed)
        return lb_closed_error(b);
    return 0;
}

/* Enter the filter: lb_wait_open, then claim it.  Every successful entry is
 * matched by one lb_leave.  0, or -1 with ClosedError (nothing claimed). */
static inline int lb_enter(lb_base *b)
{
    if (lb_wait_open(b, 0) < 0)
        return -1;
    b->users++;
    return 0;
}

/* lb_enter for an operation that only reads. */
static inline int lb_enter_read(lb_base *b)
{
    if (lb_wait_open(b, 1) < 0)
        return -1;
    b->users++;
    return 0;
}

/* Enter two filters (a and b may be the same object): returns when neither
 * is in another thread's GIL-free section at the same moment, both open and
 * both claimed.  0, or -1 with ClosedError and neither claimed. */
int lb_enter2(lb_base *a, lb_base *b);

/* Free the storage of a closed filter whose last claim was given back. */
void lb_base_release(lb_base *b);

static inline void lb_leave(lb_base *b)
{
    if (b->users > 0 && --b->users == 0 && b->closed && !b->released)
        lb_base_release(b);
}

/* Claim the filter for a GIL-free section (call with the GIL, after
 * lb_enter or lb_wait_open), and give it back (with the GIL; lets waiting
 * threads in first). */
void lb_busy_begin(lb_base *b);
void lb_busy_end(lb_base *b);

/* Raise the exception for a core status code; returns NULL. */
PyObject *lb_raise(lb_state *st, lb_status status, const char *detail);

/* Parse a hash= argument (None or "xxh3" or "ling-base"). */
int lb_parse_hash(PyObject *obj, lb_hash_scheme *out);

/* A wrong-typed number argument, in the one wording every type uses:
 * TypeError "<type_name>: <what> must be a number, not <type of obj>" ("not
 * None" for None; no "<type_name>: " when type_name is NULL).  Returns -1. */
int lb_arg_type_error(const char *type_name, const char *what, PyObject *obj);

/* Read a non-negative Python int (or a float that is a whole number) into a
 * uint64: exc, with what naming the argument, for a negative, fractional or
 * too large value; lb_arg_type_error for anything not a number (None, bool,
 * str, ...).  lb_parse_u64 is lb_parse_u64_arg of no type name. */
int lb_parse_u64_arg(const char *type_name, PyObject *obj, const char *what, PyObject *exc,
                     uint64_t *out);
int lb_parse_u64(PyObject *obj, const char *what, PyObject *exc, uint64_t *out);

/* A real number argument (a float, an int, anything with __float__; not a
 * bool, not None): lb_arg_type_error otherwise.  The range is the caller's. */
int lb_parse_double_arg(const char *type_name, PyObject *obj, const char *what, double *out);

/* k, which must be in 1..LB_MAX_K: InvalidCapacityError otherwise. */
int lb_parse_k(lb_state *st, const char *type_name, PyObject *obj, uint64_t *out);

/* The geometry arguments shared by MemoryFilter and CountingFilter:
 * (capacity, error_rate) or (m=, k=), and hash=. */
typedef struct {
    uint64_t m;
    uint32_t k;
    lb_hash_scheme scheme;
    int has_capacity;
    uint64_t capacity;
    double error_rate;
} lb_fixed_args;

int lb_parse_fixed_args(lb_state *st, PyObject *args, PyObject *kwargs, const char *type_name,
                        lb_fixed_args *out);
/* The same from objects (NULL = not given; None is a TypeError).  For filters
 * that may adopt a stored geometry, allow_none takes None as "not given" (but
 * not error_rate=None beside a capacity) and lets all four be absent: then 1
 * is returned and out holds only the hash. */
int lb_fixed_args_from(lb_state *st, PyObject *capacity, PyObject *error_rate, PyObject *m,
                       PyObject *k, PyObject *hash, const char *type_name, int allow_none,
                       lb_fixed_args *out);

/* The part of MemoryFilter and CountingFilter that is the same: the base,
 * the arguments they were built from and the geometry. */
struct lb_fixed_kind_s;

typedef struct {
    lb_base base;
    lb_fixed_args args;
    lb_geometry geo;
    const uint64_t *cells_used;  /* bits set, or counters above zero */
    const struct lb_fixed_kind_s *kind;
} lb_fixed_filter;

/* What differs between the fixed types: their storage (allocated for m cells
 * by init, which also points cells_used at its count; freed by release), how
 * many cells a byte holds, and their batch table. */
typedef struct lb_fixed_kind_s {
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
} lb_fixed_kind;

/* The key_scheme of lb_batch_ops for an lb_fixed_filter: its geometry's. */
lb_hash_scheme lb_fixed_key_scheme(lb_base *b);

/* What the fixed types share for copy(), union(), intersection(), |, &, |= and &=
 * (through their kind's copy and merge).  The binary operators answer
 * NotImplemented unless both sides are of the kind's type. */
PyObject *lb_fixed_copy(PyObject *self, PyObject *unused);
PyObject *lb_fixed_union(PyObject *self, PyObject *other);
PyObject *lb_fixed_intersection(PyObject *self, PyObject *other);
PyObject *lb_fixed_nb_or(PyObject *a, PyObject *b);
PyObject *lb_fixed_nb_and(PyObject *a, PyObject *b);
PyObject *lb_fixed_nb_ior(PyObject *a, PyObject *b);
PyObject *lb_fixed_nb_iand(PyObject *a, PyObject *b);

/* A new, empty filter of a fixed type (type may be a subclass); NULL with an
 * exception (MemoryError saying how many bytes it asked for). */
lb_fixed_filter *lb_fixed_new(PyTypeObject *type, const lb_fixed_args *a,
                              const lb_fixed_kind *kind);
/* tp_new, tp_dealloc, tp_traverse and close() of a fixed type. */
PyObject *lb_fixed_type_new(PyTypeObject *type, PyObject *args, PyObject *kwargs,
                            const lb_fixed_kind *kind);
void lb_fixed_dealloc(PyObject *self);
int lb_fixed_traverse(PyObject *self, visitproc visit, void *arg);
PyObject *lb_fixed_close(PyObject *self, PyObject *unused);

/* approximate_count(), fill_ratio() and current_error_rate() of an
 * lb_fixed_filter, from m, k and *cells_used. */
PyObject *lb_fixed_approximate_count(PyObject *self, PyObject *unused);
PyObject *lb_fixed_fill_ratio(PyObject *self, PyObject *unused);
PyObject *lb_fixed_current_error_rate(PyObject *self, PyObject *unused);

/* Getters for m, k, hash, capacity, error_rate: the closure of their
 * PyGetSetDef is the offset of the object's lb_fixed_args (LB_FIXED_ARGS for
 * an lb_fixed_filter). */
#define LB_FIXED_ARGS ((void *)offsetof(lb_fixed_filter, args))
PyObject *lb_fixed_get_m(PyObject *self, void *unused);
PyObject *lb_fixed_get_k(PyObject *self, void *unused);
PyObject *lb_fixed_get_hash(PyObject *self, void *unused);
PyObject *lb_fixed_get_capacity(PyObject *self, void *unused);
PyObject *lb_fixed_get_error_rate(PyObject *self, void *unused);
/* to_bytes of a fixed filter. */
PyObject *lb_fixed_to_bytes(lb_fixed_filter *f, int kind, const uint8_t *payload, size_t len);
/* Parse a saved fixed filter of the given kind: fills args and returns the
 * payload view through h.  -1 with ValueError set on any problem. */
#include "format.h"
int lb_read_saved(lb_state *st, PyObject *data, Py_buffer *view, lb_format_header *h, int kind);
int lb_fixed_read(lb_state *st, PyObject *data, Py_buffer *view, int kind, const char *type_name,
                  lb_fixed_args *args, const uint8_t **payload, size_t *len);
/* For union, intersection and ==: check that other is a filter of type (the
 * type of self's kind) with the same m, k and hash (TypeError /
 * GeometryMismatchError), and enter both.  0: the caller leaves both with
 * lb_fixed_leave2. */
int lb_fixed_enter_like(lb_fixed_filter *self, PyObject *other, PyTypeObject *type);
void lb_fixed_leave2(PyObject *a, PyObject *b);
/* "<MemoryFilter m=... k=... hash=...>" style repr. */
PyObject *lb_fixed_repr(lb_fixed_filter *f, const char *extra);

/* close(), __enter__, __exit__ and the `closed` property, shared by every
 * type; each type supplies its own release function. */
PyObject *lb_close_with(lb_base *b, void (*release)(lb_base *));
PyObject *lb_enter_method(PyObject *self, PyObject *unused);
PyObject *lb_exit_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *lb_closed_get(PyObject *self, void *unused);

/* _repr_html_ for notebooks: ling_bloom._display.html(self). */
PyObject *lb_repr_html(PyObject *self, PyObject *unused);

/* __reduce__ for pickle: (type(self).from_bytes, (self.to_bytes(),)). */
PyObject *lb_reduce(PyObject *self, PyObject *unused);

/* save(path) and load(path) in terms of to_bytes / from_bytes. */
PyObject *lb_save(PyObject *self, PyObject *path);
PyObject *lb_load(PyObject *cls, PyObject *path);

/* Types, each from its own file. */
PyTypeObject *lb_memory_filter_type(PyObject *module);
PyTypeObject *lb_counting_filter_type(PyObject *module);
PyTypeObject *lb_scalable_filter_type(PyObject *module);
PyTypeObject *lb_redis_filter_type(PyObject *module);
PyTypeObject *lb_redisbloom_filter_type(PyObject *module);
PyTypeObject *lb_blocked_filter_type(PyObject *module);

#endif
