/* module.c: the ling_bloom._core module: its state, its exceptions, its
 * functions (estimate, indices, hash_pair), and what every filter type shares
 * (base object, argument parsing, close and context manager, save and load). */
#include "module.h"

#include <math.h>
#include <pthread.h>
#include <sched.h>

#include "format.h"
#include "keys.h"
#include "params.h"

/* ---- module state ---------------------------------------------------- */

lb_state *lb_state_from_type(PyTypeObject *type)
{
    /* The type itself or the first base defined by this module (a Python
     * subclass of a filter has no module of its own). */
    PyObject *mro = type->tp_mro;
    Py_ssize_t n = mro ? PyTuple_GET_SIZE(mro) : 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyTypeObject *t = (PyTypeObject *)PyTuple_GET_ITEM(mro, i);
        if (!(t->tp_flags & Py_TPFLAGS_HEAPTYPE))
            continue;
        PyObject *mod = PyType_GetModule(t);
        if (!mod) {
            PyErr_Clear();
            continue;
        }
        if (PyModule_GetDef(mod) == &lb_module_def)
            return (lb_state *)PyModule_GetState(mod);
    }
    PyErr_SetString(PyExc_TypeError, "not a ling_bloom type");
    return NULL;
}

PyObject *lb_raise(lb_state *st, lb_status status, const char *detail)
{
    PyObject *exc;
    const char *text;
    switch (status) {
    case LB_ERR_CAPACITY:
        exc = st->InvalidCapacityError;
        text = "capacity must be greater than zero";
        break;
    case LB_ERR_FPR:
        exc = st->InvalidFalsePositiveRateError;
        text = "false-positive rate must be in (0, 1)";
        break;
    case LB_ERR_RANGE:
        exc = st->InvalidCapacityError;
        text = "the filter would be too large (more than 2**48 bits)";
        break;
    case LB_ERR_ARG:
        exc = PyExc_ValueError;
        text = "invalid argument";
        break;
    case LB_ERR_NOMEM:
        exc = PyExc_MemoryError;
        text = "out of memory";
        break;
    case LB_ERR_FORMAT:
        exc = st->CorruptFileError;
        text = "not a valid saved filter";
        break;
    case LB_ERR_MISMATCH:
        exc = st->GeometryMismatchError;
        text = "filters differ in m, k or hash";
        break;
    case LB_ERR_EMPTY_KEY:
        exc = st->EmptyKeyError;
        text = "key must not be empty";
        break;
    default:
        exc = st->BloomError;
        text = "internal error";
        break;
    }
    PyErr_SetString(exc, detail ? detail : text);
    return NULL;
}

/* ---- the base of every filter ---------------------------------------- */

int lb_base_init(lb_base *b, PyTypeObject *type)
{
    b->st = lb_state_from_type(type);
    if (!b->st)
        return -1;
    b->lock = PyThread_allocate_lock();
    if (!b->lock) {
        PyErr_NoMemory();
        return -1;
    }
    b->busy = 0;
    b->fork_generation = lb_fork_generation;
    b->waiters = 0;
    b->users = 0;
    b->reads_during_batch = 0;
    b->closed = 0;
    b->released = 0;
    b->release = NULL;
    b->after_fork = NULL;
    b->weakrefs = NULL;
    b->raise_backend = NULL;
    b->batch = NULL;
    b->chunk = 0;
    return 0;
}

void lb_base_fini(lb_base *b)
{
    if (b->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)b);
    if (b->lock) {
        /* A lock inherited over fork() may be held by a thread that does
         * not exist here: leave it (as CPython does with its own locks). */
        if (b->fork_generation == lb_fork_generation)
            PyThread_free_lock(b->lock);
        b->lock = NULL;
    }
}

unsigned long lb_fork_generation = 0;

static void after_fork_in_child(void)
{
    lb_fork_generation++;
}

/* The first entry in a forked child: a fresh lock state; what another
 * thread was changing at the fork is replaced by the type's hook. */
static int recover_after_fork(lb_base *b)
{
    PyThread_type_lock fresh = PyThread_allocate_lock();
    if (!fresh) {
        PyErr_NoMemory();
        return -1;
    }
    int owned = b->busy;
    b->lock = fresh; /* the inherited one is left alone: see lb_base_fini */
    b->busy = 0;
    b->waiters = 0;
    b->users = 0;
    b->fork_generation = lb_fork_generation;
    if (b->closed) {
        /* closed while operations of the parent's threads were inside: they
         * are gone, so release now, unless one of them owned the storage. */
        if (!b->released) {
            if (owned)
                b->released = 1; /* abandoned, never freed */
            else
                lb_base_release(b);
        }
        return 0;
    }
    if (owned && b->after_fork && b->after_fork(b) < 0) {
        /* Nothing usable is left: the filter is closed in this process (its
         * storage, abandoned by the hook, is not freed). */
        b->closed = 1;
        b->released = 1;
        return -1;
    }
    return 0;
}

