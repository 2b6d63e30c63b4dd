/* hash.h: the two hashing schemes and the k bit indices they give a key.
 *
 * Both schemes use double hashing (Kirsch and Mitzenmacher): one key is hashed
 * once into a pair (h1, h2) and index i is derived from h1 + i*h2.
 *
 *   LB_HASH_XXH3 (default, name "xxh3")
 *     (h1, h2) = low and high 64 bits of XXH3_128bits(key, seed 0), h2 |= 1;
 *     index_i   = floor(((h1 + i*h2) mod 2^64) * m / 2^64)   (Lemire's fastrange)
 *     XXH3's output is specified bit for bit on every platform, so indices are
 *     the same on every machine and Python version: a saved filter or a shared
 *     Redis bitmap stays valid.  This layout is part of the file format.
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

typedef enum {
    LB_HASH_XXH3 = 0,
    LB_HASH_LING_BASE = 1
} lb_hash_scheme;

#define LB_HASH_SCHEME_COUNT 2

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

/* The canonical name of a scheme ("xxh3", "ling-base"), and back.
 * lb_hash_scheme_parse returns -1 for an unknown name. */
const char *lb_hash_scheme_name(lb_hash_scheme s);
int lb_hash_scheme_parse(const char *name);

/* Fill g; m >= 1 and 1 <= k <= LB_MAX_K are the caller's to check. */
void lb_geometry_init(lb_geometry *g, uint64_t m, uint32_t k, lb_hash_scheme s);

lb_hash_pair lb_hash_xxh3(const void *key, size_t len);
lb_hash_pair lb_hash_ling_base(const void *key, size_t len);

static inline lb_hash_pair lb_hash(lb_hash_scheme s, const void *key, size_t len)
{
    return s == LB_HASH_XXH3 ? lb_hash_xxh3(key, len) : lb_hash_ling_base(key, len);
}

/* The k indices of a hashed key, written to out[0..k-1]. */
static inline void lb_indices(const lb_geometry *g, lb_hash_pair h, uint64_t *out)
{
    const uint64_t m = g->m;
    const uint32_t k = g->k;
    if (g->scheme == LB_HASH_XXH3) {
        uint64_t x = h.h1;
        for (uint32_t i = 0; i < k; i++) {
            out[i] = (uint64_t)(((unsigned __int128)x * m) >> 64);
            x += h.h2;
        }
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
