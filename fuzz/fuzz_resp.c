/* fuzz_resp.c: RESP replies from a hostile server, through the whole client.
 *
 * The client is the real one: lb_redis (hiredis's reader with this project's
 * callbacks and bounds, the round-trip loop, the handshake) under
 * lb_bitmap_* (RedisFilter, both layouts) and lb_bf_* (RedisBloomFilter), with every
 * reply check of csrc/redis/bitmap.c, redisbloom.c, redisbloom_proto.c, maxmemory.c and
 * reply.h.  The server is a thread of this process on a unix socket
 * (the config's unix_path): it answers each request the client sends with
 * the next chunk of the fuzz input, byte for byte.
 *
 * Input: 4 header bytes, then the reply chunks, separated by "\n--\n"
 * (chunk i answers the i-th request, whatever connection it comes on):
 *   byte 0  the operation (ops[] below, modulo its length)
 *   byte 1  flags: 1 SETBIT mode, 2 ttl, 4 adopt, 8 non-scaling, 16 no_create,
 *           32 AUTH on connect, 64 SELECT on connect, 128 a filter of 2 parts
 *   byte 2  low 2 bits: keys - 1; next 3 bits: k - 1; bit 5: run the
 *           operation twice (the second on the kept or a new connection);
 *           bit 6: a RedisFilter of the blocked layout (m = 512 (1 + byte 3
 *           % 16), or 2^32 + 512 with flag 128; k = 8 or 16)
 *   byte 3  expansion (1 + b % 4) and the scandump iterator (b)
 *
 * No timeout is needed for a short reply: after sending a chunk the server
 * scans it with the framing rules of hiredis's reader; unless it holds a
 * complete reply for every command of the request, it closes the connection,
 * so the client reads what is there and then gets EOF at once.  The client's
 * timeouts (1 s) are only a safety net; a timeout is counted and printed at
 * exit (it would mean the scan below disagrees with hiredis).
 *
 * Memory: one server thread for the whole run (not one per input), every
 * connection closed on both sides before the next input, the client freed
 * after each input; replies live in the client's arena.  See README.md for
 * the limits the Makefile runs this with. */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "bitmap.h"
#include "cluster_map.h"
#include "client.h"
#include "factory.h"
#include "redisbloom.h"

#define CHECK(c)              \
    do {                      \
        if (!(c))             \
            __builtin_trap(); \
    } while (0)

#define SEP "\n--\n"
#define SEP_LEN 4
#define MAX_CHUNKS 64
#define CLIENT_TIMEOUT_MS 1000
#define SERVER_WAIT_MS 2000

/* ------------------------------------------------------------ the script */

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static const uint8_t *chunk_ptr[MAX_CHUNKS];
static size_t chunk_len[MAX_CHUNKS];
static size_t nchunks, next_chunk;
static int server_busy; /* a connection is open on the server side */
static int listen_fd = -1;
static char sock_path[108];
static unsigned long client_timeouts, connections; /* connections: accepted */
static unsigned long client_connects;                /* opened by the clients */

/* ------------------------------------------- hiredis's framing, as a scan */

/* hiredis 0.14's seekNewline: the first "\r\n" in b[from..n). */
static long seek_crlf(const uint8_t *b, size_t n, size_t from)
{
    for (size_t i = from; i + 1 < n; i++)
        if (b[i] == '\r' && b[i + 1] == '\n')
            return (long)i;
    return -1;
}

/* A strict decimal (string2ll's rules: optional '-', no leading zero, no
 * '+'): 0 ok, -1 not one. */
static int strict_ll(const uint8_t *s, size_t n, long long *out)
{
    size_t i = 0;
    int neg = 0;
    unsigned long long v = 0;
    if (n == 0 || n > 20)
        return -1;
    if (n == 1 && s[0] == '0') {
        *out = 0;
        return 0;
    }
    if (s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i >= n || s[i] < '1' || s[i] > '9')
        return -1;
    for (; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        if (v > (unsigned long long)INT64_MAX / 10)
            return -1;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v > (unsigned long long)INT64_MAX)
        return -1;
    *out = neg ? -(long long)v : (long long)v;
    return 0;
}