int lb_base_wait(lb_base *b, int read_only)
{
    if (b->fork_generation != lb_fork_generation)
        return recover_after_fork(b);
    if (read_only && b->reads_during_batch)
        return 0;
    b->waiters++;
    while (b->busy) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(b->lock, WAIT_LOCK);
        PyThread_release_lock(b->lock);
        Py_END_ALLOW_THREADS
    }
    b->waiters--;
    return 0;
}

int lb_enter2(lb_base *a, lb_base *b)
{
    /* Waiting for one releases the GIL, during which the other may start a
     * section or be closed: wait until, with the GIL held throughout, both
     * are free, then check and claim both. */
    for (;;) {
        if (a->fork_generation != lb_fork_generation || a->busy) {
            if (lb_base_wait(a, 0) < 0)
                return -1;
            continue;
        }
        if (b->fork_generation != lb_fork_generation || b->busy) {
            if (lb_base_wait(b, 0) < 0)
                return -1;
            continue;
        }
        break;
    }
    if (a->closed)
        return lb_closed_error(a);
    if (b->closed)
        return lb_closed_error(b);
    a->users++;
    b->users++;
    return 0;
}

void lb_base_release(lb_base *b)
{
    b->released = 1;
    if (b->release)
        b->release(b);
}

void lb_busy_begin(lb_base *b)
{
    /* The caller waited for busy == 0 and has held the GIL since, so nobody
     * holds the lock and this cannot block. */
    PyThread_acquire_lock(b->lock, WAIT_LOCK);
    b->busy = 1;
}

void lb_busy_end(lb_base *b)
{
    b->busy = 0;
    PyThread_release_lock(b->lock);
    /* Each waiter takes the GIL, sees busy == 0 and leaves the count before
     * it does its operation; give them the GIL until all have. */
    while (b->waiters > 0) {
        Py_BEGIN_ALLOW_THREADS
        sched_yield();
        Py_END_ALLOW_THREADS
    }
}

PyObject *lb_close_with(lb_base *b, void (*release)(lb_base *))
{
    /* A closed filter raises ClosedError from now on; its storage goes when
     * the operations that entered before have left (at once when none has). */
    if (b->fork_generation != lb_fork_generation && recover_after_fork(b) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!b->closed) {
        b->closed = 1;
        b->release = release;
        if (b->users == 0)
            lb_base_release(b);
    }
    Py_RETURN_NONE;
}

PyObject *lb_enter_method(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_base *b = (lb_base *)self;
    if (lb_enter(b) < 0)
        return NULL;
    lb_leave(b);
    return Py_NewRef(self);
}

PyObject *lb_exit_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    PyObject *r = PyObject_CallMethod(self, "close", NULL);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

PyObject *lb_closed_get(PyObject *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(((lb_base *)self)->closed);
}

/* ---- argument parsing -------------------------------------------------- */

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

static int parse_rate(lb_state *st, const char *type_name, PyObject *obj, double *out)
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

