/* redisbloom_filter.c: RedisBloomFilter, a Bloom filter kept by the RedisBloom
 * module on the server (csrc/redis/redisbloom.h does the Redis side). */
#include "redis_common.h"
#include "errors.h"

#include <math.h>
#include <structmember.h>

#include "params.h"
#include "sharded.h"
#include "redisbloom.h"

typedef struct {
    lb_redis_filter r;   /* base, connection, key, ttl, chunk */
    lb_redisbloom *bf;   /* one filter, or NULL when sharded */
    lb_bf_options opt;   /* sharded: capacity is the whole's */
    lb_sharded *sh; /* shards > 1: the shards (csrc/redis/sharded.h) */
    uint32_t shards;     /* 1, or the number of shards */
    lb_bf_options shard_opt; /* sharded: each shard's */
} RedisBloomFilter;

#define RB(o) ((RedisBloomFilter *)(o))

/* What the batch in progress on this thread did: its chunks run on the
 * calling thread (with the GIL released), and the exception is raised there
 * too, so a thread-local keeps concurrent batches on one filter apart. */
static _Thread_local struct {
    size_t done;               /* keys of earlier chunks of this batch, all in */
    long long fresh;           /* keys of earlier chunks the module reported new */
    long long processed;       /* FULL: keys of the batch before the rejected one, -1 unknown */
    lb_redis_status status;    /* status of the failed chunk */
} tl_batch;

static void rbf_release(lb_base *b)
{
    RedisBloomFilter *f = (RedisBloomFilter *)b;
    lb_bf_free(f->bf);
    f->bf = NULL;
    lb_sharded_free(f->sh);
    f->sh = NULL;
    lb_redis_filter_release(&f->r);
}

/* Raise the exception for a failed call.  After a FULL: processed = keys of
 * the call before the rejected one (-1: unknown), fresh = how many of them
 * were new. */
static void rbf_raise(RedisBloomFilter *f, lb_redis_status st, long long processed,
                     long long fresh)
{
    lb_state *S = f->r.base.st;
    const char *msg = f->r.conn ? lb_redis_errstr(f->r.conn) : "";
    const char *text = f->bf ? lb_bf_reply_text(f->bf) : "";
    if (!msg || !*msg)
        msg = lb_redis_status_name(st);
    /* The server's reply (BF.* text, else the client's) for the exceptions with .reply;
     * after a FULL, .processed and .added (None when unknown).  errors.c's map decides
     * the exception. */
    PyObject *reply = NULL, *p = NULL, *n = NULL;
    if (st == LB_REDIS_ERR_FULL || st == LB_REDIS_ERR_NOMODULE || st == LB_REDIS_ERR_REPLY ||
        st == LB_REDIS_ERR_WRONGTYPE || st == LB_REDIS_ERR_NOTFOUND) {
        const char *r = *text ? text : msg;
        reply = PyUnicode_DecodeUTF8(r, (Py_ssize_t)strlen(r), "replace");
        if (!reply)
            return;
    }
    if (st == LB_REDIS_ERR_FULL && processed >= 0) {
        p = PyLong_FromLongLong(processed);
        n = PyLong_FromLongLong(fresh);
        if (!p || !n)
            goto done;
    }
    lb_raise_redis_status(S, st, &(lb_error_detail){msg, reply, f->r.key, p, n});
done:
    Py_XDECREF(reply);
    Py_XDECREF(p);
    Py_XDECREF(n);
}

static void rbf_raise_backend(lb_base *b)
{
    rbf_raise((RedisBloomFilter *)b, tl_batch.status, tl_batch.processed, tl_batch.fresh);
}

/* A failed call other than a batch: only an add can fill the filter. */
static void rbf_raise_call(lb_redis_filter *r, lb_redis_status st)
{
    RedisBloomFilter *f = (RedisBloomFilter *)r;
    rbf_raise(f, st, st == LB_REDIS_ERR_FULL && f->bf ? lb_bf_full_processed(f->bf) : -1,
             f->bf ? lb_bf_last_new(f->bf) : 0);
}

/* The filter (or the shards) on f->r.conn, with f's options. */
static lb_redis_status rbf_backend_new(RedisBloomFilter *f)
{
    const char *key = PyBytes_AS_STRING(f->r.key_bytes);
    size_t keylen = (size_t)PyBytes_GET_SIZE(f->r.key_bytes);
    lb_redis_status rs;
    if (f->shards > 1) {
        rs = lb_sharded_new_bf(f->r.conn, key, keylen, &f->shard_opt, f->shards, &f->sh);
        if (rs == LB_REDIS_OK)
            lb_sharded_set_chunk_keys(f->sh, f->r.chunk);
        return rs;
    }
    rs = lb_bf_new(f->r.conn, key, keylen, &f->opt, &f->bf);
    if (rs == LB_REDIS_OK)
        lb_bf_set_chunk_keys(f->bf, f->r.chunk);
    return rs;
}

