/* blocked_filter.c: BlockedFilter, a split-block Bloom filter (csrc/core/blocked.h):
 * one 64-byte block per key. */
#include "errors.h"
#include "filters.h"
#include "fixed.h"
#include "keys.h"
#include "saveload.h"

#include <math.h>
#include <stdlib.h>
#include <structmember.h>

#include "blocked.h"
#include "params.h"

typedef struct {
    lb_fixed_filter f;
    lb_blocked bits;
} BlockedFilter;

#define AS_BLOCKED(o) ((BlockedFilter *)(o))

/* What the hash property says: XXH3-64 of the key, the split-block walk. */
#define BLOCKED_HASH_NAME "xxh3-block"

/* ---- construction ------------------------------------------------------- */

static int BlockedFilter_geometry_error(lb_state *st, lb_status s, uint64_t m, uint64_t k)
{
    if (s == LB_ERR_CAPACITY)
        PyErr_Format(st->InvalidCapacityError,
                     "m must be a positive multiple of 512 (whole 64-byte blocks), not %llu",
                     (unsigned long long)m);
    else if (s == LB_ERR_ARG)
        PyErr_Format(st->InvalidCapacityError,
                     "k must be a multiple of 8 in 8..64 (one bit per lane and round), not %llu",
                     (unsigned long long)k);
    else
        lb_raise(st, s, NULL);
    return -1;
}

/* The error of a capacity and rate that no blocked filter holds: the rate, when even
 * one key cannot be held at it (it needs more than 64 bits per key); else the size. */
static PyObject *BlockedFilter_size_error(lb_state *st, lb_status s, double p, PyObject *rate)
{
    uint64_t m, k;
    if (s == LB_ERR_RANGE && lb_blocked_size(1, p, &m, &k) == LB_ERR_RANGE)
        return PyErr_Format(st->InvalidFalsePositiveRateError,
                            "error_rate %R is below what a blocked filter reaches "
                            "(at most 64 bits per key)", rate);
    return lb_raise(st, s, s == LB_ERR_RANGE ? "no blocked filter of at most 2**48 bits "
                                               "holds that many keys at that rate"
                                             : NULL);
}

static int BlockedFilter_parse_args(lb_state *st, PyObject *args, PyObject *kwargs,
                                    lb_fixed_args *out)
{
    static char *kwlist[] = {"capacity", "error_rate", "m", "k", NULL};
    PyObject *capacity = NULL, *error_rate = NULL, *mo = NULL, *ko = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO$OO:BlockedFilter", kwlist, &capacity,
                                     &error_rate, &mo, &ko))
        return -1;
    memset(out, 0, sizeof(*out));
    out->scheme = LB_HASH_XXH3_MIX; /* recorded as saved files have it; keys hash with lb_hash_blocked */
    if (lb_none_given("BlockedFilter", "capacity", capacity) < 0 ||
        lb_none_given("BlockedFilter", "error_rate", error_rate) < 0 ||
        lb_none_given("BlockedFilter", "m", mo) < 0 || lb_none_given("BlockedFilter", "k", ko) < 0)
        return -1;
    if ((mo || ko) && (capacity || error_rate)) {
        PyErr_SetString(PyExc_TypeError,
                        "BlockedFilter takes capacity and error_rate, or m and k, not both");
        return -1;
    }
    if (mo || ko) {
        uint64_t m, k;
        if (!mo || !ko) {
            PyErr_SetString(PyExc_TypeError, "BlockedFilter needs both m and k");
            return -1;
        }
        if (lb_parse_u64_arg("BlockedFilter", mo, "m", st->InvalidCapacityError, &m) < 0 ||
            lb_parse_u64_arg("BlockedFilter", ko, "k", st->InvalidCapacityError, &k) < 0)
            return -1;
        lb_status s = lb_blocked_check_geometry(m, k);
        if (s != LB_OK)
            return BlockedFilter_geometry_error(st, s, m, k);
        out->m = m;
        out->k = (uint32_t)k;
        return 0;
    }
    if (lb_parse_capacity_rate(st, capacity, error_rate, "BlockedFilter", out) < 0)
        return -1;
    uint64_t m, k;
    lb_status s = lb_blocked_size(out->capacity, out->error_rate, &m, &k);
    if (s != LB_OK) {
        PyObject *rate = error_rate ? Py_NewRef(error_rate) : PyFloat_FromDouble(0.01);
        if (rate) {
            BlockedFilter_size_error(st, s, out->error_rate, rate);
            Py_DECREF(rate);
        }
        return -1;
    }
    out->m = m;
    out->k = (uint32_t)k;
    out->has_capacity = 1;
    return 0;
}

/* ---- the storage operations (lb_fixed_impl) --------------------------------- */

