/* test_bitmap.c: RedisFilter's operations (csrc/redis/bitmap.c) against a
 * real redis-server started on a free port of 127.0.0.1.
 * Run: make -C tests/c test   (or: tests/c/test_bitmap [name-filter]) */
#include "client_helpers.h"

#include <stdint.h>

#include "bitmap.h"
#include "blocked.h"
#include "hash.h"
#include "reply.h"


#include "ling_base_vectors.inc"

static lb_bitmap *bm_new(lb_redis *r, const char *key, uint64_t m, uint32_t k,
                               lb_hash_scheme s, int64_t ttl_ms)
{
    lb_geometry g;
    lb_bitmap *bm = NULL;
    lb_geometry_init(&g, m, k, s);
    lb_redis_status st = lb_bitmap_new(r, key, strlen(key), &g, ttl_ms, &bm);
    if (st != LB_REDIS_OK)
        fprintf(stderr, "bitmap_new: %s\n", lb_redis_errstr(r));
    return bm;
}

/* keys "<prefix><i>" for i in [from, from+n) */
typedef struct {
    lb_key *keys;
    char *store;
    size_t n;
} keyset;

static keyset mk_keys(const char *prefix, size_t from, size_t n)
{
    keyset ks;
    ks.n = n;
    ks.keys = malloc(n * sizeof *ks.keys);
    ks.store = malloc(n * 48);
    for (size_t i = 0; i < n; i++) {
        char *p = ks.store + i * 48;
        int len = snprintf(p, 48, "%s%zu", prefix, from + i);
        ks.keys[i].data = p;
        ks.keys[i].len = (size_t)len;
    }
    return ks;
}

static void free_keys(keyset *ks)
{
    free(ks->keys);
    free(ks->store);
}

static size_t count_ones(const uint8_t *v, size_t n)
{
    size_t c = 0;
    for (size_t i = 0; i < n; i++)
        c += v[i] != 0;
    return c;
}

static int redis_getbit(lb_redis *r, const char *key, uint64_t off)
{
    char line[256];
    snprintf(line, sizeof line, "GETBIT %s %llu", key, (unsigned long long)off);
    return (int)cmd_int(r, line);
}

static void test_bm_names(void)
{
    lb_redis *r = conn_port(srv.port, 2000);
    struct {
        const char *key, *part1, *meta;
    } cases[] = {
        {"bf:users", "{bf:users}:part:1", "{bf:users}:meta"},
        {"bf:{users}", "bf:{users}:part:1", "bf:{users}:meta"},
        {"{a}b{c}", "{a}b{c}:part:1", "{a}b{c}:meta"},
        /* empty tag, and a '}': a tag of the key's slot */
        {"a{}b", "{AG@C}a{}b:part:1", "{AG@C}a{}b:meta"},
        /* "{}" first: no tag (Redis does not look further) */
        {"a{}b{c}", "{AHCF}a{}b{c}:part:1", "{AHCF}a{}b{c}:meta"},
        {"a{b", "{a{b}:part:1", "{a{b}:meta"},       /* no closing brace */
        {"x}y", "{BN@B}x}y:part:1", "{BN@B}x}y:meta"}, /* a tag of the key's slot */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        lb_bitmap *bm = bm_new(r, cases[i].key, (UINT64_C(1) << 33) + 5, 3, LB_HASH_XXH3, 0);
        char buf[128];
        size_t n = lb_bitmap_key_name(bm, 0, buf, sizeof buf);
        CHECK(n == strlen(cases[i].key) && memcmp(buf, cases[i].key, n) == 0);
        n = lb_bitmap_key_name(bm, 1, buf, sizeof buf);
        CHECK_MSG(n == strlen(cases[i].part1) && memcmp(buf, cases[i].part1, n) == 0, "%.*s",
                  (int)n, buf);
        n = lb_bitmap_key_name(bm, UINT64_MAX, buf, sizeof buf);
        CHECK_MSG(n == strlen(cases[i].meta) && memcmp(buf, cases[i].meta, n) == 0, "%.*s",
                  (int)n, buf);
        CHECK(lb_bitmap_nparts(bm) == 3);
        lb_bitmap_free(bm);
    }
    /* argument errors */
    lb_geometry g;
    lb_bitmap *bm;
    lb_geometry_init(&g, 0, 3, LB_HASH_XXH3);
    CHECK(lb_bitmap_new(r, "k", 1, &g, 0, &bm) == LB_REDIS_ERR_ARG && bm == NULL);
    lb_geometry_init(&g, 100, 0, LB_HASH_XXH3);
    CHECK(lb_bitmap_new(r, "k", 1, &g, 0, &bm) == LB_REDIS_ERR_ARG);
    lb_geometry_init(&g, 100, 3, LB_HASH_XXH3);
    CHECK(lb_bitmap_new(r, "", 0, &g, 0, &bm) == LB_REDIS_ERR_ARG);
    CHECK(lb_bitmap_new(r, "k", 1, &g, -1, &bm) == LB_REDIS_ERR_ARG);
    CHECK(lb_redis_roundtrip_count(r) == 0); /* nothing was sent */
    lb_redis_free(r);
}

