/* redis_connection.c: see redis_connection.h. */
#include "redis_connection.h"

#include <math.h>
#include <stdarg.h>

static int set_str(char **field, PyObject *obj, const char *what)
{
    if (!obj || obj == Py_None)
        return 0;
    const char *s;
    if (PyUnicode_Check(obj))
        s = PyUnicode_AsUTF8(obj);
    else if (PyBytes_Check(obj))
        s = PyBytes_AS_STRING(obj);
    else {
        PyErr_Format(PyExc_TypeError, "%s must be a str, not %.200s", what,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
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

int lb_conn_config(lb_state *st, const lb_conn_kw *kw, lb_redis_config *cfg)
{
    lb_redis_config_init(cfg);
    if (kw->url && kw->url != Py_None) {
        if (!PyUnicode_Check(kw->url)) {
            PyErr_Format(PyExc_TypeError, "url must be a str, not %.200s",
                         Py_TYPE(kw->url)->tp_name);
            return -1;
        }
        const char *url = PyUnicode_AsUTF8(kw->url);
        if (!url)
            return -1;
        char err[256];
        lb_redis_status s = lb_redis_config_from_url(cfg, url, err, sizeof(err));
        if (s == LB_REDIS_ERR_TLS) {
            PyErr_SetString(st->NotSupportedError, err);
            return -1;
        }
        if (s != LB_REDIS_OK) {
            PyErr_SetString(PyExc_ValueError, err);
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
                    "socket_connect_timeout", LB_DEFAULT_CONNECT_TIMEOUT, url_connect) < 0) {
        lb_redis_config_free(cfg);
        return -1;
    }
    if (kw->host && kw->host != Py_None && cfg->unix_path && kw->unix_socket_path == NULL) {
        /* an explicit host wins over a unix:// URL */
        lb_redis_config_set(&cfg->unix_path, NULL);
    }
    return 0;
}

void lb_raise_with(PyObject *exc, const char *msg, ...)
{
    PyObject *value = PyObject_CallFunction(exc, "s", msg);
    if (!value)
        return;
    va_list ap;
    va_start(ap, msg);
    const char *name;
    while ((name = va_arg(ap, const char *)) != NULL) {
        PyObject *v = va_arg(ap, PyObject *);
        if (PyObject_SetAttrString(value, name, v ? v : Py_None) < 0) {
            va_end(ap);
            Py_DECREF(value);
            return;
        }
    }
    va_end(ap);
    PyErr_SetObject(exc, value);
    Py_DECREF(value);
}

void lb_raise_redis(lb_state *st, lb_redis_status status, const lb_redis *conn, PyObject *key)
{
    const char *text = conn ? lb_redis_errstr(conn) : "";
    if (!text || !*text)
        text = lb_redis_status_name(status);
    PyObject *reply = NULL;
    switch (status) {
    case LB_REDIS_ERR_CONNECT:
    case LB_REDIS_ERR_IO:
    case LB_REDIS_ERR_AUTH:
        PyErr_SetString(st->RedisConnectionError, text);
        return;
    case LB_REDIS_ERR_TIMEOUT:
        PyErr_SetString(st->RedisTimeoutError, text);
        return;
    case LB_REDIS_ERR_PROTOCOL:
        PyErr_SetString(st->RedisError, text);
        return;
    case LB_REDIS_ERR_REPLY:
    case LB_REDIS_ERR_WRONGTYPE:
        reply = PyUnicode_DecodeUTF8(text, (Py_ssize_t)strlen(text), "replace");
        if (!reply)
            return;
        if (status == LB_REDIS_ERR_WRONGTYPE)
            lb_raise_with(st->WrongTypeError, text, "reply", reply, "key", key, NULL);
        else
            lb_raise_with(st->RedisResponseError, text, "reply", reply, NULL);
        Py_DECREF(reply);
        return;
    case LB_REDIS_ERR_URL:
    case LB_REDIS_ERR_ARG:
        PyErr_SetString(PyExc_ValueError, text);
        return;
    case LB_REDIS_ERR_TLS:
        PyErr_SetString(st->NotSupportedError, text);
        return;
    case LB_REDIS_ERR_MISMATCH:
        PyErr_SetString(st->GeometryMismatchError, text);
        return;
    case LB_REDIS_ERR_NOTFOUND:
        PyErr_SetString(PyExc_KeyError, text);
        return;
    case LB_REDIS_ERR_NOMEM:
        PyErr_NoMemory();
        return;
    case LB_REDIS_ERR_FULL:
        PyErr_SetString(st->FilterFullError, text);
        return;
    case LB_REDIS_ERR_NOMODULE:
        PyErr_SetString(st->ModuleMissingError, text);
        return;
    default:
        PyErr_SetString(st->RedisError, text);
    }
}
