/* memory_filter.c: MemoryFilter, a Bloom filter in one bit array: in this
 * process's memory, or in a file that processes map and share (open()). */
#include "errors.h"
#include "filters.h"
#include "fixed.h"
#include "keys.h"
#include "saveload.h"

#include <errno.h>
#include <math.h>
#include <structmember.h>

#include "bitarray.h"
#include "mapped.h"
#include "params.h"

typedef struct {
    lb_fixed_filter f;
    lb_bits bits;
    /* A filter from open(): the mapped file, its path (str) and mode.  The
     * bits are the file's payload; path is NULL for a filter in memory. */
    lb_mapping map;
    PyObject *path;
    const char *mode;
} MemoryFilter;

#define AS_MEMORY(o) ((MemoryFilter *)(o))

static lb_status MemoryFilter_init(lb_fixed_filter *f, uint64_t m)
{
    MemoryFilter *self = (MemoryFilter *)f;
    f->cells_used = &self->bits.bits_set;
    return lb_bits_init(&self->bits, m);
}

static void MemoryFilter_release(lb_base *b)
{
    lb_bits_free(&((MemoryFilter *)b)->bits);
}

/* Mapped filters: the storage is the file, given by open() after lb_fixed_new. */
static lb_status MemoryFilter_init_mapped(lb_fixed_filter *f, uint64_t m)
{
    MemoryFilter *self = (MemoryFilter *)f;
    f->cells_used = &self->bits.bits_set;
    memset(&self->bits, 0, sizeof(self->bits));
    self->bits.m = m;
    self->bits.nbytes = (m + 7) / 8;
    return LB_OK;
}

static void MemoryFilter_release_mapped(lb_base *b)
{
    MemoryFilter *self = (MemoryFilter *)b;
    self->bits.data = NULL;
    lb_map_close(&self->map);
}

/* Other processes add to the file: count its bits when the count is asked. */
static void MemoryFilter_recount(lb_fixed_filter *f)
{
    MemoryFilter *self = (MemoryFilter *)f;
    if (self->bits.data)
        self->bits.bits_set = lb_bits_popcount(&self->bits);
}

/* ---- the storage operations (lb_fixed_impl) --------------------------------- */

static uint8_t *MemoryFilter_cells(const lb_fixed_filter *f)
{
    return ((const MemoryFilter *)f)->bits.data;
}

static int MemoryFilter_add_key(lb_fixed_filter *f, const void *key, size_t len)
{
    return lb_bits_add(&AS_MEMORY(f)->bits, &f->geo, lb_hash(f->geo.scheme, key, len));
}

static int MemoryFilter_test_key(const lb_fixed_filter *f, const void *key, size_t len)
{
    return lb_bits_test(&((const MemoryFilter *)f)->bits, &f->geo,
                        lb_hash(f->geo.scheme, key, len));
}

static void MemoryFilter_add_hashed(lb_fixed_filter *f, const lb_hash_pair *pairs, size_t n,
                                    uint8_t *out)
{
    lb_bits_add_hashed(&AS_MEMORY(f)->bits, &f->geo, pairs, n, out);
}

static void MemoryFilter_test_hashed(const lb_fixed_filter *f, const lb_hash_pair *pairs,
                                     size_t n, uint8_t *out)
{
    lb_bits_test_hashed(&((const MemoryFilter *)f)->bits, &f->geo, pairs, n, out);
}

static void MemoryFilter_clear(lb_fixed_filter *f)
{
    lb_bits_clear(&AS_MEMORY(f)->bits);
}

static void MemoryFilter_merge(lb_fixed_filter *dst, const lb_fixed_filter *src, int is_union)
{
    if (is_union)
        lb_bits_or(&AS_MEMORY(dst)->bits, &((const MemoryFilter *)src)->bits);
    else
        lb_bits_and(&AS_MEMORY(dst)->bits, &((const MemoryFilter *)src)->bits);
}

