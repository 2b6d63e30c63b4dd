/* batch.c: the batch drivers and the batch methods of every type (see batch.h). */
#include "batch.h"

#include <string.h>

#include "columns.h"
#include "errors.h"
#include "hash_inline.h"

/* The work space of one batch call, sized for its chunk (one allocation). */
typedef struct {
    PyObject **objs;
    lb_key *keys;
    lb_key_hold *holds;  /* only for keys whose bytes a hold keeps: nviews of them */
    size_t nviews;
    uint8_t *out;
} chunk_space;

static chunk_space *chunk_space_new(size_t n)
{
    size_t size = sizeof(chunk_space) + n * (sizeof(PyObject *) + sizeof(lb_key) +
                                             sizeof(lb_key_hold) + 1);
    chunk_space *w = PyMem_Malloc(size);
    if (!w)
        return NULL;
    char *p = (char *)(w + 1);
    w->objs = (PyObject **)p;
    p += n * sizeof(PyObject *);
    w->keys = (lb_key *)p;
    p += n * sizeof(lb_key);
    w->holds = (lb_key_hold *)p;
    p += n * sizeof(lb_key_hold);
    w->out = (uint8_t *)p;
    w->nviews = 0;
    return w;
}

static void chunk_drop(chunk_space *w, size_t n)
{
    for (size_t i = 0; i < w->nviews; i++)
        lb_key_release(&w->holds[i]);
    w->nviews = 0;
    for (size_t i = 0; i < n; i++)
        Py_DECREF(w->objs[i]);
}

static void raise_status(lb_base *self, lb_status status)
{
    if (status == LB_ERR_BACKEND && self->raise_backend)
        self->raise_backend(self);
    else
        lb_raise(self->st, status, NULL);
}

/* The keys of a batch as a sequence (a list or tuple as it is, anything else
 * copied into a list once; with fixed, a list copied into a tuple too:
 * lb_keys_fixed): a new reference, or NULL with TypeError (a single str,
 * bytes, bytearray or memoryview is one key, not a batch of its bytes'
 * numbers). */
static PyObject *keys_sequence(PyObject *iterable, int fixed)
{
    if (PyUnicode_Check(iterable) || PyBytes_Check(iterable) || PyByteArray_Check(iterable) ||
        PyMemoryView_Check(iterable)) {
        PyErr_SetString(PyExc_TypeError,
                        "expected an iterable of keys, got a single str or bytes key");
        return NULL;
    }
    if (fixed)
        return lb_keys_fixed(iterable, "expected an iterable of keys");
    return PySequence_Fast(iterable, "expected an iterable of keys");
}

PyObject *lb_keys_bytes_list(lb_state *st, PyObject *keys, int skip_nulls)
{
    lb_column col;
    int is_column = lb_column_open(st, keys, skip_nulls, &col);
    if (is_column < 0)
        return NULL;
    PyObject *out = NULL;
    if (is_column == 1) {
        /* read in place, a chunk at a time: no Python object but the bytes */
        lb_key *ks = PyMem_Malloc(LB_CHUNK * sizeof *ks);
        char *digits = PyMem_Malloc((size_t)LB_CHUNK * LB_COLUMN_DIGITS);
        out = ks && digits ? PyList_New(0) : PyErr_NoMemory();
        for (size_t done = 0; out && done < col.len;) {
            size_t consumed = 0;
            size_t got = lb_column_fill(&col, LB_CHUNK, ks, NULL, digits, &consumed);
            for (size_t j = 0; j < got && out; j++) {
                PyObject *b = PyBytes_FromStringAndSize(ks[j].data, (Py_ssize_t)ks[j].len);
                if (!b || PyList_Append(out, b) < 0)
                    Py_CLEAR(out);
                Py_XDECREF(b);
            }
            if (consumed == 0)
                break;
            done += consumed;
        }
        PyMem_Free(ks);
        PyMem_Free(digits);
        lb_column_close(&col);
        return out;
    }
    /* fixed: a key's __index__ or __buffer__ may change a list under the loop */
    PyObject *seq = keys_sequence(is_column == 2 ? col.objects : keys, 1);
    if (is_column == 2 && !seq)
        lb_column_close(&col);
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *obj = PySequence_Fast_GET_ITEM(seq, i);
        if (PyBytes_CheckExact(obj) && PyBytes_GET_SIZE(obj) > 0) {
            PyList_SET_ITEM(out, i, Py_NewRef(obj));
            continue;
        }
        lb_key k;
        lb_key_hold hold;
        PyObject *b = NULL;
        if (lb_key_get(st, obj, &k, &hold) == 0) {
            b = PyBytes_FromStringAndSize(k.data, (Py_ssize_t)k.len);
            lb_key_release(&hold);
        }
        if (!b)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, b);
    }
    Py_DECREF(seq);
    if (is_column == 2)
        lb_column_close(&col);
    return out;
}

