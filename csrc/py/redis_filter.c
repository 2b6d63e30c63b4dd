/* redis_filter.c: RedisFilter, a Bloom filter kept as a Redis bitmap and
 * hashed on the client (csrc/core/redis_bitmap.h does the Redis side). */
#include "keys.h"
#include "module.h"
#include "redis_connection.h"

#include <math.h>
#include <structmember.h>

#include "params.h"
#include "redis_bitmap.h"

typedef struct {
    lb_base base;
    lb_fixed_args args;
    lb_redis *conn;
    lb_redis_bitmap *bm;
    PyObject *key;          /* as given: str or bytes */
    PyObject *key_bytes;    /* its bytes */
    double ttl;             /* seconds; 0: none */
    size_t chunk;           /* keys per round trip */
    lb_redis_status last;   /* status of the last failed round trip */
} RedisFilter;

#define RF(o) ((RedisFilter *)(o))

static void rf_release(lb_base *b)
{
    RedisFilter *f = (RedisFilter *)b;
    lb_redis_bitmap_free(f->bm);
    f->bm = NULL;
    lb_redis_free(f->conn);
    f->conn = NULL;
}

static void rf_raise_backend(lb_base *b)
{
    RedisFilter *f = (RedisFilter *)b;
    lb_raise_redis(b->st, f->last, f->conn, f->key);
}

static int parse_ttl(PyObject *obj, double *out)
{
    *out = 0;
    if (!obj || obj == Py_None)
        return 0;
    PyObject *secs = NULL;
    if (PyObject_HasAttrString(obj, "total_seconds"))
        secs = PyObject_CallMethod(obj, "total_seconds", NULL);
    else
        secs = Py_NewRef(obj);
    if (!secs)
        return -1;
    double t = PyFloat_AsDouble(secs);
    Py_DECREF(secs);
    if (t == -1.0 && PyErr_Occurred())
        return -1;
    if (!(t > 0) || !isfinite(t) || t > 1e12) {
        PyErr_Format(PyExc_ValueError, "ttl must be a positive number of seconds or None, not %R",
                     obj);
        return -1;
    }
    *out = t;
    return 0;
}

