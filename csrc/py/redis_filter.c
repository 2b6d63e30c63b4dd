/* redis_filter.c: RedisFilter, a Bloom filter kept as a Redis bitmap and
 * hashed on the client (csrc/redis/bitmap.h does the Redis side). */
#include "redis_common.h"
#include "errors.h"

#include <math.h>
#include <structmember.h>

#include "blocked.h"
#include "params.h"
#include "bitmap.h"
#include "sharded.h"

typedef struct {
    lb_redis_filter r;      /* base, connection, key, ttl, chunk */
    lb_fixed_args args;     /* sharded: m is the shards' total */
    lb_bitmap *bm;    /* one bitmap, or NULL when sharded */
    lb_sharded *sh;   /* shards > 1: the shards (csrc/redis/sharded.h) */
    uint32_t shards;        /* 1, or the number of shards */
    lb_geometry shard_g;    /* sharded: each shard's geometry */
    lb_bitmap_mode mode;
    lb_bitmap_layout layout;    /* standard, or blocked (of every shard when sharded) */
    lb_redis_status last;   /* status of the last failed chunk */
} RedisFilter;

#define RF(o) ((RedisFilter *)(o))

static void rf_release(lb_base *b)
{
    RedisFilter *f = (RedisFilter *)b;
    lb_bitmap_free(f->bm);
    f->bm = NULL;
    lb_sharded_free(f->sh);
    f->sh = NULL;
    lb_redis_filter_release(&f->r);
}

static void rf_raise(lb_redis_filter *r, lb_redis_status status)
{
    lb_raise_redis(r->base.st, status, r->conn, r->key);
}

static void rf_raise_backend(lb_base *b)
{
    rf_raise(&RF(b)->r, RF(b)->last);
}

/* The bitmap (or the shards) on f->r.conn, with f's geometry and settings. */
static lb_redis_status rf_backend_new(RedisFilter *f)
{
    const char *key = PyBytes_AS_STRING(f->r.key_bytes);
    size_t keylen = (size_t)PyBytes_GET_SIZE(f->r.key_bytes);
    lb_redis_status rs;
    if (f->shards > 1) {
        rs = lb_sharded_new(f->r.conn, key, keylen, &f->shard_g, f->shards, &f->sh);
        if (rs == LB_REDIS_OK) {
            lb_sharded_set_mode(f->sh, f->mode);
            lb_sharded_set_chunk_keys(f->sh, f->r.chunk);
            rs = lb_sharded_set_layout(f->sh, f->layout);
        }
        return rs;
    }
    lb_geometry g;
    lb_geometry_init(&g, f->args.m, f->args.k, f->args.scheme);
    rs = lb_bitmap_new(f->r.conn, key, keylen, &g, (int64_t)ceil(f->r.ttl * 1000.0),
                             &f->bm);
    if (rs == LB_REDIS_OK) {
        lb_bitmap_set_mode(f->bm, f->mode);
        lb_bitmap_set_chunk_keys(f->bm, f->r.chunk);
        rs = lb_bitmap_set_layout(f->bm, f->layout);
    }
    return rs;
}

/* layout=: None (standard, or the stored one when the geometry is adopted),
 * "standard" or "blocked".  -1 with ValueError; *given: not None. */
static int rf_parse_layout(PyObject *obj, lb_bitmap_layout *out, int *given)
{
    *out = LB_BITMAP_STANDARD;
    *given = obj != Py_None;
    if (obj == Py_None)
        return 0;
    const char *s = PyUnicode_Check(obj) ? PyUnicode_AsUTF8(obj) : NULL;
    if (s && strcmp(s, "standard") == 0)
        return 0;
    if (s && strcmp(s, "blocked") == 0) {
        *out = LB_BITMAP_BLOCKED;
        return 0;
    }
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "layout must be \"standard\" or \"blocked\", not %R",
                     obj);
    return -1;
}

/* mode=: None or "bitfield" (one BITFIELD per key), "setbit" (the Go
 * driver's SETBIT/GETBIT).  -1 with ValueError. */
static int rf_parse_mode(PyObject *mode, lb_bitmap_mode *out)
{
    *out = LB_BITMAP_BITFIELD;
    if (mode == Py_None)
        return 0;
    const char *ms = PyUnicode_Check(mode) ? PyUnicode_AsUTF8(mode) : NULL;
    if (ms && strcmp(ms, "bitfield") == 0)
        return 0;
    if (ms && strcmp(ms, "setbit") == 0) {
        *out = LB_BITMAP_SETBIT;
        return 0;
    }
    if (!PyErr_Occurred())
        PyErr_Format(PyExc_ValueError, "mode must be \"bitfield\" or \"setbit\", not %R", mode);
    return -1;
}