/* One reply at b[*pos..n): 1 complete (*pos past it), 0 not (incomplete, or
 * something hiredis refuses, or that this scan does not model: the server
 * then closes, which is always safe). */
static int scan_reply(const uint8_t *b, size_t n, size_t *pos, int depth)
{
    size_t p = *pos;
    if (p >= n)
        return 0;
    uint8_t t = b[p++];
    long e = seek_crlf(b, n, p);
    if (e < 0)
        return 0;
    const uint8_t *line = b + p;
    size_t ll = (size_t)e - p;
    p = (size_t)e + 2;
    long long v;
    switch (t) {
    case '+':
    case '-':
        break;
    case ':':
        if (strict_ll(line, ll, &v))
            return 0;
        break;
    case '$':
        if (strict_ll(line, ll, &v) || v < -1)
            return 0;
        if (v >= 0) {
            if ((unsigned long long)v > n - p || n - p - (size_t)v < 2)
                return 0;
            p += (size_t)v + 2;
        }
        break;
    case '*':
        if (depth >= 8 || strict_ll(line, ll, &v) || v < -1 || v > 0x7fffffff)
            return 0;
        for (long long i = 0; i < v; i++)
            if (!scan_reply(b, n, &p, depth + 1))
                return 0;
        break;
    default:
        return 0;
    }
    *pos = p;
    return 1;
}

/* Complete commands of a request (arrays of bulk strings) in b[0..n);
 * *used = the bytes they take. */
static size_t scan_request(const uint8_t *b, size_t n, size_t *used)
{
    size_t p = 0, cmds = 0;
    *used = 0;
    for (;;) {
        if (p >= n || b[p] != '*')
            return cmds;
        long e = seek_crlf(b, n, p + 1);
        long long argc;
        if (e < 0 || strict_ll(b + p + 1, (size_t)e - p - 1, &argc) || argc < 1)
            return cmds;
        size_t q = (size_t)e + 2;
        for (long long a = 0; a < argc; a++) {
            if (q >= n || b[q] != '$')
                return cmds;
            long e2 = seek_crlf(b, n, q + 1);
            long long len;
            if (e2 < 0 || strict_ll(b + q + 1, (size_t)e2 - q - 1, &len) || len < 0)
                return cmds;
            q = (size_t)e2 + 2;
            if ((unsigned long long)len + 2 > n - q)
                return cmds;
            q += (size_t)len + 2;
        }
        p = q;
        cmds++;
        *used = p;
    }
}

/* ------------------------------------------------------------ the server */

static int take_chunk(const uint8_t **p, size_t *n)
{
    int ok = 0;
    pthread_mutex_lock(&mu);
    if (next_chunk < nchunks) {
        *p = chunk_ptr[next_chunk];
        *n = chunk_len[next_chunk];
        next_chunk++;
        ok = 1;
    }
    pthread_mutex_unlock(&mu);
    return ok;
}

static int send_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* LB_FUZZ_RECORD=path: every whole request the server reads is appended to
 * path, each followed by SEP.  fuzz/make_resp_seeds.py runs one input with it
 * to learn what the client asks next, and answers that with a real Redis. */
static void record_request(const uint8_t *req, size_t n)
{
    const char *path = getenv("LB_FUZZ_RECORD");
    if (!path || !*path)
        return;
    FILE *f = fopen(path, "ab");
    if (!f)
        return;
    fwrite(req, 1, n, f);
    fwrite(SEP, 1, SEP_LEN, f);
    fclose(f);
}

static void serve(int fd)
{
    static uint8_t req[1 << 20];
    size_t have = 0;
    for (;;) {
        /* A whole request: complete commands and nothing after them. */
        size_t used = 0, cmds = 0;
        for (;;) {
            struct pollfd pfd = {fd, POLLIN, 0};
            int complete = cmds && used == have;
            int pr = poll(&pfd, 1, complete ? 0 : SERVER_WAIT_MS);
            if (pr < 0 && errno == EINTR)
                continue;
            if (pr == 0 && complete)
                break; /* the request is all there */
            if (pr <= 0)
                return; /* nothing more: the client is gone or stuck */
            if (have == sizeof req)
                return;
            ssize_t k = recv(fd, req + have, sizeof req - have, 0);
            if (k <= 0)
                return; /* the client closed */
            have += (size_t)k;
            cmds = scan_request(req, have, &used);
        }
        record_request(req, used);
        const uint8_t *c;
        size_t cn;
        if (!take_chunk(&c, &cn))
            return; /* the script is over: EOF */
        if (cn && send_all(fd, c, cn) < 0)
            return;
        size_t p = 0, got = 0;
        while (got < cmds && scan_reply(c, cn, &p, 0))
            got++;
        if (got < cmds)
            return; /* the client would wait for more: EOF now */
        memmove(req, req + used, have - used);
        have -= used;
    }
}

