/* redis_conn.c: the connection keywords of the Redis types (url, host, port,
 * password, TLS files, timeouts, ...) read into an lb_redis_config, each checked
 * with an error naming it (see redis_common.h). */
#include "redis_common.h"

#include "sharded.h"

#include <errno.h>
#include <math.h>
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
