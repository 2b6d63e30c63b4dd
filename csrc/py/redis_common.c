/* redis_common.c: see redis_common.h. */
#include "redis_common.h"

#include "cluster.h"
#include "op.h"
#include "wire.h"

#include "sharded.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

/* The text of a str (UTF-8) or bytes for the C side, which takes C strings: a
 * NUL inside would cut it there ("good\0@evil" read as "good"), so it is a
 * ValueError naming what.  NULL with the exception set. */
static const char *c_text(PyObject *obj, const char *what)
{
    const char *s;
    Py_ssize_t n;
    if (PyUnicode_Check(obj)) {
        if (!(s = PyUnicode_AsUTF8AndSize(obj, &n)))
            return NULL;
    } else if (PyBytes_Check(obj)) {
        s = PyBytes_AS_STRING(obj);
        n = PyBytes_GET_SIZE(obj);
    } else {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %.200s", what,
                     Py_TYPE(obj)->tp_name);
        return NULL;
    }
    if (memchr(s, '\0', (size_t)n)) {
        PyErr_Format(PyExc_ValueError, "%s must not contain a NUL byte", what);
        return NULL;
    }
    return s;
}

static int set_str(char **field, PyObject *obj, const char *what)
{
    if (!obj || obj == Py_None)
        return 0;
    const char *s = c_text(obj, what);
    if (!s)
        return -1;
    if (lb_redis_config_set(field, s) != LB_REDIS_OK) {
        PyErr_NoMemory();
        return -1;
    }
    return 0;
}

static int set_int(int *field, PyObject *obj, const char *what, long lo, long hi)
{
    if (!obj || obj == Py_None)
        return 0;
    long v = PyLong_AsLong(obj);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < lo || v > hi) {
        PyErr_Format(PyExc_ValueError, "%s must be in %ld..%ld, not %ld", what, lo, hi, v);
        return -1;
    }
    *field = (int)v;
    return 0;
}

/* Seconds (int or float) to milliseconds; None means no timeout (0). */
static int set_timeout(int *field, PyObject *obj, const char *what, double fallback,
                       int from_url)
{
    if (!obj) {
        if (!from_url)
            *field = (int)(fallback * 1000.0);
        return 0;
    }
    if (obj == Py_None) {
        *field = 0;
        return 0;
    }
    double s = PyFloat_AsDouble(obj);
    if (s == -1.0 && PyErr_Occurred())
        return -1;
    if (!(s > 0.0) || !isfinite(s) || s > 86400.0 * 365) {
        PyErr_Format(PyExc_ValueError, "%s must be a positive number of seconds or None, not %R",
                     what, obj);
        return -1;
    }
    int ms = (int)ceil(s * 1000.0);
    *field = ms > 0 ? ms : 1;
    return 0;
}

/* A TLS file or directory keyword / URL option: it must exist and be
 * readable now (OSError: FileNotFoundError, PermissionError), so a typo is
 * not reported later as a handshake failure. */
static int check_path(const char *path, const char *what)
{
    if (!path)
        return 0;
    if (access(path, R_OK) != 0) {
        int e = errno;
        PyObject *name = PyUnicode_DecodeFSDefault(path);
        if (!name)
            return -1;
        PyObject *msg = PyUnicode_FromFormat("%s: %s", what, strerror(e));
        if (msg) {
            PyObject *exc = PyObject_CallFunction(PyExc_OSError, "iOO", e, msg, name);
            if (exc) {
                PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
                Py_DECREF(exc);
            }
            Py_DECREF(msg);
        }
        Py_DECREF(name);
        return -1;
    }
    return 0;
}

/* ssl_cert_reqs: "required" / "optional" / "none" (any case), None (none), or
 * ssl.CERT_NONE / CERT_OPTIONAL / CERT_REQUIRED (0, 1, 2), as redis-py. */
