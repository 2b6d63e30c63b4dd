/* params.h: choosing m and k for n keys at false-positive rate p, and the
 * theory that goes with them. */
#ifndef LB_PARAMS_H
#define LB_PARAMS_H

#include "common.h"
#include "hash.h"

/* The ling-base Go library's Estimate, same formulas and rounding:
 *   m = ceil(n * -ln(p) / ln(2)^2),  k = max(1, ceil(ln(2) * m / n)).
 * LB_ERR_CAPACITY for n == 0 (checked first), LB_ERR_FPR unless 0 < p < 1,
 * LB_ERR_RANGE when m would not fit in 63 bits. */
lb_status lb_estimate(uint64_t n, double p, uint64_t *m, uint64_t *k);

/* An upper bound on the false-positive rate of m bits and k independent,
 * uniform indices per key after n distinct keys, exact enough to size small
 * filters by.  A never-added key's k probes cover D distinct cells (D < k when
 * probes repeat, which at small m is common: the asymptotic (1 - e^(-kn/m))^k
 * ignores it and undershoots, by 1.75x for n = 1, p = 0.01).  Each cell is
 * set with probability q = 1 - (1 - 1/m)^(kn), and the cells' states are
 * negatively associated, so P(false positive) <= E[q^D], computed exactly
 * from D's distribution.  Within 1% of the exact rate once m is a few
 * thousand bits; above it (never below) for smaller m. */
double lb_fpr_bound(uint64_t m, uint32_t k, double n);

/* The m and k a filter of the given scheme is built with for n keys at rate p.
 * ling-base and xxh3 (the unmixed walk) take lb_estimate's (m, k) unchanged, so
 * that Go services and its files agree on them.  xxh3-mix keeps Estimate's
 * (m, k) when lb_fpr_bound(m, k, n) <= p * slack, and otherwise takes the
 * smallest m (with the best k for it, k <= LB_MAX_K) whose bound is within
 * p * slack: only small n need it (n < about 1000 at slack 1.01).  Errors as
 * lb_estimate; LB_ERR_RANGE when no m up to LB_MAX_BITS will do.  Estimate's
 * k > LB_MAX_K is returned as is, for the caller's geometry check. */
/* The slack of fixed-size filters (memory, counting, Redis bitmap): Estimate's
 * rounding of k already puts (1 - e^(-kn/m))^k up to 1% above p at every n
 * (1.0039% at n = 10^6, p = 1%), and the filters keep Estimate's m there.  The
 * scalable chain's stages use slack 1: the chain's bound is exact. */
#define LB_FIXED_SLACK 1.01

lb_status lb_size(uint64_t n, double p, lb_hash_scheme scheme, double slack, uint64_t *m,
                  uint64_t *k);

/* Check a filter geometry: 1 <= m <= LB_MAX_BITS (else LB_ERR_CAPACITY or
 * LB_ERR_RANGE), 1 <= k <= LB_MAX_K (else LB_ERR_ARG). */
lb_status lb_check_geometry(uint64_t m, uint64_t k);

/* Swamidass and Baldi: -(m/k) ln(1 - bits_set/m), the number of distinct
 * keys that most likely set bits_set of m bits (+inf when all are set). */
double lb_estimate_count(uint64_t m, uint32_t k, uint64_t bits_set);

#endif
