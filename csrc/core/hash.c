/* hash.c: the two hashing schemes (see hash.h). */
#include "hash.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static const char *const scheme_names[LB_HASH_SCHEME_COUNT] = {"xxh3", "ling-base", "xxh3-mix"};

const char *lb_hash_scheme_name(lb_hash_scheme s)
{
    return (unsigned)s < LB_HASH_SCHEME_COUNT ? scheme_names[s] : "unknown";
}

int lb_hash_scheme_parse(const char *name)
{
    for (int i = 0; i < LB_HASH_SCHEME_COUNT; i++)
        if (strcmp(name, scheme_names[i]) == 0)
            return i;
    return -1;
}

void lb_geometry_init(lb_geometry *g, uint64_t m, uint32_t k, lb_hash_scheme s)
{
    g->m = m;
    g->k = k;
    g->scheme = s;
    /* 2^64 mod m without 128-bit division: (2^64 - m) mod m. */
    g->wrap = m ? (0 - m) % m : 0;
}

lb_hash_pair lb_hash_xxh3(const void *key, size_t len)
{
    XXH128_hash_t h = XXH3_128bits(key, len);
    lb_hash_pair p = {h.low64, h.high64 | 1};
    return p;
}

void lb_hash_to(lb_hash_scheme s, const void *key, size_t len, lb_hash_pair *out)
{
    if (s == LB_HASH_BLOCKED)
        *out = lb_hash_blocked(key, len);
    else if (s != LB_HASH_LING_BASE) {
        XXH128_hash_t h = XXH3_128bits(key, len);
        out->h1 = h.low64;
        out->h2 = h.high64 | 1;
    }
    else
        *out = lb_hash_ling_base(key, len);
}

lb_hash_pair lb_hash_blocked(const void *key, size_t len)
{
    return lb_blocked_pair(XXH3_64bits(key, len));
}

#define FNV_OFFSET UINT64_C(14695981039346656037)
#define FNV_PRIME UINT64_C(1099511628211)

static inline uint64_t fnv1a_update(uint64_t h, const unsigned char *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= FNV_PRIME;
    }
    return h;
}

lb_hash_pair lb_hash_ling_base(const void *key, size_t len)
{
    static const unsigned char salt[4] = {0x5a, 0xc3, 0x91, 0xd7};
    lb_hash_pair p;
    p.h1 = fnv1a_update(FNV_OFFSET, key, len);
    p.h2 = fnv1a_update(fnv1a_update(FNV_OFFSET, salt, 4), key, len);
    if (p.h2 == 0)
        p.h2 = UINT64_C(0x9e3779b97f4a7c15);
    return p;
}
