/* counting_filter.c: CountingFilter, a Bloom filter of 4-bit saturating
 * counters that can remove keys. */
#include "errors.h"
#include "filters.h"
#include "fixed.h"
#include "keys.h"
#include "saveload.h"

#include <math.h>
#include <structmember.h>

#include "counters.h"
#include "params.h"

typedef struct {
    lb_fixed_filter f;
    lb_counters c;
} CountingFilter;

#define AS_COUNTING(o) ((CountingFilter *)(o))

/* ---- the storage operations (lb_fixed_impl) --------------------------------- */

static lb_status CountingFilter_init(lb_fixed_filter *f, uint64_t m)
{
    CountingFilter *self = (CountingFilter *)f;
    f->cells_used = &self->c.nonzero;
    return lb_counters_init(&self->c, m);
}

static void CountingFilter_release(lb_base *b)
{
    lb_counters_free(&((CountingFilter *)b)->c);
}

static uint8_t *CountingFilter_cells(const lb_fixed_filter *f)
{
    return ((const CountingFilter *)f)->c.data;
}

static int CountingFilter_add_key(lb_fixed_filter *f, const void *key, size_t len)
{
    return lb_counters_add(&AS_COUNTING(f)->c, &f->geo, lb_hash(f->geo.scheme, key, len));
}

static int CountingFilter_test_key(const lb_fixed_filter *f, const void *key, size_t len)
{
    return lb_counters_test(&((const CountingFilter *)f)->c, &f->geo,
                            lb_hash(f->geo.scheme, key, len));
}

static void CountingFilter_add_hashed(lb_fixed_filter *f, const lb_hash_pair *pairs, size_t n,
                                      uint8_t *out)
{
    lb_counters_add_hashed(&AS_COUNTING(f)->c, &f->geo, pairs, n, out);
}

static void CountingFilter_test_hashed(const lb_fixed_filter *f, const lb_hash_pair *pairs,
                                       size_t n, uint8_t *out)
{
    lb_counters_test_hashed(&((const CountingFilter *)f)->c, &f->geo, pairs, n, out);
}

static void CountingFilter_clear(lb_fixed_filter *f)
{
    lb_counters_clear(&AS_COUNTING(f)->c);
}

/* Union: the saturating sum of the counters; intersection: their minimum. */
static void CountingFilter_merge(lb_fixed_filter *dst, const lb_fixed_filter *src, int is_union)
{
    lb_counters_merge(&AS_COUNTING(dst)->c, &((const CountingFilter *)src)->c, is_union);
}

static void CountingFilter_import(lb_fixed_filter *f, const uint8_t *payload, size_t len)
{
    memcpy(AS_COUNTING(f)->c.data, payload, len);
    lb_counters_recount(&AS_COUNTING(f)->c);
}

const lb_fixed_impl lb_counting_impl = {
    .name = "CountingFilter",
    .cells = "counters",
    .cells_per_byte = 2,
    .saved_kind = LB_KIND_COUNTING,
    .type_slot = offsetof(lb_state, CountingFilter),
    .init = CountingFilter_init,
    .release = CountingFilter_release,
    .cells_of = CountingFilter_cells,
    .add_key = CountingFilter_add_key,
    .test_key = CountingFilter_test_key,
    .key_scheme = LB_FIXED_OWN_SCHEME,
    .add_hashed = CountingFilter_add_hashed,
    .test_hashed = CountingFilter_test_hashed,
    .clear = CountingFilter_clear,
    .merge = CountingFilter_merge,
    .import = CountingFilter_import,
};

/* ---- removing and counting: what only a counting filter has ------------------- */

static PyObject *CountingFilter_discard_unlocked(PyObject *self, PyObject *key)
{
    lb_hash_pair h;
    if (lb_fixed_enter_hashed(&AS_COUNTING(self)->f, key, 0, &h) < 0)
        return NULL;
    int r = lb_counters_remove(&AS_COUNTING(self)->c, &AS_COUNTING(self)->f.geo, h);
    lb_leave(&AS_COUNTING(self)->f.base);
    return PyBool_FromLong(r);
}

static LB_LOCKED_SELF(CountingFilter_discard)