static void MemoryFilter_import(lb_fixed_filter *f, const uint8_t *payload, size_t len)
{
    memcpy(AS_MEMORY(f)->bits.data, payload, len);
    AS_MEMORY(f)->bits.bits_set = lb_bits_popcount(&AS_MEMORY(f)->bits);
}

#define MEMORY_IMPL_COMMON                                                                   \
    .name = "MemoryFilter", .cells = "bits", .cells_per_byte = 8,                           \
    .saved_kind = LB_KIND_MEMORY, .type_slot = offsetof(lb_state, MemoryFilter),            \
    .cells_of = MemoryFilter_cells, .add_key = MemoryFilter_add_key,                        \
    .test_key = MemoryFilter_test_key, .key_scheme = LB_FIXED_OWN_SCHEME,                   \
    .add_hashed = MemoryFilter_add_hashed, .test_hashed = MemoryFilter_test_hashed,         \
    .clear = MemoryFilter_clear, .merge = MemoryFilter_merge, .import = MemoryFilter_import

const lb_fixed_impl lb_memory_impl = {
    MEMORY_IMPL_COMMON,
    .init = MemoryFilter_init,
    .release = MemoryFilter_release,
};
/* A mapped file: counted again when read; its copy or union is a filter in memory. */
static const lb_fixed_impl MemoryFilter_mapped_impl = {
    MEMORY_IMPL_COMMON,
    .init = MemoryFilter_init_mapped,
    .release = MemoryFilter_release_mapped,
    .recount = MemoryFilter_recount,
    .copy_impl = &lb_memory_impl,
};

static MemoryFilter *MemoryFilter_new_from(PyTypeObject *type, const lb_fixed_args *a)
{
    return (MemoryFilter *)lb_fixed_new(type, a, &lb_memory_impl);
}

/* The raw bit array: ceil(m/8) bytes in Redis's SETBIT order. */
static PyObject *MemoryFilter_to_bitmap_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    MemoryFilter *f = AS_MEMORY(self);
    if (lb_enter(&f->f.base) < 0)
        return NULL;
    PyObject *r = PyBytes_FromStringAndSize((const char *)f->bits.data, (Py_ssize_t)f->bits.nbytes);
    lb_leave(&f->f.base);
    return r;
}

static LB_LOCKED_SELF(MemoryFilter_to_bitmap)

static PyObject *MemoryFilter_from_bitmap(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"data", "m", "k", "hash", NULL};
    lb_state *st = lb_state_from_type((PyTypeObject *)cls);
    if (!st)
        return NULL;
    Py_buffer view;
    PyObject *mo, *ko, *hash = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "y*OO|O:from_bitmap", kwlist, &view, &mo, &ko,
                                     &hash))
        return NULL;
    PyObject *result = NULL;
    lb_fixed_args a;
    memset(&a, 0, sizeof(a));
    uint64_t m, k;
    if (lb_parse_hash(hash, &a.scheme) < 0 ||
        lb_parse_u64(mo, "m", st->InvalidCapacityError, &m) < 0 ||
        lb_parse_k(st, NULL, ko, &k) < 0)
        goto done;
    lb_status s = lb_check_geometry(m, k);
    if (s != LB_OK) {
        lb_raise(st, s, s == LB_ERR_ARG ? "k must be in 1..64" : NULL);
        goto done;
    }
    a.m = m;
    a.k = (uint32_t)k;
    /* Redis keeps a bitmap only as long as its highest set bit: a shorter
     * string is the same bitmap with zeros after it. */
    if ((uint64_t)view.len > (m + 7) / 8) {
        PyErr_Format(PyExc_ValueError, "bitmap of %zd bytes is longer than m=%llu bits allow",
                     view.len, (unsigned long long)m);
        goto done;
    }
    if ((m & 7) && (uint64_t)view.len == (m + 7) / 8 &&
        (((const uint8_t *)view.buf)[view.len - 1] & (0xffu >> (m & 7)))) {
        PyErr_SetString(PyExc_ValueError, "bitmap has bits set past m");
        goto done;
    }
    MemoryFilter *f = MemoryFilter_new_from((PyTypeObject *)cls, &a);
    if (f) {
        memcpy(f->bits.data, view.buf, (size_t)view.len);
        f->bits.bits_set = lb_bits_popcount(&f->bits);
    }
    result = (PyObject *)f;
