/* test_cluster_route.c: the Redis Cluster client's route (cluster.h), the
 * sans-I/O step machine both drivers share, driven here by hand: every hop it
 * hands out is checked (node, batch bytes, flags, pause) and answered with
 * canned replies read from RESP bytes; no socket is ever opened (the node
 * clients are wire clients, or node clients that are never run).
 * Run: make -C tests/c test T=route   (or: tests/c/test_cluster_route) */
#include "redis_harness.h"

#include <errno.h>
#include <stdarg.h>

#include "client.h"
#include "cluster.h"
#include "factory.h"
#include "cluster_map.h"
#include "resp.h"
#include "slots.h"
#include "wire.h"

/* ------------------------------------------------------------ RESP builder */

static char rbuf[8192];
static size_t rlen;
static void put(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    rlen += (size_t)vsnprintf(rbuf + rlen, sizeof rbuf - rlen, fmt, ap);
    va_end(ap);
}
static void bulk(const char *s) { put("$%zu\r\n%s\r\n", strlen(s), s); }

/* A CLUSTER SHARDS reply: n shards, shard k serving slots lo[k]..hi[k] on
 * 127.0.0.1:primary[k], with a replica at replica[k] when not 0. */
static void shards_reply(int n, const long *lo, const long *hi, const int *primary,
                         const int *replica)
{
    put("*%d\r\n", n);
    for (int k = 0; k < n; k++) {
        put("*4\r\n");
        bulk("slots");
        put("*2\r\n:%ld\r\n:%ld\r\n", lo[k], hi[k]);
        bulk("nodes");
        put("*%d\r\n", replica[k] ? 2 : 1);
        for (int j = 0; j < (replica[k] ? 2 : 1); j++) {
            put("*8\r\n");
            bulk("port");
            put(":%d\r\n", j ? replica[k] : primary[k]);
            bulk("endpoint");
            bulk("127.0.0.1");
            bulk("role");
            bulk(j ? "replica" : "master");
            bulk("health");
            bulk("online");
        }
    }
}

/* ------------------------------------------------------------ the driver */

static lb_resp_reader *rd;
static lb_reply *rs_store[64];

/* The canned replies in rbuf[0..rlen) (n of them) as the result of the hop. */
static void answer(lb_redis *r, size_t n)
{
    char why[256];
    size_t got = 0;
    lb_resp_reader_start(rd, LB_REDIS_DEFAULT_MAX_ELEMENTS, 0);
    CHECK(lb_resp_reader_feed(rd, rbuf, rlen, why, sizeof why) == LB_REDIS_OK);
    CHECK(lb_resp_reader_take(rd, n, rs_store, &got, why, sizeof why) == LB_REDIS_OK);
    CHECK_MSG(got == n, "canned replies: %zu of %zu", got, n);
    rlen = 0;
    lb_cluster_route_done(r, LB_REDIS_OK, rs_store);
}

/* A failure st of the hop on node, its message on the node's client. */
static void fail(lb_redis *r, int node, lb_redis_status st)
{
    lb_redis *nc = lb_cluster_node_conn(r, node);
    CHECK(nc != NULL);
    lb_redis_set_error(nc, st, "canned %s", lb_redis_status_name(st));
    lb_cluster_route_done(r, st, NULL);
}

/* 1 when batch b holds exactly the commands of words ("GET k|ASKING|GET k"). */
static int batch_is(const lb_redis_batch *b, const char *words)
{
    lb_redis_batch want;
    lb_redis_batch_init(&want);
    char buf[512];
    snprintf(buf, sizeof buf, "%s", words);
    char *save = NULL;
    for (char *c = strtok_r(buf, "|", &save); c; c = strtok_r(NULL, "|", &save)) {
        const char *argv[16];
        int argc = 0;
        char *s2 = NULL;
        for (char *t = strtok_r(c, " ", &s2); t && argc < 16; t = strtok_r(NULL, " ", &s2))
            argv[argc++] = t;
        lb_redis_batch_argv(&want, argc, argv, NULL);
    }
    int same = b && b->ncmds == want.ncmds && b->len == want.len &&
               memcmp(b->buf, want.buf, b->len) == 0;
    lb_redis_batch_free(&want);
    return same;
}

/* The next hop must be a batch (words) for the node at port; its index. */
static int expect_hop(lb_redis *r, int port, const char *words, int flags)
{
    lb_cluster_hop h;
    memset(&h, 0, sizeof h);
    int more = lb_cluster_route_next(r, &h);
    CHECK_MSG(more == 1 && h.b, "a hop expected (%s), got %s", words,
              !more ? "the end" : "a pause");
    if (!more || !h.b)
        return -1;
    CHECK_MSG(lb_cluster_node_port(r, h.node) == port, "hop to port %d, wanted %d (%s)",
              lb_cluster_node_port(r, h.node), port, words);
    CHECK(strcmp(lb_cluster_node_host(r, h.node), "127.0.0.1") == 0);
    CHECK_MSG(batch_is(h.b, words), "hop batch is not '%s' (%zu commands)", words, h.b->ncmds);
    CHECK_MSG(h.flags == (flags | LB_REDIS_RAW_ERRORS), "flags %d, wanted %d", h.flags,
              flags | LB_REDIS_RAW_ERRORS);
    return h.node;
}

