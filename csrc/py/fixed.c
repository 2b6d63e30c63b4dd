/* fixed.c: what the fixed-size types share (see fixed.h). */
#include "fixed.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "errors.h"
#include "keys.h"
#include "params.h"
#include "saveload.h"

/* ---- construction and close ------------------------------------------------- */

#define LB_ARGS_AT(self, offset) ((const lb_fixed_args *)((const char *)(self) + (size_t)(offset)))

/* The type an impl is for. */
static PyTypeObject *impl_type(lb_state *st, const lb_fixed_impl *impl)
{
    return *(PyTypeObject **)((char *)st + impl->type_slot);
}

const lb_fixed_impl *lb_fixed_impl_of(lb_state *st, PyTypeObject *type)
{
    static const lb_fixed_impl *const impls[] = {&lb_memory_impl, &lb_blocked_impl,
                                                 &lb_counting_impl};
    for (size_t i = 0; i < sizeof(impls) / sizeof(impls[0]); i++) {
        PyTypeObject *t = impl_type(st, impls[i]);
        if (t && PyType_IsSubtype(type, t))
            return impls[i];
    }
    return NULL;
}

lb_fixed_filter *lb_fixed_new(PyTypeObject *type, const lb_fixed_args *a,
                              const lb_fixed_impl *impl)
{
    /* tp_alloc zeroes the object: the storage pointer is NULL until init. */
    lb_fixed_filter *f = (lb_fixed_filter *)type->tp_alloc(type, 0);
    if (!f)
        return NULL;
    f->impl = impl;
    if (lb_base_init(&f->base, type) < 0) {
        Py_DECREF(f);
        return NULL;
    }
    /* The storage never moves while the filter is open: tests may run
     * during another thread's batch. */
    f->base.reads_during_batch = 1;
    f->base.batch = &lb_fixed_batch;
    f->args = *a;
    lb_geometry_init(&f->geo, a->m, a->k, a->scheme);
    lb_status s = impl->init(f, a->m);
    if (s != LB_OK) {
        lb_state *st = f->base.st;
        char why[96];
        PyOS_snprintf(why, sizeof(why), "cannot allocate %llu bytes of %s (m = %llu)",
                      (unsigned long long)((a->m + impl->cells_per_byte - 1) /
                                           impl->cells_per_byte),
                      impl->cells, (unsigned long long)a->m);
        Py_DECREF(f);
        lb_raise(st, s, why);
        return NULL;
    }
    return f;
}

static PyObject *fixed_make(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    lb_state *st = lb_state_from_type(type);
    if (!st)
        return NULL;
    const lb_fixed_impl *impl = lb_fixed_impl_of(st, type);
    if (!impl)
        return PyErr_Format(PyExc_TypeError, "%s is not a fixed filter type", type->tp_name);
    lb_fixed_args a;
    if ((impl->parse_args ? impl->parse_args(st, args, kwargs, &a)
                          : lb_parse_fixed_args(st, args, kwargs, impl->name, &a)) < 0)
        return NULL;
    return (PyObject *)lb_fixed_new(type, &a, impl);
}

PyObject *lb_fixed_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *f = fixed_make(type, args, kwargs);
    return f ? f : lb_hint_subclass_new(type, lb_fixed_tp_new);
}

void lb_fixed_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    PyObject_GC_UnTrack(self);
    lb_base_fini(&f->base);
    if (f->impl)
        f->impl->release(&f->base);
    tp->tp_free(self);
    Py_DECREF(tp);
}

int lb_fixed_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyObject *lb_fixed_close_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    return lb_close_with(&f->base, f->impl->release);
}

LB_LOCKED_SELF(lb_fixed_close)

/* ---- single keys ----------------------------------------------------------- */

/* Any key, any state of the filter: the path lb_key_fast sends elsewhere. */
static LB_NOINLINE PyObject *fixed_add_full(lb_fixed_filter *f, PyObject *key)
{
    lb_key k;
    lb_key_hold hold;
    if (f->base.read_only)
        return lb_read_only_error(&f->base), NULL;
    if (lb_key_enter(&f->base, key, &k, &hold, 0) < 0)
        return NULL;
    int r = f->impl->add_key(f, k.data, k.len);
    lb_key_leave(&f->base, &hold);
    return Py_NewRef(r ? Py_True : Py_False);
}