/* A number argument given as None: a TypeError, never a silent default. */
static int none_given(PyObject *obj, const char *what, const char *type_name)
{
    if (obj != Py_None)
        return 0;
    return lb_arg_type_error(type_name, what, obj);
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
        if (none_given(capacity, "capacity", type_name) < 0 ||
            none_given(error_rate, "error_rate", type_name) < 0 ||
            none_given(m, "m", type_name) < 0 || none_given(k, "k", type_name) < 0)
            return -1;
    }
    else {
        if (capacity == Py_None)
            capacity = NULL;
        if (m == Py_None)
            m = NULL;
        if (k == Py_None)
            k = NULL;
        if (capacity && none_given(error_rate, "error_rate", type_name) < 0)
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
    if (by_geometry) {
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
    if (error_rate && parse_rate(st, type_name, error_rate, &out->error_rate) < 0)
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

/* ---- save and load ------------------------------------------------------ */

static PyObject *call_io(const char *name, PyObject *a, PyObject *b)
{
    PyObject *mod = PyImport_ImportModule("ling_bloom._io");
    if (!mod)
        return NULL;
    PyObject *r = PyObject_CallMethod(mod, name, b ? "OO" : "O", a, b);
    Py_DECREF(mod);
    return r;
}

PyObject *lb_repr_html(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *mod = PyImport_ImportModule("ling_bloom._display");
    if (!mod)
        return NULL;
    PyObject *r = PyObject_CallMethod(mod, "html", "O", self);
    Py_DECREF(mod);
    return r;
}

PyObject *lb_reduce(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *data = PyObject_CallMethod(self, "to_bytes", NULL);
    if (!data)
        return NULL;
    PyObject *ctor = PyObject_GetAttrString((PyObject *)Py_TYPE(self), "from_bytes");
    if (!ctor) {
        Py_DECREF(data);
        return NULL;
    }
    return Py_BuildValue("(N(N))", ctor, data);
}

PyObject *lb_save(PyObject *self, PyObject *path)
{
    PyObject *data = PyObject_CallMethod(self, "to_bytes", NULL);
    if (!data)
        return NULL;
    PyObject *r = call_io("atomic_write", path, data);
    Py_DECREF(data);
    return r;
}

PyObject *lb_load(PyObject *cls, PyObject *path)
{
    PyObject *data = call_io("read_file", path, NULL);
    if (!data)
        return NULL;
    PyObject *r = PyObject_CallMethod(cls, "from_bytes", "O", data);
    Py_DECREF(data);
    return r;
}

int lb_read_only_error(lb_base *b)
{
    PyErr_Format(b->st->NotSupportedError,
                 "%.100s is read-only (a file opened with mode \"r\"; open it with \"r+\" "
                 "to add)", Py_TYPE(b)->tp_name);
    return -1;
}

/* ---- len() and truth -------------------------------------------------- */

static Py_ssize_t len_by(PyObject *self, const char *method)
{
    PyObject *r = PyObject_CallMethod(self, method, NULL);
    if (!r)
        return -1;
    Py_ssize_t n = PyLong_AsSsize_t(r);
    Py_DECREF(r);
    return n;
}

Py_ssize_t lb_len_approximate(PyObject *self)
{
    return len_by(self, "approximate_count");
}

Py_ssize_t lb_len_card(PyObject *self)
{
    return len_by(self, "card");
}

int lb_bool_true(PyObject *self)
{
    (void)self;
    return 1;
}

/* ---- module functions -------------------------------------------------- */

/* The (m, k) of estimate() and geometry(), or their error. */
static PyObject *sizing_result(lb_state *st, lb_status s, uint64_t m, uint64_t k,
                               const char *range_msg)
{
    if (s == LB_ERR_RANGE)
        return lb_raise(st, s, range_msg);
    if (s != LB_OK)
        return lb_raise(st, s, s == LB_ERR_CAPACITY
                                   ? "expected number of elements must be greater than zero"
                                   : NULL);
    return Py_BuildValue("(KK)", (unsigned long long)m, (unsigned long long)k);
}

static PyObject *estimate(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    lb_state *st = PyModule_GetState(module);
    if (nargs != 2)
        return PyErr_Format(PyExc_TypeError, "estimate() takes 2 arguments (n, p), %zd given",
                            nargs);
    uint64_t n, m, k;
    double p;
    if (lb_parse_u64(args[0], "n", st->InvalidCapacityError, &n) < 0 ||
        lb_parse_double_arg(NULL, args[1], "p", &p) < 0)
        return NULL;
    lb_status s = lb_estimate(n, p, &m, &k);
    return sizing_result(st, s, m, k, "n and p need more than 2**63 bits");
}

static PyObject *geometry(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"n", "p", "hash", NULL};
    lb_state *st = PyModule_GetState(module);
    PyObject *no, *po, *hash = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O:geometry", kwlist, &no, &po, &hash))
        return NULL;
    lb_hash_scheme scheme;
    uint64_t n, m, k;
    if (lb_parse_hash(hash, &scheme) < 0 ||
        lb_parse_u64(no, "n", st->InvalidCapacityError, &n) < 0)
        return NULL;
    double p;
    if (lb_parse_double_arg(NULL, po, "p", &p) < 0)
        return NULL;
    lb_status s = lb_size(n, p, scheme, LB_FIXED_SLACK, &m, &k);
    /* What a constructor would build, or the error it would raise: never a
     * geometry past the limits (estimate() is the ling-base Go library's bare arithmetic). */
    if (s == LB_OK && m > LB_MAX_BITS)
        return PyErr_Format(st->InvalidCapacityError,
                            "%llu keys at rate %R need m = %llu bits: more than the 2**48 a "
                            "filter can have", (unsigned long long)n, po, (unsigned long long)m);
    if (s == LB_OK && (k == 0 || k > LB_MAX_K))
        return PyErr_Format(st->InvalidFalsePositiveRateError,
                            "rate %R needs k = %llu hash functions; at most %d are supported", po,
                            (unsigned long long)k, LB_MAX_K);
    return sizing_result(st, s, m, k, "no filter of at most 2**48 bits holds n keys at rate p");
}

/* indices() and hash_pair() are the hash functions themselves: unlike the
 * filters they take the empty key (the Go library hashes it too). */
static int hash_and_key(PyObject *module, PyObject *key, PyObject *hash, lb_key *k,
                        lb_key_hold *hold, lb_hash_scheme *scheme)
{
    lb_state *st = PyModule_GetState(module);
    if (lb_parse_hash(hash, scheme) < 0)
        return -1;
    if (lb_key_get(st, key, k, hold) < 0) {
        if (!PyErr_ExceptionMatches(st->EmptyKeyError))
            return -1;
        PyErr_Clear();
        hold->held = LB_HOLD_NONE;
        k->data = "";
        k->len = 0;
    }
    return 0;
}

static PyObject *indices(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "m", "k", "hash", NULL};
    lb_state *st = PyModule_GetState(module);
    PyObject *key, *mo, *ko, *hash = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO|O:indices", kwlist, &key, &mo, &ko,
                                     &hash))
        return NULL;
    uint64_t m, k;
    if (lb_parse_u64(mo, "m", st->InvalidCapacityError, &m) < 0 || lb_parse_k(st, NULL, ko, &k) < 0)
        return NULL;
    if (m == 0)
        return lb_raise(st, LB_ERR_CAPACITY, "m must be greater than zero");
    lb_key kk;
    lb_key_hold hold;
    lb_hash_scheme scheme;
    if (hash_and_key(module, key, hash, &kk, &hold, &scheme) < 0)
        return NULL;
    lb_geometry g;
    lb_geometry_init(&g, m, (uint32_t)k, scheme);
    uint64_t out[LB_MAX_K];
    lb_indices(&g, lb_hash(scheme, kk.data, kk.len), out);
    lb_key_release(&hold);
    PyObject *list = PyList_New((Py_ssize_t)k);
    if (!list)
        return NULL;
    for (uint64_t i = 0; i < k; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(out[i]);
        if (!v) {
            Py_DECREF(list);
            return NULL;
        }
        PyList_SET_ITEM(list, (Py_ssize_t)i, v);
    }
    return list;
}