static lb_status BlockedFilter_init(lb_fixed_filter *f, uint64_t m)
{
    BlockedFilter *self = (BlockedFilter *)f;
    f->cells_used = &self->bits.bits_set;
    return lb_blocked_init(&self->bits, m, f->args.k);
}

static void BlockedFilter_release(lb_base *b)
{
    lb_blocked_free(&((BlockedFilter *)b)->bits);
}

static uint8_t *BlockedFilter_cells(const lb_fixed_filter *f)
{
    return (uint8_t *)((const BlockedFilter *)f)->bits.words;
}

static int BlockedFilter_add_key(lb_fixed_filter *f, const void *key, size_t len)
{
    return lb_blocked_add_key(&AS_BLOCKED(f)->bits, key, len);
}

static int BlockedFilter_test_key(const lb_fixed_filter *f, const void *key, size_t len)
{
    return lb_blocked_test_key(&((const BlockedFilter *)f)->bits, key, len);
}

static void BlockedFilter_add_hashed(lb_fixed_filter *f, const lb_hash_pair *pairs, size_t n,
                                     uint8_t *out)
{
    lb_blocked_add_hashed(&AS_BLOCKED(f)->bits, pairs, n, out);
}

static void BlockedFilter_test_hashed(const lb_fixed_filter *f, const lb_hash_pair *pairs,
                                      size_t n, uint8_t *out)
{
    lb_blocked_test_hashed(&((const BlockedFilter *)f)->bits, pairs, n, out);
}

static void BlockedFilter_clear(lb_fixed_filter *f)
{
    lb_blocked_clear(&AS_BLOCKED(f)->bits);
}

static void BlockedFilter_merge(lb_fixed_filter *dst, const lb_fixed_filter *src, int is_union)
{
    if (is_union)
        lb_blocked_or(&AS_BLOCKED(dst)->bits, &((const BlockedFilter *)src)->bits);
    else
        lb_blocked_and(&AS_BLOCKED(dst)->bits, &((const BlockedFilter *)src)->bits);
}

/* The saved payload is the words in little-endian order (lb_blocked_bytes). */
static const uint8_t *BlockedFilter_export(const lb_fixed_filter *f, uint8_t **to_free)
{
    return lb_blocked_bytes(&((const BlockedFilter *)f)->bits, to_free);
}

static void BlockedFilter_import(lb_fixed_filter *f, const uint8_t *payload, size_t len)
{
    (void)len; /* lb_fixed_read checked it: the m / 8 bytes of the filter's blocks */
    lb_blocked_import(&AS_BLOCKED(f)->bits, payload);
}

/* The batches hash keys with lb_hash_blocked (args.scheme is LB_HASH_XXH3_MIX,
 * which a saved BlockedFilter records; the key hash is the layout's own). */
const lb_fixed_impl lb_blocked_impl = {
    .name = "BlockedFilter",
    .cells = "bits",
    .cells_per_byte = 8,
    .saved_kind = LB_KIND_BLOCKED,
    .type_slot = offsetof(lb_state, BlockedFilter),
    .parse_args = BlockedFilter_parse_args,
    .init = BlockedFilter_init,
    .release = BlockedFilter_release,
    .cells_of = BlockedFilter_cells,
    .add_key = BlockedFilter_add_key,
    .test_key = BlockedFilter_test_key,
    .key_scheme = LB_HASH_BLOCKED,
    .add_hashed = BlockedFilter_add_hashed,
    .test_hashed = BlockedFilter_test_hashed,
    .clear = BlockedFilter_clear,
    .merge = BlockedFilter_merge,
    .export = BlockedFilter_export,
    .import = BlockedFilter_import,
    .alloc_slack = 64, /* the words start on a cache line of their allocation */
};

/* ---- what only a blocked filter has ------------------------------------------ */

static PyObject *BlockedFilter_hash(PyObject *self, void *unused)
{
    (void)self;
    (void)unused;
    return PyUnicode_FromString(BLOCKED_HASH_NAME);
}

static PyObject *BlockedFilter_current_error_rate_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    BlockedFilter *f = AS_BLOCKED(self);
    if (lb_enter(&f->f.base) < 0)
        return NULL;
    double r = lb_blocked_current_fpr(&f->bits);
    lb_leave(&f->f.base);
    return PyFloat_FromDouble(r);
}

static LB_LOCKED_SELF(BlockedFilter_current_error_rate)

static PyObject *BlockedFilter_repr_unlocked(PyObject *self)
{
    BlockedFilter *f = AS_BLOCKED(self);
    const char *tname = strrchr(Py_TYPE(self)->tp_name, '.');
    tname = tname ? tname + 1 : Py_TYPE(self)->tp_name;
    if (f->f.base.closed)
        return PyUnicode_FromFormat("<%s m=%llu k=%u closed>", tname,
                                    (unsigned long long)f->f.args.m, f->f.args.k);
    return PyUnicode_FromFormat("<%s m=%llu k=%u blocks=%llu bits_set=%llu>", tname,
                                (unsigned long long)f->f.args.m, f->f.args.k,
                                (unsigned long long)f->bits.nblocks,
                                (unsigned long long)f->bits.bits_set);
}

