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

static const lb_fixed_impl CountingFilter_impl;

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

static PyObject *CountingFilter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    return lb_fixed_type_new(type, args, kwargs, &CountingFilter_impl);
}

/* Convert the key, enter the filter and hash: 0 (the caller leaves), or -1
 * with an exception. */
static int CountingFilter_prepare(CountingFilter *f, PyObject *key, lb_hash_pair *h, int read_only)
{
    lb_key k;
    lb_key_hold hold;
    if (lb_key_enter(&f->f.base, key, &k, &hold, read_only) < 0)
        return -1;
    *h = lb_hash(f->f.geo.scheme, k.data, k.len);
    lb_key_release(&hold);
    return 0;
}

static PyObject *CountingFilter_add(PyObject *self, PyObject *key)
{
    lb_hash_pair h;
    if (CountingFilter_prepare(AS_COUNTING(self), key, &h, 0) < 0)
        return NULL;
    int r = lb_counters_add(&AS_COUNTING(self)->c, &AS_COUNTING(self)->f.geo, h);
    lb_leave(&AS_COUNTING(self)->f.base);
    return PyBool_FromLong(r);
}

static int CountingFilter_contains(PyObject *self, PyObject *key)
{
    lb_hash_pair h;
    if (CountingFilter_prepare(AS_COUNTING(self), key, &h, 1) < 0)
        return -1;
    int r = lb_counters_test(&AS_COUNTING(self)->c, &AS_COUNTING(self)->f.geo, h);
    lb_leave(&AS_COUNTING(self)->f.base);
    return r;
}