done:
    PyBuffer_Release(&view);
    return result;
}

static PyObject *MemoryFilter_repr_unlocked(PyObject *self)
{
    MemoryFilter *f = AS_MEMORY(self);
    if (f->path && !f->f.base.closed) {
        MemoryFilter_recount(&f->f);
        const char *tname = strrchr(Py_TYPE(f)->tp_name, '.');
        tname = tname ? tname + 1 : Py_TYPE(f)->tp_name;
        return PyUnicode_FromFormat("<%s m=%llu k=%u hash=%s bits_set=%llu mapped=%R mode=%s>",
                                    tname, (unsigned long long)f->f.args.m, f->f.args.k,
                                    lb_hash_scheme_name(f->f.args.scheme),
                                    (unsigned long long)f->bits.bits_set, f->path, f->mode);
    }
    char extra[64];
    PyOS_snprintf(extra, sizeof(extra), "bits_set=%llu", (unsigned long long)f->bits.bits_set);
    return lb_fixed_repr(&f->f, extra);
}

static LB_LOCKED_REPR(MemoryFilter_repr)

/* ---- a file mapped by several processes ---------------------------------- */

static void MemoryFilter_dealloc(PyObject *self)
{
    PyObject *path = AS_MEMORY(self)->path;
    AS_MEMORY(self)->path = NULL;
    lb_fixed_dealloc(self);
    Py_XDECREF(path);
}

/* 0o666 minus the umask (the package's umask hook): the mode open() gives a
 * new file. */
static int new_file_mode(lb_state *st, unsigned *out)
{
    PyObject *hook = lb_hook(st, LB_HOOK_UMASK);
    PyObject *r = hook ? PyObject_CallNoArgs(hook) : NULL;
    if (!r)
        return -1;
    long mask = PyLong_AsLong(r);
    Py_DECREF(r);
    if (mask == -1 && PyErr_Occurred())
        return -1;
    *out = 0666u & ~(unsigned)mask;
    return 0;
}

/* open()'s mode: its name (kept for repr and .mode) and what it does. */
typedef struct {
    const char *name;
    int create, exclusive, writable;
} open_mode;

static int parse_open_mode(const char *mode, open_mode *out)
{
    static const open_mode modes[] = {
        {"r", 0, 0, 0}, {"r+", 0, 0, 1}, {"w", 1, 0, 1}, {"x", 1, 1, 1}};
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        if (strcmp(mode, modes[i].name) == 0) {
            *out = modes[i];
            return 0;
        }
    }
    PyErr_Format(PyExc_ValueError, "mode must be 'r', 'r+', 'w' or 'x', not '%s'", mode);
    return -1;
}

/* Create (with a's geometry) or open the file at cpath, with the GIL released:
 * 0 and *map, or -1 with OSError naming path_obj, CorruptFileError, or the
 * exception of the status. */