static PyObject *rf_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "capacity", "error_rate", "m", "k", "hash", "ttl", "mode",
                             "chunk_size", LB_CONN_KWNAMES, NULL};
    lb_state *st = lb_state_from_type(type);
    if (!st)
        return NULL;
    PyObject *key, *capacity = Py_None, *error_rate = Py_None, *m = Py_None, *k = Py_None,
                   *hash = Py_None, *ttl = Py_None, *mode = Py_None, *chunk = Py_None;
    lb_conn_kw kw = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|OO$OOOOOO" LB_CONN_KWFORMAT ":RedisFilter",
                                     kwlist, &key, &capacity, &error_rate, &m, &k, &hash, &ttl,
                                     &mode, &chunk, LB_CONN_KWADDR(kw)))
        return NULL;

    PyObject *key_bytes;
    if (PyUnicode_Check(key))
        key_bytes = PyUnicode_AsUTF8String(key);
    else if (PyBytes_Check(key))
        key_bytes = Py_NewRef(key);
    else
        return PyErr_Format(PyExc_TypeError, "key must be a str or bytes, not %.200s",
                            Py_TYPE(key)->tp_name);
    if (!key_bytes)
        return NULL;
    RedisFilter *self = NULL;
    lb_redis_config cfg;
    lb_redis_config_init(&cfg);
    if (PyBytes_GET_SIZE(key_bytes) == 0) {
        PyErr_SetString(st->EmptyKeyError, "key must not be empty");
        goto fail;
    }

    lb_fixed_args a;
    int adopt = lb_fixed_args_from(st, capacity, error_rate, m, k, hash, "RedisFilter", 1, &a);
    if (adopt < 0)
        goto fail;
    double ttl_s;
    if (parse_ttl(ttl, &ttl_s) < 0)
        goto fail;
    lb_rb_mode rb_mode = LB_RB_BITFIELD;
    if (mode != Py_None) {
        const char *ms = PyUnicode_Check(mode) ? PyUnicode_AsUTF8(mode) : NULL;
        if (ms && strcmp(ms, "bitfield") == 0)
            rb_mode = LB_RB_BITFIELD;
        else if (ms && strcmp(ms, "setbit") == 0)
            rb_mode = LB_RB_SETBIT;
        else {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError, "mode must be \"bitfield\" or \"setbit\", not %R",
                             mode);
            goto fail;
        }
    }
    size_t chunk_keys = LB_RB_DEFAULT_CHUNK_KEYS;
    if (chunk != Py_None) {
        Py_ssize_t c = PyLong_AsSsize_t(chunk);
        if (c == -1 && PyErr_Occurred())
            goto fail;
        if (c < 1 || c > 1000000) {
            PyErr_SetString(PyExc_ValueError, "chunk_size must be in 1..1000000");
            goto fail;
        }
        chunk_keys = (size_t)c;
    }
    if (lb_conn_config(st, &kw, &cfg) < 0)
        goto fail;

    self = (RedisFilter *)type->tp_alloc(type, 0);
    if (!self)
        goto fail;
    if (lb_base_init(&self->base, type) < 0)
        goto fail;
    self->base.raise_backend = rf_raise_backend;
    self->key = Py_NewRef(key);
    self->key_bytes = Py_NewRef(key_bytes);
    self->ttl = ttl_s;
    self->chunk = chunk_keys;
    self->conn = lb_redis_new(&cfg);
    if (!self->conn) {
        PyErr_NoMemory();
        goto fail;
    }
    if (adopt == 1) {
        /* No geometry given: adopt the one stored next to the bitmap. */
        lb_geometry g;
        lb_redis_status rs;
        Py_BEGIN_ALLOW_THREADS
        rs = lb_redis_bitmap_read_meta(self->conn, PyBytes_AS_STRING(key_bytes),
                                       (size_t)PyBytes_GET_SIZE(key_bytes), &g);
        Py_END_ALLOW_THREADS
        if (rs == LB_REDIS_ERR_NOTFOUND) {
            PyErr_Format(PyExc_KeyError,
                         "no ling_bloom filter is stored at key %R: give capacity (and "
                         "error_rate) or m and k to create one",
                         key);
            goto fail;
        }
        if (rs != LB_REDIS_OK) {
            lb_raise_redis(st, rs, self->conn, key);
            goto fail;
        }
        a.m = g.m;
        a.k = g.k;
        a.scheme = g.scheme;
    }
    self->args = a;
    lb_geometry g;
    lb_geometry_init(&g, a.m, a.k, a.scheme);
    lb_redis_status rs = lb_redis_bitmap_new(self->conn, PyBytes_AS_STRING(key_bytes),
                                             (size_t)PyBytes_GET_SIZE(key_bytes), &g,
                                             (int64_t)ceil(ttl_s * 1000.0), &self->bm);
    if (rs != LB_REDIS_OK) {
        lb_raise_redis(st, rs, self->conn, key);
        goto fail;
    }
    lb_redis_bitmap_set_mode(self->bm, rb_mode);
    lb_redis_bitmap_set_chunk_keys(self->bm, chunk_keys);
    lb_redis_config_free(&cfg);
    Py_DECREF(key_bytes);
    return (PyObject *)self;

fail:
    lb_redis_config_free(&cfg);
    Py_DECREF(key_bytes);
    Py_XDECREF(self);
    return NULL;
}

static void rf_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    RedisFilter *f = RF(self);
    if (f->base.lock)
        rf_release(&f->base);
    lb_base_fini(&f->base);
    Py_CLEAR(f->key);
    Py_CLEAR(f->key_bytes);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int rf_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

/* ---- round trips -------------------------------------------------------- */

typedef enum { OP_ADD, OP_TEST } rf_op;

static lb_status rf_run(RedisFilter *f, rf_op op, const lb_key *keys, size_t n, uint8_t *out)
{
    lb_redis_status rs = op == OP_ADD ? lb_redis_bitmap_add(f->bm, keys, n, out)
                                      : lb_redis_bitmap_test(f->bm, keys, n, out);
    if (rs == LB_REDIS_OK)
        return LB_OK;
    f->last = rs;
    return LB_ERR_BACKEND;
}

static lb_status rf_add_chunk(lb_base *b, const lb_key *keys, size_t n, uint8_t *out,
                              size_t *done)
{
    lb_status s = rf_run((RedisFilter *)b, OP_ADD, keys, n, out);
    *done = s == LB_OK ? n : 0;
    return s;
}

static lb_status rf_test_chunk(lb_base *b, const lb_key *keys, size_t n, uint8_t *out,
                               size_t *done)
{
    lb_status s = rf_run((RedisFilter *)b, OP_TEST, keys, n, out);
    *done = s == LB_OK ? n : 0;
    return s;
}

