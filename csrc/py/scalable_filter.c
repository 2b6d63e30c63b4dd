/* scalable_filter.c: ScalableFilter, a chain of bit arrays that grows. */
#include "args.h"
#include "base.h"
#include "batch.h"
#include "errors.h"
#include "filters.h"
#include "keys.h"
#include "saveload.h"

#include <math.h>
#include <structmember.h>

#include "scalable.h"

typedef struct {
    lb_base base;
    lb_scalable s;
    lb_status growth_error;  /* why a batch could not grow the chain */
} ScalableFilter;

#define AS_SCALABLE(o) ((ScalableFilter *)(o))

static const lb_batch_ops ScalableFilter_batch;

static void ScalableFilter_release(lb_base *b)
{
    lb_scalable_free(&((ScalableFilter *)b)->s);
}

/* The exception of a status of the chain, with what it means for one. */
static lb_status ScalableFilter_raise(lb_state *st, lb_status s)
{
    const char *detail = NULL;
    if (s == LB_ERR_ARG)
        detail = "growth_ratio must be greater than 1 and at most 64, and fpr_ratio must be in "
                 "(0, 1)";
    else if (s == LB_ERR_RANGE)
        detail = "the filter cannot grow further: its next stage would need more than 2**48 "
                 "bits, or it has 4096 stages, or its stages' rates would add up to more than "
                 "error_rate";
    lb_raise(st, s, detail);
    return s;
}

static void ScalableFilter_raise_growth(lb_base *b)
{
    ScalableFilter_raise(b->st, ((ScalableFilter *)b)->growth_error);
}

static ScalableFilter *ScalableFilter_alloc(PyTypeObject *type)
{
    ScalableFilter *self = (ScalableFilter *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    memset(&self->s, 0, sizeof(self->s));
    self->growth_error = LB_OK;
    if (lb_base_init(&self->base, type) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->base.raise_backend = ScalableFilter_raise_growth;
    self->base.batch = &ScalableFilter_batch;
    return self;
}

static PyObject *ScalableFilter_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"initial_capacity", "error_rate", "growth_ratio", "fpr_ratio", "hash",
                             NULL};
    lb_state *st = lb_state_from_type(type);
    if (!st)
        return NULL;
    PyObject *cap_o, *rate_o = NULL, *growth_o = NULL, *ratio_o = NULL, *hash = Py_None;
    double error_rate = 0.01, growth = 2.0, ratio = 0.9;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OOO$O:ScalableFilter", kwlist, &cap_o,
                                     &rate_o, &growth_o, &ratio_o, &hash))
        return NULL;
    uint64_t cap;
    lb_hash_scheme scheme;
    if (lb_parse_u64_arg("ScalableFilter", cap_o, "initial_capacity", st->InvalidCapacityError,
                         &cap) < 0 ||
        (rate_o && lb_parse_double_arg("ScalableFilter", rate_o, "error_rate", &error_rate) < 0) ||
        (growth_o && lb_parse_double_arg("ScalableFilter", growth_o, "growth_ratio", &growth) < 0) ||
        (ratio_o && lb_parse_double_arg("ScalableFilter", ratio_o, "fpr_ratio", &ratio) < 0) ||
        lb_parse_hash(hash, &scheme) < 0)
        return NULL;
    lb_status s = lb_scalable_check(cap, error_rate, growth, ratio);
    if (s != LB_OK) {
        ScalableFilter_raise(st, s);
        return NULL;
    }
    ScalableFilter *self = ScalableFilter_alloc(type);
    if (!self)
        return NULL;
    s = lb_scalable_init(&self->s, cap, error_rate, growth, ratio, scheme);
    if (s != LB_OK) {
        Py_DECREF(self);
        ScalableFilter_raise(st, s);
        return NULL;
    }
    return (PyObject *)self;
}

static void ScalableFilter_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    lb_base_fini(&AS_SCALABLE(self)->base);
    lb_scalable_free(&AS_SCALABLE(self)->s);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int ScalableFilter_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

