/* functions.c: the functions of ling_bloom._core: estimate, geometry, indices,
 * hash_pair, key_bytes, key_bytes_many, _key, peek_header, _saved_length and build_info
 * (lb_module_functions, the module's method table). */
#include "functions.h"

#include "args.h"
#include "batch.h"
#include "blocked.h"
#include "errors.h"
#include "format.h"
#include "keys.h"
#include "params.h"

/* build_info's sources: the libraries' own version macros and calls. */
#include <hiredis/hiredis.h>
#include <xxhash.h>
#ifndef LB_NO_TLS
#include <openssl/crypto.h>
#include <openssl/opensslv.h>
#endif

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

/* key_bytes(key) and _key(key): the one key conversion of keys.c, for the Python
 * code that keeps keys of its own (the add log of a served file, a guard's cache
 * keys), so that they and the filters never disagree.  Each raises what a
 * filter's add(key) raises for a bad key. */
static PyObject *key_bytes(PyObject *module, PyObject *obj)
{
    lb_key k;
    lb_key_hold hold;
    if (lb_key_get(PyModule_GetState(module), obj, &k, &hold) < 0)
        return NULL;
    PyObject *out = PyBytes_FromStringAndSize(k.data, (Py_ssize_t)k.len);
    lb_key_release(&hold);
    return out;
}

static PyObject *key_bytes_many(PyObject *module, PyObject *const *args, Py_ssize_t nargs,
                                PyObject *kwnames)
{
    PyObject *keys;
    int skip_nulls;
    if (lb_batch_args("key_bytes_many", args, nargs, kwnames, &keys, &skip_nulls) < 0)
        return NULL;
    return lb_keys_bytes_list(PyModule_GetState(module), keys, skip_nulls);
}

