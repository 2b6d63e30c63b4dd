/* columns_bool_array.c: BoolArray, the answers of a batch on a column (columns.h),
 * and numpy's array over them. */
#include "columns.h"

#include <string.h>

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
 * again).  Relaxed atomics: threads that find it missing at once all store 1. */
static int numpy_missing;

PyObject *lb_bool_array_result(PyObject *arr)
{
    if (!arr || __atomic_load_n(&numpy_missing, __ATOMIC_RELAXED))
        return arr;
    PyObject *np = PyImport_ImportModule("numpy");
    if (!np) {
        if (!PyErr_ExceptionMatches(PyExc_ImportError)) {
            Py_DECREF(arr);
            return NULL;
        }
        PyErr_Clear();
        __atomic_store_n(&numpy_missing, 1, __ATOMIC_RELAXED);
        return arr;
    }
    PyObject *r = PyObject_CallMethod(np, "frombuffer", "Os", arr, "?");
    Py_DECREF(np);
    Py_DECREF(arr);
    return r;
}
