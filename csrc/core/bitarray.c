/* bitarray.c: see bitarray.h. */
#include "bitarray.h"

#include <stdlib.h>
#include <string.h>

/* How many keys ahead a batch hashes and prefetches.  Eight keys of k <= 16
 * lines keep the memory system busy without overflowing its fill buffers. */
#ifndef LB_AHEAD
#define LB_AHEAD 8
#endif

lb_status lb_bits_init(lb_bits *b, uint64_t m)
{
    b->m = m;
    b->nbytes = (m + 7) / 8;
    b->bits_set = 0;
    if (b->nbytes > SIZE_MAX)
        return LB_ERR_NOMEM;
    b->data = calloc((size_t)b->nbytes ? (size_t)b->nbytes : 1, 1);
    return b->data ? LB_OK : LB_ERR_NOMEM;
}

void lb_bits_free(lb_bits *b)
{
    free(b->data);
    b->data = NULL;
}

void lb_bits_clear(lb_bits *b)
{
    memset(b->data, 0, (size_t)b->nbytes);
    b->bits_set = 0;
}

uint64_t lb_bits_popcount(const lb_bits *b)
{
    uint64_t total = 0;
    size_t n = (size_t)b->nbytes, i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, b->data + i, 8);
        total += (uint64_t)__builtin_popcountll(w);
    }
    for (; i < n; i++)
        total += (uint64_t)__builtin_popcount(b->data[i]);
    return total;
}

int lb_bits_add(lb_bits *b, const lb_geometry *g, lb_hash_pair h)
{
    uint64_t idx[LB_MAX_K];
    lb_indices(g, h, idx);
    int flipped = 0;
    for (uint32_t i = 0; i < g->k; i++)
        flipped |= lb_bits_set(b, idx[i]);
    return flipped;
}

int lb_bits_test(const lb_bits *b, const lb_geometry *g, lb_hash_pair h)
{
    uint64_t idx[LB_MAX_K];
    lb_indices(g, h, idx);
    for (uint32_t i = 0; i < g->k; i++)
        if (!lb_bits_get(b, idx[i]))
            return 0;
    return 1;
}

/* The batch walk shared by add and test: a ring of LB_AHEAD keys whose
 * indices are computed and whose lines are prefetched before they are used. */
#define LB_BATCH_WALK(B, G, KEYS, N, PREFETCH, BODY)                                   \
    do {                                                                             \
        uint64_t ring_[LB_AHEAD][LB_MAX_K];                                          \
        const uint32_t k_ = (G)->k;                                                  \
        size_t ahead_ = (N) < LB_AHEAD ? (N) : LB_AHEAD;                              \
        for (size_t j_ = 0; j_ < ahead_; j_++) {                                     \
            lb_indices((G), lb_hash((G)->scheme, (KEYS)[j_].data, (KEYS)[j_].len),   \
                       ring_[j_]);                                                   \
            for (uint32_t i_ = 0; i_ < k_; i_++)                                     \
                PREFETCH(&(B)->data[ring_[j_][i_] >> 3]);                            \
        }                                                                            \
        for (size_t j_ = 0; j_ < (N); j_++) {                                        \
            uint64_t *idx = ring_[j_ % LB_AHEAD];                                    \
            size_t key_no = j_;                                                      \
            BODY                                                                     \
            size_t next_ = j_ + LB_AHEAD;                                            \
            if (next_ < (N)) {                                                       \
                lb_indices((G),                                                      \
                           lb_hash((G)->scheme, (KEYS)[next_].data, (KEYS)[next_].len), \
                           idx);                                                     \
                for (uint32_t i_ = 0; i_ < k_; i_++)                                 \
                    PREFETCH(&(B)->data[idx[i_] >> 3]);                              \
            }                                                                        \
        }                                                                            \
    } while (0)

void lb_bits_add_batch(lb_bits *b, const lb_geometry *g, const lb_key *keys, size_t n,
                       uint8_t *out)
{
    LB_BATCH_WALK(b, g, keys, n, LB_PREFETCH_W, {
        int flipped = 0;
        for (uint32_t i = 0; i < k_; i++)
            flipped |= lb_bits_set(b, idx[i]);
        if (out)
            out[key_no] = (uint8_t)flipped;
    });
}

void lb_bits_test_batch(const lb_bits *b, const lb_geometry *g, const lb_key *keys, size_t n,
                        uint8_t *out)
{
    LB_BATCH_WALK(b, g, keys, n, LB_PREFETCH_R, {
        int all = 1;
        for (uint32_t i = 0; i < k_; i++)
            all &= lb_bits_get(b, idx[i]);
        out[key_no] = (uint8_t)all;
    });
}

void lb_bits_or(lb_bits *dst, const lb_bits *src)
{
    for (uint64_t i = 0; i < dst->nbytes; i++)
        dst->data[i] |= src->data[i];
    dst->bits_set = lb_bits_popcount(dst);
}

void lb_bits_and(lb_bits *dst, const lb_bits *src)
{
    for (uint64_t i = 0; i < dst->nbytes; i++)
        dst->data[i] &= src->data[i];
    dst->bits_set = lb_bits_popcount(dst);
}