static PyObject *key_form(PyObject *module, PyObject *obj)
{
    if (PyUnicode_CheckExact(obj) || PyBytes_CheckExact(obj)) {
        if (PyObject_Length(obj) == 0) {
            lb_key_empty(PyModule_GetState(module));
            return NULL;
        }
        return Py_NewRef(obj);
    }
    lb_key k;
    lb_key_hold hold;
    if (lb_key_get(PyModule_GetState(module), obj, &k, &hold) < 0)
        return NULL;
    PyObject *out;
    if (hold.held == LB_HOLD_DIGITS || hold.held == LB_HOLD_TEXT)
        out = PyUnicode_FromStringAndSize(k.data, (Py_ssize_t)k.len); /* ASCII digits */
    else if (PyUnicode_Check(obj))
        out = PyUnicode_FromObject(obj); /* a str subclass: an exact str of it */
    else
        out = PyBytes_FromStringAndSize(k.data, (Py_ssize_t)k.len);
    lb_key_release(&hold);
    return out;
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

/* peek_header(data) -> dict: the header of the saved filter that starts with
 * data (its first 48 bytes are enough), as format.c reads it (lb_format_peek):
 * no checksum, no geometry check.  CorruptFileError when it is not one. */
static PyObject *peek_header(PyObject *module, PyObject *arg)
{
    static const char *const kinds[] = {NULL, "MemoryFilter", "CountingFilter",
                                        "ScalableFilter", "BlockedFilter"};
    lb_state *st = PyModule_GetState(module);
    Py_buffer view;
    if (PyUnicode_Check(arg))
        return PyErr_Format(PyExc_TypeError, "peek_header() needs bytes, not str");
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    lb_format_header h;
    const char *why = NULL;
    lb_status s = lb_format_peek(view.buf, (size_t)view.len, &h, &why);
    PyBuffer_Release(&view);
    if (s != LB_OK)
        return PyErr_Format(st->CorruptFileError, "not a valid saved filter: %s", why);
    const char *hash = h.kind == LB_KIND_BLOCKED ? "xxh3-block" : lb_hash_scheme_name(h.scheme);
    if (h.kind == LB_KIND_SCALABLE)
        return Py_BuildValue("{sisssisssisKsdsdsdsI}", "version", LB_FORMAT_VERSION, "kind",
                             kinds[h.kind], "kind_code", (int)h.kind, "hash", hash,
                             "header_bytes", LB_FORMAT_SCALABLE_HEADER,
                             "initial_capacity", (unsigned long long)h.initial_capacity,
                             "error_rate", h.error_rate, "growth_ratio", h.growth, "fpr_ratio",
                             h.fpr_ratio, "stages", (unsigned int)h.nstages);
    PyObject *capacity = h.has_capacity ? PyLong_FromUnsignedLongLong(h.capacity)
                                        : Py_NewRef(Py_None);
    PyObject *rate = h.has_capacity ? PyFloat_FromDouble(h.error_rate) : Py_NewRef(Py_None);
    PyObject *r = NULL;
    if (capacity && rate)
        r = Py_BuildValue("{sisssisssisKsIsOsOsO}", "version", LB_FORMAT_VERSION, "kind",
                          kinds[h.kind], "kind_code", (int)h.kind, "hash", hash,
                          "header_bytes", LB_FORMAT_FIXED_HEADER, "m",
                          (unsigned long long)h.m, "k", (unsigned int)h.k, "capacity", capacity,
                          "error_rate", rate, "live", h.live ? Py_True : Py_False);
    Py_XDECREF(capacity);
    Py_XDECREF(rate);
    return r;
}

/* ---- build_info ---------------------------------------------------------- */

/* Where setup.py took each library from (its -D macros); "unknown" in a build
 * that did not go through setup.py. */
#ifndef LB_BUILD_HIREDIS
#define LB_BUILD_HIREDIS "unknown"
#endif
#ifndef LB_BUILD_XXHASH
#define LB_BUILD_XXHASH "unknown"
#endif
#ifndef LB_BUILD_OPENSSL
#define LB_BUILD_OPENSSL "unknown"
#endif

#define LB_STR_(x) #x
#define LB_STR(x) LB_STR_(x)

/* The condition under which blocked.c compiles its AVX2 probes (LB_HAVE_AVX2_CODE
 * there): x86-64 with GCC or clang. */
#if (defined(__x86_64__) || defined(_M_X64)) && (defined(__GNUC__) || defined(__clang__))
#define LB_BUILT_AVX2 1
#else
#define LB_BUILT_AVX2 0
#endif

#if defined(__clang__)
#define LB_COMPILER "clang " __clang_version__
#elif defined(__GNUC__)
#define LB_COMPILER "GCC " __VERSION__
#else
#define LB_COMPILER "unknown"
#endif

#ifdef Py_GIL_DISABLED
#define LB_FREE_THREADED 1
#else
#define LB_FREE_THREADED 0
#endif

/* "major.minor.release" of an XXH_VERSION_NUMBER-style number (major*10000 +
 * minor*100 + release). */
static PyObject *xxh_version_text(unsigned v)
{
    return PyUnicode_FromFormat("%u.%u.%u", v / 10000, (v / 100) % 100, v % 100);
}

static int set_item(PyObject *d, const char *name, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, name, v);
    Py_DECREF(v);
    return rc;
}

/* The OpenSSL library loaded at run time, and the headers compiled against:
 * None without TLS. */
static PyObject *openssl_runtime(void)
{
#ifndef LB_NO_TLS
    return PyUnicode_FromString(OpenSSL_version(OPENSSL_VERSION));
#else
    return Py_NewRef(Py_None);
#endif
}

static PyObject *openssl_headers(void)
{
#ifndef LB_NO_TLS
    return PyUnicode_FromString(OPENSSL_VERSION_TEXT);
#else
    return Py_NewRef(Py_None);
#endif
}

#ifndef LB_NO_TLS
#define LB_BUILT_TLS 1
#else
#define LB_BUILT_TLS 0
#endif

