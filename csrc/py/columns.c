/* columns.c: columns of keys read in place (see columns.h): the keys of their
 * elements, the check of every element, and opening (a buffer of integers, an
 * array-like; Arrow arrays and streams are columns_arrow.c's). */
#include "columns.h"
#include "columns_parts.h"

#include <string.h>

#include "errors.h"

/* ---- the decimal text of an integer (the key of an int, keys.c) ---- */

static const char digit_pairs[201] = "00010203040506070809"
                                     "10111213141516171819"
                                     "20212223242526272829"
                                     "30313233343536373839"
                                     "40414243444546474849"
                                     "50515253545556575859"
                                     "60616263646566676869"
                                     "70717273747576777879"
                                     "80818283848586878889"
                                     "90919293949596979899";

/* v's decimal text (after a '-' when neg), ending at end: where it starts. */
static inline char *format_u64(char *end, uint64_t v, int neg)
{
    char *p = end;
    while (v >= 100) {
        unsigned r = (unsigned)(v % 100);
        v /= 100;
        p -= 2;
        memcpy(p, digit_pairs + 2 * r, 2);
    }
    if (v >= 10) {
        p -= 2;
        memcpy(p, digit_pairs + 2 * v, 2);
    }
    else
        *--p = (char)('0' + v);
    if (neg)
        *--p = '-';
    return p;
}

/* The integer at p of seg as a magnitude and a sign. */
static inline uint64_t load_int(const lb_col_seg *seg, const char *p, int *neg)
{
    uint64_t u;
    switch (seg->itemsize) {
    case 1: {
        uint8_t v;
        memcpy(&v, p, 1);
        u = seg->is_signed ? (uint64_t)(int64_t)(int8_t)v : v;
        break;
    }
    case 2: {
        uint16_t v;
        memcpy(&v, p, 2);
        if (seg->swap)
            v = __builtin_bswap16(v);
        u = seg->is_signed ? (uint64_t)(int64_t)(int16_t)v : v;
        break;
    }
    case 4: {
        uint32_t v;
        memcpy(&v, p, 4);
        if (seg->swap)
            v = __builtin_bswap32(v);
        u = seg->is_signed ? (uint64_t)(int64_t)(int32_t)v : v;
        break;
    }
    default: {
        uint64_t v;
        memcpy(&v, p, 8);
        if (seg->swap)
            v = __builtin_bswap64(v);
        u = v;
        break;
    }
    }
    if (seg->is_signed && (int64_t)u < 0) {
        *neg = 1;
        return (uint64_t)0 - u;
    }
    *neg = 0;
    return u;
}

static inline int is_valid(const lb_col_seg *seg, size_t i)
{
    if (!seg->validity)
        return 1;
    uint64_t b = seg->vbit + i;
    return (seg->validity[b >> 3] >> (b & 7)) & 1;
}

static inline int64_t load_i64(const char *p)
{
    int64_t v;
    memcpy(&v, p, 8);
    return v;
}

