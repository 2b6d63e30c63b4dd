/* hash_cost.c: what hashing one key costs, for each key hash of the core.
 *
 *   gcc -O2 -Icsrc/core -o /tmp/hash_cost benchmarks/hash_cost.c && /tmp/hash_cost
 *
 * 1,000,000 keys "user:N" packed in one buffer, hashed in a loop five times:
 * XXH3-128 as the standard filters take it (lb_hash_xxh3) against XXH3-64 and
 * the derived word of the split-block layout (lb_blocked_pair, hash.h).  ns
 * per key, each line one repetition; the sum keeps the compiler from dropping
 * the work. */
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "hash.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(void)
{
    const int n = 1000000;
    char *buf = malloc((size_t)n * 16);
    int *len = malloc((size_t)n * sizeof *len);
    if (!buf || !len)
        return 1;
    for (int i = 0; i < n; i++)
        len[i] = snprintf(buf + 16 * i, 16, "user:%d", i);
    uint64_t sum = 0;
    for (int r = 0; r < 5; r++) {
        double t0 = now();
        for (int i = 0; i < n; i++) {
            XXH128_hash_t h = XXH3_128bits(buf + 16 * i, (size_t)len[i]);
            sum += h.low64 ^ (h.high64 | 1);
        }
        double t1 = now();
        for (int i = 0; i < n; i++) {
            lb_hash_pair p = lb_blocked_pair(XXH3_64bits(buf + 16 * i, (size_t)len[i]));
            sum += p.h1 ^ p.h2;
        }
        double t2 = now();
        printf("XXH3-128: %.2f ns   XXH3-64 + derived word: %.2f ns\n", (t1 - t0) / n * 1e9,
               (t2 - t1) / n * 1e9);
    }
    printf("(sum %llu)\n", (unsigned long long)(sum & 1));
    free(buf);
    free(len);
    return 0;
}
