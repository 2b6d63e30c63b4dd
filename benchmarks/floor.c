/* floor.c: the speed no Python binding of ling_bloom's MemoryFilter (or of its
 * BlockedFilter) can beat.
 *
 * Runs the core's own hashing (lb_hash, XXH3-128 or ling-base) and probes
 * (lb_bits_add / lb_bits_test, and the prefetching batch walk
 * lb_bits_add_batch / lb_bits_test_batch) over keys already in memory, with no
 * Python in the loop.  With LAYOUT "blocked" it runs the split-block layout
 * instead, as BlockedFilter does: lb_blocked_add_key / lb_blocked_test_key per
 * key; a batch hashes every key first (lb_hash_blocked), then adds or tests the
 * pairs in chunks (lb_blocked_add_hashed / lb_blocked_test_hashed), as the
 * binding's batch does; SCHEME is then not used.  bench_memory.py builds it
 * against csrc/core and runs it on the same keys the Python filters get.
 *
 *   floor PRESENT_FILE SAMPLE_FILE ABSENT_FILE M K SCHEME REPEAT [LAYOUT]
 *
 * PRESENT_FILE holds the n keys to add, SAMPLE_FILE the present keys the tests
 * are timed on (bench_memory.py's sample), ABSENT_FILE the keys never added.
 *
 * A key file is: a little-endian uint64 count N, N little-endian uint32
 * lengths, then the N keys' bytes back to back (the UTF-8 of a str key, or a
 * bytes key as it is).
 *
 * Timing mirrors bench_memory.py: the n present keys are added to a fresh
 * filter in REPEAT equal slices, each slice timed, and the median slice is
 * reported (so every slice runs against a filter of realistic fill); tests
 * run REPEAT times over the sample / the absent keys, median reported.
 * Prints one JSON object, times in ns per key. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bitarray.h"
#include "blocked.h"
#include "hash.h"

typedef struct {
    char *buf;
    lb_key *keys;
    size_t n;
} keyset;

static void die(const char *what)
{
    perror(what);
    exit(2);
}

static uint64_t read_le(const unsigned char *p, int bytes)
{
    uint64_t v = 0;
    for (int i = bytes - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static void load_keys(const char *path, keyset *ks)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        die(path);
    if (fseek(f, 0, SEEK_END) != 0)
        die("fseek");
    long size = ftell(f);
    rewind(f);
    ks->buf = malloc((size_t)size + 1);
    if (!ks->buf || fread(ks->buf, 1, (size_t)size, f) != (size_t)size)
        die("read keys");
    fclose(f);
    const unsigned char *p = (const unsigned char *)ks->buf;
    if (size < 8)
        goto bad;
    uint64_t n = read_le(p, 8);
    if (n > ((uint64_t)size - 8) / 4)
        goto bad;
    ks->n = (size_t)n;
    ks->keys = malloc((ks->n ? ks->n : 1) * sizeof(lb_key));
    if (!ks->keys)
        die("malloc");
    size_t off = 8 + 4 * ks->n;
    for (size_t i = 0; i < ks->n; i++) {
        size_t len = (size_t)read_le(p + 8 + 4 * i, 4);
        if (len == 0 || off + len > (size_t)size)
            goto bad;
        ks->keys[i].data = ks->buf + off;
        ks->keys[i].len = len;
        off += len;
    }
    return;
bad:
    fprintf(stderr, "%s: not a key file\n", path);
    exit(2);
}

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Keeps a result alive so the compiler cannot drop a test loop. */
static volatile size_t sink;

/* Per key, as MemoryFilter.add / `in` do it: hash, walk, probe. */
static void add_one_by_one(lb_bits *b, const lb_geometry *g, const lb_key *k, size_t n)
{
    size_t fresh = 0;
    for (size_t i = 0; i < n; i++)
        fresh += (size_t)lb_bits_add(b, g, lb_hash(g->scheme, k[i].data, k[i].len));
    sink = fresh;
}

static size_t test_one_by_one(const lb_bits *b, const lb_geometry *g, const lb_key *k, size_t n)
{
    size_t hits = 0;
    for (size_t i = 0; i < n; i++)
        hits += (size_t)lb_bits_test(b, g, lb_hash(g->scheme, k[i].data, k[i].len));
    return hits;
}