/* What the blocked layout cannot do, refused before anything is sent. */
static int rf_refuse_for_blocked(lb_state *st, int adopt_bitmap, lb_bitmap_mode mode,
                                 PyObject *hash)
{
    if (adopt_bitmap) {
        PyErr_SetString(st->NotSupportedError,
                        "adopt=True takes over a bitmap another program wrote with the standard "
                        "walk (a Go ling-base service's): never a blocked one");
        return -1;
    }
    if (mode == LB_BITMAP_SETBIT) {
        PyErr_SetString(PyExc_ValueError,
                        "mode=\"setbit\" (the Go driver's SETBIT/GETBIT) does not apply to "
                        "layout=\"blocked\": it tests with one GETRANGE of the key's block and "
                        "adds with one BITFIELD");
        return -1;
    }
    if (hash != Py_None) {
        const char *h = PyUnicode_Check(hash) ? PyUnicode_AsUTF8(hash) : NULL;
        if (!h || strcmp(h, LB_BITMAP_BLOCKED_HASH) != 0) {
            if (!PyErr_Occurred())
                PyErr_Format(PyExc_ValueError,
                             "layout=\"blocked\" hashes as BlockedFilter (XXH3-64 and the "
                             "split-block walk, hash=\"%s\"): hash=%R does not apply",
                             LB_BITMAP_BLOCKED_HASH, hash);
            return -1;
        }
    }
    return 0;
}

/* In a forked child, when another thread of the parent was in a round trip:
 * a new connection and bitmap object; the old ones are abandoned, not freed. */
static int rf_after_fork(lb_base *b)
{
    RedisFilter *f = RF(b);
    f->bm = NULL; /* abandoned with the connection it used */
    lb_sharded_abandon(f->sh);
    f->sh = NULL; /* ... and the shards' own */
    if (lb_redis_filter_renew(&f->r) < 0)
        return -1;
    lb_redis_status rs = rf_backend_new(f);
    if (rs != LB_REDIS_OK) {
        rf_raise(&f->r, rs);
        lb_redis_filter_release(&f->r);
        return -1;
    }
    return 0;
}

/* ---- round trips -------------------------------------------------------- */

static lb_redis_status rf_add_keys(lb_redis_filter *r, const lb_key *keys, size_t n,
                                   uint8_t *out)
{
    if (RF(r)->sh)
        return lb_sharded_add(RF(r)->sh, keys, n, out);
    return lb_bitmap_add(RF(r)->bm, keys, n, out);
}

static lb_redis_status rf_test_keys(lb_redis_filter *r, const lb_key *keys, size_t n,
                                    uint8_t *out)
{
    if (RF(r)->sh)
        return lb_sharded_test(RF(r)->sh, keys, n, out);
    return lb_bitmap_test(RF(r)->bm, keys, n, out);
}

/* A chunk of a batch: all its keys, or none (the status kept for raise_backend). */
static lb_status rf_chunk(lb_base *b, lb_redis_keys_fn fn, const lb_key *keys, size_t n,
                          uint8_t *out, size_t *done)
{
    lb_redis_status rs = fn(&RF(b)->r, keys, n, out);
    *done = rs == LB_REDIS_OK ? n : 0;
    if (rs == LB_REDIS_OK)
        return LB_OK;
    RF(b)->last = rs;
    return LB_ERR_BACKEND;
}

static lb_status rf_add_chunk(lb_base *b, const lb_key *keys, size_t n, uint8_t *out,
                              size_t *done)
{
    return rf_chunk(b, rf_add_keys, keys, n, out, done);
}

static lb_status rf_test_chunk(lb_base *b, const lb_key *keys, size_t n, uint8_t *out,
                               size_t *done)
{
    return rf_chunk(b, rf_test_keys, keys, n, out, done);
}

static lb_redis_status rf_wire_begin(lb_redis_filter *r, int kind, const lb_key *keys, size_t n,
                                     uint8_t *out, lb_op **op);

static lb_sharded *rf_sharded(lb_redis_filter *r) { return RF(r)->sh; }

static void rf_rebind(lb_redis_filter *r)
{
    if (RF(r)->bm)
        lb_bitmap_set_conn(RF(r)->bm, r->conn);
}

static const lb_redis_ops rf_ops = {
    .add = rf_add_keys,
    .test = rf_test_keys,
    .add_chunk = rf_add_chunk,
    .test_chunk = rf_test_chunk,
    .raise = rf_raise,
    .raise_backend = rf_raise_backend,
    .release = rf_release,
    .wire_begin = rf_wire_begin,
    .rebind = rf_rebind,
    .sharded = rf_sharded,
};

/* layout="blocked": sized as BlockedFilter sizes (here, or each shard later),
 * or m and k checked.  0, or -1 with the exception set. */
static int rf_blocked_geometry(lb_state *st, lb_fixed_args *ap, int adopt, uint32_t shards)
{
    lb_fixed_args a = *ap;
    if (adopt != 1 && a.has_capacity) {
        /* sized as BlockedFilter sizes: here, or each shard below */
        if (shards == 1) {
            uint64_t bm_m, bm_k;
            lb_status s = lb_blocked_size(a.capacity, a.error_rate, &bm_m, &bm_k);
            if (s != LB_OK) {
                PyErr_SetString(s == LB_ERR_FPR ? st->InvalidFalsePositiveRateError
                                                : st->InvalidCapacityError,
                                "no blocked geometry for that capacity and error_rate");
                return -1;
            }
            a.m = bm_m;
            a.k = (uint32_t)bm_k;
        }
    } else if (adopt != 1 && lb_blocked_check_geometry(a.m, a.k) != LB_OK) {
        PyErr_Format(st->InvalidCapacityError,
                     "layout=\"blocked\" needs m a positive multiple of 512 (at most "
                     "2**48) and k a multiple of 8 in 8..64, not m=%llu k=%u",
                     (unsigned long long)a.m, a.k);
        return -1;
    }
    *ap = a;
    return 0;
}

/* No geometry given: adopt the one stored next to the bitmap (or a sharded
 * filter's record).  0, or -1 with the exception set. */
