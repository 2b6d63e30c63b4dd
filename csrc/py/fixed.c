/* fixed.c: what the fixed-size types share (see fixed.h). */
#include "fixed.h"

#include <math.h>
#include <string.h>

#include "errors.h"
#include "params.h"
#include "saveload.h"

/* ---- construction and close ------------------------------------------------- */

#define LB_ARGS_AT(self, offset) ((const lb_fixed_args *)((const char *)(self) + (size_t)(offset)))

lb_hash_scheme lb_fixed_key_scheme(lb_base *b)
{
    return ((lb_fixed_filter *)b)->geo.scheme;
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
    f->base.batch = impl->batch;
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

PyObject *lb_fixed_type_new(PyTypeObject *type, PyObject *args, PyObject *kwargs,
                            const lb_fixed_impl *impl)
{
    lb_state *st = lb_state_from_type(type);
    lb_fixed_args a;
    if (!st || lb_parse_fixed_args(st, args, kwargs, impl->name, &a) < 0)
        return NULL;
    return (PyObject *)lb_fixed_new(type, &a, impl);
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

PyObject *lb_fixed_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    return lb_close_with(&f->base, f->impl->release);
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

PyObject *lb_fixed_approximate_count(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (lb_enter(&f->base) < 0)
        return NULL;
    if (f->impl->recount)
        f->impl->recount(f);
    double n = lb_estimate_count(f->args.m, f->args.k, *f->cells_used);
    lb_leave(&f->base);
    if (!isfinite(n)) /* every cell in use: no upper bound; say m */
        return PyLong_FromUnsignedLongLong(f->args.m);
    return PyLong_FromDouble(floor(n + 0.5));
}

/* The share of cells in use (counted again first where the filter needs it), or
 * -1 with the exception set. */
static double fixed_fill(lb_fixed_filter *f)
{
    if (lb_enter(&f->base) < 0)
        return -1;
    if (f->impl->recount)
        f->impl->recount(f);
    double fill = (double)*f->cells_used / (double)f->args.m;
    lb_leave(&f->base);
    return fill;
}

PyObject *lb_fixed_fill_ratio(PyObject *self, PyObject *unused)
{
    (void)unused;
    double fill = fixed_fill((lb_fixed_filter *)self);
    return fill < 0 ? NULL : PyFloat_FromDouble(fill);
}

PyObject *lb_fixed_current_error_rate(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    double fill = fixed_fill(f);
    return fill < 0 ? NULL : PyFloat_FromDouble(pow(fill, (double)f->args.k));
}

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

/* The type an impl is for (both sides of a union must be of it). */
static PyTypeObject *impl_type(lb_state *st, const lb_fixed_impl *impl)
{
    return *(PyTypeObject **)((char *)st + impl->type_slot);
}

PyObject *lb_fixed_copy(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (lb_enter(&f->base) < 0)
        return NULL;
    PyObject *r = (PyObject *)f->impl->copy(f);
    lb_leave(&f->base);
    return r;
}

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
        r = f->impl->copy(f);
    if (r)
        f->impl->merge(r, (lb_fixed_filter *)other, is_union);
    lb_fixed_leave2(self, other);
    return (PyObject *)r;
}

PyObject *lb_fixed_union(PyObject *self, PyObject *other)
{
    return fixed_combine(self, other, 1, 0);
}

PyObject *lb_fixed_intersection(PyObject *self, PyObject *other)
{
    return fixed_combine(self, other, 0, 0);
}

/* a | b and friends: the slot of a's type or of b's (reflected); NotImplemented
 * unless a is a fixed filter and b is of the same type. */
static PyObject *fixed_binary(PyObject *a, PyObject *b, int is_union, int in_place)
{
    lb_state *st = lb_state_from_type(Py_TYPE(a));
    if (!st) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (!PyObject_TypeCheck(a, st->MemoryFilter) && !PyObject_TypeCheck(a, st->CountingFilter) &&
        !PyObject_TypeCheck(a, st->BlockedFilter))
        Py_RETURN_NOTIMPLEMENTED;
    if (!PyObject_TypeCheck(b, impl_type(st, ((lb_fixed_filter *)a)->impl)))
        Py_RETURN_NOTIMPLEMENTED;
    return fixed_combine(a, b, is_union, in_place);
}

PyObject *lb_fixed_nb_or(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 1, 0);
}

PyObject *lb_fixed_nb_and(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 0, 0);
}

PyObject *lb_fixed_nb_ior(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 1, 1);
}

PyObject *lb_fixed_nb_iand(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 0, 1);
}