/* In a forked child, when another thread of the parent was in a round trip:
 * a new connection and BF object; the old ones are abandoned, not freed. */
static int rbf_after_fork(lb_base *b)
{
    RedisBloomFilter *f = RB(b);
    f->bf = NULL; /* abandoned with the connection it used */
    lb_sharded_abandon(f->sh);
    f->sh = NULL; /* ... and the shards' own */
    if (lb_redis_filter_renew(&f->r) < 0)
        return -1;
    lb_redis_status rs = rbf_backend_new(f);
    if (rs != LB_REDIS_OK) {
        lb_raise_redis(f->r.base.st, rs, f->r.conn, f->r.key);
        lb_redis_filter_release(&f->r);
        return -1;
    }
    return 0;
}

/* ---- the sans-IO side (ling_bloom.aio): redis_common.c's _wire_* methods */

static lb_redis_status rbf_wire_begin(lb_redis_filter *r, int kind, const lb_key *keys, size_t n,
                                      uint8_t *out, lb_op **op)
{
    if (RB(r)->sh)
        return lb_redis_set_error(r->conn, LB_REDIS_ERR_ARG,
                                  "the asyncio filters do not carry a sharded filter (yet)");
    return lb_bf_wire_begin(RB(r)->bf, kind, keys, n, out, op);
}

/* ---- round trips -------------------------------------------------------- */

static lb_redis_status rbf_add_keys(lb_redis_filter *r, const lb_key *keys, size_t n,
                                   uint8_t *out)
{
    if (RB(r)->sh)
        return lb_sharded_add(RB(r)->sh, keys, n, out);
    return lb_bf_add(RB(r)->bf, keys, n, out);
}

static lb_redis_status rbf_test_keys(lb_redis_filter *r, const lb_key *keys, size_t n,
                                    uint8_t *out)
{
    if (RB(r)->sh)
        return lb_sharded_test(RB(r)->sh, keys, n, out);
    return lb_bf_test(RB(r)->bf, keys, n, out);
}

static lb_status rbf_add_chunk(lb_base *b, const lb_key *keys, size_t n, uint8_t *out,
                              size_t *done)
{
    RedisBloomFilter *f = (RedisBloomFilter *)b;
    if (f->sh) { /* scaling shards: never full */
        lb_redis_status rs = lb_sharded_add(f->sh, keys, n, out);
        *done = rs == LB_REDIS_OK ? n : 0;
        if (rs == LB_REDIS_OK)
            return LB_OK;
        tl_batch.status = rs;
        tl_batch.processed = -1;
        return LB_ERR_BACKEND;
    }
    lb_redis_status rs = lb_bf_add(f->bf, keys, n, out);
    tl_batch.fresh += lb_bf_last_new(f->bf);
    if (rs == LB_REDIS_OK) {
        tl_batch.done += n;
        *done = n;
        return LB_OK;
    }
    long long fp = rs == LB_REDIS_ERR_FULL ? lb_bf_full_processed(f->bf) : -1;
    tl_batch.processed = fp < 0 ? -1 : (long long)tl_batch.done + fp;
    tl_batch.status = rs;
    *done = fp > 0 ? (size_t)fp : 0;
    return LB_ERR_BACKEND;
}

static lb_status rbf_test_chunk(lb_base *b, const lb_key *keys, size_t n, uint8_t *out,
                               size_t *done)
{
    RedisBloomFilter *f = (RedisBloomFilter *)b;
    lb_redis_status rs = rbf_test_keys(&f->r, keys, n, out);
    *done = rs == LB_REDIS_OK ? n : 0;
    if (rs == LB_REDIS_OK)
        return LB_OK;
    tl_batch.status = rs;
    tl_batch.processed = -1;
    return LB_ERR_BACKEND;
}

/* A batch starts on this thread. */
static void rbf_batch_begin(void)
{
    tl_batch.done = 0;
    tl_batch.fresh = 0;
    tl_batch.processed = -1;
    tl_batch.status = LB_REDIS_OK;
}

static lb_sharded *rbf_sharded(lb_redis_filter *r) { return RB(r)->sh; }

static void rbf_rebind(lb_redis_filter *r)
{
    if (RB(r)->bf)
        lb_bf_set_conn(RB(r)->bf, r->conn);
}

static const lb_redis_ops rbf_ops = {
    .add = rbf_add_keys,
    .test = rbf_test_keys,
    .add_chunk = rbf_add_chunk,
    .test_chunk = rbf_test_chunk,
    .batch_begin = rbf_batch_begin,
    .raise = rbf_raise_call,
    .raise_backend = rbf_raise_backend,
    .release = rbf_release,
    .wire_begin = rbf_wire_begin,
    .rebind = rbf_rebind,
    .sharded = rbf_sharded,
};

/* capacity=, error_rate= and expansion= into opt.  0, or -1 with the
 * exception set. */