static int rf_adopt_stored(RedisFilter *self, lb_state *st, PyObject *key, PyObject *key_bytes,
                           int layout_given, lb_bitmap_layout *layout_io, int adopt_bitmap,
                           lb_bitmap_mode bitmap_mode, PyObject *hash, lb_fixed_args *ap,
                           uint32_t *shards_io)
{
    lb_redis *conn = self->r.conn;
    lb_bitmap_layout layout = *layout_io;
    uint32_t shards = *shards_io;
    lb_fixed_args a = *ap;
    /* No geometry given: adopt the one stored next to the bitmap. */
    lb_geometry g;
    lb_redis_status rs;
    lb_bitmap_layout stored = LB_BITMAP_STANDARD;
    Py_BEGIN_ALLOW_THREADS
    rs = lb_bitmap_read_meta_layout(conn, PyBytes_AS_STRING(key_bytes),
                                          (size_t)PyBytes_GET_SIZE(key_bytes), &g, &stored);
    if (rs == LB_REDIS_ERR_NOTFOUND) /* a sharded filter's record, then */
        rs = lb_sharded_read_record(conn, PyBytes_AS_STRING(key_bytes),
                                          (size_t)PyBytes_GET_SIZE(key_bytes), &shards, &g,
                                          &stored);
    else
        shards = 1;
    Py_END_ALLOW_THREADS
    if (rs == LB_REDIS_ERR_NOTFOUND) {
        /* FilterNotFoundError: a BloomError, and the KeyError it always was. */
        PyObject *msg = PyUnicode_FromFormat(
            "no ling_bloom filter is stored at key %R: give capacity (and error_rate) or "
            "m and k to create one", key);
        const char *text = msg ? PyUnicode_AsUTF8(msg) : NULL;
        if (text)
            lb_raise_redis_status(st, LB_REDIS_ERR_NOTFOUND,
                                  &(lb_error_detail){text, Py_None, key, NULL, NULL});
        Py_XDECREF(msg);
        return -1;
    }
    if (rs != LB_REDIS_OK) {
        lb_raise_redis(st, rs, conn, key);
        return -1;
    }
    if (layout_given && stored != layout) {
        PyErr_Format(st->GeometryMismatchError,
                     "geometry mismatch at Redis key %R: stored layout=%s, this filter "
                     "layout=%s", key, stored == LB_BITMAP_BLOCKED ? "blocked" : "standard",
                     layout == LB_BITMAP_BLOCKED ? "blocked" : "standard");
        return -1;
    }
    if (stored == LB_BITMAP_BLOCKED && rf_refuse_for_blocked(st, adopt_bitmap, bitmap_mode, hash) < 0)
        return -1;
    layout = stored;
    a.m = g.m;
    a.k = g.k;
    a.scheme = g.scheme;
    if (shards > 1) {
        self->shard_g = g;
        a.m = g.m * shards;
    }
    *layout_io = layout;
    *shards_io = shards;
    *ap = a;
    return 0;
}

/* shards > 1: each shard's geometry.  0, or -1 with the exception set. */
static int rf_shard_geometry(RedisFilter *self, lb_state *st, lb_fixed_args *ap, uint32_t shards,
                             lb_bitmap_layout layout)
{
    lb_fixed_args a = *ap;
    /* Each shard holds about n/S keys; sized for n/S + 3 sqrt(n/S), the fullest
     * of them keeps the rate too.  m= and k= split m evenly. */
    uint64_t ms = (a.m + shards - 1) / shards, ks = a.k;
    if (layout == LB_BITMAP_BLOCKED) /* whole blocks: m/S rounded up to 512 bits */
        ms = (ms + LB_BLOCKED_BLOCK_BITS - 1) / LB_BLOCKED_BLOCK_BITS * LB_BLOCKED_BLOCK_BITS;
    if (a.has_capacity) {
        double per = (double)a.capacity / shards;
        uint64_t ns = (uint64_t)ceil(per + 3.0 * sqrt(per));
        lb_status s = layout == LB_BITMAP_BLOCKED
                          ? lb_blocked_size(ns, a.error_rate, &ms, &ks)
                          : lb_size(ns, a.error_rate, a.scheme, LB_FIXED_SLACK, &ms, &ks);
        if (s != LB_OK || ks < 1 || ks > LB_MAX_K) {
            PyErr_SetString(st->InvalidCapacityError, "no geometry for that many shards");
            return -1;
        }
    }
    lb_geometry_init(&self->shard_g, ms, (uint32_t)ks, a.scheme);
    a.m = ms * shards;
    a.k = (uint32_t)ks;
    *ap = a;
    return 0;
}