static void test_bm_roundtrip(void)
{
    lb_redis *r = conn_port(srv.port, 5000);
    lb_bitmap *a = bm_new(r, "t:rt:a", 20000, 7, LB_HASH_XXH3, 0);
    lb_bitmap *b = bm_new(r, "t:rt:b", 20000, 7, LB_HASH_XXH3, 0);
    lb_bitmap_set_mode(b, LB_BITMAP_SETBIT);
    lb_bitmap_set_chunk_keys(b, 37); /* many chunks */
    keyset in = mk_keys("member:", 0, 1000), out = mk_keys("other:", 0, 2000);
    uint8_t *res = malloc(2000), *res2 = malloc(2000);

    /* empty batch: nothing is sent at all */
    CHECK(lb_bitmap_add(a, in.keys, 0, res) == LB_REDIS_OK);
    CHECK(lb_redis_roundtrip_count(r) == 0);

    CHECK(lb_bitmap_add(a, in.keys, in.n, res) == LB_REDIS_OK);
    CHECK(lb_redis_roundtrip_count(r) == 3); /* meta look + claim, then one round trip */
    size_t newcount = count_ones(res, in.n);
    CHECK_MSG(newcount >= 990, "%zu new", newcount);
    CHECK(lb_bitmap_add(b, in.keys, in.n, res2) == LB_REDIS_OK);
    CHECK(memcmp(res, res2, in.n) == 0);
    /* same bitmap bit for bit, both ways */
    lb_reply *x, *y;
    char va[4096];
    CHECK(cmd(r, &x, "GET t:rt:a") == LB_REDIS_OK && x->type == LB_REPLY_STRING);
    size_t la = x->len;
    memcpy(va, x->str, la < sizeof va ? la : sizeof va);
    CHECK(cmd(r, &y, "GET t:rt:b") == LB_REDIS_OK && y->len == la && memcmp(va, y->str, la) == 0);

    /* again: nothing is new */
    CHECK(lb_bitmap_add(a, in.keys, in.n, res) == LB_REDIS_OK && count_ones(res, in.n) == 0);
    CHECK(lb_bitmap_add(b, in.keys, in.n, res) == LB_REDIS_OK && count_ones(res, in.n) == 0);
    /* all present, few false positives */
    CHECK(lb_bitmap_test(a, in.keys, in.n, res) == LB_REDIS_OK && count_ones(res, in.n) == in.n);
    CHECK(lb_bitmap_test(b, in.keys, in.n, res) == LB_REDIS_OK && count_ones(res, in.n) == in.n);
    CHECK(lb_bitmap_test(a, out.keys, out.n, res) == LB_REDIS_OK);
    CHECK(lb_bitmap_test(b, out.keys, out.n, res2) == LB_REDIS_OK);
    CHECK(memcmp(res, res2, out.n) == 0);
    CHECK_MSG(count_ones(res, out.n) < 20, "%zu false positives", count_ones(res, out.n));
    /* a duplicate within one batch: new, then not */
    lb_key dup[2] = {{"dup!", 4}, {"dup!", 4}};
    CHECK(lb_bitmap_add(a, dup, 2, res) == LB_REDIS_OK && res[0] == 1 && res[1] == 0);
    /* update-style call without results */
    CHECK(lb_bitmap_add(a, out.keys, 10, NULL) == LB_REDIS_OK);
    CHECK(lb_bitmap_test(a, out.keys, 10, res) == LB_REDIS_OK && count_ones(res, 10) == 10);
    /* an empty key in a batch: nothing sent */
    unsigned long rt = lb_redis_roundtrip_count(r);
    lb_key bad[2] = {{"ok", 2}, {"", 0}};
    CHECK(lb_bitmap_add(a, bad, 2, res) == LB_REDIS_ERR_ARG);
    CHECK(lb_redis_roundtrip_count(r) == rt);
    /* one round trip per call */
    CHECK(lb_bitmap_test(a, in.keys, 1, res) == LB_REDIS_OK);
    CHECK(lb_redis_roundtrip_count(r) == rt + 1);

    /* reset: empty, geometry kept, meta still there */
    CHECK(lb_bitmap_reset(a) == LB_REDIS_OK);
    CHECK(cmd_int(r, "BITCOUNT t:rt:a") == 1); /* the canary alone */
    CHECK(cmd_int(r, "EXISTS {t:rt:a}:meta") == 1);
    CHECK(lb_bitmap_test(a, in.keys, in.n, res) == LB_REDIS_OK && count_ones(res, in.n) == 0);
    uint64_t bits = 1;
    CHECK(lb_bitmap_bitcount(a, &bits) == LB_REDIS_OK && bits == 0);
    CHECK(lb_bitmap_bitcount(b, &bits) == LB_REDIS_OK && bits > 5000);

    /* a huge batch goes in bounded chunks: 50k keys, chunk 10000 -> 5 round trips */
    keyset huge = mk_keys("huge:", 0, 50000);
    uint8_t *hr = malloc(50000);
    rt = lb_redis_roundtrip_count(r);
    lb_bitmap *h = bm_new(r, "t:rt:huge", 500000, 7, LB_HASH_XXH3, 0);
    CHECK(lb_bitmap_add(h, huge.keys, huge.n, hr) == LB_REDIS_OK);
    CHECK(lb_redis_roundtrip_count(r) == rt + 2 + 5);
    CHECK(count_ones(hr, huge.n) > 49000);
    CHECK(lb_bitmap_test(h, huge.keys, huge.n, hr) == LB_REDIS_OK && count_ones(hr, huge.n) == huge.n);
    lb_bitmap_free(h);
    free(hr);
    free_keys(&huge);

    free(res);
    free(res2);
    free_keys(&in);
    free_keys(&out);
    lb_bitmap_free(a);
    lb_bitmap_free(b);
    cmd(r, NULL, "FLUSHALL");
    lb_redis_free(r);
}

