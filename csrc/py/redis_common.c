/* redis_common.c: what RedisFilter and RedisBloomFilter share (see
 * redis_common.h): the object's common part and its methods.  The connection
 * keywords are redis_conn.c's, the _wire_* methods redis_wire.c's. */
#include "redis_common.h"

#include "sharded.h"

#include <math.h>

void lb_raise_redis(lb_state *st, lb_redis_status status, const lb_redis *conn, PyObject *key)
{
    /* The one status -> exception map (errors.c) decides; the client's text is the
     * message (a reply's .reply too), key the .key where the exception has one. */
    lb_error_detail d = {conn ? lb_redis_errstr(conn) : NULL, NULL, key, NULL, NULL};
    lb_raise_redis_status(st, status, &d);
}

/* ---- the part both filter objects start with ---------------------------- */

PyObject *lb_redis_key_bytes(lb_state *st, PyObject *key)
{
    PyObject *key_bytes;
    if (PyUnicode_Check(key))
        key_bytes = PyUnicode_AsUTF8String(key);
    else if (PyBytes_Check(key))
        key_bytes = Py_NewRef(key);
    else
        return PyErr_Format(PyExc_TypeError, "key must be a str or bytes, not %.200s",
                            Py_TYPE(key)->tp_name);
    if (key_bytes && PyBytes_GET_SIZE(key_bytes) == 0) {
        lb_raise(st, LB_ERR_EMPTY_KEY, "key must not be empty");
        Py_CLEAR(key_bytes);
    }
    return key_bytes;
}

int lb_redis_parse_ttl(PyObject *obj, double *out)
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

int lb_redis_parse_chunk(PyObject *obj, size_t *out)
{
    if (obj == Py_None)
        return 0;
    Py_ssize_t c = PyLong_AsSsize_t(obj);
    if (c == -1 && PyErr_Occurred())
        return -1;
    if (c < 1 || c > 1000000) {
        PyErr_SetString(PyExc_ValueError, "chunk_size must be in 1..1000000");
        return -1;
    }
    *out = (size_t)c;
    return 0;
}

int lb_redis_parse_max_bytes(lb_state *st, PyObject *obj, uint64_t *out)
{
    *out = LB_REDIS_DEFAULT_MAX_BYTES;
    if (!obj || obj == Py_None)
        return 0;
    if (lb_parse_u64(obj, "max_bytes", PyExc_ValueError, out) < 0)
        return -1;
    if (*out == 0) {
        PyErr_SetString(PyExc_ValueError, "max_bytes must be at least 1");
        return -1;
    }
    (void)st;
    return 0;
}

int lb_redis_check_max_bytes(lb_state *st, uint64_t need, uint64_t limit, const char *what)
{
    if (need <= limit)
        return 0;
    PyErr_Format(st->InvalidCapacityError,
                 "the %s would take %llu bytes of the server's memory, more than "
                 "max_bytes=%llu (default %llu, 256 MiB); pass a larger max_bytes= if that "
                 "is really meant",
                 what, (unsigned long long)need, (unsigned long long)limit,
                 (unsigned long long)LB_REDIS_DEFAULT_MAX_BYTES);
    return -1;
}

lb_redis_filter *lb_redis_filter_new(PyTypeObject *type, lb_state *st, const lb_conn_kw *kw,
                                     PyObject *key, PyObject *key_bytes, double ttl,
                                     size_t chunk, const lb_redis_ops *ops)
{
    lb_redis_config cfg;
    if (lb_conn_config(st, kw, &cfg) < 0)
        return NULL;
    lb_redis_filter *f = (lb_redis_filter *)type->tp_alloc(type, 0);
    if (!f)
        goto fail;
    if (lb_base_init(&f->base, type) < 0)
        goto fail;
    f->base.raise_backend = ops->raise_backend;
    f->ops = ops;
    f->key = Py_NewRef(key);
    f->key_bytes = Py_NewRef(key_bytes);
    f->ttl = ttl;
    f->chunk = chunk;
    f->conn = lb_redis_new(&cfg);
    if (!f->conn) {
        PyErr_NoMemory();
        goto fail;
    }
    lb_redis_config_free(&cfg);
    return f;

fail:
    lb_redis_config_free(&cfg);
    Py_XDECREF(f);
    return NULL;
}

