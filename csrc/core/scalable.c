/* scalable.c: see scalable.h. */
#include "scalable.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "params.h"

lb_status lb_scalable_check(uint64_t initial_capacity, double error_rate, double growth,
                            double fpr_ratio)
{
    if (initial_capacity == 0)
        return LB_ERR_CAPACITY;
    if (!(error_rate > 0.0 && error_rate < 1.0))
        return LB_ERR_FPR;
    if (!(growth > 1.0 && growth <= LB_SCALABLE_MAX_GROWTH))
        return LB_ERR_ARG;
    if (!(fpr_ratio > 0.0 && fpr_ratio < 1.0))
        return LB_ERR_ARG;
    return LB_OK;
}

/* Stage i's capacity and rate: the part of its parameters that costs no
 * sizing. */
static lb_status stage_capacity_rate(const lb_scalable *s, uint32_t i, uint64_t *capacity,
                                     double *rate)
{
    double cap = round((double)s->initial_capacity * pow(s->growth, (double)i));
    if (!(cap >= 1.0 && cap < (double)LB_MAX_BITS))
        return LB_ERR_RANGE;
    double p = s->error_rate * (1.0 - s->fpr_ratio) * pow(s->fpr_ratio, (double)i);
    /* Past the stage whose rate would need more than 64 hash functions, every
     * stage gets 2^-63 (k = 63): together they add less than 1e-15, and the
     * chain goes on growing (up to LB_SCALABLE_MAX_STAGES) as long as the sum
     * of its stages' rates stays within error_rate (lb_scalable_push_stage). */
    if (!(p >= LB_SCALABLE_MIN_STAGE_RATE))
        p = LB_SCALABLE_MIN_STAGE_RATE;
    *capacity = (uint64_t)cap;
    *rate = p;
    return LB_OK;
}

lb_status lb_scalable_stage_params(const lb_scalable *s, uint32_t i, uint64_t *capacity,
                                   double *rate, uint64_t *m, uint64_t *k)
{
    lb_status st = stage_capacity_rate(s, i, capacity, rate);
    if (st != LB_OK)
        return st;
    st = lb_size(*capacity, *rate, s->scheme, 1.0, m, k);
    if (st != LB_OK)
        return LB_ERR_RANGE;
    st = lb_check_geometry(*m, *k);
    return st == LB_OK ? LB_OK : LB_ERR_RANGE;
}

lb_status lb_scalable_stage_least(const lb_scalable *s, uint32_t i, uint64_t *capacity,
                                  double *rate, uint64_t *m_least)
{
    lb_status st = stage_capacity_rate(s, i, capacity, rate);
    if (st != LB_OK)
        return st;
    /* lb_size starts from Estimate's m and only ever goes up from it. */
    uint64_t k;
    if (lb_estimate(*capacity, *rate, m_least, &k) != LB_OK || *m_least > LB_MAX_BITS)
        return LB_ERR_RANGE;
    return LB_OK;
}

lb_status lb_scalable_push_stage(lb_scalable *s)
{
    uint64_t capacity, m, k;
    double rate;
    if (s->nstages >= LB_SCALABLE_MAX_STAGES)
        return LB_ERR_RANGE;
    lb_status st = lb_scalable_stage_params(s, s->nstages, &capacity, &rate, &m, &k);
    if (st != LB_OK)
        return st;
    /* A stage raised to the floor rate must not take the chain past its bound. */
    double total = rate;
    for (uint32_t i = 0; i < s->nstages; i++)
        total += s->stages[i].error_rate;
    if (total > s->error_rate * (1.0 + 1e-9))
        return LB_ERR_RANGE;
    if (s->nstages == s->cap) {
        /* Not realloc: the array is copied, then swapped in, then the old one
         * freed, so that s->stages points to a whole array at every moment
         * (a process forked while another thread grows the chain inherits
         * either array, never a freed one). */
        uint32_t ncap = s->cap ? s->cap * 2 : 4;
        lb_stage *ns = malloc((size_t)ncap * sizeof(*ns));
        if (!ns)
            return LB_ERR_NOMEM;
        lb_stage *old = s->stages;
        if (s->nstages)
            memcpy(ns, old, (size_t)s->nstages * sizeof(*ns));
        s->stages = ns;
        s->cap = ncap;
        free(old);
    }
    lb_stage *stage = &s->stages[s->nstages];
    st = lb_bits_init(&stage->bits, m);
    if (st != LB_OK)
        return st;
    lb_geometry_init(&stage->geo, m, (uint32_t)k, s->scheme);
    stage->capacity = capacity;
    stage->count = 0;
    stage->error_rate = rate;
    s->nstages++;
    return LB_OK;
}

