/* common.h: status codes and limits shared by every part of the C core.
 *
 * The core is plain C99 (plus GCC/Clang builtins) and knows nothing of Python.
 * Every fallible function returns an lb_status; the binding maps each code to
 * one Python exception type. */
#ifndef LB_COMMON_H
#define LB_COMMON_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    LB_OK = 0,
    LB_ERR_CAPACITY,    /* n (or m) is zero or out of range            */
    LB_ERR_FPR,         /* false-positive rate outside (0, 1)           */
    LB_ERR_RANGE,       /* a value would overflow or can never be held  */
    LB_ERR_ARG,         /* another invalid argument (k, ratios, ...)    */
    LB_ERR_NOMEM,       /* allocation failed                            */
    LB_ERR_FORMAT,      /* serialized data truncated, corrupt, hostile  */
    LB_ERR_MISMATCH,    /* two filters of different geometry or hash    */
    LB_ERR_EMPTY_KEY,   /* the empty key                                */
    LB_ERR_BACKEND      /* a server failed; the caller has the details  */
} lb_status;

/* The largest bit array (or counter array) any filter will allocate:
 * 2^48 bits is 32 TiB, beyond any machine this runs on, and small enough
 * that every size computation below stays far from 64-bit overflow. */
#define LB_MAX_BITS (UINT64_C(1) << 48)
/* The largest number of hash functions.  Estimate() gives k <= 64 for every
 * p >= 1e-19; larger k only burns time. */
#define LB_MAX_K 64

#if defined(__GNUC__) || defined(__clang__)
#define LB_LIKELY(x) __builtin_expect(!!(x), 1)
#define LB_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define LB_PREFETCH_W(p) __builtin_prefetch((p), 1, 1)
#define LB_PREFETCH_R(p) __builtin_prefetch((p), 0, 1)
#define LB_NOINLINE __attribute__((noinline))
#else
#define LB_LIKELY(x) (x)
#define LB_UNLIKELY(x) (x)
#define LB_PREFETCH_W(p) ((void)0)
#define LB_PREFETCH_R(p) ((void)0)
#define LB_NOINLINE
#endif

/* LB_ATOMIC_STORAGE (setup.py defines it for a free-threaded CPython, where
 * threads run the filters truly in parallel): every bit and counter is set with
 * an atomic read-modify-write (OR for bits, compare-and-swap for a counter's
 * byte) and read with an atomic load, all relaxed; the counts kept beside them
 * (bits_set, nonzero) are added to atomically.  Relaxed is enough: a Bloom
 * filter's bits only go from 0 to 1 between resets, each bit is its own fact
 * (no other memory is published through it), and a key's add is acknowledged
 * only after its own atomic ORs returned, so any later test, in any thread,
 * reads those bits set (coherence of each location).  Without it (a GIL
 * build) the plain operations stay: one thread writes a filter at a time. */
#ifdef LB_ATOMIC_STORAGE
#define LB_LOAD(p) __atomic_load_n((p), __ATOMIC_RELAXED)
#define LB_COUNT_ADD(p, v) ((void)__atomic_fetch_add((p), (v), __ATOMIC_RELAXED))
#else
#define LB_LOAD(p) (*(p))
#define LB_COUNT_ADD(p, v) ((void)(*(p) += (v)))
#endif

/* A key as the core sees it: bytes and a length.  Keys are never empty
 * (callers reject the empty key before they reach the core). */
typedef struct {
    const void *data;
    size_t len;
} lb_key;

#endif