static int rbf_parse_options(lb_state *st, PyObject *capacity, PyObject *error_rate,
                             PyObject *expansion, int non_scaling, lb_bf_options *opt_out)
{
    lb_bf_options opt = *opt_out;
    if (capacity != Py_None) {
        if (lb_parse_u64_arg("RedisBloomFilter", capacity, "capacity", st->InvalidCapacityError,
                             &opt.capacity) < 0)
            return -1;
        if (opt.capacity == 0 || opt.capacity > (uint64_t)INT64_MAX) {
            PyErr_SetString(st->InvalidCapacityError, "capacity must be at least 1");
            return -1;
        }
    }
    /* None is "not given" for capacity (attach, or the module's defaults), but
     * error_rate=None beside a capacity would silently be 0.01: a TypeError. */
    if (error_rate == Py_None && capacity != Py_None) {
        lb_arg_type_error("RedisBloomFilter", "error_rate", error_rate);
        return -1;
    }
    if (error_rate && error_rate != Py_None) {
        double p;
        if (lb_parse_double_arg("RedisBloomFilter", error_rate, "error_rate", &p) < 0)
            return -1;
        if (!(p > 0.0 && p < 1.0)) {
            PyErr_Format(st->InvalidFalsePositiveRateError,
                         "false-positive rate must be in (0, 1), not %R", error_rate);
            return -1;
        }
        opt.error_rate = p;
    }
    if (expansion != Py_None) {
        if (non_scaling) {
            PyErr_SetString(PyExc_ValueError,
                            "a non_scaling filter cannot expand: give expansion or non_scaling, "
                            "not both (the module rejects the pair)");
            return -1;
        }
        if (PyBool_Check(expansion) || !PyLong_Check(expansion)) {
            PyErr_Format(PyExc_TypeError, "expansion must be an int, not %.200s",
                         Py_TYPE(expansion)->tp_name);
            return -1;
        }
        long e = PyLong_AsLong(expansion);
        if (e == -1 && PyErr_Occurred())
            return -1;
        if (e < 1 || e > 1L << 30) {
            PyErr_Format(PyExc_ValueError, "expansion must be in 1..%ld, not %R", 1L << 30,
                         expansion);
            return -1;
        }
        opt.expansion = (uint32_t)e;
    }
    *opt_out = opt;
    return 0;
}

static PyObject *rbf_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "capacity", "error_rate", "expansion", "non_scaling",
                             "no_create", "ttl", "chunk_size", "max_bytes", "shards", LB_CONN_KWNAMES,
                             NULL};
    lb_state *st = lb_state_from_type(type);
    if (!st)
        return NULL;
    PyObject *key, *capacity = Py_None, *error_rate = NULL, *expansion = Py_None,
                   *ttl = Py_None, *chunk = Py_None, *max_bytes = Py_None,
                   *shards_obj = Py_None;
    int non_scaling = 0, no_create = 0;
    lb_conn_kw kw = {0};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs,
                                     "O|OO$OppOOOO" LB_CONN_KWFORMAT ":RedisBloomFilter", kwlist,
                                     &key, &capacity, &error_rate, &expansion, &non_scaling,
                                     &no_create, &ttl, &chunk, &max_bytes, &shards_obj,
                                     LB_CONN_KWADDR(kw)))
        return NULL;

    uint32_t shards;
    if (lb_redis_parse_shards(st, shards_obj, &shards) < 0)
        return NULL;
    if (shards > 1 && (non_scaling || no_create || ttl != Py_None)) {
        PyErr_SetString(st->NotSupportedError,
                        non_scaling ? "non_scaling is not supported with shards (a full shard "
                                      "would fail a batch the others took)"
                        : no_create ? "no_create is not supported with shards"
                                    : "ttl is not supported with shards (yet)");
        return NULL;
    }
    PyObject *key_bytes = lb_redis_key_bytes(st, key);
    if (!key_bytes)
        return NULL;
    RedisBloomFilter *self = NULL;
    lb_bf_options opt;
    lb_bf_options_init(&opt);
    if (rbf_parse_options(st, capacity, error_rate, expansion, non_scaling, &opt) < 0)
        goto fail;
    opt.non_scaling = non_scaling;
    opt.no_create = no_create;
    /* As the in-memory filters: the geometry of capacity keys at error_rate
     * must be one this library could build (m <= 2**48 bits, k <= 64). */
    uint64_t mm, kk;
    lb_status ps = lb_estimate(opt.capacity, opt.error_rate, &mm, &kk);
    if (ps == LB_OK)
        ps = lb_check_geometry(mm, kk);
    if (ps == LB_ERR_ARG) {
        /* PyErr_Format has no %g (3.12 raises SystemError; older versions
         * printed the format text): the rate is formatted by C first. */
        char rate[32];
        snprintf(rate, sizeof rate, "%g", opt.error_rate);
        PyErr_Format(st->InvalidFalsePositiveRateError,
                     "error_rate %s needs k = %llu hash functions; at most %d are supported",
                     rate, (unsigned long long)kk, LB_MAX_K);
        goto fail;
    }
    if (ps != LB_OK) {
        lb_raise(st, ps, NULL);
        goto fail;
    }
    uint64_t limit;
    if (lb_redis_parse_max_bytes(st, max_bytes, &limit) < 0 ||
        lb_redis_check_max_bytes(st, lb_bf_bytes_needed(&opt), limit, "RedisBloom filter") < 0)
        goto fail;
    double ttl_s;
    if (lb_redis_parse_ttl(ttl, &ttl_s) < 0)
        goto fail;
    opt.ttl_ms = (int64_t)ceil(ttl_s * 1000.0);
    size_t chunk_keys = LB_BF_DEFAULT_CHUNK_KEYS;
    if (lb_redis_parse_chunk(chunk, &chunk_keys) < 0)
        goto fail;
    self = (RedisBloomFilter *)lb_redis_filter_new(type, st, &kw, key, key_bytes, ttl_s,
                                                   chunk_keys, &rbf_ops);
    if (!self)
        goto fail;
    self->opt = opt;
    self->shards = shards;
    self->shard_opt = opt;
    if (shards > 1) {
        /* each shard sized for its share n/S + 3 sqrt(n/S), as RedisFilter's */
        double per = (double)opt.capacity / shards;
        self->shard_opt.capacity = (uint64_t)ceil(per + 3.0 * sqrt(per));
    }
    self->r.base.after_fork = rbf_after_fork;
    lb_redis_status rs = rbf_backend_new(self);
    if (rs != LB_REDIS_OK) {
        lb_raise_redis(st, rs, self->r.conn, key);
        goto fail;
    }
    Py_DECREF(key_bytes);
    return (PyObject *)self;