/* One key, one round trip, with the GIL released. */
static int rf_single(RedisFilter *f, PyObject *key, rf_op op)
{
    lb_key k;
    lb_key_hold hold;
    if (lb_key_get(f->base.st, key, &k, &hold) < 0)
        return -1;
    if (lb_enter(&f->base) < 0) {
        lb_key_release(&hold);
        return -1;
    }
    uint8_t out = 0;
    lb_status s;
    lb_busy_begin(&f->base);
    Py_BEGIN_ALLOW_THREADS
    s = rf_run(f, op, &k, 1, &out);
    Py_END_ALLOW_THREADS
    lb_busy_end(&f->base);
    lb_key_release(&hold);
    if (s != LB_OK) {
        rf_raise_backend(&f->base);
        return -1;
    }
    return out;
}

static PyObject *rf_add(PyObject *self, PyObject *key)
{
    int r = rf_single(RF(self), key, OP_ADD);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static int rf_contains(PyObject *self, PyObject *key)
{
    return rf_single(RF(self), key, OP_TEST);
}

static PyObject *rf_test(PyObject *self, PyObject *key)
{
    int r = rf_contains(self, key);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

static PyObject *rf_add_many(PyObject *self, PyObject *keys)
{
    return lb_run_batch(&RF(self)->base, keys, rf_add_chunk, LB_RESULT_LIST, LB_GIL_ALWAYS,
                        RF(self)->chunk);
}

static PyObject *rf_update(PyObject *self, PyObject *keys)
{
    return lb_run_batch(&RF(self)->base, keys, rf_add_chunk, LB_RESULT_NONE, LB_GIL_ALWAYS,
                        RF(self)->chunk);
}

static PyObject *rf_test_many(PyObject *self, PyObject *keys)
{
    return lb_run_batch(&RF(self)->base, keys, rf_test_chunk, LB_RESULT_LIST, LB_GIL_ALWAYS,
                        RF(self)->chunk);
}

/* Run fn on the bitmap with the GIL released; raise on failure. */
#define RF_CALL(f, expr)                              \
    do {                                              \
        lb_redis_status rs_;                          \
        if (lb_enter(&(f)->base) < 0)                 \
            return NULL;                              \
        lb_busy_begin(&(f)->base);                    \
        Py_BEGIN_ALLOW_THREADS                        \
        rs_ = (expr);                                 \
        Py_END_ALLOW_THREADS                          \
        lb_busy_end(&(f)->base);                      \
        if (rs_ != LB_REDIS_OK) {                     \
            lb_raise_redis((f)->base.st, rs_, (f)->conn, (f)->key); \
            return NULL;                              \
        }                                             \
    } while (0)

static PyObject *rf_reset(PyObject *self, PyObject *unused)
{
    (void)unused;
    RF_CALL(RF(self), lb_redis_bitmap_reset(RF(self)->bm));
    Py_RETURN_NONE;
}

static PyObject *rf_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    return lb_close_with(&RF(self)->base, rf_release);
}

static PyObject *rf_bits_set(PyObject *self, PyObject *unused)
{
    (void)unused;
    uint64_t count = 0;
    RF_CALL(RF(self), lb_redis_bitmap_bitcount(RF(self)->bm, &count));
    return PyLong_FromUnsignedLongLong(count);
}

static PyObject *rf_approximate_count(PyObject *self, PyObject *unused)
{
    RedisFilter *f = RF(self);
    uint64_t count = 0;
    (void)unused;
    RF_CALL(f, lb_redis_bitmap_bitcount(f->bm, &count));
    double n = lb_estimate_count(f->args.m, f->args.k, count);
    if (!isfinite(n))
        return PyLong_FromUnsignedLongLong(f->args.m);
    return PyLong_FromDouble(floor(n + 0.5));
}

static PyObject *rf_fill_ratio(PyObject *self, PyObject *unused)
{
    RedisFilter *f = RF(self);
    uint64_t count = 0;
    (void)unused;
    RF_CALL(f, lb_redis_bitmap_bitcount(f->bm, &count));
    return PyFloat_FromDouble((double)count / (double)f->args.m);
}

static PyObject *rf_current_error_rate(PyObject *self, PyObject *unused)
{
    RedisFilter *f = RF(self);
    uint64_t count = 0;
    (void)unused;
    RF_CALL(f, lb_redis_bitmap_bitcount(f->bm, &count));
    return PyFloat_FromDouble(pow((double)count / (double)f->args.m, (double)f->args.k));
}

/* Check that mf is a MemoryFilter of this filter's m, k and hash. */
static int rf_check_memory_filter(RedisFilter *f, PyObject *mf)
{
    lb_state *st = f->base.st;
    if (!PyObject_TypeCheck(mf, st->MemoryFilter)) {
        PyErr_Format(PyExc_TypeError, "expected a MemoryFilter, not %.200s",
                     Py_TYPE(mf)->tp_name);
        return -1;
    }
    lb_fixed_filter *o = (lb_fixed_filter *)mf;
    if (o->args.m != f->args.m || o->args.k != f->args.k || o->args.scheme != f->args.scheme) {
        PyErr_Format(st->GeometryMismatchError,
                     "the MemoryFilter has m=%llu k=%u hash=%s, this filter m=%llu k=%u hash=%s",
                     (unsigned long long)o->args.m, o->args.k,
                     lb_hash_scheme_name(o->args.scheme), (unsigned long long)f->args.m,
                     f->args.k, lb_hash_scheme_name(f->args.scheme));
        return -1;
    }
    return 0;
}

static PyObject *rf_load(PyObject *self, PyObject *mf)
{
    RedisFilter *f = RF(self);
    if (rf_check_memory_filter(f, mf) < 0)
        return NULL;
    PyObject *bits = PyObject_CallMethod(mf, "to_bitmap", NULL);
    if (!bits)
        return NULL;
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(bits);
    size_t len = (size_t)PyBytes_GET_SIZE(bits);
    lb_redis_status rs;
    if (lb_enter(&f->base) < 0) {
        Py_DECREF(bits);
        return NULL;
    }
    lb_busy_begin(&f->base);
    Py_BEGIN_ALLOW_THREADS
    rs = lb_redis_bitmap_load(f->bm, data, len);
    Py_END_ALLOW_THREADS
    lb_busy_end(&f->base);
    Py_DECREF(bits);
    if (rs != LB_REDIS_OK) {
        lb_raise_redis(f->base.st, rs, f->conn, f->key);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *rf_snapshot(PyObject *self, PyObject *unused)
{
    (void)unused;
    RedisFilter *f = RF(self);
    size_t nbytes = (size_t)((f->args.m + 7) / 8);
    if (nbytes > PY_SSIZE_T_MAX)
        return PyErr_NoMemory();
    PyObject *bits = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)nbytes);
    if (!bits)
        return NULL;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(bits);
    lb_redis_status rs;
    if (lb_enter(&f->base) < 0) {
        Py_DECREF(bits);
        return NULL;
    }
    lb_busy_begin(&f->base);
    Py_BEGIN_ALLOW_THREADS
    rs = lb_redis_bitmap_snapshot(f->bm, out, nbytes);
    Py_END_ALLOW_THREADS
    lb_busy_end(&f->base);
    if (rs != LB_REDIS_OK) {
        Py_DECREF(bits);
        lb_raise_redis(f->base.st, rs, f->conn, f->key);
        return NULL;
    }
    PyObject *r = PyObject_CallMethod((PyObject *)f->base.st->MemoryFilter, "from_bitmap", "OKIs",
                                      bits, (unsigned long long)f->args.m, f->args.k,
                                      lb_hash_scheme_name(f->args.scheme));
    Py_DECREF(bits);
    if (r && f->args.has_capacity) {
        /* keep the sizing it was built from: rebuild with capacity set */
        lb_fixed_filter *mf = (lb_fixed_filter *)r;
        mf->args.has_capacity = 1;
        mf->args.capacity = f->args.capacity;
        mf->args.error_rate = f->args.error_rate;
    }
    return r;
}

/* from_url(url, key, ...) and open(url, key, ...): RedisFilter(key, url=url, ...). */
static PyObject *rf_with_url(PyObject *cls, PyObject *args, PyObject *kwargs, int adopt_only)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (adopt_only ? nargs != 2 : nargs < 2)
        return PyErr_Format(PyExc_TypeError,
                            adopt_only ? "open() takes the url and the key"
                                       : "from_url() takes the url, the key, then the "
                                         "arguments of RedisFilter");
    PyObject *kw = kwargs ? PyDict_Copy(kwargs) : PyDict_New();
    if (!kw)
        return NULL;
    if (adopt_only) {
        static const char *const geometry[] = {"capacity", "error_rate", "m", "k", NULL};
        for (int i = 0; geometry[i]; i++) {
            if (PyDict_GetItemString(kw, geometry[i])) {
                Py_DECREF(kw);
                return PyErr_Format(PyExc_TypeError,
                                    "open() adopts the stored geometry; %s cannot be given",
                                    geometry[i]);
            }
        }
    }
    if (PyDict_SetItemString(kw, "url", PyTuple_GET_ITEM(args, 0)) < 0) {
        Py_DECREF(kw);
        return NULL;
    }
    PyObject *pos = PyTuple_GetSlice(args, 1, nargs); /* key, capacity, error_rate */
    PyObject *r = pos ? PyObject_Call(cls, pos, kw) : NULL;
    Py_XDECREF(pos);
    Py_DECREF(kw);
    return r;
}

