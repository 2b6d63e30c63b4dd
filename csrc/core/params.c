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

double lb_estimate_count(uint64_t m, uint32_t k, uint64_t bits_set)
{
    if (bits_set >= m)
        return INFINITY;
    return -((double)m / (double)k) * log1p(-(double)bits_set / (double)m);
}

double lb_fpr_bound(uint64_t m, uint32_t k, double n)
{
    if (n <= 0 || m == 0 || k == 0)
        return 0.0;
    const double md = (double)m;
    /* q = 1 - (1 - 1/m)^(k n): a given cell is set after k n probes. */
    const double q = m == 1 ? 1.0 : -expm1((double)k * n * log1p(-1.0 / md));
    /* P[d]: probability that the first j probes of a key cover d cells. */
    double P[LB_MAX_K + 1] = {1.0};
    if (k > LB_MAX_K)
        k = LB_MAX_K;
    for (uint32_t j = 0; j < k; j++) {
        for (uint32_t d = j + 1; d >= 1; d--) {
            double stay = P[d] * ((double)d / md);
            double fresh = P[d - 1] * ((md - (double)(d - 1)) / md);
            P[d] = stay + (fresh > 0 ? fresh : 0.0);
        }
        P[0] = 0.0;
    }
    double sum = 0.0, qd = 1.0;
    for (uint32_t d = 1; d <= k; d++) {
        qd *= q;
        sum += P[d] * qd;
    }
    return sum;
}

/* The smallest bound over the few k near the optimum ln(2) m / n. */
static double best_bound(uint64_t m, uint64_t n, uint64_t *k_out)
{
    double kopt = LN2 * (double)m / (double)n;
    double lo = floor(kopt) - 1.0, hi = ceil(kopt) + 1.0;
    if (lo < 1.0)
        lo = 1.0;
    if (hi > (double)LB_MAX_K)
        hi = (double)LB_MAX_K;
    if (lo > hi)
        lo = hi;
    double best = INFINITY;
    for (uint64_t k = (uint64_t)lo; k <= (uint64_t)hi; k++) {
        double b = lb_fpr_bound(m, (uint32_t)k, (double)n);
        if (b < best) {
            best = b;
            *k_out = k;
        }
    }
    return best;
}

lb_status lb_size(uint64_t n, double p, lb_hash_scheme scheme, double slack, uint64_t *m_out,
                  uint64_t *k_out)
{
    uint64_t m, k;
    lb_status st = lb_estimate(n, p, &m, &k);
    if (st != LB_OK || scheme != LB_HASH_XXH3_MIX || m > LB_MAX_BITS || k > LB_MAX_K) {
        if (st == LB_OK) {
            *m_out = m;
            *k_out = k;
        }
        return st;
    }
    const double target = p * slack;
    if (lb_fpr_bound(m, (uint32_t)k, (double)n) <= target) {
        *m_out = m;
        *k_out = k;
        return LB_OK;
    }
    /* Double until the bound holds, then bisect for the smallest such m. */
    uint64_t lo = m, hi = m, kk = k;
    for (;;) {
        if (hi >= LB_MAX_BITS)
            return LB_ERR_RANGE;
        hi = hi * 2 > LB_MAX_BITS ? LB_MAX_BITS : hi * 2;
        if (best_bound(hi, n, &kk) <= target)
            break;
        lo = hi;
    }
    while (hi - lo > 1) {
        uint64_t mid = lo + (hi - lo) / 2, km;
        if (best_bound(mid, n, &km) <= target)
            hi = mid;
        else
            lo = mid;
    }
    best_bound(hi, n, &kk);
    *m_out = hi;
    *k_out = kk;
    return LB_OK;
}