static void expect_pause(lb_redis *r, int ms)
{
    lb_cluster_hop h;
    memset(&h, 0, sizeof h);
    int more = lb_cluster_route_next(r, &h);
    CHECK_MSG(more == 1 && !h.b && h.pause_ms == ms, "a pause of %d ms expected: more %d b %p "
              "pause %d", ms, more, (const void *)h.b, h.pause_ms);
}

static void expect_end(lb_redis *r)
{
    lb_cluster_hop h;
    int more = lb_cluster_route_next(r, &h);
    CHECK_MSG(more == 0, "the end expected, got %s", h.b ? "a hop" : "a pause");
}

/* The map read every test begins with: CLUSTER SHARDS on the node at ask_port,
 * answered: slots 0..8191 on 7000, 8192..16383 on primary_hi (replica rep_hi). */
static void expect_map(lb_redis *r, int ask_port, int primary_hi, int rep_hi)
{
    long lo[2] = {0, 8192}, hi[2] = {8191, 16383};
    int pr[2] = {7000, primary_hi}, rep[2] = {0, rep_hi};
    expect_hop(r, ask_port, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
    shards_reply(2, lo, hi, pr, rep);
    answer(r, 1);
}

static lb_redis *cluster(int wire, int replica_reads, int retry_ms)
{
    lb_redis_config cfg;
    char err[256];
    CHECK(lb_redis_config_from_url(&cfg, "redis+cluster://127.0.0.1:7000,127.0.0.1:7001", err,
                                   sizeof err) == LB_REDIS_OK);
    cfg.cluster_replica_reads = replica_reads;
    cfg.cluster_retry_ms = retry_ms;
    lb_redis *r = lb_redis_new(&cfg);
    lb_redis_config_free(&cfg);
    CHECK(r != NULL);
    if (wire)
        lb_cluster_use_wire(r);
    return r;
}

/* "{a}" is in slot 15495: the upper half, 7001 in the map of expect_map. */
static void get_a(lb_redis_batch *b)
{
    lb_redis_batch_init(b);
    lb_redis_batch_argv(b, 2, (const char *const[]){"GET", "{a}k"}, NULL);
}

/* ------------------------------------------------------------------ tests */

/* (1) A plain batch: the map is read once (the first node named, none open),
 * then one hop to the slot's primary, whose replies route_end gives. */
static void test_plain(void)
{
    CHECK(lb_cluster_key_slot("a", 1) == 15495);
    for (int wire = 0; wire < 2; wire++) {
        lb_redis *r = cluster(wire, 0, 0);
        lb_redis_batch b;
        get_a(&b);
        CHECK(lb_cluster_route_begin(r, &b, LB_REDIS_IDEMPOTENT) == LB_REDIS_OK);
        expect_map(r, 7000, 7001, 0);
        CHECK(lb_cluster_map_reads(r) == 1);
        lb_cluster_hop h;
        CHECK(lb_cluster_route_next(r, &h) == 1 && h.b == &b && lb_cluster_node_port(r, h.node) == 7001 &&
              h.flags == (LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS));
        CHECK(lb_cluster_route_next(r, &h) == 1 && h.b == &b); /* asked again: the same hop */
        put("$1\r\nv\r\n");
        answer(r, 1);
        expect_end(r);
        lb_reply **rs = NULL;
        CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_OK && rs && rs[0]->type == LB_REPLY_STRING &&
              strcmp(rs[0]->str, "v") == 0);
        /* The map is kept: the next route is one hop; READ_REPLICA without replica
         * reads in the config goes to the primary, the flag not passed down. */
        CHECK(lb_cluster_route_begin(r, &b, LB_REDIS_READ_REPLICA) == LB_REDIS_OK);
        expect_hop(r, 7001, "GET {a}k", 0);
        put("-ERR boom\r\n");
        answer(r, 1);
        expect_end(r);
        CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_ERR_REPLY && rs &&
              strcmp(lb_redis_errstr(r), "ERR boom") == 0 && lb_redis_err_index(r) == 0);
        CHECK(lb_cluster_map_reads(r) == 1);
        /* A batch of two slots: ARG, nothing handed out; an empty one: OK at once. */
        lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "other"}, NULL);
        CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_ERR_ARG);
        expect_end(r);
        CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_ERR_ARG && !rs &&
              strstr(lb_redis_errstr(r), "one slot"));
        lb_redis_batch_clear(&b);
        CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
        expect_end(r);
        CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_OK && !rs);
        /* Ended before its last hop: ARG. */
        lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "{a}k"}, NULL);
        CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
        CHECK(lb_cluster_route_next(r, &h) == 1);
        CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_ERR_ARG && !rs);
        expect_end(r);
        lb_redis_batch_free(&b);
        lb_redis_free(r);
    }
}

