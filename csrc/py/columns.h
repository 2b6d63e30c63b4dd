/* columns.h: a column of keys read in place, with no Python object per key,
 * and BoolArray, the answers of a batch on a column.
 *
 * A column is
 *   - a buffer (the buffer protocol: numpy arrays, array.array, memoryview)
 *     of one dimension whose items are integers of any size, signedness and
 *     byte order, any stride: each item is the key of the same Python int
 *     (its decimal text, keys.h), so np.array([42]) and [42] add one key;
 *   - anything that exports Arrow through the PyCapsule interface
 *     (__arrow_c_array__, __arrow_c_stream__; arrow_abi.h): string,
 *     large_string, string_view, binary, large_binary, binary_view and
 *     integer arrays, dictionary-encoded arrays of these (a pandas category,
 *     a polars Categorical), a stream of them (a chunked array), offsets
 *     included.
 * bytes, bytearray and str are not columns (batch.c refuses them as before);
 * a buffer of any other item (bytes "3s", text, records) is left to the
 * iterable path.  A float or bool column is a TypeError.
 *
 * Every key is checked when the column is opened, before anything changes: a
 * null raises ValueError naming its position (unless skip_nulls), an empty
 * string or binary EmptyKeyError naming its position, an Arrow array whose
 * offsets or views point outside its buffers ValueError.  The column then
 * holds its buffer view or its Arrow arrays (their release is called by
 * lb_column_close), so whatever the caller's objects do meanwhile, the
 * memory read stays there. */
#ifndef LB_PY_COLUMNS_H
#define LB_PY_COLUMNS_H

#include "arrow_abi.h"
#include "base.h"

typedef enum {
    LB_SEG_INT,    /* integers: values, stride, itemsize, is_signed, swap */
    LB_SEG_OFF32,  /* string / binary: int32 offsets into data */
    LB_SEG_OFF64,  /* large_string / large_binary: int64 offsets */
    LB_SEG_VIEW,   /* string_view / binary_view: 16-byte views, data buffers */
    LB_SEG_NULL,   /* Arrow's null type: every element null */
    LB_SEG_DICT    /* dictionary-encoded: integer indices (as INT) into dict */
} lb_seg_kind;

/* A run of a column's elements in one memory layout (one Arrow array, or
 * the buffer). */
typedef struct lb_col_seg_s {
    lb_seg_kind kind;
    size_t len;
    const uint8_t *validity; /* Arrow's validity bitmap, or NULL: no nulls */
    uint64_t vbit;           /* the bit of the first element in it */
    const char *values;      /* INT: the first item; VIEW: the first view */
    Py_ssize_t stride;       /* INT: bytes from one item to the next (any sign) */
    int itemsize;            /* INT: 1, 2, 4 or 8 */
    int is_signed;           /* INT */
    int swap;                /* INT: the items' byte order is not the machine's */
    const char *offsets;     /* OFF32 / OFF64: the first element's offset */
    const char *data;        /* OFF32 / OFF64: the bytes the offsets index */
    const char *const *bufs; /* VIEW: the variadic data buffers ... */
    const int64_t *sizes;    /* ... their sizes ... */
    size_t nbufs;            /* ... and how many */
    const struct lb_col_seg_s *dict; /* DICT: the values the indices pick */
} lb_col_seg;

typedef struct {
    size_t len;        /* elements, nulls included */
    int skip_nulls;
    int has_nulls;     /* some element is null (only with skip_nulls) */
    lb_col_seg *segs;
    size_t nsegs, segcap;
    size_t seg, at;    /* the cursor of lb_column_fill: segment, element in it */
    Py_buffer view;
    int has_view;
    struct ArrowArray *arrays;
    size_t narrays, arraycap;
    lb_col_seg **dicts;  /* the dictionaries' segments, one allocation each */
    size_t ndicts, dictcap;
    PyObject *objects;   /* lb_column_open's 2: the array of objects to iterate */
    struct ArrowSchema schema;
} lb_column;

/* Room for one integer key's text in lb_column_fill's digits. */
#define LB_COLUMN_DIGITS 24

/* Open obj as a column: 1 (c opened and checked: lb_column_close it), 0 (not
 * a column: nothing held, no exception; take the iterable path), 2 (an
 * array-like whose numpy array holds objects, as a pandas column of strings
 * before pandas 3: iterate c->objects, answer as for a column, then
 * lb_column_close), -1 (an exception, nothing held).  An object with none
 * of the protocols above but __array__ (numpy's) is read through the array
 * it gives. */
int lb_column_open(lb_state *st, PyObject *obj, int skip_nulls, lb_column *c);
void lb_column_close(lb_column *c);

/* The next n elements (fewer at the end): the keys of those not null into
 * keys, an integer's text into digits (LB_COLUMN_DIGITS bytes a key), and
 * when idx is not NULL each key's element as an index from the first of the
 * n.  Returns how many keys; *consumed how many elements.  Pure C: may run
 * without the GIL. */
size_t lb_column_fill(lb_column *c, size_t n, lb_key *keys, size_t *idx, char *digits,
                      size_t *consumed);

/* BoolArray: n answers, one byte each (0 or 1), exported by the buffer
 * protocol as format '?' (numpy reads it without a copy). */
PyTypeObject *lb_bool_array_type(PyObject *module);
/* A new BoolArray of n answers, all False; *data its bytes (written without
 * the GIL while the caller holds the object). */
PyObject *lb_bool_array_new(lb_state *st, size_t n, uint8_t **data);
/* What a batch on a column returns for arr (stolen): a numpy array over
 * arr's bytes (no copy) where numpy is installed (imported on first use: an
 * optional dependency), arr itself otherwise. */
PyObject *lb_bool_array_result(PyObject *arr);

#endif