/* ling-base sets exactly the offsets of the Go vectors, read back with GETBIT */
static void test_bm_ling_base_vectors(void)
{
    lb_redis *r = conn_port(srv.port, 20000);
    const uint64_t ms[] = {1000, 9585059, 1, 2, 1000003, UINT64_C(4294967296)};
    for (size_t mi = 0; mi < sizeof ms / sizeof ms[0]; mi++) {
        uint32_t k = 0;
        char key[64];
        snprintf(key, sizeof key, "t:lb:%llu", (unsigned long long)ms[mi]);
        /* the union of every listed offset */
        uint64_t *all = malloc(LBV_COUNT * 13 * sizeof *all);
        size_t nall = 0, nkeys = 0;
        lb_key keys[LBV_COUNT];
        for (size_t c = 0; c < LBV_COUNT; c++) {
            if (lbv_cases[c].m != ms[mi])
                continue;
            k = lbv_cases[c].k;
            keys[nkeys].data = lbv_cases[c].key;
            keys[nkeys].len = lbv_cases[c].len;
            nkeys++;
            for (uint32_t j = 0; j < k; j++) {
                size_t q = 0;
                while (q < nall && all[q] != lbv_cases[c].idx[j])
                    q++;
                if (q == nall)
                    all[nall++] = lbv_cases[c].idx[j];
            }
        }
        CHECK(nkeys == 22);
        lb_bitmap *bm = bm_new(r, key, ms[mi], k, LB_HASH_LING_BASE, 0);
        lb_bitmap_set_mode(bm, mi % 2 ? LB_BITMAP_SETBIT : LB_BITMAP_BITFIELD);
        CHECK_MSG(lb_bitmap_add(bm, keys, nkeys, NULL) == LB_REDIS_OK, "%s",
                  lb_redis_errstr(r));
        int ok = 1;
        for (size_t q = 0; q < nall; q++)
            ok &= redis_getbit(r, key, all[q]) == 1;
        CHECK_MSG(ok, "m=%llu", (unsigned long long)ms[mi]);
        /* and nothing else */
        char line[80];
        snprintf(line, sizeof line, "BITCOUNT %s 0 %llu", key, /* not the canary's byte */
                 (unsigned long long)((ms[mi] + 7) / 8 - 1));
        CHECK_MSG(cmd_int(r, line) == (long long)nall, "m=%llu: %lld bits, %zu offsets",
                  (unsigned long long)ms[mi], cmd_int(r, line), nall);
        uint8_t pres[LBV_COUNT];
        CHECK(lb_bitmap_test(bm, keys, nkeys, pres) == LB_REDIS_OK &&
              count_ones(pres, nkeys) == nkeys);
        if (ms[mi] == 1000) {
            /* the snapshot is the same bit order: bit i = byte i>>3, mask 0x80>>(i&7) */
            uint8_t snap[125];
            CHECK(lb_bitmap_snapshot(bm, snap, sizeof snap) == LB_REDIS_OK);
            size_t pop = 0;
            for (size_t i = 0; i < 1000; i++)
                pop += (snap[i >> 3] >> (7 - (i & 7))) & 1;
            CHECK(pop == nall);
            for (size_t q = 0; q < nall; q++)
                CHECK(snap[all[q] >> 3] & (0x80 >> (all[q] & 7)));
        }
        snprintf(line, sizeof line, "DEL %s", key);
        cmd(r, NULL, line);
        lb_bitmap_free(bm);
        free(all);
    }
    cmd(r, NULL, "FLUSHALL");
    lb_redis_free(r);
}

static void test_bm_ttl(void)
{
    lb_redis *r = conn_port(srv.port, 2000);
    lb_bitmap *bm = bm_new(r, "t:ttl", 10000, 5, LB_HASH_XXH3, 50000);
    keyset ks = mk_keys("ttl:", 0, 100);
    CHECK(lb_bitmap_check_meta(bm) == LB_REDIS_OK);
    long long pt = cmd_int(r, "PTTL {t:ttl}:meta");
    CHECK_MSG(pt > 49000 && pt <= 50000, "%lld", pt); /* SET NX PX */
    unsigned long rt = lb_redis_roundtrip_count(r);
    CHECK(lb_bitmap_add(bm, ks.keys, ks.n, NULL) == LB_REDIS_OK);
    CHECK(lb_redis_roundtrip_count(r) == rt + 1); /* TTL in the same round trip */
    pt = cmd_int(r, "PTTL t:ttl");
    CHECK_MSG(pt > 49000 && pt <= 50000, "%lld", pt);
    /* tests do not refresh; writes do (bits and meta) */
    cmd(r, NULL, "PEXPIRE t:ttl 20000");
    cmd(r, NULL, "PEXPIRE {t:ttl}:meta 20000");
    uint8_t res[100];
    CHECK(lb_bitmap_test(bm, ks.keys, ks.n, res) == LB_REDIS_OK && count_ones(res, 100) == 100);
    CHECK(cmd_int(r, "PTTL t:ttl") <= 20000);
    rt = lb_redis_roundtrip_count(r);
    CHECK(lb_bitmap_add(bm, ks.keys, 1, NULL) == LB_REDIS_OK); /* no new bit, still refreshes */
    CHECK(lb_redis_roundtrip_count(r) == rt + 1);
    CHECK(cmd_int(r, "PTTL t:ttl") > 49000 && cmd_int(r, "PTTL {t:ttl}:meta") > 49000);
    /* it really expires */
    lb_bitmap_set_ttl(bm, 150);
    CHECK(lb_bitmap_add(bm, ks.keys, 1, NULL) == LB_REDIS_OK);
    int gone;
    T_WAIT_UNTIL(gone, cmd_int(r, "EXISTS t:ttl {t:ttl}:meta") == 0, 30.0);
    CHECK(gone);
    /* reset re-creates the meta with the TTL */
    lb_bitmap_set_ttl(bm, 30000);
    CHECK(lb_bitmap_reset(bm) == LB_REDIS_OK);
    pt = cmd_int(r, "PTTL {t:ttl}:meta");
    CHECK_MSG(pt > 29000 && pt <= 30000, "%lld", pt);
    free_keys(&ks);
    lb_bitmap_free(bm);
    cmd(r, NULL, "FLUSHALL");
    lb_redis_free(r);
}