static LB_LOCKED_REPR(BlockedFilter_repr)

/* ---- the theory, as static methods --------------------------------------- */

static PyObject *BlockedFilter_geometry(PyObject *cls, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "geometry() takes 2 arguments (n, p), %zd given",
                            nargs);
    lb_state *st = lb_state_from_type((PyTypeObject *)cls);
    if (!st)
        return NULL;
    uint64_t n, m, k;
    double p;
    if (lb_parse_u64(args[0], "n", st->InvalidCapacityError, &n) < 0 ||
        lb_parse_double_arg(NULL, args[1], "p", &p) < 0)
        return NULL;
    lb_status status = lb_blocked_size(n, p, &m, &k);
    if (status == LB_ERR_CAPACITY)
        return lb_raise(st, status, "n must be greater than zero");
    if (status != LB_OK)
        return BlockedFilter_size_error(st, status, p, args[1]);
    return Py_BuildValue("(KK)", (unsigned long long)m, (unsigned long long)k);
}

static PyObject *BlockedFilter_ideal_rate(PyObject *cls, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3)
        return PyErr_Format(PyExc_TypeError,
                            "ideal_false_positive_rate() takes 3 arguments (m, k, n), %zd given",
                            nargs);
    lb_state *st = lb_state_from_type((PyTypeObject *)cls);
    if (!st)
        return NULL;
    uint64_t m, k, n;
    if (lb_parse_u64(args[0], "m", st->InvalidCapacityError, &m) < 0 ||
        lb_parse_u64(args[1], "k", st->InvalidCapacityError, &k) < 0 ||
        lb_parse_u64(args[2], "n", st->InvalidCapacityError, &n) < 0)
        return NULL;
    lb_status status = lb_blocked_check_geometry(m, k);
    if (status != LB_OK) {
        BlockedFilter_geometry_error(st, status, m, k);
        return NULL;
    }
    return PyFloat_FromDouble(lb_blocked_fpr(m, (uint32_t)k, n));
}

static PyObject *BlockedFilter_simd(PyObject *cls, PyObject *const *args, Py_ssize_t nargs)
{
    (void)cls;
    if (nargs > 1)
        return PyErr_Format(PyExc_TypeError, "_simd() takes at most 1 argument");
    if (nargs == 1 && args[0] != Py_None) {
        const char *name = PyUnicode_Check(args[0]) ? PyUnicode_AsUTF8(args[0]) : NULL;
        if (!name) {
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_TypeError, "_simd() takes a str or None");
            return NULL;
        }
        int which = strcmp(name, "auto") == 0       ? LB_BLOCKED_IMPL_AUTO
                    : strcmp(name, "portable") == 0 ? LB_BLOCKED_IMPL_PORTABLE
                    : strcmp(name, "avx2") == 0     ? LB_BLOCKED_IMPL_AVX2
                                                    : -1;
        if (which < 0 || lb_blocked_set_impl(which) != LB_OK)
            return PyErr_Format(PyExc_ValueError, "implementation %R is not available here",
                                args[0]);
    }
    return PyUnicode_FromString(lb_blocked_impl_name());
}