static PyObject *rf_from_url(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    return rf_with_url(cls, args, kwargs, 0);
}

static PyObject *rf_open(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    return rf_with_url(cls, args, kwargs, 1);
}

/* from_redis(client, key, ...): the connection settings of a redis-py client. */
static PyObject *rf_from_redis(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs < 2)
        return PyErr_Format(PyExc_TypeError, "from_redis() takes the client, the key, then "
                                             "the arguments of RedisFilter");
    PyObject *mod = PyImport_ImportModule("ling_bloom._redis_client");
    if (!mod)
        return NULL;
    PyObject *settings = PyObject_CallMethod(mod, "connection_kwargs", "O",
                                             PyTuple_GET_ITEM(args, 0));
    Py_DECREF(mod);
    if (!settings)
        return NULL;
    if (kwargs && PyDict_Update(settings, kwargs) < 0) {
        Py_DECREF(settings);
        return NULL;
    }
    PyObject *pos = PyTuple_GetSlice(args, 1, nargs);
    PyObject *r = pos ? PyObject_Call(cls, pos, settings) : NULL;
    Py_XDECREF(pos);
    Py_DECREF(settings);
    return r;
}

/* ---- properties --------------------------------------------------------- */

static PyObject *rf_get_key(PyObject *self, void *unused)
{
    (void)unused;
    return Py_NewRef(RF(self)->key);
}