static int map_file(lb_state *st, const char *cpath, PyObject *path_obj, PyObject *path_str,
                    const open_mode *om, const lb_fixed_args *a, unsigned file_mode,
                    lb_mapping *map)
{
    lb_status s;
    int err = 0;
    const char *why = NULL;
    if (om->create) {
        lb_format_header h;
        memset(&h, 0, sizeof(h));
        h.kind = LB_KIND_MEMORY;
        h.scheme = a->scheme;
        h.m = a->m;
        h.k = a->k;
        h.has_capacity = a->has_capacity;
        h.capacity = a->capacity;
        h.error_rate = a->error_rate;
        Py_BEGIN_ALLOW_THREADS
        s = lb_map_create(cpath, &h, om->exclusive, file_mode, map, &err);
        Py_END_ALLOW_THREADS
    }
    else {
        /* A sealed file is read whole (its checksum) before it is used. */
        Py_BEGIN_ALLOW_THREADS
        s = lb_map_open(cpath, om->writable, map, &err, &why);
        Py_END_ALLOW_THREADS
    }
    if (s == LB_ERR_BACKEND) {
        errno = err;
        PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, path_obj);
        return -1;
    }
    if (s == LB_ERR_FORMAT) {
        PyErr_Format(st->CorruptFileError, "%R is not a MemoryFilter file: %s", path_str, why);
        return -1;
    }
    if (s != LB_OK) {
        lb_raise(st, s, NULL);
        return -1;
    }
    return 0;
}

static void args_of_header(const lb_format_header *h, lb_fixed_args *out)
{
    memset(out, 0, sizeof(*out));
    out->m = h->m;
    out->k = h->k;
    out->scheme = h->scheme;
    out->has_capacity = h->has_capacity;
    out->capacity = h->capacity;
    out->error_rate = h->error_rate;
}

static PyObject *MemoryFilter_open(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"path", "mode", "capacity", "error_rate", "m", "k", "hash", NULL};
    PyObject *path_obj, *capacity = NULL, *error_rate = NULL, *m = NULL, *k = NULL, *hash = NULL;
    const char *mode = "r";
    lb_state *st = lb_state_from_type((PyTypeObject *)cls);
    if (!st || !PyArg_ParseTupleAndKeywords(args, kwargs, "O|sOO$OOO:open", kwlist, &path_obj,
                                            &mode, &capacity, &error_rate, &m, &k, &hash))
        return NULL;
    open_mode om;
    if (parse_open_mode(mode, &om) < 0)
        return NULL;
    lb_fixed_args a;
    int absent = lb_fixed_args_from(st, capacity, error_rate, m, k, hash, "MemoryFilter.open", 1, &a);
    if (absent < 0)
        return NULL;
    if (om.create && absent) {
        PyErr_Format(PyExc_TypeError, "MemoryFilter.open(path, '%s') creates a file: give "
                     "capacity (and error_rate) or m and k", om.name);
        return NULL;
    }
    PyObject *fs = NULL;
    if (!PyUnicode_FSConverter(path_obj, &fs))
        return NULL;
    PyObject *path_str = PyUnicode_DecodeFSDefault(PyBytes_AS_STRING(fs));
    if (!path_str) {
        Py_DECREF(fs);
        return NULL;
    }
    unsigned file_mode = 0;
    lb_mapping map;
    if ((om.create && new_file_mode(st, &file_mode) < 0) ||
        map_file(st, PyBytes_AS_STRING(fs), path_obj, path_str, &om, &a, file_mode, &map) < 0)
        goto fail;
    lb_fixed_args fa;
    args_of_header(&map.h, &fa);
    if (!om.create && (!absent || (hash && hash != Py_None)) &&
        (a.scheme != fa.scheme || (!absent && (a.m != fa.m || a.k != fa.k)))) {
        PyErr_Format(st->GeometryMismatchError,
                     "%R holds m=%llu k=%u hash=%s, not the filter asked for", path_str,
                     (unsigned long long)fa.m, fa.k, lb_hash_scheme_name(fa.scheme));
        lb_map_close(&map);
        goto fail;
    }
    MemoryFilter *f = (MemoryFilter *)
        lb_fixed_new((PyTypeObject *)cls, &fa, &MemoryFilter_mapped_impl);
    if (!f) {
        lb_map_close(&map);
        goto fail;
    }
    f->map = map;
    f->bits.data = map.base + LB_FORMAT_FIXED_HEADER;
    f->bits.shared = om.writable;
    f->bits.bits_set = lb_bits_popcount(&f->bits);
    f->f.base.read_only = !om.writable;
    f->path = path_str;
    f->mode = om.name;
    Py_DECREF(fs);
    return (PyObject *)f;