static void test_bm_meta(void)
{
    lb_redis *r = conn_port(srv.port, 2000);
    lb_bitmap *a = bm_new(r, "t:meta", 1000, 7, LB_HASH_XXH3, 0);
    keyset ks = mk_keys("m:", 0, 10);
    uint8_t res[10];
    CHECK(lb_bitmap_add(a, ks.keys, ks.n, res) == LB_REDIS_OK);
    lb_reply *x;
    CHECK(cmd(r, &x, "GET {t:meta}:meta") == LB_REDIS_OK && x->str &&
          strcmp(x->str, "ling_bloom:v=1;m=1000;k=7;hash=xxh3;canary=1") == 0);

    /* other geometries at the same key are refused, naming both */
    lb_bitmap *b = bm_new(r, "t:meta", 2000, 7, LB_HASH_XXH3, 0);
    CHECK(lb_bitmap_add(b, ks.keys, ks.n, res) == LB_REDIS_ERR_MISMATCH);
    CHECK_MSG(strstr(lb_redis_errstr(r), "stored m=1000 k=7 hash=xxh3") &&
                  strstr(lb_redis_errstr(r), "this filter m=2000 k=7 hash=xxh3") &&
                  strstr(lb_redis_errstr(r), "'t:meta'"),
              "%s", lb_redis_errstr(r));
    CHECK(lb_bitmap_test(b, ks.keys, ks.n, res) == LB_REDIS_ERR_MISMATCH);
    CHECK(lb_bitmap_reset(b) == LB_REDIS_ERR_MISMATCH); /* does not delete a's bits */
    CHECK(cmd_int(r, "EXISTS t:meta") == 1);
    lb_bitmap_free(b);
    b = bm_new(r, "t:meta", 1000, 7, LB_HASH_LING_BASE, 0);
    CHECK(lb_bitmap_check_meta(b) == LB_REDIS_ERR_MISMATCH);
    CHECK(strstr(lb_redis_errstr(r), "hash=ling-base") != NULL);
    lb_bitmap_free(b);

    /* open(): adopt the stored geometry */
    lb_geometry g;
    CHECK(lb_bitmap_read_meta(r, "t:meta", 6, &g) == LB_REDIS_OK);
    CHECK(g.m == 1000 && g.k == 7 && g.scheme == LB_HASH_XXH3);
    b = bm_new(r, "t:meta", g.m, g.k, g.scheme, 0);
    CHECK(lb_bitmap_test(b, ks.keys, ks.n, res) == LB_REDIS_OK && count_ones(res, 10) == 10);
    lb_bitmap_free(b);
    CHECK(lb_bitmap_read_meta(r, "t:nothing", 9, &g) == LB_REDIS_ERR_NOTFOUND);
    CHECK(strstr(lb_redis_errstr(r), "t:nothing") != NULL);

    /* garbage, newer versions, wrong types */
    cmd(r, NULL, "SET {t:junk}:meta hello");
    CHECK(lb_bitmap_read_meta(r, "t:junk", 6, &g) == LB_REDIS_ERR_MISMATCH);
    CHECK(strstr(lb_redis_errstr(r), "not a ling_bloom geometry") != NULL);
    cmd(r, NULL, "SET {t:junk}:meta ling_bloom:v=1;m=0;k=7;hash=xxh3");
    CHECK(lb_bitmap_read_meta(r, "t:junk", 6, &g) == LB_REDIS_ERR_MISMATCH);
    cmd(r, NULL, "SET {t:junk}:meta ling_bloom:v=1;m=10;k=7;hash=md5");
    CHECK(lb_bitmap_read_meta(r, "t:junk", 6, &g) == LB_REDIS_ERR_MISMATCH);
    cmd(r, NULL, "SET {t:junk}:meta ling_bloom:v=2;m=10;k=7;hash=xxh3;extra=1");
    CHECK(lb_bitmap_read_meta(r, "t:junk", 6, &g) == LB_REDIS_ERR_MISMATCH);
    CHECK(strstr(lb_redis_errstr(r), "newer") != NULL);
    /* the blocked layout: version 2 with its hash and a geometry it can have */
    lb_bitmap_layout lay = LB_BITMAP_STANDARD;
    cmd(r, NULL, "SET {t:junk}:meta ling_bloom:v=2;m=1024;k=16;hash=xxh3-block;layout=blocked");
    CHECK(lb_bitmap_read_meta_layout(r, "t:junk", 6, &g, &lay) == LB_REDIS_OK &&
          lay == LB_BITMAP_BLOCKED && g.m == 1024 && g.k == 16 && g.scheme == LB_HASH_XXH3_MIX);
    cmd(r, NULL, "SET {t:junk}:meta ling_bloom:v=2;m=1000;k=8;hash=xxh3-block;layout=blocked");
    CHECK(lb_bitmap_read_meta_layout(r, "t:junk", 6, &g, &lay) == LB_REDIS_ERR_MISMATCH);
    cmd(r, NULL, "SET {t:junk}:meta ling_bloom:v=2;m=1024;k=7;hash=xxh3-block;layout=blocked");
    CHECK(lb_bitmap_read_meta_layout(r, "t:junk", 6, &g, &lay) == LB_REDIS_ERR_MISMATCH);
    cmd(r, NULL, "SET {t:junk}:meta ling_bloom:v=1;m=1024;k=8;hash=xxh3-block;layout=blocked");
    CHECK(lb_bitmap_read_meta_layout(r, "t:junk", 6, &g, &lay) == LB_REDIS_ERR_MISMATCH);
    cmd(r, NULL, "SET {t:junk}:meta ling_bloom:v=2;m=1024;k=8;hash=xxh3-mix;layout=blocked");
    CHECK(lb_bitmap_read_meta_layout(r, "t:junk", 6, &g, &lay) == LB_REDIS_ERR_MISMATCH);
    cmd(r, NULL, "SET {t:junk}:meta ling_bloom:v=2;m=1024;k=8;hash=xxh3-block;layout=tiled");
    CHECK(lb_bitmap_read_meta_layout(r, "t:junk", 6, &g, &lay) == LB_REDIS_ERR_MISMATCH);
    CHECK(strstr(lb_redis_errstr(r), "newer") != NULL);
    cmd(r, NULL, "SET {t:junk}:meta ling_bloom:hash=ling-base;k=3;m=77;v=1;future=x");
    CHECK(lb_bitmap_read_meta_layout(r, "t:junk", 6, &g, &lay) == LB_REDIS_OK && g.m == 77 &&
          g.k == 3 && g.scheme == LB_HASH_LING_BASE && lay == LB_BITMAP_STANDARD);
    cmd(r, NULL, "DEL {t:junk}:meta");
    cmd(r, NULL, "HSET {t:junk}:meta a b");
    CHECK(lb_bitmap_read_meta(r, "t:junk", 6, &g) == LB_REDIS_ERR_WRONGTYPE);
    CHECK(strstr(lb_redis_errstr(r), "(key '{t:junk}:meta')") != NULL);
    b = bm_new(r, "t:junk", 100, 3, LB_HASH_XXH3, 0);
    CHECK(lb_bitmap_add(b, ks.keys, 1, res) == LB_REDIS_ERR_WRONGTYPE);
    lb_bitmap_free(b);

    /* the meta is checked again after a reconnect (server restarted empty): the
     * filter this client knew is gone, and a write does not make it again */
    cmd(r, NULL, "FLUSHALL");
    lb_redis_disconnect(r);
    CHECK(lb_bitmap_add(a, ks.keys, 1, res) == LB_REDIS_ERR_LOST);
    CHECK(cmd_int(r, "EXISTS {t:meta}:meta") == 0);
    CHECK(lb_bitmap_reset(a) == LB_REDIS_OK);
    CHECK(lb_bitmap_add(a, ks.keys, 1, res) == LB_REDIS_OK);
    CHECK(cmd_int(r, "EXISTS {t:meta}:meta") == 1);

    free_keys(&ks);
    lb_bitmap_free(a);
    cmd(r, NULL, "FLUSHALL");
    lb_redis_free(r);
}

