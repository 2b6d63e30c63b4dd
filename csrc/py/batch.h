/* batch.h: batches: add_many, update and test_many of every type, and the
 * drivers that walk an iterable of keys in chunks, with the GIL released for
 * large ones. */
#ifndef LB_PY_BATCH_H
#define LB_PY_BATCH_H

#include "base.h"
#include "keys.h"

/* How a type runs batches: its chunk functions, the GIL policy and the keys
 * per chunk (lb_base.batch, lb_base.chunk).  add_many, update and test_many
 * are then the same methods for every type (lb_add_many_method, ... below).
 *
 * A type whose batches need only each key's hash pair gives add_hashed,
 * test_hashed and key_scheme (the scheme the pairs are hashed with): the batch
 * driver then reads and hashes the keys chunk by chunk and hands each chunk's
 * pairs to them (lb_run_hashed_batch); add and test are then not used by the batch
 * methods.  They return LB_OK or a status as add and test do, *done telling
 * how many pairs they handled. */
typedef struct lb_batch_ops_s {
    lb_status (*add)(struct lb_base_s *self, const lb_key *keys, size_t n, uint8_t *out,
                     size_t *done);
    lb_status (*test)(struct lb_base_s *self, const lb_key *keys, size_t n, uint8_t *out,
                      size_t *done);
    int gil_always;   /* release the GIL for every chunk (network round trips) */
    /* out may be NULL for add_hashed (no per-key result wanted). */
    lb_status (*add_hashed)(struct lb_base_s *self, const lb_hash_pair *pairs, size_t n,
                            uint8_t *out, size_t *done);
    lb_status (*test_hashed)(struct lb_base_s *self, const lb_hash_pair *pairs, size_t n,
                             uint8_t *out, size_t *done);
    lb_hash_scheme (*key_scheme)(struct lb_base_s *self);
} lb_batch_ops;

/* A batch: an iterable of keys walked in chunks (the Redis types; the
 * in-memory ones use lb_run_hashed_batch below).
 *
 * The iterable is taken as a sequence (a tuple as it is, anything else
 * copied once) and every key is checked and frozen first (lb_keys_checked),
 * so a batch with a bad key raises before anything in it changes.  Then each chunk's
 * keys are converted, their objects held, and `run` is called on the chunk:
 * for large chunks with the GIL released and the filter claimed (see
 * lb_busy_begin), so other threads go on meanwhile.
 *
 * run returns LB_OK or a status; *done tells how many keys of the chunk it
 * handled.  out receives one byte per key (1 = true). */
typedef lb_status (*lb_chunk_fn)(lb_base *self, const lb_key *keys, size_t n, uint8_t *out,
                                 size_t *done);

/* Check every key of seq (a list or tuple that no Python code can change:
 * lb_keys_fixed) before anything changes, and freeze it: a new reference to
 * seq when every key is an exact str or bytes, else to a new list in which
 * every other key is the bytes of its key.  A key's conversion can run Python
 * code (__index__, a buffer's exporter) that answers otherwise, or fails, the
 * next time, and a bytearray can change while a chunk runs GIL-free: the
 * batch's keys are the ones checked.  NULL with the first bad key's
 * exception. */
PyObject *lb_keys_checked(lb_state *st, PyObject *seq);

/* The bytes every filter hashes for each key of keys (an iterable, or a column
 * read in place: columns.h), in order: a new list of bytes, or NULL with the
 * exception add_many(keys) raises for the first bad key (an empty key, a key
 * no filter takes, a column's null unless skip_nulls, whose nulls are left
 * out).  For the Python code that keeps keys of its own (a served file's add
 * log), so that it and the filters never disagree. */
PyObject *lb_keys_bytes_list(lb_state *st, PyObject *keys, int skip_nulls);

typedef enum {
    LB_RESULT_NONE,  /* return None */
    LB_RESULT_LIST   /* return list[bool] */
} lb_result_kind;

typedef enum {
    LB_GIL_LARGE,    /* release the GIL for chunks of LB_GIL_FREE_MIN keys or more */
    LB_GIL_ALWAYS    /* release it for every chunk (network round trips) */
} lb_gil_mode;

/* Keys per chunk for in-memory filters: large enough that releasing and
 * taking the GIL costs nothing per key, small enough that the chunk's work
 * space stays in cache. */
#define LB_CHUNK 2048
/* Chunks smaller than this are run with the GIL held (LB_GIL_LARGE). */
#define LB_GIL_FREE_MIN 256

PyObject *lb_run_batch(lb_base *self, PyObject *iterable, int skip_nulls, lb_chunk_fn run,
                       lb_result_kind kind, lb_gil_mode gil, size_t chunk);

