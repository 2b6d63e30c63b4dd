/* params.h: choosing m and k for n keys at false-positive rate p, and the
 * theory that goes with them. */
#ifndef LB_PARAMS_H
#define LB_PARAMS_H

#include "common.h"

/* ling-base's Estimate, same formulas and rounding:
 *   m = ceil(n * -ln(p) / ln(2)^2),  k = max(1, ceil(ln(2) * m / n)).
 * LB_ERR_CAPACITY for n == 0 (checked first), LB_ERR_FPR unless 0 < p < 1,
 * LB_ERR_RANGE when m would not fit in 63 bits. */
lb_status lb_estimate(uint64_t n, double p, uint64_t *m, uint64_t *k);

/* Check a filter geometry: 1 <= m <= LB_MAX_BITS (else LB_ERR_CAPACITY or
 * LB_ERR_RANGE), 1 <= k <= LB_MAX_K (else LB_ERR_ARG). */
lb_status lb_check_geometry(uint64_t m, uint64_t k);

/* (1 - e^(-k n / m))^k: the expected rate after n distinct keys. */
double lb_theoretical_fpr(uint64_t m, uint32_t k, double n);

/* Swamidass and Baldi: -(m/k) ln(1 - bits_set/m), the number of distinct
 * keys that most likely set bits_set of m bits (+inf when all are set). */
double lb_estimate_count(uint64_t m, uint32_t k, uint64_t bits_set);

#endif