static void test_bm_wrongtype(void)
{
    lb_redis *r = conn_port(srv.port, 2000);
    cmd(r, NULL, "LPUSH t:wt x");
    lb_bitmap *bm = bm_new(r, "t:wt", 1000, 4, LB_HASH_XXH3, 1000);
    lb_key k1 = {"abc", 3};
    uint8_t res[1];
    CHECK(lb_bitmap_add(bm, &k1, 1, res) == LB_REDIS_ERR_WRONGTYPE);
    CHECK_MSG(strstr(lb_redis_errstr(r), "WRONGTYPE") && strstr(lb_redis_errstr(r), "(key 't:wt')"),
              "%s", lb_redis_errstr(r));
    CHECK(lb_bitmap_test(bm, &k1, 1, res) == LB_REDIS_ERR_WRONGTYPE);
    CHECK(lb_redis_is_connected(r)); /* an error reply keeps the connection */
    uint8_t snap[125];
    CHECK(lb_bitmap_snapshot(bm, snap, sizeof snap) == LB_REDIS_ERR_WRONGTYPE);
    CHECK(strstr(lb_redis_errstr(r), "(key 't:wt')") != NULL);
    memset(snap, 0, sizeof snap);
    /* the key is checked before anything else, even an all-zero load */
    CHECK(lb_bitmap_load(bm, snap, sizeof snap) == LB_REDIS_ERR_WRONGTYPE);
    snap[3] = 1;
    CHECK(lb_bitmap_load(bm, snap, sizeof snap) == LB_REDIS_ERR_WRONGTYPE);
    CHECK(strstr(lb_redis_errstr(r), "(key 't:wt')") != NULL);
    CHECK(cmd_int(r, "DBSIZE") == 1); /* the list alone: no meta beside it, no temp key */
    lb_bitmap_free(bm);
    /* binary key names are shown escaped */
    lb_geometry g;
    lb_geometry_init(&g, 100, 2, LB_HASH_XXH3);
    const char *argv[] = {"LPUSH", "t:\x01\xff", "x"};
    CHECK(lb_redis_command_argv(r, 3, argv, NULL, 0, NULL) == LB_REDIS_OK);
    CHECK(lb_bitmap_new(r, "t:\x01\xff", 4, &g, 0, &bm) == LB_REDIS_OK);
    CHECK(lb_bitmap_add(bm, &k1, 1, res) == LB_REDIS_ERR_WRONGTYPE);
    CHECK_MSG(strstr(lb_redis_errstr(r), "(key 't:\\x01\\xff')"), "%s", lb_redis_errstr(r));
    lb_bitmap_free(bm);
    cmd(r, NULL, "FLUSHALL");
    lb_redis_free(r);
}