static inline int32_t load_i32(const char *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* Index i of a DICT segment (its indices read as INT): -1 when negative or
 * past int64. */
static inline int64_t load_index(const lb_col_seg *seg, size_t i)
{
    int neg;
    uint64_t m = load_int(seg, seg->values + (Py_ssize_t)i * seg->stride, &neg);
    return neg || m > (uint64_t)INT64_MAX ? -1 : (int64_t)m;
}

/* The key of element i of a segment of values (not DICT). */
static inline void value_key(const lb_col_seg *seg, size_t i, lb_key *key, char *digits)
{
    switch (seg->kind) {
    case LB_SEG_INT: {
        int neg;
        uint64_t mag = load_int(seg, seg->values + (Py_ssize_t)i * seg->stride, &neg);
        char *end = digits + LB_COLUMN_DIGITS;
        key->data = format_u64(end, mag, neg);
        key->len = (size_t)(end - (const char *)key->data);
        break;
    }
    case LB_SEG_OFF32: {
        int32_t a = load_i32(seg->offsets + 4 * i), b = load_i32(seg->offsets + 4 * (i + 1));
        key->data = seg->data + a;
        key->len = (size_t)(b - a);
        break;
    }
    case LB_SEG_OFF64: {
        int64_t a = load_i64(seg->offsets + 8 * i), b = load_i64(seg->offsets + 8 * (i + 1));
        key->data = seg->data + a;
        key->len = (size_t)(b - a);
        break;
    }
    case LB_SEG_VIEW: {
        const char *v = seg->values + 16 * i;
        int32_t len = load_i32(v);
        key->len = (size_t)len;
        if (len <= 12)
            key->data = v + 4;
        else
            key->data = seg->bufs[load_i32(v + 8)] + load_i32(v + 12);
        break;
    }
    case LB_SEG_NULL:
    case LB_SEG_DICT:
        key->data = "";
        key->len = 0;
        break;
    }
}

/* The key of element i of seg, known valid (the column was checked). */
static inline void seg_key(const lb_col_seg *seg, size_t i, lb_key *key, char *digits)
{
    if (seg->kind == LB_SEG_DICT)
        value_key(seg->dict, (size_t)load_index(seg, i), key, digits);
    else
        value_key(seg, i, key, digits);
}

/* Is element i of seg a value (not null)?  A DICT element is null when its
 * index is, or the value it picks. */
static inline int elem_valid(const lb_col_seg *seg, size_t i)
{
    if (!is_valid(seg, i))
        return 0;
    if (seg->kind != LB_SEG_DICT)
        return 1;
    const lb_col_seg *d = seg->dict;
    return d->kind != LB_SEG_NULL && is_valid(d, (size_t)load_index(seg, i));
}

size_t lb_column_fill(lb_column *c, size_t n, lb_key *keys, size_t *idx, char *digits,
                      size_t *consumed)
{
    size_t got = 0, pos = 0;
    while (pos < n && c->seg < c->nsegs) {
        const lb_col_seg *seg = &c->segs[c->seg];
        size_t take = seg->len - c->at;
        if (take > n - pos)
            take = n - pos;
        size_t at = c->at;
        if (!c->has_nulls) {
            for (size_t j = 0; j < take; j++, got++) {
                seg_key(seg, at + j, &keys[got], digits + got * LB_COLUMN_DIGITS);
                if (idx)
                    idx[got] = pos + j;
            }
        }
        else if (seg->kind != LB_SEG_NULL) {
            for (size_t j = 0; j < take; j++) {
                if (!elem_valid(seg, at + j))
                    continue;
                seg_key(seg, at + j, &keys[got], digits + got * LB_COLUMN_DIGITS);
                if (idx)
                    idx[got] = pos + j;
                got++;
            }
        }
        pos += take;
        c->at += take;
        if (c->at == seg->len) {
            c->seg++;
            c->at = 0;
        }
    }
    *consumed = pos;
    return got;
}

/* ---- the check of every element, when the column is opened ---- */

typedef enum { CHECK_OK, CHECK_NULL, CHECK_EMPTY, CHECK_BAD } check_result;

static check_result check_seg(const lb_col_seg *seg, int skip_nulls, int *nulls, size_t *where,
                              int allow_empty);

/* An element that is null: CHECK_NULL (at i) unless skip_nulls lets it be. */
static inline check_result null_at(size_t i, int skip_nulls, int *nulls, size_t *where)
{
    if (!skip_nulls) {
        *where = i;
        return CHECK_NULL;
    }
    *nulls = 1;
    return CHECK_OK;
}

/* A dictionary-encoded segment: its values (whose empty or null ones matter
 * only where an index picks them), then every index. */
static check_result check_dict(const lb_col_seg *seg, int skip_nulls, int *nulls, size_t *where)
{
    const lb_col_seg *d = seg->dict;
    int dnulls = 0;
    size_t dwhere = 0;
    if (check_seg(d, 1, &dnulls, &dwhere, 1) != CHECK_OK) {
        *where = 0;
        return CHECK_BAD;
    }
    for (size_t i = 0; i < seg->len; i++) {
        if (is_valid(seg, i)) {
            int64_t k = load_index(seg, i);
            if (k < 0 || (uint64_t)k >= d->len) {
                *where = i;
                return CHECK_BAD;
            }
            if (d->kind != LB_SEG_NULL && is_valid(d, (size_t)k)) {
                lb_key key = {"", 0};
                char digits[LB_COLUMN_DIGITS];
                value_key(d, (size_t)k, &key, digits);
                if (key.len == 0) {
                    *where = i;
                    return CHECK_EMPTY;
                }
                continue;
            }
        }
        if (null_at(i, skip_nulls, nulls, where) != CHECK_OK)
            return CHECK_NULL;
    }
    return CHECK_OK;
}

/* string / binary: offsets start at 0 or more and never go down; a valid
 * element is not empty; the bytes are there when a key has any. */
static check_result check_offsets(const lb_col_seg *seg, int skip_nulls, int *nulls,
                                  size_t *where, int allow_empty)
{
    int wide = seg->kind == LB_SEG_OFF64;
    int64_t prev = wide ? load_i64(seg->offsets) : load_i32(seg->offsets);
    if (prev < 0) {
        *where = 0;
        return CHECK_BAD;
    }
    for (size_t i = 0; i < seg->len; i++) {
        int64_t next = wide ? load_i64(seg->offsets + 8 * (i + 1))
                            : load_i32(seg->offsets + 4 * (i + 1));
        if (next < prev) {
            *where = i;
            return CHECK_BAD;
        }
        if (!is_valid(seg, i)) {
            if (null_at(i, skip_nulls, nulls, where) != CHECK_OK)
                return CHECK_NULL;
        }
        else if (next == prev) {
            if (!allow_empty) {
                *where = i;
                return CHECK_EMPTY;
            }
        }
        else if (!seg->data) {
            *where = i;
            return CHECK_BAD;
        }
        prev = next;
    }
    return CHECK_OK;
}

/* string_view / binary_view: a valid view is not empty, and a long one's
 * bytes lie inside the data buffer it names. */
static check_result check_views(const lb_col_seg *seg, int skip_nulls, int *nulls,
                                size_t *where, int allow_empty)
{
    for (size_t i = 0; i < seg->len; i++) {
        if (!is_valid(seg, i)) {
            if (null_at(i, skip_nulls, nulls, where) != CHECK_OK)
                return CHECK_NULL;
            continue;
        }
        const char *v = seg->values + 16 * i;
        int32_t len = load_i32(v);
        if (len == 0) {
            if (allow_empty)
                continue;
            *where = i;
            return CHECK_EMPTY;
        }
        if (len < 0) {
            *where = i;
            return CHECK_BAD;
        }
        if (len > 12) {
            int32_t b = load_i32(v + 8), off = load_i32(v + 12);
            if (b < 0 || (size_t)b >= seg->nbufs || off < 0 || !seg->bufs[b] ||
                seg->sizes[b] < 0 || (int64_t)off + len > seg->sizes[b]) {
                *where = i;
                return CHECK_BAD;
            }
        }
    }
    return CHECK_OK;
}

/* The first problem of seg (its element in *where), CHECK_OK, or CHECK_OK
 * with *nulls set when skip_nulls lets its nulls be.  allow_empty: a
 * dictionary's values, whose empty ones matter only where an index picks
 * them.  Pure C. */
static check_result check_seg(const lb_col_seg *seg, int skip_nulls, int *nulls, size_t *where,
                              int allow_empty)
{
    switch (seg->kind) {
    case LB_SEG_DICT:
        return check_dict(seg, skip_nulls, nulls, where);
    case LB_SEG_NULL:
        return seg->len ? null_at(0, skip_nulls, nulls, where) : CHECK_OK;
    case LB_SEG_OFF32:
    case LB_SEG_OFF64:
        return check_offsets(seg, skip_nulls, nulls, where, allow_empty);
    case LB_SEG_VIEW:
        return check_views(seg, skip_nulls, nulls, where, allow_empty);
    default:
        break;
    }
    /* integers: never empty; only nulls to look for */
    if (seg->validity)
        for (size_t i = 0; i < seg->len; i++)
            if (!is_valid(seg, i))
                return null_at(i, skip_nulls, nulls, where);
    return CHECK_OK;
}

/* Check every segment (the GIL released for a long column): 0, or -1 with
 * the exception of the first problem. */
static int column_check(lb_state *st, lb_column *c)
{
    check_result r = CHECK_OK;
    size_t where = 0, base = 0;
    int nulls = 0;
    Py_BEGIN_ALLOW_THREADS
    for (size_t s = 0; s < c->nsegs; s++) {
        r = check_seg(&c->segs[s], c->skip_nulls, &nulls, &where, 0);
        if (r != CHECK_OK)
            break;
        base += c->segs[s].len;
    }
    Py_END_ALLOW_THREADS
    c->has_nulls = nulls;
    switch (r) {
    case CHECK_OK:
        return 0;
    case CHECK_NULL:
        PyErr_Format(PyExc_ValueError,
                     "the column has a null at position %zu (skip_nulls=True skips nulls)",
                     base + where);
        return -1;
    case CHECK_EMPTY:
        PyErr_Format(st->EmptyKeyError, "empty key at position %zu of the column",
                     base + where);
        return -1;
    default:
        PyErr_Format(PyExc_ValueError,
                     "malformed Arrow array: the offsets or views of position %zu point "
                     "outside its buffers",
                     base + where);
        return -1;
    }
}

/* ---- opening: a buffer of integers (numpy), an array-like; Arrow is
 * columns_arrow.c's ---- */

lb_col_seg *lb_column_add_seg(lb_column *c)
{
    if (c->nsegs == c->segcap) {
        size_t cap = c->segcap ? 2 * c->segcap : 4;
        lb_col_seg *s = PyMem_Realloc(c->segs, cap * sizeof *s);
        if (!s) {
            PyErr_NoMemory();
            return NULL;
        }
        c->segs = s;
        c->segcap = cap;
    }
    lb_col_seg *seg = &c->segs[c->nsegs++];
    memset(seg, 0, sizeof *seg);
    return seg;
}

void lb_column_close(lb_column *c)
{
    for (size_t i = 0; i < c->narrays; i++)
        if (c->arrays[i].release)
            c->arrays[i].release(&c->arrays[i]);
    PyMem_Free(c->arrays);
    c->arrays = NULL;
    c->narrays = 0;
    if (c->schema.release)
        c->schema.release(&c->schema);
    c->schema.release = NULL;
    if (c->has_view)
        PyBuffer_Release(&c->view);
    c->has_view = 0;
    PyMem_Free(c->segs);
    c->segs = NULL;
    c->nsegs = 0;
    for (size_t i = 0; i < c->ndicts; i++)
        PyMem_Free(c->dicts[i]);
    PyMem_Free(c->dicts);
    c->dicts = NULL;
    c->ndicts = 0;
    Py_CLEAR(c->objects);
}

/* A buffer's item: 'i' an integer (*size its standard size, *is_signed,
 * *swap), 'n' another number, 0 anything else. */
static char buffer_item(const Py_buffer *v, int *is_signed, int *swap)
{
    const char *f = v->format ? v->format : "B";
    char order = '@';
    if (*f == '@' || *f == '=' || *f == '<' || *f == '>' || *f == '!')
        order = *f++;
    if (*f == 'Z')
        return 'n';
    if (*f == '\0' || f[1] != '\0')
        return 0;
    if (!strchr("bBhHiIlLqQnN", *f))
        return strchr("?efdgFDG", *f) ? 'n' : 0;
    *is_signed = strchr("bhilqn", *f) != NULL;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    *swap = order == '<';
#else
    *swap = order == '>' || order == '!';
#endif
    return 'i';
}

static int open_buffer(lb_column *c, PyObject *obj)
{
    if (PyObject_GetBuffer(obj, &c->view, PyBUF_STRIDES | PyBUF_FORMAT) < 0) {
        /* Not a buffer of fixed items (a numpy array of datetimes or objects,
         * one that needs suboffsets): the iterable path decides. */
        if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_ValueError) ||
            PyErr_ExceptionMatches(PyExc_TypeError) ||
            PyErr_ExceptionMatches(PyExc_NotImplementedError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    c->has_view = 1;
    int is_signed = 0, swap = 0;
    char kind = buffer_item(&c->view, &is_signed, &swap);
    if (kind == 0) {
        PyBuffer_Release(&c->view);
        c->has_view = 0;
        return 0;
    }
    if (kind == 'n') {
        PyErr_Format(PyExc_TypeError,
                     "a column of keys holds ints, strings or bytes, not items of format '%s' "
                     "(floats, bools, complex numbers)",
                     c->view.format ? c->view.format : "?");
        return -1;
    }
    if (c->view.ndim != 1) {
        PyErr_Format(PyExc_TypeError, "a column of keys has one dimension, not %d",
                     c->view.ndim);
        return -1;
    }
    Py_ssize_t size = c->view.itemsize;
    if (size != 1 && size != 2 && size != 4 && size != 8) {
        PyErr_Format(PyExc_TypeError, "integers of %zd bytes are not keys", size);
        return -1;
    }
    lb_col_seg *seg = lb_column_add_seg(c);
    if (!seg)
        return -1;
    seg->kind = LB_SEG_INT;
    seg->len = (size_t)c->view.shape[0];
    seg->values = c->view.buf;
    seg->stride = c->view.strides ? c->view.strides[0] : size;
    seg->itemsize = (int)size;
    seg->is_signed = is_signed;
    seg->swap = swap && size > 1;
    c->len = seg->len;
    return 1;
}

/* Does obj's type define name? */
static int type_has(PyObject *obj, const char *name)
{
    int r = PyObject_HasAttrString((PyObject *)Py_TYPE(obj), name);
    return r > 0;
}

/* obj's numpy array (__array__: a pandas Series or Index before pandas 3,
 * which export no Arrow, and other array-likes): 1 (a column of its
 * integers), 2 (c->objects: the array of objects to iterate), 0 (nothing
 * of use: iterate obj), -1 (an exception). */
static int open_array_like(lb_column *c, PyObject *obj)
{
    PyObject *arr = PyObject_CallMethod(obj, "__array__", NULL);
    if (!arr)
        return lb_column_export_failed() == -2 ? 0 : -1;
    int r = PyObject_CheckBuffer(arr) ? open_buffer(c, arr) : 0;
    if (r == 0 && PySequence_Check(arr)) {
        c->objects = arr; /* an array of objects (strings, ...): iterated, answered as a column */
        return 2;
    }
    Py_DECREF(arr); /* a column holds its view (and through it the array) */
    return r;
}

int lb_column_open(lb_state *st, PyObject *obj, int skip_nulls, lb_column *c)
{
    memset(c, 0, sizeof *c);
    c->skip_nulls = skip_nulls;
    /* A str, bytes, bytearray or memoryview is one key, not a column of its
     * bytes' numbers (keys_sequence refuses it as a batch). */
    if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj) || PyUnicode_Check(obj) ||
        PyBytes_Check(obj) || PyByteArray_Check(obj) || PyMemoryView_Check(obj))
        return 0;
    int r = 0;
    int has_array = type_has(obj, "__arrow_c_array__");
    if (has_array || type_has(obj, "__arrow_c_stream__")) {
        r = has_array ? lb_column_open_arrow_array(c, obj) : lb_column_open_arrow_stream(c, obj);
        if (r == -2) {
            /* No Arrow of it (a pandas column of mixed objects): its numpy
             * array, if it has one, else the object, is iterated. */
            lb_column_close(c);
            memset(c, 0, sizeof *c);
            c->skip_nulls = skip_nulls;
            r = 0;
        }
        else
            r = r < 0 ? -1 : 1;
    }
    else if (PyObject_CheckBuffer(obj))
        r = open_buffer(c, obj);
    if (r == 0 && !PyObject_CheckBuffer(obj) && type_has(obj, "__array__"))
        r = open_array_like(c, obj);
    if (r == 1 && column_check(st, c) < 0)
        r = -1;
    if (r != 1 && r != 2)
        lb_column_close(c);
    return r;
}
