/* blocked.h: a split-block Bloom filter, the storage of BlockedFilter.
 *
 * The bits are nblocks blocks of 64 bytes (one cache line, 64-byte aligned),
 * each block 8 lanes of 64 bits.  A key touches exactly one block:
 *
 *   h         = XXH3_64bits(key, seed 0)
 *   (h1, h2)  = (h, lb_mix64(h + 0x9e3779b97f4a7c15))     (lb_hash_blocked, hash.h)
 *   block     = floor(h1 * nblocks / 2^64)                 (lb_fastrange)
 *   round j (0 <= j < rounds) takes a 32-bit word y_j:
 *     y_0 = low 32 bits of h1, y_1 = high 32 bits of h2,
 *     y_j = high 32 bits of lb_mix64(h2 + j * 0x9e3779b97f4a7c15) for j >= 2
 *   and sets one bit in each lane i (0..7):
 *     bit index in lane i = (y_j * LB_BLOCKED_SALT[8 j + i] mod 2^32) >> 26
 *
 * so k = 8 * rounds bits per key (k in 8, 16, ..., 64) and m = 512 * nblocks.
 * Round 0's eight odd multipliers are those of the Parquet / Impala split-block
 * filter; the others are fixed constants (LB_BLOCKED_SALT).  Lane i of a block
 * is words[8 * block + i]; bit b of a lane is (word >> b) & 1.  A saved filter
 * holds the words in little-endian order.  This layout is part of the file
 * format (kind 4).
 *
 * Why this variant: 64-bit lanes make one AVX2 multiply (8 x 32 bits) and two
 * variable shifts (4 x 64 bits each) compute a whole round; rounds let k grow
 * past 8 for small error rates, where one bit per lane would cost much more
 * memory.  The block is picked from h1's high bits and y_0 from its low bits,
 * so for any filter below 2^32 blocks (256 GiB) the two do not overlap.
 *
 * Two implementations give the same bits: AVX2 (chosen at run time when the
 * CPU has it) and portable C.  SSE2 alone has neither a 32-bit lane multiply
 * nor per-lane variable shifts, so on x86-64 without AVX2 the portable code
 * (which the compiler vectorises where it can) is the baseline. */
#ifndef LB_BLOCKED_H
#define LB_BLOCKED_H

#include "common.h"
#include "hash.h"

#define LB_BLOCKED_BLOCK_BITS 512
#define LB_BLOCKED_LANES 8
#define LB_BLOCKED_MAX_ROUNDS (LB_MAX_K / LB_BLOCKED_LANES)
/* LB_MAX_BITS / 512: the most blocks a filter can have. */
#define LB_BLOCKED_MAX_BLOCKS (LB_MAX_BITS / LB_BLOCKED_BLOCK_BITS)

extern const uint32_t LB_BLOCKED_SALT[LB_MAX_K];

typedef struct {
    uint64_t *words;   /* 8 * nblocks lanes, 64-byte aligned */
    void *raw;         /* what was allocated (words is inside it) */
    size_t raw_len;    /* its length when it was mapped (huge pages); 0: malloc'd */
    uint64_t nblocks;
    uint32_t rounds;   /* k / 8 */
    uint64_t bits_set; /* kept up to date by every operation */
} lb_blocked;

/* m bits and k hash functions of a blocked filter: m a positive multiple of
 * 512 up to LB_MAX_BITS, k a multiple of 8 in 8..64.  LB_ERR_CAPACITY (m == 0
 * or not a multiple of 512), LB_ERR_RANGE (m > LB_MAX_BITS), LB_ERR_ARG (k). */
lb_status lb_blocked_check_geometry(uint64_t m, uint64_t k);

/* Allocates m / 512 zeroed blocks; (m, k) must have passed the check. */
lb_status lb_blocked_init(lb_blocked *b, uint64_t m, uint32_t k);
void lb_blocked_free(lb_blocked *b);
void lb_blocked_clear(lb_blocked *b);
uint64_t lb_blocked_popcount(const lb_blocked *b);

/* One hashed key: add returns 1 when at least one of its bits was 0; test 1
 * when all are set. */