static PyObject *CountingFilter_remove_unlocked(PyObject *self, PyObject *key)
{
    PyObject *r = CountingFilter_discard_unlocked(self, key);
    if (r == Py_False) {
        Py_DECREF(r);
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_NONE;
}

static LB_LOCKED_SELF(CountingFilter_remove)

static PyObject *CountingFilter_count_unlocked(PyObject *self, PyObject *key)
{
    lb_hash_pair h;
    if (lb_fixed_enter_hashed(&AS_COUNTING(self)->f, key, 1, &h) < 0)
        return NULL;
    unsigned long n = lb_counters_count(&AS_COUNTING(self)->c, &AS_COUNTING(self)->f.geo, h);
    lb_leave(&AS_COUNTING(self)->f.base);
    return PyLong_FromUnsignedLong(n);
}

static LB_LOCKED_SELF(CountingFilter_count)

static PyObject *CountingFilter_repr_unlocked(PyObject *self)
{
    char extra[64];
    PyOS_snprintf(extra, sizeof(extra), "cells_used=%llu",
                  (unsigned long long)AS_COUNTING(self)->c.nonzero);
    return lb_fixed_repr(&AS_COUNTING(self)->f, extra);
}

static LB_LOCKED_REPR(CountingFilter_repr)

static PyMethodDef CountingFilter_methods[] = {
    {"add", lb_fixed_add, METH_O,
     "add(key) -> bool\n\nAdd key (its counters go up); True when it was not present."},
    {"test", lb_fixed_test, METH_O, "test(key) -> bool"},
    {"remove", CountingFilter_remove, METH_O,
     "remove(key)\n\nRemove one occurrence of key; KeyError when it tests absent (nothing "
     "changes).  Counters at 15 are never decremented.  Remove only keys you added: removing "
     "a false positive can make other keys test absent."},
    {"discard", CountingFilter_discard, METH_O,
     "discard(key) -> bool\n\nremove() without the KeyError; True when something was removed."},
    {"count", CountingFilter_count, METH_O,
     "count(key) -> int\n\nThe smallest of key's counters (0..15)."},
    LB_BATCH_METHOD_DEFS,
    {"reset", lb_fixed_reset, METH_NOARGS, "reset()"},
    {"close", lb_fixed_close, METH_NOARGS, "close()"},
    {"__enter__", lb_enter_method, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))lb_exit_method, METH_FASTCALL, NULL},
    {"approximate_count", lb_fixed_approximate_count, METH_NOARGS,
     "approximate_count() -> int\n\nDistinct keys held, estimated from the cells in use."},
    {"fill_ratio", lb_fixed_fill_ratio, METH_NOARGS, "fill_ratio() -> float\n\nCells above 0 / m."},
    {"current_error_rate", lb_fixed_current_error_rate, METH_NOARGS,
     "current_error_rate() -> float\n\nfill_ratio() ** k."},
    {"union", lb_fixed_union, METH_O,
     "union(other) -> CountingFilter (also a | b, a |= b)\n\nThe saturating sum of the "
     "counters: the filter that had every add of both (same m, k and hash), so remove() "
     "stays sound; a key in both counts twice."},
    {"intersection", lb_fixed_intersection, METH_O,
     "intersection(other) -> CountingFilter (also a & b, a &= b)\n\nThe smaller of each "
     "pair of counters: every key of both tests present, and removing one of them keeps "
     "the others present."},
    {"copy", lb_fixed_copy, METH_NOARGS, "copy() -> CountingFilter"},
    {"__copy__", lb_dunder_copy, METH_NOARGS, NULL},
    {"to_bytes", lb_fixed_to_bytes_method, METH_NOARGS, "to_bytes() -> bytes"},
    {"from_bytes", lb_fixed_from_bytes, METH_O | METH_CLASS,
     "from_bytes(data) -> CountingFilter"},
    {"save", lb_save, METH_O,
     "save(path)\n\nWrite to_bytes() to path atomically (temporary file, fsync, rename), "
     "with the mode open() gives a new file (0o666 minus the umask); an OSError names path."},
    {"load", lb_load, METH_O | METH_CLASS, "load(path) -> CountingFilter"},
    {"_repr_html_", lb_repr_html, METH_NOARGS, NULL},
    {"__reduce__", lb_reduce, METH_NOARGS, NULL},
    {"__sizeof__", lb_fixed_sizeof, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef CountingFilter_getset[] = {
    {"m", lb_fixed_get_m, NULL, "number of counters", LB_FIXED_ARGS},
    {"k", lb_fixed_get_k, NULL, "number of hash functions", LB_FIXED_ARGS},
    {"hash", lb_fixed_get_hash, NULL, "hashing scheme", LB_FIXED_ARGS},
    {"capacity", lb_fixed_get_capacity, NULL, "the capacity it was sized for, or None", LB_FIXED_ARGS},
    {"error_rate", lb_fixed_get_error_rate, NULL, "the rate it was sized for, or None", LB_FIXED_ARGS},
    {"nbytes", lb_fixed_get_nbytes, NULL, "bytes of counters: ceil(m / 2)", NULL},
    {"closed", lb_closed_get, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef CountingFilter_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(lb_base, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot CountingFilter_slots[] = {
    {Py_tp_doc, "CountingFilter(capacity, error_rate=0.01, *, hash=\"xxh3-mix\")\n"
                "CountingFilter(*, m, k, hash=\"xxh3-mix\")\n\n"
                "A Bloom filter of m 4-bit saturating counters (two per byte) that can remove "
                "keys."},
    {Py_tp_new, lb_fixed_tp_new},
    {Py_tp_dealloc, lb_fixed_dealloc},
    {Py_tp_traverse, lb_fixed_traverse},
    {Py_tp_methods, CountingFilter_methods},
    {Py_tp_getset, CountingFilter_getset},
    {Py_tp_members, CountingFilter_members},
    {Py_tp_repr, CountingFilter_repr},
    {Py_tp_richcompare, lb_fixed_richcompare},
    {Py_tp_hash, PyObject_HashNotImplemented},
    {Py_sq_contains, lb_fixed_contains},
    {Py_sq_length, lb_len_approximate},
    {Py_nb_bool, lb_bool_true},
    {Py_nb_or, lb_fixed_nb_or},
    {Py_nb_and, lb_fixed_nb_and},
    {Py_nb_inplace_or, lb_fixed_nb_ior},
    {Py_nb_inplace_and, lb_fixed_nb_iand},
    {0, NULL},
};

static PyType_Spec CountingFilter_spec = {
    .name = "ling_bloom.CountingFilter",
    .basicsize = sizeof(CountingFilter),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = CountingFilter_slots,
};

PyTypeObject *lb_counting_filter_type(PyObject *module)
{
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &CountingFilter_spec, NULL);
}