static PyObject *rf_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "capacity", "error_rate", "m", "k", "hash", "ttl", "mode",
                             "chunk_size", "adopt", "max_bytes", "shards", "layout",
                             LB_CONN_KWNAMES, NULL};
    lb_state *st = lb_state_from_type(type);
    if (!st)
        return NULL;
    PyObject *key, *capacity = NULL, *error_rate = NULL, *m = NULL, *k = NULL, *hash = Py_None, *ttl = Py_None, *mode = Py_None, *chunk = Py_None,
                   *max_bytes = Py_None, *shards_obj = Py_None, *layout_obj = Py_None;
    int adopt_bitmap = 0;
    lb_conn_kw kw = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "O|OO$OOOOOOpOOO" LB_CONN_KWFORMAT ":RedisFilter", kwlist, &key,
                                     &capacity, &error_rate, &m, &k, &hash, &ttl, &mode, &chunk,
                                     &adopt_bitmap, &max_bytes, &shards_obj, &layout_obj,
                                     LB_CONN_KWADDR(kw)))
        return NULL;
    lb_bitmap_layout layout;
    int layout_given;
    if (rf_parse_layout(layout_obj, &layout, &layout_given) < 0)
        return NULL;
    if (adopt_bitmap && (!m || m == Py_None || !k || k == Py_None || hash == Py_None)) {
        PyErr_SetString(PyExc_TypeError,
                        "adopt=True takes over a bitmap another program wrote: give the m, k "
                        "and hash it was written with");
        return NULL;
    }

    uint32_t shards;
    if (lb_redis_parse_shards(st, shards_obj, &shards) < 0)
        return NULL;
    if (shards > 1 && (adopt_bitmap || (ttl != Py_None))) {
        PyErr_SetString(st->NotSupportedError,
                        adopt_bitmap ? "adopt=True takes over one bitmap: not with shards"
                                     : "ttl is not supported with shards (yet)");
        return NULL;
    }
    PyObject *key_bytes = lb_redis_key_bytes(st, key);
    if (!key_bytes)
        return NULL;
    RedisFilter *self = NULL;
    lb_fixed_args a;
    /* the blocked layout's hash is its own (checked below), the key hash xxh3-mix's */
    int adopt = lb_fixed_args_from(st, capacity, error_rate, m, k,
                                   layout == LB_BITMAP_BLOCKED ? Py_None : hash, "RedisFilter", 1, &a);
    if (adopt < 0)
        goto fail;
    double ttl_s;
    if (lb_redis_parse_ttl(ttl, &ttl_s) < 0)
        goto fail;
    lb_bitmap_mode bitmap_mode;
    if (rf_parse_mode(mode, &bitmap_mode) < 0)
        goto fail;
    if (layout == LB_BITMAP_BLOCKED &&
        (rf_refuse_for_blocked(st, adopt_bitmap, bitmap_mode, hash) < 0 ||
         rf_blocked_geometry(st, &a, adopt, shards) < 0))
        goto fail;
    size_t chunk_keys = LB_BITMAP_DEFAULT_CHUNK_KEYS;
    if (lb_redis_parse_chunk(chunk, &chunk_keys) < 0)
        goto fail;
    self = (RedisFilter *)lb_redis_filter_new(type, st, &kw, key, key_bytes, ttl_s, chunk_keys,
                                              &rf_ops);
    if (!self)
        goto fail;
    lb_redis *conn = self->r.conn;
    if (adopt == 1) {
        if (rf_adopt_stored(self, st, key, key_bytes, layout_given, &layout, adopt_bitmap,
                            bitmap_mode, hash, &a, &shards) < 0)
            goto fail;
    } else if (shards > 1 && rf_shard_geometry(self, st, &a, shards, layout) < 0) {
        goto fail;
    }
    self->args = a;
    self->shards = shards;
    lb_geometry g;
    lb_geometry_init(&g, a.m, a.k, a.scheme);
    /* The limit guards the geometry asked for (a typo in capacity), not one read
     * from an existing filter's meta key: that one is on the server already. */
    uint64_t limit;
    if (lb_redis_parse_max_bytes(st, max_bytes, &limit) < 0 ||
        (adopt != 1 &&
         lb_redis_check_max_bytes(st, lb_bitmap_bytes(&g), limit, "Redis bitmap") < 0))
        goto fail;
    self->mode = bitmap_mode;
    self->layout = layout;
    lb_redis_status rs = rf_backend_new(self);
    if (rs != LB_REDIS_OK) {
        lb_raise_redis(st, rs, conn, key);
        goto fail;
    }
    self->r.base.after_fork = rf_after_fork;
    if (self->bm)
        lb_bitmap_set_adopt(self->bm, adopt_bitmap);
    Py_DECREF(key_bytes);
    return (PyObject *)self;

fail:
    Py_DECREF(key_bytes);
    Py_XDECREF(self);
    return NULL;
}

/* Set bits, over the shards when sharded. */
static lb_redis_status rf_bitcount(RedisFilter *f, uint64_t *count)
{
    return f->sh ? lb_sharded_bitcount(f->sh, count)
                 : lb_bitmap_bitcount(f->bm, count);
}

/* load() and snapshot() copy one bit array: not a sharded filter's. */
static int rf_refuse_sharded(RedisFilter *f, const char *what)
{
    if (!f->sh)
        return 0;
    PyErr_Format(f->r.base.st->NotSupportedError,
                 "%s: a sharded filter's bits are spread over %u bitmaps of their own "
                 "geometry, not one array of m bits", what, (unsigned)f->shards);
    return -1;
}

/* Run expr on the bitmap with the GIL released; raise on failure. */
#define RF_CALL(f, expr) LB_REDIS_CALL(&(f)->r, (expr))

static PyObject *rf_reset(PyObject *self, PyObject *unused)
{
    (void)unused;
    RedisFilter *f = RF(self);
    RF_CALL(f, f->sh ? lb_sharded_reset(f->sh) : lb_bitmap_reset(f->bm));
    Py_RETURN_NONE;
}