static int set_cert_reqs(int *field, PyObject *obj)
{
    if (!obj)
        return 0;
    if (obj == Py_None) {
        *field = LB_REDIS_CERT_NONE;
        return 0;
    }
    if (PyUnicode_Check(obj)) {
        const char *s = c_text(obj, "ssl_cert_reqs");
        if (!s)
            return -1;
        if (strcasecmp(s, "required") == 0)
            *field = LB_REDIS_CERT_REQUIRED;
        else if (strcasecmp(s, "optional") == 0)
            *field = LB_REDIS_CERT_OPTIONAL;
        else if (strcasecmp(s, "none") == 0)
            *field = LB_REDIS_CERT_NONE;
        else
            goto bad;
        return 0;
    }
    if (PyLong_Check(obj) && !PyBool_Check(obj)) {
        long v = PyLong_AsLong(obj);
        if (v == -1 && PyErr_Occurred())
            return -1;
        if (v == 0)
            *field = LB_REDIS_CERT_NONE;
        else if (v == 1)
            *field = LB_REDIS_CERT_OPTIONAL;
        else if (v == 2)
            *field = LB_REDIS_CERT_REQUIRED;
        else
            goto bad;
        return 0;
    }
bad:
    PyErr_Format(PyExc_ValueError,
                 "ssl_cert_reqs must be \"required\", \"optional\", \"none\" or an "
                 "ssl.CERT_* constant, not %R",
                 obj);
    return -1;
}

static int set_bool(int *field, PyObject *obj, int on, int off)
{
    if (!obj)
        return 0;
    int t = PyObject_IsTrue(obj);
    if (t < 0)
        return -1;
    *field = t ? on : off;
    return 0;
}

int lb_conn_config(lb_state *st, const lb_conn_kw *kw, lb_redis_config *cfg)
{
    lb_redis_config_init(cfg);
    if (kw->url && kw->url != Py_None) {
        if (!PyUnicode_Check(kw->url)) {
            PyErr_Format(PyExc_TypeError, "url must be a str, not %.200s",
                         Py_TYPE(kw->url)->tp_name);
            return -1;
        }
        const char *url = c_text(kw->url, "the Redis URL");
        if (!url)
            return -1;
        char err[256];
        lb_redis_status s = lb_redis_config_from_url(cfg, url, err, sizeof(err));
        if (s != LB_REDIS_OK) { /* URL, ARG: ValueError; TLS: NotSupportedError */
            lb_raise_redis_status(st, s, &(lb_error_detail){err, NULL, NULL, NULL, NULL});
            return -1;
        }
    }
    int url_timeout = cfg->timeout_ms != 0, url_connect = cfg->connect_timeout_ms != 0;
    if (set_str(&cfg->host, kw->host, "host") < 0 ||
        set_str(&cfg->unix_path, kw->unix_socket_path, "unix_socket_path") < 0 ||
        set_str(&cfg->username, kw->username, "username") < 0 ||
        set_str(&cfg->password, kw->password, "password") < 0 ||
        set_int(&cfg->port, kw->port, "port", 1, 65535) < 0 ||
        set_int(&cfg->db, kw->db, "db", 0, 1 << 30) < 0 ||
        set_timeout(&cfg->timeout_ms, kw->socket_timeout, "socket_timeout",
                    LB_DEFAULT_SOCKET_TIMEOUT, url_timeout) < 0 ||
        set_timeout(&cfg->connect_timeout_ms, kw->socket_connect_timeout,
                    "socket_connect_timeout", LB_DEFAULT_CONNECT_TIMEOUT, url_connect) < 0 ||
        set_bool(&cfg->tls, kw->ssl, 1, 0) < 0 ||
        set_str(&cfg->tls_ca_certs, kw->ssl_ca_certs, "ssl_ca_certs") < 0 ||
        set_str(&cfg->tls_ca_path, kw->ssl_ca_path, "ssl_ca_path") < 0 ||
        set_str(&cfg->tls_certfile, kw->ssl_certfile, "ssl_certfile") < 0 ||
        set_str(&cfg->tls_keyfile, kw->ssl_keyfile, "ssl_keyfile") < 0 ||
        set_cert_reqs(&cfg->tls_cert_reqs, kw->ssl_cert_reqs) < 0 ||
        set_bool(&cfg->tls_check_hostname, kw->ssl_check_hostname, 1, 2) < 0 ||
        set_int(&cfg->wait_replicas, kw->wait_replicas, "wait_replicas", 0, 1000) < 0 ||
        (kw->wait_timeout && kw->wait_timeout != Py_None &&
         set_timeout(&cfg->wait_timeout_ms, kw->wait_timeout, "wait_timeout", 0, 1) < 0)) {
        lb_redis_config_free(cfg);
        return -1;
    }
    if (cfg->tls && (check_path(cfg->tls_ca_certs, "ssl_ca_certs") < 0 ||
                     check_path(cfg->tls_ca_path, "ssl_ca_path") < 0 ||
                     check_path(cfg->tls_certfile, "ssl_certfile") < 0 ||
                     check_path(cfg->tls_keyfile, "ssl_keyfile") < 0)) {
        lb_redis_config_free(cfg);
        return -1;
    }
    if (cfg->tls && cfg->tls_keyfile && !cfg->tls_certfile) {
        lb_redis_config_free(cfg);
        PyErr_SetString(PyExc_ValueError, "ssl_keyfile needs ssl_certfile (the client certificate)");
        return -1;
    }
    if (cfg->sentinel_service &&
        ((kw->host && kw->host != Py_None) || (kw->port && kw->port != Py_None) ||
         (kw->unix_socket_path && kw->unix_socket_path != Py_None))) {
        lb_redis_config_free(cfg);
        PyErr_SetString(PyExc_TypeError, "a redis+sentinel:// URL finds the primary through "
                                         "the sentinels: give no host, port or unix_socket_path");
        return -1;
    }
    if (cfg->wait_replicas > 0 && cfg->timeout_ms > 0 &&
        (cfg->wait_timeout_ms > 0 ? cfg->wait_timeout_ms : LB_REDIS_WAIT_DEFAULT_MS) >=
            cfg->timeout_ms) {
        lb_redis_config_free(cfg);
        PyErr_SetString(PyExc_ValueError,
                        "wait_timeout (default 1 s) must be shorter than socket_timeout: the "
                        "server answers WAIT only when it is over");
        return -1;
    }
    if (cfg->cluster_nodes &&
        ((kw->host && kw->host != Py_None) || (kw->port && kw->port != Py_None) ||
         (kw->unix_socket_path && kw->unix_socket_path != Py_None) ||
         (kw->db && kw->db != Py_None && cfg->db != 0))) {
        lb_redis_config_free(cfg);
        PyErr_SetString(PyExc_TypeError, "a redis+cluster:// URL names its seed nodes and "
                                         "database 0: give no host, port, unix_socket_path "
                                         "or db");
        return -1;
    }
    if (kw->host && kw->host != Py_None && cfg->unix_path && kw->unix_socket_path == NULL) {
        /* an explicit host wins over a unix:// URL */
        lb_redis_config_set(&cfg->unix_path, NULL);
    }
    return 0;
}

