/* bitarray.c: see bitarray.h. */
#include "bitarray.h"

#include <stdlib.h>
#include <string.h>

#include "hugealloc.h"

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
    b->shared = 0;
    b->raw = NULL;
    b->raw_len = 0;
    if (b->nbytes > SIZE_MAX)
        return LB_ERR_NOMEM;
    b->data = lb_huge_zalloc((size_t)b->nbytes, &b->raw, &b->raw_len);
    return b->data ? LB_OK : LB_ERR_NOMEM;
}

void lb_bits_free(lb_bits *b)
{
    lb_huge_free(b->raw, b->raw_len);
    b->raw = NULL;
    b->raw_len = 0;
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

/* The probes keep the data pointer, k and the count of fresh bits in locals: a
 * store through uint8_t * may alias anything, so b->data, g->k and b->bits_set
 * used in the loop would be reloaded (and bits_set read-modified-written)
 * after every probe, a store-to-load chain through memory per bit.  For the
 * xxh3 schemes the index walk is fused into the probe loop (no array);
 * ling-base keeps lb_indices.  Indices are the same either way. */

static inline unsigned set_bit_shared(uint8_t *d, uint64_t i);

static inline unsigned set_bit(uint8_t *d, uint64_t i)
{
#ifdef LB_ATOMIC_STORAGE
    return set_bit_shared(d, i); /* other threads set bits of this byte too */
#else
    uint8_t mask = (uint8_t)(0x80u >> (i & 7));
    uint8_t old = d[i >> 3];
    d[i >> 3] = old | mask;
    return !(old & mask);
#endif
}

/* set_bit for an array other processes map and add to: the byte is read first
 * (a set bit costs no write, so the line is not taken from the other cores), then
 * ORed atomically, so that two processes setting bits of one byte both keep theirs. */
static inline unsigned set_bit_shared(uint8_t *d, uint64_t i)
{
    uint8_t mask = (uint8_t)(0x80u >> (i & 7));
    if (__atomic_load_n(&d[i >> 3], __ATOMIC_RELAXED) & mask)
        return 0;
    return !(__atomic_fetch_or(&d[i >> 3], mask, __ATOMIC_RELAXED) & mask);
}

static inline int get_bit(const uint8_t *d, uint64_t i)
{
    return (LB_LOAD(&d[i >> 3]) >> (7 - (i & 7))) & 1;
}

/* FOR_EACH_INDEX(g, k, h, IDX, BODY): BODY once per index IDX of h, in order. */
#define FOR_EACH_INDEX(G, K, H, IDX, BODY)                                  \
    do {                                                                    \
        const uint64_t m_ = (G)->m;                                         \
        if (LB_LIKELY((G)->scheme == LB_HASH_XXH3_MIX)) {                   \
            uint64_t x_ = (H).h1;                                           \
            for (uint32_t i_ = 0; i_ < (K); i_++, x_ += (H).h2) {           \
                const uint64_t IDX = LB_MIX_INDEX(x_, m_);                  \
                BODY                                                        \
            }                                                               \
        } else if ((G)->scheme == LB_HASH_XXH3) {                           \
            uint64_t x_ = (H).h1;                                           \
            for (uint32_t i_ = 0; i_ < (K); i_++, x_ += (H).h2) {           \
                const uint64_t IDX = lb_fastrange(x_, m_);                  \
                BODY                                                        \
            }                                                               \
        } else {                                                            \
            uint64_t idx_[LB_MAX_K];                                        \
            lb_indices((G), (H), idx_);                                     \
            for (uint32_t i_ = 0; i_ < (K); i_++) {                         \
                const uint64_t IDX = idx_[i_];                              \
                BODY                                                        \
            }                                                               \
        }                                                                   \
    } while (0)

/* Sets the k bits of h; returns how many were 0. */
static inline unsigned add_pair(uint8_t *d, const lb_geometry *g, uint32_t k, lb_hash_pair h)
{
    unsigned fresh = 0;
    FOR_EACH_INDEX(g, k, h, ix, { fresh += set_bit(d, ix); });
    return fresh;
}

static inline int test_pair(const uint8_t *d, const lb_geometry *g, uint32_t k, lb_hash_pair h)
{
    FOR_EACH_INDEX(g, k, h, ix, {
        if (!get_bit(d, ix))
            return 0;
    });
    return 1;
}

/* test_pair without a branch per bit: all k loads issue at once and the
 * caller's branch on the result is the only one.  For a single key called
 * from Python, where the next key cannot be prefetched, an early exit costs
 * a mispredicted branch after each cache miss (lb_bits_test says when). */
static inline int test_pair_all(const uint8_t *d, const lb_geometry *g, uint32_t k,
                                lb_hash_pair h)
{
    unsigned all = 1;
    FOR_EACH_INDEX(g, k, h, ix, { all &= (unsigned)get_bit(d, ix); });
    return (int)all;
}

static inline unsigned add_pair_shared(uint8_t *d, const lb_geometry *g, uint32_t k,
                                       lb_hash_pair h)
{
    unsigned fresh = 0;
    FOR_EACH_INDEX(g, k, h, ix, { fresh += set_bit_shared(d, ix); });
    return fresh;
}

/* Compute the k indices of a hashed key into idx[] and prefetch their lines.
 * always_inline: GCC otherwise finds a function whose only effect is
 * __builtin_prefetch "const" and deletes the calls. */
static inline __attribute__((always_inline)) void index_and_prefetch(const uint8_t *d,
                                                                     const lb_geometry *g,
                                                                     uint32_t k, lb_hash_pair h,
                                                                     int write, uint64_t *idx)
{
    uint32_t n_ = 0;
    FOR_EACH_INDEX(g, k, h, ix, {
        idx[n_++] = ix;
        if (write)
            LB_PREFETCH_W(d + (ix >> 3));
        else
            LB_PREFETCH_R(d + (ix >> 3));
    });
}

/* Single keys, called one at a time from Python: nothing can be fetched
 * ahead of the next key, so the order of one key's k probes decides the wait.
 * Measured with a C loop and a Python loop at n = 1e6, p = 1% (1.1 MiB) and
 * n = 1e7, p = 0.1% (17 MiB):
 *   - a filter of up to a few MiB (its pages in the TLB, its lines in L2/L3):
 *     testing all k bits with one branch at the end was 8 ns faster per
 *     absent key from Python than an early exit (which mispredicts after each
 *     miss); adding bit after bit, as the batches' inner step does, was the
 *     quickest add;
 *   - a larger one (each probe a TLB and cache miss): the early exit won for
 *     absent keys (about 30 ns: it waits on one or two probes, not on k page
 *     walks), and an add that asks for all k lines first won by 20-70 ns.
 * LB_BITS_SPREAD is where one turns into the other. */
#define LB_BITS_SPREAD (UINT64_C(4) << 20)

int lb_bits_add(lb_bits *b, const lb_geometry *g, lb_hash_pair h)
{
    const uint32_t k = g->k;
    uint8_t *d = b->data;
    unsigned fresh = 0;
    if (b->nbytes > LB_BITS_SPREAD) {
        uint64_t idx[LB_MAX_K];
        index_and_prefetch(d, g, k, h, 1, idx);
        if (b->shared)
            for (uint32_t i = 0; i < k; i++)
                fresh += set_bit_shared(d, idx[i]);
        else
            for (uint32_t i = 0; i < k; i++)
                fresh += set_bit(d, idx[i]);
    }
    else
        fresh = b->shared ? add_pair_shared(d, g, k, h) : add_pair(d, g, k, h);
    LB_COUNT_ADD(&b->bits_set, fresh);
    return fresh != 0;
}

int lb_bits_test(const lb_bits *b, const lb_geometry *g, lb_hash_pair h)
{
    return b->nbytes > LB_BITS_SPREAD ? test_pair(b->data, g, g->k, h)
                                      : test_pair_all(b->data, g, g->k, h);
}

/* The batch walk shared by add and test: a ring of the k indices of the next
 * LB_AHEAD keys, computed (and their lines prefetched) when the key was
 * hashed, so that each index is derived once.  HASH(i) gives key i's pair:
 * hashed here from its bytes (KEY_PAIR), or before (GIVEN_PAIR: the binding
 * hashes while it reads the keys).  BODY sees idx, the indices of key number
 * key_no. */
#define LB_BATCH_WALK(D, G, HASH, N, WRITE, BODY)                                     \
    do {                                                                              \
        uint64_t ring_[LB_AHEAD][LB_MAX_K];                                           \
        const uint32_t k_ = (G)->k;                                                   \
        size_t ahead_ = (N) < LB_AHEAD ? (N) : LB_AHEAD;                              \
        for (size_t j_ = 0; j_ < ahead_; j_++)                                        \
            index_and_prefetch((D), (G), k_, HASH(j_), (WRITE), ring_[j_]);           \
        for (size_t j_ = 0; j_ < (N); j_++) {                                         \
            const uint64_t *const idx = ring_[j_ % LB_AHEAD];                         \
            size_t key_no = j_;                                                       \
            BODY                                                                      \
            size_t next_ = j_ + LB_AHEAD;                                             \
            if (next_ < (N))                                                          \
                index_and_prefetch((D), (G), k_, HASH(next_), (WRITE),                \
                                   ring_[j_ % LB_AHEAD]);                             \
        }                                                                             \
    } while (0)

#define KEY_PAIR(i) lb_hash(g->scheme, keys[(i)].data, keys[(i)].len)
#define GIVEN_PAIR(i) (pairs[(i)])

/* add and test over one source of pairs (keys, pairs). */
#define LB_BITS_BATCH_FNS(SRC, SRC_T, HASH)                                           \
    static void add_##SRC(lb_bits *b, const lb_geometry *g, const SRC_T *SRC, size_t n, \
                          uint8_t *out)                                               \
    {                                                                                 \
        uint8_t *const d = b->data;                                                   \
        uint64_t fresh_total = 0;                                                     \
        if (b->shared) {                                                              \
            LB_BATCH_WALK(d, g, HASH, n, 1, {                                         \
                unsigned fresh = 0;                                                   \
                for (uint32_t i = 0; i < k_; i++)                                     \
                    fresh += set_bit_shared(d, idx[i]);                               \
                fresh_total += fresh;                                                 \
                if (out)                                                              \
                    out[key_no] = (uint8_t)(fresh != 0);                              \
            });                                                                       \
        } else {                                                                      \
            LB_BATCH_WALK(d, g, HASH, n, 1, {                                         \
                unsigned fresh = 0;                                                   \
                for (uint32_t i = 0; i < k_; i++)                                     \
                    fresh += set_bit(d, idx[i]);                                      \
                fresh_total += fresh;                                                 \
                if (out)                                                              \
                    out[key_no] = (uint8_t)(fresh != 0);                              \
            });                                                                       \
        }                                                                             \
        LB_COUNT_ADD(&b->bits_set, fresh_total);                                      \
    }                                                                                 \
    static void test_##SRC(const lb_bits *b, const lb_geometry *g, const SRC_T *SRC,  \
                           size_t n, uint8_t *out)                                    \
    {                                                                                 \
        const uint8_t *const d = b->data;                                             \
        LB_BATCH_WALK(d, g, HASH, n, 0, {                                             \
            int all = 1;                                                              \
            for (uint32_t i = 0; i < k_; i++)                                         \
                all &= get_bit(d, idx[i]);                                            \
            out[key_no] = (uint8_t)all;                                               \
        });                                                                           \
    }