static PyObject *rf_bits_set(PyObject *self, PyObject *unused)
{
    (void)unused;
    uint64_t count = 0;
    RF_CALL(RF(self), rf_bitcount(RF(self), &count));
    return PyLong_FromUnsignedLongLong(count);
}

static PyObject *rf_approximate_count(PyObject *self, PyObject *unused)
{
    RedisFilter *f = RF(self);
    uint64_t count = 0;
    (void)unused;
    RF_CALL(f, rf_bitcount(f, &count));
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
    RF_CALL(f, rf_bitcount(f, &count));
    return PyFloat_FromDouble((double)count / (double)f->args.m);
}

static PyObject *rf_current_error_rate(PyObject *self, PyObject *unused)
{
    RedisFilter *f = RF(self);
    uint64_t count = 0;
    (void)unused;
    if (f->layout == LB_BITMAP_BLOCKED) {
        PyErr_SetString(f->r.base.st->NotSupportedError,
                        "current_error_rate(): a blocked filter's rate depends on each "
                        "block's lanes, not on the bit count: snapshot().current_error_rate()");
        return NULL;
    }
    RF_CALL(f, rf_bitcount(f, &count));
    return PyFloat_FromDouble(pow((double)count / (double)f->args.m, (double)f->args.k));
}

/* Check that mf is a MemoryFilter of this filter's m, k and hash. */
static int rf_check_memory_filter(RedisFilter *f, PyObject *mf)
{
    lb_state *st = f->r.base.st;
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

/* load() of a blocked filter: the BlockedFilter's bytes (its type's own
 * to_bytes, read back by the saved format's checks), OR'ed in as they are. */
static PyObject *rf_load_blocked(RedisFilter *f, PyObject *bf)
{
    lb_state *st = f->r.base.st;
    if (!PyObject_TypeCheck(bf, st->BlockedFilter)) {
        PyErr_Format(PyExc_TypeError, "expected a BlockedFilter (layout=\"blocked\"), not %.200s",
                     Py_TYPE(bf)->tp_name);
        return NULL;
    }
    PyObject *blob = PyObject_CallMethod((PyObject *)st->BlockedFilter, "to_bytes", "O", bf);
    if (!blob)
        return NULL;
    if (!PyBytes_CheckExact(blob)) {
        PyErr_Format(PyExc_TypeError, "load(): BlockedFilter.to_bytes() gave %.200s, not bytes",
                     Py_TYPE(blob)->tp_name);
        Py_DECREF(blob);
        return NULL;
    }
    Py_buffer view;
    lb_fixed_args a;
    const uint8_t *payload;
    size_t len;
    if (lb_fixed_read(st, blob, &view, LB_KIND_BLOCKED, "BlockedFilter", &a, &payload, &len) < 0) {
        Py_DECREF(blob);
        return NULL;
    }
    PyObject *r = NULL;
    if (a.m != f->args.m || a.k != f->args.k || len != (size_t)(f->args.m / 8)) {
        PyErr_Format(st->GeometryMismatchError,
                     "the BlockedFilter has m=%llu k=%u, this filter m=%llu k=%u",
                     (unsigned long long)a.m, a.k, (unsigned long long)f->args.m, f->args.k);
    } else if (lb_enter(&f->r.base) == 0) {
        lb_redis_status rs;
        LB_REDIS_GIL_FREE(&f->r, rs, lb_bitmap_load(f->bm, payload, len));
        lb_leave(&f->r.base);
        if (rs == LB_REDIS_OK)
            r = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&view);
    Py_DECREF(blob);
    return r;
}

static PyObject *rf_load(PyObject *self, PyObject *mf)
{
    RedisFilter *f = RF(self);
    if (rf_refuse_sharded(f, "load()") < 0)
        return NULL;
    if (f->layout == LB_BITMAP_BLOCKED)
        return rf_load_blocked(f, mf);
    if (rf_check_memory_filter(f, mf) < 0)
        return NULL;
    /* The MemoryFilter's own bits: its type's to_bitmap, not what a subclass
     * (or anything else Python code can replace) would answer, and then only
     * exact bytes of the filter's size: the bits are read with the GIL
     * released, so a bytearray (resizable) or a short object must never get
     * this far. */
    lb_state *st = f->r.base.st;
    PyObject *bits = PyObject_CallMethod((PyObject *)st->MemoryFilter, "to_bitmap", "O", mf);
    if (!bits)
        return NULL;
    if (!PyBytes_CheckExact(bits) ||
        (uint64_t)PyBytes_GET_SIZE(bits) != (f->args.m + 7) / 8) {
        PyErr_Format(PyExc_TypeError,
                     "load(): MemoryFilter.to_bitmap() gave %.200s of %zd bytes, expected bytes "
                     "of %llu",
                     Py_TYPE(bits)->tp_name,
                     PyBytes_Check(bits) ? PyBytes_GET_SIZE(bits) : (Py_ssize_t)-1,
                     (unsigned long long)((f->args.m + 7) / 8));
        Py_DECREF(bits);
        return NULL;
    }
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(bits);
    size_t len = (size_t)PyBytes_GET_SIZE(bits);
    lb_redis_status rs;
    if (lb_enter(&f->r.base) < 0) {
        Py_DECREF(bits);
        return NULL;
    }
    LB_REDIS_GIL_FREE(&f->r, rs, lb_bitmap_load(f->bm, data, len));
    lb_leave(&f->r.base);
    Py_DECREF(bits);
    if (rs != LB_REDIS_OK)
        return NULL;
    Py_RETURN_NONE;
}

static PyObject *rf_snapshot(PyObject *self, PyObject *unused)
{
    (void)unused;
    RedisFilter *f = RF(self);
    if (rf_refuse_sharded(f, "snapshot()") < 0)
        return NULL;
    size_t nbytes = (size_t)((f->args.m + 7) / 8);
    if (nbytes > PY_SSIZE_T_MAX)
        return PyErr_NoMemory();
    PyObject *bits = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)nbytes);
    if (!bits)
        return NULL;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(bits);
    lb_redis_status rs;
    if (lb_enter(&f->r.base) < 0) {
        Py_DECREF(bits);
        return NULL;
    }
    LB_REDIS_GIL_FREE(&f->r, rs, lb_bitmap_snapshot(f->bm, out, nbytes));
    lb_leave(&f->r.base);
    if (rs != LB_REDIS_OK) {
        Py_DECREF(bits);
        return NULL;
    }
    if (f->layout == LB_BITMAP_BLOCKED) {
        /* the bytes are a BlockedFilter's: through the saved format of one */
        lb_fixed_filter proto;
        memset(&proto, 0, sizeof proto);
        proto.args = f->args;
        PyObject *blob = lb_fixed_to_bytes(&proto, LB_KIND_BLOCKED, out, nbytes);
        Py_DECREF(bits);
        if (!blob)
            return NULL;
        PyObject *r = PyObject_CallMethod((PyObject *)f->r.base.st->BlockedFilter, "from_bytes",
                                          "O", blob);
        Py_DECREF(blob);
        if (r && !Py_IS_TYPE(r, f->r.base.st->BlockedFilter)) {
            PyErr_Format(PyExc_TypeError, "snapshot(): BlockedFilter.from_bytes() gave %.200s, "
                         "not a BlockedFilter", Py_TYPE(r)->tp_name);
            Py_CLEAR(r);
        }
        return r;
    }
    PyObject *r = PyObject_CallMethod((PyObject *)f->r.base.st->MemoryFilter, "from_bitmap", "OKIs",
                                      bits, (unsigned long long)f->args.m, f->args.k,
                                      lb_hash_scheme_name(f->args.scheme));
    Py_DECREF(bits);
    if (r && !Py_IS_TYPE(r, f->r.base.st->MemoryFilter)) {
        /* MemoryFilter.from_bitmap replaced by Python code: not ours to write into */
        PyErr_Format(PyExc_TypeError, "snapshot(): MemoryFilter.from_bitmap() gave %.200s, "
                     "not a MemoryFilter", Py_TYPE(r)->tp_name);
        Py_CLEAR(r);
    }
    if (r && f->args.has_capacity) {
        /* keep the sizing it was built from: rebuild with capacity set */
        lb_fixed_filter *mf = (lb_fixed_filter *)r;
        mf->args.has_capacity = 1;
        mf->args.capacity = f->args.capacity;
        mf->args.error_rate = f->args.error_rate;
    }
    return r;
}