int lb_redis_parse_shards(lb_state *st, PyObject *obj, uint32_t *out)
{
    (void)st;
    *out = 1;
    if (obj == NULL || obj == Py_None)
        return 0;
    long v = PyLong_Check(obj) && !PyBool_Check(obj) ? PyLong_AsLong(obj) : -2;
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (v < 1 || v > LB_SHARDED_MAX_SHARDS) {
        PyErr_Format(v == -2 ? PyExc_TypeError : PyExc_ValueError,
                     "shards must be an int in 1..%d, not %R", LB_SHARDED_MAX_SHARDS, obj);
        return -1;
    }
    *out = (uint32_t)v;
    return 0;
}

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

/* ---- the asyncio transport's settings -------------------------------------- */

static int put(PyObject *d, const char *name, PyObject *v)
{
    if (!v)
        return -1;
    int r = PyDict_SetItemString(d, name, v);
    Py_DECREF(v);
    return r;
}

static PyObject *str_or_none(const char *s)
{
    return s ? PyUnicode_DecodeFSDefault(s) : Py_NewRef(Py_None);
}

static PyObject *seconds_or_none(int ms)
{
    return ms > 0 ? PyFloat_FromDouble(ms / 1000.0) : Py_NewRef(Py_None);
}

PyObject *lb_redis_wire_config(PyObject *self, PyObject *unused)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (lb_enter(&f->base) < 0)
        return NULL;
    const lb_redis_config *c = lb_redis_get_config(f->conn);
    static const char *const reqs[] = {"required", "optional", "none"};
    PyObject *d = PyDict_New();
    if (d && (put(d, "host", PyUnicode_FromString(c->host ? c->host : "localhost")) < 0 ||
              put(d, "port", PyLong_FromLong(c->port ? c->port : 6379)) < 0 ||
              put(d, "unix_socket_path", str_or_none(c->unix_path)) < 0 ||
              put(d, "socket_timeout", seconds_or_none(c->timeout_ms)) < 0 ||
              put(d, "socket_connect_timeout", seconds_or_none(c->connect_timeout_ms)) < 0 ||
              put(d, "chunk_size", PyLong_FromSize_t(f->chunk)) < 0 ||
              put(d, "ssl", PyBool_FromLong(c->tls && !c->unix_path)) < 0 ||
              put(d, "ssl_ca_certs", str_or_none(c->tls_ca_certs)) < 0 ||
              put(d, "ssl_ca_path", str_or_none(c->tls_ca_path)) < 0 ||
              put(d, "ssl_certfile", str_or_none(c->tls_certfile)) < 0 ||
              put(d, "ssl_keyfile", str_or_none(c->tls_keyfile)) < 0 ||
              put(d, "ssl_cert_reqs",
                  PyUnicode_FromString(reqs[c->tls_cert_reqs >= 0 && c->tls_cert_reqs <= 2
                                                 ? c->tls_cert_reqs
                                                 : 0])) < 0 ||
              put(d, "ssl_check_hostname",
                  PyBool_FromLong(c->tls_check_hostname != 2 &&
                                  c->tls_cert_reqs != LB_REDIS_CERT_NONE)) < 0)) {
        Py_CLEAR(d);
    }
    lb_leave(&f->base);
    return d;
}