PyObject *lb_keys_checked(lb_state *st, PyObject *seq)
{
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject *own = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *obj = PySequence_Fast_GET_ITEM(seq, i);
        const void *data;
        size_t len;
        if (lb_key_direct(obj, &data, &len)) {
            if (len == 0) {
                lb_key_empty(st);
                goto fail;
            }
            continue;
        }
        lb_key key;
        lb_key_hold hold;
        Py_INCREF(obj);
        int r = lb_key_get_other(st, obj, &key, &hold);
        PyObject *frozen = NULL;
        if (r == 0) {
            frozen = PyBytes_FromStringAndSize(key.data, (Py_ssize_t)key.len);
            lb_key_release(&hold);
        }
        Py_DECREF(obj);
        if (!frozen)
            goto fail;
        if (!own && !(own = PySequence_List(seq))) {
            Py_DECREF(frozen);
            goto fail;
        }
        PyList_SET_ITEM(own, i, frozen);  /* steals frozen */
        Py_DECREF(obj);                   /* the reference own held (seq keeps one) */
    }
    return own ? own : Py_NewRef(seq);
fail:
    Py_XDECREF(own);
    return NULL;
}

/* Convert the len keys of seq from start into w, holding each key's object:
 * how many were converted (fewer than len: the next one raised). */
static size_t chunk_fill(lb_state *st, PyObject *seq, Py_ssize_t start, size_t len,
                         chunk_space *w)
{
    size_t got = 0;
    for (; got < len; got++) {
        PyObject *obj = PySequence_Fast_GET_ITEM(seq, start + (Py_ssize_t)got);
        Py_INCREF(obj);
        w->objs[got] = obj;
        /* str and bytes (nearly every key) need no hold: keep one only for
         * a key whose bytes live in it (a buffer view, an int's digits or
         * text), packed, so the chunk's work space stays small. */
        lb_key_hold *hold = &w->holds[w->nviews];
        if (lb_key_get(st, obj, &w->keys[got], hold) < 0) {
            Py_DECREF(obj);
            break;
        }
        w->nviews += (size_t)(hold->held != LB_HOLD_NONE);
    }
    return got;
}

/* The work space of a batch on a column, for chunks of up to n keys: the
 * keys, their pairs, their elements (when nulls are skipped), the integers'
 * texts and the answers (raw memory: used without the GIL). */
typedef struct {
    lb_key *keys;
    lb_hash_pair *pairs;
    size_t *idx;
    char *digits;
    uint8_t *out;
} column_space;

static void *column_space_new(size_t n, column_space *w)
{
    size_t per = sizeof(lb_key) + sizeof(lb_hash_pair) + sizeof(size_t) + LB_COLUMN_DIGITS + 1;
    char *p = PyMem_RawMalloc(n * per);
    if (!p) {
        PyErr_NoMemory();
        return NULL;
    }
    void *base = p;
    w->pairs = (lb_hash_pair *)p;
    p += n * sizeof(lb_hash_pair);
    w->keys = (lb_key *)p;
    p += n * sizeof(lb_key);
    w->idx = (size_t *)p;
    p += n * sizeof(size_t);
    w->digits = p;
    p += n * LB_COLUMN_DIGITS;
    w->out = (uint8_t *)p;
    return base;
}

/* A chunk's answers where they belong: out[j] is the answer of element
 * idx[j] from dest (the elements not named are nulls: False). */
static void scatter(uint8_t *dest, const uint8_t *out, const size_t *idx, size_t n)
{
    for (size_t j = 0; j < n; j++)
        dest[idx[j]] = out[j];
}