/* The batch of a type with add_hashed / test_hashed (lb_batch_ops), on a list,
 * a tuple or any other iterable (copied into a list once).  In chunks
 * (self->chunk, at most LB_CHUNK): each chunk's keys read and hashed with the
 * GIL held into a chunk-sized buffer (each key as it is read, the scheme's hash
 * inlined: hash_inline.h, no scheme branch per key), then probed with the GIL released
 * for LB_GIL_FREE_MIN keys or more and the filter claimed as lb_run_batch
 * does.  An add first checks every key, so that a bad key raises before
 * anything changes; that check reads every key object anyway, and keeps the
 * hash pairs of the first LB_PREHASH keys (16 MiB at most), the later keys
 * being read again by their chunks.  A key whose conversion may run Python
 * code or answer otherwise the next time (a buffer, an int-like, an int past
 * 64 bits) is frozen by the check into the bytes of its key, in a private copy
 * of the keys.  A test changes nothing: its bad key raises from its chunk.  A
 * chunk that fails (a ScalableFilter that cannot grow) keeps what the chunks
 * before it did and raises.  A list that another thread changes between chunks
 * gives the keys each chunk finds (a bad key put there raises from its chunk,
 * after the chunks before it); shortened, the batch is the keys it still had
 * (and add_many's and test_many's answers those). */
PyObject *lb_run_hashed_batch(lb_base *self, PyObject *iterable, int skip_nulls, int add,
                              lb_result_kind kind);

/* Both drivers take a column too (columns.h: a buffer of integers, an Arrow
 * array or stream), read in place: every element checked first (a null:
 * ValueError naming its position, unless skip_nulls; an empty key:
 * EmptyKeyError naming it), then chunks of keys read, hashed and probed with
 * the GIL released, no Python object per key, work space of one chunk.
 * add_many and test_many of a column return a BoolArray (numpy's array over
 * it where numpy is installed), a null's answer False; update returns None. */

/* The arguments of a batch method: (keys, *, skip_nulls=False).  0, or -1
 * with TypeError. */
int lb_batch_args(const char *name, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames,
                  PyObject **keys, int *skip_nulls);

/* add_many, update and test_many of every type, through self->batch
 * (METH_FASTCALL | METH_KEYWORDS). */
PyObject *lb_add_many_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames);
PyObject *lb_update_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                           PyObject *kwnames);
PyObject *lb_test_many_method(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                              PyObject *kwnames);

/* The docstrings of the batch methods (the Redis types' too). */
#define LB_BATCH_COLUMN_DOC                                                                    \
    "keys: an iterable of keys, or a column read in place (a numpy array of integers, "        \
    "an Arrow array or chunked array of strings, binary or integers, a pandas or polars "      \
    "Series: anything with __arrow_c_array__ or __arrow_c_stream__).  A column's null "        \
    "raises ValueError naming its position; skip_nulls=True skips nulls instead (their "       \
    "answer False)."
#define LB_ADD_MANY_DOC                                                                        \
    "add_many(keys, *, skip_nulls=False) -> list[bool] | BoolArray\n\nadd() for each key; a "   \
    "bad key raises before anything changes.  A list of answers for an iterable; for a "       \
    "column a BoolArray (numpy's bool array over it where numpy is installed).\n\n"               \
    LB_BATCH_COLUMN_DOC
#define LB_UPDATE_DOC                                                                          \
    "update(keys, *, skip_nulls=False) -> None\n\nAdd every key; a bad key raises before "     \
    "anything changes.\n\n" LB_BATCH_COLUMN_DOC
#define LB_TEST_MANY_DOC                                                                       \
    "test_many(keys, *, skip_nulls=False) -> list[bool] | BoolArray\n\ntest() for each key.  " \
    "A list of answers for an iterable; for a column a BoolArray (numpy's bool array over "    \
    "it where numpy is installed, usable as a mask: df[~f.test_many(df[\"id\"])]).\n\n"          \
    LB_BATCH_COLUMN_DOC

#define LB_BATCH_METHOD_DEFS                                                                   \
    {"add_many", (PyCFunction)(void (*)(void))lb_add_many_method,                              \
     METH_FASTCALL | METH_KEYWORDS, LB_ADD_MANY_DOC},                                          \
        {"update", (PyCFunction)(void (*)(void))lb_update_method,                              \
         METH_FASTCALL | METH_KEYWORDS, LB_UPDATE_DOC},                                        \
        {"test_many", (PyCFunction)(void (*)(void))lb_test_many_method,                        \
         METH_FASTCALL | METH_KEYWORDS, LB_TEST_MANY_DOC}

#endif