/* ---- the sans-IO side, for ling_bloom.aio ------------------------------------
 *
 * The asyncio transport does the socket I/O; everything else is the core's
 * (csrc/redis: wire.h, bitmap.h and redisbloom.h): the requests, the
 * reply reader and its bounds, the checks.  Each method enters the filter
 * (ClosedError once closed). */

static PyObject *wire_raise(lb_redis_filter *f, lb_redis_status st)
{
    f->ops->raise(f, st);
    lb_leave(&f->base);
    return NULL;
}

/* A client carried outside C from now on: a node client becomes a wire
 * client (*out, c to be freed), a cluster client gets wire clients for its
 * nodes (*out = c). */
static lb_redis_status wire_client(lb_redis *c, lb_redis **out)
{
    *out = c;
    if (lb_wire_is(c))
        return LB_REDIS_OK;
    if (lb_redis_get_config(c)->cluster_nodes) {
        lb_cluster_use_wire(c);
        return LB_REDIS_OK;
    }
    *out = lb_wire_new_from(c);
    return *out ? LB_REDIS_OK : LB_REDIS_ERR_NOMEM;
}

/* The filter's connections (and its shards'), carried outside C from now on. */
static lb_redis_status to_wire(lb_redis_filter *f)
{
    lb_sharded *sh = f->ops->sharded(f);
    lb_redis *w;
    for (uint32_t i = 1; sh && i < lb_sharded_count(sh); i++) {
        if (wire_client(lb_sharded_conn(sh, i), &w) != LB_REDIS_OK)
            return LB_REDIS_ERR_NOMEM;
        lb_sharded_set_conn(sh, i, w); /* the old one freed */
    }
    if (wire_client(f->conn, &w) != LB_REDIS_OK)
        return LB_REDIS_ERR_NOMEM;
    if (w != f->conn) {
        lb_redis_free(f->conn);
        f->conn = w;
        if (sh)
            lb_sharded_set_conn(sh, 0, w);
        f->ops->rebind(f);
    }
    if (!f->w_lanes) {
        size_t n = sh ? lb_sharded_count(sh) : 1;
        f->w_lanes = PyMem_Calloc(n, sizeof *f->w_lanes);
        f->w_shard_of = PyMem_Calloc(n, sizeof *f->w_shard_of);
        if (!f->w_lanes || !f->w_shard_of)
            return LB_REDIS_ERR_NOMEM;
    }
    return LB_REDIS_OK;
}

/* The lanes of the next stage of the operation begun. */
static size_t next_stage(lb_redis_filter *f)
{
    lb_sharded *sh = f->ops->sharded(f);
    if (sh)
        return f->w_nlanes = lb_sharded_wire_stage(sh, f->w_lanes, f->w_shard_of);
    if (f->w_op && f->w_stages++ == 0) {
        f->w_lanes[0] = f->w_op; /* the one step machine, once */
        f->w_shard_of[0] = 0;
        return f->w_nlanes = 1;
    }
    return f->w_nlanes = 0;
}