/* A column in chunks: `hashed` the in-memory types (each chunk's keys hashed,
 * then handed to add_hashed / test_hashed as pairs), else the chunk's keys to
 * run (the Redis types).  Every key was checked when the column was opened;
 * no Python object is made per key, and a chunk's keys are read, hashed and
 * probed with the GIL released (for LB_GIL_FREE_MIN keys or more, or always
 * with LB_GIL_ALWAYS).  Returns None, or a BoolArray of answers (nulls False),
 * as numpy's array where numpy is installed. */
static PyObject *column_batch(lb_base *self, lb_column *c, int hashed, int add,
                              lb_chunk_fn run, lb_result_kind kind, lb_gil_mode gil,
                              size_t chunk)
{
    size_t n = c->len;
    PyObject *result = NULL;
    uint8_t *answers = NULL;
    void *space = NULL;
    column_space w;
    int entered = 0;
    lb_hash_scheme scheme = LB_HASH_XXH3_MIX;
    lb_status (*run_hashed)(lb_base *, const lb_hash_pair *, size_t, uint8_t *, size_t *) = NULL;
    if (hashed) {
        scheme = self->batch->key_scheme(self);
        run_hashed = add ? self->batch->add_hashed : self->batch->test_hashed;
        chunk = self->chunk ? self->chunk : LB_CHUNK;
        if (chunk > LB_CHUNK)
            chunk = LB_CHUNK;
    }
    else if (chunk == 0)
        chunk = LB_CHUNK;
    if (kind == LB_RESULT_LIST) {
        result = lb_bool_array_new(self->st, n, &answers);
        if (!result)
            return NULL;
    }
    if (lb_enter(self) < 0)
        goto fail;
    entered = 1;
    if (n == 0)
        goto finish;
    space = column_space_new(n < chunk ? n : chunk, &w);
    if (!space)
        goto fail;
    for (size_t start = 0; start < n;) {
        /* The batch holds its claim from the first chunk to the last; each
         * chunk waits for other threads' sections and stops at a close(). */
        if (lb_wait_open(self, 0) < 0)
            goto fail;
        size_t len = n - start < chunk ? n - start : chunk;
        int free_gil = gil == LB_GIL_ALWAYS || len >= LB_GIL_FREE_MIN;
        PyThreadState *ts = NULL;
        if (free_gil) {
            lb_busy_begin(self);
            ts = PyEval_SaveThread();
        }
        size_t consumed = 0, handled = 0;
        size_t got = lb_column_fill(c, len, w.keys, c->has_nulls ? w.idx : NULL, w.digits,
                                    &consumed);
        uint8_t *dest = answers ? answers + start : NULL;
        /* The answers go straight to the result when no null was skipped. */
        uint8_t *out = got == consumed && dest ? dest : w.out;
        lb_status status = LB_OK;
        if (got && hashed) {
            for (size_t j = 0; j < got; j++)
                lb_hash_to(scheme, w.keys[j].data, w.keys[j].len, &w.pairs[j]);
            status = run_hashed(self, w.pairs, got, dest || !add ? out : NULL, &handled);
        }
        else if (got)
            status = run(self, w.keys, got, out, &handled);
        if (status == LB_OK && dest && out != dest)
            scatter(dest, w.out, w.idx, got);
        if (free_gil) {
            PyEval_RestoreThread(ts);
            /* The error's details are in the object: read them while no
             * other thread can change them. */
            if (status != LB_OK)
                raise_status(self, status);
            lb_busy_end(self);
        }
        else if (status != LB_OK)
            raise_status(self, status);
        if (status != LB_OK)
            goto fail;
        if (consumed == 0) /* not expected: the column is shorter than it said */
            break;
        start += consumed;
    }
finish:
    lb_leave(self);
    PyMem_RawFree(space);
    if (!result)
        return Py_NewRef(Py_None);
    return lb_bool_array_result(result);
fail:
    if (entered)
        lb_leave(self);
    PyMem_RawFree(space);
    Py_XDECREF(result);
    return NULL;
}

static PyObject *run_column(lb_base *self, lb_column *c, lb_chunk_fn run, lb_result_kind kind,
                            lb_gil_mode gil, size_t chunk)
{
    return column_batch(self, c, 0, 0, run, kind, gil, chunk);
}