static void *server_main(void *arg)
{
    (void)arg;
    for (;;) {
        int fd = accept(listen_fd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            return NULL;
        }
        pthread_mutex_lock(&mu);
        server_busy = 1;
        connections++;
        pthread_mutex_unlock(&mu);
        serve(fd);
        close(fd);
        pthread_mutex_lock(&mu);
        server_busy = 0;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&mu);
    }
}

static void report(void)
{
    fprintf(stderr, "fuzz_resp: %lu connections served, %lu client timeouts\n", connections,
            client_timeouts);
    if (sock_path[0])
        unlink(sock_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    const char *dir = getenv("TMPDIR");
    snprintf(sock_path, sizeof sock_path, "%s/lb-fuzz-resp-%ld.sock", dir && *dir ? dir : "/tmp",
             (long)getpid());
    unlink(sock_path);
    struct sockaddr_un a;
    memset(&a, 0, sizeof a);
    a.sun_family = AF_UNIX;
    memcpy(a.sun_path, sock_path, strlen(sock_path) + 1);
    listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (listen_fd < 0 || bind(listen_fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        listen(listen_fd, 16) < 0) {
        perror("fuzz_resp: listen");
        exit(2);
    }
    pthread_t th;
    if (pthread_create(&th, NULL, server_main, NULL) != 0) {
        perror("fuzz_resp: thread");
        exit(2);
    }
    pthread_detach(th);
    atexit(report);
    return 0;
}

/* ------------------------------------------------------------ the client */

typedef struct {
    uint8_t op, flags, shape, extra;
    size_t nkeys;
    uint32_t k;
} params;

static const lb_key keys[4] = {{"a", 1}, {"bb", 2}, {"key:3", 5}, {"\xff\x00z", 3}};

/* What every failure must leave: a status the header lists, a message,
 * and no connection after anything that may have put the stream out of step. */
static void check_status(lb_redis *conn, lb_redis_status st)
{
    CHECK(st >= LB_REDIS_OK && st <= LB_REDIS_ERR_NOTOWNED);
    if (st == LB_REDIS_ERR_TIMEOUT)
        client_timeouts++;
    if (st == LB_REDIS_OK)
        return;
    /* A message, but for REPLY: that is the server's own text, "" for "-\r\n". */
    CHECK(st == LB_REDIS_ERR_REPLY || lb_redis_errstr(conn)[0] != '\0');
    if (st == LB_REDIS_ERR_PROTOCOL || st == LB_REDIS_ERR_IO || st == LB_REDIS_ERR_TIMEOUT)
        CHECK(!lb_redis_is_connected(conn));
}

static void check_bits(const uint8_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        CHECK(v[i] <= 1);
}

static lb_redis_status bitmap_op(lb_redis *conn, lb_bitmap *bm, const params *p)
{
    uint8_t out[4];
    uint64_t count;
    lb_redis_status st;
    const lb_geometry *g = lb_bitmap_geometry(bm);
    switch (p->op % 8) {
    case 0:
        return lb_bitmap_check_meta(bm);
    case 1:
        st = lb_bitmap_add(bm, keys, p->nkeys, out);
        if (st == LB_REDIS_OK)
            check_bits(out, p->nkeys);
        return st;
    case 2:
        st = lb_bitmap_test(bm, keys, p->nkeys, out);
        if (st == LB_REDIS_OK)
            check_bits(out, p->nkeys);
        return st;
    case 3:
        return lb_bitmap_reset(bm);
    case 4:
    case 5: {
        size_t nb = (size_t)((g->m + 7) / 8);
        if (g->m > 100000)
            return lb_bitmap_bitcount(bm, &count); /* no 512 MiB buffers */
        uint8_t *bits = malloc(nb);
        CHECK(bits);
        for (size_t i = 0; i < nb; i++)
            bits[i] = (uint8_t)(i * 37 + p->extra);
        st = p->op % 8 == 4 ? lb_bitmap_load(bm, bits, nb)
                            : lb_bitmap_snapshot(bm, bits, nb);
        if (st == LB_REDIS_OK && p->op % 8 == 5 && (g->m & 7))
            CHECK((bits[nb - 1] & (0xffu >> (g->m & 7))) == 0); /* no bit past m */
        free(bits);
        return st;
    }
    case 6:
        st = lb_bitmap_bitcount(bm, &count);
        if (st == LB_REDIS_OK)
            CHECK(count <= g->m + 7);
        return st;
    default: {
        lb_geometry got;
        st = lb_bitmap_read_meta(conn, "f", 1, &got);
        if (st == LB_REDIS_OK)
            CHECK(got.m >= 1 && got.m <= LB_MAX_BITS && got.k >= 1 && got.k <= LB_MAX_K);
        return st;
    }
    }
}

static lb_redis_status bloom_op(lb_redis *conn, lb_redisbloom *bf, const params *p)
{
    (void)conn;
    uint8_t out[4];
    lb_redis_status st;
    switch (p->op % 9) {
    case 0: {
        int created = -1;
        st = lb_bf_reserve(bf, &created);
        if (st == LB_REDIS_OK)
            CHECK(created == 0 || created == 1);
        return st;
    }
    case 1:
        st = lb_bf_add(bf, keys, p->nkeys, out);
        if (st == LB_REDIS_OK) {
            check_bits(out, p->nkeys);
            CHECK(lb_bf_last_new(bf) >= 0 && (size_t)lb_bf_last_new(bf) <= p->nkeys);
        }
        if (st == LB_REDIS_ERR_FULL)
            CHECK(lb_bf_full_processed(bf) >= -1 &&
                  lb_bf_full_processed(bf) <= (long long)p->nkeys);
        return st;
    case 2:
        st = lb_bf_test(bf, keys, p->nkeys, out);
        if (st == LB_REDIS_OK)
            check_bits(out, p->nkeys);
        return st;
    case 3:
        return lb_bf_reset(bf);
    case 4: {
        lb_bf_info info;
        st = lb_bf_info_get(bf, &info);
        if (st == LB_REDIS_OK)
            CHECK(info.capacity != 0 && info.filters != 0);
        return st;
    }
    case 5: {
        uint64_t card;
        return lb_bf_card(bf, &card);
    }
    case 6: {
        long long next;
        const char *data;
        size_t len;
        st = lb_bf_scandump(bf, p->extra, &next, &data, &len);
        if (st == LB_REDIS_OK) {
            CHECK(next >= 0);
            if (next)
                CHECK(data && memchr(data, 0, len + 1)); /* readable, NUL-terminated */
        }
        return st;
    }
    case 7: {
        lb_bf_dump d;
        lb_bf_dump_init(&d);
        int done = 0;
        st = LB_REDIS_OK;
        for (int i = 0; i < 64 && st == LB_REDIS_OK && !done; i++) {
            long long iter;
            const char *data;
            size_t len;
            st = lb_bf_dump_step(bf, &d, &done, &iter, &data, &len);
            if (st == LB_REDIS_OK && !done)
                CHECK(iter > 0 && d.bytes <= d.max_bytes && d.chunks <= d.max_chunks);
        }
        lb_bf_dump_free(&d);
        return st;
    }
    default: {
        const lb_bf_chunk chunks[2] = {{1, "head", 4}, {77, "\x00\x01tail", 6}};
        return lb_bf_restore(bf, chunks, 1 + (p->extra & 1), p->flags & 4);
    }
    }
}

/* Each node of a slot map has a host and a port; each range is within the
 * slots, with nodes the map named (or none: -1). */
static unsigned long ranges_seen;
static int nodes_seen;
static int note_node(void *ctx, const char *host, int port)
{
    (void)ctx;
    CHECK(host && port >= 1 && port <= 65535);
    return nodes_seen < LB_CLUSTER_MAP_MAX_NODES ? nodes_seen++ : -1;
}

static int note_range(void *ctx, long lo, long hi, int primary, int replica)
{
    (void)ctx;
    CHECK(lo >= 0 && lo <= hi && hi < 16384);
    CHECK(primary >= -1 && primary < nodes_seen && replica >= -1 && replica < nodes_seen);
    ranges_seen++;
    return 0;
}

static const lb_cluster_map_fns map_fns = {note_node, note_range};

/* A raw batch with the default bounds or bounds from the header. */
static lb_redis_status raw_op(lb_redis *conn, const params *p)
{
    lb_redis_batch b;
    lb_reply **rs = NULL;
    lb_redis_batch_init(&b);
    for (size_t i = 0; i < p->nkeys; i++) {
        lb_redis_batch_cmd(&b, 2);
        lb_redis_batch_arg_str(&b, "GET");
        lb_redis_batch_arg(&b, keys[i].data, keys[i].len);
    }
    if (p->flags & 1)
        lb_redis_batch_expect_elements(&b, p->extra);
    if (p->flags & 2)
        lb_redis_batch_expect_bytes(&b, (size_t)p->extra * 16);
    int flags = (p->flags & 4 ? LB_REDIS_RAW_ERRORS : 0) | (p->flags & 8 ? LB_REDIS_IDEMPOTENT : 0);
    lb_redis_status st = lb_redis_exec(conn, &b, flags, &rs);
    /* Replies come with OK, and with an error reply of the batch (its index
     * set); a REPLY from the handshake (SELECT refused) has none. */
    long ei = lb_redis_err_index(conn);
    if (st == LB_REDIS_OK ||
        ((st == LB_REDIS_ERR_REPLY || st == LB_REDIS_ERR_WRONGTYPE) && ei >= 0)) {
        CHECK(rs);
        if (st != LB_REDIS_OK)
            CHECK((size_t)ei < b.ncmds && rs[ei]->type == LB_REPLY_ERROR);
        for (size_t i = 0; i < b.ncmds; i++) {
            const lb_reply *x = rs[i];
            CHECK(x && x->type >= LB_REPLY_STRING && x->type <= LB_REPLY_ERROR);
            if (x->type == LB_REPLY_ARRAY)
                for (size_t j = 0; j < x->len; j++)
                    CHECK(x->element[j]); /* a whole array: every element there */
            else if (x->type != LB_REPLY_INTEGER && x->type != LB_REPLY_NIL)
                CHECK(x->str && x->str[x->len] == '\0');
            /* The cluster's parsers take whatever a server answers: a slot map
             * (CLUSTER SHARDS or SLOTS), a redirect. */
            ranges_seen = 0;
            nodes_seen = 0;
            (void)lb_cluster_parse_map(x, 1, "asked", (int)(p->flags & 16), &map_fns, NULL);
            nodes_seen = 0;
            (void)lb_cluster_parse_map(x, 0, "asked", 0, &map_fns, NULL);
            if (x->type == LB_REPLY_ERROR) {
                long slot;
                int port;
                char host[64];
                int kind = lb_cluster_redirect(x->str, x->len, &slot, host, sizeof host, &port);
                CHECK(kind == 0 || (slot >= 0 && slot < 16384 && port >= 1 && port <= 65535));
            }
        }
    } else {
        CHECK(!rs);
    }
    lb_redis_batch_free(&b);
    return st;
}

static void run(const params *p)
{
    lb_redis_config cfg;
    lb_redis_config_init(&cfg);
    CHECK(lb_redis_config_set(&cfg.unix_path, sock_path) == LB_REDIS_OK);
    if (p->flags & 32)
        CHECK(lb_redis_config_set(&cfg.password, "pw") == LB_REDIS_OK);
    if (p->flags & 64)
        cfg.db = 3;
    cfg.connect_timeout_ms = CLIENT_TIMEOUT_MS;
    cfg.timeout_ms = CLIENT_TIMEOUT_MS;
    lb_redis *conn = lb_redis_new(&cfg);
    lb_redis_config_free(&cfg);
    CHECK(conn);
    int times = p->shape & 32 ? 2 : 1;
    unsigned kind = p->op % 3; /* 0 bitmap, 1 RedisBloom, 2 raw */
    params q = *p;
    q.op = (uint8_t)(p->op / 3);
    if (kind == 0) {
        lb_geometry g;
        /* shape bit 6: the blocked layout (a GETRANGE of one block per test, its
         * own meta), m a multiple of 512 and k of 8 */
        const int blocked = (p->shape & 64) != 0;
        uint64_t m = p->flags & 128 ? (UINT64_C(1) << 32) + (blocked ? 512 : 1000)
                     : blocked      ? 512 * (UINT64_C(1) + p->extra % 16)
                                    : 1000 + p->extra;
        if (blocked)
            lb_geometry_init(&g, m, 8 * (1 + p->k % 2), LB_HASH_XXH3_MIX);
        else
            lb_geometry_init(&g, m, p->k, (lb_hash_scheme)(p->extra % LB_HASH_SCHEME_COUNT));
        lb_bitmap *bm;
        CHECK(lb_bitmap_new(conn, "f", 1, &g, p->flags & 2 ? 60000 : 0, &bm) ==
              LB_REDIS_OK);
        lb_bitmap_set_mode(bm, p->flags & 1 ? LB_BITMAP_SETBIT : LB_BITMAP_BITFIELD);
        lb_bitmap_set_adopt(bm, p->flags & 4);
        if (blocked)
            CHECK(lb_bitmap_set_layout(bm, LB_BITMAP_BLOCKED) == LB_REDIS_OK);
        for (int i = 0; i < times; i++)
            check_status(conn, bitmap_op(conn, bm, &q));
        lb_bitmap_free(bm);
    } else if (kind == 1) {
        lb_bf_options o;
        lb_bf_options_init(&o);
        o.non_scaling = (p->flags & 8) != 0;
        o.no_create = (p->flags & 16) != 0;
        o.expansion = 1 + p->extra % 4;
        o.ttl_ms = p->flags & 2 ? 60000 : 0;
        lb_redisbloom *bf;
        CHECK(lb_bf_new(conn, "f", 1, &o, &bf) == LB_REDIS_OK);
        for (int i = 0; i < times; i++)
            check_status(conn, bloom_op(conn, bf, &q));
        lb_bf_free(bf);
    } else {
        for (int i = 0; i < times; i++)
            check_status(conn, raw_op(conn, p));
    }
    pthread_mutex_lock(&mu);
    client_connects += lb_redis_connect_count(conn);
    pthread_mutex_unlock(&mu);
    lb_redis_free(conn); /* closes the client side */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    if (len < 4)
        return 0;
    params p;
    p.op = data[0];
    p.flags = data[1];
    p.shape = data[2];
    p.extra = data[3];
    p.nkeys = 1 + (p.shape & 3);
    p.k = 1 + ((p.shape >> 2) & 7);

    /* The script: the chunks of the input after the header. */
    pthread_mutex_lock(&mu);
    while (server_busy) /* the last input's connection is closed on both sides */
        pthread_cond_wait(&cv, &mu);
    nchunks = next_chunk = 0;
    const uint8_t *s = data + 4, *end = data + len;
    while (nchunks < MAX_CHUNKS) {
        const uint8_t *sep = memmem(s, (size_t)(end - s), SEP, SEP_LEN);
        chunk_ptr[nchunks] = s;
        chunk_len[nchunks] = sep ? (size_t)(sep - s) : (size_t)(end - s);
        nchunks++;
        if (!sep)
            break;
        s = sep + SEP_LEN;
    }
    pthread_mutex_unlock(&mu);

    run(&p);

    /* Wait until the server has accepted every connection the client opened
     * and closed its side of each (it sees our EOF), so that nothing of this
     * input is left to answer with the chunks of the next one. */
    pthread_mutex_lock(&mu);
    while (server_busy || connections < client_connects)
        pthread_cond_wait(&cv, &mu);
    nchunks = next_chunk = 0;
    pthread_mutex_unlock(&mu);
    return 0;
}
