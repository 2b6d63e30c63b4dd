/* counters.c: see counters.h. */
#include "counters.h"

#include <stdlib.h>
#include <string.h>

#include "hugealloc.h"

lb_status lb_counters_init(lb_counters *c, uint64_t m)
{
    c->m = m;
    c->nbytes = (m + 1) / 2;
    c->nonzero = 0;
    c->raw = NULL;
    c->raw_len = 0;
    if (c->nbytes > SIZE_MAX)
        return LB_ERR_NOMEM;
    c->data = lb_huge_zalloc((size_t)c->nbytes, &c->raw, &c->raw_len);
    return c->data ? LB_OK : LB_ERR_NOMEM;
}

void lb_counters_free(lb_counters *c)
{
    lb_huge_free(c->raw, c->raw_len);
    c->raw = NULL;
    c->raw_len = 0;
    c->data = NULL;
}

void lb_counters_clear(lb_counters *c)
{
    memset(c->data, 0, (size_t)c->nbytes);
    c->nonzero = 0;
}

void lb_counters_recount(lb_counters *c)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < c->m; i++)
        n += lb_counter_get(c, i) != 0;
    c->nonzero = n;
}

void lb_counters_merge(lb_counters *dst, const lb_counters *src, int sum)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < dst->m; i++) {
        unsigned a = lb_counter_get(dst, i), b = lb_counter_get(src, i);
        unsigned v = sum ? (a + b > LB_COUNTER_MAX ? LB_COUNTER_MAX : a + b) : (a < b ? a : b);
        lb_counter_put(dst, i, v);
        n += v != 0;
    }
    dst->nonzero = n;
}

static int test_indices(const lb_counters *c, const uint64_t *idx, uint32_t k)
{
    for (uint32_t i = 0; i < k; i++)
        if (lb_counter_get(c, idx[i]) == 0)
            return 0;
    return 1;
}

/* Cell i one up (up != 0) or one down, unless it is at 15 (never moved again) or,
 * going down, at 0; returns its value before.  Built for threads that change
 * cells in parallel (LB_ATOMIC_STORAGE), the byte that holds two cells is
 * replaced by compare-and-swap, so a step of the other cell of the byte, or of
 * this one, by another thread is never written over. */
static inline unsigned counter_step(lb_counters *c, uint64_t i, int up)
{
    uint8_t *p = &c->data[i >> 1];
    const unsigned shift = (i & 1) ? 4 : 0;
    uint8_t old = LB_LOAD(p), next;
    unsigned v;
    do {
        v = (unsigned)(old >> shift) & 0x0f;
        if (v == LB_COUNTER_MAX || (!up && v == 0))
            return v;
        next = (uint8_t)((old & ~(0x0fu << shift)) | ((up ? v + 1 : v - 1) << shift));
#ifdef LB_ATOMIC_STORAGE
    } while (!__atomic_compare_exchange_n(p, &old, next, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
#else
        *p = next;
    } while (0);
#endif
    return v;
}

static int add_indices(lb_counters *c, const uint64_t *idx, uint32_t k)
{
    int was_present = test_indices(c, idx, k);
    for (uint32_t i = 0; i < k; i++) {
        if (counter_step(c, idx[i], 1) == 0)
            LB_COUNT_ADD(&c->nonzero, 1);
    }
    return !was_present;
}

int lb_counters_add(lb_counters *c, const lb_geometry *g, lb_hash_pair h)
{
    uint64_t idx[LB_MAX_K];
    lb_indices(g, h, idx);
    return add_indices(c, idx, g->k);
}

int lb_counters_test(const lb_counters *c, const lb_geometry *g, lb_hash_pair h)
{
    uint64_t idx[LB_MAX_K];
    lb_indices(g, h, idx);
    return test_indices(c, idx, g->k);
}

int lb_counters_remove(lb_counters *c, const lb_geometry *g, lb_hash_pair h)
{
    uint64_t idx[LB_MAX_K];
    lb_indices(g, h, idx);
    if (!test_indices(c, idx, g->k))
        return 0;
    for (uint32_t i = 0; i < g->k; i++) {
        /* The cell is above 0 here unless an index repeats and an earlier
         * step of this loop took it to zero (or another thread's remove did);
         * never go below zero, never touch 15. */
        if (counter_step(c, idx[i], 0) == 1)
            LB_COUNT_ADD(&c->nonzero, (uint64_t)-1);
    }
    return 1;
}

unsigned lb_counters_count(const lb_counters *c, const lb_geometry *g, lb_hash_pair h)
{
    uint64_t idx[LB_MAX_K];
    lb_indices(g, h, idx);
    unsigned least = LB_COUNTER_MAX;
    for (uint32_t i = 0; i < g->k; i++) {
        unsigned v = lb_counter_get(c, idx[i]);
        if (v < least)
            least = v;
    }
    return least;
}

/* How many keys ahead a batch derives the indices and prefetches the lines of
 * (as bitarray.c's batches: eight keys of up to 16 lines keep the memory system
 * busy without overflowing its fill buffers).  A ring holds the indices of the
 * next keys, each derived once. */
#ifndef LB_COUNTERS_AHEAD
#define LB_COUNTERS_AHEAD 8
#endif

static inline __attribute__((always_inline)) void counters_ahead(const lb_counters *c,
                                                                 const lb_geometry *g,
                                                                 lb_hash_pair h, int write,
                                                                 uint64_t *idx)
{
    lb_indices(g, h, idx);
    for (uint32_t i = 0; i < g->k; i++) {
        if (write)
            LB_PREFETCH_W(c->data + (idx[i] >> 1));
        else
            LB_PREFETCH_R(c->data + (idx[i] >> 1));
    }
}

#define COUNTERS_BATCH(C, G, PAIRS, N, WRITE, BODY)                                       \
    do {                                                                                 \
        uint64_t ring_[LB_COUNTERS_AHEAD][LB_MAX_K];                                     \
        size_t ahead_ = (N) < LB_COUNTERS_AHEAD ? (N) : LB_COUNTERS_AHEAD;               \
        for (size_t j_ = 0; j_ < ahead_; j_++)                                           \
            counters_ahead((C), (G), (PAIRS)[j_], (WRITE), ring_[j_]);                   \
        for (size_t j_ = 0; j_ < (N); j_++) {                                            \
            uint64_t *const idx = ring_[j_ % LB_COUNTERS_AHEAD];                         \
            const size_t key_no = j_;                                                    \
            BODY                                                                         \
            if (j_ + LB_COUNTERS_AHEAD < (N))                                            \
                counters_ahead((C), (G), (PAIRS)[j_ + LB_COUNTERS_AHEAD], (WRITE), idx); \
        }                                                                                \
    } while (0)

void lb_counters_add_hashed(lb_counters *c, const lb_geometry *g, const lb_hash_pair *pairs,
                            size_t n, uint8_t *out)
{
    const uint32_t k = g->k;
    COUNTERS_BATCH(c, g, pairs, n, 1, {
        int r = add_indices(c, idx, k);
        if (out)
            out[key_no] = (uint8_t)r;
    });
}

void lb_counters_test_hashed(const lb_counters *c, const lb_geometry *g,
                             const lb_hash_pair *pairs, size_t n, uint8_t *out)
{
    const uint32_t k = g->k;
    COUNTERS_BATCH(c, g, pairs, n, 0, { out[key_no] = (uint8_t)test_indices(c, idx, k); });
}