PyObject *lb_run_batch(lb_base *self, PyObject *iterable, int skip_nulls, lb_chunk_fn run,
                       lb_result_kind kind, lb_gil_mode gil, size_t chunk)
{
    lb_state *st = self->st;
    lb_column col;
    int is_column = lb_column_open(st, iterable, skip_nulls, &col);
    if (is_column < 0)
        return NULL;
    /* An array of objects (lb_column_open's 2): iterated, answered as a column. */
    int as_array = is_column == 2;
    if (is_column == 1) {
        PyObject *r = run_column(self, &col, run, kind, gil, chunk);
        lb_column_close(&col);
        return r;
    }
    /* A tuple the caller cannot change: the keys are converted twice (checked,
     * then chunk by chunk) with Python code between (a key's __index__ or
     * buffer exporter, other threads while a chunk runs GIL-free). */
    PyObject *seq = keys_sequence(as_array ? col.objects : iterable, 1);
    if (!seq) {
        lb_column_close(&col);
        return NULL;
    }
    PyObject *result = NULL;
    uint8_t *answers = NULL;
    chunk_space *w = NULL;
    int entered = 0;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);

    /* Every key is checked, and frozen, before anything changes. */
    PyObject *checked = lb_keys_checked(st, seq);
    Py_SETREF(seq, checked);
    if (!seq || lb_enter(self) < 0)
        goto done;
    entered = 1;
    if (kind == LB_RESULT_LIST) {
        result = as_array ? lb_bool_array_new(st, (size_t)n, &answers) : PyList_New(n);
        if (!result)
            goto done;
    }
    if (n == 0) {
        if (!result)
            result = Py_NewRef(Py_None);
        else if (answers)
            result = lb_bool_array_result(result);
        goto done;
    }
    if (chunk == 0)
        chunk = LB_CHUNK;
    w = chunk_space_new((size_t)n < chunk ? (size_t)n : chunk);
    if (!w) {
        PyErr_NoMemory();
        Py_CLEAR(result);
        goto done;
    }
    for (Py_ssize_t start = 0; start < n; start += (Py_ssize_t)chunk) {
        /* seq is a tuple, or a list nobody else holds: its n keys stay;
         * each chunk holds its keys' objects while it runs. */
        size_t len = (size_t)(n - start) < chunk ? (size_t)(n - start) : chunk;
        size_t got = chunk_fill(st, seq, start, len, w);
        /* The batch holds its claim from the first chunk to the last; each
         * chunk waits for other threads' sections and stops at a close(). */
        if (got < len || lb_wait_open(self, 0) < 0) {
            chunk_drop(w, got);
            Py_CLEAR(result);
            goto done;
        }
        size_t handled = 0;
        lb_status status;
        if (gil == LB_GIL_ALWAYS || len >= LB_GIL_FREE_MIN) {
            lb_busy_begin(self);
            Py_BEGIN_ALLOW_THREADS
            status = run(self, w->keys, len, w->out, &handled);
            Py_END_ALLOW_THREADS
            /* The error's details are in the object: read them while no
             * other thread can change them. */
            if (status != LB_OK)
                raise_status(self, status);
            lb_busy_end(self);
        }
        else {
            status = run(self, w->keys, len, w->out, &handled);
            if (status != LB_OK)
                raise_status(self, status);
        }
        chunk_drop(w, len);
        if (answers)
            memcpy(answers + start, w->out, handled);
        else if (result)
            for (size_t i = 0; i < handled; i++)
                PyList_SET_ITEM(result, start + (Py_ssize_t)i, Py_NewRef(w->out[i] ? Py_True : Py_False));
        if (status != LB_OK) {
            Py_CLEAR(result);
            goto done;
        }
    }
    if (!result)
        result = Py_NewRef(Py_None);
    else if (answers)
        result = lb_bool_array_result(result);
done:
    if (entered)
        lb_leave(self);
    PyMem_Free(w);
    Py_XDECREF(seq);
    lb_column_close(&col);
    return result;
}

/* Keys ahead whose objects are prefetched while one is hashed (into every
 * cache level: the object's header and, for short keys, its bytes are read
 * next).  Two lines: on CPython 3.11 pymalloc puts a short str at 48 mod 64 (its 64-byte
 * size class after the pool's 48-byte header), so its type is in one line and
 * its state and characters in the next, which the loop reads first thing.
 * Prefetching both made test_many of 500,000 present "user:N" keys spread
 * over a list of 1e6 about 7% faster (paired runs, minimum of 9 each). */
#ifndef LB_OBJ_AHEAD
#define LB_OBJ_AHEAD 16
#endif

