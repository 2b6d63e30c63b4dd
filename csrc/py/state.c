/* state.c: finding the module state from a type (see state.h). */
#include "state.h"

/* Set by PyInit__core; the module's own definition, compared by address. */
static PyModuleDef *module_def;

void lb_state_set_def(PyModuleDef *def)
{
    module_def = def;
}

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
        if (module_def && PyModule_GetDef(mod) == module_def)
            return (lb_state *)PyModule_GetState(mod);
    }
    PyErr_SetString(PyExc_TypeError, "not a ling_bloom type");
    return NULL;
}

/* The keyword names of _set_hooks, in lb_hook_id's order. */
static const char *const lb_hook_names[LB_HOOK_COUNT] = {
    "atomic_write", "read_file", "umask", "html", "connection_kwargs", "bloom_info",
};

PyObject *lb_hook(lb_state *st, lb_hook_id which)
{
    PyObject *h = st->hooks[which];
    if (!h)
        PyErr_Format(PyExc_RuntimeError,
                     "ling_bloom._core has no %s hook: import it through the ling_bloom "
                     "package, which hands it over",
                     lb_hook_names[which]);
    return h;
}

PyObject *lb_set_hooks(PyObject *module, PyObject *args, PyObject *kwargs)
{
    lb_state *st = PyModule_GetState(module);
    if (PyTuple_GET_SIZE(args) != 0)
        return PyErr_Format(PyExc_TypeError, "_set_hooks() takes keyword arguments only");
    PyObject *got[LB_HOOK_COUNT] = {NULL};
    PyObject *name, *value;
    Py_ssize_t pos = 0;
    while (kwargs && PyDict_Next(kwargs, &pos, &name, &value)) {
        int which = -1;
        for (int i = 0; i < LB_HOOK_COUNT; i++)
            if (PyUnicode_Check(name) && PyUnicode_CompareWithASCIIString(name, lb_hook_names[i]) == 0)
                which = i;
        if (which < 0)
            return PyErr_Format(PyExc_TypeError, "_set_hooks() got an unknown hook %R", name);
        if (!PyCallable_Check(value))
            return PyErr_Format(PyExc_TypeError, "_set_hooks(): %s must be callable, not %.100s",
                                lb_hook_names[which], Py_TYPE(value)->tp_name);
        got[which] = value;
    }
    for (int i = 0; i < LB_HOOK_COUNT; i++)
        if (got[i])
            Py_XSETREF(st->hooks[i], Py_NewRef(got[i]));
    Py_RETURN_NONE;
}