static PyMethodDef BlockedFilter_methods[] = {
    {"add", lb_fixed_add, METH_O,
     "add(key) -> bool\n\nAdd key; True when it was not present."},
    {"test", lb_fixed_test, METH_O,
     "test(key) -> bool\n\nFalse: never added. True: probably added."},
    LB_BATCH_METHOD_DEFS,
    {"reset", lb_fixed_reset, METH_NOARGS, "reset()\n\nRemove every key; keep the geometry."},
    {"close", lb_fixed_close, METH_NOARGS, "close()\n\nFree the bits; later calls raise ClosedError."},
    {"__enter__", lb_enter_method, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))lb_exit_method, METH_FASTCALL, NULL},
    {"approximate_count", lb_fixed_approximate_count, METH_NOARGS,
     "approximate_count() -> int\n\nThe number of distinct keys added, estimated from the "
     "number of set bits (Swamidass and Baldi: each key sets each bit with probability k/m "
     "in this layout too)."},
    {"fill_ratio", lb_fixed_fill_ratio, METH_NOARGS, "fill_ratio() -> float\n\nSet bits / m."},
    {"current_error_rate", BlockedFilter_current_error_rate, METH_NOARGS,
     "current_error_rate() -> float\n\nThe false-positive rate now, from each block's lanes: "
     "the mean over blocks of the product over lanes of (bits set / 64) ** (k / 8)."},
    {"union", lb_fixed_union, METH_O, "union(other) -> BlockedFilter (also a | b)"},
    {"intersection", lb_fixed_intersection, METH_O, "intersection(other) -> BlockedFilter (also a & b)"},
    {"copy", lb_fixed_copy, METH_NOARGS, "copy() -> BlockedFilter"},
    {"__copy__", lb_dunder_copy, METH_NOARGS, NULL},
    {"to_bytes", lb_fixed_to_bytes_method, METH_NOARGS,
     "to_bytes() -> bytes\n\nThe filter in the saved "
     "format (versioned header, checksum)."},
    {"from_bytes", lb_fixed_from_bytes, METH_O | METH_CLASS,
     "from_bytes(data) -> BlockedFilter"},
    {"save", lb_save, METH_O,
     "save(path)\n\nWrite to_bytes() to path atomically (temporary file, fsync, rename), "
     "with the mode open() gives a new file (0o666 minus the umask); an OSError names path."},
    {"load", lb_load, METH_O | METH_CLASS, "load(path) -> BlockedFilter"},
    {"geometry", (PyCFunction)(void (*)(void))BlockedFilter_geometry, METH_FASTCALL | METH_CLASS,
     "geometry(n, p) -> (m, k)\n\nThe m and k BlockedFilter(n, p) gets: the fewest 512-bit "
     "blocks whose expected rate after n keys (ideal_false_positive_rate) is at most p, "
     "over k = 8, 16, ..., 64 (least memory; then the smallest k)."},
    {"ideal_false_positive_rate", (PyCFunction)(void (*)(void))BlockedFilter_ideal_rate,
     METH_FASTCALL | METH_CLASS,
     "ideal_false_positive_rate(m, k, n) -> float\n\nThe expected false-positive rate of a "
     "blocked filter of m bits and k bits per key after n distinct keys, with ideal hashing: "
     "the mean over each block's load (Binomial(n, 512/m)) of the chance that a new key's "
     "k/8 bits in each of the 8 lanes are all set (Putze et al.)."},
    {"_simd", (PyCFunction)(void (*)(void))BlockedFilter_simd, METH_FASTCALL | METH_CLASS,
     "_simd(name=None) -> str\n\nThe implementation in use (\"avx2\" or \"portable\"); "
     "name (\"auto\", \"portable\", \"avx2\") switches every BlockedFilter of the process "
     "(for tests and benchmarks)."},
    {"_repr_html_", lb_repr_html, METH_NOARGS, NULL},
    {"__reduce__", lb_reduce, METH_NOARGS, NULL},
    {"__sizeof__", lb_fixed_sizeof, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef BlockedFilter_getset[] = {
    {"m", lb_fixed_get_m, NULL, "number of bits: 512 per block", LB_FIXED_ARGS},
    {"k", lb_fixed_get_k, NULL, "bits per key: 8 per round, one in each lane", LB_FIXED_ARGS},
    {"hash", BlockedFilter_hash, NULL,
     "\"xxh3-block\": XXH3-64 of the key and the split-block walk",
     NULL},
    {"capacity", lb_fixed_get_capacity, NULL, "the capacity it was sized for, or None", LB_FIXED_ARGS},
    {"error_rate", lb_fixed_get_error_rate, NULL, "the rate it was sized for, or None", LB_FIXED_ARGS},
    {"nbytes", lb_fixed_get_nbytes, NULL, "bytes of bits: m / 8", NULL},
    {"bits_set", lb_fixed_get_cells_used, NULL, "number of bits set", NULL},
    {"closed", lb_closed_get, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef BlockedFilter_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(lb_base, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot BlockedFilter_slots[] = {
    {Py_tp_doc, "BlockedFilter(capacity, error_rate=0.01)\n"
                "BlockedFilter(*, m, k)\n\n"
                "A split-block Bloom filter: each key sets k bits in one 64-byte block "
                "(one cache line), k/8 in each of its eight 64-bit lanes.  Sized for its "
                "own, higher, rate at equal memory: the error_rate holds at capacity."},
    {Py_tp_new, lb_fixed_tp_new},
    {Py_tp_dealloc, lb_fixed_dealloc},
    {Py_tp_traverse, lb_fixed_traverse},
    {Py_tp_methods, BlockedFilter_methods},
    {Py_tp_getset, BlockedFilter_getset},
    {Py_tp_members, BlockedFilter_members},
    {Py_tp_repr, BlockedFilter_repr},
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

static PyType_Spec BlockedFilter_spec = {
    .name = "ling_bloom.BlockedFilter",
    .basicsize = sizeof(BlockedFilter),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = BlockedFilter_slots,
};

PyTypeObject *lb_blocked_filter_type(PyObject *module)
{
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &BlockedFilter_spec, NULL);
}
