/* hash.h: the three hashing schemes and the k bit indices they give a key
 * (and the split-block layout's key hash, LB_HASH_BLOCKED, whose walk is blocked.h's).
 *
 * Every scheme uses double hashing (Kirsch and Mitzenmacher): one key is hashed
 * once into a pair (h1, h2) and index i is derived from x_i = h1 + i*h2.
 *
 *   LB_HASH_XXH3_MIX (default, name "xxh3-mix")
 *     (h1, h2) = low and high 64 bits of XXH3_128bits(key, seed 0), h2 |= 1;
 *     index_i   = floor(mix64((h1 + i*h2) mod 2^64) * m / 2^64)
 *     mix64(x) = (x ^ (x >> 32)) * 0xd6e8feb86659fd93 mod 2^64 (lb_mix64), and
 *     the map to [0, m) is Lemire's multiply-shift.  Mixing each x_i before the multiply-shift is what makes the k
 *     indices behave as independent at every m, from 1 bit to 2^48: without it
 *     the indices of one key form an arithmetic progression in index space
 *     whose step, h2*m/2^64 mod m, lands near a whole number for about k/m of
 *     the keys, and those keys put several probes on one cell.
 *     XXH3's output is specified bit for bit on every platform, so indices are
 *     the same on every machine and Python version: a saved filter or a shared
 *     Redis bitmap stays valid.  This layout is part of the file format.
 *
 *   LB_HASH_XXH3 (name "xxh3": the unmixed walk, kept to read what
 *     it wrote)
 *     the same (h1, h2); index_i = floor(((h1 + i*h2) mod 2^64) * m / 2^64).
 *     Its probes collide within a key as described above: small filters
 *     measure up to 3.6x the false-positive rate of ideal hashing.  Files and
 *     Redis bitmaps record the scheme, so those made with it are read with it.
 *
 *   LB_HASH_LING_BASE (name "ling-base")
 *     bit-for-bit the Go library's hash.go:
 *     h1 = FNV-1a-64(key); h2 = FNV-1a-64(5a c3 91 d7 || key), 0 -> 0x9e3779b97f4a7c15;
 *     index_i = ((h1 + i*h2) mod 2^64) mod m
 *     Computed with two divisions per key (h1 % m and h2 % m) and an add-and-
 *     subtract walk per index, never a division per index.
 */
#ifndef LB_HASH_H
#define LB_HASH_H

#include "common.h"

/* The values are stored in saved filters: never renumber them. */
typedef enum {
    LB_HASH_XXH3 = 0,
    LB_HASH_LING_BASE = 1,
    LB_HASH_XXH3_MIX = 2,
    /* Not a walk of this file and never stored or parsed: the key hash of the
     * split-block layout (lb_hash_blocked), for lb_hash_to's callers that
     * hash a batch of keys by scheme.  lb_hash does not take it. */
    LB_HASH_BLOCKED = 3
} lb_hash_scheme;

#define LB_HASH_SCHEME_COUNT 3
#define LB_HASH_DEFAULT LB_HASH_XXH3_MIX

typedef struct {
    uint64_t h1, h2;
} lb_hash_pair;

/* Everything the index walk needs that depends only on the filter. */
typedef struct {
    uint64_t m;          /* number of bits (cells), >= 1 */
    uint32_t k;          /* number of indices, 1..LB_MAX_K */
    lb_hash_scheme scheme;
    uint64_t wrap;       /* 2^64 mod m, for the ling-base walk */
} lb_geometry;

/* The canonical name of a scheme ("xxh3-mix", "xxh3", "ling-base"), and back.
 * lb_hash_scheme_parse returns -1 for an unknown name. */
const char *lb_hash_scheme_name(lb_hash_scheme s);
int lb_hash_scheme_parse(const char *name);

/* Fill g; m >= 1 and 1 <= k <= LB_MAX_K are the caller's to check. */
void lb_geometry_init(lb_geometry *g, uint64_t m, uint32_t k, lb_hash_scheme s);

lb_hash_pair lb_hash_xxh3(const void *key, size_t len);
lb_hash_pair lb_hash_ling_base(const void *key, size_t len);

static inline lb_hash_pair lb_hash(lb_hash_scheme s, const void *key, size_t len)
{
    return s != LB_HASH_LING_BASE ? lb_hash_xxh3(key, len) : lb_hash_ling_base(key, len);
}