static LB_NOINLINE int fixed_contains_full(lb_fixed_filter *f, PyObject *key)
{
    lb_key k;
    lb_key_hold hold;
    if (lb_key_enter(&f->base, key, &k, &hold, 1) < 0)
        return -1;
    int r = f->impl->test_key(f, k.data, k.len);
    lb_key_leave(&f->base, &hold);
    return r;
}

static PyObject *lb_fixed_add_unlocked(PyObject *self, PyObject *key)
{
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    const void *data;
    size_t len;
    if (LB_LIKELY(lb_key_fast(&f->base, key, 1, &data, &len)))
        return Py_NewRef(f->impl->add_key(f, data, len) ? Py_True : Py_False);
    return fixed_add_full(f, key);
}

LB_LOCKED_SELF(lb_fixed_add)

static int lb_fixed_contains_unlocked(PyObject *self, PyObject *key)
{
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    const void *data;
    size_t len;
    if (LB_LIKELY(lb_key_fast(&f->base, key, 0, &data, &len)))
        return f->impl->test_key(f, data, len);
    return fixed_contains_full(f, key);
}

LB_LOCKED_CONTAINS(lb_fixed_contains)

static PyObject *lb_fixed_test_unlocked(PyObject *self, PyObject *key)
{
    int r = lb_fixed_contains_unlocked(self, key);
    if (r < 0)
        return NULL;
    return Py_NewRef(r ? Py_True : Py_False);
}

LB_LOCKED_SELF(lb_fixed_test)

int lb_fixed_enter_hashed(lb_fixed_filter *f, PyObject *key, int read_only, lb_hash_pair *h)
{
    lb_key k;
    lb_key_hold hold;
    if (!read_only && f->base.read_only)
        return lb_read_only_error(&f->base), -1;
    if (lb_key_enter(&f->base, key, &k, &hold, read_only) < 0)
        return -1;
    *h = lb_hash(f->geo.scheme, k.data, k.len);
    lb_key_release(&hold);
    return 0;
}

/* ---- batches ---------------------------------------------------------------- */

static lb_status fixed_add_hashed(lb_base *b, const lb_hash_pair *pairs, size_t n, uint8_t *out,
                                  size_t *done)
{
    lb_fixed_filter *f = (lb_fixed_filter *)b;
    f->impl->add_hashed(f, pairs, n, out);
    *done = n;
    return LB_OK;
}

static lb_status fixed_test_hashed(lb_base *b, const lb_hash_pair *pairs, size_t n,
                                   uint8_t *out, size_t *done)
{
    lb_fixed_filter *f = (lb_fixed_filter *)b;
    f->impl->test_hashed(f, pairs, n, out);
    *done = n;
    return LB_OK;
}

static lb_hash_scheme fixed_key_scheme(lb_base *b)
{
    lb_fixed_filter *f = (lb_fixed_filter *)b;
    return f->impl->key_scheme == LB_FIXED_OWN_SCHEME ? f->geo.scheme
                                                      : (lb_hash_scheme)f->impl->key_scheme;
}

const lb_batch_ops lb_fixed_batch = {
    .add_hashed = fixed_add_hashed,
    .test_hashed = fixed_test_hashed,
    .key_scheme = fixed_key_scheme,
};

/* ---- the whole storage ------------------------------------------------------ */

static void fixed_recount(lb_fixed_filter *f)
{
    if (f->impl->recount)
        f->impl->recount(f);
}

static PyObject *lb_fixed_reset_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (f->base.read_only)
        return lb_read_only_error(&f->base), NULL;
    if (lb_enter(&f->base) < 0)
        return NULL;
    f->impl->clear(f);
    lb_leave(&f->base);
    Py_RETURN_NONE;
}

LB_LOCKED_SELF(lb_fixed_reset)

PyObject *lb_fixed_get_nbytes(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromSize_t(lb_fixed_nbytes((lb_fixed_filter *)self));
}

static PyObject *lb_fixed_get_cells_used_unlocked(PyObject *self, void *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    fixed_recount(f);
    return PyLong_FromUnsignedLongLong(*f->cells_used);
}

LB_LOCKED_GETTER(lb_fixed_get_cells_used)