static PyObject *ScalableFilter_add_unlocked(PyObject *self, PyObject *key)
{
    ScalableFilter *f = AS_SCALABLE(self);
    lb_key k;
    lb_key_hold hold;
    if (lb_key_enter(&f->base, key, &k, &hold, 0) < 0)
        return NULL;
    int added;
    lb_status s = lb_scalable_add(&f->s, k.data, k.len, &added);
    lb_key_leave(&f->base, &hold);
    if (s != LB_OK) {
        ScalableFilter_raise(f->base.st, s);
        return NULL;
    }
    return PyBool_FromLong(added);
}

static LB_LOCKED_SELF(ScalableFilter_add)

static int ScalableFilter_contains_unlocked(PyObject *self, PyObject *key)
{
    ScalableFilter *f = AS_SCALABLE(self);
    lb_key k;
    lb_key_hold hold;
    if (lb_key_enter(&f->base, key, &k, &hold, 0) < 0)
        return -1;
    int r = lb_scalable_test(&f->s, k.data, k.len);
    lb_key_leave(&f->base, &hold);
    return r;
}

static LB_LOCKED_CONTAINS(ScalableFilter_contains)

static PyObject *ScalableFilter_test_unlocked(PyObject *self, PyObject *key)
{
    int r = ScalableFilter_contains_unlocked(self, key);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static LB_LOCKED_SELF(ScalableFilter_test)

static lb_status ScalableFilter_add_hashed(lb_base *b, const lb_hash_pair *pairs, size_t n,
                                           uint8_t *out, size_t *done)
{
    ScalableFilter *f = (ScalableFilter *)b;
    lb_status s = lb_scalable_add_hashed(&f->s, pairs, n, out, done);
    if (s == LB_OK)
        return LB_OK;
    f->growth_error = s;
    return LB_ERR_BACKEND;
}

static lb_status ScalableFilter_test_hashed(lb_base *b, const lb_hash_pair *pairs, size_t n,
                                            uint8_t *out, size_t *done)
{
    lb_scalable_test_hashed(&((ScalableFilter *)b)->s, pairs, n, out);
    *done = n;
    return LB_OK;
}

static lb_hash_scheme ScalableFilter_key_scheme(lb_base *b)
{
    return ((ScalableFilter *)b)->s.scheme;
}

static const lb_batch_ops ScalableFilter_batch = {
    .add_hashed = ScalableFilter_add_hashed,
    .test_hashed = ScalableFilter_test_hashed,
    .key_scheme = ScalableFilter_key_scheme,
};

static PyObject *ScalableFilter_reset_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (lb_enter(&AS_SCALABLE(self)->base) < 0)
        return NULL;
    lb_status s = lb_scalable_reset(&AS_SCALABLE(self)->s);
    lb_leave(&AS_SCALABLE(self)->base);
    if (s != LB_OK)
        return lb_raise(AS_SCALABLE(self)->base.st, s, NULL);
    Py_RETURN_NONE;
}

static LB_LOCKED_SELF(ScalableFilter_reset)

static PyObject *ScalableFilter_close_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    return lb_close_with(&AS_SCALABLE(self)->base, ScalableFilter_release);
}

static LB_LOCKED_SELF(ScalableFilter_close)

static PyObject *ScalableFilter_approximate_count_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (lb_enter(&AS_SCALABLE(self)->base) < 0)
        return NULL;
    uint64_t n = lb_scalable_count(&AS_SCALABLE(self)->s);
    lb_leave(&AS_SCALABLE(self)->base);
    return PyLong_FromUnsignedLongLong(n);
}

static LB_LOCKED_SELF(ScalableFilter_approximate_count)

static PyObject *ScalableFilter_current_error_rate_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    if (lb_enter(&AS_SCALABLE(self)->base) < 0)
        return NULL;
    double r = lb_scalable_current_fpr(&AS_SCALABLE(self)->s);
    lb_leave(&AS_SCALABLE(self)->base);
    return PyFloat_FromDouble(r);
}