/* The pairs an add's check pass keeps (16 bytes each: 16 MiB at most): a
 * batch of up to this many keys reads each key object once.  Past it, the
 * check reads the rest once and their chunks read them again: a second read
 * of a key object from memory (two cache lines of a short str) cost about 5 ns
 * per key at n = 1e6, over a third of an update's time, where keeping the
 * pairs and reading them back costs one sequential stream. */
#ifndef LB_PREHASH
#define LB_PREHASH ((size_t)1 << 20)
#endif
#if defined(__GNUC__) || defined(__clang__)
#define LB_PREFETCH_OBJ(p)                                                                   \
    (__builtin_prefetch((p), 0, 3), __builtin_prefetch((const char *)(p) + 63, 0, 3))
#else
#define LB_PREFETCH_OBJ(p) ((void)0)
#endif

/* The key of a hashed batch that is not a str or bytes: held (a buffer
 * exporter may run Python code that changes the sequence), converted, hashed. */
static int hash_other_key(lb_state *st, lb_hash_scheme scheme, PyObject *obj, lb_hash_pair *out)
{
    lb_key key;
    lb_key_hold hold;
    Py_INCREF(obj);
    int r = lb_key_get_other(st, obj, &key, &hold);
    if (r == 0) {
        lb_hash_to(scheme, key.data, key.len, out);
        lb_key_release(&hold);
    }
    Py_DECREF(obj);
    return r;
}

/* The check of a hashed add's keys past those it hashed (see
 * lb_run_hashed_batch): every key from `from` on checked before anything changes,
 * reading each object and running no Python code for the common keys: an
 * exact str or bytes (not empty), an int of at most 64 bits, any other str
 * (its UTF-8, cached on it).  Any other key (a buffer, an int-like, a larger
 * int) is converted here, and frozen: its conversion may run Python code or
 * answer otherwise the next time, so the chunks get the bytes of its key (a
 * larger int its text), in a private copy of the keys made at the first such
 * key.  A new reference to seq, or to that copy; NULL with the first bad key's
 * exception. */
static PyObject *keys_checked_hashed(lb_state *st, PyObject *seq, Py_ssize_t from)
{
    PyObject *own = NULL;
    PyObject *cur = seq;
    char digits[LB_KEY_DIGITS];
    for (Py_ssize_t i = from; i < PySequence_Fast_GET_SIZE(cur); i++) {
        PyObject **items = PySequence_Fast_ITEMS(cur);
        if (i + LB_OBJ_AHEAD < PySequence_Fast_GET_SIZE(cur))
            LB_PREFETCH_OBJ(items[i + LB_OBJ_AHEAD]);
        PyObject *obj = items[i];
        lb_key key;
        if (LB_LIKELY(lb_key_direct(obj, &key.data, &key.len))) {
            if (LB_UNLIKELY(key.len == 0)) {
                lb_key_empty(st);
                goto fail;
            }
            continue;
        }
        if (PyLong_CheckExact(obj) && lb_key_small_int(obj, digits, &key))
            continue;
        if (PyUnicode_Check(obj)) {
            Py_ssize_t len;
            if (!PyUnicode_AsUTF8AndSize(obj, &len))
                goto fail;
            if (len == 0) {
                lb_key_empty(st);
                goto fail;
            }
            continue;
        }
        if (!own) {
            /* Up to here no Python code ran: seq is as it was. */
            if (!(own = PySequence_List(cur)))
                goto fail;
            cur = own;
            obj = PyList_GET_ITEM(own, i);
        }
        lb_key_hold hold;
        Py_INCREF(obj);
        int r = lb_key_get_other(st, obj, &key, &hold);
        PyObject *frozen = NULL;
        if (r == 0) {
            frozen = hold.held == LB_HOLD_TEXT
                         ? Py_NewRef(hold.u.text)
                         : PyBytes_FromStringAndSize(key.data, (Py_ssize_t)key.len);
            lb_key_release(&hold);
        }
        Py_DECREF(obj);
        /* own is private: no Python code can change its length. */
        if (!frozen || PyList_SetItem(own, i, frozen) < 0)
            goto fail;
    }
    return own ? own : Py_NewRef(seq);
fail:
    Py_XDECREF(own);
    return NULL;
}

/* The work space of a hashed batch: one chunk's pairs and answers (raw memory:
 * they are used with the GIL released). */