/* (2) MOVED: the map is read again (CLUSTER SHARDS; a node with an open
 * connection asked first), then the command goes to the new node; ASK: ASKING
 * and the command on the node named, once, the map kept. */
static void test_moved_ask(void)
{
    lb_redis *r = cluster(1, 0, 0);
    lb_redis_batch b;
    get_a(&b);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_map(r, 7000, 7001, 0);
    int n1 = expect_hop(r, 7001, "GET {a}k", 0);
    CHECK(lb_wire_opened(lb_cluster_node_conn(r, n1)) == LB_REDIS_OK); /* 7001's is open now */
    put("-MOVED 15495 127.0.0.1:7002\r\n");
    answer(r, 1);
    expect_map(r, 7001, 7002, 0); /* asked the open connection first */
    CHECK(lb_cluster_map_reads(r) == 2);
    expect_hop(r, 7002, "GET {a}k", 0);
    put("$1\r\nw\r\n");
    answer(r, 1);
    expect_end(r);
    lb_reply **rs = NULL;
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_OK && rs && strcmp(rs[0]->str, "w") == 0);

    /* Two commands, the second refused with ASK: the first's reply stays. */
    lb_redis_batch_argv(&b, 3, (const char *const[]){"SET", "{a}j", "1"}, NULL);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_hop(r, 7002, "GET {a}k|SET {a}j 1", 0);
    put("$1\r\nx\r\n-ASK 15495 127.0.0.1:7003\r\n");
    answer(r, 2);
    expect_hop(r, 7003, "ASKING|SET {a}j 1", 0);
    put("+OK\r\n+OK\r\n");
    answer(r, 2);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_OK && rs && strcmp(rs[0]->str, "x") == 0 &&
          rs[1]->type == LB_REPLY_STATUS && strcmp(rs[1]->str, "OK") == 0);
    CHECK(lb_cluster_map_reads(r) == 2);
    /* The map kept: 7002 still serves it. */
    lb_redis_batch_clear(&b);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "{a}k"}, NULL);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_hop(r, 7002, "GET {a}k", 0);
    /* ASK every time: LB_CLUSTER_MAX_REDIRECTS resends, then the refusal is the reply. */
    put("-ASK 15495 127.0.0.1:7003\r\n");
    answer(r, 1);
    for (int k = 0; k < LB_CLUSTER_MAX_REDIRECTS; k++) {
        expect_hop(r, 7003, "ASKING|GET {a}k", 0);
        put("+OK\r\n-ASK 15495 127.0.0.1:7003\r\n");
        answer(r, 2);
    }
    expect_end(r);
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_ERR_REPLY && rs &&
          strncmp(lb_redis_errstr(r), "ASK 15495", 9) == 0);
    lb_redis_batch_free(&b);
    lb_redis_free(r);
}

/* (3) TRYAGAIN / CLUSTERDOWN: a pause of 50 ms, the map read again, the
 * command resent; then 100 ms. */
static void test_tryagain(void)
{
    lb_redis *r = cluster(1, 0, 0);
    lb_redis_batch b;
    get_a(&b);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_map(r, 7000, 7001, 0);
    expect_hop(r, 7001, "GET {a}k", 0);
    put("-TRYAGAIN Multiple keys request during rehashing of slot\r\n");
    answer(r, 1);
    expect_pause(r, 50);
    expect_map(r, 7000, 7001, 0);
    expect_hop(r, 7001, "GET {a}k", 0);
    put("-CLUSTERDOWN The cluster is down\r\n");
    answer(r, 1);
    expect_pause(r, 100);
    expect_map(r, 7000, 7001, 0);
    expect_hop(r, 7001, "GET {a}k", 0);
    put("$1\r\nz\r\n");
    answer(r, 1);
    expect_end(r);
    lb_reply **rs = NULL;
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_OK && rs && strcmp(rs[0]->str, "z") == 0);
    CHECK(lb_cluster_map_reads(r) == 3);
    /* A new route starts its backoff again at 50 ms. */
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_hop(r, 7001, "GET {a}k", 0);
    put("-TRYAGAIN x\r\n");
    answer(r, 1);
    expect_pause(r, 50);
    lb_redis_batch_free(&b);
    lb_redis_free(r);
}

/* (4) A node that cannot be reached: CONNECT (and IO of an idempotent batch)
 * -> pause, map read again, resent; IO without IDEMPOTENT, IO with KEPT_CONN,
 * TIMEOUT: over at once with the node's message. */