void lb_redis_filter_release(lb_redis_filter *f)
{
    f->w_op = NULL;
    PyMem_Free(f->w_lanes);
    PyMem_Free(f->w_shard_of);
    f->w_lanes = NULL;
    f->w_shard_of = NULL;
    f->w_nlanes = 0;
    lb_redis_free(f->conn);
    f->conn = NULL;
    PyMem_Free(f->w_out);
    f->w_out = NULL;
    f->w_n = 0;
}

int lb_redis_filter_renew(lb_redis_filter *f)
{
    f->w_op = NULL; /* abandoned with the state it lives in */
    f->w_nlanes = 0;
    lb_redis *fresh = f->conn ? lb_redis_new_like(f->conn) : NULL;
    lb_redis_abandon(f->conn);
    f->conn = fresh;
    if (!fresh) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

void lb_redis_filter_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (f->base.lock)
        f->ops->release(&f->base);
    lb_base_fini(&f->base);
    Py_CLEAR(f->key);
    Py_CLEAR(f->key_bytes);
    tp->tp_free(self);
    Py_DECREF(tp);
}

int lb_redis_filter_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

int lb_redis_single(lb_redis_filter *f, PyObject *key, lb_redis_keys_fn fn)
{
    lb_key k;
    lb_key_hold hold;
    if (lb_key_enter(&f->base, key, &k, &hold, 0) < 0)
        return -1;
    uint8_t out = 0;
    lb_redis_status rs;
    LB_REDIS_GIL_FREE(f, rs, fn(f, &k, 1, &out));
    lb_key_leave(&f->base, &hold);
    return rs == LB_REDIS_OK ? out : -1;
}

PyObject *lb_redis_add(PyObject *self, PyObject *key)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    int r = lb_redis_single(f, key, f->ops->add);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

int lb_redis_contains(PyObject *self, PyObject *key)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    return lb_redis_single(f, key, f->ops->test);
}

PyObject *lb_redis_test(PyObject *self, PyObject *key)
{
    int r = lb_redis_contains(self, key);
    return r < 0 ? NULL : PyBool_FromLong(r);
}

int lb_redis_filter_warn(lb_redis_filter *f)
{
    if (f->evict_warned || !f->conn)
        return 0;
    const char *policy = f->conn->evicting;
    lb_sharded *sh = f->ops->sharded ? f->ops->sharded(f) : NULL;
    for (uint32_t i = 0; sh && !*policy && i < lb_sharded_count(sh); i++) {
        const lb_redis *c = lb_sharded_conn(sh, i);
        policy = c ? c->evicting : "";
    }
    if (!*policy)
        return 0;
    f->evict_warned = 1;
    return PyErr_WarnFormat(f->base.st->EvictionWarning, 1,
                            "the Redis server of %s %R has maxmemory-policy %s under a "
                            "maxmemory: it may evict the filter's keys when memory runs "
                            "short (%s); set maxmemory-policy noeviction%s, or keep the "
                            "filter on a server of its own",
                            Py_TYPE(f)->tp_name, f->key, policy,
                            f->ttl > 0 ? "the filter then answers as empty"
                                       : "the filter is then lost: FilterLostError",
                            f->ttl > 0 ? "" : " or volatile-* (keys without a ttl are kept)");
}

static PyObject *batch(const char *name, PyObject *self, PyObject *const *args,
                       Py_ssize_t nargs, PyObject *kwnames, lb_chunk_fn fn, lb_result_kind kind)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    PyObject *keys;
    int skip_nulls;
    if (lb_batch_args(name, args, nargs, kwnames, &keys, &skip_nulls) < 0)
        return NULL;
    if (f->ops->batch_begin)
        f->ops->batch_begin();
    PyObject *r = lb_run_batch(&f->base, keys, skip_nulls, fn, kind, LB_GIL_ALWAYS, f->chunk);
    if (r && lb_redis_filter_warn(f) < 0)
        Py_CLEAR(r);
    return r;
}

PyObject *lb_redis_add_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames)
{
    return batch("add_many", self, args, nargs, kwnames, LB_REDIS_FILTER(self)->ops->add_chunk,
                 LB_RESULT_LIST);
}

PyObject *lb_redis_update(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames)
{
    return batch("update", self, args, nargs, kwnames, LB_REDIS_FILTER(self)->ops->add_chunk,
                 LB_RESULT_NONE);
}