/* from_url(url, key, ...): RedisFilter(key, url=url, ...). */
static PyObject *rf_from_url(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    return lb_redis_from_url(cls, args, kwargs, 0,
                             "from_url() takes the url, the key, then the arguments of "
                             "RedisFilter");
}

/* open(url, key, ...): the same, adopting the stored geometry. */
static PyObject *rf_open(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    static const char *const geometry[] = {"capacity", "error_rate", "m", "k", NULL};
    for (int i = 0; kwargs && PyTuple_GET_SIZE(args) == 2 && geometry[i]; i++) {
        if (PyDict_GetItemString(kwargs, geometry[i]))
            return PyErr_Format(PyExc_TypeError,
                                "open() adopts the stored geometry; %s cannot be given",
                                geometry[i]);
    }
    return lb_redis_from_url(cls, args, kwargs, 2, "open() takes the url and the key");
}

/* from_redis(client, key, ...): the connection settings of a redis-py or valkey-py client. */
static PyObject *rf_from_redis(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    return lb_redis_from_redis(cls, args, kwargs, 0,
                               "from_redis() takes the client, the key, then the arguments of "
                               "RedisFilter");
}

/* ---- properties --------------------------------------------------------- */

static PyObject *rf_get_shards(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLong(RF(self)->shards);
}

static PyObject *rf_get_nparts(PyObject *self, void *unused)
{
    (void)unused;
    RedisFilter *f = RF(self);
    if (f->sh)
        return PyLong_FromUnsignedLongLong((f->shard_g.m + LB_BITMAP_PART_BITS - 1) /
                                           LB_BITMAP_PART_BITS * f->shards);
    return PyLong_FromUnsignedLongLong((f->args.m + LB_BITMAP_PART_BITS - 1) / LB_BITMAP_PART_BITS);
}

static PyObject *rf_get_nbytes(PyObject *self, void *unused)
{
    (void)unused;
    RedisFilter *f = RF(self);
    if (f->sh)
        return PyLong_FromUnsignedLongLong((f->shard_g.m + 7) / 8 * f->shards);
    return PyLong_FromUnsignedLongLong((f->args.m + 7) / 8);
}

static PyObject *rf_get_layout(PyObject *self, void *unused)
{
    (void)unused;
    return PyUnicode_FromString(RF(self)->layout == LB_BITMAP_BLOCKED ? "blocked" : "standard");
}