static void test_unreachable(void)
{
    lb_redis *r = cluster(0, 0, 0);
    lb_redis_batch b;
    get_a(&b);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_map(r, 7000, 7001, 0);
    int n1 = expect_hop(r, 7001, "GET {a}k", 0);
    fail(r, n1, LB_REDIS_ERR_CONNECT);
    expect_pause(r, 50);
    expect_map(r, 7000, 7001, 0);
    expect_hop(r, 7001, "GET {a}k", 0);
    fail(r, n1, LB_REDIS_ERR_IO); /* not idempotent: may have run */
    expect_end(r);
    lb_reply **rs = NULL;
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_ERR_IO && !rs &&
          strcmp(lb_redis_errstr(r), "canned io") == 0);

    /* The map was read again for the retry, and is kept after a failure not retried. */
    CHECK(lb_cluster_route_begin(r, &b, LB_REDIS_IDEMPOTENT) == LB_REDIS_OK);
    expect_hop(r, 7001, "GET {a}k", LB_REDIS_IDEMPOTENT);
    fail(r, n1, LB_REDIS_ERR_IO); /* idempotent: again */
    expect_pause(r, 50);
    expect_map(r, 7000, 7001, 0);
    expect_hop(r, 7001, "GET {a}k", LB_REDIS_IDEMPOTENT);
    fail(r, n1, LB_REDIS_ERR_TIMEOUT); /* never again */
    expect_end(r);
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_ERR_TIMEOUT && !rs &&
          strcmp(lb_redis_errstr(r), "canned timeout") == 0);

    CHECK(lb_cluster_route_begin(r, &b, LB_REDIS_IDEMPOTENT | LB_REDIS_KEPT_CONN) == LB_REDIS_OK);
    expect_hop(r, 7001, "GET {a}k", LB_REDIS_IDEMPOTENT | LB_REDIS_KEPT_CONN);
    fail(r, n1, LB_REDIS_ERR_IO); /* the caller prepared that connection: not again */
    expect_end(r);
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_ERR_IO);

    /* The map read itself: a node that cannot be reached is passed over, the
     * next one asked; none: CONNECT, a pause, and the read again. */
    lb_redis_free(r);
    r = cluster(0, 0, 0);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    int n0 = expect_hop(r, 7000, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
    fail(r, n0, LB_REDIS_ERR_CONNECT);
    expect_hop(r, 7001, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
    fail(r, n1, LB_REDIS_ERR_CONNECT);
    expect_pause(r, 50);
    expect_hop(r, 7000, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
    put("-ERR unknown subcommand 'SHARDS'\r\n"); /* before Redis 7 */
    answer(r, 1);
    expect_hop(r, 7000, "CLUSTER SLOTS", LB_REDIS_IDEMPOTENT);
    put("*1\r\n*3\r\n:0\r\n:16383\r\n*2\r\n$9\r\n127.0.0.1\r\n:7005\r\n");
    answer(r, 1);
    expect_hop(r, 7005, "GET {a}k", 0);
    put(":1\r\n");
    answer(r, 1);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_OK && rs && rs[0]->integer == 1);

    /* A refused map (not a map): PROTOCOL, told when no node gave one. */
    lb_redis_free(r);
    r = cluster(0, 0, 0);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    n0 = expect_hop(r, 7000, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
    put("*1\r\n$1\r\nx\r\n");
    answer(r, 1);
    n1 = expect_hop(r, 7001, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
    fail(r, n1, LB_REDIS_ERR_TIMEOUT);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_ERR_PROTOCOL &&
          strstr(lb_redis_errstr(r), "not a slot map"));
    lb_redis_batch_free(&b);
    lb_redis_free(r);
}

/* The budget: once spent, a refusal stays the reply, a failure is told. */
static void test_budget(void)
{
    lb_redis *r = cluster(1, 0, 1); /* 1 ms */
    lb_redis_batch b;
    get_a(&b);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_map(r, 7000, 7001, 0);
    expect_hop(r, 7001, "GET {a}k", 0);
    put("-TRYAGAIN x\r\n");
    answer(r, 1);
    expect_pause(r, 1); /* the backoff, cut to the budget left */
    /* the pause is the driver's to take: 3 ms pass, the 1 ms budget is spent (the
     * route reads the monotonic clock; passing time is what this case is about) */
    struct timespec t = {0, 3000000L};
    nanosleep(&t, NULL);
    expect_map(r, 7000, 7001, 0);
    expect_hop(r, 7001, "GET {a}k", 0);
    put("-TRYAGAIN x\r\n");
    answer(r, 1);
    expect_end(r);
    lb_reply **rs = NULL;
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_ERR_REPLY && rs &&
          strcmp(lb_redis_errstr(r), "TRYAGAIN x") == 0);
    lb_redis_batch_free(&b);
    lb_redis_free(r);
}

/* Replica reads: READONLY once per connection of the replica, then the batch. */
static void test_replica(void)
{
    lb_redis *r = cluster(1, 1, 0);
    lb_redis_batch b;
    get_a(&b);
    CHECK(lb_cluster_route_begin(r, &b, LB_REDIS_READ_REPLICA | LB_REDIS_IDEMPOTENT) == LB_REDIS_OK);
    expect_map(r, 7000, 7001, 7011);
    int rep = expect_hop(r, 7011, "READONLY", LB_REDIS_IDEMPOTENT);
    lb_redis *rc = lb_cluster_node_conn(r, rep);
    CHECK(rc && lb_wire_is(rc) && lb_wire_opened(rc) == LB_REDIS_OK);
    put("+OK\r\n");
    answer(r, 1);
    expect_hop(r, 7011, "GET {a}k", LB_REDIS_IDEMPOTENT);
    put("$1\r\nr\r\n");
    answer(r, 1);
    expect_end(r);
    lb_reply **rs = NULL;
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_OK && strcmp(rs[0]->str, "r") == 0);
    /* The same connection: no READONLY. */
    CHECK(lb_cluster_route_begin(r, &b, LB_REDIS_READ_REPLICA) == LB_REDIS_OK);
    expect_hop(r, 7011, "GET {a}k", 0);
    put("$1\r\nr\r\n");
    answer(r, 1);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_OK);
    /* A new connection: READONLY again; refused: the route ends with its text. */
    lb_wire_closed(rc);
    CHECK(lb_wire_opened(rc) == LB_REDIS_OK);
    CHECK(lb_cluster_route_begin(r, &b, LB_REDIS_READ_REPLICA) == LB_REDIS_OK);
    expect_hop(r, 7011, "READONLY", LB_REDIS_IDEMPOTENT);
    put("-ERR no READONLY here\r\n");
    answer(r, 1);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, &rs) == LB_REDIS_ERR_REPLY && !rs &&
          strcmp(lb_redis_errstr(r), "ERR no READONLY here") == 0);
    /* Writes (no READ_REPLICA) go to the primary. */
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_map(r, 7011, 7001, 7011); /* out of date after the refused READONLY; the open
                                      * connection asked first */
    expect_hop(r, 7001, "GET {a}k", 0);
    lb_redis_batch_free(&b);
    lb_redis_free(r);
}