fail:
    Py_DECREF(key_bytes);
    Py_XDECREF(self);
    return NULL;
}

/* Run expr with the GIL released; raise on failure. */
#define RB_CALL(f, expr) LB_REDIS_CALL(&(f)->r, (expr))

/* What one RedisBloom key answers (reserve, info, dump, restore): not a
 * sharded filter's. */
static int rbf_refuse_sharded(RedisBloomFilter *f, const char *what)
{
    if (!f->sh)
        return 0;
    PyErr_Format(f->r.base.st->NotSupportedError,
                 "%s: a sharded filter is %u RedisBloom keys, not one", what, (unsigned)f->shards);
    return -1;
}

static PyObject *rbf_reset(PyObject *self, PyObject *unused)
{
    (void)unused;
    RedisBloomFilter *f = RB(self);
    RB_CALL(f, f->sh ? lb_sharded_reset(f->sh) : lb_bf_reset(f->bf));
    Py_RETURN_NONE;
}

static PyObject *rbf_reserve(PyObject *self, PyObject *unused)
{
    (void)unused;
    int created = 0;
    if (rbf_refuse_sharded(RB(self), "reserve()") < 0)
        return NULL;
    RB_CALL(RB(self), lb_bf_reserve(RB(self)->bf, &created));
    return PyBool_FromLong(created);
}

static PyObject *opt_int(long long v)
{
    if (v < 0)
        Py_RETURN_NONE;
    return PyLong_FromLongLong(v);
}

static PyObject *rbf_info(PyObject *self, PyObject *unused)
{
    (void)unused;
    RedisBloomFilter *f = RB(self);
    lb_bf_info info;
    if (rbf_refuse_sharded(f, "info()") < 0)
        return NULL;
    RB_CALL(f, lb_bf_info_get(f->bf, &info));
    PyObject *cls = lb_hook(f->r.base.st, LB_HOOK_BLOOM_INFO);
    if (!cls)
        return NULL;
    PyObject *vals[5] = {opt_int(info.capacity), opt_int(info.size), opt_int(info.filters),
                         opt_int(info.items), opt_int(info.expansion)};
    PyObject *r = NULL;
    if (vals[0] && vals[1] && vals[2] && vals[3] && vals[4])
        r = PyObject_CallFunctionObjArgs(cls, vals[0], vals[1], vals[2], vals[3], vals[4], NULL);
    for (int i = 0; i < 5; i++)
        Py_XDECREF(vals[i]);
    return r;
}

static PyObject *rbf_card(PyObject *self, PyObject *unused)
{
    (void)unused;
    uint64_t n = 0;
    RedisBloomFilter *f = RB(self);
    RB_CALL(f, f->sh ? lb_sharded_bitcount(f->sh, &n) : lb_bf_card(f->bf, &n));
    return PyLong_FromUnsignedLongLong(n);
}