static PyObject *rf_get_hash(PyObject *self, void *closure)
{
    if (RF(self)->layout == LB_BITMAP_BLOCKED)
        return PyUnicode_FromString(LB_BITMAP_BLOCKED_HASH);
    return lb_fixed_get_hash(self, closure);
}

static PyObject *rf_key_names(PyObject *self, PyObject *unused)
{
    (void)unused;
    RedisFilter *f = RF(self);
    if (lb_enter(&f->r.base) < 0)
        return NULL;
    PyObject *list = PyList_New(0);
    if (list && f->sh) { /* the record first, then each shard's names */
        size_t len = lb_sharded_record_name(f->sh, NULL, 0);
        PyObject *name = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
        if (name)
            lb_sharded_record_name(f->sh, PyBytes_AS_STRING(name), len + 1);
        if (!name || PyList_Append(list, name) < 0)
            Py_CLEAR(list);
        Py_XDECREF(name);
    }
    for (uint32_t s = 0; list && s < (f->sh ? f->shards : 1); s++) {
        lb_bitmap *bm = f->sh ? lb_sharded_shard(f->sh, s) : f->bm;
        uint64_t n = lb_bitmap_nparts(bm);
        for (uint64_t p = 0; list && p <= n; p++) {
            uint64_t which = p == n ? UINT64_MAX : p;
            size_t len = lb_bitmap_key_name(bm, which, NULL, 0);
            PyObject *name = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)len);
            if (!name) {
                Py_CLEAR(list);
                break;
            }
            lb_bitmap_key_name(bm, which, PyBytes_AS_STRING(name), len + 1);
            int rc = PyList_Append(list, name);
            Py_DECREF(name);
            if (rc < 0)
                Py_CLEAR(list);
        }
    }
    lb_leave(&f->r.base);
    return list;
}

/* ---- the sans-IO side (ling_bloom.aio): redis_common.c's _wire_* methods */

static lb_redis_status rf_wire_begin(lb_redis_filter *r, int kind, const lb_key *keys, size_t n,
                                     uint8_t *out, lb_op **op)
{
    if (RF(r)->sh)
        return lb_redis_set_error(r->conn, LB_REDIS_ERR_ARG,
                                  "the asyncio filters do not carry a sharded filter (yet)");
    return lb_bitmap_wire_begin(RF(r)->bm, kind, keys, n, out, op);
}

static PyObject *rf_repr(PyObject *self)
{
    RedisFilter *f = RF(self);
    if (f->sh && f->layout == LB_BITMAP_BLOCKED)
        return PyUnicode_FromFormat("<RedisFilter key=%R shards=%u layout=blocked m=%llu k=%u%s>",
                                    f->r.key, (unsigned)f->shards,
                                    (unsigned long long)f->args.m, f->args.k,
                                    f->r.base.closed ? " closed" : "");
    if (f->sh)
        return PyUnicode_FromFormat("<RedisFilter key=%R shards=%u m=%llu k=%u hash=%s%s>",
                                    f->r.key, (unsigned)f->shards,
                                    (unsigned long long)f->args.m, f->args.k,
                                    lb_hash_scheme_name(f->args.scheme),
                                    f->r.base.closed ? " closed" : "");
    if (f->layout == LB_BITMAP_BLOCKED)
        return PyUnicode_FromFormat("<RedisFilter key=%R layout=blocked m=%llu k=%u%s>", f->r.key,
                                    (unsigned long long)f->args.m, f->args.k,
                                    f->r.base.closed ? " closed" : "");
    return PyUnicode_FromFormat("<RedisFilter key=%R m=%llu k=%u hash=%s%s>", f->r.key,
                                (unsigned long long)f->args.m, f->args.k,
                                lb_hash_scheme_name(f->args.scheme),
                                f->r.base.closed ? " closed" : "");
}