fail:
    Py_DECREF(fs);
    Py_DECREF(path_str);
    return NULL;
}

static PyObject *MemoryFilter_flush_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    MemoryFilter *f = AS_MEMORY(self);
    if (lb_enter(&f->f.base) < 0)
        return NULL;
    int err = 0;
    lb_status s = LB_OK;
    if (f->path) {
        Py_BEGIN_ALLOW_THREADS
        s = lb_map_sync(&f->map, &err);
        Py_END_ALLOW_THREADS
    }
    lb_leave(&f->f.base);
    if (s != LB_OK) {
        errno = err;
        return PyErr_SetFromErrnoWithFilenameObject(PyExc_OSError, f->path);
    }
    Py_RETURN_NONE;
}

static LB_LOCKED_SELF(MemoryFilter_flush)

static PyObject *MemoryFilter_get_path(PyObject *self, void *unused)
{
    (void)unused;
    return Py_NewRef(AS_MEMORY(self)->path ? AS_MEMORY(self)->path : Py_None);
}

static PyObject *MemoryFilter_get_mode(PyObject *self, void *unused)
{
    (void)unused;
    if (!AS_MEMORY(self)->path)
        Py_RETURN_NONE;
    return PyUnicode_FromString(AS_MEMORY(self)->mode);
}