static LB_LOCKED_SELF(ScalableFilter_current_error_rate)

static PyObject *ScalableFilter_stages_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    ScalableFilter *f = AS_SCALABLE(self);
    if (lb_enter(&f->base) < 0)
        return NULL;
    PyObject *list = PyList_New(f->s.nstages);
    if (!list) {
        lb_leave(&f->base);
        return NULL;
    }
    for (uint32_t i = 0; i < f->s.nstages; i++) {
        const lb_stage *stage = &f->s.stages[i];
        PyObject *d = Py_BuildValue(
            "{sKsKsKsIsdsK}", "capacity", (unsigned long long)stage->capacity, "count",
            (unsigned long long)stage->count, "m", (unsigned long long)stage->geo.m, "k",
            stage->geo.k, "error_rate", stage->error_rate, "bits_set",
            (unsigned long long)stage->bits.bits_set);
        if (!d) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, d);
    }
    lb_leave(&f->base);
    return list;
}

static LB_LOCKED_SELF(ScalableFilter_stages)

static PyObject *entered_to_bytes(ScalableFilter *f);

static PyObject *ScalableFilter_to_bytes_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    ScalableFilter *f = AS_SCALABLE(self);
    if (lb_enter(&f->base) < 0)
        return NULL;
    PyObject *out = entered_to_bytes(f);
    lb_leave(&f->base);
    return out;
}

static LB_LOCKED_SELF(ScalableFilter_to_bytes)

/* to_bytes of an entered filter. */
static PyObject *entered_to_bytes(ScalableFilter *f)
{
    lb_scalable *s = &f->s;
    lb_format_header h;
    memset(&h, 0, sizeof(h));
    h.kind = LB_KIND_SCALABLE;
    h.scheme = s->scheme;
    h.initial_capacity = s->initial_capacity;
    h.error_rate = s->error_rate;
    h.growth = s->growth;
    h.fpr_ratio = s->fpr_ratio;
    h.nstages = s->nstages;
    size_t n = s->nstages;
    uint64_t *counts = PyMem_Malloc(n * sizeof(uint64_t));
    const uint8_t **payloads = PyMem_Malloc(n * sizeof(*payloads));
    size_t *lens = PyMem_Malloc(n * sizeof(size_t));
    if (!counts || !payloads || !lens) {
        PyMem_Free(counts);
        PyMem_Free(payloads);
        PyMem_Free(lens);
        return PyErr_NoMemory();
    }
    size_t total = LB_FORMAT_SCALABLE_HEADER + 8 * n + LB_FORMAT_TRAILER;
    for (uint32_t i = 0; i < s->nstages; i++) {
        counts[i] = s->stages[i].count;
        payloads[i] = s->stages[i].bits.data;
        lens[i] = (size_t)s->stages[i].bits.nbytes;
        total += lens[i];
    }
    h.counts = counts;
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (out)
        lb_format_write_scalable((uint8_t *)PyBytes_AS_STRING(out), &h, payloads, lens);
    PyMem_Free(counts);
    PyMem_Free(payloads);
    PyMem_Free(lens);
    return out;
}

static PyObject *ScalableFilter_from_bytes(PyObject *cls, PyObject *data)
{
    lb_state *st = lb_state_from_type((PyTypeObject *)cls);
    if (!st)
        return NULL;
    Py_buffer view;
    lb_format_header h;
    if (lb_read_saved(st, data, &view, &h, LB_KIND_SCALABLE) < 0)
        return NULL;
    ScalableFilter *f = ScalableFilter_alloc((PyTypeObject *)cls);
    lb_status s = LB_OK;
    if (f)
        s = lb_scalable_init(&f->s, h.initial_capacity, h.error_rate, h.growth, h.fpr_ratio,
                             h.scheme);
    for (uint32_t i = 1; f && s == LB_OK && i < h.nstages; i++)
        s = lb_scalable_push_stage(&f->s);
    if (f && s == LB_OK) {
        const uint8_t *p = h.payload;
        for (uint32_t i = 0; i < h.nstages; i++) {
            lb_stage *stage = &f->s.stages[i];
            memcpy(stage->bits.data, p, (size_t)stage->bits.nbytes);
            p += stage->bits.nbytes;
            stage->bits.bits_set = lb_bits_popcount(&stage->bits);
            stage->count = lb_format_stage_count(&h, i);
        }
    }
    PyBuffer_Release(&view);
    if (f && s != LB_OK) {
        Py_CLEAR(f);
        ScalableFilter_raise(st, s);
    }
    return (PyObject *)f;
}