/* In chunks, as the binding's batch driver hands them to the core. */
#define CHUNK 2048

static void add_batch(lb_bits *b, const lb_geometry *g, const lb_key *k, size_t n, uint8_t *out)
{
    for (size_t s = 0; s < n; s += CHUNK)
        lb_bits_add_batch(b, g, k + s, n - s < CHUNK ? n - s : CHUNK, out);
}

static size_t test_batch(const lb_bits *b, const lb_geometry *g, const lb_key *k, size_t n,
                         uint8_t *out)
{
    size_t hits = 0;
    for (size_t s = 0; s < n; s += CHUNK) {
        size_t len = n - s < CHUNK ? n - s : CHUNK;
        lb_bits_test_batch(b, g, k + s, len, out);
        for (size_t i = 0; i < len; i++)
            hits += out[i];
    }
    return hits;
}

/* The split-block layout, as BlockedFilter's methods call it. */
static void blocked_add_one_by_one(lb_blocked *b, const lb_key *k, size_t n)
{
    size_t fresh = 0;
    for (size_t i = 0; i < n; i++)
        fresh += (size_t)lb_blocked_add_key(b, k[i].data, k[i].len);
    sink = fresh;
}

static size_t blocked_test_one_by_one(const lb_blocked *b, const lb_key *k, size_t n)
{
    size_t hits = 0;
    for (size_t i = 0; i < n; i++)
        hits += (size_t)lb_blocked_test_key(b, k[i].data, k[i].len);
    return hits;
}

/* A batch as the binding runs it: one pass hashes every key into pairs, then
 * the pairs go to the core in chunks. */
static size_t blocked_batch(lb_blocked *b, int add, const lb_key *k, size_t n,
                            lb_hash_pair *pairs, uint8_t *out)
{
    size_t hits = 0;
    for (size_t i = 0; i < n; i++)
        pairs[i] = lb_hash_blocked(k[i].data, k[i].len);
    for (size_t s = 0; s < n; s += CHUNK) {
        size_t len = n - s < CHUNK ? n - s : CHUNK;
        if (add)
            lb_blocked_add_hashed(b, pairs + s, len, NULL);
        else {
            lb_blocked_test_hashed(b, pairs + s, len, out);
            for (size_t i = 0; i < len; i++)
                hits += out[i];
        }
    }
    return hits;
}

typedef struct {
    double add, test_present, test_absent;
    size_t hits_present, hits_absent;
} result;

static void run(int batch, int blocked, const keyset *present, const keyset *sample,
                const keyset *absent, const lb_geometry *g, int repeat, result *r)
{
    double t[64];
    uint8_t out[CHUNK];
    lb_bits b;
    lb_blocked bb;
    lb_hash_pair *pairs = NULL;
    if (blocked) {
        if (lb_blocked_init(&bb, g->m, g->k) != LB_OK)
            die("lb_blocked_init");
        size_t most = present->n;
        if (sample->n > most)
            most = sample->n;
        if (absent->n > most)
            most = absent->n;
        pairs = malloc((most ? most : 1) * sizeof *pairs);
        if (!pairs)
            die("malloc");
    }
    else if (lb_bits_init(&b, g->m) != LB_OK)
        die("lb_bits_init");
    size_t n = present->n;
    for (int s = 0; s < repeat; s++) {
        size_t lo = n * (size_t)s / (size_t)repeat, hi = n * (size_t)(s + 1) / (size_t)repeat;
        double t0 = now_ns();
        if (blocked && batch)
            blocked_batch(&bb, 1, present->keys + lo, hi - lo, pairs, out);
        else if (blocked)
            blocked_add_one_by_one(&bb, present->keys + lo, hi - lo);
        else if (batch)
            add_batch(&b, g, present->keys + lo, hi - lo, out);
        else
            add_one_by_one(&b, g, present->keys + lo, hi - lo);
        t[s] = (now_ns() - t0) / (double)(hi - lo ? hi - lo : 1);
    }
    r->add = median(t, repeat);
    const keyset *sets[2] = {sample, absent};
    for (int which = 0; which < 2; which++) {
        const keyset *ks = sets[which];
        size_t hits = 0;
        for (int s = 0; s < repeat; s++) {
            double t0 = now_ns();
            if (blocked)
                hits = batch ? blocked_batch(&bb, 0, ks->keys, ks->n, pairs, out)
                             : blocked_test_one_by_one(&bb, ks->keys, ks->n);
            else
                hits = batch ? test_batch(&b, g, ks->keys, ks->n, out)
                             : test_one_by_one(&b, g, ks->keys, ks->n);
            t[s] = (now_ns() - t0) / (double)(ks->n ? ks->n : 1);
        }
        double med = median(t, repeat);
        if (which == 0) {
            r->test_present = med;
            r->hits_present = hits;
        }
        else {
            r->test_absent = med;
            r->hits_absent = hits;
        }
    }
    if (blocked) {
        lb_blocked_free(&bb);
        free(pairs);
    }
    else
        lb_bits_free(&b);
}