PyObject *lb_redis_test_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    return batch("test_many", self, args, nargs, kwnames, LB_REDIS_FILTER(self)->ops->test_chunk,
                 LB_RESULT_LIST);
}

PyObject *lb_redis_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    return lb_close_with(&LB_REDIS_FILTER(self)->base, LB_REDIS_FILTER(self)->ops->release);
}

PyObject *lb_redis_get_key(PyObject *self, void *unused)
{
    (void)unused;
    return Py_NewRef(LB_REDIS_FILTER(self)->key);
}

PyObject *lb_redis_remaining_ttl(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    long long ms = 0;
    LB_REDIS_CALL(f, lb_redis_key_pttl(f->conn, PyBytes_AS_STRING(f->key_bytes),
                                       (size_t)PyBytes_GET_SIZE(f->key_bytes), &ms));
    if (ms < 0)
        Py_RETURN_NONE;
    return PyFloat_FromDouble((double)ms / 1000.0);
}

PyObject *lb_redis_exists(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    long long ms = 0;
    LB_REDIS_CALL(f, lb_redis_key_pttl(f->conn, PyBytes_AS_STRING(f->key_bytes),
                                       (size_t)PyBytes_GET_SIZE(f->key_bytes), &ms));
    return PyBool_FromLong(ms != -2);
}

PyObject *lb_redis_get_ttl(PyObject *self, void *unused)
{
    (void)unused;
    if (LB_REDIS_FILTER(self)->ttl <= 0)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(LB_REDIS_FILTER(self)->ttl);
}

/* cls(*args[1:], **kw); steals kw. */
static PyObject *call_with(PyObject *cls, PyObject *args, PyObject *kw)
{
    PyObject *pos = PyTuple_GetSlice(args, 1, PyTuple_GET_SIZE(args));
    PyObject *r = pos ? PyObject_Call(cls, pos, kw) : NULL;
    Py_XDECREF(pos);
    Py_DECREF(kw);
    return r;
}

static int check_nargs(PyObject *args, Py_ssize_t max_args, const char *usage)
{
    Py_ssize_t nargs = PyTuple_GET_SIZE(args);
    if (nargs < 2 || (max_args && nargs > max_args)) {
        PyErr_SetString(PyExc_TypeError, usage);
        return -1;
    }
    return 0;
}

PyObject *lb_redis_from_url(PyObject *cls, PyObject *args, PyObject *kwargs, Py_ssize_t max_args,
                            const char *usage)
{
    if (check_nargs(args, max_args, usage) < 0)
        return NULL;
    /* url=None in a constructor means "localhost:6379"; from_url(None) is a
     * mistake, not a request for the default server. */
    PyObject *url = PyTuple_GET_ITEM(args, 0);
    if (!PyUnicode_Check(url)) {
        PyErr_Format(PyExc_TypeError, "the url must be a str (redis://, rediss:// or unix://), "
                     "not %.200s", Py_TYPE(url)->tp_name);
        return NULL;
    }
    PyObject *kw = kwargs ? PyDict_Copy(kwargs) : PyDict_New();
    if (!kw)
        return NULL;
    if (PyDict_SetItemString(kw, "url", PyTuple_GET_ITEM(args, 0)) < 0) {
        Py_DECREF(kw);
        return NULL;
    }
    return call_with(cls, args, kw);
}

PyObject *lb_redis_from_redis(PyObject *cls, PyObject *args, PyObject *kwargs,
                              Py_ssize_t max_args, const char *usage)
{
    if (check_nargs(args, max_args, usage) < 0)
        return NULL;
    if (!PyType_Check(cls))
        return PyErr_Format(PyExc_TypeError, "from_redis() is called on a type");
    lb_state *st = lb_state_from_type((PyTypeObject *)cls);
    PyObject *hook = st ? lb_hook(st, LB_HOOK_CONNECTION_KWARGS) : NULL;
    PyObject *settings =
        hook ? PyObject_CallOneArg(hook, PyTuple_GET_ITEM(args, 0)) : NULL;
    if (!settings)
        return NULL;
    if (kwargs && PyDict_Update(settings, kwargs) < 0) {
        Py_DECREF(settings);
        return NULL;
    }
    return call_with(cls, args, settings);
}