/* lb_hash written to *out: for a caller that fills an array of pairs (the
 * pair goes straight to its place, not through a returned struct).  Takes
 * LB_HASH_BLOCKED too. */
void lb_hash_to(lb_hash_scheme s, const void *key, size_t len, lb_hash_pair *out);

/* One xor-shift-multiply round: a bijection of 64-bit words that is not
 * linear in x (the xor folds the high half into the low half, the multiply by
 * an odd constant spreads the low half into the high bits that the multiply-
 * shift below keeps).  Where x_i = h1 + i*h2 steps by a near-whole number of
 * cells, the x_i >> 32 term does not, so the probes of one key scatter.
 * Chosen by measurement (benchmarks/fpr_table.py --small, bench_index_walk.py):
 * averaged over many filters it matches ideal hashing from m = 10 bits up, at
 * 3-5% of the unmixed walk's batch time, where SplitMix64's two-round finalizer
 * measured no more accurate at 17-23%. */
static inline uint64_t lb_mix64(uint64_t x)
{
    return (x ^ (x >> 32)) * UINT64_C(0xd6e8feb86659fd93);
}

/* floor(x * m / 2^64): x in [0, 2^64) onto [0, m) without a division. */
static inline uint64_t lb_fastrange(uint64_t x, uint64_t m)
{
    return (uint64_t)(((unsigned __int128)x * m) >> 64);
}

/* Index i of the xxh3-mix walk, given x_i = h1 + i*h2. */
#define LB_MIX_INDEX(x, m) lb_fastrange(lb_mix64(x), (m))

/* The key hash of the split-block layout (blocked.h, BlockedFilter and the
 * blocked RedisFilter): one 64-bit XXH3 of the key, h = XXH3_64bits(key,
 * seed 0), as the pair
 *     h1 = h,   h2 = lb_mix64(h + 0x9e3779b97f4a7c15)
 * A key's block and its round words need no more than 64 hashed bits (the
 * block comes from h1's high bits, round 0 from its low 32 bits, the other
 * rounds from h2), and XXH3-64 is cheaper than XXH3-128 on short keys: 3.2-3.4
 * against 4.9-5.2 ns on "user:N" keys (benchmarks/hash_cost.c), and a per-key test from
 * Python at n = 1e7 ran up to twice as fast, the call being short enough for
 * the CPU to start the next key's block read while one is outstanding.
 * lb_blocked_pair is the derivation, for a caller that hashed already. */
static inline lb_hash_pair lb_blocked_pair(uint64_t h)
{
    lb_hash_pair p = {h, lb_mix64(h + UINT64_C(0x9e3779b97f4a7c15))};
    return p;
}
lb_hash_pair lb_hash_blocked(const void *key, size_t len);

/* The k indices of a hashed key, written to out[0..k-1]. */
static inline void lb_indices(const lb_geometry *g, lb_hash_pair h, uint64_t *out)
{
    const uint64_t m = g->m;
    const uint32_t k = g->k;
    if (g->scheme == LB_HASH_XXH3_MIX) {
        uint64_t x = h.h1;
        for (uint32_t i = 0; i < k; i++, x += h.h2)
            out[i] = LB_MIX_INDEX(x, m);
    } else if (g->scheme == LB_HASH_XXH3) {
        uint64_t x = h.h1;
        for (uint32_t i = 0; i < k; i++, x += h.h2)
            out[i] = lb_fastrange(x, m);
    } else {
        /* r tracks ((h1 + i*h2) mod 2^64) mod m.  Each step adds h2 mod m;
         * when h1 + i*h2 wraps past 2^64 the true value loses 2^64, so r
         * loses 2^64 mod m. */
        uint64_t x = h.h1;
        uint64_t r = h.h1 % m;
        const uint64_t d = h.h2 % m;
        const uint64_t w = g->wrap;
        for (uint32_t i = 0; i < k; i++) {
            out[i] = r;
            uint64_t nx = x + h.h2;
            unsigned __int128 s = (unsigned __int128)r + d;
            if (s >= m)
                s -= m;
            r = (uint64_t)s;
            if (nx < x)
                r = r >= w ? r - w : r + (m - w);
            x = nx;
        }
    }
}

#endif