static PyMethodDef rf_methods[] = {
    {"add", lb_redis_add, METH_O, "add(key) -> bool\n\nSet key's bits; True when one of them was 0."},
    {"test", lb_redis_test, METH_O, "test(key) -> bool"},
    {"add_many", LB_REDIS_FASTCALL(lb_redis_add_many),
     "add_many(keys) -> list[bool]\n\nOne pipelined round trip per chunk_size keys."},
    {"update", LB_REDIS_FASTCALL(lb_redis_update), "update(keys) -> None"},
    {"test_many", LB_REDIS_FASTCALL(lb_redis_test_many), "test_many(keys) -> list[bool]"},
    {"reset", rf_reset, METH_NOARGS,
     "reset()\n\nDelete the bitmap (every part) and write the geometry again."},
    {"close", lb_redis_close, METH_NOARGS, "close()\n\nClose the connection; the data stays in Redis."},
    {"__enter__", lb_enter_method, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))lb_exit_method, METH_FASTCALL, NULL},
    {"remaining_ttl", lb_redis_remaining_ttl, METH_NOARGS,
     "remaining_ttl() -> float | None\n\nSeconds until the key expires (PTTL; one round "
     "trip), None when it has no expiry or does not exist."},
    {"bits_set", rf_bits_set, METH_NOARGS, "bits_set() -> int\n\nBITCOUNT over every part."},
    {"approximate_count", rf_approximate_count, METH_NOARGS,
     "approximate_count() -> int\n\nDistinct keys, estimated from the bits set."},
    {"fill_ratio", rf_fill_ratio, METH_NOARGS, "fill_ratio() -> float"},
    {"current_error_rate", rf_current_error_rate, METH_NOARGS,
     "current_error_rate() -> float\n\n(bits set / m) ** k; NotSupportedError for "
     "layout=\"blocked\" (snapshot().current_error_rate() gives its rate)."},
    {"load", rf_load, METH_O,
     "load(memory_filter)\n\nOR a MemoryFilter of the same m, k and hash into the bitmap, in a "
     "few large commands (other writers' bits are kept); layout=\"blocked\": a BlockedFilter "
     "of the same m and k."},
    {"snapshot", rf_snapshot, METH_NOARGS,
     "snapshot() -> MemoryFilter | BlockedFilter\n\nA local copy of the bitmap (a BlockedFilter "
     "for layout=\"blocked\")."},
    {"key_names", rf_key_names, METH_NOARGS,
     "key_names() -> list[bytes]\n\nThe Redis keys this filter uses: its parts, then the "
     "meta key that records its geometry."},
    LB_REDIS_WIRE_METHODS,
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
     "redis-py or valkey-py client (its own connections are not used)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef rf_getset[] = {
    {"key", lb_redis_get_key, NULL, "the Redis key of the bitmap", NULL},
    {"m", lb_fixed_get_m, NULL, "number of bits", (void *)offsetof(RedisFilter, args)},
    {"k", lb_fixed_get_k, NULL, "number of hash functions", (void *)offsetof(RedisFilter, args)},
    {"hash", rf_get_hash, NULL,
     "hashing scheme (\"xxh3-block\" for layout=\"blocked\", as BlockedFilter)",
     (void *)offsetof(RedisFilter, args)},
    {"layout", rf_get_layout, NULL,
     "\"standard\" (k bits anywhere in m) or \"blocked\" (BlockedFilter's 64-byte blocks)",
     NULL},
    {"capacity", lb_fixed_get_capacity, NULL, "the capacity it was sized for, or None",
     (void *)offsetof(RedisFilter, args)},
    {"error_rate", lb_fixed_get_error_rate, NULL, "the rate it was sized for, or None",
     (void *)offsetof(RedisFilter, args)},
    {"ttl", lb_redis_get_ttl, NULL, "expiry in seconds after the last write, or None", NULL},
    {"shards", rf_get_shards, NULL, "bitmaps the filter is spread over (1: not sharded)", NULL},
    {"nparts", rf_get_nparts, NULL, "Redis strings the bitmap spans (2**32 bits each)", NULL},
    {"nbytes", rf_get_nbytes, NULL, "bytes of bitmap: ceil(m / 8)", NULL},
    {"closed", lb_closed_get, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef rf_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(lb_base, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* tp_new: a subclass's own __init__ arguments refused are said to be so. */
static PyObject *rf_new_hinted(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *self = rf_new(type, args, kwargs);
    return self ? self : lb_hint_subclass_new(type, rf_new_hinted);
}

static PyType_Slot rf_slots[] = {
    {Py_tp_doc,
     "RedisFilter(key, capacity, error_rate=0.01, *, hash=\"xxh3-mix\", ttl=None, "
     "max_bytes=None, url=None, ...)\n"
     "RedisFilter(key, *, m, k, hash, adopt=False, ...)\n\n"
     "A Bloom filter kept as a Redis bitmap at key, hashed here and sent pipelined.  "
     "Connection keywords as redis-py: url, host, port, db, username, password, "
     "unix_socket_path, socket_timeout (default 10 s), socket_connect_timeout (default 5 s).  "
     "mode=\"bitfield\" (one BITFIELD per key) or \"setbit\" (the Go driver's SETBIT/GETBIT); "
     "the bitmap is the same.  Without capacity or m and k, the geometry stored next to an "
     "existing filter is adopted.\n\n"
     "layout=\"blocked\": BlockedFilter's split-block layout, sized as BlockedFilter sizes "
     "(m a multiple of 512, k of 8), the string holding a BlockedFilter's bytes: a test reads "
     "the key's one 64-byte block (GETRANGE), an add sets its k bits there (one BITFIELD); with "
     "shards, each shard is such a string, sized for its share of capacity.  Not with adopt, "
     "mode=\"setbit\" or a hash other than \"xxh3-block\"; a standard and a blocked filter at "
     "one key refuse each other (GeometryMismatchError).\n\n"
     "Ownership: a key that exists without this library's meta key beside it (a user's "
     "string, another program's bitmap) is never read or written: KeyNotOwnedError.  "
     "adopt=True, with the m, k and hash it was written with, takes such a bitmap over on "
     "purpose (a Go ling-base service's).\n\n"
     "Size: a filter whose bitmap would take more than max_bytes of the server's memory "
     "(default 256 MiB, ceil(m / 8) bytes), or more than the server's maxmemory leaves, "
     "raises InvalidCapacityError before anything is written."},
    {Py_tp_new, rf_new_hinted},
    {Py_tp_dealloc, lb_redis_filter_dealloc},
    {Py_tp_traverse, lb_redis_filter_traverse},
    {Py_tp_methods, rf_methods},
    {Py_tp_getset, rf_getset},
    {Py_tp_members, rf_members},
    {Py_tp_repr, rf_repr},
    {Py_sq_contains, lb_redis_contains},
    {Py_sq_length, lb_len_approximate},
    {Py_nb_bool, lb_bool_true},
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
