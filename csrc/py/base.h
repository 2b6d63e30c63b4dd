/* base.h: the base every filter object starts with, and the methods and slots
 * every type shares through it (close, the context manager, closed, len(),
 * truth). */
#ifndef LB_PY_BASE_H
#define LB_PY_BASE_H

#include "state.h"

/* The rule: every operation either completes against a live filter or raises
 * ClosedError.  One mechanism holds it: an operation enters the filter
 * (lb_enter: wait for a GIL-free section of another thread to end, check the
 * filter is open, claim it) and leaves it (lb_leave) when it no longer needs
 * its storage.  close() marks the filter closed at once, so later entries
 * raise ClosedError, and frees the storage when the last claim is given back:
 * an operation that entered never sees its storage freed under it, whatever
 * it waits for, allocates or calls on the way.
 *
 * GIL-free sections: single-key operations on in-memory filters run with the
 * GIL held and never release it.  A batch releases the GIL while it hashes and
 * probes a chunk of keys; for that chunk it holds `lock` and sets `busy`
 * (lb_busy_begin / lb_busy_end), as does a Redis round trip.  Entering waits
 * for the section to end (with the GIL released), except reads of a type whose
 * storage never moves (`reads_during_batch`): they go on, and see each bit of a
 * key being added either set or not yet set.  Between chunks a batch lets every
 * waiter in before it goes on, so a long warm-up does not stall request
 * threads.  Whatever the section leaves for the caller (an error text, a
 * count) is read before lb_busy_end, while no other thread can use the
 * object.
 *
 * Fork: a forked child has only the thread that called fork(), which held the
 * GIL, so no other thread of the child is inside the filter; but the parent's
 * threads may have been (waiting, claiming, or in a GIL-free section).  The
 * first entry in the child (lb_fork_generation changed) starts the lock state
 * afresh: a new lock (the old one is left alone, as CPython does with its
 * own), no waiters, no claims, not busy.  When another thread was in a
 * GIL-free section at the fork (busy was set), what it was changing is
 * suspect: the type's after_fork hook replaces it without touching it (the
 * Redis types abandon the connection and build a new one). */

/* Free-threaded CPython (3.13t, Py_GIL_DISABLED): no GIL orders the threads, so
 * every method of an in-memory filter that reads or changes the object's state
 * runs in a critical section on the object (two objects: union, ==, a | b):
 * the per-object lock CPython gives (Py_BEGIN_CRITICAL_SECTION), which, like
 * the GIL, is let go while the thread waits or runs without the interpreter
 * (a batch's GIL-free section, a blocking call) and taken back after.  So
 * everything above, written for the GIL, holds object by object: a field of
 * the base (busy, users, closed, waiters) is only read and written inside the
 * object's critical section, and a GIL-free section is still the only time
 * another thread reaches the storage while this one uses it.  LB_LOCKED_*
 * define a method as its _unlocked body called inside the section; on a build
 * with the GIL they are the body itself (the section is the GIL).  What the
 * storage guarantees to a reader during a GIL-free section: csrc/core/common.h
 * (LB_ATOMIC_STORAGE). */
#if defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030D0000
#define LB_FT_LOCKS 1
/* Fork: CPython stops every other thread before fork(), and a stopped thread
 * holds no critical section, but a lock its owner handed to a waiting thread
 * (PyMutex gives a lock straight to a thread that waited long) stays taken
 * in the child by a thread that is not there.  So in a forked child, the first
 * method of a filter (lb_fork_unlock) marks its object's lock free, unless
 * the thread that forked is inside a filter's method itself (then it may hold
 * that lock: left as it is). */
#define LB_LOCK_BEGIN(o)                                                               \
    lb_fork_unlock(o);                                                                 \
    lb_method_depth++;                                                                 \
    Py_BEGIN_CRITICAL_SECTION(o)
#define LB_LOCK_END()                                                                  \
    Py_END_CRITICAL_SECTION();                                                         \
    lb_method_depth--
#define LB_LOCK2_BEGIN(a, b)                                                           \
    lb_fork_unlock(a);                                                                 \
    lb_fork_unlock(b);                                                                 \
    lb_method_depth++;                                                                 \
    Py_BEGIN_CRITICAL_SECTION2(a, b)
#define LB_LOCK2_END()                                                                 \
    Py_END_CRITICAL_SECTION2();                                                        \
    lb_method_depth--