static PyObject *rbf_dump(PyObject *self, PyObject *unused)
{
    (void)unused;
    RedisBloomFilter *f = RB(self);
    if (rbf_refuse_sharded(f, "dump()") < 0 || lb_enter(&f->r.base) < 0)
        return NULL;
    PyObject *list = PyList_New(0);
    if (!list) {
        lb_leave(&f->r.base);
        return NULL;
    }
    lb_redis_status rs = LB_REDIS_OK;
    int failed = 0;
    lb_bf_dump d; /* bounded by what BF.INFO says, cycles refused (redisbloom.h) */
    lb_bf_dump_init(&d);
    lb_busy_begin(&f->r.base);
    for (;;) {
        const char *data;
        size_t len;
        long long iter;
        int done;
        Py_BEGIN_ALLOW_THREADS
        rs = lb_bf_dump_step(f->bf, &d, &done, &iter, &data, &len);
        Py_END_ALLOW_THREADS
        if (rs != LB_REDIS_OK || done)
            break;
        PyObject *item = Py_BuildValue("(Ly#)", iter, data, (Py_ssize_t)len);
        if (!item || PyList_Append(list, item) < 0) {
            Py_XDECREF(item);
            failed = 1;
            break;
        }
        Py_DECREF(item);
    }
    if (!failed && rs != LB_REDIS_OK)
        rbf_raise(f, rs, -1, 0); /* before another thread can use the connection */
    lb_busy_end(&f->r.base);
    lb_bf_dump_free(&d);
    lb_leave(&f->r.base);
    if (failed || rs != LB_REDIS_OK) {
        Py_DECREF(list);
        return NULL;
    }
    return list;
}

static PyObject *rbf_restore(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"chunks", "replace", NULL};
    RedisBloomFilter *f = RB(self);
    PyObject *chunks;
    int replace = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$p:restore", kwlist, &chunks, &replace))
        return NULL;
    if (rbf_refuse_sharded(f, "restore()") < 0)
        return NULL;
    if (PyUnicode_Check(chunks) || PyBytes_Check(chunks) || PyByteArray_Check(chunks))
        return PyErr_Format(PyExc_TypeError,
                            "restore() takes the list dump() returned (pairs of iterator and "
                            "bytes); for a packed dump use "
                            "ling_bloom.redisbloom.chunks_from_bytes() first");
    PyObject *seq = PySequence_Fast(chunks, "restore() takes an iterable of (iterator, bytes)");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *result = NULL;
    Py_ssize_t held = 0;
    lb_bf_chunk *cs = PyMem_Calloc((size_t)(n ? n : 1), sizeof *cs);
    Py_buffer *views = PyMem_Calloc((size_t)(n ? n : 1), sizeof *views);
    if (!cs || !views) {
        PyErr_NoMemory();
        goto done;
    }
    if (n == 0) {
        PyErr_SetString(PyExc_ValueError, "restore() needs at least one chunk");
        goto done;
    }
    for (; held < n; held++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, held);
        if (!PyTuple_Check(item) && !PyList_Check(item)) {
            PyErr_Format(PyExc_TypeError, "chunk %zd is a %.200s, not an (iterator, bytes) pair",
                         held, Py_TYPE(item)->tp_name);
            goto done;
        }
        if (PySequence_Fast_GET_SIZE(item) != 2) {
            PyErr_Format(PyExc_ValueError, "chunk %zd is not an (iterator, bytes) pair", held);
            goto done;
        }
        PyObject *it = PySequence_Fast_GET_ITEM(item, 0);
        PyObject *data = PySequence_Fast_GET_ITEM(item, 1);
        if (PyBool_Check(it) || !PyLong_Check(it)) {
            PyErr_Format(PyExc_TypeError, "chunk %zd: the iterator must be an int", held);
            goto done;
        }
        long long v = PyLong_AsLongLong(it);
        if (v == -1 && PyErr_Occurred())
            goto done;
        if (v <= 0) {
            PyErr_Format(PyExc_ValueError, "chunk %zd: the iterator must be positive, not %lld",
                         held, v);
            goto done;
        }
        if (PyUnicode_Check(data)) {
            PyErr_Format(PyExc_TypeError, "chunk %zd: the data must be bytes, not str", held);
            goto done;
        }
        if (PyObject_GetBuffer(data, &views[held], PyBUF_SIMPLE) < 0)
            goto done;
        cs[held].iter = v;
        cs[held].data = views[held].buf;
        cs[held].len = (size_t)views[held].len;
    }
    lb_redis_status rs;
    if (lb_enter(&f->r.base) < 0)
        goto done;
    LB_REDIS_GIL_FREE(&f->r, rs, lb_bf_restore(f->bf, cs, (size_t)n, replace));
    lb_leave(&f->r.base);
    if (rs == LB_REDIS_OK)
        result = Py_NewRef(Py_None);
done:
    for (Py_ssize_t i = 0; i < held; i++)
        PyBuffer_Release(&views[i]);
    PyMem_Free(cs);
    PyMem_Free(views);
    Py_DECREF(seq);
    return result;
}