static PyObject *ScalableFilter_copy_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *data = ScalableFilter_to_bytes_unlocked(self, NULL);
    if (!data)
        return NULL;
    PyObject *r = ScalableFilter_from_bytes((PyObject *)Py_TYPE(self), data);
    Py_DECREF(data);
    return r;
}

static LB_LOCKED_SELF(ScalableFilter_copy)

/* Not defined for a chain: OR-ing stage i of two chains puts up to twice its
 * capacity in it (past the rate its stage promises), and a key that went to
 * stage 0 of one and stage 1 of the other is in no stage of an AND. */
static PyObject *ScalableFilter_no_setop(PyObject *self, PyObject *other)
{
    (void)other;
    PyErr_SetString(AS_SCALABLE(self)->base.st->NotSupportedError,
                    "a ScalableFilter has no union or intersection: stage by stage, a union "
                    "overfills the stages (past the error rate they promise) and an "
                    "intersection loses keys that went to different stages; add the keys of "
                    "one to the other (update), or use MemoryFilter or CountingFilter");
    return NULL;
}

/* a | b, a & b (and |=, &=, which fall back to them): the refusal of union and
 * intersection when both operands are ScalableFilters; NotImplemented otherwise, so
 * that a ScalableFilter and anything else stay the usual TypeError. */
static PyObject *ScalableFilter_nb_setop(PyObject *a, PyObject *b)
{
    lb_state *st = lb_state_from_type(Py_TYPE(a));
    if (!st) {
        PyErr_Clear();
        st = lb_state_from_type(Py_TYPE(b));
        if (!st) {
            PyErr_Clear();
            Py_RETURN_NOTIMPLEMENTED;
        }
    }
    if (!PyObject_TypeCheck(a, st->ScalableFilter) || !PyObject_TypeCheck(b, st->ScalableFilter))
        Py_RETURN_NOTIMPLEMENTED;
    return ScalableFilter_no_setop(a, b);
}

static PyObject *ScalableFilter_richcompare_unlocked(PyObject *self, PyObject *other, int op)
{
    lb_state *st = AS_SCALABLE(self)->base.st;
    if ((op != Py_EQ && op != Py_NE) || !PyObject_TypeCheck(other, st->ScalableFilter))
        Py_RETURN_NOTIMPLEMENTED;
    /* A filter is itself, open or closed: identity answers without the storage.
     * A closed filter against another one raises ClosedError (lb_enter2). */
    if (self == other)
        return PyBool_FromLong(op == Py_EQ);
    PyObject *a = ScalableFilter_to_bytes_unlocked(self, NULL);
    if (!a)
        return NULL;
    PyObject *b = ScalableFilter_to_bytes_unlocked(other, NULL);
    if (!b) {
        Py_DECREF(a);
        return NULL;
    }
    PyObject *r = PyObject_RichCompare(a, b, op);
    Py_DECREF(a);
    Py_DECREF(b);
    return r;
}

static LB_LOCKED_COMPARE(ScalableFilter_richcompare)

static PyObject *ScalableFilter_get_initial_capacity(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(AS_SCALABLE(self)->s.initial_capacity);
}

static PyObject *ScalableFilter_get_error_rate(PyObject *self, void *unused)
{
    (void)unused;
    return PyFloat_FromDouble(AS_SCALABLE(self)->s.error_rate);
}