PyObject *lb_fixed_sizeof(PyObject *self, PyObject *unused)
{
    (void)unused;
    /* A mapped filter's cells are the file's pages, not this object's memory. */
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    int held = f->impl->cells_of(f) && !f->impl->recount;
    return PyLong_FromSize_t(Py_TYPE(self)->tp_basicsize +
                             (held ? lb_fixed_nbytes(f) + f->impl->alloc_slack : 0));
}

static PyObject *lb_fixed_richcompare_unlocked(PyObject *self, PyObject *other, int op)
{
    lb_fixed_filter *a = (lb_fixed_filter *)self;
    if ((op != Py_EQ && op != Py_NE) ||
        !PyObject_TypeCheck(other, impl_type(a->base.st, a->impl)))
        Py_RETURN_NOTIMPLEMENTED;
    /* A filter is itself, open or closed: identity answers without the storage.
     * A closed filter against another one raises ClosedError (lb_enter2). */
    if (self == other)
        return PyBool_FromLong(op == Py_EQ);
    lb_fixed_filter *b = (lb_fixed_filter *)other;
    if (lb_enter2(&a->base, &b->base) < 0)
        return NULL;
    fixed_recount(a);
    fixed_recount(b);
    int eq = a->args.m == b->args.m && a->args.k == b->args.k &&
             a->args.scheme == b->args.scheme && *a->cells_used == *b->cells_used &&
             memcmp(a->impl->cells_of(a), b->impl->cells_of(b), lb_fixed_nbytes(a)) == 0;
    lb_fixed_leave2(self, other);
    return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

LB_LOCKED_COMPARE(lb_fixed_richcompare)

static PyObject *lb_fixed_to_bytes_method_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (lb_enter(&f->base) < 0)
        return NULL;
    uint8_t *tmp = NULL;
    const uint8_t *payload = f->impl->export ? f->impl->export(f, &tmp) : f->impl->cells_of(f);
    PyObject *r = payload ? lb_fixed_to_bytes(f, f->impl->saved_kind, payload, lb_fixed_nbytes(f))
                          : PyErr_NoMemory();
    free(tmp);
    lb_leave(&f->base);
    return r;
}

LB_LOCKED_SELF(lb_fixed_to_bytes_method)

PyObject *lb_fixed_from_bytes(PyObject *cls, PyObject *data)
{
    lb_state *st = lb_state_from_type((PyTypeObject *)cls);
    if (!st)
        return NULL;
    const lb_fixed_impl *impl = lb_fixed_impl_of(st, (PyTypeObject *)cls);
    if (!impl)
        return PyErr_Format(PyExc_TypeError, "%s is not a fixed filter type",
                            ((PyTypeObject *)cls)->tp_name);
    Py_buffer view;
    lb_fixed_args a;
    const uint8_t *payload;
    size_t len;
    if (lb_fixed_read(st, data, &view, impl->saved_kind, impl->name, &a, &payload, &len) < 0)
        return NULL;
    lb_fixed_filter *f = lb_fixed_new((PyTypeObject *)cls, &a, impl);
    if (f && len >= LB_NOGIL_BYTES) {
        /* the new filter is no other thread's yet, and the view holds the payload */
        Py_BEGIN_ALLOW_THREADS
        impl->import(f, payload, len);
        Py_END_ALLOW_THREADS
    } else if (f) {
        impl->import(f, payload, len);
    }
    PyBuffer_Release(&view);
    return (PyObject *)f;
}

/* ---- geometry and statistics ------------------------------------------------ */

PyObject *lb_fixed_get_m(PyObject *self, void *offset)
{
    return PyLong_FromUnsignedLongLong(LB_ARGS_AT(self, offset)->m);
}

PyObject *lb_fixed_get_k(PyObject *self, void *offset)
{
    return PyLong_FromUnsignedLong(LB_ARGS_AT(self, offset)->k);
}

PyObject *lb_fixed_get_hash(PyObject *self, void *offset)
{
    return PyUnicode_FromString(lb_hash_scheme_name(LB_ARGS_AT(self, offset)->scheme));
}

PyObject *lb_fixed_get_capacity(PyObject *self, void *offset)
{
    const lb_fixed_args *a = LB_ARGS_AT(self, offset);
    if (!a->has_capacity)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(a->capacity);
}