/* from_url(url, key, ...): RedisBloomFilter(key, url=url, ...). */
static PyObject *rbf_from_url(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    return lb_redis_from_url(cls, args, kwargs, 0,
                             "from_url() takes the url, the key, then the arguments of "
                             "RedisBloomFilter");
}

/* from_redis(client, key, ...): the connection settings of a redis-py or valkey-py client. */
static PyObject *rbf_from_redis(PyObject *cls, PyObject *args, PyObject *kwargs)
{
    return lb_redis_from_redis(cls, args, kwargs, 0,
                               "from_redis() takes the client, the key, then the arguments of "
                               "RedisBloomFilter");
}

/* ---- properties --------------------------------------------------------- */

static PyObject *rbf_get_shards(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLong(RB(self)->shards);
}

static PyObject *rbf_get_capacity(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromUnsignedLongLong(RB(self)->opt.capacity);
}

static PyObject *rbf_get_error_rate(PyObject *self, void *unused)
{
    (void)unused;
    return PyFloat_FromDouble(RB(self)->opt.error_rate);
}

static PyObject *rbf_get_expansion(PyObject *self, void *unused)
{
    (void)unused;
    if (RB(self)->opt.non_scaling)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLong(RB(self)->opt.expansion);
}

static PyObject *rbf_get_non_scaling(PyObject *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(RB(self)->opt.non_scaling);
}

static PyObject *rbf_get_no_create(PyObject *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(RB(self)->opt.no_create);
}

static PyObject *rbf_get_chunk_size(PyObject *self, void *unused)
{
    (void)unused;
    return PyLong_FromSize_t(RB(self)->r.chunk);
}

static PyObject *rbf_get_is_reserved(PyObject *self, void *unused)
{
    (void)unused;
    RedisBloomFilter *f = RB(self);
    if (lb_enter(&f->r.base) < 0) {
        PyErr_Clear(); /* closed: nothing is reserved on a closed connection */
        Py_RETURN_FALSE;
    }
    int reserved = f->bf ? lb_bf_is_reserved(f->bf) : 0;
    lb_leave(&f->r.base);
    return PyBool_FromLong(reserved);
}

/* _seen: per shard (one for an unsharded filter), whether this object saw the
 * filter there (lb_bf_seen); set from an iterable of bools, which marks the
 * shards given true (never unmarks): an asyncio filter tells its blocking twin
 * what its own members saw, so that the twin's card() knows a lost filter. */
static lb_redisbloom *rbf_shard(RedisBloomFilter *f, uint32_t i)
{
    return f->sh ? lb_sharded_bf(f->sh, i) : i == 0 ? f->bf : NULL;
}

static PyObject *rbf_get_seen(PyObject *self, void *unused)
{
    (void)unused;
    RedisBloomFilter *f = RB(self);
    uint32_t n = f->sh ? lb_sharded_count(f->sh) : 1;
    PyObject *t = PyTuple_New(n);
    for (uint32_t i = 0; t && i < n; i++) {
        lb_redisbloom *bf = rbf_shard(f, i);
        PyTuple_SET_ITEM(t, i, PyBool_FromLong(bf ? lb_bf_seen(bf) : 0));
    }
    return t;
}

static int rbf_set_seen(PyObject *self, PyObject *value, void *unused)
{
    (void)unused;
    RedisBloomFilter *f = RB(self);
    if (!value) {
        PyErr_SetString(PyExc_AttributeError, "_seen cannot be deleted");
        return -1;
    }
    PyObject *seq = PySequence_Fast(value, "_seen: an iterable of bools, one per shard");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    uint32_t shards = f->sh ? lb_sharded_count(f->sh) : 1;
    if (n != (Py_ssize_t)shards) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "_seen: %u values, one per shard, not %zd", shards, n);
        return -1;
    }
    if (lb_enter(&f->r.base) < 0) {
        Py_DECREF(seq);
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t i = 0; i < n && rc == 0; i++) {
        int v = PyObject_IsTrue(PySequence_Fast_GET_ITEM(seq, i));
        lb_redisbloom *bf = rbf_shard(f, (uint32_t)i);
        if (v < 0)
            rc = -1;
        else if (v && bf)
            lb_bf_mark_seen(bf);
    }
    lb_leave(&f->r.base);
    Py_DECREF(seq);
    return rc;
}

static PyObject *rbf_repr(PyObject *self)
{
    RedisBloomFilter *f = RB(self);
    char rate[40];
    PyOS_snprintf(rate, sizeof rate, "%g", f->opt.error_rate);
    if (f->sh)
        return PyUnicode_FromFormat("<RedisBloomFilter key=%R shards=%u capacity=%llu "
                                    "error_rate=%s expansion=%u%s>",
                                    f->r.key, (unsigned)f->shards,
                                    (unsigned long long)f->opt.capacity, rate,
                                    (unsigned)f->opt.expansion, f->r.base.closed ? " closed" : "");
    if (f->opt.non_scaling)
        return PyUnicode_FromFormat("<RedisBloomFilter key=%R capacity=%llu error_rate=%s "
                                    "non_scaling%s>",
                                    f->r.key, (unsigned long long)f->opt.capacity, rate,
                                    f->r.base.closed ? " closed" : "");
    return PyUnicode_FromFormat("<RedisBloomFilter key=%R capacity=%llu error_rate=%s "
                                "expansion=%u%s>",
                                f->r.key, (unsigned long long)f->opt.capacity, rate,
                                (unsigned)f->opt.expansion, f->r.base.closed ? " closed" : "");
}

