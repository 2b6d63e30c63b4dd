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