static void test_bm_snapshot_load(void)
{
    lb_redis *r = conn_port(srv.port, 5000);
    /* a string shorter than m/8, and bits past m, in Redis */
    lb_bitmap *bm = bm_new(r, "t:snap", 10, 2, LB_HASH_XXH3, 0);
    uint8_t s2[2] = {0xaa, 0xaa};
    CHECK(lb_bitmap_snapshot(bm, s2, 2) == LB_REDIS_OK && s2[0] == 0 && s2[1] == 0);
    cmd(r, NULL, "SETBIT t:snap 5 1");
    CHECK(lb_bitmap_snapshot(bm, s2, 2) == LB_REDIS_OK && s2[0] == 0x04 && s2[1] == 0);
    cmd(r, NULL, "SETBIT t:snap 9 1");
    cmd(r, NULL, "SETBIT t:snap 15 1");
    cmd(r, NULL, "SETBIT t:snap 40 1");
    CHECK(lb_bitmap_snapshot(bm, s2, 2) == LB_REDIS_OK && s2[0] == 0x04 && s2[1] == 0x40);
    CHECK(lb_bitmap_snapshot(bm, s2, 3) == LB_REDIS_ERR_MISMATCH);
    lb_bitmap_free(bm);

    /* load ORs into what is there, masks bits >= m (a bitmap written without a
     * meta key: adopted on purpose) */
    bm = bm_new(r, "t:load", 20, 2, LB_HASH_XXH3, 0);
    cmd(r, NULL, "SETBIT t:load 0 1");
    CHECK(lb_bitmap_load(bm, (const uint8_t *)"\1\0\0", 3) == LB_REDIS_ERR_NOTOWNED);
    CHECK(cmd_int(r, "EXISTS {t:load}:meta") == 0);
    lb_bitmap_set_adopt(bm, 1);
    uint8_t l3[3] = {0x01, 0x80, 0xff};
    CHECK(lb_bitmap_load(bm, l3, 3) == LB_REDIS_OK);
    lb_reply *x;
    CHECK(cmd(r, &x, "GET t:load") == LB_REDIS_OK && x->len == 4 &&
          memcmp(x->str, "\x81\x80\xf0\x80", 4) == 0); /* and the canary */
    CHECK(cmd(r, &x, "KEYS *:load:*") == LB_REDIS_OK && x->len == 0); /* temp key gone */
    CHECK(lb_bitmap_load(bm, l3, 2) == LB_REDIS_ERR_MISMATCH);
    lb_bitmap_free(bm);

    /* a filter round trip: local bits -> load -> test, snapshot == local */
    const uint64_t m = 3000017; /* > one 8 MiB chunk? no: 375 KB; chunks tested below */
    lb_geometry g;
    lb_geometry_init(&g, m, 6, LB_HASH_XXH3);
    size_t nb = (size_t)((m + 7) / 8);
    uint8_t *local = calloc(nb, 1), *snap = malloc(nb);
    keyset ks = mk_keys("load:", 0, 20000);
    uint64_t idx[LB_MAX_K];
    for (size_t i = 0; i < ks.n; i++) {
        lb_indices(&g, lb_hash(g.scheme, ks.keys[i].data, ks.keys[i].len), idx);
        for (uint32_t j = 0; j < g.k; j++)
            local[idx[j] >> 3] |= (uint8_t)(0x80 >> (idx[j] & 7));
    }
    bm = bm_new(r, "t:warm", m, 6, LB_HASH_XXH3, 60000);
    lb_key other = {"written-before-load", 19};
    CHECK(lb_bitmap_add(bm, &other, 1, NULL) == LB_REDIS_OK);
    CHECK(lb_bitmap_load(bm, local, nb) == LB_REDIS_OK);
    CHECK(cmd_int(r, "PTTL t:warm") > 59000);
    uint8_t *res = malloc(ks.n);
    CHECK(lb_bitmap_test(bm, ks.keys, ks.n, res) == LB_REDIS_OK && count_ones(res, ks.n) == ks.n);
    CHECK(lb_bitmap_test(bm, &other, 1, res) == LB_REDIS_OK && res[0] == 1); /* merged */
    CHECK(lb_bitmap_snapshot(bm, snap, nb) == LB_REDIS_OK);
    lb_indices(&g, lb_hash(g.scheme, other.data, other.len), idx);
    for (uint32_t j = 0; j < g.k; j++)
        local[idx[j] >> 3] |= (uint8_t)(0x80 >> (idx[j] & 7));
    CHECK(memcmp(local, snap, nb) == 0);
    free(res);
    free(local);
    free(snap);
    free_keys(&ks);
    lb_bitmap_free(bm);

    /* a 64 MiB filter: several load chunks (zero chunks skipped) and snapshot round trips */
    const uint64_t mb = UINT64_C(64) << 23; /* 64 MiB of bits */
    nb = (size_t)(mb / 8);
    local = calloc(nb, 1);
    snap = malloc(nb);
    for (size_t i = 0; i < nb; i += 4099)
        local[i] = (uint8_t)(i * 13 + 1);
    memset(local + (20u << 20), 0, 20u << 20); /* two and a half all-zero chunks */
    bm = bm_new(r, "t:bigload", mb, 3, LB_HASH_XXH3, 0);
    unsigned long rt = lb_redis_roundtrip_count(r);
    CHECK(lb_bitmap_load(bm, local, nb) == LB_REDIS_OK);
    unsigned long used = lb_redis_roundtrip_count(r) - rt;
    /* the meta key looked at and claimed, then 6 non-zero chunks, then the canary */
    CHECK_MSG(used >= 7 && used <= 9, "%lu round trips", used);
    CHECK(lb_bitmap_snapshot(bm, snap, nb) == LB_REDIS_OK);
    CHECK(memcmp(local, snap, nb) == 0);
    free(local);
    free(snap);
    lb_bitmap_free(bm);
    cmd(r, NULL, "FLUSHALL");
    lb_redis_free(r);
}

/* m just above 2^32: bits of part 1 go to "{key}:part:1" */
static void test_bm_multipart(void)
{
    lb_redis *r = conn_port(srv.port, 30000);
    const uint64_t m = (UINT64_C(1) << 32) + (UINT64_C(1) << 20);
    lb_geometry g;
    lb_geometry_init(&g, m, 7, LB_HASH_XXH3);
    /* keys with indices in part 1 */
    keyset cand = mk_keys("mp:", 0, 60000);
    lb_key pick[64];
    size_t np = 0, hits1 = 0;
    uint64_t idx[LB_MAX_K];
    for (size_t i = 0; i < cand.n && np < 64; i++) {
        lb_indices(&g, lb_hash(g.scheme, cand.keys[i].data, cand.keys[i].len), idx);
        int in1 = 0;
        for (uint32_t j = 0; j < g.k; j++)
            in1 |= idx[j] >> 32 == 1;
        if (in1 || np < 8) {
            pick[np++] = cand.keys[i];
            hits1 += in1;
        }
    }
    CHECK(hits1 >= 20);
    lb_bitmap *bm = bm_new(r, "t:mp", m, 7, LB_HASH_XXH3, 100000);
    CHECK(lb_bitmap_nparts(bm) == 2);
    uint8_t res[64];
    CHECK_MSG(lb_bitmap_add(bm, pick, np, res) == LB_REDIS_OK, "%s", lb_redis_errstr(r));
    CHECK(count_ones(res, np) == np);
    CHECK(lb_bitmap_test(bm, pick, np, res) == LB_REDIS_OK && count_ones(res, np) == np);
    /* the bits are where they belong, read with plain GETBIT */
    int ok = 1;
    size_t total = 0;
    for (size_t i = 0; i < np; i++) {
        lb_indices(&g, lb_hash(g.scheme, pick[i].data, pick[i].len), idx);
        for (uint32_t j = 0; j < g.k; j++)
            ok &= idx[j] >> 32 ? redis_getbit(r, "{t:mp}:part:1", idx[j] & 0xffffffff) == 1
                               : redis_getbit(r, "t:mp", idx[j]) == 1;
    }
    CHECK(ok);
    CHECK(cmd_int(r, "STRLEN {t:mp}:part:1") <= (1 << 17));
    CHECK(cmd_int(r, "PTTL {t:mp}:part:1") > 99000 && cmd_int(r, "PTTL t:mp") > 99000);
    uint64_t bits;
    CHECK(lb_bitmap_bitcount(bm, &bits) == LB_REDIS_OK);
    total = (size_t)cmd_int(r, "BITCOUNT t:mp") + (size_t)cmd_int(r, "BITCOUNT {t:mp}:part:1");
    CHECK(bits == total && bits > 0);

    /* snapshot across both parts, reset clears both, load puts both back */
    size_t nb = (size_t)((m + 7) / 8);
    uint8_t *snap = malloc(nb), *snap2 = malloc(nb);
    CHECK(lb_bitmap_snapshot(bm, snap, nb) == LB_REDIS_OK);
    ok = 1;
    for (size_t i = 0; i < np; i++) {
        lb_indices(&g, lb_hash(g.scheme, pick[i].data, pick[i].len), idx);
        for (uint32_t j = 0; j < g.k; j++)
            ok &= (snap[idx[j] >> 3] >> (7 - (idx[j] & 7))) & 1;
    }
    CHECK(ok);
    CHECK(lb_bitmap_reset(bm) == LB_REDIS_OK);
    CHECK(cmd_int(r, "EXISTS t:mp {t:mp}:part:1") == 0);
    CHECK(cmd_int(r, "EXISTS {t:mp}:meta") == 1);
    CHECK(lb_bitmap_load(bm, snap, nb) == LB_REDIS_OK);
    CHECK(lb_bitmap_test(bm, pick, np, res) == LB_REDIS_OK && count_ones(res, np) == np);
    CHECK(lb_bitmap_bitcount(bm, &bits) == LB_REDIS_OK && bits == total);
    CHECK(cmd_int(r, "PTTL {t:mp}:part:1") > 90000);
    CHECK(lb_bitmap_snapshot(bm, snap2, nb) == LB_REDIS_OK && memcmp(snap, snap2, nb) == 0);
    free(snap);
    free(snap2);
    CHECK(lb_bitmap_reset(bm) == LB_REDIS_OK);
    lb_bitmap_free(bm);
    free_keys(&cand);
    cmd(r, NULL, "FLUSHALL");
    lb_redis_free(r);
}