/* _wire_begin(kind, keys): 1 add, 2 test (1..chunk_size keys, a list or
 * tuple), 3 reset (keys None). */
PyObject *lb_wire_method_begin(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    int kind;
    PyObject *keys;
    if (!PyArg_ParseTuple(args, "iO:_wire_begin", &kind, &keys))
        return NULL;
    Py_ssize_t n = 0;
    PyObject *seq = NULL;
    lb_key *kv = NULL;
    lb_key_hold *holds = NULL;
    Py_ssize_t held = 0;
    if (kind != LB_REDIS_WIRE_RESET) {
        seq = lb_keys_fixed(keys, "keys must be a list or tuple");
        if (!seq)
            return NULL;
        n = PySequence_Fast_GET_SIZE(seq);
        kv = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *kv);
        holds = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *holds);
        if (!kv || !holds) {
            PyErr_NoMemory();
            goto fail;
        }
        for (; held < n; held++)
            if (lb_key_get(f->base.st, PySequence_Fast_GET_ITEM(seq, held), &kv[held],
                           &holds[held]) < 0)
                goto fail;
    }
    if (lb_enter(&f->base) < 0)
        goto fail;
    PyMem_Free(f->w_out);
    f->w_out = PyMem_Malloc((size_t)(n ? n : 1));
    f->w_n = (size_t)n;
    f->w_op = NULL;
    f->w_nlanes = 0;
    f->w_stages = 0;
    lb_redis_status st = f->w_out ? to_wire(f) : LB_REDIS_ERR_NOMEM;
    lb_sharded *sh = f->ops->sharded(f);
    if (st == LB_REDIS_OK && sh)
        st = lb_sharded_wire_begin(sh, kind, kv, (size_t)n, f->w_out);
    else if (st == LB_REDIS_OK)
        st = f->ops->wire_begin(f, kind, kv, (size_t)n, f->w_out, &f->w_op);
    size_t lanes = st == LB_REDIS_OK ? next_stage(f) : 0;
    if (st != LB_REDIS_OK) {
        if (st == LB_REDIS_ERR_NOMEM)
            PyErr_NoMemory();
        else
            f->ops->raise(f, st);
    }
    lb_leave(&f->base);
    if (st != LB_REDIS_OK)
        goto fail;
    for (Py_ssize_t i = 0; i < held; i++)
        lb_key_release(&holds[i]);
    PyMem_Free(kv);
    PyMem_Free(holds);
    Py_XDECREF(seq);
    return PyLong_FromSize_t(lanes);
fail:
    for (Py_ssize_t i = 0; i < held; i++)
        lb_key_release(&holds[i]);
    PyMem_Free(kv);
    PyMem_Free(holds);
    Py_XDECREF(seq);
    return NULL;
}

/* _wire_check(keys): TypeError / EmptyKeyError for the first bad key of a
 * list or tuple, before any of it is sent; else the keys to send, frozen
 * (lb_keys_checked: the same sequence when every key is a str or bytes, else
 * a list with the bytes of every other key). */
PyObject *lb_wire_method_check(PyObject *self, PyObject *keys)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (lb_enter_read(&f->base) < 0)
        return NULL;
    lb_leave(&f->base);
    PyObject *seq = lb_keys_fixed(keys, "keys must be a list or tuple");
    if (!seq)
        return NULL;
    PyObject *checked = lb_keys_checked(f->base.st, seq);
    Py_DECREF(seq);
    return checked;
}

static lb_op *wire_op(lb_redis_filter *f, Py_ssize_t lane)
{
    if (lane < 0 || (size_t)lane >= f->w_nlanes) {
        PyErr_SetString(PyExc_RuntimeError, "no wire operation is in progress on that lane");
        return NULL;
    }
    return f->w_lanes[lane];
}

/* The client of shard (0 without shards). */
static lb_redis *shard_conn(lb_redis_filter *f, int shard)
{
    lb_sharded *sh = f->ops->sharded(f);
    if (sh)
        return shard >= 0 ? lb_sharded_conn(sh, (uint32_t)shard) : NULL;
    return shard == 0 ? f->conn : NULL;
}