static PyObject *rf_get_ttl(PyObject *self, void *unused)
{
    (void)unused;
    if (RF(self)->ttl <= 0)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(RF(self)->ttl);
}

static PyObject *rf_get_nparts(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong((RF(self)->args.m + LB_RB_PART_BITS - 1) /
                                       LB_RB_PART_BITS);
}

static PyObject *rf_get_nbytes(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong((RF(self)->args.m + 7) / 8);
}

static PyObject *rf_key_names(PyObject *self, PyObject *unused)
{
    (void)unused;
    RedisFilter *f = RF(self);
    if (lb_enter(&f->base) < 0)
        return NULL;
    uint64_t n = lb_redis_bitmap_nparts(f->bm);
    PyObject *list = PyList_New(0);
    if (!list)
        return NULL;
    for (uint64_t p = 0; p <= n; p++) {
        uint64_t which = p == n ? UINT64_MAX : p;
        size_t len = lb_redis_bitmap_key_name(f->bm, which, NULL, 0);
        PyObject *name = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
        if (!name) {
            Py_DECREF(list);
            return NULL;
        }
        lb_redis_bitmap_key_name(f->bm, which, PyBytes_AS_STRING(name), len + 1);
        int rc = PyList_Append(list, name);
        Py_DECREF(name);
        if (rc < 0) {
            Py_DECREF(list);
            return NULL;
        }
    }
    return list;
}

static PyObject *rf_repr(PyObject *self)
{
    RedisFilter *f = RF(self);
    return PyUnicode_FromFormat("<RedisFilter key=%R m=%llu k=%u hash=%s%s>", f->key,
                                (unsigned long long)f->args.m, f->args.k,
                                lb_hash_scheme_name(f->args.scheme),
                                f->base.closed ? " closed" : "");
}