/* The blocked layout past 2^32 bits: a block never straddles two parts, a key
 * whose block is in part 1 is read (GETRANGE) and written there, at the bytes
 * blocked.h gives it, and part 0 is not touched. */
static void test_bm_blocked_multipart(void)
{
    lb_redis *r = conn_port(srv.port, 30000);
    const uint64_t m = (UINT64_C(1) << 32) + (UINT64_C(1) << 20), nblocks = m / 512;
    const uint32_t k = 16;
    keyset cand = mk_keys("bmp:", 0, 500000); /* about 1 in 4097 lands in part 1 */
    lb_key pick[32], other[32];
    size_t np = 0, no = 0;
    for (size_t i = 0; i < cand.n && (np < 32 || no < 32); i++) {
        lb_hash_pair h = lb_hash_blocked(cand.keys[i].data, cand.keys[i].len);
        if (lb_blocked_block_of(nblocks, h) * 512 < (UINT64_C(1) << 32))
            continue;
        if (np < 32)
            pick[np++] = cand.keys[i];
        else
            other[no++] = cand.keys[i];
    }
    CHECK(np == 32 && no == 32);
    lb_bitmap *bm = bm_new(r, "t:bmp", m, k, LB_HASH_XXH3_MIX, 0);
    CHECK(bm && lb_bitmap_set_layout(bm, LB_BITMAP_BLOCKED) == LB_REDIS_OK);
    CHECK(lb_bitmap_nparts(bm) == 2);
    uint8_t res[32];
    CHECK_MSG(lb_bitmap_add(bm, pick, np, res) == LB_REDIS_OK, "%s", lb_redis_errstr(r));
    CHECK(count_ones(res, np) == np);
    CHECK(lb_bitmap_test(bm, pick, np, res) == LB_REDIS_OK && count_ones(res, np) == np);
    CHECK(lb_bitmap_test(bm, other, no, res) == LB_REDIS_OK && count_ones(res, no) == 0);
    CHECK(cmd_int(r, "EXISTS t:bmp") == 0); /* part 0: nothing was written there */
    int ok = 1;
    for (size_t i = 0; i < np; i++) {
        lb_hash_pair h = lb_hash_blocked(pick[i].data, pick[i].len);
        uint64_t want[LB_BLOCKED_LANES];
        lb_blocked_masks(k / LB_BLOCKED_LANES, h, want);
        uint64_t byte = (lb_blocked_block_of(nblocks, h) * 512 - (UINT64_C(1) << 32)) / 8;
        char line[128];
        snprintf(line, sizeof line, "GETRANGE {t:bmp}:part:1 %llu %llu",
                 (unsigned long long)byte, (unsigned long long)byte + 63);
        lb_reply *x;
        /* the string ends at the last byte written, so the highest block
         * written can come back shorter than 64 bytes: the rest is zeros */
        if (cmd(r, &x, line) != LB_REDIS_OK || x->type != LB_REPLY_STRING || x->len == 0 ||
            x->len > 64) {
            ok = 0;
            continue;
        }
        uint8_t blk[64] = {0};
        memcpy(blk, x->str, x->len);
        for (int lane = 0; lane < LB_BLOCKED_LANES; lane++) {
            uint64_t w = 0;
            for (int b = 7; b >= 0; b--)
                w = (w << 8) | blk[8 * lane + b];
            ok &= (w & want[lane]) == want[lane]; /* other keys may share the block */
        }
    }
    CHECK(ok);
    CHECK(lb_bitmap_reset(bm) == LB_REDIS_OK);
    CHECK(cmd_int(r, "BITCOUNT {t:bmp}:part:1") == 1); /* the canary alone */
    lb_bitmap_free(bm);
    free_keys(&cand);
    cmd(r, NULL, "FLUSHALL");
    lb_redis_free(r);
}