static PyObject *build_info(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    if (set_item(d, "hiredis",
                 PyUnicode_FromString(LB_STR(HIREDIS_MAJOR) "." LB_STR(HIREDIS_MINOR) "." LB_STR(
                     HIREDIS_PATCH))) < 0 ||
        set_item(d, "hiredis_source", PyUnicode_FromString(LB_BUILD_HIREDIS)) < 0 ||
        set_item(d, "xxhash", xxh_version_text(XXH_versionNumber())) < 0 ||
        set_item(d, "xxhash_headers", xxh_version_text(XXH_VERSION_NUMBER)) < 0 ||
        set_item(d, "xxhash_source", PyUnicode_FromString(LB_BUILD_XXHASH)) < 0 ||
        set_item(d, "openssl", openssl_runtime()) < 0 ||
        set_item(d, "openssl_headers", openssl_headers()) < 0 ||
        set_item(d, "openssl_source", PyUnicode_FromString(LB_BUILD_OPENSSL)) < 0 ||
        set_item(d, "tls", PyBool_FromLong(LB_BUILT_TLS)) < 0 ||
        set_item(d, "avx2", PyBool_FromLong(LB_BUILT_AVX2)) < 0 ||
        set_item(d, "simd", PyUnicode_FromString(lb_blocked_impl_name())) < 0 ||
        set_item(d, "compiler", PyUnicode_FromString(LB_COMPILER)) < 0 ||
        set_item(d, "python", PyUnicode_FromString(PY_VERSION)) < 0 ||
        set_item(d, "free_threaded", PyBool_FromLong(LB_FREE_THREADED)) < 0) {
        Py_DECREF(d);
        return NULL;
    }
    return d;
}

PyMethodDef lb_module_functions[] = {
    {"_set_hooks", (PyCFunction)(void (*)(void))lb_set_hooks, METH_VARARGS | METH_KEYWORDS,
     "_set_hooks(**hooks) -> None\n\nThe package's callables the binding uses (atomic_write, "
     "read_file, umask, html, connection_kwargs, bloom_info), handed over once by "
     "ling_bloom's __init__: the binding never imports the package."},
    {"peek_header", peek_header, METH_O,
     "peek_header(data) -> dict\n\nThe header of the saved filter that starts with data (its "
     "first 48 bytes are enough), read as it is: version, kind (the type's name), kind_code, "
     "hash, header_bytes (where the payload starts); m, k, capacity, error_rate (None when not set) and live for MemoryFilter, "
     "CountingFilter and BlockedFilter; initial_capacity, error_rate, growth_ratio, fpr_ratio "
     "and stages for ScalableFilter.  Only its prefix is checked (magic, version, kind, hash): "
     "from_bytes checks the rest.  CorruptFileError when data is not a saved filter."},
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
    {"key_bytes", key_bytes, METH_O,
     "key_bytes(key) -> bytes\n\nThe bytes every filter hashes for key: a str's UTF-8, an int's "
     "(or int-like's: __index__) decimal text, a buffer's bytes.  A key no filter takes raises "
     "what add(key) raises (TypeError, EmptyKeyError, ValueError)."},
    {"key_bytes_many", (PyCFunction)(void (*)(void))key_bytes_many,
     METH_FASTCALL | METH_KEYWORDS,
     "key_bytes_many(keys, *, skip_nulls=False) -> list[bytes]\n\nkey_bytes of each key of "
     "keys, in order: an iterable, or a column read in place as update() reads it (a numpy "
     "array of integers, an Arrow array or anything with __arrow_c_array__ or "
     "__arrow_c_stream__).  A bad key raises as update(keys) does; skip_nulls=True leaves a "
     "column's nulls out."},
    {"_key", key_form, METH_O,
     "_key(key) -> str | bytes\n\nkey as the filters read it: a str as an exact str, an int "
     "or int-like as its decimal text (a str), a buffer as bytes; bad keys raise as in "
     "key_bytes."},
    {"build_info", build_info, METH_NOARGS,
     "build_info() -> dict\n\nWhat this build of the extension was made with: hiredis (the "
     "version of its headers; hiredis_source: \"system\" or \"vendored\"), xxhash (the "
     "library's version at run time; xxhash_headers: its headers'), openssl (the OpenSSL "
     "library loaded at run time; openssl_headers: the headers compiled against; both None "
     "without TLS; openssl_source: \"static\", \"system\" or \"none\"), tls, avx2 (the AVX2 "
     "code of BlockedFilter compiled in), simd (the implementation this CPU runs), compiler, "
     "python (the CPython whose headers it was built with) and free_threaded."},
    {NULL, NULL, 0, NULL},
};