#else
#define LB_LOCK_BEGIN(o) {
#define LB_LOCK_END() }
#define LB_LOCK2_BEGIN(a, b) {
#define LB_LOCK2_END() }
#endif

/* METH_NOARGS and METH_O: self locked. */
#define LB_LOCKED_SELF(name)                                                           \
    PyObject *name(PyObject *self, PyObject *arg)                                      \
    {                                                                                  \
        PyObject *r_;                                                                  \
        LB_LOCK_BEGIN(self);                                                           \
        r_ = name##_unlocked(self, arg);                                               \
        LB_LOCK_END();                                                                 \
        return r_;                                                                     \
    }
/* METH_O with another object (union), a binary number slot: both locked. */
#define LB_LOCKED_PAIR(name)                                                           \
    PyObject *name(PyObject *a, PyObject *b)                                           \
    {                                                                                  \
        PyObject *r_;                                                                  \
        LB_LOCK2_BEGIN(a, b);                                                          \
        r_ = name##_unlocked(a, b);                                                    \
        LB_LOCK2_END();                                                                \
        return r_;                                                                     \
    }
#define LB_LOCKED_COMPARE(name)                                                        \
    PyObject *name(PyObject *a, PyObject *b, int op)                                   \
    {                                                                                  \
        PyObject *r_;                                                                  \
        LB_LOCK2_BEGIN(a, b);                                                          \
        r_ = name##_unlocked(a, b, op);                                                \
        LB_LOCK2_END();                                                                \
        return r_;                                                                     \
    }
#define LB_LOCKED_CONTAINS(name)                                                       \
    int name(PyObject *self, PyObject *key)                                            \
    {                                                                                  \
        int r_;                                                                        \
        LB_LOCK_BEGIN(self);                                                           \
        r_ = name##_unlocked(self, key);                                               \
        LB_LOCK_END();                                                                 \
        return r_;                                                                     \
    }
#define LB_LOCKED_GETTER(name)                                                         \
    PyObject *name(PyObject *self, void *closure)                                      \
    {                                                                                  \
        PyObject *r_;                                                                  \
        LB_LOCK_BEGIN(self);                                                           \
        r_ = name##_unlocked(self, closure);                                           \
        LB_LOCK_END();                                                                 \
        return r_;                                                                     \
    }
#define LB_LOCKED_REPR(name)                                                           \
    PyObject *name(PyObject *self)                                                     \
    {                                                                                  \
        PyObject *r_;                                                                  \
        LB_LOCK_BEGIN(self);                                                           \
        r_ = name##_unlocked(self);                                                    \
        LB_LOCK_END();                                                                 \
        return r_;                                                                     \
    }
/* METH_FASTCALL | METH_KEYWORDS. */
#define LB_LOCKED_FASTCALL_KW(name)                                                    \
    PyObject *name(PyObject *self, PyObject *const *args, Py_ssize_t nargs,            \
                   PyObject *kwnames)                                                  \
    {                                                                                  \
        PyObject *r_;                                                                  \
        LB_LOCK_BEGIN(self);                                                           \
        r_ = name##_unlocked(self, args, nargs, kwnames);                              \
        LB_LOCK_END();                                                                 \
        return r_;                                                                     \
    }

/* How a type runs batches (batch.h defines it). */
struct lb_batch_ops_s;

typedef struct lb_base_s {
    PyObject_HEAD
    lb_state *st;
    PyThread_type_lock lock;
    int busy;
    unsigned long fork_generation;
    unsigned long lock_generation; /* lb_fork_unlock's: the fork its lock was freed after */
    int waiters;
    long users;       /* operations that entered and have not left */
    int reads_during_batch;
    int closed;       /* close() was called: entering raises ClosedError */
    int released;     /* the storage is freed (closed and users == 0) */
    int read_only;    /* storage that must not change (a file mapped with mode "r"):
                         add, update, add_many, reset raise NotSupportedError */
    void (*release)(struct lb_base_s *self);  /* frees the storage; set by close() */
    /* In a forked child, when another thread of the parent was in a GIL-free
     * section on this filter: replace what it owned (may be NULL).  -1 with
     * an exception when that fails (the filter is then closed). */
    int (*after_fork)(struct lb_base_s *self);
    /* For filters backed by a server: sets the Python exception for the
     * LB_ERR_BACKEND a chunk returned (the details are in the object). */
    void (*raise_backend)(struct lb_base_s *self);
    const struct lb_batch_ops_s *batch;
    size_t chunk;     /* keys per chunk; 0: LB_CHUNK */
    PyObject *weakrefs;
} lb_base;