/* A wire cluster client has no socket: exec refuses, nothing crashes. */
static void test_wire_exec_refused(void)
{
    lb_redis *r = cluster(1, 0, 0);
    lb_redis_batch b;
    get_a(&b);
    lb_reply **rs = (lb_reply **)&b;
    CHECK(lb_redis_exec(r, &b, 0, &rs) == LB_REDIS_ERR_ARG && !rs &&
          strstr(lb_redis_errstr(r), "wire transport"));
    CHECK(lb_redis_connect(r) == LB_REDIS_ERR_ARG);
    CHECK(lb_cluster_node_conn(r, 5) == NULL && lb_cluster_node_host(r, 5) == NULL);
    CHECK(lb_cluster_node_conn(r, 0) && lb_wire_is(lb_cluster_node_conn(r, 0)));
    lb_redis_batch_free(&b);
    lb_redis_free(r);
}

/* The round trip as steps is the client interface's (lb_redis_step_*): a
 * cluster client whose nodes are wire clients hands out its route's hops as
 * its nodes' steps, a wire client its own, a node client (its own sockets)
 * only the waits of the blocking driver (lanes.h). */
static void test_steps_by_interface(void)
{
    lb_redis *r = cluster(1, 0, 0);
    lb_redis_batch b;
    get_a(&b);
    lb_redis_step s;
    CHECK(lb_redis_step_begin(r, &b, 0) == LB_REDIS_OK);
    CHECK(lb_redis_step_next(r, &s) && s.what == LB_STEP_CONNECT && s.node == 0 &&
          s.cfg->port == 7000); /* the map, from the first node named */
    CHECK(lb_redis_step_client(r, 0) == lb_cluster_node_conn(r, 0));
    CHECK(!lb_redis_step_open(r));
    lb_redis_step_connected(r, LB_REDIS_ERR_CONNECT, "connection refused");
    CHECK(lb_redis_step_next(r, &s) && s.what == LB_STEP_CONNECT && s.node == 1 &&
          s.cfg->port == 7001);
    lb_redis_step_connected(r, LB_REDIS_OK, NULL);
    CHECK(lb_redis_step_open(r));
    CHECK(lb_redis_step_next(r, &s) && s.what == LB_STEP_SEND && s.node == 1);

    lb_redis *w = lb_wire_new_cfg(lb_redis_get_config(lb_cluster_node_conn(r, 0)));
    CHECK(w && lb_redis_step_begin(w, &b, 0) == LB_REDIS_OK);
    CHECK(lb_redis_step_next(w, &s) && s.what == LB_STEP_CONNECT && s.node == 0 && !s.probe);
    CHECK(lb_redis_step_client(w, 0) == w && lb_redis_step_client(w, 1) == NULL);
    lb_redis_free(w);
    lb_redis_free(r);

    /* A node client (its own sockets) connects and moves the bytes itself:
     * its steps only wait (a socket, a pause) for the blocking driver. */
    r = cluster(0, 0, 0);
    lb_redis *n = lb_cluster_node_conn(r, 0);
    lb_reply **rs = (lb_reply **)&b;
    CHECK(n && lb_redis_step_begin(n, &b, 0) == LB_REDIS_OK);
    int steps = 0;
    while (steps < 100 && lb_redis_step_next(n, &s)) {
        CHECK(s.what == LB_STEP_WAIT || s.what == LB_STEP_PAUSE);
        if (s.what == LB_STEP_WAIT)
            lb_redis_step_ready(n, 0, EBADF); /* the wait failed: the round trip ends */
        steps++;
    }
    CHECK(steps < 100 && lb_redis_step_end(n, &rs) != LB_REDIS_OK && !rs);
    CHECK(lb_redis_step_client(n, 0) == n && lb_redis_step_client(n, 1) == NULL);
    lb_redis_batch_free(&b);
    lb_redis_free(r);
}