PyObject *lb_fixed_get_error_rate(PyObject *self, void *offset)
{
    const lb_fixed_args *a = LB_ARGS_AT(self, offset);
    if (!a->has_capacity)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(a->error_rate);
}

static PyObject *lb_fixed_approximate_count_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (lb_enter(&f->base) < 0)
        return NULL;
    fixed_recount(f);
    double n = lb_estimate_count(f->args.m, f->args.k, *f->cells_used);
    lb_leave(&f->base);
    if (!isfinite(n)) /* every cell in use: no upper bound; say m */
        return PyLong_FromUnsignedLongLong(f->args.m);
    return PyLong_FromDouble(floor(n + 0.5));
}

LB_LOCKED_SELF(lb_fixed_approximate_count)

/* The share of cells in use (counted again first where the filter needs it), or
 * -1 with the exception set. */
static double fixed_fill(lb_fixed_filter *f)
{
    if (lb_enter(&f->base) < 0)
        return -1;
    fixed_recount(f);
    double fill = (double)*f->cells_used / (double)f->args.m;
    lb_leave(&f->base);
    return fill;
}

static PyObject *lb_fixed_fill_ratio_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    double fill = fixed_fill((lb_fixed_filter *)self);
    return fill < 0 ? NULL : PyFloat_FromDouble(fill);
}

LB_LOCKED_SELF(lb_fixed_fill_ratio)

static PyObject *lb_fixed_current_error_rate_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    double fill = fixed_fill(f);
    return fill < 0 ? NULL : PyFloat_FromDouble(pow(fill, (double)f->args.k));
}

LB_LOCKED_SELF(lb_fixed_current_error_rate)

/* ---- saved format, repr, comparing ------------------------------------------ */

PyObject *lb_fixed_to_bytes(lb_fixed_filter *f, int saved_kind, const uint8_t *payload,
                            size_t len)
{
    lb_format_header h;
    memset(&h, 0, sizeof(h));
    h.kind = (lb_kind)saved_kind;
    h.scheme = f->args.scheme;
    h.m = f->args.m;
    h.k = f->args.k;
    h.has_capacity = f->args.has_capacity;
    h.capacity = f->args.capacity;
    h.error_rate = f->args.error_rate;
    size_t total = LB_FORMAT_FIXED_HEADER + len + LB_FORMAT_TRAILER;
    if (total > PY_SSIZE_T_MAX)
        return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out)
        return NULL;
    lb_format_write_fixed((uint8_t *)PyBytes_AS_STRING(out), &h, payload, len);
    return out;
}

int lb_fixed_read(lb_state *st, PyObject *data, Py_buffer *view, int saved_kind,
                  const char *type_name, lb_fixed_args *args, const uint8_t **payload,
                  size_t *len)
{
    (void)type_name;
    lb_format_header h;
    if (lb_read_saved(st, data, view, &h, saved_kind) < 0)
        return -1;
    memset(args, 0, sizeof(*args));
    args->m = h.m;
    args->k = h.k;
    args->scheme = h.scheme;
    args->has_capacity = h.has_capacity;
    args->capacity = h.capacity;
    args->error_rate = h.error_rate;
    *payload = h.payload;
    *len = h.payload_len;
    return 0;
}

PyObject *lb_fixed_repr(lb_fixed_filter *f, const char *extra)
{
    const char *tname = strrchr(Py_TYPE(f)->tp_name, '.');
    tname = tname ? tname + 1 : Py_TYPE(f)->tp_name;
    if (f->base.closed)
        return PyUnicode_FromFormat("<%s m=%llu k=%u hash=%s closed>", tname,
                                    (unsigned long long)f->args.m, f->args.k,
                                    lb_hash_scheme_name(f->args.scheme));
    return PyUnicode_FromFormat("<%s m=%llu k=%u hash=%s %s>", tname,
                                (unsigned long long)f->args.m, f->args.k,
                                lb_hash_scheme_name(f->args.scheme), extra);
}