typedef struct {
    lb_hash_pair *pairs;
    uint8_t *out;
} hash_space;

static void *hash_space_new(size_t n, hash_space *w)
{
    char *p = PyMem_RawMalloc(n * (sizeof(lb_hash_pair) + 1));
    if (!p) {
        PyErr_NoMemory();
        return NULL;
    }
    w->pairs = (lb_hash_pair *)p;
    w->out = (uint8_t *)(p + n * sizeof(lb_hash_pair));
    return p;
}

/* Read up to len keys of seq from start and hash each one as it is read into
 * pairs (with the GIL): an exact str or bytes in place, an int of at most 64
 * bits as its digits, by PAIR, the scheme's hash inlined (hash_inline.h); any
 * other key converted and hashed on its own.  How many keys were read (fewer
 * than len: the sequence is shorter now), or -1 with the exception of a bad
 * key.  Hashing each key as soon as it is read keeps the hash's work beside
 * the reads of the objects ahead (prefetched): hashing runs of 32 keys after
 * reading them measured 1 to 2 ns per key slower at n = 1e6. */
#define LB_GATHER_FN(NAME, PAIR)                                                           \
    static Py_ssize_t NAME(lb_state *st, lb_hash_scheme scheme, PyObject *seq,            \
                           Py_ssize_t start, size_t len, lb_hash_pair *pairs)              \
    {                                                                                      \
        size_t j = 0;                                                                      \
        for (; j < len; j++) {                                                             \
            /* Read again for each key: a key's conversion can run Python code. */        \
            const Py_ssize_t i = start + (Py_ssize_t)j;                                    \
            const Py_ssize_t size = PySequence_Fast_GET_SIZE(seq);                         \
            if (i >= size)                                                                 \
                break;                                                                     \
            PyObject **items = PySequence_Fast_ITEMS(seq);                                 \
            if (i + LB_OBJ_AHEAD < size)                                                   \
                LB_PREFETCH_OBJ(items[i + LB_OBJ_AHEAD]);                                  \
            PyObject *obj = items[i];                                                      \
            lb_key key;                                                                    \
            char digits[LB_KEY_DIGITS];                                                    \
            if (LB_LIKELY(lb_key_direct(obj, &key.data, &key.len))) {                      \
                if (LB_UNLIKELY(key.len == 0))                                             \
                    return lb_key_empty(st);                                               \
            }                                                                              \
            else if (!(PyLong_CheckExact(obj) && lb_key_small_int(obj, digits, &key))) {   \
                if (hash_other_key(st, scheme, obj, &pairs[j]) < 0)                        \
                    return -1;                                                             \
                continue;                                                                  \
            }                                                                              \
            pairs[j] = PAIR(key.data, key.len);                                            \
        }                                                                                  \
        return (Py_ssize_t)j;                                                              \
    }

LB_GATHER_FN(gather_xxh3, lb_pair_xxh3)
LB_GATHER_FN(gather_blocked, lb_pair_blocked)
LB_GATHER_FN(gather_ling_base, lb_hash_ling_base)

static Py_ssize_t chunk_gather(lb_state *st, lb_hash_scheme scheme, PyObject *seq,
                               Py_ssize_t start, size_t len, lb_hash_pair *pairs)
{
    switch (scheme) {
    case LB_HASH_BLOCKED:
        return gather_blocked(st, scheme, seq, start, len, pairs);
    case LB_HASH_LING_BASE:
        return gather_ling_base(st, scheme, seq, start, len, pairs);
    default: /* xxh3-mix and xxh3: the same pair */
        return gather_xxh3(st, scheme, seq, start, len, pairs);
    }
}

typedef lb_status (*hashed_run_fn)(lb_base *, const lb_hash_pair *, size_t, uint8_t *,
                                   size_t *);

/* An add's check of every key before anything changes: the pairs of the first
 * LB_PREHASH keys made by the check itself (*pre, *npre), then the rest of
 * *seq checked (and frozen where a key could change: keys_checked_hashed),
 * *seq replaced by what was checked and *n by its length.  -1 with an error
 * set. */
