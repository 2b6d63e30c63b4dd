/* module.c: the ling_bloom._core module: its definition and its set-up (the
 * exceptions, the types, the constants).  Everything else is in the files
 * module.h lists. */
#include "base.h"
#include "columns.h"
#include "errors.h"
#include "filters.h"
#include "functions.h"
#include "state.h"

static int add_type(PyObject *module, PyTypeObject **slot, PyTypeObject *type)
{
    *slot = type;
    if (!type)
        return -1;
    return PyModule_AddType(module, type);
}

static int module_exec(PyObject *module)
{
    lb_state *st = PyModule_GetState(module);
    if (lb_fork_watch_install() < 0 || lb_errors_add(module, st) < 0)
        return -1;
    if (add_type(module, &st->MemoryFilter, lb_memory_filter_type(module)) < 0 ||
        add_type(module, &st->CountingFilter, lb_counting_filter_type(module)) < 0 ||
        add_type(module, &st->ScalableFilter, lb_scalable_filter_type(module)) < 0 ||
        add_type(module, &st->RedisFilter, lb_redis_filter_type(module)) < 0 ||
        add_type(module, &st->RedisBloomFilter, lb_redisbloom_filter_type(module)) < 0 ||
        add_type(module, &st->BlockedFilter, lb_blocked_filter_type(module)) < 0 ||
        add_type(module, &st->BoolArray, lb_bool_array_type(module)) < 0)
        return -1;
    if (PyModule_AddIntConstant(module, "MAX_K", LB_MAX_K) < 0 ||
        PyModule_AddObject(module, "MAX_BITS", PyLong_FromUnsignedLongLong(LB_MAX_BITS)) < 0 ||
        PyModule_AddIntConstant(module, "FORMAT_VERSION", 1) < 0)
        return -1;
    return 0;
}

/* The state is nothing but PyObject pointers (state.h). */
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

static PyModuleDef lb_module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "ling_bloom._core",
    .m_doc = "The C core of ling_bloom: Bloom filters and the hashing they share.",
    .m_size = sizeof(lb_state),
    .m_methods = lb_module_functions,
    .m_slots = module_slots,
    .m_traverse = module_traverse,
    .m_clear = module_clear,
    .m_free = module_free,
};

PyMODINIT_FUNC PyInit__core(void)
{
    lb_state_set_def(&lb_module_def);
    return PyModuleDef_Init(&lb_module_def);
}
