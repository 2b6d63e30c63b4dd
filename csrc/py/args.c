/* args.c: argument parsing shared by the types and the module functions (see
 * args.h). */
#include "args.h"

#include <math.h>
#include <string.h>

#include "errors.h"
#include "params.h"

int lb_parse_hash(PyObject *obj, lb_hash_scheme *out)
{
    if (!obj || obj == Py_None) {
        *out = LB_HASH_DEFAULT;
        return 0;
    }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "hash must be a str (\"xxh3-mix\", \"xxh3\" or \"ling-base\"), not %.200s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    const char *name = PyUnicode_AsUTF8(obj);
    if (!name)
        return -1;
    int s = lb_hash_scheme_parse(name);
    if (s < 0) {
        PyErr_Format(PyExc_ValueError, "unknown hash %R: expected \"xxh3-mix\" (the default), \"xxh3\" or \"ling-base\"", obj);
        return -1;
    }
    *out = (lb_hash_scheme)s;
    return 0;
}

/* ---- numbers -------------------------------------------------------------- */

int lb_arg_type_error(const char *type_name, const char *what, PyObject *obj)
{
    const char *shown = obj == Py_None ? "None" : Py_TYPE(obj)->tp_name;
    if (type_name)
        PyErr_Format(PyExc_TypeError, "%s: %s must be a number, not %.200s", type_name, what,
                     shown);
    else
        PyErr_Format(PyExc_TypeError, "%s must be a number, not %.200s", what, shown);
    return -1;
}

int lb_none_given(const char *type_name, const char *what, PyObject *obj)
{
    if (obj != Py_None)
        return 0;
    return lb_arg_type_error(type_name, what, obj);
}

int lb_parse_u64_arg(const char *type_name, PyObject *obj, const char *what, PyObject *exc,
                     uint64_t *out)
{
    PyObject *num;
    if (PyFloat_Check(obj)) {
        /* capacity=1e6 is common: accept a float that is a whole number. */
        double d = PyFloat_AS_DOUBLE(obj);
        if (!isfinite(d) || d != floor(d)) {
            PyErr_Format(exc, "%s must be a whole number, not %R", what, obj);
            return -1;
        }
        num = PyLong_FromDouble(d);
    }
    else if (PyBool_Check(obj) || !PyIndex_Check(obj))
        return lb_arg_type_error(type_name, what, obj);
    else
        num = PyNumber_Index(obj);
    if (!num)
        return -1;
    PyObject *zero = PyLong_FromLong(0);
    int negative = zero ? PyObject_RichCompareBool(num, zero, Py_LT) : -1;
    Py_XDECREF(zero);
    if (negative != 0) {
        Py_DECREF(num);
        if (negative > 0)
            PyErr_Format(exc, "%s must not be negative", what);
        return -1;
    }
    *out = PyLong_AsUnsignedLongLong(num);
    Py_DECREF(num);
    if (*out == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        PyErr_Format(exc, "%s is too large", what);
        return -1;
    }
    return 0;
}

int lb_parse_u64(PyObject *obj, const char *what, PyObject *exc, uint64_t *out)
{
    return lb_parse_u64_arg(NULL, obj, what, exc, out);
}

int lb_parse_double_arg(const char *type_name, PyObject *obj, const char *what, double *out)
{
    if (obj == Py_None || PyBool_Check(obj))
        return lb_arg_type_error(type_name, what, obj);
    double d = PyFloat_AsDouble(obj);
    if (d == -1.0 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        return lb_arg_type_error(type_name, what, obj);
    }
    *out = d;
    return 0;
}

int lb_parse_rate(lb_state *st, const char *type_name, PyObject *obj, double *out)
{
    double p;
    if (lb_parse_double_arg(type_name, obj, "error_rate", &p) < 0)
        return -1;
    if (!(p > 0.0 && p < 1.0)) {
        PyErr_Format(st->InvalidFalsePositiveRateError,
                     "false-positive rate must be in (0, 1), not %R", obj);
        return -1;
    }
    *out = p;
    return 0;
}

/* k outside 1..LB_MAX_K is a geometry out of range, as a bad m is:
 * InvalidCapacityError (a BloomError and a ValueError). */
int lb_parse_k(lb_state *st, const char *type_name, PyObject *obj, uint64_t *out)
{
    if (lb_parse_u64_arg(type_name, obj, "k", st->InvalidCapacityError, out) < 0)
        return -1;
    if (*out == 0 || *out > LB_MAX_K) {
        PyErr_Format(st->InvalidCapacityError, "k must be in 1..%d, not %llu", LB_MAX_K,
                     (unsigned long long)*out);
        return -1;
    }
    return 0;
}

/* ---- the geometry of a fixed-size filter ------------------------------------ */