static PyObject *ScalableFilter_get_growth(PyObject *self, void *unused)
{
    (void)unused;
    return PyFloat_FromDouble(AS_SCALABLE(self)->s.growth);
}

static PyObject *ScalableFilter_get_ratio(PyObject *self, void *unused)
{
    (void)unused;
    return PyFloat_FromDouble(AS_SCALABLE(self)->s.fpr_ratio);
}

static PyObject *ScalableFilter_get_hash(PyObject *self, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(lb_hash_scheme_name(AS_SCALABLE(self)->s.scheme));
}

static PyObject *ScalableFilter_get_nsub_unlocked(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLong(AS_SCALABLE(self)->s.nstages);
}

static LB_LOCKED_GETTER(ScalableFilter_get_nsub)

/* The stage array moves when a batch grows the chain: what reads it enters. */
static PyObject *ScalableFilter_get_capacity_unlocked(PyObject *self, void *unused)
{
    (void)unused;
    if (lb_enter(&AS_SCALABLE(self)->base) < 0)
        return NULL;
    uint64_t n = lb_scalable_capacity(&AS_SCALABLE(self)->s);
    lb_leave(&AS_SCALABLE(self)->base);
    return PyLong_FromUnsignedLongLong(n);
}

static LB_LOCKED_GETTER(ScalableFilter_get_capacity)

static PyObject *ScalableFilter_get_nbytes_unlocked(PyObject *self, void *unused)
{
    (void)unused;
    if (lb_enter(&AS_SCALABLE(self)->base) < 0)
        return NULL;
    uint64_t n = lb_scalable_nbytes(&AS_SCALABLE(self)->s);
    lb_leave(&AS_SCALABLE(self)->base);
    return PyLong_FromUnsignedLongLong(n);
}

static LB_LOCKED_GETTER(ScalableFilter_get_nbytes)

static PyObject *ScalableFilter_repr_unlocked(PyObject *self)
{
    ScalableFilter *f = AS_SCALABLE(self);
    if (lb_enter(&f->base) < 0) {
        PyErr_Clear(); /* closed */
        return PyUnicode_FromFormat("<ScalableFilter initial_capacity=%llu closed>",
                                    (unsigned long long)f->s.initial_capacity);
    }
    uint32_t stages = f->s.nstages;
    uint64_t count = lb_scalable_count(&f->s);
    lb_leave(&f->base);
    return PyUnicode_FromFormat("<ScalableFilter initial_capacity=%llu stages=%u count=%llu>",
                                (unsigned long long)f->s.initial_capacity, stages,
                                (unsigned long long)count);
}

static LB_LOCKED_REPR(ScalableFilter_repr)