static int prehash_and_check(lb_state *st, lb_hash_scheme scheme, PyObject **seq,
                             Py_ssize_t *n, size_t chunk, lb_hash_pair **pre, Py_ssize_t *npre)
{
    Py_ssize_t want = (size_t)*n < LB_PREHASH ? *n : (Py_ssize_t)LB_PREHASH;
    if (want && !(*pre = PyMem_RawMalloc((size_t)want * sizeof(lb_hash_pair)))) {
        PyErr_NoMemory();
        return -1;
    }
    while (*npre < want) {
        size_t len = (size_t)(want - *npre) < chunk ? (size_t)(want - *npre) : chunk;
        Py_ssize_t got = chunk_gather(st, scheme, *seq, *npre, len, *pre + *npre);
        if (got < 0)
            return -1;
        *npre += got;
        if ((size_t)got < len) /* a key's Python code shortened the list */
            break;
    }
    PyObject *checked = keys_checked_hashed(st, *seq, *npre);
    Py_SETREF(*seq, checked);
    if (!*seq)
        return -1;
    *n = PySequence_Fast_GET_SIZE(*seq);
    if (*n < *npre)
        *n = *npre;
    return 0;
}

/* One chunk's pairs probed (added or tested) into outp, with the GIL released
 * for LB_GIL_FREE_MIN keys or more.  -1 with the error raised. */
static int probe_chunk(lb_base *self, hashed_run_fn run, const lb_hash_pair *pairs, size_t got,
                       uint8_t *outp)
{
    size_t handled = 0;
    lb_status status;
    if (got >= LB_GIL_FREE_MIN) {
        lb_busy_begin(self);
        Py_BEGIN_ALLOW_THREADS
        status = run(self, pairs, got, outp, &handled);
        Py_END_ALLOW_THREADS
        /* The error's details are in the object: read them while no other
         * thread can change them. */
        if (status != LB_OK)
            raise_status(self, status);
        lb_busy_end(self);
    }
    else {
        status = run(self, pairs, got, outp, &handled);
        if (status != LB_OK)
            raise_status(self, status);
    }
    return status == LB_OK ? 0 : -1;
}

PyObject *lb_run_hashed_batch(lb_base *self, PyObject *iterable, int skip_nulls, int add,
                              lb_result_kind kind)
{
    lb_state *st = self->st;
    lb_column col;
    int is_column = lb_column_open(st, iterable, skip_nulls, &col);
    if (is_column < 0)
        return NULL;
    /* An array of objects (lb_column_open's 2): iterated, answered as a column. */
    int as_array = is_column == 2;
    if (is_column == 1) {
        PyObject *r = column_batch(self, &col, 1, add, NULL, kind, LB_GIL_LARGE, 0);
        lb_column_close(&col);
        return r;
    }
    const lb_batch_ops *ops = self->batch;
    const lb_hash_scheme scheme = ops->key_scheme(self);
    PyObject *seq = keys_sequence(as_array ? col.objects : iterable, 0);
    if (!seq) {
        lb_column_close(&col);
        return NULL;
    }
    PyObject *result = NULL;
    uint8_t *answers = NULL;
    void *space = NULL;
    lb_hash_pair *pre = NULL;
    hash_space w;
    int entered = 0;
    size_t chunk = self->chunk ? self->chunk : LB_CHUNK;
    if (chunk > LB_CHUNK)
        chunk = LB_CHUNK;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if ((size_t)n < chunk)
        chunk = n ? (size_t)n : 1;
    if (!(space = hash_space_new(chunk, &w)))
        goto done;
    /* An add checks every key before anything changes (a test changes
     * nothing: its first bad key raises from its chunk).  The check reads
     * every key object, and so does the hashing: the pairs of the first
     * LB_PREHASH keys are made by the check itself (each object read once,
     * the pairs kept: at most LB_PREHASH * 16 bytes), those of any key past
     * them by its chunk (an object read again, a chunk's pairs in cache). */
    Py_ssize_t npre = 0;
    if (add && prehash_and_check(st, scheme, &seq, &n, chunk, &pre, &npre) < 0)
        goto done;
    if (lb_enter(self) < 0)
        goto done;
    entered = 1;
    if (kind == LB_RESULT_LIST) {
        result = as_array ? lb_bool_array_new(st, (size_t)n, &answers) : PyList_New(n);
        if (!result)
            goto done;
    }
    uint8_t *outp = (kind == LB_RESULT_LIST || !add) ? w.out : NULL;
    hashed_run_fn run = add ? ops->add_hashed : ops->test_hashed;
    Py_ssize_t start = 0;
    while (start < n) {
        /* The batch holds its claim from the first chunk to the last; each
         * chunk waits for other threads' sections and stops at a close(). */
        if (lb_wait_open(self, 0) < 0) {
            Py_CLEAR(result);
            goto done;
        }
        Py_ssize_t end = start < npre ? npre : n;
        size_t len = (size_t)(end - start) < chunk ? (size_t)(end - start) : chunk;
        const lb_hash_pair *pairs;
        Py_ssize_t got;
        if (start < npre) {
            pairs = pre + start;
            got = (Py_ssize_t)len;
        }
        else {
            /* The chunk's keys read and hashed with the GIL held (the objects
             * are the sequence's), into pairs that stay in cache. */
            got = chunk_gather(st, scheme, seq, start, len, w.pairs);
            if (got < 0) {
                Py_CLEAR(result);
                goto done;
            }
            if (got == 0) /* the list is shorter now (another thread, between chunks) */
                break;
            pairs = w.pairs;
        }
        if (probe_chunk(self, run, pairs, (size_t)got, outp) < 0) {
            Py_CLEAR(result);
            goto done;
        }
        if (answers)
            memcpy(answers + start, w.out, (size_t)got);
        else if (result)
            for (Py_ssize_t j = 0; j < got; j++)
                PyList_SET_ITEM(result, start + j, Py_NewRef(w.out[j] ? Py_True : Py_False));
        start += got;
        if ((size_t)got < len)
            break;
    }
    if (start < n) {
        /* A list that another thread shortened while the GIL was released
         * between chunks: the batch is the keys it still had, and so are the
         * answers (only a list of ours can be shorter: an array of objects
         * is a private copy). */
        if (answers)
            memset(answers + start, 0, (size_t)(n - start));
        else if (result)
            Py_SET_SIZE(result, start);
    }
    if (!result)
        result = Py_NewRef(Py_None);
    else if (answers)
        result = lb_bool_array_result(result);
done:
    if (entered)
        lb_leave(self);
    PyMem_RawFree(space);
    PyMem_RawFree(pre);
    Py_XDECREF(seq);
    lb_column_close(&col);
    return result;
}

