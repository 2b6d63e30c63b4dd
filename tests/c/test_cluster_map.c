/* test_cluster_map.c: the Redis Cluster's protocol without a server: key
 * slots and hash tags (csrc/redis/slots.c), a batch's slot (resp_encode.c),
 * redirections and slot maps (cluster_map.c).
 * Run: make -C tests/c test   (or: tests/c/test_cluster_map) */
#include "redis_harness.h"

#include <stdint.h>

#include "cluster_map.h"
#include "config.h"
#include "resp.h"
#include "slots.h"

/* The parse's callbacks: node ids by address (the same address, the same id),
 * and for each range one entry per node as before (primary, then replica). */
static int nodes_seen, node_calls;
static char node_host[64][64];
static int node_port[64];
static int note_node(void *ctx, const char *host, int port)
{
    (void)ctx;
    node_calls++;
    for (int i = 0; i < nodes_seen; i++)
        if (node_port[i] == port && strcmp(node_host[i], host) == 0)
            return i;
    if (nodes_seen >= 64)
        return -1;
    snprintf(node_host[nodes_seen], sizeof node_host[0], "%s", host);
    node_port[nodes_seen] = port;
    return nodes_seen++;
}

static int ranges_seen;
static long range_lo[8], range_hi[8], range_port[8], range_rep[8];
static char range_host[8][64];
static void note_one(long lo, long hi, int id, int replica)
{
    if (ranges_seen < 8) {
        range_lo[ranges_seen] = lo;
        range_hi[ranges_seen] = hi;
        range_port[ranges_seen] = node_port[id];
        range_rep[ranges_seen] = replica;
        snprintf(range_host[ranges_seen], sizeof range_host[0], "%s", node_host[id]);
    }
    ranges_seen++;
}
static int note_range(void *ctx, long lo, long hi, int primary, int replica)
{
    (void)ctx;
    if (primary >= 0)
        note_one(lo, hi, primary, 0);
    if (replica >= 0)
        note_one(lo, hi, replica, 1);
    return 0;
}
static const lb_cluster_map_fns note_fns = {note_node, note_range};

static lb_reply *mk(int type, const char *str, long long v, size_t n, lb_reply **el)
{
    lb_reply *x = calloc(1, sizeof *x);
    x->type = type;
    x->integer = v;
    if (str) {
        x->str = strdup(str);
        x->len = strlen(str);
    }
    if (type == LB_REPLY_ARRAY) {
        x->len = n;
        x->element = malloc(n * sizeof *el);
        memcpy(x->element, el, n * sizeof *el);
    }
    return x;
}
static void unmk(lb_reply *x)
{
    if (x->type == LB_REPLY_ARRAY)
        for (size_t i = 0; i < x->len; i++)
            unmk(x->element[i]);
    free(x->element);
    free(x->str);
    free(x);
}
/* parse_map on a reply built here, then freed */
static int parse_built(lb_reply *x, int shards, int tls)
{
    int r = lb_cluster_parse_map(x, shards, "asked", tls, &note_fns, NULL);
    unmk(x);
    return r;
}
#define S(s) mk(LB_REPLY_STRING, s, 0, 0, NULL)
#define I(v) mk(LB_REPLY_INTEGER, NULL, v, 0, NULL)
#define A(...) mk(LB_REPLY_ARRAY, NULL, 0, sizeof((lb_reply *[]){__VA_ARGS__}) / sizeof(lb_reply *), \
                  (lb_reply *[]){__VA_ARGS__})

