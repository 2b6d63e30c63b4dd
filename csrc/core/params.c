/* params.c: see params.h. */
#include "params.h"

#include <math.h>

/* Go's math.Ln2 * math.Ln2 is a constant expression: computed exactly, then
 * rounded once to this double.  Multiplying the two doubles in C would round
 * twice and could differ in the last bit. */
#define LN2 0.693147180559945309417232121458176568
#define LN2_SQUARED 0.48045301391820144

lb_status lb_estimate(uint64_t n, double p, uint64_t *m_out, uint64_t *k_out)
{
    if (n == 0)
        return LB_ERR_CAPACITY;
    if (!(p > 0.0 && p < 1.0))
        return LB_ERR_FPR;
    double m = ceil((double)n * -log(p) / LN2_SQUARED);
    if (!(m < 9223372036854775808.0)) /* 2^63 */
        return LB_ERR_RANGE;
    double k = ceil(LN2 * m / (double)n);
    if (k < 1.0)
        k = 1.0;
    *m_out = (uint64_t)m;
    *k_out = (uint64_t)k;
    return LB_OK;
}

lb_status lb_check_geometry(uint64_t m, uint64_t k)
{
    if (m == 0)
        return LB_ERR_CAPACITY;
    if (m > LB_MAX_BITS)
        return LB_ERR_RANGE;
    if (k == 0 || k > LB_MAX_K)
        return LB_ERR_ARG;
    return LB_OK;
}

double lb_theoretical_fpr(uint64_t m, uint32_t k, double n)
{
    if (n <= 0)
        return 0.0;
    return pow(-expm1(-(double)k * n / (double)m), (double)k);
}

double lb_estimate_count(uint64_t m, uint32_t k, uint64_t bits_set)
{
    if (bits_set >= m)
        return INFINITY;
    return -((double)m / (double)k) * log1p(-(double)bits_set / (double)m);
}
