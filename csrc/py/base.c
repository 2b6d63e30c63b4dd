/* base.c: the base of every filter: entering and leaving, GIL-free sections,
 * recovery after fork(), close() and the slots every type shares (see base.h). */
#include "base.h"

#include <pthread.h>
#include <sched.h>

/* ---- set-up --------------------------------------------------------------- */

int lb_base_init(lb_base *b, PyTypeObject *type)
{
    b->st = lb_state_from_type(type);
    if (!b->st)
        return -1;
    b->lock = PyThread_allocate_lock();
    if (!b->lock) {
        PyErr_NoMemory();
        return -1;
    }
    b->busy = 0;
    b->fork_generation = lb_fork_generation;
    b->lock_generation = lb_fork_generation;
    b->waiters = 0;
    b->users = 0;
    b->reads_during_batch = 0;
    b->closed = 0;
    b->released = 0;
    b->release = NULL;
    b->after_fork = NULL;
    b->weakrefs = NULL;
    b->raise_backend = NULL;
    b->batch = NULL;
    b->chunk = 0;
    return 0;
}

void lb_base_fini(lb_base *b)
{
    if (b->weakrefs)
        PyObject_ClearWeakRefs((PyObject *)b);
    if (b->lock) {
        /* A lock inherited over fork() may be held by a thread that does
         * not exist here: leave it (as CPython does with its own locks). */
        if (b->fork_generation == lb_fork_generation)
            PyThread_free_lock(b->lock);
        b->lock = NULL;
    }
}

int lb_read_only_error(lb_base *b)
{
    PyErr_Format(b->st->NotSupportedError,
                 "%.100s is read-only (a file opened with mode \"r\"; open it with \"r+\" "
                 "to add)", Py_TYPE(b)->tp_name);
    return -1;
}

/* ---- fork ----------------------------------------------------------------- */

unsigned long lb_fork_generation = 0;

static void after_fork_in_child(void)
{
    lb_fork_generation++;
}

int lb_fork_watch_install(void)
{
    static int installed = 0;
    if (installed)
        return 0;
    if (pthread_atfork(NULL, NULL, after_fork_in_child) != 0) {
        PyErr_SetString(PyExc_OSError, "pthread_atfork failed");
        return -1;
    }
    installed = 1;
    return 0;
}

#ifdef LB_FT_LOCKS
_Thread_local int lb_method_depth = 0;

void lb_fork_unlock_slow(PyObject *o)
{
    if (lb_method_depth != 0)
        return; /* the forking thread is inside a filter's method: see base.h */
    if (!lb_state_from_type(Py_TYPE(o))) {
        PyErr_Clear(); /* not a filter (the other operand of ==, a | b) */
        return;
    }
    lb_base *b = (lb_base *)o;
    if (b->lock_generation == lb_fork_generation)
        return;
    b->lock_generation = lb_fork_generation;
    o->ob_mutex = (PyMutex){0};
}
#endif

/* The first entry in a forked child: a fresh lock state; what another
 * thread was changing at the fork is replaced by the type's hook. */
static int recover_after_fork(lb_base *b)
{
    PyThread_type_lock fresh = PyThread_allocate_lock();
    if (!fresh) {
        PyErr_NoMemory();
        return -1;
    }
    int owned = b->busy;
    b->lock = fresh; /* the inherited one is left alone: see lb_base_fini */
    b->busy = 0;
    b->waiters = 0;
    b->users = 0;
    b->fork_generation = lb_fork_generation;
    if (b->closed) {
        /* closed while operations of the parent's threads were inside: they
         * are gone, so release now, unless one of them owned the storage. */
        if (!b->released) {
            if (owned)
                b->released = 1; /* abandoned, never freed */
            else
                lb_base_release(b);
        }
        return 0;
    }
    if (owned && b->after_fork && b->after_fork(b) < 0) {
        /* Nothing usable is left: the filter is closed in this process (its
         * storage, abandoned by the hook, is not freed). */
        b->closed = 1;
        b->released = 1;
        return -1;
    }
    return 0;
}