/* ------------------------------------------------- big maps, dropped nodes */

/* A reply of any size, built in a growing buffer. */
static char *bbuf;
static size_t blen, bcap;
static void bput(const char *fmt, ...)
{
    va_list ap;
    for (;;) {
        va_start(ap, fmt);
        int n = vsnprintf(bbuf ? bbuf + blen : NULL, bbuf ? bcap - blen : 0, fmt, ap);
        va_end(ap);
        if (bbuf && blen + (size_t)n < bcap) {
            blen += (size_t)n;
            return;
        }
        bcap = bcap ? bcap * 2 : 1 << 16;
        bbuf = realloc(bbuf, bcap);
    }
}
static void bbulk(const char *s) { bput("$%zu\r\n%s\r\n", strlen(s), s); }

static void banswer(lb_redis *r)
{
    char why[256];
    size_t got = 0;
    lb_resp_reader_start(rd, LB_REDIS_DEFAULT_MAX_ELEMENTS, 0);
    CHECK(lb_resp_reader_feed(rd, bbuf, blen, why, sizeof why) == LB_REDIS_OK);
    CHECK_MSG(lb_resp_reader_take(rd, 1, rs_store, &got, why, sizeof why) == LB_REDIS_OK &&
              got == 1, "%s", why);
    blen = 0;
    lb_cluster_route_done(r, LB_REDIS_OK, rs_store);
}

/* A CLUSTER SHARDS node entry on 127.0.0.1:port. */
static void bnode(int port, int primary)
{
    bput("*8\r\n");
    bbulk("port");
    bput(":%d\r\n", port);
    bbulk("endpoint");
    bbulk("127.0.0.1");
    bbulk("role");
    bbulk(primary ? "master" : "replica");
    bbulk("health");
    bbulk("online");
}

/* A key of each slot. */
static char slot_key[LB_CLUSTER_SLOTS][16];
static void find_slot_keys(void)
{
    size_t found = 0;
    for (unsigned long i = 0; found < LB_CLUSTER_SLOTS; i++) {
        char k[16];
        snprintf(k, sizeof k, "k%lu", i);
        unsigned s = lb_cluster_key_slot(k, strlen(k));
        if (!slot_key[s][0]) {
            memcpy(slot_key[s], k, sizeof k);
            found++;
        }
    }
}

/* The next hop of a GET of slot s's key goes to port; answered. */
static void expect_slot(lb_redis *r, unsigned s, int port)
{
    lb_redis_batch b;
    lb_redis_batch_init(&b);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", slot_key[s]}, NULL);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    lb_cluster_hop h;
    CHECK(lb_cluster_route_next(r, &h) == 1 && h.b == &b);
    CHECK_MSG(lb_cluster_node_port(r, h.node) == port, "slot %u on %d, wanted %d", s,
              lb_cluster_node_port(r, h.node), port);
    put("$1\r\nv\r\n");
    answer(r, 1);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, NULL) == LB_REDIS_OK);
    lb_redis_batch_free(&b);
}

/* (8) A big map, read whole: 16384 single-slot ranges over 1000 shards of a
 * primary and 3 replicas (0.7 MB of CLUSTER SHARDS; the reviewer's 0.5 MB
 * took 20 s when the parse went over every node for every range); the map
 * hop carries the byte bound; a map naming a slot twice is refused. */
