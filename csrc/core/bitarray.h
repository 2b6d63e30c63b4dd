/* bitarray.h: a plain bit array, the storage of MemoryFilter and of each
 * stage of ScalableFilter.
 *
 * Bit i is bit 7 - i%8 of byte i/8 (most significant bit first): the order
 * Redis uses for SETBIT, so the bytes of a filter equal the Redis string of a
 * RedisFilter with the same keys, m, k and hash. */
#ifndef LB_BITARRAY_H
#define LB_BITARRAY_H

#include "common.h"
#include "hash.h"

typedef struct {
    uint8_t *data;
    uint64_t m;        /* bits */
    uint64_t nbytes;   /* ceil(m / 8) */
    uint64_t bits_set; /* kept up to date by every operation (of this process: a
                          shared array counts with lb_bits_popcount) */
    int shared;        /* the bytes are mapped by other processes too: bits are set
                          with atomic OR, so concurrent adds never lose a bit */
    void *raw;         /* what lb_bits_init allocated (data is inside it), for lb_bits_free */
    size_t raw_len;    /* its length when it was mapped (huge pages); 0: calloc'd */
} lb_bits;

/* Allocates ceil(m/8) zeroed bytes (from 4 MiB on, on transparent huge pages:
 * hugealloc.h); m must have passed lb_check_geometry. */
lb_status lb_bits_init(lb_bits *b, uint64_t m);
void lb_bits_free(lb_bits *b);
void lb_bits_clear(lb_bits *b);
uint64_t lb_bits_popcount(const lb_bits *b);

/* One hashed key.  add returns 1 when at least one bit was 0 (the key was
 * not present); test returns 1 when all k bits are set. */
int lb_bits_add(lb_bits *b, const lb_geometry *g, lb_hash_pair h);
int lb_bits_test(const lb_bits *b, const lb_geometry *g, lb_hash_pair h);

/* Batches: hash every key, prefetch the cache lines of keys a few places
 * ahead, then probe.  out (may be NULL for add) gets 1/0 per key.  The
 * binding hashes as it reads its keys (the _hashed pair below); these two are
 * the floor benchmarks/floor.c measures (bench_index_walk.py --floor). */
void lb_bits_add_batch(lb_bits *b, const lb_geometry *g, const lb_key *keys, size_t n,
                       uint8_t *out);
void lb_bits_test_batch(const lb_bits *b, const lb_geometry *g, const lb_key *keys, size_t n,
                        uint8_t *out);
/* The same over keys hashed already (lb_hash with g's scheme), for a caller
 * that hashes while it reads its keys: same bits, same out. */
void lb_bits_add_hashed(lb_bits *b, const lb_geometry *g, const lb_hash_pair *pairs, size_t n,
                        uint8_t *out);
void lb_bits_test_hashed(const lb_bits *b, const lb_geometry *g, const lb_hash_pair *pairs,
                         size_t n, uint8_t *out);

/* dst |= src / dst &= src; same m required (the caller checks k and hash).
 * A shared dst gets src's bits with atomic OR (and AND). */
void lb_bits_or(lb_bits *dst, const lb_bits *src);
void lb_bits_and(lb_bits *dst, const lb_bits *src);

#endif