static PyObject *hash_pair(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"key", "hash", NULL};
    PyObject *key, *hash = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:hash_pair", kwlist, &key, &hash))
        return NULL;
    lb_key kk;
    lb_key_hold hold;
    lb_hash_scheme scheme;
    /* "xxh3-block": the key hash of the split-block layout, which is no walk
     * a MemoryFilter can take (lb_parse_hash refuses it) */
    int blocked = PyUnicode_Check(hash) && PyUnicode_CompareWithASCIIString(hash, "xxh3-block") == 0;
    if (hash_and_key(module, key, blocked ? Py_None : hash, &kk, &hold, &scheme) < 0)
        return NULL;
    lb_hash_pair h = blocked ? lb_hash_blocked(kk.data, kk.len) : lb_hash(scheme, kk.data, kk.len);
    lb_key_release(&hold);
    return Py_BuildValue("(KK)", (unsigned long long)h.h1, (unsigned long long)h.h2);
}

/* _saved_length(head, have=None) -> (total, whole): the length of the saved
 * filter whose header is head (the first 48 bytes, or all there are), for
 * load() to read no more; have: the bytes there are (a file's length), None
 * when not known.  whole is False when a chain's stages need more than have
 * at the least: total is then that least (see lb_format_length). */
static PyObject *saved_length(PyObject *module, PyObject *args)
{
    lb_state *st = PyModule_GetState(module);
    Py_buffer view;
    PyObject *have_obj = Py_None;
    if (!PyArg_ParseTuple(args, "y*|O:_saved_length", &view, &have_obj))
        return NULL;
    uint64_t have = UINT64_MAX;
    if (have_obj != Py_None) {
        unsigned long long v = PyLong_AsUnsignedLongLong(have_obj);
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            PyBuffer_Release(&view);
            return NULL;
        }
        have = v;
    }
    uint64_t total = 0;
    int whole = 0;
    const char *why = NULL;
    lb_status s = lb_format_length(view.buf, (size_t)view.len, have, &total, &whole, &why);
    PyBuffer_Release(&view);
    if (s != LB_OK)
        return PyErr_Format(st->CorruptFileError,
                            "not a valid saved filter: %s", why);
    return Py_BuildValue("(KO)", (unsigned long long)total, whole ? Py_True : Py_False);
}

static PyMethodDef module_methods[] = {
    {"_saved_length", saved_length, METH_VARARGS,
     "_saved_length(head, have=None) -> (total, whole)\n\nThe length of the saved filter "
     "that starts with head (its first 48 bytes), from the header alone, worked out as far "
     "as have bytes allow: whole is False when a chain's stages need more than have at the "
     "least (total is then that least)."},
    {"estimate", (PyCFunction)(void (*)(void))estimate, METH_FASTCALL,
     "estimate(n, p) -> (m, k)\n\nThe ling-base Go library's Estimate: m = ceil(n*-ln(p)/ln(2)^2) bits and "
     "k = max(1, ceil(ln(2)*m/n)) hash functions."},
    {"geometry", (PyCFunction)(void (*)(void))geometry, METH_VARARGS | METH_KEYWORDS,
     "geometry(n, p, hash=\"xxh3-mix\") -> (m, k)\n\nThe m and k a filter built for n keys at "
     "rate p gets: estimate(n, p), with more bits for the small n where its formula undershoots "
     "(xxh3-mix only; ling-base and xxh3 take estimate's (m, k) as they are)."},
    {"indices", (PyCFunction)(void (*)(void))indices, METH_VARARGS | METH_KEYWORDS,
     "indices(key, m, k, hash=\"xxh3-mix\") -> list[int]\n\nThe k bit indices of key in a filter "
     "of m bits."},
    {"hash_pair", (PyCFunction)(void (*)(void))hash_pair, METH_VARARGS | METH_KEYWORDS,
     "hash_pair(key, hash=\"xxh3-mix\") -> (h1, h2)\n\nThe two 64-bit hashes double hashing "
     "starts from; hash=\"xxh3-block\" gives BlockedFilter's pair (XXH3-64 of the key, and "
     "a word derived from it)."},
    {NULL, NULL, 0, NULL},
};