int lb_batch_args(const char *name, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  PyObject **keys, int *skip_nulls)
{
    *skip_nulls = 0;
    if (nargs != 1) {
        PyErr_Format(PyExc_TypeError, "%s() takes 1 positional argument, the keys (%zd given)",
                     name, nargs);
        return -1;
    }
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *kw = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(kw, "skip_nulls") != 0) {
            PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument %R", name, kw);
            return -1;
        }
        int v = PyObject_IsTrue(args[nargs + i]);
        if (v < 0)
            return -1;
        *skip_nulls = v;
    }
    *keys = args[0];
    return 0;
}

static PyObject *batch_method(const char *name, PyObject *self, PyObject *const *args,
                              Py_ssize_t nargs, PyObject *kwnames, int add, lb_result_kind kind)
{
    lb_base *b = (lb_base *)self;
    const lb_batch_ops *ops = b->batch;
    PyObject *keys;
    int skip_nulls;
    if (lb_batch_args(name, args, nargs, kwnames, &keys, &skip_nulls) < 0)
        return NULL;
    if (add && b->read_only) {
        lb_read_only_error(b);
        return NULL;
    }
    if (ops->add_hashed)
        return lb_run_hashed_batch(b, keys, skip_nulls, add, kind);
    return lb_run_batch(b, keys, skip_nulls, add ? ops->add : ops->test, kind,
                        ops->gil_always ? LB_GIL_ALWAYS : LB_GIL_LARGE, b->chunk);
}

static PyObject *lb_add_many_method_unlocked(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames)
{
    return batch_method("add_many", self, args, nargs, kwnames, 1, LB_RESULT_LIST);
}

LB_LOCKED_FASTCALL_KW(lb_add_many_method)

static PyObject *lb_update_method_unlocked(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames)
{
    return batch_method("update", self, args, nargs, kwnames, 1, LB_RESULT_NONE);
}

LB_LOCKED_FASTCALL_KW(lb_update_method)

static PyObject *lb_test_many_method_unlocked(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames)
{
    return batch_method("test_many", self, args, nargs, kwnames, 0, LB_RESULT_LIST);
}

LB_LOCKED_FASTCALL_KW(lb_test_many_method)
