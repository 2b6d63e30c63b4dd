/* counters.h: 4-bit saturating counters, two per byte, the storage of
 * CountingFilter.
 *
 * Cell i lives in byte i/2: even cells in the low nibble, odd cells in the
 * high nibble (the ling-base Go library's layout).  A counter stops at 15 and a counter at 15
 * is never decremented again: it no longer knows how many keys it holds, so
 * decrementing it could make a key that is still present test absent. */
#ifndef LB_COUNTERS_H
#define LB_COUNTERS_H

#include "common.h"
#include "hash.h"

#define LB_COUNTER_MAX 15

typedef struct {
    uint8_t *data;
    uint64_t m;      /* cells */
    uint64_t nbytes; /* ceil(m / 2) */
    uint64_t nonzero; /* cells above zero, kept up to date */
    void *raw;        /* what lb_counters_init allocated (data is inside it) */
    size_t raw_len;   /* its length when it was mapped (huge pages); 0: calloc'd */
} lb_counters;

/* ceil(m/2) zeroed bytes (from 4 MiB on, on transparent huge pages: hugealloc.h). */
lb_status lb_counters_init(lb_counters *c, uint64_t m);
void lb_counters_free(lb_counters *c);
void lb_counters_clear(lb_counters *c);
/* Recomputes nonzero from the cells (after loading). */
void lb_counters_recount(lb_counters *c);

static inline unsigned lb_counter_get(const lb_counters *c, uint64_t i)
{
    uint8_t b = LB_LOAD(&c->data[i >> 1]);
    return (i & 1) ? (unsigned)(b >> 4) : (unsigned)(b & 0x0f);
}

static inline void lb_counter_put(lb_counters *c, uint64_t i, unsigned v)
{
    uint8_t *b = &c->data[i >> 1];
    *b = (i & 1) ? (uint8_t)((*b & 0x0f) | (v << 4)) : (uint8_t)((*b & 0xf0) | v);
}

/* Combine src into dst, cell by cell (same m): sum != 0, the saturating sum
 * (the counters of a filter that had every add of both: remove() stays
 * sound); sum == 0, the minimum (each cell still counts at least the keys of
 * both that reach it, so removing one of those keeps the others present). */
void lb_counters_merge(lb_counters *dst, const lb_counters *src, int sum);

/* add: returns 1 when the key tested absent before; increments each of its k
 * counters below 15 (an index that repeats increments its cell again). */
int lb_counters_add(lb_counters *c, const lb_geometry *g, lb_hash_pair h);
int lb_counters_test(const lb_counters *c, const lb_geometry *g, lb_hash_pair h);
/* remove: when the key tests absent, changes nothing and returns 0; otherwise
 * decrements each counter that is not saturated and returns 1. */
int lb_counters_remove(lb_counters *c, const lb_geometry *g, lb_hash_pair h);
/* The smallest of the key's counters: 0 when absent. */
unsigned lb_counters_count(const lb_counters *c, const lb_geometry *g, lb_hash_pair h);

/* Batches over keys hashed already (lb_hash with g's scheme); out (may be
 * NULL for add) gets 1/0 per key. */
void lb_counters_add_hashed(lb_counters *c, const lb_geometry *g, const lb_hash_pair *pairs,
                            size_t n, uint8_t *out);
void lb_counters_test_hashed(const lb_counters *c, const lb_geometry *g,
                             const lb_hash_pair *pairs, size_t n, uint8_t *out);

#endif