int lb_parse_fixed_args(lb_state *st, PyObject *args, PyObject *kwargs, const char *type_name,
                        lb_fixed_args *out)
{
    static char *kwlist[] = {"capacity", "error_rate", "m", "k", "hash", NULL};
    PyObject *capacity = NULL, *error_rate = NULL, *m = NULL, *k = NULL, *hash = Py_None;
    char fmt[64];
    PyOS_snprintf(fmt, sizeof(fmt), "|OO$OOO:%s", type_name);
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, fmt, kwlist, &capacity, &error_rate, &m, &k,
                                     &hash))
        return -1;
    return lb_fixed_args_from(st, capacity, error_rate, m, k, hash, type_name, 0, out);
}

/* m= and k= given (both, checked by the caller's caller): out's m and k. */
static int args_by_geometry(lb_state *st, PyObject *m, PyObject *k, const char *type_name,
                            lb_fixed_args *out)
{
    uint64_t mm, kk;
    if (!m || !k) {
        PyErr_Format(PyExc_TypeError, "%s needs both m and k", type_name);
        return -1;
    }
    if (lb_parse_u64_arg(type_name, m, "m", st->InvalidCapacityError, &mm) < 0 ||
        lb_parse_k(st, type_name, k, &kk) < 0)
        return -1;
    lb_status s = lb_check_geometry(mm, kk);
    if (s != LB_OK) {
        lb_raise(st, s, s == LB_ERR_CAPACITY ? "m must be greater than zero" : NULL);
        return -1;
    }
    out->m = mm;
    out->k = (uint32_t)kk;
    return 0;
}

int lb_parse_capacity_rate(lb_state *st, PyObject *capacity, PyObject *error_rate,
                           const char *type_name, lb_fixed_args *out)
{
    if (!capacity) {
        PyErr_Format(PyExc_TypeError, "%s needs capacity (and error_rate), or m and k",
                     type_name);
        return -1;
    }
    if (lb_parse_u64_arg(type_name, capacity, "capacity", st->InvalidCapacityError,
                         &out->capacity) < 0)
        return -1;
    if (out->capacity == 0) {
        lb_raise(st, LB_ERR_CAPACITY, NULL);
        return -1;
    }
    out->error_rate = 0.01;
    if (error_rate && lb_parse_rate(st, type_name, error_rate, &out->error_rate) < 0)
        return -1;
    return 0;
}

/* capacity (and error_rate) given: out's capacity, rate, and the m and k they
 * size (with out->scheme). */
static int args_by_capacity(lb_state *st, PyObject *capacity, PyObject *error_rate,
                            const char *type_name, lb_fixed_args *out)
{
    if (lb_parse_capacity_rate(st, capacity, error_rate, type_name, out) < 0)
        return -1;
    uint64_t mm, kk;
    lb_status s = lb_size(out->capacity, out->error_rate, out->scheme, LB_FIXED_SLACK, &mm, &kk);
    if (s == LB_OK)
        s = lb_check_geometry(mm, kk);
    if (s == LB_ERR_ARG) {
        PyErr_Format(st->InvalidFalsePositiveRateError,
                     "error_rate %R needs k = %llu hash functions; at most %d are supported",
                     error_rate, (unsigned long long)kk, LB_MAX_K);
        return -1;
    }
    if (s != LB_OK) {
        lb_raise(st, s, NULL);
        return -1;
    }
    out->m = mm;
    out->k = (uint32_t)kk;
    out->has_capacity = 1;
    return 0;
}

int lb_fixed_args_from(lb_state *st, PyObject *capacity, PyObject *error_rate, PyObject *m,
                       PyObject *k, PyObject *hash, const char *type_name, int allow_none,
                       lb_fixed_args *out)
{
    memset(out, 0, sizeof(*out));
    if (lb_parse_hash(hash, &out->scheme) < 0)
        return -1;
    /* NULL: not given.  None where a number is required is a TypeError: for the
     * in-memory types always; for RedisFilter (allow_none) None is "not given",
     * except error_rate=None beside a capacity, which would silently be 0.01. */
    if (!allow_none) {
        if (lb_none_given(type_name, "capacity", capacity) < 0 ||
            lb_none_given(type_name, "error_rate", error_rate) < 0 ||
            lb_none_given(type_name, "m", m) < 0 || lb_none_given(type_name, "k", k) < 0)
            return -1;
    }
    else {
        if (capacity == Py_None)
            capacity = NULL;
        if (m == Py_None)
            m = NULL;
        if (k == Py_None)
            k = NULL;
        if (capacity && lb_none_given(type_name, "error_rate", error_rate) < 0)
            return -1;
        if (error_rate == Py_None)
            error_rate = NULL;
    }
    int by_geometry = m || k;
    int by_capacity = capacity || error_rate;
    if (by_geometry && by_capacity) {
        PyErr_Format(PyExc_TypeError, "%s takes capacity and error_rate, or m and k, not both",
                     type_name);
        return -1;
    }
    if (!by_geometry && !by_capacity && allow_none)
        return 1;
    if (by_geometry)
        return args_by_geometry(st, m, k, type_name, out);
    return args_by_capacity(st, capacity, error_rate, type_name, out);
}