/* ---- entering, GIL-free sections ------------------------------------------ */

int lb_base_wait(lb_base *b, int read_only)
{
    if (b->fork_generation != lb_fork_generation)
        return recover_after_fork(b);
    if (read_only && b->reads_during_batch)
        return 0;
    b->waiters++;
    while (b->busy) {
        Py_BEGIN_ALLOW_THREADS
        PyThread_acquire_lock(b->lock, WAIT_LOCK);
        PyThread_release_lock(b->lock);
        Py_END_ALLOW_THREADS
    }
    b->waiters--;
    return 0;
}

int lb_enter2(lb_base *a, lb_base *b)
{
    /* Waiting for one releases the GIL, during which the other may start a
     * section or be closed: wait until, with the GIL held throughout, both
     * are free, then check and claim both. */
    for (;;) {
        if (a->fork_generation != lb_fork_generation || a->busy) {
            if (lb_base_wait(a, 0) < 0)
                return -1;
            continue;
        }
        if (b->fork_generation != lb_fork_generation || b->busy) {
            if (lb_base_wait(b, 0) < 0)
                return -1;
            continue;
        }
        break;
    }
    if (a->closed)
        return lb_closed_error(a);
    if (b->closed)
        return lb_closed_error(b);
    a->users++;
    b->users++;
    return 0;
}

void lb_base_release(lb_base *b)
{
    b->released = 1;
    if (b->release)
        b->release(b);
}

void lb_busy_begin(lb_base *b)
{
    /* The caller waited for busy == 0 and has held the GIL since, so nobody
     * holds the lock and this cannot block. */
    PyThread_acquire_lock(b->lock, WAIT_LOCK);
    b->busy = 1;
}

void lb_busy_end(lb_base *b)
{
    b->busy = 0;
    PyThread_release_lock(b->lock);
    /* Each waiter takes the GIL, sees busy == 0 and leaves the count before
     * it does its operation; give them the GIL until all have. */
    while (b->waiters > 0) {
        Py_BEGIN_ALLOW_THREADS
        sched_yield();
        Py_END_ALLOW_THREADS
    }
}

/* ---- close() and the context manager -------------------------------------- */

PyObject *lb_close_with(lb_base *b, void (*release)(lb_base *))
{
    /* A closed filter raises ClosedError from now on; its storage goes when
     * the operations that entered before have left (at once when none has). */
    if (b->fork_generation != lb_fork_generation && recover_after_fork(b) < 0) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    if (!b->closed) {
        b->closed = 1;
        b->release = release;
        if (b->users == 0)
            lb_base_release(b);
    }
    Py_RETURN_NONE;
}

static PyObject *lb_enter_method_unlocked(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_base *b = (lb_base *)self;
    if (lb_enter(b) < 0)
        return NULL;
    lb_leave(b);
    return Py_NewRef(self);
}

LB_LOCKED_SELF(lb_enter_method)

PyObject *lb_exit_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)args;
    (void)nargs;
    PyObject *r = PyObject_CallMethod(self, "close", NULL);
    if (!r)
        return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *lb_closed_get_unlocked(PyObject *self, void *unused)
{
    (void)unused;
    return PyBool_FromLong(((lb_base *)self)->closed);
}

LB_LOCKED_GETTER(lb_closed_get)

/* ---- len() and truth ------------------------------------------------------ */

static Py_ssize_t len_by(PyObject *self, const char *method)
{
    PyObject *r = PyObject_CallMethod(self, method, NULL);
    if (!r)
        return -1;
    Py_ssize_t n = PyLong_AsSsize_t(r);
    Py_DECREF(r);
    return n;
}

Py_ssize_t lb_len_approximate(PyObject *self)
{
    return len_by(self, "approximate_count");
}

Py_ssize_t lb_len_card(PyObject *self)
{
    return len_by(self, "card");
}

int lb_bool_true(PyObject *self)
{
    (void)self;
    return 1;
}