int lb_fixed_enter_like(lb_fixed_filter *self, PyObject *other, PyTypeObject *type)
{
    lb_state *st = self->base.st;
    if (!PyObject_TypeCheck(other, type)) {
        PyErr_Format(PyExc_TypeError, "expected a %s, not %.200s", self->impl->name,
                     Py_TYPE(other)->tp_name);
        return -1;
    }
    lb_fixed_filter *o = (lb_fixed_filter *)other;
    if (o->args.m != self->args.m || o->args.k != self->args.k ||
        o->args.scheme != self->args.scheme) {
        PyErr_Format(st->GeometryMismatchError,
                     "filters differ: m=%llu k=%u hash=%s against m=%llu k=%u hash=%s",
                     (unsigned long long)self->args.m, self->args.k,
                     lb_hash_scheme_name(self->args.scheme), (unsigned long long)o->args.m,
                     o->args.k, lb_hash_scheme_name(o->args.scheme));
        return -1;
    }
    return lb_enter2(&self->base, &o->base);
}

void lb_fixed_leave2(PyObject *a, PyObject *b)
{
    lb_leave(&((lb_fixed_filter *)a)->base);
    lb_leave(&((lb_fixed_filter *)b)->base);
}

/* ---- copy, union, intersection ----------------------------------------------- */

lb_fixed_filter *lb_fixed_copy_of(lb_fixed_filter *src)
{
    const lb_fixed_impl *impl = src->impl->copy_impl ? src->impl->copy_impl : src->impl;
    lb_fixed_filter *dst = lb_fixed_new(Py_TYPE(src), &src->args, impl);
    if (!dst)
        return NULL;
    memcpy(impl->cells_of(dst), src->impl->cells_of(src), lb_fixed_nbytes(src));
    /* A mapped source's count may be behind the other processes' adds: count
     * the copy's cells (with the source's recount, which reads the same layout). */
    *dst->cells_used = *src->cells_used;
    if (src->impl->recount)
        src->impl->recount(dst);
    return dst;
}

static PyObject *lb_fixed_copy_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (lb_enter(&f->base) < 0)
        return NULL;
    PyObject *r = (PyObject *)lb_fixed_copy_of(f);
    lb_leave(&f->base);
    return r;
}

LB_LOCKED_SELF(lb_fixed_copy)

static PyObject *fixed_combine(PyObject *self, PyObject *other, int is_union, int in_place)
{
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (in_place && f->base.read_only)
        return lb_read_only_error(&f->base), NULL;
    if (lb_fixed_enter_like(f, other, impl_type(f->base.st, f->impl)) < 0)
        return NULL;
    lb_fixed_filter *r = f;
    if (in_place)
        Py_INCREF(r);
    else
        r = lb_fixed_copy_of(f);
    if (r)
        f->impl->merge(r, (lb_fixed_filter *)other, is_union);
    lb_fixed_leave2(self, other);
    return (PyObject *)r;
}

static PyObject *lb_fixed_union_unlocked(PyObject *self, PyObject *other)
{
    return fixed_combine(self, other, 1, 0);
}

LB_LOCKED_PAIR(lb_fixed_union)

static PyObject *lb_fixed_intersection_unlocked(PyObject *self, PyObject *other)
{
    return fixed_combine(self, other, 0, 0);
}

LB_LOCKED_PAIR(lb_fixed_intersection)

/* a | b and friends: the slot of a's type or of b's (reflected); NotImplemented
 * unless a is a fixed filter and b is of the same type. */
static PyObject *fixed_binary(PyObject *a, PyObject *b, int is_union, int in_place)
{
    lb_state *st = lb_state_from_type(Py_TYPE(a));
    if (!st) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (!lb_fixed_impl_of(st, Py_TYPE(a)))
        Py_RETURN_NOTIMPLEMENTED;
    if (!PyObject_TypeCheck(b, impl_type(st, ((lb_fixed_filter *)a)->impl)))
        Py_RETURN_NOTIMPLEMENTED;
    return fixed_combine(a, b, is_union, in_place);
}

static PyObject *lb_fixed_nb_or_unlocked(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 1, 0);
}

LB_LOCKED_PAIR(lb_fixed_nb_or)

static PyObject *lb_fixed_nb_and_unlocked(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 0, 0);
}

LB_LOCKED_PAIR(lb_fixed_nb_and)

static PyObject *lb_fixed_nb_ior_unlocked(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 1, 1);
}

LB_LOCKED_PAIR(lb_fixed_nb_ior)

static PyObject *lb_fixed_nb_iand_unlocked(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 0, 1);
}

LB_LOCKED_PAIR(lb_fixed_nb_iand)
