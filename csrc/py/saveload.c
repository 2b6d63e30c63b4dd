/* saveload.c: the saved format read back, save and load, pickling and the
 * notebook view (see saveload.h). */
#include "saveload.h"

/* The name of a saved filter's kind, for messages. */
static const char *saved_kind_name(int kind)
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
    lb_status rs;
    if ((size_t)view->len >= LB_NOGIL_BYTES) {
        /* a large file's checksum (pure C, over the buffer the view holds): other threads
           run meanwhile, an event loop among them when a served file is reloaded */
        Py_BEGIN_ALLOW_THREADS
        rs = lb_format_read(view->buf, (size_t)view->len, h, &why);
        Py_END_ALLOW_THREADS
    } else {
        rs = lb_format_read(view->buf, (size_t)view->len, h, &why);
    }
    if (rs != LB_OK) {
        PyErr_Format(st->CorruptFileError, "not a valid saved filter: %s", why);
        PyBuffer_Release(view);
        return -1;
    }
    if ((int)h->kind != kind) {
        PyErr_Format(st->CorruptFileError, "the data holds a %s, not a %s",
                     saved_kind_name(h->kind), saved_kind_name(kind));
        PyBuffer_Release(view);
        return -1;
    }
    return 0;
}

/* The package's hook which (state.h) called with a, or (a, b). */
static PyObject *call_hook(PyTypeObject *type, lb_hook_id which, PyObject *a, PyObject *b)
{
    lb_state *st = lb_state_from_type(type);
    PyObject *hook = st ? lb_hook(st, which) : NULL;
    if (!hook)
        return NULL;
    return PyObject_CallFunctionObjArgs(hook, a, b, NULL);
}

PyObject *lb_save(PyObject *self, PyObject *path)
{
    PyObject *data = PyObject_CallMethod(self, "to_bytes", NULL);
    if (!data)
        return NULL;
    PyObject *r = call_hook(Py_TYPE(self), LB_HOOK_ATOMIC_WRITE, path, data);
    Py_DECREF(data);
    return r;
}

PyObject *lb_load(PyObject *cls, PyObject *path)
{
    if (!PyType_Check(cls))
        return PyErr_Format(PyExc_TypeError, "load() is called on a type");
    PyObject *data = call_hook((PyTypeObject *)cls, LB_HOOK_READ_FILE, path, NULL);
    if (!data)
        return NULL;
    PyObject *r = PyObject_CallMethod(cls, "from_bytes", "O", data);
    Py_DECREF(data);
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
    /* A subclass instance's own attributes go with it, as the state (pickle and
     * copy put them back in its __dict__). */
    PyObject *dict = NULL;
    if (Py_TYPE(self)->tp_dictoffset != 0 || (Py_TYPE(self)->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        dict = PyObject_GetAttrString(self, "__dict__");
        if (!dict) {
            if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
                Py_DECREF(ctor);
                Py_DECREF(data);
                return NULL;
            }
            PyErr_Clear(); /* __slots__: no attributes of its own */
        }
    }
    if (dict && PyDict_Check(dict) && PyDict_GET_SIZE(dict) > 0)
        return Py_BuildValue("(N(N)N)", ctor, data, dict);
    Py_XDECREF(dict);
    return Py_BuildValue("(N(N))", ctor, data);
}

PyObject *lb_dunder_copy(PyObject *self, PyObject *unused)
{
    (void)unused;
    PyObject *r = PyObject_CallMethod(self, "copy", NULL);
    if (!r || !(Py_TYPE(self)->tp_flags & Py_TPFLAGS_HEAPTYPE))
        return r;
    /* a subclass instance's own attributes: the copy gets them (a shallow copy
     * of its __dict__, as copy.copy gives any Python object) */
    PyObject *dict = PyObject_GetAttrString(self, "__dict__");
    if (!dict) {
        if (!PyErr_ExceptionMatches(PyExc_AttributeError)) {
            Py_DECREF(r);
            return NULL;
        }
        PyErr_Clear(); /* __slots__ */
        return r;
    }
    int err = 0;
    if (PyDict_Check(dict) && PyDict_GET_SIZE(dict) > 0) {
        PyObject *to = PyObject_GetAttrString(r, "__dict__");
        err = !to || !PyDict_Check(to) || PyDict_Update(to, dict) < 0;
        if (to && !PyDict_Check(to))
            PyErr_SetString(PyExc_TypeError, "__dict__ of the copy is not a dict");
        Py_XDECREF(to);
    }
    Py_DECREF(dict);
    if (err) {
        Py_DECREF(r);
        return NULL;
    }
    return r;
}

PyObject *lb_repr_html(PyObject *self, PyObject *unused)
{
    (void)unused;
    return call_hook(Py_TYPE(self), LB_HOOK_HTML, self, NULL);
}