static PyMethodDef MemoryFilter_methods[] = {
    {"add", lb_fixed_add, METH_O, "add(key) -> bool\n\nAdd key; True when it was not present."},
    {"test", lb_fixed_test, METH_O,
     "test(key) -> bool\n\nFalse: never added. True: probably added."},
    LB_BATCH_METHOD_DEFS,
    {"reset", lb_fixed_reset, METH_NOARGS, "reset()\n\nRemove every key; keep the geometry."},
    {"close", lb_fixed_close, METH_NOARGS, "close()\n\nFree the bits; later calls raise ClosedError."},
    {"__enter__", lb_enter_method, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))lb_exit_method, METH_FASTCALL, NULL},
    {"approximate_count", lb_fixed_approximate_count, METH_NOARGS,
     "approximate_count() -> int\n\nThe number of distinct keys added, estimated from the "
     "number of set bits (Swamidass and Baldi)."},
    {"fill_ratio", lb_fixed_fill_ratio, METH_NOARGS, "fill_ratio() -> float\n\nSet bits / m."},
    {"current_error_rate", lb_fixed_current_error_rate, METH_NOARGS,
     "current_error_rate() -> float\n\nThe false-positive rate now: fill_ratio() ** k."},
    {"union", lb_fixed_union, METH_O, "union(other) -> MemoryFilter (also a | b)"},
    {"intersection", lb_fixed_intersection, METH_O, "intersection(other) -> MemoryFilter (also a & b)"},
    {"copy", lb_fixed_copy, METH_NOARGS, "copy() -> MemoryFilter"},
    {"__copy__", lb_dunder_copy, METH_NOARGS, NULL},
    {"to_bytes", lb_fixed_to_bytes_method, METH_NOARGS,
     "to_bytes() -> bytes\n\nThe filter in the saved "
     "format (versioned header, checksum)."},
    {"from_bytes", lb_fixed_from_bytes, METH_O | METH_CLASS,
     "from_bytes(data) -> MemoryFilter"},
    {"to_bitmap", MemoryFilter_to_bitmap, METH_NOARGS,
     "to_bitmap() -> bytes\n\nThe raw bits, bit i at byte i//8, bit 7 - i%8 (Redis's order)."},
    {"from_bitmap", (PyCFunction)(void (*)(void))MemoryFilter_from_bitmap,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_bitmap(data, m, k, hash=\"xxh3-mix\") -> MemoryFilter\n\nA filter over raw bits (a "
     "shorter bitmap is padded with zeros, as Redis does)."},
    {"save", lb_save, METH_O,
     "save(path)\n\nWrite to_bytes() to path atomically (temporary file, fsync, rename), "
     "with the mode open() gives a new file (0o666 minus the umask); an OSError names path."},
    {"load", lb_load, METH_O | METH_CLASS, "load(path) -> MemoryFilter"},
    {"open", (PyCFunction)(void (*)(void))MemoryFilter_open,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "open(path, mode=\"r\", capacity=None, error_rate=0.01, *, m=None, k=None, hash=None) "
     "-> MemoryFilter\n\nA filter whose bits are a file mapped into memory and shared with "
     "every process that opens it: \"r\" read-only, \"r+\" read and add, \"w\" create (or "
     "replace, by renaming a new file over path), \"x\" create a file that must not exist.  "
     "Adds from several processes are atomic; the file stays loadable with load()."},
    {"flush", MemoryFilter_flush, METH_NOARGS,
     "flush()\n\nWrite a mapped filter's changed pages to its file now (msync); nothing for "
     "a filter in memory."},
    {"_repr_html_", lb_repr_html, METH_NOARGS, NULL},
    {"__reduce__", lb_reduce, METH_NOARGS, NULL},
    {"__sizeof__", lb_fixed_sizeof, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef MemoryFilter_getset[] = {
    {"m", lb_fixed_get_m, NULL, "number of bits", LB_FIXED_ARGS},
    {"k", lb_fixed_get_k, NULL, "number of hash functions", LB_FIXED_ARGS},
    {"hash", lb_fixed_get_hash, NULL, "hashing scheme: \"xxh3-mix\" (default), \"xxh3\" (the unmixed walk) or \"ling-base\"",
     LB_FIXED_ARGS},
    {"capacity", lb_fixed_get_capacity, NULL, "the capacity it was sized for, or None", LB_FIXED_ARGS},
    {"error_rate", lb_fixed_get_error_rate, NULL, "the rate it was sized for, or None", LB_FIXED_ARGS},
    {"nbytes", lb_fixed_get_nbytes, NULL, "bytes of bit array: ceil(m / 8)", NULL},
    {"bits_set", lb_fixed_get_cells_used, NULL, "number of bits set", NULL},
    {"closed", lb_closed_get, NULL, "whether close() was called", NULL},
    {"path", MemoryFilter_get_path, NULL,
     "the mapped file (open()), or None for a filter in memory", NULL},
    {"mode", MemoryFilter_get_mode, NULL, "the mode the file was opened with, or None", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef MemoryFilter_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(lb_base, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot MemoryFilter_slots[] = {
    {Py_tp_doc, "MemoryFilter(capacity, error_rate=0.01, *, hash=\"xxh3-mix\")\n"
                "MemoryFilter(*, m, k, hash=\"xxh3-mix\")\n\n"
                "A Bloom filter in one bit array of m bits with k hash functions."},
    {Py_tp_new, lb_fixed_tp_new},
    {Py_tp_dealloc, MemoryFilter_dealloc},
    {Py_tp_traverse, lb_fixed_traverse},
    {Py_tp_methods, MemoryFilter_methods},
    {Py_tp_getset, MemoryFilter_getset},
    {Py_tp_members, MemoryFilter_members},
    {Py_tp_repr, MemoryFilter_repr},
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

static PyType_Spec MemoryFilter_spec = {
    .name = "ling_bloom.MemoryFilter",
    .basicsize = sizeof(MemoryFilter),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = MemoryFilter_slots,
};

PyTypeObject *lb_memory_filter_type(PyObject *module)
{
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &MemoryFilter_spec, NULL);
}
