/* columns_arrow.c: a column from Arrow, through the PyCapsule interface
 * (__arrow_c_array__, __arrow_c_stream__; arrow_abi.h): the schema checked, each
 * array (a stream's chunks, a dictionary's values) taken and read as segments. */
#include "columns.h"
#include "columns_parts.h"

#include <string.h>

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
    lb_col_seg *s = lb_column_add_seg(c);
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
int lb_column_export_failed(void)
{
    if (PyErr_ExceptionMatches(PyExc_ImportError) || PyErr_ExceptionMatches(PyExc_TypeError) ||
        PyErr_ExceptionMatches(PyExc_ValueError) ||
        PyErr_ExceptionMatches(PyExc_NotImplementedError)) {
        PyErr_Clear();
        return -2;
    }
    return -1;
}

int lb_column_open_arrow_array(lb_column *c, PyObject *obj)
{
    PyObject *pair = PyObject_CallMethod(obj, "__arrow_c_array__", NULL);
    if (!pair)
        return lb_column_export_failed();
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

int lb_column_open_arrow_stream(lb_column *c, PyObject *obj)
{
    PyObject *cap = PyObject_CallMethod(obj, "__arrow_c_stream__", NULL);
    if (!cap)
        return lb_column_export_failed();
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