static void test_big_map(void)
{
    find_slot_keys();
    lb_redis *r = cluster(1, 0, 0);
    lb_redis_batch b;
    get_a(&b);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    lb_cluster_hop h;
    CHECK(lb_cluster_route_next(r, &h) == 1 && h.b && lb_cluster_node_port(r, h.node) == 7000);
    CHECK(h.b->bytes_set && h.b->max_bytes >= LB_CLUSTER_MAP_MAX_BYTES &&
          h.b->max_bytes <= LB_CLUSTER_MAP_MAX_BYTES + 4096);
    const int shards = 1000;
    bput("*%d\r\n", shards);
    for (int k = 0; k < shards; k++) {
        int n = 0;
        for (int s = k; s < LB_CLUSTER_SLOTS; s += shards)
            n++;
        bput("*4\r\n");
        bbulk("slots");
        bput("*%d\r\n", 2 * n);
        for (int s = k; s < LB_CLUSTER_SLOTS; s += shards)
            bput(":%d\r\n:%d\r\n", s, s);
        bbulk("nodes");
        bput("*4\r\n");
        for (int j = 3; j >= 0; j--) /* the primary last: found wherever it is */
            bnode(10000 + 4 * k + j, j == 0);
    }
    CHECK(blen > 500000);
    banswer(r);
    CHECK(lb_cluster_map_reads(r) == 1);
    CHECK(lb_cluster_route_next(r, &h) == 1 && h.b == &b);
    CHECK(lb_cluster_node_port(r, h.node) == 10000 + 4 * (15495 % shards));
    put("$1\r\nv\r\n");
    answer(r, 1);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, NULL) == LB_REDIS_OK);
    for (unsigned s = 0; s < LB_CLUSTER_SLOTS; s++)
        expect_slot(r, s, 10000 + 4 * (int)(s % shards));
    CHECK(lb_cluster_map_reads(r) == 1);
    lb_redis_free(r);

    /* Two ranges sharing slot 100: no map. */
    r = cluster(1, 0, 300);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_hop(r, 7000, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
    bput("*2\r\n");
    for (int k = 0; k < 2; k++) {
        bput("*4\r\n");
        bbulk("slots");
        bput("*2\r\n:%d\r\n:%d\r\n", k ? 100 : 0, k ? 16383 : 100);
        bbulk("nodes");
        bput("*1\r\n");
        bnode(7000 + k, 1);
    }
    banswer(r);
    fail(r, expect_hop(r, 7001, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT), /* the other seed */
         LB_REDIS_ERR_CONNECT);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, NULL) == LB_REDIS_ERR_PROTOCOL &&
          strstr(lb_redis_errstr(r), "not a slot map"));
    lb_redis_batch_free(&b);
    lb_redis_free(r);
    free(bbuf);
    bbuf = NULL;
    blen = bcap = 0;
}

/* The index of the node at port, -1 when the client has none. */
static int node_at(lb_redis *r, int port)
{
    for (int i = 0; i < 40000; i++) {
        if (lb_cluster_node_host(r, i) && lb_cluster_node_port(r, i) == port)
            return i;
        if (!lb_cluster_node_host(r, i) && !lb_cluster_node_port(r, i) &&
            !lb_cluster_node_conn(r, i) && i > 64)
            break;
    }
    return -1;
}

/* (9) Nodes no map names any more are dropped when the next route begins: a
 * -MOVED / -ASK target the map does not name, the nodes of an older map; the
 * seeds stay. */
static void test_dropped_nodes(void)
{
    lb_redis *r = cluster(1, 0, 0);
    lb_redis_batch b;
    get_a(&b);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_map(r, 7000, 7002, 0);
    expect_hop(r, 7002, "GET {a}k", 0);
    put("-ASK 15495 127.0.0.1:7100\r\n");
    answer(r, 1);
    int t = expect_hop(r, 7100, "ASKING|GET {a}k", 0);
    CHECK(lb_wire_opened(lb_cluster_node_conn(r, t)) == LB_REDIS_OK);
    put("+OK\r\n$1\r\nv\r\n");
    answer(r, 2);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, NULL) == LB_REDIS_OK);
    CHECK(node_at(r, 7100) == t);
    /* the next route: 7100 (named by no map) is gone, its index free */
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    CHECK(node_at(r, 7100) < 0 && !lb_cluster_node_host(r, t) && !lb_cluster_node_conn(r, t));
    expect_hop(r, 7002, "GET {a}k", 0);
    put("-MOVED 15495 127.0.0.1:7003\r\n");
    answer(r, 1);
    expect_map(r, 7000, 7003, 0); /* 7002 named no more */
    expect_hop(r, 7003, "GET {a}k", 0);
    put("$1\r\nv\r\n");
    answer(r, 1);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, NULL) == LB_REDIS_OK);
    CHECK(node_at(r, 7002) >= 0);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    CHECK(node_at(r, 7002) < 0 && node_at(r, 7003) >= 0);
    CHECK(node_at(r, 7000) >= 0 && node_at(r, 7001) >= 0); /* the seeds */
    expect_hop(r, 7003, "GET {a}k", 0);
    put("$1\r\nv\r\n");
    answer(r, 1);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, NULL) == LB_REDIS_OK);
    /* Many redirects to new addresses: the nodes never pile up. */
    for (int k = 0; k < 500; k++) {
        CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
        expect_hop(r, 7003, "GET {a}k", 0);
        put("-ASK 15495 127.0.0.1:%d\r\n", 20000 + k);
        answer(r, 1);
        expect_hop(r, 20000 + k, "ASKING|GET {a}k", 0);
        put("+OK\r\n$1\r\nv\r\n");
        answer(r, 2);
        expect_end(r);
        CHECK(lb_cluster_route_end(r, NULL) == LB_REDIS_OK);
    }
    int live = 0;
    for (int i = 0; i < 600; i++)
        live += lb_cluster_node_host(r, i) != NULL;
    CHECK_MSG(live <= 6, "%d nodes alive", live);
    lb_redis_batch_free(&b);
    lb_redis_free(r);
}