static PyMethodDef rf_methods[] = {
    {"add", rf_add, METH_O, "add(key) -> bool\n\nSet key's bits; True when one of them was 0."},
    {"test", rf_test, METH_O, "test(key) -> bool"},
    {"add_many", rf_add_many, METH_O,
     "add_many(keys) -> list[bool]\n\nOne pipelined round trip per chunk_size keys."},
    {"update", rf_update, METH_O, "update(keys) -> None"},
    {"test_many", rf_test_many, METH_O, "test_many(keys) -> list[bool]"},
    {"reset", rf_reset, METH_NOARGS,
     "reset()\n\nDelete the bitmap (every part) and write the geometry again."},
    {"close", rf_close, METH_NOARGS, "close()\n\nClose the connection; the data stays in Redis."},
    {"__enter__", lb_enter_method, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))lb_exit_method, METH_FASTCALL, NULL},
    {"bits_set", rf_bits_set, METH_NOARGS, "bits_set() -> int\n\nBITCOUNT over every part."},
    {"approximate_count", rf_approximate_count, METH_NOARGS,
     "approximate_count() -> int\n\nDistinct keys, estimated from the bits set."},
    {"fill_ratio", rf_fill_ratio, METH_NOARGS, "fill_ratio() -> float"},
    {"current_error_rate", rf_current_error_rate, METH_NOARGS, "current_error_rate() -> float"},
    {"load", rf_load, METH_O,
     "load(memory_filter)\n\nOR a MemoryFilter of the same m, k and hash into the bitmap, in a "
     "few large commands (other writers' bits are kept)."},
    {"snapshot", rf_snapshot, METH_NOARGS,
     "snapshot() -> MemoryFilter\n\nA local copy of the bitmap."},
    {"key_names", rf_key_names, METH_NOARGS,
     "key_names() -> list[bytes]\n\nThe Redis keys this filter uses: its parts, then the "
     "meta key that records its geometry."},
    {"from_url", (PyCFunction)(void (*)(void))rf_from_url,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_url(url, key, capacity=None, error_rate=0.01, **options) -> RedisFilter\n\nurl as redis-py: "
     "redis://[[user]:password@]host[:port][/db] or unix:///path?db=N."},
    {"open", (PyCFunction)(void (*)(void))rf_open, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "open(url, key, **options) -> RedisFilter\n\nAn existing filter, with the m, k and hash "
     "stored next to it (KeyError when there is none)."},
    {"from_redis", (PyCFunction)(void (*)(void))rf_from_redis,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_redis(client, key, capacity=None, error_rate=0.01, **options) -> RedisFilter\n\nThe connection settings of a "
     "redis-py client (its own connections are not used)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef rf_getset[] = {
    {"key", rf_get_key, NULL, "the Redis key of the bitmap", NULL},
    {"m", lb_fixed_get_m, NULL, "number of bits", (void *)offsetof(RedisFilter, args)},
    {"k", lb_fixed_get_k, NULL, "number of hash functions", (void *)offsetof(RedisFilter, args)},
    {"hash", lb_fixed_get_hash, NULL, "hashing scheme", (void *)offsetof(RedisFilter, args)},
    {"capacity", lb_fixed_get_capacity, NULL, "the capacity it was sized for, or None",
     (void *)offsetof(RedisFilter, args)},
    {"error_rate", lb_fixed_get_error_rate, NULL, "the rate it was sized for, or None",
     (void *)offsetof(RedisFilter, args)},
    {"ttl", rf_get_ttl, NULL, "expiry in seconds after the last write, or None", NULL},
    {"nparts", rf_get_nparts, NULL, "Redis strings the bitmap spans (2**32 bits each)", NULL},
    {"nbytes", rf_get_nbytes, NULL, "bytes of bitmap: ceil(m / 8)", NULL},
    {"closed", lb_closed_get, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef rf_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(lb_base, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyType_Slot rf_slots[] = {
    {Py_tp_doc,
     "RedisFilter(key, capacity, error_rate=0.01, *, hash=\"xxh3\", ttl=None, url=None, ...)\n"
     "RedisFilter(key, *, m, k, ...)\n\n"
     "A Bloom filter kept as a Redis bitmap at key, hashed here and sent pipelined.  "
     "Connection keywords as redis-py: url, host, port, db, username, password, "
     "unix_socket_path, socket_timeout (default 10 s), socket_connect_timeout (default 5 s).  "
     "mode=\"bitfield\" (one BITFIELD per key) or \"setbit\" (the Go driver's SETBIT/GETBIT); "
     "the bitmap is the same.  Without capacity or m and k, the geometry stored next to an "
     "existing filter is adopted."},
    {Py_tp_new, rf_new},
    {Py_tp_dealloc, rf_dealloc},
    {Py_tp_traverse, rf_traverse},
    {Py_tp_methods, rf_methods},
    {Py_tp_getset, rf_getset},
    {Py_tp_members, rf_members},
    {Py_tp_repr, rf_repr},
    {Py_sq_contains, rf_contains},
    {0, NULL},
};

static PyType_Spec rf_spec = {
    .name = "ling_bloom.RedisFilter",
    .basicsize = sizeof(RedisFilter),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = rf_slots,
};

PyTypeObject *lb_redis_filter_type(PyObject *module)
{
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &rf_spec, NULL);
}
