/* counters.c: see counters.h. */
#include "counters.h"

#include <stdlib.h>
#include <string.h>

lb_status lb_counters_init(lb_counters *c, uint64_t m)
{
    c->m = m;
    c->nbytes = (m + 1) / 2;
    c->nonzero = 0;
    if (c->nbytes > SIZE_MAX)
        return LB_ERR_NOMEM;
    c->data = calloc((size_t)c->nbytes ? (size_t)c->nbytes : 1, 1);
    return c->data ? LB_OK : LB_ERR_NOMEM;
}

void lb_counters_free(lb_counters *c)
{
    free(c->data);
    c->data = NULL;
}

void lb_counters_clear(lb_counters *c)
{
    memset(c->data, 0, (size_t)c->nbytes);
    c->nonzero = 0;
}

void lb_counters_recount(lb_counters *c)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < c->m; i++)
        n += lb_counter_get(c, i) != 0;
    c->nonzero = n;
}

void lb_counters_merge(lb_counters *dst, const lb_counters *src, int sum)
{
    uint64_t n = 0;
    for (uint64_t i = 0; i < dst->m; i++) {
        unsigned a = lb_counter_get(dst, i), b = lb_counter_get(src, i);
        unsigned v = sum ? (a + b > LB_COUNTER_MAX ? LB_COUNTER_MAX : a + b) : (a < b ? a : b);
        lb_counter_put(dst, i, v);
        n += v != 0;
    }
    dst->nonzero = n;
}

static int test_indices(const lb_counters *c, const uint64_t *idx, uint32_t k)
{
    for (uint32_t i = 0; i < k; i++)
        if (lb_counter_get(c, idx[i]) == 0)
            return 0;
    return 1;
}

static int add_indices(lb_counters *c, const uint64_t *idx, uint32_t k)
{
    int was_present = test_indices(c, idx, k);
    for (uint32_t i = 0; i < k; i++) {
        unsigned v = lb_counter_get(c, idx[i]);
        if (v < LB_COUNTER_MAX) {
            c->nonzero += v == 0;
            lb_counter_put(c, idx[i], v + 1);
        }
    }
    return !was_present;
}

int lb_counters_add(lb_counters *c, const lb_geometry *g, lb_hash_pair h)
{
    uint64_t idx[LB_MAX_K];
    lb_indices(g, h, idx);
    return add_indices(c, idx, g->k);
}

int lb_counters_test(const lb_counters *c, const lb_geometry *g, lb_hash_pair h)
{
    uint64_t idx[LB_MAX_K];
    lb_indices(g, h, idx);
    return test_indices(c, idx, g->k);
}

int lb_counters_remove(lb_counters *c, const lb_geometry *g, lb_hash_pair h)
{
    uint64_t idx[LB_MAX_K];
    lb_indices(g, h, idx);
    if (!test_indices(c, idx, g->k))
        return 0;
    for (uint32_t i = 0; i < g->k; i++) {
        unsigned v = lb_counter_get(c, idx[i]);
        /* v > 0 here unless an index repeats and an earlier step of this
         * loop took its cell to zero; never go below zero, never touch 15. */
        if (v > 0 && v < LB_COUNTER_MAX) {
            lb_counter_put(c, idx[i], v - 1);
            c->nonzero -= v == 1;
        }
    }
    return 1;
}

unsigned lb_counters_count(const lb_counters *c, const lb_geometry *g, lb_hash_pair h)
{
    uint64_t idx[LB_MAX_K];
    lb_indices(g, h, idx);
    unsigned least = LB_COUNTER_MAX;
    for (uint32_t i = 0; i < g->k; i++) {
        unsigned v = lb_counter_get(c, idx[i]);
        if (v < least)
            least = v;
    }
    return least;
}

void lb_counters_add_hashed(lb_counters *c, const lb_geometry *g, const lb_hash_pair *pairs,
                            size_t n, uint8_t *out)
{
    for (size_t j = 0; j < n; j++) {
        int r = lb_counters_add(c, g, pairs[j]);
        if (out)
            out[j] = (uint8_t)r;
    }
}

void lb_counters_test_hashed(const lb_counters *c, const lb_geometry *g,
                             const lb_hash_pair *pairs, size_t n, uint8_t *out)
{
    for (size_t j = 0; j < n; j++)
        out[j] = (uint8_t)lb_counters_test(c, g, pairs[j]);
}