/* (10) A map that leaves slots unserved (its node has not learned them yet) is
 * read from another node; the complete one is used. */
static void test_incomplete_map(void)
{
    for (int wire = 0; wire < 2; wire++) {
        lb_redis *r = cluster(wire, 0, 0);
        lb_redis_batch b;
        get_a(&b);
        CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
        long lo[1] = {0}, hi[1] = {8191};
        int pr[1] = {7000}, rep[1] = {0};
        expect_hop(r, 7000, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
        shards_reply(1, lo, hi, pr, rep);
        answer(r, 1);
        expect_map(r, 7001, 7002, 0); /* the next node: complete */
        CHECK(lb_cluster_map_reads(r) == 1);
        expect_hop(r, 7002, "GET {a}k", 0);
        put("$1\r\nv\r\n");
        answer(r, 1);
        expect_end(r);
        CHECK(lb_cluster_route_end(r, NULL) == LB_REDIS_OK);
        lb_redis_batch_free(&b);
        lb_redis_free(r);
    }
    /* No node knows slot 15495: the most complete map is used, and the route waits
     * for the slot as for a cluster that is down (pauses, then the map again). */
    lb_redis *r = cluster(1, 0, 120);
    lb_redis_batch b;
    get_a(&b);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    long lo[1] = {0}, hi[1] = {8191};
    int pr[1] = {7000}, rep[1] = {0};
    for (int port = 7000; port <= 7001; port++) {
        expect_hop(r, port, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
        shards_reply(1, lo, hi, pr, rep);
        answer(r, 1);
    }
    expect_pause(r, 50);
    CHECK(lb_cluster_map_reads(r) == 1);
    lb_cluster_hop h;
    int reads = 0;
    while (lb_cluster_route_next(r, &h)) {
        if (!h.b)
            continue;
        CHECK(batch_is(h.b, "CLUSTER SHARDS"));
        shards_reply(1, lo, hi, pr, rep);
        answer(r, 1);
        reads++;
    }
    CHECK(reads >= 2);
    CHECK(lb_cluster_route_end(r, NULL) == LB_REDIS_ERR_CONNECT &&
          strstr(lb_redis_errstr(r), "serves slot 15495"));
    /* a key of a served slot works with that map */
    CHECK(lb_cluster_key_slot("b", 1) < 8192);
    lb_redis_batch_clear(&b);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "{b}k"}, NULL);
    CHECK(lb_cluster_route_begin(r, &b, 0) == LB_REDIS_OK);
    expect_hop(r, 7000, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
    shards_reply(1, lo, hi, pr, rep);
    answer(r, 1);
    expect_hop(r, 7001, "CLUSTER SHARDS", LB_REDIS_IDEMPOTENT);
    shards_reply(1, lo, hi, pr, rep);
    answer(r, 1);
    expect_hop(r, 7000, "GET {b}k", 0);
    put("$1\r\nv\r\n");
    answer(r, 1);
    expect_end(r);
    CHECK(lb_cluster_route_end(r, NULL) == LB_REDIS_OK);
    lb_redis_batch_free(&b);
    lb_redis_free(r);
}

static const t_case cases[] = {
    {"route_plain", test_plain},
    {"route_moved_ask", test_moved_ask},
    {"route_tryagain", test_tryagain},
    {"route_unreachable", test_unreachable},
    {"route_budget", test_budget},
    {"route_replica", test_replica},
    {"route_wire_exec_refused", test_wire_exec_refused},
    {"route_steps_by_interface", test_steps_by_interface},
    {"route_big_map", test_big_map},
    {"route_dropped_nodes", test_dropped_nodes},
    {"route_incomplete_map", test_incomplete_map},
};

static int run(int argc, char **argv)
{
    rd = lb_resp_reader_new();
    int rc = t_run(cases, sizeof cases / sizeof cases[0], argc, argv, 0);
    lb_resp_reader_free(rd);
    return rc;
}

int main(int argc, char **argv) { return run(argc, argv); }