static PyMethodDef ScalableFilter_methods[] = {
    {"add", ScalableFilter_add, METH_O,
     "add(key) -> bool\n\nAdd key to the newest stage unless some stage holds it already; True "
     "when it was added."},
    {"test", ScalableFilter_test, METH_O, "test(key) -> bool"},
    LB_BATCH_METHOD_DEFS,
    {"reset", ScalableFilter_reset, METH_NOARGS, "reset()\n\nBack to one empty first stage."},
    {"close", ScalableFilter_close, METH_NOARGS, "close()"},
    {"__enter__", lb_enter_method, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))lb_exit_method, METH_FASTCALL, NULL},
    {"approximate_count", ScalableFilter_approximate_count, METH_NOARGS,
     "approximate_count() -> int\n\nKeys added that tested absent when they were added (a "
     "lower bound on the distinct keys)."},
    {"current_error_rate", ScalableFilter_current_error_rate, METH_NOARGS,
     "current_error_rate() -> float\n\nThe rate now: 1 - prod(1 - fill_i ** k_i)."},
    {"stages", ScalableFilter_stages, METH_NOARGS,
     "stages() -> list[dict]\n\ncapacity, count, m, k, error_rate, bits_set of each stage."},
    {"union", ScalableFilter_no_setop, METH_O,
     "union(other)\n\nNotSupportedError: not defined for a chain of stages (see the error)."},
    {"intersection", ScalableFilter_no_setop, METH_O,
     "intersection(other)\n\nNotSupportedError: not defined for a chain of stages."},
    {"copy", ScalableFilter_copy, METH_NOARGS, "copy() -> ScalableFilter"},
    {"__copy__", lb_dunder_copy, METH_NOARGS, NULL},
    {"to_bytes", ScalableFilter_to_bytes, METH_NOARGS, "to_bytes() -> bytes"},
    {"from_bytes", ScalableFilter_from_bytes, METH_O | METH_CLASS,
     "from_bytes(data) -> ScalableFilter"},
    {"save", lb_save, METH_O,
     "save(path)\n\nWrite to_bytes() to path atomically (temporary file, fsync, rename), "
     "with the mode open() gives a new file (0o666 minus the umask); an OSError names path."},
    {"load", lb_load, METH_O | METH_CLASS, "load(path) -> ScalableFilter"},
    {"_repr_html_", lb_repr_html, METH_NOARGS, NULL},
    {"__reduce__", lb_reduce, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef ScalableFilter_getset[] = {
    {"initial_capacity", ScalableFilter_get_initial_capacity, NULL,
     "capacity of the first stage", NULL},
    {"error_rate", ScalableFilter_get_error_rate, NULL, "the bound the whole chain keeps", NULL},
    {"growth_ratio", ScalableFilter_get_growth, NULL,
     "each stage holds this many times the last", NULL},
    {"fpr_ratio", ScalableFilter_get_ratio, NULL, "each stage's rate is this times the last", NULL},
    {"hash", ScalableFilter_get_hash, NULL, "hashing scheme", NULL},
    {"num_sub_filters", ScalableFilter_get_nsub, NULL, "number of stages", NULL},
    {"capacity", ScalableFilter_get_capacity, NULL, "keys the present stages take", NULL},
    {"nbytes", ScalableFilter_get_nbytes, NULL, "bytes of all stages' bits", NULL},
    {"closed", lb_closed_get, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef ScalableFilter_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(lb_base, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* tp_new: a subclass's own __init__ arguments refused are said to be so. */
static PyObject *ScalableFilter_new_hinted(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *self = ScalableFilter_new(type, args, kwargs);
    return self ? self : lb_hint_subclass_new(type, ScalableFilter_new_hinted);
}

static PyType_Slot ScalableFilter_slots[] = {
    {Py_tp_doc, "ScalableFilter(initial_capacity, error_rate=0.01, growth_ratio=2.0, "
                "fpr_ratio=0.9, *, hash=\"xxh3-mix\")\n\n"
                "A scalable Bloom filter (Almeida et al. 2007): a chain of bit arrays that grows "
                "as keys arrive.  error_rate bounds the false-positive rate of the whole chain, "
                "however far it grows (the ling-base Go library's option is the first stage's rate)."},
    {Py_tp_new, ScalableFilter_new_hinted},
    {Py_tp_dealloc, ScalableFilter_dealloc},
    {Py_tp_traverse, ScalableFilter_traverse},
    {Py_tp_methods, ScalableFilter_methods},
    {Py_tp_getset, ScalableFilter_getset},
    {Py_tp_members, ScalableFilter_members},
    {Py_tp_repr, ScalableFilter_repr},
    {Py_tp_richcompare, ScalableFilter_richcompare},
    {Py_tp_hash, PyObject_HashNotImplemented},
    {Py_nb_or, ScalableFilter_nb_setop},
    {Py_nb_and, ScalableFilter_nb_setop},
    {Py_sq_contains, ScalableFilter_contains},
    {Py_sq_length, lb_len_approximate},
    {Py_nb_bool, lb_bool_true},
    {0, NULL},
};

static PyType_Spec ScalableFilter_spec = {
    .name = "ling_bloom.ScalableFilter",
    .basicsize = sizeof(ScalableFilter),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = ScalableFilter_slots,
};

PyTypeObject *lb_scalable_filter_type(PyObject *module)
{
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &ScalableFilter_spec, NULL);
}