static PyObject *seconds(int ms)
{
    return ms > 0 ? PyFloat_FromDouble(ms / 1000.0) : Py_NewRef(Py_None);
}

/* _wire_step(lane) -> the next step of the lane's step machine:
 *   (0,)                                                     over
 *   (1, shard, node, probe, host, port, unix_path, tls, connect_timeout)   CONNECT
 *   (2, shard, node, probe, request_bytes, timeout)          SEND
 *   (3, seconds)                                             PAUSE
 * (shard, node, probe) names the connection: the shard's client (0 without
 * shards), a cluster's node index (0 for one server), and that node's
 * one-off connection to a sentinel; timeouts in seconds or None. */
PyObject *lb_wire_method_step(PyObject *self, PyObject *arg)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    Py_ssize_t lane = PyLong_AsSsize_t(arg);
    if (lane == -1 && PyErr_Occurred())
        return NULL;
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_op *op = wire_op(f, lane);
    if (!op) {
        lb_leave(&f->base);
        return NULL;
    }
    lb_wire_step s;
    PyObject *out;
    if (!lb_op_wire_step(op, &s)) {
        out = Py_BuildValue("(i)", 0);
    } else if (s.what == LB_WIRE_PAUSE) {
        out = Py_BuildValue("(id)", 3, s.pause_ms / 1000.0);
    } else if (s.what == LB_WIRE_CONNECT) {
        const lb_redis_config *c = s.cfg;
        PyObject *unix_path = c->unix_path ? PyUnicode_DecodeFSDefault(c->unix_path)
                                           : Py_NewRef(Py_None);
        out = unix_path ? Py_BuildValue("(iIiisiNiN)", 1, f->w_shard_of[lane], s.node, s.probe,
                                        c->host ? c->host : "localhost", c->port ? c->port : 6379,
                                        unix_path, c->tls && !c->unix_path,
                                        seconds(c->connect_timeout_ms))
                        : NULL;
    } else {
        out = Py_BuildValue("(iIiiy#N)", 2, f->w_shard_of[lane], s.node, s.probe, s.req->buf,
                            (Py_ssize_t)s.req->len,
                            seconds(s.cfg->timeout_ms));
    }
    lb_leave(&f->base);
    return out;
}

/* The transport's outcomes, as the numbers ling_bloom.aio passes. */
static lb_redis_status outcome(int kind)
{
    switch (kind) {
    case 0: return LB_REDIS_OK;
    case 1: return LB_REDIS_ERR_CONNECT;
    case 2: return LB_REDIS_ERR_TIMEOUT;
    case 3: return LB_REDIS_ERR_IO;
    default: return LB_REDIS_ERR_PROTOCOL; /* the feed failed: its text is in C already */
    }
}

/* _wire_connected(lane, outcome, text) -> whether the connection stays open:
 * a CONNECT step's outcome (0 OK, 1 refused or unreachable, 2 timed out). */
PyObject *lb_wire_method_connected(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    Py_ssize_t lane;
    int kind;
    const char *text = NULL;
    if (!PyArg_ParseTuple(args, "ni|z:_wire_connected", &lane, &kind, &text))
        return NULL;
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_op *op = wire_op(f, lane);
    if (op)
        lb_op_wire_connected(op, outcome(kind), text);
    int open = op && lb_op_wire_step_open(op);
    lb_leave(&f->base);
    return op ? PyBool_FromLong(open) : NULL;
}

/* _wire_feed(lane, data) -> 1 every reply is in, 0 more to come, -1 the
 * replies do not fit (out of step: report _wire_sent(lane, 4)). */
PyObject *lb_wire_method_feed(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    Py_ssize_t lane;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "ny*:_wire_feed", &lane, &view))
        return NULL;
    if (lb_enter(&f->base) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    lb_op *op = wire_op(f, lane);
    int complete = 0;
    lb_redis_status st = op ? lb_op_wire_feed(op, view.buf, (size_t)view.len, &complete)
                            : LB_REDIS_OK;
    PyBuffer_Release(&view);
    lb_leave(&f->base);
    if (!op)
        return NULL;
    return PyLong_FromLong(st != LB_REDIS_OK ? -1 : complete);
}

/* _wire_sent(lane, outcome, text) -> whether the connection stays open (False:
 * the transport closes it): a SEND step's outcome (0 every reply in, 2 timed
 * out, 3 the connection broke, 4 the feed failed). */