/* ---- module set-up ------------------------------------------------------ */

static int add_exc(PyObject *module, PyObject **slot, const char *name, const char *doc,
                   PyObject *base1, PyObject *base2)
{
    char full[128];
    PyOS_snprintf(full, sizeof(full), "ling_bloom.%s", name);
    PyObject *bases = base2 ? PyTuple_Pack(2, base1, base2) : PyTuple_Pack(1, base1);
    if (!bases)
        return -1;
    *slot = PyErr_NewExceptionWithDoc(full, doc, bases, NULL);
    Py_DECREF(bases);
    if (!*slot)
        return -1;
    Py_INCREF(*slot);
    if (PyModule_AddObject(module, name, *slot) < 0) {
        Py_DECREF(*slot);
        return -1;
    }
    return 0;
}

static int add_type(PyObject *module, PyTypeObject **slot, PyTypeObject *type)
{
    *slot = type;
    if (!type)
        return -1;
    return PyModule_AddType(module, type);
}

static int module_exec(PyObject *module)
{
    static int atfork_done = 0;
    if (!atfork_done) {
        if (pthread_atfork(NULL, NULL, after_fork_in_child) != 0) {
            PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
            return -1;
        }
        atfork_done = 1;
    }
    lb_state *st = PyModule_GetState(module);
    if (add_exc(module, &st->BloomError, "BloomError", "Base of every ling_bloom error.",
                PyExc_Exception, NULL) < 0 ||
        add_exc(module, &st->ClosedError, "ClosedError", "The filter was closed.",
                st->BloomError, NULL) < 0 ||
        add_exc(module, &st->InvalidCapacityError, "InvalidCapacityError",
                "Capacity (or m) is zero, negative or too large.", st->BloomError,
                PyExc_ValueError) < 0 ||
        add_exc(module, &st->InvalidFalsePositiveRateError, "InvalidFalsePositiveRateError",
                "The false-positive rate is not in (0, 1).", st->BloomError,
                PyExc_ValueError) < 0 ||
        add_exc(module, &st->EmptyKeyError, "EmptyKeyError", "The key is empty.",
                st->BloomError, PyExc_ValueError) < 0 ||
        add_exc(module, &st->NotSupportedError, "NotSupportedError",
                "The operation is not supported by this filter.", st->BloomError, NULL) < 0 ||
        add_exc(module, &st->CorruptFileError, "CorruptFileError",
                "The data is not a saved filter (garbage, truncated, damaged, of a newer "
                "format, or of another type than the one asked for).",
                st->BloomError, PyExc_ValueError) < 0 ||
        add_exc(module, &st->GeometryMismatchError, "GeometryMismatchError",
                "Two filters (or a filter and what Redis holds) differ in m, k or hash.",
                st->BloomError, PyExc_ValueError) < 0 ||
        add_exc(module, &st->RedisError, "RedisError", "Base of the errors of the Redis filters.",
                st->BloomError, NULL) < 0 ||
        add_exc(module, &st->RedisConnectionError, "RedisConnectionError",
                "Could not connect to Redis, or the connection was lost.", st->RedisError,
                PyExc_ConnectionError) < 0 ||
        add_exc(module, &st->RedisTimeoutError, "RedisTimeoutError",
                "Redis did not answer within the timeout.", st->RedisError,
                PyExc_TimeoutError) < 0 ||
        add_exc(module, &st->RedisResponseError, "RedisResponseError",
                "Redis answered with an error; .reply holds its text.", st->RedisError,
                NULL) < 0 ||
        add_exc(module, &st->WrongTypeError, "WrongTypeError",
                "A Redis key holds another type; .key names it.", st->RedisResponseError,
                NULL) < 0 ||
        add_exc(module, &st->FilterFullError, "FilterFullError",
                "A non-scaling RedisBloom filter is full.  .processed: keys of the batch "
                "before the first one the filter rejected (all of them are in it; resume at "
                "keys[processed:]); .added: how many of those were new (None, both, when "
                "the server did not say).",
                st->RedisResponseError, NULL) < 0 ||
        add_exc(module, &st->FilterNotFoundError, "FilterNotFoundError",
                "No RedisBloom filter at the key (.key), and it was not to be created "
                "(no_create=True), or info()/dump() of a missing key; or no RedisFilter at "
                "the key and no geometry given (RedisFilter.open).",
                st->RedisResponseError, PyExc_KeyError) < 0 ||
        add_exc(module, &st->KeyNotOwnedError, "KeyNotOwnedError",
                "The Redis key (.key) holds data this library did not write (no meta key "
                "beside it); RedisFilter(..., adopt=True) takes a bitmap over on purpose.",
                st->RedisError, PyExc_ValueError) < 0 ||
        add_exc(module, &st->ModuleMissingError, "ModuleMissingError",
                "The Redis server has no RedisBloom module (no BF.* commands).",
                st->RedisResponseError, st->NotSupportedError) < 0 ||
        add_exc(module, &st->RedisProtocolError, "RedisProtocolError",
                "Redis answered something that does not fit the command sent (type, length or "
                "value); the connection was dropped.",
                st->RedisError, NULL) < 0)
        return -1;
    if (add_type(module, &st->MemoryFilter, lb_memory_filter_type(module)) < 0 ||
        add_type(module, &st->CountingFilter, lb_counting_filter_type(module)) < 0 ||
        add_type(module, &st->ScalableFilter, lb_scalable_filter_type(module)) < 0 ||
        add_type(module, &st->RedisFilter, lb_redis_filter_type(module)) < 0 ||
        add_type(module, &st->RedisBloomFilter, lb_redisbloom_filter_type(module)) < 0 ||
        add_type(module, &st->BlockedFilter, lb_blocked_filter_type(module)) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "MAX_K", LB_MAX_K) < 0 ||
        PyModule_AddObject(module, "MAX_BITS", PyLong_FromUnsignedLongLong(LB_MAX_BITS)) < 0 ||
        PyModule_AddIntConstant(module, "FORMAT_VERSION", 1) < 0)
        return -1;
    return 0;
}

