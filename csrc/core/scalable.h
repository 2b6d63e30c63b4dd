/* scalable.h: a scalable Bloom filter (Almeida, Baquero, Preguica and Hutchison,
 * 2007): a chain of bit arrays that grows as keys arrive.
 *
 * error_rate is the bound the whole chain keeps, as in RedisBloom and the
 * paper: stage i is built for rate error_rate * (1 - r) * r^i (r = fpr_ratio),
 * and those rates sum to at most error_rate however many stages there are.
 * (the ling-base Go library's option means the rate of the first stage alone; its chain's
 * bound is p0 / (1 - r), ten times more with the defaults.)
 * Stage i holds round(initial_capacity * s^i) keys (s = growth_ratio) before
 * the next one is added.  (A stage rate below 2^-63 is raised to it: see
 * lb_scalable_stage_params.)
 *
 * A key is hashed once; each stage derives its own k_i indices for its own m_i
 * from that one hash pair.  add tests every stage first, so adding a key that
 * is present changes nothing (ling-base re-inserts it into the newest stage). */
#ifndef LB_SCALABLE_H
#define LB_SCALABLE_H

#include "bitarray.h"
#include "common.h"
#include "hash.h"

/* A chain stops growing here (LB_ERR_RANGE).  With fpr_ratio 0.9 the stage
 * rates need more than 64 hash functions after about 360 stages anyway. */
#define LB_SCALABLE_MAX_STAGES 4096
/* The largest growth_ratio.  It bounds what growing can ask for: the next
 * stage needs at most about 63 * growth_ratio times the memory of the largest
 * stage there is (63 bits per key at the floor rate against at least one),
 * so a saved chain (format.h) cannot make its first growth allocate more
 * than a small multiple of the file it came from. */
#define LB_SCALABLE_MAX_GROWTH 64.0
/* The smallest rate a stage is built for: 2^-63, which needs k = 63. */
#define LB_SCALABLE_MIN_STAGE_RATE 1.0842021724855044e-19

typedef struct {
    lb_bits bits;
    lb_geometry geo;
    uint64_t capacity;  /* keys this stage takes before the next is added */
    uint64_t count;     /* keys added to it (each tested absent in every stage) */
    double error_rate;  /* the rate it was sized for */
} lb_stage;

typedef struct {
    lb_stage *stages;
    uint32_t nstages, cap;
    uint64_t initial_capacity;
    double error_rate, growth, fpr_ratio;
    lb_hash_scheme scheme;
} lb_scalable;

/* Check the parameters: LB_ERR_CAPACITY (n0 == 0), LB_ERR_FPR (error rate
 * outside (0,1)), LB_ERR_ARG (growth outside (1, LB_SCALABLE_MAX_GROWTH], or
 * fpr_ratio outside (0,1)). */
lb_status lb_scalable_check(uint64_t initial_capacity, double error_rate, double growth,
                            double fpr_ratio);
/* Check, then build the chain with its first stage. */
lb_status lb_scalable_init(lb_scalable *s, uint64_t initial_capacity, double error_rate,
                           double growth, double fpr_ratio, lb_hash_scheme scheme);
void lb_scalable_free(lb_scalable *s);
/* Drop every stage but a fresh first one (LB_ERR_NOMEM leaves s unchanged). */
lb_status lb_scalable_reset(lb_scalable *s);

/* The capacity, rate and geometry stage i gets. */
lb_status lb_scalable_stage_params(const lb_scalable *s, uint32_t i, uint64_t *capacity,
                                   double *rate, uint64_t *m, uint64_t *k);
/* Stage i's capacity and rate, as lb_scalable_stage_params gives them, and a
 * lower bound of its m (Estimate's m, which the sizing never goes below), in
 * far less time: the sizing of a small stage searches (xxh3-mix), this does
 * not.  LB_ERR_RANGE only for a stage that lb_scalable_stage_params refuses
 * too (it may refuse more: a k past LB_MAX_K, a search that finds no m). */
lb_status lb_scalable_stage_least(const lb_scalable *s, uint32_t i, uint64_t *capacity,
                                  double *rate, uint64_t *m_least);
/* Append stage i = nstages (used by growth and by loading). */
lb_status lb_scalable_push_stage(lb_scalable *s);

/* *added = 1 when the key was absent from every stage and is now in the
 * newest; growing may fail (LB_ERR_NOMEM, LB_ERR_RANGE), then nothing changed. */
lb_status lb_scalable_add(lb_scalable *s, const void *key, size_t len, int *added);
int lb_scalable_test(const lb_scalable *s, const void *key, size_t len);

/* Batches over keys hashed already (lb_hash with s->scheme); add stops at the
 * first failure, *done telling how many keys were handled. */
lb_status lb_scalable_add_hashed(lb_scalable *s, const lb_hash_pair *pairs, size_t n,
                                 uint8_t *out, size_t *done);
void lb_scalable_test_hashed(const lb_scalable *s, const lb_hash_pair *pairs, size_t n,
                             uint8_t *out);

uint64_t lb_scalable_count(const lb_scalable *s);
uint64_t lb_scalable_capacity(const lb_scalable *s);
uint64_t lb_scalable_nbytes(const lb_scalable *s);
/* 1 - prod(1 - f_i) over the stages, f_i each stage's rate at its fill. */
double lb_scalable_current_fpr(const lb_scalable *s);

#endif