static void test_cluster_protocol(void)
{
    /* The specification's check value, and its hash tag examples. */
    CHECK(lb_cluster_crc16("123456789", 9) == 0x31C3);
    CHECK(lb_cluster_key_slot("123456789", 9) == 12739);
    CHECK(lb_cluster_key_slot("foo", 3) == 12182);
    CHECK(lb_cluster_key_slot("{user1000}.following", 20) ==
          lb_cluster_key_slot("{user1000}.followers", 20));
    CHECK(lb_cluster_key_slot("{user1000}.following", 20) == lb_cluster_key_slot("user1000", 8));
    CHECK(lb_cluster_key_slot("foo{}{bar}", 10) == lb_cluster_key_slot("foo{}{bar}", 10) &&
          lb_cluster_key_slot("foo{}{bar}", 10) == (lb_cluster_crc16("foo{}{bar}", 10) & 16383));
    CHECK(lb_cluster_key_slot("foo{{bar}}zap", 13) == lb_cluster_key_slot("{bar", 4));
    CHECK(lb_cluster_key_slot("foo{bar}{zap}", 13) == lb_cluster_key_slot("bar", 3));
    CHECK(lb_cluster_key_slot("", 0) == 0);
    /* Keys are bytes: a NUL is one of them, inside a tag or out of it. */
    CHECK(lb_cluster_key_slot("a\0b", 3) == (lb_cluster_crc16("a\0b", 3) & 16383) &&
          lb_cluster_key_slot("a\0b", 3) != lb_cluster_key_slot("a", 1));
    CHECK(lb_cluster_key_slot("x{a\0b}y", 7) == lb_cluster_key_slot("a\0b", 3));
    CHECK(lb_cluster_key_slot("\0{b}", 4) == lb_cluster_key_slot("b", 1));
    CHECK(lb_cluster_key_slot("}\0{", 3) == (lb_cluster_crc16("}\0{", 3) & 16383));
    {
        char *k, *base;
        size_t baselen;
        CHECK(lb_redis_slot_names("a\0b", 3, &k, &base, &baselen) == 0 && baselen == 5 &&
              memcmp(k, "a\0b", 3) == 0 && memcmp(base, "{a\0b}", 5) == 0);
        free(k);
        free(base);
        CHECK(lb_redis_slot_names("{\0}x", 4, &k, &base, &baselen) == 0 && baselen == 4 &&
              memcmp(base, "{\0}x", 4) == 0);
        free(k);
        free(base);
    }
    /* A key with a '}' and no hash tag: every name derived from its base (base
     * ":meta", base ":part:1", a temporary name) lands in the key's own slot. */
    {
        static const struct { const char *k; size_t n; } keys[] = {
            {"a}b", 3}, {"a{}b", 4}, {"order}", 6}, {"}", 1}, {"}{", 2}, {"{}", 2},
            {"x}{y", 4}, {"a\0}", 3}, {"}}}{", 4}, {"{}{}", 4},
        };
        for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
            char *k, *base;
            size_t baselen, off, tl;
            CHECK(!lb_hash_tag(keys[i].k, keys[i].n, &off, &tl));
            CHECK(lb_redis_slot_names(keys[i].k, keys[i].n, &k, &base, &baselen) == 0);
            const unsigned want = lb_cluster_key_slot(keys[i].k, keys[i].n);
            const char *const sfx[] = {":meta", ":part:1", ":part:4095", ""};
            for (size_t j = 0; j < 4; j++) {
                char name[64];
                memcpy(name, base, baselen);
                memcpy(name + baselen, sfx[j], strlen(sfx[j]));
                CHECK_MSG(lb_cluster_key_slot(name, baselen + strlen(sfx[j])) == want,
                          "key %zu name %s: slot %u, the key's %u", i, sfx[j],
                          lb_cluster_key_slot(name, baselen + strlen(sfx[j])), want);
            }
            size_t tlen;
            char *tmp = lb_redis_temp_name(base, baselen, "load", 7, &tlen);
            CHECK(tmp && lb_cluster_key_slot(tmp, tlen) == want);
            free(tmp);
            /* distinct keys, distinct bases: the key is in its base whole */
            CHECK(baselen == keys[i].n + 6 && memcmp(base + 6, keys[i].k, keys[i].n) == 0);
            free(k);
            free(base);
        }
        /* Every slot has a tag of four bytes '@'..'O'. */
        static unsigned char seen[LB_CLUSTER_SLOTS];
        size_t covered = 0;
        for (unsigned v = 0; v < 65536; v++) {
            char t[4];
            for (int i = 0; i < 4; i++)
                t[i] = (char)(0x40 | ((v >> (12 - 4 * i)) & 15));
            unsigned s = lb_cluster_crc16(t, 4) & (LB_CLUSTER_SLOTS - 1);
            covered += !seen[s];
            seen[s] = 1;
        }
        CHECK_MSG(covered == LB_CLUSTER_SLOTS, "%zu slots have a tag", covered);
    }

    /* A batch knows its slot: key arguments, BITOP's second, keyless commands. */
    lb_redis_batch b;
    lb_redis_batch_init(&b);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"INFO", "memory"}, NULL);
    CHECK(!b.has_slot);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "{t}a"}, NULL);
    lb_redis_batch_argv(&b, 5, (const char *const[]){"BITOP", "OR", "{t}b", "{t}b", "{t}c"}, NULL);
    lb_redis_batch_argv(&b, 3, (const char *const[]){"WAIT", "1", "0"}, NULL);
    CHECK(b.has_slot && b.slot == lb_cluster_key_slot("t", 1) && !b.multi_slot);
    size_t off[5];
    CHECK(lb_redis_batch_offsets(&b, off) == 0 && off[0] == 0 && off[4] == b.len);
    lb_redis_batch sub;
    lb_redis_batch_init(&sub);
    lb_redis_batch_raw(&sub, b.buf + off[1], off[2] - off[1]);
    CHECK(sub.ncmds == 1 && sub.len == off[2] - off[1] && memcmp(sub.buf, "*2\r\n$3\r\nGET", 11) == 0);
    lb_redis_batch_free(&sub);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "other"}, NULL);
    CHECK(b.multi_slot && b.multi_cmd == 4);
    lb_redis_batch_clear(&b);
    CHECK(!b.has_slot && !b.multi_slot);
    lb_redis_batch_free(&b);

    /* Redirect texts. */
    long slot;
    int port;
    char host[64];
    CHECK(lb_cluster_redirect("MOVED 3999 127.0.0.1:6381", 25, &slot, host, sizeof host, &port) == 1 &&
          slot == 3999 && port == 6381 && strcmp(host, "127.0.0.1") == 0);
    CHECK(lb_cluster_redirect("ASK 0 :7000", 11, &slot, host, sizeof host, &port) == 2 &&
          slot == 0 && port == 7000 && host[0] == 0);
    CHECK(lb_cluster_redirect("MOVED 16384 h:1", 15, &slot, host, sizeof host, &port) == 0);
    CHECK(lb_cluster_redirect("MOVED 1 h:0", 11, &slot, host, sizeof host, &port) == 0);
    CHECK(lb_cluster_redirect("MOVED 1 h", 9, &slot, host, sizeof host, &port) == 0);
    CHECK(lb_cluster_redirect("ERR MOVED 1 h:1", 15, &slot, host, sizeof host, &port) == 0);

    /* CLUSTER SLOTS: an unknown endpoint ("?") is the node asked. */
    lb_reply *slots = A(A(I(0), I(5460), A(S("10.0.0.1"), I(7000), S("id1")),
                          A(S("?"), I(7003), S("id4"))),
                        A(I(5461), I(16383), A(S(""), I(7001), S("id2"))));
    ranges_seen = 0;
    CHECK(lb_cluster_parse_map(slots, 0, "asked", 0, &note_fns, NULL) == 0 && ranges_seen == 3);
    CHECK(range_lo[0] == 0 && range_hi[0] == 5460 && range_port[0] == 7000 && !range_rep[0] &&
          strcmp(range_host[0], "10.0.0.1") == 0);
    CHECK(range_rep[1] && strcmp(range_host[1], "asked") == 0 && range_port[1] == 7003);
    CHECK(strcmp(range_host[2], "asked") == 0 && range_lo[2] == 5461);
    /* CLUSTER SHARDS: the primary first; a failed replica serves nothing; tls-port. */
    lb_reply *shards = A(A(S("slots"), A(I(0), I(99), I(200), I(300)), S("nodes"),
                           A(A(S("id"), S("r"), S("port"), I(7004), S("ip"), S("10.0.0.4"),
                               S("endpoint"), S("10.0.0.4"), S("role"), S("replica"),
                               S("health"), S("online")),
                             A(S("id"), S("x"), S("port"), I(7005), S("ip"), S("10.0.0.5"),
                               S("role"), S("replica"), S("health"), S("failed")),
                             A(S("id"), S("p"), S("port"), I(7000), S("tls-port"), I(8000),
                               S("ip"), S("10.0.0.1"), S("endpoint"), S("?"), S("role"),
                               S("master"), S("health"), S("online")))));
    ranges_seen = 0;
    CHECK(lb_cluster_parse_map(shards, 1, "asked", 1, &note_fns, NULL) == 0 && ranges_seen == 4);
    CHECK(!range_rep[0] && range_port[0] == 8000 && strcmp(range_host[0], "10.0.0.1") == 0);
    CHECK(range_rep[1] && range_port[1] == 7004 && range_hi[1] == 99);
    CHECK(range_lo[2] == 200 && range_hi[2] == 300 && !range_rep[2]);
    ranges_seen = 0;
    CHECK(lb_cluster_parse_map(shards, 1, "asked", 0, &note_fns, NULL) == 0 &&
          range_port[0] == 7000);
    unmk(slots);
    unmk(shards);
    /* One shard of 8192 single-slot ranges and 40 nodes: each node is read once and each
     * range once (not every node for every range). */
    {
        lb_reply **pairs = malloc(16384 * sizeof *pairs), **nds = malloc(40 * sizeof *nds);
        for (int i = 0; i < 16384; i++)
            pairs[i] = I(i / 2 * 2);
        for (int j = 0; j < 40; j++)
            nds[j] = A(S("port"), I(9000 + j), S("ip"), S("10.0.0.9"), S("role"),
                       S(j == 39 ? "master" : "replica"), S("health"), S(j % 2 ? "online" : "loading"));
        lb_reply *sl = mk(LB_REPLY_ARRAY, NULL, 0, 16384, pairs);
        lb_reply *nl = mk(LB_REPLY_ARRAY, NULL, 0, 40, nds);
        lb_reply *big = A(A(S("slots"), sl, S("nodes"), nl));
        nodes_seen = node_calls = ranges_seen = 0;
        CHECK(lb_cluster_parse_map(big, 1, "asked", 0, &note_fns, NULL) == 0);
        CHECK_MSG(node_calls == 20 && ranges_seen == 2 * 8192, "%d node calls, %d ranges",
                  node_calls, ranges_seen); /* the primary and the 19 online replicas */
        CHECK(range_port[0] == 9039 && !range_rep[0] && range_port[1] == 9001 && range_rep[1]);
        unmk(big);
        free(pairs);
        free(nds);
    }
    /* Not a map: refused. */
    CHECK(parse_built(S("x"), 0, 0) == -1);
    CHECK(parse_built(A(A(I(5), I(2), A(S("h"), I(1)))), 0, 0) == -1);
    CHECK(parse_built(A(A(I(0), I(16384), A(S("h"), I(1)))), 0, 0) == -1);
    CHECK(parse_built(A(A(I(0), I(1), A(S("h"), I(70000)))), 0, 0) == -1);
    CHECK(parse_built(A(A(S("slots"), A(I(1)), S("nodes"), A(I(1)))), 1, 0) == -1);

    /* URLs. */
    lb_redis_config c;
    char err[256];
    CHECK(lb_redis_config_from_url(&c, "redis+cluster://u:p@h1:7000,h2?read_from_replicas=true&"
                                       "cluster_retry_timeout=2.5", err, sizeof err) == 0);
    CHECK(c.cluster_nodes && strcmp(c.cluster_nodes, "h1:7000,h2:6379") == 0);
    CHECK(strcmp(c.host, "h1") == 0 && c.port == 7000 && c.cluster_replica_reads == 1 &&
          c.cluster_retry_ms == 2500 && strcmp(c.password, "p") == 0);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, "rediss+cluster://h:1/0", err, sizeof err) == 0 && c.tls == 1);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, "redis+cluster://h:1/1", err, sizeof err) == LB_REDIS_ERR_URL &&
          strstr(err, "database 0"));
    CHECK(lb_redis_config_from_url(&c, "redis://h:1?cluster_retry_timeout=1", err, sizeof err) ==
          LB_REDIS_ERR_URL);
    /* At most LB_REDIS_CLUSTER_MAX_SEEDS nodes in the URL. */
    for (int n = LB_REDIS_CLUSTER_MAX_SEEDS; n <= LB_REDIS_CLUSTER_MAX_SEEDS + 1; n++) {
        char *many = malloc(32 + (size_t)n * 16), *q = many;
        q += sprintf(q, "redis+cluster://");
        for (int i = 0; i < n; i++)
            q += sprintf(q, "%sh%d:7000", i ? "," : "", i);
        lb_redis_status st = lb_redis_config_from_url(&c, many, err, sizeof err);
        if (n == LB_REDIS_CLUSTER_MAX_SEEDS) {
            CHECK(st == LB_REDIS_OK);
            lb_redis_config_free(&c);
        } else {
            CHECK(st == LB_REDIS_ERR_URL && strstr(err, "names 1001 nodes, at most 1000"));
        }
        free(many);
    }
    char longurl[400] = "redis+cluster://";
    memset(longurl + 16, 'h', 300);
    strcpy(longurl + 316, ":1");
    CHECK(lb_redis_config_from_url(&c, longurl, err, sizeof err) == LB_REDIS_ERR_URL &&
          strstr(err, "longer than 253"));
}

static const t_case cases[] = {
    {"cluster_protocol", test_cluster_protocol},
};

T_MAIN(cases, 0)