PyObject *lb_wire_method_sent(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    Py_ssize_t lane;
    int kind;
    const char *text = NULL;
    if (!PyArg_ParseTuple(args, "ni|z:_wire_sent", &lane, &kind, &text))
        return NULL;
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_op *op = wire_op(f, lane);
    if (op)
        lb_op_wire_sent(op, outcome(kind), kind >= 4 ? NULL : text);
    int open = op && lb_op_wire_step_open(op);
    lb_leave(&f->base);
    return op ? PyBool_FromLong(open) : NULL;
}

/* _wire_lost(shard, node, stray): the transport closed a connection between
 * round trips: the server closed it (stray 0), or input nobody asked for
 * came on it (stray 1: out of step). */
PyObject *lb_wire_method_lost(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    int shard, node, stray;
    if (!PyArg_ParseTuple(args, "iii:_wire_lost", &shard, &node, &stray))
        return NULL;
    if (f->base.closed || !f->conn)
        Py_RETURN_NONE; /* closing after close(): nothing left to forget */
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_redis *c = shard_conn(f, shard);
    lb_redis *w = c ? lb_op_wire_client(c, node) : NULL;
    if (w && stray)
        lb_wire_out_of_step(w);
    else if (w)
        lb_wire_closed(w);
    lb_leave(&f->base);
    Py_RETURN_NONE;
}

/* _wire_drops() -> the nodes a Redis Cluster client (every shard's) dropped
 * so far: when it changes, the transport closes the connections of the nodes
 * _wire_live no longer names.  0 for one server. */
PyObject *lb_wire_method_drops(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (f->base.closed || !f->conn)
        return PyLong_FromLong(0);
    if (lb_enter(&f->base) < 0)
        return NULL;
    unsigned long n = 0;
    lb_sharded *sh = f->ops->sharded(f);
    uint32_t shards = sh ? lb_sharded_count(sh) : 1;
    for (uint32_t i = 0; i < shards; i++)
        n += lb_cluster_drops(shard_conn(f, (int)i));
    lb_leave(&f->base);
    return PyLong_FromUnsignedLong(n);
}

/* _wire_live(shard, node) -> whether that node of that shard's client is
 * still one (a Redis Cluster client drops the nodes its map no longer names). */
PyObject *lb_wire_method_live(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    int shard, node;
    if (!PyArg_ParseTuple(args, "ii:_wire_live", &shard, &node))
        return NULL;
    if (f->base.closed || !f->conn)
        Py_RETURN_FALSE;
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_redis *c = shard_conn(f, shard);
    int live = c && (lb_wire_is(c) || !lb_redis_get_config(c)->cluster_nodes
                         ? node == 0
                         : lb_cluster_node_host(c, node) != NULL);
    lb_leave(&f->base);
    return PyBool_FromLong(live);
}

/* _wire_stage() -> the lanes of the operation's next stage, all over now
 * (0: the operation is over: _wire_result). */
PyObject *lb_wire_method_stage(PyObject *self, PyObject *unused)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (lb_enter(&f->base) < 0)
        return NULL;
    size_t lanes = next_stage(f);
    lb_leave(&f->base);
    return PyLong_FromSize_t(lanes);
}

/* The results of the finished operation: a list of bools, or the exception
 * the blocking call raises. */
PyObject *lb_wire_method_result(PyObject *self, PyObject *unused)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_sharded *sh = f->ops->sharded(f);
    lb_redis_status st = sh ? lb_sharded_wire_end(sh)
                       : f->w_op ? lb_op_wire_status(f->w_op)
                                 : lb_redis_set_error(f->conn, LB_REDIS_ERR_ARG,
                                                      "no wire operation was begun");
    f->w_nlanes = 0;
    if (st != LB_REDIS_OK)
        return wire_raise(f, st);
    lb_leave(&f->base);
    if (lb_redis_filter_warn(f) < 0)
        return NULL;
    PyObject *list = PyList_New((Py_ssize_t)f->w_n);
    if (!list)
        return NULL;
    for (size_t i = 0; i < f->w_n; i++)
        PyList_SET_ITEM(list, (Py_ssize_t)i, Py_NewRef(f->w_out[i] ? Py_True : Py_False));
    return list;
}