LB_BITS_BATCH_FNS(keys, lb_key, KEY_PAIR)
LB_BITS_BATCH_FNS(pairs, lb_hash_pair, GIVEN_PAIR)

void lb_bits_add_batch(lb_bits *b, const lb_geometry *g, const lb_key *keys, size_t n,
                       uint8_t *out)
{
    add_keys(b, g, keys, n, out);
}

void lb_bits_test_batch(const lb_bits *b, const lb_geometry *g, const lb_key *keys, size_t n,
                        uint8_t *out)
{
    test_keys(b, g, keys, n, out);
}

void lb_bits_add_hashed(lb_bits *b, const lb_geometry *g, const lb_hash_pair *pairs, size_t n,
                        uint8_t *out)
{
    add_pairs(b, g, pairs, n, out);
}

void lb_bits_test_hashed(const lb_bits *b, const lb_geometry *g, const lb_hash_pair *pairs,
                         size_t n, uint8_t *out)
{
    test_pairs(b, g, pairs, n, out);
}

void lb_bits_or(lb_bits *dst, const lb_bits *src)
{
    if (dst->shared)
        for (uint64_t i = 0; i < dst->nbytes; i++) {
            if (src->data[i])
                __atomic_fetch_or(&dst->data[i], src->data[i], __ATOMIC_RELAXED);
        }
    else
        for (uint64_t i = 0; i < dst->nbytes; i++)
            dst->data[i] |= src->data[i];
    dst->bits_set = lb_bits_popcount(dst);
}

void lb_bits_and(lb_bits *dst, const lb_bits *src)
{
    if (dst->shared)
        for (uint64_t i = 0; i < dst->nbytes; i++)
            __atomic_fetch_and(&dst->data[i], src->data[i], __ATOMIC_RELAXED);
    else
        for (uint64_t i = 0; i < dst->nbytes; i++)
            dst->data[i] &= src->data[i];
    dst->bits_set = lb_bits_popcount(dst);
}