static PyObject *CountingFilter_test(PyObject *self, PyObject *key)
{
    int r = CountingFilter_contains(self, key);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyObject *CountingFilter_discard(PyObject *self, PyObject *key)
{
    lb_hash_pair h;
    if (CountingFilter_prepare(AS_COUNTING(self), key, &h, 0) < 0)
        return NULL;
    int r = lb_counters_remove(&AS_COUNTING(self)->c, &AS_COUNTING(self)->f.geo, h);
    lb_leave(&AS_COUNTING(self)->f.base);
    return PyBool_FromLong(r);
}

static PyObject *CountingFilter_remove(PyObject *self, PyObject *key)
{
    lb_hash_pair h;
    if (CountingFilter_prepare(AS_COUNTING(self), key, &h, 0) < 0)
        return NULL;
    int r = lb_counters_remove(&AS_COUNTING(self)->c, &AS_COUNTING(self)->f.geo, h);
    lb_leave(&AS_COUNTING(self)->f.base);
    if (!r) {
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *CountingFilter_count(PyObject *self, PyObject *key)
{
    lb_hash_pair h;
    if (CountingFilter_prepare(AS_COUNTING(self), key, &h, 1) < 0)
        return NULL;
    unsigned long n = lb_counters_count(&AS_COUNTING(self)->c, &AS_COUNTING(self)->f.geo, h);
    lb_leave(&AS_COUNTING(self)->f.base);
    return PyLong_FromUnsignedLong(n);
}

static lb_status CountingFilter_add_hashed(lb_base *b, const lb_hash_pair *pairs, size_t n,
                                           uint8_t *out, size_t *done)
{
    CountingFilter *f = (CountingFilter *)b;
    lb_counters_add_hashed(&f->c, &f->f.geo, pairs, n, out);
    *done = n;
    return LB_OK;
}

static lb_status CountingFilter_test_hashed(lb_base *b, const lb_hash_pair *pairs, size_t n,
                                            uint8_t *out, size_t *done)
{
    CountingFilter *f = (CountingFilter *)b;
    lb_counters_test_hashed(&f->c, &f->f.geo, pairs, n, out);
    *done = n;
    return LB_OK;
}

static const lb_batch_ops CountingFilter_batch = {
    .add_hashed = CountingFilter_add_hashed,
    .test_hashed = CountingFilter_test_hashed,
    .key_scheme = lb_fixed_key_scheme,
};
static lb_fixed_filter *CountingFilter_impl_copy(lb_fixed_filter *f);
static void CountingFilter_merge(lb_fixed_filter *dst, const lb_fixed_filter *src, int is_union);
static const lb_fixed_impl CountingFilter_impl = {
    .name = "CountingFilter",
    .cells = "counters",
    .cells_per_byte = 2,
    .init = CountingFilter_init,
    .release = CountingFilter_release,
    .batch = &CountingFilter_batch,
    .recount = NULL,
    .type_slot = offsetof(lb_state, CountingFilter),
    .copy = CountingFilter_impl_copy,
    .merge = CountingFilter_merge,
};

static PyObject *CountingFilter_reset(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (lb_enter(&AS_COUNTING(self)->f.base) < 0)
        return NULL;
    lb_counters_clear(&AS_COUNTING(self)->c);
    lb_leave(&AS_COUNTING(self)->f.base);
    Py_RETURN_NONE;
}

static PyObject *CountingFilter_nbytes(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong((AS_COUNTING(self)->c.m + 1) / 2);
}

static lb_fixed_filter *CountingFilter_impl_copy(lb_fixed_filter *f)
{
    CountingFilter *src = (CountingFilter *)f;
    CountingFilter *dst = (CountingFilter *)
        lb_fixed_new(Py_TYPE(src), &src->f.args, &CountingFilter_impl);
    if (dst) {
        memcpy(dst->c.data, src->c.data, (size_t)src->c.nbytes);
        dst->c.nonzero = src->c.nonzero;
    }
    return (lb_fixed_filter *)dst;
}

/* Union: the saturating sum of the counters; intersection: their minimum. */
static void CountingFilter_merge(lb_fixed_filter *dst, const lb_fixed_filter *src, int is_union)
{
    lb_counters_merge(&((CountingFilter *)dst)->c, &((const CountingFilter *)src)->c, is_union);
}

static PyObject *CountingFilter_richcompare(PyObject *self, PyObject *other, int op)
{
    lb_state *st = AS_COUNTING(self)->f.base.st;
    if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(other, st->CountingFilter))
        Py_RETURN_NOTIMPLEMENTED;
    /* A filter is itself, open or closed: identity answers without the storage.
     * A closed filter against another one raises ClosedError (lb_enter2). */
    if (self == other)
        return PyBool_FromLong(op == Py_EQ);
    CountingFilter *a = AS_COUNTING(self), *b = AS_COUNTING(other);
    if (lb_enter2(&a->f.base, &b->f.base) < 0)
        return NULL;
    int eq = a->f.args.m == b->f.args.m && a->f.args.k == b->f.args.k &&
             a->f.args.scheme == b->f.args.scheme &&
             memcmp(a->c.data, b->c.data, (size_t)a->c.nbytes) == 0;
    lb_leave(&a->f.base);
    lb_leave(&b->f.base);
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static PyObject *CountingFilter_to_bytes(PyObject *self, PyObject *unused)
{
    (void)unused;
    CountingFilter *f = AS_COUNTING(self);
    if (lb_enter(&f->f.base) < 0)
        return NULL;
    PyObject *r = lb_fixed_to_bytes(&f->f, LB_KIND_COUNTING, f->c.data, (size_t)f->c.nbytes);
    lb_leave(&f->f.base);
    return r;
}

static PyObject *CountingFilter_from_bytes(PyObject *cls, PyObject *data)
{
    lb_state *st = lb_state_from_type((PyTypeObject *)cls);
    if (!st)
        return NULL;
    Py_buffer view;
    lb_fixed_args a;
    const uint8_t *payload;
    size_t len;
    if (lb_fixed_read(st, data, &view, LB_KIND_COUNTING, "CountingFilter", &a, &payload, &len) <
        0)
        return NULL;
    CountingFilter *f = (CountingFilter *)
        lb_fixed_new((PyTypeObject *)cls, &a, &CountingFilter_impl);
    if (f) {
        memcpy(f->c.data, payload, len);
        lb_counters_recount(&f->c);
    }
    PyBuffer_Release(&view);
    return (PyObject *)f;
}

static PyObject *CountingFilter_repr(PyObject *self)
{
    char extra[64];
    PyOS_snprintf(extra, sizeof(extra), "cells_used=%llu",
                  (unsigned long long)AS_COUNTING(self)->c.nonzero);
    return lb_fixed_repr(&AS_COUNTING(self)->f, extra);
}

static PyMethodDef CountingFilter_methods[] = {
    {"add", CountingFilter_add, METH_O,
     "add(key) -> bool\n\nAdd key (its counters go up); True when it was not present."},
    {"test", CountingFilter_test, METH_O, "test(key) -> bool"},
    {"remove", CountingFilter_remove, METH_O,
     "remove(key)\n\nRemove one occurrence of key; KeyError when it tests absent (nothing "
     "changes).  Counters at 15 are never decremented.  Remove only keys you added: removing "
     "a false positive can make other keys test absent."},
    {"discard", CountingFilter_discard, METH_O,
     "discard(key) -> bool\n\nremove() without the KeyError; True when something was removed."},
    {"count", CountingFilter_count, METH_O,
     "count(key) -> int\n\nThe smallest of key's counters (0..15)."},
    LB_BATCH_METHOD_DEFS,
    {"reset", CountingFilter_reset, METH_NOARGS, "reset()"},
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
    {"__copy__", lb_fixed_copy, METH_NOARGS, NULL},
    {"to_bytes", CountingFilter_to_bytes, METH_NOARGS, "to_bytes() -> bytes"},
    {"from_bytes", CountingFilter_from_bytes, METH_O | METH_CLASS,
     "from_bytes(data) -> CountingFilter"},
    {"save", lb_save, METH_O,
     "save(path)\n\nWrite to_bytes() to path atomically (temporary file, fsync, rename), "
     "with the mode open() gives a new file (0o666 minus the umask); an OSError names path."},
    {"load", lb_load, METH_O | METH_CLASS, "load(path) -> CountingFilter"},
    {"_repr_html_", lb_repr_html, METH_NOARGS, NULL},
    {"__reduce__", lb_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef CountingFilter_getset[] = {
    {"m", lb_fixed_get_m, NULL, "number of counters", LB_FIXED_ARGS},
    {"k", lb_fixed_get_k, NULL, "number of hash functions", LB_FIXED_ARGS},
    {"hash", lb_fixed_get_hash, NULL, "hashing scheme", LB_FIXED_ARGS},
    {"capacity", lb_fixed_get_capacity, NULL, "the capacity it was sized for, or None", LB_FIXED_ARGS},
    {"error_rate", lb_fixed_get_error_rate, NULL, "the rate it was sized for, or None", LB_FIXED_ARGS},
    {"nbytes", CountingFilter_nbytes, NULL, "bytes of counters: ceil(m / 2)", NULL},
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
    {Py_tp_new, CountingFilter_new},
    {Py_tp_dealloc, lb_fixed_dealloc},
    {Py_tp_traverse, lb_fixed_traverse},
    {Py_tp_methods, CountingFilter_methods},
    {Py_tp_getset, CountingFilter_getset},
    {Py_tp_members, CountingFilter_members},
    {Py_tp_repr, CountingFilter_repr},
    {Py_tp_richcompare, CountingFilter_richcompare},
    {Py_tp_hash, PyObject_HashNotImplemented},
    {Py_sq_contains, CountingFilter_contains},
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