static void test_bm_faults(void)
{
    t_server s2;
    memset(&s2, 0, sizeof s2);
    t_server_start(&s2, NULL);
    lb_redis *r = conn_port(s2.port, 2000);
    /* a filter with a ttl: empty after a restart, as after its expiry */
    lb_bitmap *bm = bm_new(r, "t:f", 10000, 5, LB_HASH_XXH3, 3600000);
    lb_redis *r2 = conn_port(s2.port, 2000);
    lb_bitmap *kept = bm_new(r2, "t:kept", 10000, 5, LB_HASH_XXH3, 0); /* one without */
    keyset ks = mk_keys("f:", 0, 100);
    uint8_t res[100];
    CHECK(lb_bitmap_add(bm, ks.keys, 50, res) == LB_REDIS_OK);
    CHECK(lb_bitmap_add(kept, ks.keys, 50, res) == LB_REDIS_OK);

    /* restart between calls: the next call just works (retried on a fresh connection),
     * and the meta is written again to the empty server; the filter without a ttl
     * says it is lost, writes nothing back but what the write sent, and comes back
     * with a reset */
    t_server_stop(&s2, SIGKILL);
    t_server_start(&s2, NULL);
    CHECK(lb_bitmap_test(kept, ks.keys, 50, res) == LB_REDIS_ERR_LOST);
    CHECK(cmd_int(r2, "EXISTS {t:kept}:meta t:kept") == 0);
    CHECK(lb_bitmap_reset(kept) == LB_REDIS_OK);
    CHECK(lb_bitmap_test(kept, ks.keys, 50, res) == LB_REDIS_OK && count_ones(res, 50) == 0);
    lb_bitmap_free(kept);
    lb_redis_free(r2);
    CHECK_MSG(lb_bitmap_add(bm, ks.keys + 50, 50, res) == LB_REDIS_OK, "%s", lb_redis_errstr(r));
    CHECK(lb_bitmap_test(bm, ks.keys + 50, 50, res) == LB_REDIS_OK && count_ones(res, 50) == 50);
    CHECK(cmd_int(r, "EXISTS {t:f}:meta") == 1);

    /* server down: connection error; back up: works */
    t_server_stop(&s2, SIGTERM);
    CHECK(lb_bitmap_test(bm, ks.keys, 10, res) == LB_REDIS_ERR_CONNECT);
    CHECK(lb_bitmap_test(bm, ks.keys, 10, res) == LB_REDIS_ERR_CONNECT);
    t_server_start(&s2, NULL);
    CHECK(lb_bitmap_add(bm, ks.keys, 10, res) == LB_REDIS_OK && count_ones(res, 10) == 10);

    /* killed during a batch: our batch waits behind another client's endless
     * script when the server is killed -> connection error (the idempotent
     * retry then finds the server down) */
    lb_redis *blocker = conn_port(s2.port, 5000);
    pid_t kid = fork();
    if (kid == 0) {
        const char *ev[] = {"EVAL", "while true do end", "0"};
        lb_redis_command_argv(blocker, 3, ev, NULL, 0, NULL); /* never returns */
        _exit(0);
    }
    /* the script runs once the server answers no PING */
    int busy;
    T_WAIT_UNTIL(busy, !t_ping(s2.port), 30.0);
    CHECK(busy);
    /* the killer: once our batch's request waits unread at the busy server */
    pid_t killer = fork();
    if (killer == 0) {
        int waiting;
        T_WAIT_UNTIL(waiting, t_unread_input(s2.port) > 0, 10.0);
        (void)waiting; /* killed either way: the batch must not hang */
        kill(s2.pid, SIGKILL);
        _exit(0);
    }
    lb_redis_set_timeout(r, 5000);
    double t0 = t_now();
    lb_redis_status st = lb_bitmap_add(bm, ks.keys, 100, res);
    CHECK_MSG(st == LB_REDIS_ERR_IO || st == LB_REDIS_ERR_CONNECT, "%s: %s",
              lb_redis_status_name(st), lb_redis_errstr(r));
    CHECK(t_now() - t0 < 2.0);
    CHECK(!lb_redis_is_connected(r));
    waitpid(killer, NULL, 0);
    waitpid(kid, NULL, 0);
    waitpid(s2.pid, NULL, 0);
    t_track(s2.pid, 0);
    s2.pid = 0;
    t_server_start(&s2, NULL);
    lb_redis_set_timeout(r, 2000);
    CHECK(lb_bitmap_add(bm, ks.keys, 100, res) == LB_REDIS_OK);
    lb_redis_free(blocker);

    /* fork: the child uses the filter on its own connection, the parent's stays */
    long long id = cmd_int(r, "CLIENT ID");
    pid_t child = fork();
    if (child == 0) {
        lb_key ck = {"from-child", 10};
        uint8_t cres[1];
        int code = lb_bitmap_add(bm, &ck, 1, cres) == LB_REDIS_OK && cres[0] == 1 &&
                           cmd_int(r, "CLIENT ID") != id
                       ? 0
                       : 1;
        _exit(code);
    }
    int status;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    lb_key ck = {"from-child", 10};
    CHECK(lb_bitmap_test(bm, &ck, 1, res) == LB_REDIS_OK && res[0] == 1);
    CHECK(cmd_int(r, "CLIENT ID") == id);

    free_keys(&ks);
    lb_bitmap_free(bm);
    lb_redis_free(r);
    t_server_destroy(&s2);

    /* a listener that never answers: timeout in time */
    int port;
    int lfd = t_silent_listener(&port);
    r = conn_port(port, 250);
    bm = bm_new(r, "t:silent", 1000, 3, LB_HASH_XXH3, 0);
    lb_key k1 = {"x", 1};
    t0 = t_now();
    CHECK(lb_bitmap_add(bm, &k1, 1, res) == LB_REDIS_ERR_TIMEOUT);
    CHECK(t_now() - t0 < 1.0);
    lb_bitmap_free(bm);
    lb_redis_free(r);
    close(lfd);
}

static const t_case cases[] = {
    {"bm_names", test_bm_names},
    {"bm_roundtrip", test_bm_roundtrip},
    {"bm_ling_base_vectors", test_bm_ling_base_vectors},
    {"bm_ttl", test_bm_ttl},
    {"bm_meta", test_bm_meta},
    {"bm_wrongtype", test_bm_wrongtype},
    {"bm_snapshot_load", test_bm_snapshot_load},
    {"bm_multipart", test_bm_multipart},
    {"bm_blocked_multipart", test_bm_blocked_multipart},
    {"bm_faults", test_bm_faults},
};

T_MAIN(cases, 1)