static int module_traverse(PyObject *module, visitproc visit, void *arg)
{
    lb_state *st = PyModule_GetState(module);
    PyObject **slots = (PyObject **)st;
    for (size_t i = 0; i < sizeof(*st) / sizeof(PyObject *); i++)
        Py_VISIT(slots[i]);
    return 0;
}

static int module_clear(PyObject *module)
{
    lb_state *st = PyModule_GetState(module);
    PyObject **slots = (PyObject **)st;
    for (size_t i = 0; i < sizeof(*st) / sizeof(PyObject *); i++)
        Py_CLEAR(slots[i]);
    return 0;
}

static void module_free(void *module)
{
    module_clear((PyObject *)module);
}

static PyModuleDef_Slot module_slots[] = {
    {Py_mod_exec, module_exec},
    {0, NULL},
};

PyModuleDef lb_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ling_bloom._core",
    .m_doc = "The C core of ling_bloom: Bloom filters and the hashing they share.",
    .m_size = sizeof(lb_state),
    .m_methods = module_methods,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&lb_module_def);
}

/* ---- what MemoryFilter and CountingFilter share ------------------------- */

#define LB_ARGS_AT(self, offset) ((const lb_fixed_args *)((const char *)(self) + (size_t)(offset)))

#include "format.h"

lb_hash_scheme lb_fixed_key_scheme(lb_base *b)
{
    return ((lb_fixed_filter *)b)->geo.scheme;
}

lb_fixed_filter *lb_fixed_new(PyTypeObject *type, const lb_fixed_args *a,
                              const lb_fixed_kind *kind)
{
    /* tp_alloc zeroes the object: the storage pointer is NULL until init. */
    lb_fixed_filter *f = (lb_fixed_filter *)type->tp_alloc(type, 0);
    if (!f)
        return NULL;
    f->kind = kind;
    if (lb_base_init(&f->base, type) < 0) {
        Py_DECREF(f);
        return NULL;
    }
    /* The storage never moves while the filter is open: tests may run
     * during another thread's batch. */
    f->base.reads_during_batch = 1;
    f->base.batch = kind->batch;
    f->args = *a;
    lb_geometry_init(&f->geo, a->m, a->k, a->scheme);
    lb_status s = kind->init(f, a->m);
    if (s != LB_OK) {
        lb_state *st = f->base.st;
        char why[96];
        PyOS_snprintf(why, sizeof(why), "cannot allocate %llu bytes of %s (m = %llu)",
                      (unsigned long long)((a->m + kind->cells_per_byte - 1) /
                                           kind->cells_per_byte),
                      kind->cells, (unsigned long long)a->m);
        Py_DECREF(f);
        lb_raise(st, s, why);
        return NULL;
    }
    return f;
}

PyObject *lb_fixed_type_new(PyTypeObject *type, PyObject *args, PyObject *kwargs,
                            const lb_fixed_kind *kind)
{
    lb_state *st = lb_state_from_type(type);
    lb_fixed_args a;
    if (!st || lb_parse_fixed_args(st, args, kwargs, kind->name, &a) < 0)
        return NULL;
    return (PyObject *)lb_fixed_new(type, &a, kind);
}