int lb_blocked_add(lb_blocked *b, lb_hash_pair h);
int lb_blocked_test(const lb_blocked *b, lb_hash_pair h);

/* The same for one key's bytes, hashed here (one call from the binding). */
int lb_blocked_add_key(lb_blocked *b, const void *data, size_t len);
int lb_blocked_test_key(const lb_blocked *b, const void *data, size_t len);

/* Where one hashed key lives, for a store that is not an lb_blocked (a Redis
 * string in the same layout, csrc/redis/bitmap.c): its block, and the bits it has
 * in each of the block's 8 lanes (what add ORs in and test checks). */
static inline uint64_t lb_blocked_block_of(uint64_t nblocks, lb_hash_pair h)
{
    return lb_fastrange(h.h1, nblocks);
}
void lb_blocked_masks(uint32_t rounds, lb_hash_pair h, uint64_t mask[LB_BLOCKED_LANES]);

/* Batches over keys hashed already (lb_hash_blocked of each key's bytes, as the
 * binding hashes while it reads the keys): prefetch the block of keys a few
 * places ahead, then probe.  out (may be NULL for add) gets 1/0 per key. */
void lb_blocked_add_hashed(lb_blocked *b, const lb_hash_pair *pairs, size_t n, uint8_t *out);
void lb_blocked_test_hashed(const lb_blocked *b, const lb_hash_pair *pairs, size_t n,
                            uint8_t *out);

/* dst |= src, dst &= src (same geometry: the caller checks). */
void lb_blocked_or(lb_blocked *dst, const lb_blocked *src);
void lb_blocked_and(lb_blocked *dst, const lb_blocked *src);

/* The filter as bytes (words little endian, 64 * nblocks bytes), and back
 * (bits_set recounted). */
void lb_blocked_export(const lb_blocked *b, uint8_t *out);
void lb_blocked_import(lb_blocked *b, const uint8_t *in);

/* The bytes lb_blocked_export would write, without a copy where the words
 * already are those bytes (little-endian machines): *to_free is then NULL;
 * otherwise a malloc'd copy the caller frees.  NULL when that fails. */
const uint8_t *lb_blocked_bytes(const lb_blocked *b, uint8_t **to_free);

/* The false-positive rate of the filter as it is: the mean over its blocks of
 * the chance that a never-added key finds its bits set, prod over lanes of
 * (bits set in the lane / 64)^rounds. */
double lb_blocked_current_fpr(const lb_blocked *b);

/* The expected false-positive rate after n distinct keys with ideal hashing
 * (Putze et al.): each block's load L is Binomial(n, 1/nblocks); given L,
 * each lane holds rounds * L uniform bits and a new key's rounds bits in it
 * are all set with probability sum_j c_j (1 - j/64)^(rounds L) (inclusion-
 * exclusion over the distinct bits among its rounds); the eight lanes are
 * independent, so the rate is E_L[lane(L)^8], summed over every L whose
 * probability matters (12 standard deviations and more either side). */
double lb_blocked_fpr(uint64_t m, uint32_t k, uint64_t n);

/* The (m, k) of a filter for n keys at rate p: the fewest blocks for which
 * lb_blocked_fpr <= p, over every k = 8 .. 64 (the least memory; among equal
 * memory, the smallest k).  LB_ERR_CAPACITY (n == 0), LB_ERR_FPR (p outside
 * (0, 1)), LB_ERR_RANGE (more than LB_MAX_BITS would be needed). */
lb_status lb_blocked_size(uint64_t n, double p, uint64_t *m, uint64_t *k);

/* Which implementation runs: LB_BLOCKED_IMPL_AUTO picks AVX2 when the CPU has
 * it.  lb_blocked_set_impl returns LB_ERR_ARG for AVX2 on a machine (or a
 * build) without it.  For tests and benchmarks; not thread-safe against
 * filters in use. */
enum { LB_BLOCKED_IMPL_AUTO = 0, LB_BLOCKED_IMPL_PORTABLE = 1, LB_BLOCKED_IMPL_AVX2 = 2 };
lb_status lb_blocked_set_impl(int which);
/* "avx2" or "portable". */
const char *lb_blocked_impl_name(void);

#endif
