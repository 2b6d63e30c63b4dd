/* columns.c: columns of keys read in place, and BoolArray (see columns.h). */
#include "columns.h"

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

/* The first problem of seg (its element in *where), CHECK_OK, or CHECK_OK
 * with *nulls set when skip_nulls lets its nulls be.  allow_empty: a
 * dictionary's values, whose empty ones matter only where an index picks
 * them.  Pure C. */
static check_result check_seg(const lb_col_seg *seg, int skip_nulls, int *nulls, size_t *where,
                              int allow_empty)
{
    size_t n = seg->len;
    if (seg->kind == LB_SEG_DICT) {
        const lb_col_seg *d = seg->dict;
        int dnulls = 0;
        size_t dwhere = 0;
        if (check_seg(d, 1, &dnulls, &dwhere, 1) != CHECK_OK) {
            *where = 0;
            return CHECK_BAD;
        }
        for (size_t i = 0; i < n; i++) {
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
            if (!skip_nulls) {
                *where = i;
                return CHECK_NULL;
            }
            *nulls = 1;
        }
        return CHECK_OK;
    }
    if (seg->kind == LB_SEG_NULL) {
        if (n && !skip_nulls) {
            *where = 0;
            return CHECK_NULL;
        }
        *nulls |= n != 0;
        return CHECK_OK;
    }
    if (seg->kind == LB_SEG_OFF32 || seg->kind == LB_SEG_OFF64) {
        /* Offsets start at 0 or more and never go down; a valid element is
         * not empty; the bytes are there when a key has any. */
        int wide = seg->kind == LB_SEG_OFF64;
        int64_t prev = wide ? load_i64(seg->offsets) : load_i32(seg->offsets);
        if (prev < 0) {
            *where = 0;
            return CHECK_BAD;
        }
        for (size_t i = 0; i < n; i++) {
            int64_t next = wide ? load_i64(seg->offsets + 8 * (i + 1))
                                : load_i32(seg->offsets + 4 * (i + 1));
            if (next < prev) {
                *where = i;
                return CHECK_BAD;
            }
            if (!is_valid(seg, i)) {
                if (!skip_nulls) {
                    *where = i;
                    return CHECK_NULL;
                }
                *nulls = 1;
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
    if (seg->kind == LB_SEG_VIEW) {
        for (size_t i = 0; i < n; i++) {
            if (!is_valid(seg, i)) {
                if (!skip_nulls) {
                    *where = i;
                    return CHECK_NULL;
                }
                *nulls = 1;
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
    /* integers: never empty; only nulls to look for */
    if (seg->validity)
        for (size_t i = 0; i < n; i++)
            if (!is_valid(seg, i)) {
                if (!skip_nulls) {
                    *where = i;
                    return CHECK_NULL;
                }
                *nulls = 1;
                break;
            }
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

/* ---- opening ---- */

static lb_col_seg *add_seg(lb_column *c)
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
    lb_col_seg *seg = add_seg(c);
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

/* Take array's struct (moved: the producer's copy is marked released, so its
 * capsule lets it be). */
static struct ArrowArray *keep_array(lb_column *c, struct ArrowArray *array)
{
    if (c->narrays == c->arraycap) {
        size_t cap = c->arraycap ? 2 * c->arraycap : 4;
        struct ArrowArray *a = PyMem_Realloc(c->arrays, cap * sizeof *a);
        if (!a) {
            PyErr_NoMemory();
            return NULL;
        }
        c->arrays = a;
        c->arraycap = cap;
    }
    struct ArrowArray *kept = &c->arrays[c->narrays++];
    *kept = *array;
    array->release = NULL;
    return kept;
}

static int malformed(const char *what)
{
    PyErr_Format(PyExc_ValueError, "malformed Arrow array: %s", what);
    return -1;
}

/* seg for the array a of format f (one of the value formats check_schema
 * lets through): 0, or -1 with ValueError. */
static int fill_seg(const char *f, const struct ArrowArray *a, lb_col_seg *seg)
{
    memset(seg, 0, sizeof *seg);
    if (a->length < 0 || a->offset < 0 || a->offset > INT64_MAX / 16 - a->length ||
        a->n_buffers < 0 || (a->n_buffers && !a->buffers))
        return malformed("a negative or too large length or offset");
    seg->len = (size_t)a->length;
    size_t off = (size_t)a->offset;
    if (strcmp(f, "n") == 0) {
        seg->kind = LB_SEG_NULL;
        return 0;
    }
    seg->kind = LB_SEG_INT;
    if (a->length == 0)
        return 0; /* nothing to read: its buffers may be missing */
    if (a->n_buffers < 2)
        return malformed("too few buffers");
    seg->validity = a->null_count == 0 ? NULL : a->buffers[0];
    seg->vbit = off;
    if (!a->buffers[1])
        return malformed("no values buffer");
    if (f[0] == 'v') {
        seg->kind = LB_SEG_VIEW;
        if (a->n_buffers < 3)
            return malformed("a view array without its buffer sizes");
        seg->values = (const char *)a->buffers[1] + 16 * off;
        seg->nbufs = (size_t)(a->n_buffers - 3);
        seg->bufs = (const char *const *)(a->buffers + 2);
        seg->sizes = a->buffers[a->n_buffers - 1];
        if (seg->nbufs && !seg->sizes)
            return malformed("a view array without its buffer sizes");
    }
    else if (strchr("uUzZ", f[0])) {
        int wide = f[0] == 'U' || f[0] == 'Z';
        if (a->n_buffers < 3)
            return malformed("too few buffers");
        seg->kind = wide ? LB_SEG_OFF64 : LB_SEG_OFF32;
        seg->offsets = (const char *)a->buffers[1] + (wide ? 8 : 4) * off;
        seg->data = a->buffers[2];
    }
    else {
        static const char codes[] = "cCsSiIlL";
        const char *p = strchr(codes, f[0]);
        if (!p || f[1] != '\0')
            return malformed("an unexpected format");
        seg->itemsize = 1 << ((p - codes) / 2);
        seg->is_signed = ((p - codes) % 2) == 0;
        seg->stride = seg->itemsize;
        seg->values = (const char *)a->buffers[1] + (size_t)seg->itemsize * off;
    }
    return 0;
}

/* The dictionary of a (the values its indices pick), kept in c. */
static const lb_col_seg *add_dict(lb_column *c, const struct ArrowArray *a)
{
    if (!a->dictionary) {
        malformed("a dictionary-encoded array without its dictionary");
        return NULL;
    }
    if (c->ndicts == c->dictcap) {
        size_t cap = c->dictcap ? 2 * c->dictcap : 4;
        lb_col_seg **d = PyMem_Realloc(c->dicts, cap * sizeof *d);
        if (!d) {
            PyErr_NoMemory();
            return NULL;
        }
        c->dicts = d;
        c->dictcap = cap;
    }
    lb_col_seg *d = PyMem_Malloc(sizeof *d);
    if (!d) {
        PyErr_NoMemory();
        return NULL;
    }
    c->dicts[c->ndicts++] = d;
    if (fill_seg(c->schema.dictionary->format, a->dictionary, d) < 0)
        return NULL;
    return d;
}

/* The segment of one Arrow array (moved into c) of the column's schema. */
static int add_arrow_array(lb_column *c, struct ArrowArray *in)
{
    struct ArrowArray *a = keep_array(c, in);
    if (!a)
        return -1;
    lb_col_seg seg;
    if (fill_seg(c->schema.format, a, &seg) < 0)
        return -1;
    if (seg.len == 0)
        return 0;
    if (seg.len > (size_t)PY_SSIZE_T_MAX - c->len)
        return malformed("too long");
    if (c->schema.dictionary) {
        seg.dict = add_dict(c, a);
        if (!seg.dict)
            return -1;
        seg.kind = LB_SEG_DICT;
    }
    lb_col_seg *s = add_seg(c);
    if (!s)
        return -1;
    *s = seg;
    c->len += seg.len;
    return 0;
}

static const char *const value_formats[] = {"u", "U", "z", "Z", "vu", "vz", "n",
                                            "c", "C", "s", "S", "i",  "I",  "l", "L"};

static int is_value_format(const char *f)
{
    for (size_t i = 0; i < sizeof value_formats / sizeof *value_formats; i++)
        if (strcmp(f, value_formats[i]) == 0)
            return 1;
    return 0;
}

/* Is the schema's type one a column of keys can have?  0, or -1 with
 * TypeError. */
static int check_schema(const struct ArrowSchema *s)
{
    const char *f = s->format;
    if (!f)
        return malformed("a schema without a format");
    if (s->dictionary) {
        const struct ArrowSchema *d = s->dictionary;
        if (!d->format)
            return malformed("a dictionary schema without a format");
        if (f[0] && f[1] == '\0' && strchr("cCsSiIlL", f[0]) && is_value_format(d->format) &&
            !d->dictionary)
            return 0;
        PyErr_Format(PyExc_TypeError,
                     "a column of keys holds ints, strings or bytes, not dictionary-encoded "
                     "values of Arrow format '%.40s'",
                     d->format);
        return -1;
    }
    if (is_value_format(f))
        return 0;
    const char *what = "that Arrow type";
    if (strcmp(f, "b") == 0)
        what = "booleans";
    else if (strcmp(f, "e") == 0 || strcmp(f, "f") == 0 || strcmp(f, "g") == 0)
        what = "floats";
    else if (f[0] == '+')
        what = "nested values (a table, struct or list: pass one column)";
    PyErr_Format(PyExc_TypeError,
                 "a column of keys holds ints, strings or bytes, not %s (Arrow format '%.40s')",
                 what, f);
    return -1;
}

static int take_schema(lb_column *c, struct ArrowSchema *s)
{
    c->schema = *s;
    s->release = NULL;
    if (!c->schema.release)
        return malformed("a released schema");
    return check_schema(&c->schema);
}

/* The exporter's call failed: -2 (the iterable path decides) when it could
 * not make Arrow of the object (a library missing, as pandas without
 * pyarrow; values Arrow has no type for, as a pandas column of mixed
 * objects), else -1. */
static int export_failed(void)
{
    if (PyErr_ExceptionMatches(PyExc_ImportError) || PyErr_ExceptionMatches(PyExc_TypeError) ||
        PyErr_ExceptionMatches(PyExc_ValueError) ||
        PyErr_ExceptionMatches(PyExc_NotImplementedError)) {
        PyErr_Clear();
        return -2;
    }
    return -1;
}

static int open_arrow_array(lb_column *c, PyObject *obj)
{
    PyObject *pair = PyObject_CallMethod(obj, "__arrow_c_array__", NULL);
    if (!pair)
        return export_failed();
    int r = -1;
    if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
        PyErr_SetString(PyExc_TypeError, "__arrow_c_array__ must return a tuple of 2 capsules");
        goto done;
    }
    struct ArrowSchema *schema = PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 0), "arrow_schema");
    if (!schema)
        goto done;
    struct ArrowArray *array = PyCapsule_GetPointer(PyTuple_GET_ITEM(pair, 1), "arrow_array");
    if (!array)
        goto done;
    if (!array->release) {
        malformed("a released array");
        goto done;
    }
    if (take_schema(c, schema) < 0)
        goto done;
    r = add_arrow_array(c, array);
done:
    Py_DECREF(pair);
    return r;
}

static int stream_error(struct ArrowArrayStream *s, int code)
{
    const char *msg = s->get_last_error ? s->get_last_error(s) : NULL;
    PyErr_Format(PyExc_ValueError, "reading the Arrow stream failed (error %d): %s", code,
                 msg ? msg : "no message");
    return -1;
}

static int open_arrow_stream(lb_column *c, PyObject *obj)
{
    PyObject *cap = PyObject_CallMethod(obj, "__arrow_c_stream__", NULL);
    if (!cap)
        return export_failed();
    struct ArrowArrayStream *in = PyCapsule_GetPointer(cap, "arrow_array_stream");
    if (!in) {
        Py_DECREF(cap);
        return -1;
    }
    struct ArrowArrayStream s = *in;
    in->release = NULL;
    Py_DECREF(cap);
    if (!s.release)
        return malformed("a released stream");
    int r = -1;
    struct ArrowSchema schema;
    schema.release = NULL;
    int code = s.get_schema(&s, &schema);
    if (code != 0) {
        stream_error(&s, code);
        goto done;
    }
    if (take_schema(c, &schema) < 0)
        goto done;
    for (;;) {
        struct ArrowArray a;
        a.release = NULL;
        code = s.get_next(&s, &a);
        if (code != 0) {
            stream_error(&s, code);
            goto done;
        }
        if (!a.release)
            break; /* the end */
        if (add_arrow_array(c, &a) < 0)
            goto done;
    }
    r = 0;
done:
    s.release(&s);
    return r;
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
        return export_failed() == -2 ? 0 : -1;
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
        r = has_array ? open_arrow_array(c, obj) : open_arrow_stream(c, obj);
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

/* ---- BoolArray ---- */

typedef struct {
    PyObject_HEAD
    Py_ssize_t n;
    Py_ssize_t stride; /* 1: the strides of its buffer */
    uint8_t *data;
} lb_bool_array;

static PyObject *bool_array_alloc(PyTypeObject *tp, size_t n, uint8_t **data)
{
    if (n > (size_t)PY_SSIZE_T_MAX) {
        PyErr_NoMemory();
        return NULL;
    }
    lb_bool_array *a = (lb_bool_array *)tp->tp_alloc(tp, 0);
    if (!a)
        return NULL;
    a->n = (Py_ssize_t)n;
    a->stride = 1;
    a->data = PyMem_RawCalloc(n ? n : 1, 1);
    if (!a->data) {
        Py_DECREF(a);
        return PyErr_NoMemory();
    }
    *data = a->data;
    return (PyObject *)a;
}

PyObject *lb_bool_array_new(lb_state *st, size_t n, uint8_t **data)
{
    return bool_array_alloc(st->BoolArray, n, data);
}

static void bool_array_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyMem_RawFree(((lb_bool_array *)self)->data);
    tp->tp_free(self);
    Py_DECREF(tp);
}

static int bool_array_getbuffer(PyObject *self, Py_buffer *view, int flags)
{
    lb_bool_array *a = (lb_bool_array *)self;
    view->obj = Py_NewRef(self);
    view->buf = a->data;
    view->len = a->n;
    view->readonly = 0;
    view->itemsize = 1;
    view->format = (flags & PyBUF_FORMAT) ? "?" : NULL;
    view->ndim = 1;
    view->shape = (flags & PyBUF_ND) ? &a->n : NULL;
    view->strides = (flags & PyBUF_STRIDES) == PyBUF_STRIDES ? &a->stride : NULL;
    view->suboffsets = NULL;
    view->internal = NULL;
    return 0;
}

static void bool_array_releasebuffer(PyObject *self, Py_buffer *view)
{
}

static Py_ssize_t bool_array_len(PyObject *self)
{
    return ((lb_bool_array *)self)->n;
}

static PyObject *bool_array_item(PyObject *self, Py_ssize_t i)
{
    lb_bool_array *a = (lb_bool_array *)self;
    if (i < 0 || i >= a->n) {
        PyErr_SetString(PyExc_IndexError, "BoolArray index out of range");
        return NULL;
    }
    return PyBool_FromLong(a->data[i] != 0);
}

static PyObject *bool_array_invert(PyObject *self)
{
    lb_bool_array *a = (lb_bool_array *)self;
    uint8_t *data = NULL;
    PyObject *r = bool_array_alloc(Py_TYPE(self), (size_t)a->n, &data);
    if (!r)
        return NULL;
    for (Py_ssize_t i = 0; i < a->n; i++)
        data[i] = a->data[i] == 0;
    return r;
}

static PyObject *bool_array_count(PyObject *self, PyObject *unused)
{
    lb_bool_array *a = (lb_bool_array *)self;
    Py_ssize_t k = 0;
    for (Py_ssize_t i = 0; i < a->n; i++)
        k += a->data[i] != 0;
    return PyLong_FromSsize_t(k);
}

static PyObject *bool_array_tolist(PyObject *self, PyObject *unused)
{
    lb_bool_array *a = (lb_bool_array *)self;
    PyObject *list = PyList_New(a->n);
    if (!list)
        return NULL;
    for (Py_ssize_t i = 0; i < a->n; i++)
        PyList_SET_ITEM(list, i, Py_NewRef(a->data[i] ? Py_True : Py_False));
    return list;
}

static PyObject *bool_array_repr(PyObject *self)
{
    lb_bool_array *a = (lb_bool_array *)self;
    PyObject *count = bool_array_count(self, NULL);
    if (!count)
        return NULL;
    PyObject *r = PyUnicode_FromFormat("<BoolArray of %zd answers, %S true>", a->n, count);
    Py_DECREF(count);
    return r;
}

static PyMethodDef bool_array_methods[] = {
    {"count", bool_array_count, METH_NOARGS, "count() -> int\n\nHow many answers are True."},
    {"tolist", bool_array_tolist, METH_NOARGS, "tolist() -> list[bool]"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot bool_array_slots[] = {
    {Py_tp_doc, "The answers of a batch on a column (add_many, test_many): one byte per key, "
                "True or False.\n\nIt exports the buffer protocol as format '?', so "
                "numpy.asarray(answers) is a boolean array over the same memory (no copy); "
                "len(), indexing, iteration and ~ (the negation, a new BoolArray) work "
                "without numpy."},
    {Py_tp_dealloc, bool_array_dealloc},
    {Py_tp_methods, bool_array_methods},
    {Py_tp_repr, bool_array_repr},
    {Py_tp_hash, PyObject_HashNotImplemented},
    {Py_sq_length, bool_array_len},
    {Py_sq_item, bool_array_item},
    {Py_nb_invert, bool_array_invert},
    {Py_bf_getbuffer, bool_array_getbuffer},
    {Py_bf_releasebuffer, bool_array_releasebuffer},
    {0, NULL},
};

static PyType_Spec bool_array_spec = {
    .name = "ling_bloom.BoolArray",
    .basicsize = sizeof(lb_bool_array),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = bool_array_slots,
};

PyTypeObject *lb_bool_array_type(PyObject *module)
{
    return (PyTypeObject *)PyType_FromModuleAndSpec(module, &bool_array_spec, NULL);
}

/* numpy, imported the first time a column's answers are made; 1 once it
 * could not be (then every answer is a BoolArray, and no import is tried
 * again). */
static int numpy_missing;

PyObject *lb_bool_array_result(PyObject *arr)
{
    if (!arr || numpy_missing)
        return arr;
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np) {
        if (!PyErr_ExceptionMatches(PyExc_ImportError)) {
            Py_DECREF(arr);
            return NULL;
        }
        PyErr_Clear();
        numpy_missing = 1;
        return arr;
    }
    PyObject *r = PyObject_CallMethod(np, "frombuffer", "Os", arr, "?");
    Py_DECREF(np);
    Py_DECREF(arr);
    return r;
}