int main(int argc, char **argv)
{
    if (argc != 8 && argc != 9) {
        fprintf(stderr,
                "usage: %s PRESENT_FILE SAMPLE_FILE ABSENT_FILE M K SCHEME REPEAT [LAYOUT]\n",
                argv[0]);
        return 2;
    }
    int blocked = 0;
    if (argc == 9) {
        if (strcmp(argv[8], "blocked") == 0)
            blocked = 1;
        else if (strcmp(argv[8], "standard") != 0) {
            fprintf(stderr, "LAYOUT is standard or blocked\n");
            return 2;
        }
    }
    keyset present, sample, absent;
    load_keys(argv[1], &present);
    load_keys(argv[2], &sample);
    load_keys(argv[3], &absent);
    uint64_t m = strtoull(argv[4], NULL, 10);
    uint32_t k = (uint32_t)strtoul(argv[5], NULL, 10);
    int scheme = lb_hash_scheme_parse(argv[6]);
    int repeat = atoi(argv[7]);
    if (m == 0 || k == 0 || (!blocked && k > LB_MAX_K) || scheme < 0 || repeat < 1 || repeat > 64 ||
        (blocked && lb_blocked_check_geometry(m, k) != LB_OK)) {
        fprintf(stderr, "bad arguments\n");
        return 2;
    }
    lb_geometry g;
    lb_geometry_init(&g, m, k, (lb_hash_scheme)scheme);
    result one, batch;
    run(0, blocked, &present, &sample, &absent, &g, repeat, &one);
    run(1, blocked, &present, &sample, &absent, &g, repeat, &batch);
    /* Every present key tests present, and per key and batch agree: a floor that
     * did not would time something other than the filter. */
    if (one.hits_present != sample.n || batch.hits_present != sample.n ||
        one.hits_absent != batch.hits_absent) {
        fprintf(stderr, "wrong answers: %zu and %zu of %zu present keys found, %zu and %zu "
                "absent keys\n", one.hits_present, batch.hits_present, sample.n,
                one.hits_absent, batch.hits_absent);
        return 3;
    }
    printf("{\"layout\": \"%s\", \"n\": %zu, \"sample\": %zu, \"absent\": %zu, \"m\": %llu, "
           "\"k\": %u, \"scheme\": \"%s\", "
           "\"nbytes\": %llu, "
           "\"add\": %.3f, \"test_present\": %.3f, \"test_absent\": %.3f, "
           "\"batch_add\": %.3f, \"batch_test_present\": %.3f, \"batch_test_absent\": %.3f, "
           "\"hits_present\": %zu, \"hits_absent\": %zu, "
           "\"batch_hits_present\": %zu, \"batch_hits_absent\": %zu}\n",
           blocked ? "blocked" : "standard", present.n, sample.n, absent.n, (unsigned long long)m,
           k, blocked ? "xxh3-block" : lb_hash_scheme_name(g.scheme),
           (unsigned long long)((m + 7) / 8), one.add, one.test_present, one.test_absent,
           batch.add, batch.test_present, batch.test_absent, one.hits_present,
           one.hits_absent, batch.hits_present, batch.hits_absent);
    free(present.buf);
    free(present.keys);
    free(sample.buf);
    free(sample.keys);
    free(absent.buf);
    free(absent.keys);
    return 0;
}