void lb_fixed_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    PyObject_GC_UnTrack(self);
    lb_base_fini(&f->base);
    if (f->kind)
        f->kind->release(&f->base);
    tp->tp_free(self);
    Py_DECREF(tp);
}

int lb_fixed_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    return 0;
}

PyObject *lb_fixed_close(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    return lb_close_with(&f->base, f->kind->release);
}

PyObject *lb_fixed_get_m(PyObject *self, void *offset)
{
    return PyLong_FromUnsignedLongLong(LB_ARGS_AT(self, offset)->m);
}

PyObject *lb_fixed_get_k(PyObject *self, void *offset)
{
    return PyLong_FromUnsignedLong(LB_ARGS_AT(self, offset)->k);
}

PyObject *lb_fixed_get_hash(PyObject *self, void *offset)
{
    return PyUnicode_FromString(lb_hash_scheme_name(LB_ARGS_AT(self, offset)->scheme));
}

PyObject *lb_fixed_get_capacity(PyObject *self, void *offset)
{
    const lb_fixed_args *a = LB_ARGS_AT(self, offset);
    if (!a->has_capacity)
        Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(a->capacity);
}

PyObject *lb_fixed_get_error_rate(PyObject *self, void *offset)
{
    const lb_fixed_args *a = LB_ARGS_AT(self, offset);
    if (!a->has_capacity)
        Py_RETURN_NONE;
    return PyFloat_FromDouble(a->error_rate);
}

PyObject *lb_fixed_approximate_count(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (lb_enter(&f->base) < 0)
        return NULL;
    if (f->kind->recount)
        f->kind->recount(f);
    double n = lb_estimate_count(f->args.m, f->args.k, *f->cells_used);
    lb_leave(&f->base);
    if (!isfinite(n)) /* every cell in use: no upper bound; say m */
        return PyLong_FromUnsignedLongLong(f->args.m);
    return PyLong_FromDouble(floor(n + 0.5));
}

PyObject *lb_fixed_fill_ratio(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (lb_enter(&f->base) < 0)
        return NULL;
    if (f->kind->recount)
        f->kind->recount(f);
    double fill = (double)*f->cells_used / (double)f->args.m;
    lb_leave(&f->base);
    return PyFloat_FromDouble(fill);
}

PyObject *lb_fixed_current_error_rate(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (lb_enter(&f->base) < 0)
        return NULL;
    if (f->kind->recount)
        f->kind->recount(f);
    double fill = (double)*f->cells_used / (double)f->args.m;
    lb_leave(&f->base);
    return PyFloat_FromDouble(pow(fill, (double)f->args.k));
}

PyObject *lb_fixed_to_bytes(lb_fixed_filter *f, int kind, const uint8_t *payload, size_t len)
{
    lb_format_header h;
    memset(&h, 0, sizeof(h));
    h.kind = (lb_kind)kind;
    h.scheme = f->args.scheme;
    h.m = f->args.m;
    h.k = f->args.k;
    h.has_capacity = f->args.has_capacity;
    h.capacity = f->args.capacity;
    h.error_rate = f->args.error_rate;
    size_t total = LB_FORMAT_FIXED_HEADER + len + LB_FORMAT_TRAILER;
    if (total > PY_SSIZE_T_MAX)
        return PyErr_NoMemory();
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    if (!out)
        return NULL;
    lb_format_write_fixed((uint8_t *)PyBytes_AS_STRING(out), &h, payload, len);
    return out;
}

static const char *kind_name(int kind)
{
    switch (kind) {
    case LB_KIND_MEMORY:
        return "MemoryFilter";
    case LB_KIND_COUNTING:
        return "CountingFilter";
    case LB_KIND_SCALABLE:
        return "ScalableFilter";
    case LB_KIND_BLOCKED:
        return "BlockedFilter";
    }
    return "?";
}