static PyMethodDef rbf_methods[] = {
    LB_REDIS_WIRE_METHODS,
    {"add", lb_redis_add, METH_O,
     "add(key) -> bool\n\nBF.INSERT with the filter's parameters (NOCREATE with no_create); "
     "True when the module reports the key new."},
    {"test", lb_redis_test, METH_O,
     "test(key) -> bool\n\nBF.EXISTS.  Never creates the filter (a missing key tests False)."},
    {"add_many", LB_REDIS_FASTCALL(lb_redis_add_many),
     "add_many(keys) -> list[bool]\n\nBF.INSERT, one round trip per chunk_size keys.  A full "
     "non-scaling filter raises FilterFullError: keys[:e.processed] are in the filter "
     "(e.added of them were new), the rest were not added."},
    {"update", LB_REDIS_FASTCALL(lb_redis_update), "update(keys) -> None\n\nadd_many without the answers."},
    {"test_many", LB_REDIS_FASTCALL(lb_redis_test_many),
     "test_many(keys) -> list[bool]\n\nBF.MEXISTS, one round trip per chunk_size keys."},
    {"reset", rbf_reset, METH_NOARGS,
     "reset()\n\nDelete the key; the next add creates the filter again, as configured."},
    {"reserve", rbf_reserve, METH_NOARGS,
     "reserve() -> bool\n\nCreate the filter now (BF.RESERVE, even with no_create).  True "
     "when it created the filter, False when a matching one was there already; "
     "GeometryMismatchError when the one there has other parameters."},
    {"close", lb_redis_close, METH_NOARGS, "close()\n\nClose the connection; the filter stays in Redis."},
    {"__enter__", lb_enter_method, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)(void (*)(void))lb_exit_method, METH_FASTCALL, NULL},
    {"info", rbf_info, METH_NOARGS,
     "info() -> ling_bloom.redisbloom.RedisBloomInfo\n\nBF.INFO, read by field name: capacity, "
     "size (bytes), filters, items, expansion (None when non-scaling).  FilterNotFoundError "
     "(a KeyError) when the key does not exist."},
    {"remaining_ttl", lb_redis_remaining_ttl, METH_NOARGS,
     "remaining_ttl() -> float | None\n\nSeconds until the key expires (PTTL; one round "
     "trip), None when it has no expiry or does not exist."},
    {"_exists", lb_redis_exists, METH_NOARGS,
     "_exists() -> bool\n\nWhether the key exists (PTTL; one round trip, nothing written)."},
    {"card", rbf_card, METH_NOARGS,
     "card() -> int\n\nBF.CARD: items added (0 for a missing key; FilterLostError for a filter made "
     "without a ttl that this client saw and that is gone)."},
    {"dump", rbf_dump, METH_NOARGS,
     "dump() -> list[tuple[int, bytes]]\n\nThe filter as BF.SCANDUMP's steps: (iterator, "
     "chunk) pairs, what BF.LOADCHUNK replays (redis-py's loadchunk takes them too).  Do not "
     "write to the filter while it is being dumped.  FilterNotFoundError (a KeyError) when the key does not exist.  "
     "ling_bloom.redisbloom.chunks_to_bytes() packs the list into one bytes value."},
    {"restore", (PyCFunction)(void (*)(void))rbf_restore, METH_VARARGS | METH_KEYWORDS,
     "restore(chunks, *, replace=False)\n\nReplace the filter by a dump: the chunks are "
     "loaded into a temporary key and renamed over this one in one step (readers never see "
     "half a filter).  The restored filter has the dump's parameters.  A key of another type "
     "raises WrongTypeError and is left alone, unless replace=True."},
    {"from_url", (PyCFunction)(void (*)(void))rbf_from_url,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_url(url, key, capacity=1000, error_rate=0.001, **options) -> RedisBloomFilter\n\n"
     "url as redis-py: "
     "redis://[[user]:password@]host[:port][/db] or unix:///path?db=N."},
    {"from_redis", (PyCFunction)(void (*)(void))rbf_from_redis,
     METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_redis(client, key, capacity=1000, error_rate=0.001, **options) -> "
     "RedisBloomFilter\n\nThe connection settings of a "
     "redis-py or valkey-py client (its own connections are not used, and close() leaves "
     "it open)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef rbf_getset[] = {
    {"key", lb_redis_get_key, NULL, "the Redis key of the filter", NULL},
    {"shards", rbf_get_shards, NULL, "RedisBloom keys the filter is spread over (1: one)", NULL},
    {"capacity", rbf_get_capacity, NULL,
     "the capacity every write carries (the configured one, not the server's: see info())",
     NULL},
    {"error_rate", rbf_get_error_rate, NULL, "the error rate every write carries", NULL},
    {"expansion", rbf_get_expansion, NULL, "growth factor of a scaling filter; None if non_scaling",
     NULL},
    {"non_scaling", rbf_get_non_scaling, NULL, "created with NONSCALING", NULL},
    {"no_create", rbf_get_no_create, NULL, "never creates the filter (BF.INSERT ... NOCREATE)", NULL},
    {"ttl", lb_redis_get_ttl, NULL, "expiry in seconds after the last write, or None", NULL},
    {"chunk_size", rbf_get_chunk_size, NULL, "keys per BF.INSERT / BF.MEXISTS round trip", NULL},
    {"_seen", rbf_get_seen, rbf_set_seen,
     "per shard, whether this object saw the filter there (for the asyncio filter's twin)",
     NULL},
    {"is_reserved", rbf_get_is_reserved, NULL,
     "whether this connection checked the key (a matching filter, or none yet) or created "
     "it (False again after reset)", NULL},
    {"closed", lb_closed_get, NULL, "whether close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMemberDef rbf_members[] = {
    {"__weaklistoffset__", T_PYSSIZET, offsetof(lb_base, weakrefs), READONLY, NULL},
    {NULL, 0, 0, 0, NULL},
};

/* tp_new: a subclass's own __init__ arguments refused are said to be so. */
static PyObject *rbf_new_hinted(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *self = rbf_new(type, args, kwargs);
    return self ? self : lb_hint_subclass_new(type, rbf_new_hinted);
}

static PyType_Slot rbf_slots[] = {
    {Py_tp_doc,
     "RedisBloomFilter(key, capacity=1000, error_rate=0.001, *, expansion=2, "
     "non_scaling=False, no_create=False, ttl=None, chunk_size=10000, max_bytes=None, "
     "url=None, ...)\n\n"
     "A Bloom filter kept by the RedisBloom module at key (BF.* commands): the server "
     "hashes, this side sends items, pipelined.  Connection keywords as redis-py: url, host, "
     "port, db, username, password, unix_socket_path, socket_timeout (default 10 s), "
     "socket_connect_timeout (default 5 s).\n\n"
     "Every write is BF.INSERT key CAPACITY capacity ERROR error_rate with EXPANSION "
     "expansion or NONSCALING: a filter that expired or was deleted is recreated as "
     "configured by the write itself, never with the module's defaults.  Before the first "
     "write on a connection, BF.INFO checks an existing filter: other parameters (capacity "
     "or expansion; BF.INFO does not report the error rate) raise GeometryMismatchError "
     "before anything is written.  no_create: BF.INSERT ... NOCREATE, never creates; a "
     "missing key raises FilterNotFoundError.  ttl: PEXPIRE after every write, in the same "
     "round trip.\n\n"
     "Size: capacity and error_rate are checked as the in-memory filters check them; a new "
     "filter that would take more than max_bytes of the server's memory (default 256 MiB), "
     "or more than the server's maxmemory leaves, raises InvalidCapacityError before "
     "anything is written.\n\n"
     "Errors: FilterFullError (.processed, .added) when a non-scaling filter is full; "
     "ModuleMissingError when the server has no BF.* commands; WrongTypeError (.key) when "
     "the key holds another type.\n\n"
     "A key of another type and the tests: the module answers 0 to BF.EXISTS / BF.MEXISTS "
     "on it, not an error, so every test would silently say False.  A user expects the "
     "WrongTypeError that add raises, so when a test answers all-False and the key's type "
     "is not yet known on this connection, one more round trip asks TYPE: another type "
     "raises WrongTypeError.  That costs one extra round trip once per connection (never "
     "on the hot path); a key replaced by another type later, while the connection stays "
     "open, is not noticed by tests."},
    {Py_tp_new, rbf_new_hinted},
    {Py_tp_dealloc, lb_redis_filter_dealloc},
    {Py_tp_traverse, lb_redis_filter_traverse},
    {Py_tp_methods, rbf_methods},
    {Py_tp_getset, rbf_getset},
    {Py_tp_members, rbf_members},
    {Py_tp_repr, rbf_repr},
    {Py_sq_contains, lb_redis_contains},
    {Py_sq_length, lb_len_card},
    {Py_nb_bool, lb_bool_true},
    {0, NULL},
};

static PyType_Spec rbf_spec = {
    .name = "ling_bloom.RedisBloomFilter",
    .basicsize = sizeof(RedisBloomFilter),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = rbf_slots,
};

PyTypeObject *lb_redisbloom_filter_type(PyObject *module)
{
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &rbf_spec, NULL);
}