lb_status lb_scalable_init(lb_scalable *s, uint64_t initial_capacity, double error_rate,
                           double growth, double fpr_ratio, lb_hash_scheme scheme)
{
    memset(s, 0, sizeof(*s));
    lb_status st = lb_scalable_check(initial_capacity, error_rate, growth, fpr_ratio);
    if (st != LB_OK)
        return st;
    s->initial_capacity = initial_capacity;
    s->error_rate = error_rate;
    s->growth = growth;
    s->fpr_ratio = fpr_ratio;
    s->scheme = scheme;
    st = lb_scalable_push_stage(s);
    if (st != LB_OK)
        lb_scalable_free(s);
    return st;
}

void lb_scalable_free(lb_scalable *s)
{
    for (uint32_t i = 0; i < s->nstages; i++)
        lb_bits_free(&s->stages[i].bits);
    free(s->stages);
    s->stages = NULL;
    s->nstages = s->cap = 0;
}

lb_status lb_scalable_reset(lb_scalable *s)
{
    /* Stage 0 is kept and cleared, so reset cannot fail half-way. */
    for (uint32_t i = 1; i < s->nstages; i++)
        lb_bits_free(&s->stages[i].bits);
    s->nstages = 1;
    lb_bits_clear(&s->stages[0].bits);
    s->stages[0].count = 0;
    return LB_OK;
}

static int test_hashed(const lb_scalable *s, lb_hash_pair h)
{
    /* Newest first: it holds most keys, so present keys stop early. */
    for (uint32_t i = s->nstages; i-- > 0;)
        if (lb_bits_test(&s->stages[i].bits, &s->stages[i].geo, h))
            return 1;
    return 0;
}

static lb_status add_hashed(lb_scalable *s, lb_hash_pair h, int *added)
{
    if (test_hashed(s, h)) {
        *added = 0;
        return LB_OK;
    }
    lb_stage *cur = &s->stages[s->nstages - 1];
    if (cur->count >= cur->capacity) {
        lb_status st = lb_scalable_push_stage(s);
        if (st != LB_OK)
            return st;
        cur = &s->stages[s->nstages - 1];
    }
    lb_bits_add(&cur->bits, &cur->geo, h);
    cur->count++;
    *added = 1;
    return LB_OK;
}

lb_status lb_scalable_add(lb_scalable *s, const void *key, size_t len, int *added)
{
    return add_hashed(s, lb_hash(s->scheme, key, len), added);
}

int lb_scalable_test(const lb_scalable *s, const void *key, size_t len)
{
    return test_hashed(s, lb_hash(s->scheme, key, len));
}

lb_status lb_scalable_add_hashed(lb_scalable *s, const lb_hash_pair *pairs, size_t n,
                                 uint8_t *out, size_t *done)
{
    for (size_t j = 0; j < n; j++) {
        int added;
        lb_status st = add_hashed(s, pairs[j], &added);
        if (st != LB_OK) {
            *done = j;
            return st;
        }
        if (out)
            out[j] = (uint8_t)added;
    }
    *done = n;
    return LB_OK;
}

void lb_scalable_test_hashed(const lb_scalable *s, const lb_hash_pair *pairs, size_t n,
                             uint8_t *out)
{
    for (size_t j = 0; j < n; j++)
        out[j] = (uint8_t)test_hashed(s, pairs[j]);
}

uint64_t lb_scalable_count(const lb_scalable *s)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->nstages; i++)
        n += s->stages[i].count;
    return n;
}

uint64_t lb_scalable_capacity(const lb_scalable *s)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->nstages; i++)
        n += s->stages[i].capacity;
    return n;
}

uint64_t lb_scalable_nbytes(const lb_scalable *s)
{
    uint64_t n = 0;
    for (uint32_t i = 0; i < s->nstages; i++)
        n += s->stages[i].bits.nbytes;
    return n;
}

double lb_scalable_current_fpr(const lb_scalable *s)
{
    double pass = 1.0;
    for (uint32_t i = 0; i < s->nstages; i++) {
        const lb_stage *st = &s->stages[i];
        double fill = (double)st->bits.bits_set / (double)st->bits.m;
        pass *= 1.0 - pow(fill, (double)st->geo.k);
    }
    return 1.0 - pass;
}