int lb_read_saved(lb_state *st, PyObject *data, Py_buffer *view, lb_format_header *h, int kind)
{
    if (PyUnicode_Check(data)) {
        PyErr_SetString(PyExc_TypeError, "from_bytes() takes bytes, not str");
        return -1;
    }
    if (PyObject_GetBuffer(data, view, PyBUF_SIMPLE) < 0)
        return -1;
    const char *why = NULL;
    if (lb_format_read(view->buf, (size_t)view->len, h, &why) != LB_OK) {
        PyErr_Format(st->CorruptFileError, "not a valid saved filter: %s", why);
        PyBuffer_Release(view);
        return -1;
    }
    if ((int)h->kind != kind) {
        PyErr_Format(st->CorruptFileError, "the data holds a %s, not a %s", kind_name(h->kind),
                     kind_name(kind));
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

int lb_fixed_read(lb_state *st, PyObject *data, Py_buffer *view, int kind, const char *type_name,
                  lb_fixed_args *args, const uint8_t **payload, size_t *len)
{
    (void)type_name;
    lb_format_header h;
    if (lb_read_saved(st, data, view, &h, kind) < 0)
        return -1;
    memset(args, 0, sizeof(*args));
    args->m = h.m;
    args->k = h.k;
    args->scheme = h.scheme;
    args->has_capacity = h.has_capacity;
    args->capacity = h.capacity;
    args->error_rate = h.error_rate;
    *payload = h.payload;
    *len = h.payload_len;
    return 0;
}

PyObject *lb_fixed_repr(lb_fixed_filter *f, const char *extra)
{
    const char *tname = strrchr(Py_TYPE(f)->tp_name, '.');
    tname = tname ? tname + 1 : Py_TYPE(f)->tp_name;
    if (f->base.closed)
        return PyUnicode_FromFormat("<%s m=%llu k=%u hash=%s closed>", tname,
                                    (unsigned long long)f->args.m, f->args.k,
                                    lb_hash_scheme_name(f->args.scheme));
    return PyUnicode_FromFormat("<%s m=%llu k=%u hash=%s %s>", tname,
                                (unsigned long long)f->args.m, f->args.k,
                                lb_hash_scheme_name(f->args.scheme), extra);
}

int lb_fixed_enter_like(lb_fixed_filter *self, PyObject *other, PyTypeObject *type)
{
    lb_state *st = self->base.st;
    if (!PyObject_TypeCheck(other, type)) {
        PyErr_Format(PyExc_TypeError, "expected a %s, not %.200s", self->kind->name,
                     Py_TYPE(other)->tp_name);
        return -1;
    }
    lb_fixed_filter *o = (lb_fixed_filter *)other;
    if (o->args.m != self->args.m || o->args.k != self->args.k ||
        o->args.scheme != self->args.scheme) {
        PyErr_Format(st->GeometryMismatchError,
                     "filters differ: m=%llu k=%u hash=%s against m=%llu k=%u hash=%s",
                     (unsigned long long)self->args.m, self->args.k,
                     lb_hash_scheme_name(self->args.scheme), (unsigned long long)o->args.m,
                     o->args.k, lb_hash_scheme_name(o->args.scheme));
        return -1;
    }
    return lb_enter2(&self->base, &o->base);
}

void lb_fixed_leave2(PyObject *a, PyObject *b)
{
    lb_leave(&((lb_fixed_filter *)a)->base);
    lb_leave(&((lb_fixed_filter *)b)->base);
}

/* ---- copy, union, intersection of the fixed types ------------------------ */

static PyTypeObject *kind_type(lb_state *st, const lb_fixed_kind *k)
{
    return *(PyTypeObject **)((char *)st + k->type_slot);
}

PyObject *lb_fixed_copy(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (lb_enter(&f->base) < 0)
        return NULL;
    PyObject *r = (PyObject *)f->kind->copy(f);
    lb_leave(&f->base);
    return r;
}

static PyObject *fixed_combine(PyObject *self, PyObject *other, int is_union, int in_place)
{
    lb_fixed_filter *f = (lb_fixed_filter *)self;
    if (in_place && f->base.read_only)
        return lb_read_only_error(&f->base), NULL;
    if (lb_fixed_enter_like(f, other, kind_type(f->base.st, f->kind)) < 0)
        return NULL;
    lb_fixed_filter *r = f;
    if (in_place)
        Py_INCREF(r);
    else
        r = f->kind->copy(f);
    if (r)
        f->kind->merge(r, (lb_fixed_filter *)other, is_union);
    lb_fixed_leave2(self, other);
    return (PyObject *)r;
}

PyObject *lb_fixed_union(PyObject *self, PyObject *other)
{
    return fixed_combine(self, other, 1, 0);
}

PyObject *lb_fixed_intersection(PyObject *self, PyObject *other)
{
    return fixed_combine(self, other, 0, 0);
}

/* a | b and friends: the slot of a's type or of b's (reflected); NotImplemented
 * unless a is a fixed filter and b is of the same type. */
static PyObject *fixed_binary(PyObject *a, PyObject *b, int is_union, int in_place)
{
    lb_state *st = lb_state_from_type(Py_TYPE(a));
    if (!st) {
        PyErr_Clear();
        Py_RETURN_NOTIMPLEMENTED;
    }
    if (!PyObject_TypeCheck(a, st->MemoryFilter) && !PyObject_TypeCheck(a, st->CountingFilter) &&
        !PyObject_TypeCheck(a, st->BlockedFilter))
        Py_RETURN_NOTIMPLEMENTED;
    if (!PyObject_TypeCheck(b, kind_type(st, ((lb_fixed_filter *)a)->kind)))
        Py_RETURN_NOTIMPLEMENTED;
    return fixed_combine(a, b, is_union, in_place);
}

PyObject *lb_fixed_nb_or(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 1, 0);
}

PyObject *lb_fixed_nb_and(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 0, 0);
}

PyObject *lb_fixed_nb_ior(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 1, 1);
}

PyObject *lb_fixed_nb_iand(PyObject *a, PyObject *b)
{
    return fixed_binary(a, b, 0, 1);
}