/* Bumped in the child after every fork (pthread_atfork). */
extern unsigned long lb_fork_generation;

#ifdef LB_FT_LOCKS
/* How many filter methods this thread is inside (LB_LOCK_BEGIN). */
extern _Thread_local int lb_method_depth;
/* In a forked child, the first time: o's critical-section lock marked free (see
 * LB_LOCK_BEGIN); nothing in the parent (no fork yet) or for another object. */
void lb_fork_unlock_slow(PyObject *o);
static inline void lb_fork_unlock(PyObject *o)
{
    if (LB_UNLIKELY(lb_fork_generation != 0))
        lb_fork_unlock_slow(o);
}
#endif

/* Watch for fork() (pthread_atfork), once per process (module exec).  0, or
 * -1 with OSError. */
int lb_fork_watch_install(void);

/* NotSupportedError for a change to a read-only filter; returns -1. */
int lb_read_only_error(lb_base *b);

/* Initialise the base in tp_new (allocates the lock). */
int lb_base_init(lb_base *b, PyTypeObject *type);
void lb_base_fini(lb_base *b);

/* The slow path of lb_wait_open: a fork to recover from, or a GIL-free
 * section to wait for.  0, or -1 with an exception. */
int lb_base_wait(lb_base *b, int read_only);

static inline int lb_closed_error(lb_base *b)
{
    PyErr_SetString(b->st->ClosedError, "filter is closed");
    return -1;
}

/* 1 when an entry must first go through lb_base_wait: a fork to recover from,
 * or another thread's GIL-free section (unless read_only and the type allows
 * reads during one). */
static inline int lb_must_wait(const lb_base *b, int read_only)
{
    return b->fork_generation != lb_fork_generation ||
           (b->busy && !(read_only && b->reads_during_batch));
}

/* Wait for another thread's GIL-free section (unless read_only and the type
 * allows reads during one), then check the filter is open, without claiming
 * it: for the chunks of a batch that entered already.  0, or -1 with an
 * exception (ClosedError). */
static inline int lb_wait_open(lb_base *b, int read_only)
{
    if (lb_must_wait(b, read_only) && lb_base_wait(b, read_only) < 0)
        return -1;
    if (b->closed)
        return lb_closed_error(b);
    return 0;
}

/* Enter the filter: lb_wait_open, then claim it.  Every successful entry is
 * matched by one lb_leave.  0, or -1 with ClosedError (nothing claimed). */
static inline int lb_enter(lb_base *b)
{
    if (lb_wait_open(b, 0) < 0)
        return -1;
    b->users++;
    return 0;
}

/* lb_enter for an operation that only reads. */
static inline int lb_enter_read(lb_base *b)
{
    if (lb_wait_open(b, 1) < 0)
        return -1;
    b->users++;
    return 0;
}

/* Enter two filters (a and b may be the same object): returns when neither
 * is in another thread's GIL-free section at the same moment, both open and
 * both claimed.  0, or -1 with ClosedError and neither claimed. */
int lb_enter2(lb_base *a, lb_base *b);

/* Free the storage of a closed filter whose last claim was given back. */
void lb_base_release(lb_base *b);

static inline void lb_leave(lb_base *b)
{
    if (b->users > 0 && --b->users == 0 && b->closed && !b->released)
        lb_base_release(b);
}

/* Claim the filter for a GIL-free section (call with the GIL, after
 * lb_enter or lb_wait_open), and give it back (with the GIL; lets waiting
 * threads in first). */
void lb_busy_begin(lb_base *b);
void lb_busy_end(lb_base *b);

/* close(), __enter__, __exit__ and the `closed` property, shared by every
 * type; each type supplies its own release function. */
PyObject *lb_close_with(lb_base *b, void (*release)(lb_base *));
PyObject *lb_enter_method(PyObject *self, PyObject *unused);
PyObject *lb_exit_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs);
PyObject *lb_closed_get(PyObject *self, void *unused);

/* len(f): the estimated number of distinct keys, approximate_count() (card()
 * for RedisBloomFilter: BF.CARD), a round trip for the Redis types.  A filter
 * is always true (lb_bool_true), so `if f:` neither asks Redis nor depends on
 * the filter being empty. */
Py_ssize_t lb_len_approximate(PyObject *self);
Py_ssize_t lb_len_card(PyObject *self);
int lb_bool_true(PyObject *self);

#endif
