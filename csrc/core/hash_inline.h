/* hash_inline.h: each scheme's key hash as an inline function, for a loop that
 * hashes key after key (the binding's batch reader): XXH3 inlined, no call
 * per key; the loop picks its scheme once.  The same pairs as
 * lb_hash_to (hash.h). */
#ifndef LB_HASH_INLINE_H
#define LB_HASH_INLINE_H

#include "hash.h"

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#endif
#include <xxhash.h>

/* xxh3-mix and xxh3: the low and high halves of XXH3-128, h2 odd. */
static inline lb_hash_pair lb_pair_xxh3(const void *key, size_t len)
{
    XXH128_hash_t h = XXH3_128bits(key, len);
    lb_hash_pair p = {h.low64, h.high64 | 1};
    return p;
}

/* The split-block layout's pair (lb_hash_blocked). */
static inline lb_hash_pair lb_pair_blocked(const void *key, size_t len)
{
    return lb_blocked_pair(XXH3_64bits(key, len));
}

#endif
