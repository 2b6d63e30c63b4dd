/* redis_cluster.c: see redis_cluster.h. */
#define _POSIX_C_SOURCE 200809L
#include "redis_cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------ slots */

uint16_t lb_cluster_crc16(const void *data, size_t len)
{
    /* CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, as the Redis
     * Cluster specification gives it. */
    const unsigned char *p = data;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned lb_cluster_key_slot(const void *key, size_t len)
{
    const char *k = key;
    const char *open = len ? memchr(k, '{', len) : NULL;
    if (open) {
        size_t rest = len - (size_t)(open - k) - 1;
        const char *close = rest ? memchr(open + 1, '}', rest) : NULL;
        if (close && close > open + 1)
            return lb_cluster_crc16(open + 1, (size_t)(close - open - 1)) & (LB_CLUSTER_SLOTS - 1);
    }
    return lb_cluster_crc16(k, len) & (LB_CLUSTER_SLOTS - 1);
}

/* ---------------------------------------------------------------- replies */

int lb_cluster_redirect(const char *text, size_t len, long *slot, char *host, size_t hostlen,
                        int *port)
{
    int kind;
    size_t p;
    if (len > 6 && memcmp(text, "MOVED ", 6) == 0) {
        kind = 1;
        p = 6;
    } else if (len > 4 && memcmp(text, "ASK ", 4) == 0) {
        kind = 2;
        p = 4;
    } else {
        return 0;
    }
    long s = 0;
    size_t d = 0;
    for (; p < len && text[p] >= '0' && text[p] <= '9' && d < 6; p++, d++)
        s = s * 10 + (text[p] - '0');
    if (!d || s >= LB_CLUSTER_SLOTS || p >= len || text[p] != ' ')
        return 0;
    p++;
    size_t ae = p;
    while (ae < len && text[ae] != ' ')
        ae++;
    size_t colon = ae;
    for (size_t i = p; i < ae; i++)
        if (text[i] == ':')
            colon = i;
    if (colon == ae)
        return 0;
    long pt = 0;
    d = 0;
    for (size_t i = colon + 1; i < ae; i++, d++) {
        if (text[i] < '0' || text[i] > '9' || d >= 5)
            return 0;
        pt = pt * 10 + (text[i] - '0');
    }
    if (!d || pt < 1 || pt > 65535 || colon - p >= hostlen)
        return 0;
    memcpy(host, text + p, colon - p); /* may be empty: the node that answered */
    host[colon - p] = '\0';
    *slot = s;
    *port = (int)pt;
    return kind;
}

/* A reply that says the command was not run here, for the cluster's reasons. */
static int cluster_refusal(const lb_reply *x)
{
    if (!x || x->type != LB_REPLY_ERROR || !x->str)
        return 0;
    return strncmp(x->str, "MOVED ", 6) == 0 || strncmp(x->str, "ASK ", 4) == 0 ||
           strncmp(x->str, "TRYAGAIN", 8) == 0 || strncmp(x->str, "CLUSTERDOWN", 11) == 0;
}

/* -------------------------------------------------------------- slot map */

/* The value of name in a RESP2 flat map (an array of key, value, ...). */
static const lb_reply *map_get(const lb_reply *m, const char *name)
{
    if (!m || m->type != LB_REPLY_ARRAY)
        return NULL;
    size_t nl = strlen(name);
    for (size_t i = 0; i + 1 < m->len; i += 2) {
        const lb_reply *k = m->element[i];
        if (k && (k->type == LB_REPLY_STRING || k->type == LB_REPLY_STATUS) && k->len == nl &&
            memcmp(k->str, name, nl) == 0)
            return m->element[i + 1];
    }
    return NULL;
}

/* An integer that may come as a bulk string. */
static int reply_long(const lb_reply *x, long *v)
{
    if (!x)
        return -1;
    if (x->type == LB_REPLY_INTEGER) {
        *v = (long)x->integer;
        return 0;
    }
    if (x->type != LB_REPLY_STRING || x->len == 0 || x->len > 18)
        return -1;
    long r = 0;
    for (size_t i = 0; i < x->len; i++) {
        if (x->str[i] < '0' || x->str[i] > '9')
            return -1;
        r = r * 10 + (x->str[i] - '0');
    }
    *v = r;
    return 0;
}

/* The address of an endpoint: "" or "?" (unknown) or nil means the node asked. */
static const char *endpoint(const lb_reply *x, const char *asked)
{
    if (!x || x->type != LB_REPLY_STRING || x->len == 0 || (x->len == 1 && x->str[0] == '?') ||
        memchr(x->str, '\0', x->len) || x->len > 255)
        return asked;
    return x->str;
}

static int str_is(const lb_reply *x, const char *s)
{
    size_t n = strlen(s);
    return x && x->type == LB_REPLY_STRING && x->len == n && memcmp(x->str, s, n) == 0;
}

int lb_cluster_parse_map(const lb_reply *x, int shards, const char *asked_host, int tls,
                         lb_cluster_range_fn fn, void *ctx)
{
    if (!x || x->type != LB_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i < x->len; i++) {
        const lb_reply *e = x->element[i];
        if (!e || e->type != LB_REPLY_ARRAY)
            return -1;
        if (!shards) {
            /* CLUSTER SLOTS: [lo, hi, [host, port, id, ...], replicas ...] */
            long lo, hi;
            if (e->len < 3 || reply_long(e->element[0], &lo) || reply_long(e->element[1], &hi) ||
                lo < 0 || hi < lo || hi >= LB_CLUSTER_SLOTS)
                return -1;
            for (size_t j = 2; j < e->len; j++) {
                const lb_reply *nd = e->element[j];
                long port;
                if (!nd || nd->type != LB_REPLY_ARRAY || nd->len < 2 ||
                    reply_long(nd->element[1], &port) || port < 1 || port > 65535)
                    return -1;
                if (fn(ctx, lo, hi, endpoint(nd->element[0], asked_host), (int)port, j > 2))
                    return -1;
            }
            continue;
        }
        /* CLUSTER SHARDS: {slots: [lo, hi, ...], nodes: [{ip, endpoint, port, role, health}]} */
        const lb_reply *slots = map_get(e, "slots"), *nodes = map_get(e, "nodes");
        if (!slots || !nodes || slots->type != LB_REPLY_ARRAY || nodes->type != LB_REPLY_ARRAY ||
            slots->len % 2)
            return -1;
        for (size_t s = 0; s + 1 < slots->len; s += 2) {
            long lo, hi;
            if (reply_long(slots->element[s], &lo) || reply_long(slots->element[s + 1], &hi) ||
                lo < 0 || hi < lo || hi >= LB_CLUSTER_SLOTS)
                return -1;
            for (int pass = 0; pass < 2; pass++) { /* the primary first */
                for (size_t j = 0; j < nodes->len; j++) {
                    const lb_reply *nd = nodes->element[j];
                    int primary = str_is(map_get(nd, "role"), "master");
                    if (primary != (pass == 0))
                        continue;
                    if (!primary && !str_is(map_get(nd, "health"), "online"))
                        continue; /* a failed or loading replica serves no reads */
                    long port = 0;
                    const lb_reply *tp = tls ? map_get(nd, "tls-port") : NULL;
                    if ((tp && reply_long(tp, &port) == 0 && port > 0) ||
                        reply_long(map_get(nd, "port"), &port) == 0) {
                        if (port < 1 || port > 65535)
                            return -1;
                    } else {
                        return -1;
                    }
                    const lb_reply *ep = map_get(nd, "endpoint");
                    const char *host = endpoint(ep, NULL);
                    if (!host)
                        host = endpoint(map_get(nd, "ip"), asked_host);
                    if (fn(ctx, lo, hi, host, (int)port, !primary))
                        return -1;
                }
            }
        }
    }
    return 0;
}

/* ------------------------------------------------------------ the state */

typedef struct {
    char host[256];
    int port;
    lb_redis *conn;          /* created on first use */
    unsigned long ro_conn;   /* connect count when READONLY was sent, 0: never */
} cnode;

typedef struct cblock {
    struct cblock *next;
    size_t used, cap;
    char data[];
} cblock;

struct lb_cluster {
    lb_redis_config tmpl;    /* settings of every node connection (host, port aside) */
    int retry_ms;
    int replica_reads;
    cnode *nodes;
    size_t nnodes, cap;
    int16_t primary[LB_CLUSTER_SLOTS]; /* node index per slot, -1 none */
    int16_t replica[LB_CLUSTER_SLOTS]; /* a replica of it for reads, -1 none */
    int have_map;
    unsigned long map_reads;
    lb_reply **res;          /* the replies of a redirected batch, copied */
    size_t res_cap;
    cblock *blocks;          /* where the copies live until the next call */
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0)
        ;
}

/* The node at host:port, added when new; its index, or -1 (out of memory, or
 * more nodes than a slot map can name). */
static int node_index(lb_cluster *c, const char *host, int port)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].port == port && strcmp(c->nodes[i].host, host) == 0)
            return (int)i;
    if (strlen(host) >= sizeof c->nodes[0].host || c->nnodes >= 30000)
        return -1;
    if (c->nnodes == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 8;
        cnode *nn = realloc(c->nodes, cap * sizeof *nn);
        if (!nn)
            return -1;
        c->nodes = nn;
        c->cap = cap;
    }
    cnode *n = &c->nodes[c->nnodes];
    memset(n, 0, sizeof *n);
    strcpy(n->host, host);
    n->port = port;
    return (int)c->nnodes++;
}

/* The connection of node i (created on first use), or NULL when out of memory. */
static lb_redis *node_conn(lb_cluster *c, int i)
{
    cnode *n = &c->nodes[i];
    if (!n->conn) {
        char *h = c->tmpl.host;
        c->tmpl.host = n->host;
        c->tmpl.port = n->port;
        n->conn = lb_redis_new(&c->tmpl);
        c->tmpl.host = h;
    }
    return n->conn;
}

lb_cluster *lb_cluster_new(const lb_redis_config *cfg)
{
    lb_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    lb_redis_config *t = &c->tmpl;
    t->connect_timeout_ms = cfg->connect_timeout_ms;
    t->timeout_ms = cfg->timeout_ms;
    t->tls = cfg->tls;
    t->tls_cert_reqs = cfg->tls_cert_reqs;
    t->tls_check_hostname = cfg->tls_check_hostname;
    t->wait_replicas = cfg->wait_replicas;
    t->wait_timeout_ms = cfg->wait_timeout_ms;
    c->retry_ms = cfg->cluster_retry_ms > 0 ? cfg->cluster_retry_ms : LB_CLUSTER_DEFAULT_RETRY_MS;
    c->replica_reads = cfg->cluster_replica_reads;
    for (int s = 0; s < LB_CLUSTER_SLOTS; s++)
        c->primary[s] = c->replica[s] = -1;
    if (lb_redis_config_set(&t->username, cfg->username) ||
        lb_redis_config_set(&t->password, cfg->password) ||
        lb_redis_config_set(&t->tls_ca_certs, cfg->tls_ca_certs) ||
        lb_redis_config_set(&t->tls_ca_path, cfg->tls_ca_path) ||
        lb_redis_config_set(&t->tls_certfile, cfg->tls_certfile) ||
        lb_redis_config_set(&t->tls_keyfile, cfg->tls_keyfile))
        goto fail;
    /* The seeds are the first nodes. */
    for (const char *p = cfg->cluster_nodes; p && *p;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *colon = NULL;
        for (const char *q = p; q < p + len; q++)
            if (*q == ':')
                colon = q;
        char host[256];
        if (!colon || (size_t)(colon - p) >= sizeof host)
            goto fail;
        memcpy(host, p, (size_t)(colon - p));
        host[colon - p] = '\0';
        if (node_index(c, host, atoi(colon + 1)) < 0)
            goto fail;
        p = comma ? comma + 1 : p + len;
    }
    return c;
fail:
    lb_cluster_free(c);
    return NULL;
}

static void blocks_free(lb_cluster *c)
{
    while (c->blocks) {
        cblock *n = c->blocks->next;
        free(c->blocks);
        c->blocks = n;
    }
}

void lb_cluster_free(lb_cluster *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->nnodes; i++)
        lb_redis_free(c->nodes[i].conn);
    free(c->nodes);
    free(c->res);
    blocks_free(c);
    lb_redis_config_free(&c->tmpl);
    free(c);
}

void lb_cluster_abandon(lb_cluster *c)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn)
            lb_redis_abandon(c->nodes[i].conn);
}

void lb_cluster_disconnect(lb_cluster *c)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn)
            lb_redis_disconnect(c->nodes[i].conn);
}

int lb_cluster_is_connected(const lb_cluster *c)
{
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn && lb_redis_is_connected(c->nodes[i].conn))
            return 1;
    return 0;
}

void lb_cluster_set_timeout(lb_cluster *c, int timeout_ms)
{
    c->tmpl.timeout_ms = timeout_ms;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn)
            lb_redis_set_timeout(c->nodes[i].conn, timeout_ms);
}

/* The sum of a count over the node connections made so far. */
static unsigned long sum_nodes(const lb_cluster *c, unsigned long (*count)(const lb_redis *))
{
    unsigned long n = 0;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn)
            n += count(c->nodes[i].conn);
    return n;
}

unsigned long lb_cluster_connect_count(const lb_cluster *c)
{
    return sum_nodes(c, lb_redis_connect_count);
}

unsigned long lb_cluster_roundtrip_count(const lb_cluster *c)
{
    return sum_nodes(c, lb_redis_roundtrip_count);
}

unsigned long lb_cluster_map_reads(const lb_cluster *c) { return c->map_reads; }

/* --------------------------------------------------------- reading the map */

typedef struct {
    lb_cluster *c;
    int16_t *primary, *replica;
} map_ctx;

static int map_range(void *vctx, long lo, long hi, const char *host, int port, int replica)
{
    map_ctx *m = vctx;
    int i = node_index(m->c, host, port);
    if (i < 0)
        return -1;
    for (long s = lo; s <= hi; s++) {
        if (!replica)
            m->primary[s] = (int16_t)i;
        else if (m->replica[s] < 0)
            m->replica[s] = (int16_t)i;
    }
    return 0;
}

/* Ask node i for the map (CLUSTER SHARDS, else CLUSTER SLOTS).  OK with the
 * map installed; a status with the message on r otherwise. */
static lb_redis_status map_from(lb_cluster *c, lb_redis *r, int i)
{
    lb_redis *nc = node_conn(c, i);
    if (!nc)
        return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for a cluster node");
    char asked[256];
    snprintf(asked, sizeof asked, "%s", c->nodes[i].host);
    for (int shards = 1; shards >= 0; shards--) {
        lb_redis_batch b;
        lb_reply **rs;
        lb_redis_batch_init(&b);
        lb_redis_batch_cmd(&b, 2);
        lb_redis_batch_arg_str(&b, "CLUSTER");
        lb_redis_batch_arg_str(&b, shards ? "SHARDS" : "SLOTS");
        lb_redis_status st = lb_redis_exec(nc, &b, LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS, &rs);
        lb_redis_batch_free(&b);
        if (st != LB_REDIS_OK)
            return lb_redis_take_error(r, nc);
        const lb_reply *x = rs[0];
        if (x->type == LB_REPLY_ERROR) {
            if (shards && (strstr(x->str, "nknown subcommand") || strstr(x->str, "nknown command")))
                continue; /* before Redis 7: CLUSTER SLOTS */
            return lb_redis_set_error(r, LB_REDIS_ERR_REPLY,
                                      "Redis at %s:%d cannot tell its cluster's slots (%s): is "
                                      "it a cluster node? (a single server takes redis://)",
                                      c->nodes[i].host, c->nodes[i].port, x->str);
        }
        int16_t *pm = malloc(2 * LB_CLUSTER_SLOTS * sizeof *pm);
        if (!pm)
            return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for a slot map");
        map_ctx m = {c, pm, pm + LB_CLUSTER_SLOTS};
        for (int s = 0; s < 2 * LB_CLUSTER_SLOTS; s++)
            pm[s] = -1;
        const size_t known = c->nnodes;
        int bad = lb_cluster_parse_map(x, shards, asked, c->tmpl.tls, map_range, &m);
        if (bad) {
            /* A refused map names no node: the ones it added (no connection yet) go, or
             * every later map read would ask them, each a timeout when they never answer. */
            c->nnodes = known;
            free(pm);
            lb_redis_disconnect(nc);
            return lb_redis_set_error(r, LB_REDIS_ERR_PROTOCOL,
                                      "protocol error: Redis at %s:%d answered CLUSTER %s with "
                                      "something that is not a slot map; connection dropped",
                                      c->nodes[i].host, c->nodes[i].port,
                                      shards ? "SHARDS" : "SLOTS");
        }
        memcpy(c->primary, m.primary, sizeof c->primary);
        memcpy(c->replica, m.replica, sizeof c->replica);
        free(pm);
        c->have_map = 1;
        c->map_reads++;
        return LB_REDIS_OK;
    }
    return lb_redis_set_error(r, LB_REDIS_ERR_REPLY, "CLUSTER SLOTS refused");
}

/* Read the map from the nodes known: the ones with an open connection first
 * (a node that hangs is not asked before the others), then the rest.  When
 * none gave one, a refused map is the error told (not a later node's). */
static lb_redis_status read_map(lb_cluster *c, lb_redis *r)
{
    lb_redis_status st = LB_REDIS_ERR_CONNECT;
    char refused[512] = ""; /* the size of a connection's message */
    lb_redis_set_error(r, st, "no node of the Redis Cluster is known");
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < c->nnodes; i++) {
            int open = c->nodes[i].conn && lb_redis_is_connected(c->nodes[i].conn);
            if (open != (pass == 0))
                continue;
            st = map_from(c, r, (int)i);
            if (st == LB_REDIS_OK || st == LB_REDIS_ERR_REPLY || st == LB_REDIS_ERR_NOMEM ||
                st == LB_REDIS_ERR_AUTH)
                return st;
            if (st == LB_REDIS_ERR_PROTOCOL && !refused[0])
                snprintf(refused, sizeof refused, "%s", lb_redis_errstr(r));
        }
    }
    if (refused[0] && st != LB_REDIS_ERR_PROTOCOL)
        return lb_redis_set_error(r, LB_REDIS_ERR_PROTOCOL, "%s", refused);
    return st;
}

/* ---------------------------------------------------------------- routing */

static int pick_node(const lb_cluster *c, long slot, int replica)
{
    if (slot < 0) {
        for (int s = 0; s < LB_CLUSTER_SLOTS; s++)
            if (c->primary[s] >= 0)
                return c->primary[s];
        return -1;
    }
    if (replica && c->replica[slot] >= 0)
        return c->replica[slot];
    return c->primary[slot];
}

/* A replica serves reads after READONLY on its connection. */
static lb_redis_status ensure_readonly(lb_cluster *c, lb_redis *r, int i)
{
    cnode *n = &c->nodes[i];
    if (n->ro_conn && n->ro_conn == lb_redis_connect_count(n->conn) &&
        lb_redis_is_connected(n->conn))
        return LB_REDIS_OK;
    const char *argv[1] = {"READONLY"};
    lb_reply *x;
    lb_redis_status st = lb_redis_command_argv(n->conn, 1, argv, NULL, LB_REDIS_IDEMPOTENT, &x);
    if (st != LB_REDIS_OK)
        return lb_redis_take_error(r, n->conn);
    n->ro_conn = lb_redis_connect_count(n->conn);
    return LB_REDIS_OK;
}

/* The retry budget: 0 when time is left (after sleeping the backoff). */
typedef struct {
    int64_t first;  /* time of the first failure, 0: none yet */
    int wait;       /* next backoff, ms */
} budget;

static int retry_later(lb_cluster *c, budget *bg)
{
    int64_t now = now_ms();
    if (!bg->first) {
        bg->first = now;
        bg->wait = 50;
    }
    int64_t left = bg->first + c->retry_ms - now;
    if (left <= 0)
        return -1;
    sleep_ms(bg->wait < left ? bg->wait : (int)left);
    bg->wait = bg->wait * 2 > 1000 ? 1000 : bg->wait * 2;
    return 0;
}

/* A failure of a node's round trip that another try may mend: the node could
 * not be reached (nothing was sent), or, for a batch that may run twice, the
 * connection broke (a primary killed mid-batch).  Never a timeout. */
static int retryable(lb_redis_status st, int flags)
{
    if (st == LB_REDIS_ERR_CONNECT)
        return 1;
    return st == LB_REDIS_ERR_IO && (flags & LB_REDIS_IDEMPOTENT) && !(flags & LB_REDIS_KEPT_CONN);
}

static void *copy_alloc(lb_cluster *c, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    cblock *b = c->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        cblock *nb = malloc(sizeof *nb + cap);
        if (!nb)
            return NULL;
        nb->next = c->blocks;
        nb->used = 0;
        nb->cap = cap;
        c->blocks = b = nb;
    }
    void *p = b->data + b->used;
    b->used += n;
    return p;
}

static lb_reply *copy_reply(lb_cluster *c, const lb_reply *x)
{
    lb_reply *y = copy_alloc(c, sizeof *y);
    if (!y)
        return NULL;
    *y = *x;
    y->str = NULL;
    y->element = NULL;
    if (x->str) {
        if (!(y->str = copy_alloc(c, x->len + 1)))
            return NULL;
        memcpy(y->str, x->str, x->len + 1);
    }
    if (x->type == LB_REPLY_ARRAY && x->len) {
        if (!(y->element = copy_alloc(c, x->len * sizeof *y->element)))
            return NULL;
        for (size_t i = 0; i < x->len; i++)
            if (!(y->element[i] = copy_reply(c, x->element[i])))
                return NULL;
    }
    return y;
}

/* Some replies of the batch were refusals (MOVED, ASK, TRYAGAIN, CLUSTERDOWN):
 * keep every reply (copied), and send the refused commands where they belong
 * until each got a real answer, or the redirects or the budget run out (the
 * refusal then stays as the command's reply). */
static lb_redis_status redirected(lb_cluster *c, lb_redis *r, const lb_redis_batch *b, int flags,
                                  int from, lb_reply **rs, budget *bg)
{
    const size_t n = b->ncmds;
    size_t *off = NULL;
    int16_t *target = NULL; /* per refused command: node, -1 by the map, -2 done */
    char *asking = NULL;
    lb_redis_status st = LB_REDIS_OK;
    blocks_free(c);
    if (c->res_cap < n) {
        lb_reply **nr = realloc(c->res, n * sizeof *nr);
        if (!nr)
            return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for replies");
        c->res = nr;
        c->res_cap = n;
    }
    off = malloc((n + 1) * sizeof *off);
    target = malloc(n * sizeof *target);
    asking = malloc(n);
    if (!off || !target || !asking) {
        st = lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for replies");
        goto done;
    }
    for (size_t i = 0; i < n; i++)
        if (!(c->res[i] = copy_reply(c, rs[i]))) {
            st = lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for replies");
            goto done;
        }
    if (lb_redis_batch_offsets(b, off)) {
        st = lb_redis_set_error(r, LB_REDIS_ERR_ARG, "malformed Redis batch");
        goto done;
    }
    const long slot = b->has_slot ? (long)b->slot : -1;
    int redirects = 0;
    for (;;) {
        /* Where each refused command goes now. */
        size_t pending = 0;
        int wait = 0;
        for (size_t i = 0; i < n; i++) {
            target[i] = -2;
            asking[i] = 0;
            const lb_reply *x = c->res[i];
            if (!cluster_refusal(x))
                continue;
            pending++;
            long s;
            int port;
            char host[256];
            int kind = lb_cluster_redirect(x->str, x->len, &s, host, sizeof host, &port);
            if (kind) {
                if (!host[0])
                    snprintf(host, sizeof host, "%s", c->nodes[from].host);
                int t = node_index(c, host, port);
                if (t < 0) {
                    st = lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for a node");
                    goto done;
                }
                target[i] = (int16_t)t;
                asking[i] = kind == 2;
                if (kind == 1)
                    c->have_map = 0; /* MOVED: the map is out of date */
            } else {
                target[i] = -1; /* TRYAGAIN, CLUSTERDOWN: later, where the map says */
                wait = 1;
            }
        }
        if (!pending)
            break;
        if (wait) {
            if (retry_later(c, bg))
                break; /* the refusals stay as the replies */
            c->have_map = 0;
        } else if (redirects++ >= LB_CLUSTER_MAX_REDIRECTS) {
            break;
        }
        if (!c->have_map && read_map(c, r) != LB_REDIS_OK) {
            st = lb_redis_last_status(r);
            if (retryable(st, 0) && retry_later(c, bg) == 0)
                continue;
            goto done;
        }
        for (size_t i = 0; i < n; i++)
            if (target[i] == -1)
                target[i] = (int16_t)pick_node(c, slot, 0);
        /* One sub-batch per target node, one node after the other. */
        for (size_t i = 0; i < n; i++) {
            if (target[i] < 0)
                continue;
            int t = target[i];
            lb_redis_batch sb;
            lb_redis_batch_init(&sb);
            if (b->max_set)
                lb_redis_batch_expect_elements(&sb, b->max_elements);
            if (b->bytes_set)
                lb_redis_batch_expect_bytes(&sb, b->max_bytes);
            size_t idx[64], cnt = 0; /* a chunk of the commands for t */
            size_t j = i;
            for (; j < n && cnt < 64; j++) {
                if (target[j] != t)
                    continue;
                if (asking[j]) {
                    lb_redis_batch_cmd(&sb, 1);
                    lb_redis_batch_arg(&sb, "ASKING", 6);
                }
                lb_redis_batch_raw(&sb, b->buf + off[j], off[j + 1] - off[j]);
                idx[cnt++] = j;
            }
            lb_redis *nc = node_conn(c, t);
            lb_reply **srs = NULL;
            lb_redis_status s2 =
                nc ? lb_redis_exec(nc, &sb, (flags | LB_REDIS_RAW_ERRORS) &
                                                ~(LB_REDIS_READ_REPLICA | LB_REDIS_KEPT_CONN),
                                   &srs)
                   : LB_REDIS_ERR_NOMEM;
            lb_redis_batch_free(&sb);
            if (s2 != LB_REDIS_OK) {
                if (!nc) {
                    st = lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for a node");
                    goto done;
                }
                if (retryable(s2, flags) && retry_later(c, bg) == 0) {
                    /* the refused commands were not run: they stay pending */
                    c->have_map = 0;
                    break;
                }
                st = lb_redis_take_error(r, nc);
                goto done;
            }
            size_t k = 0;
            for (size_t q = 0; q < cnt; q++) {
                if (asking[idx[q]])
                    k++; /* ASKING's +OK */
                if (!(c->res[idx[q]] = copy_reply(c, srs[k++]))) {
                    st = lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for replies");
                    goto done;
                }
                target[idx[q]] = -2;
            }
            i--; /* look at i again: it may have more commands for t beyond the chunk */
        }
    }
done:
    free(off);
    free(target);
    free(asking);
    return st;
}

lb_redis_status lb_cluster_exec(lb_cluster *c, lb_redis *r, const lb_redis_batch *b, int flags,
                                lb_reply ***replies)
{
    if (b->multi_slot)
        return lb_redis_set_error(r, LB_REDIS_ERR_ARG,
                                  "a batch for a Redis Cluster keeps its keys in one slot "
                                  "(command %zu names a key of another slot than the first)",
                                  b->multi_cmd);
    const long slot = b->has_slot ? (long)b->slot : -1;
    const int replica = (flags & LB_REDIS_READ_REPLICA) && c->replica_reads && slot >= 0;
    const int node_flags = (flags | LB_REDIS_RAW_ERRORS) & ~LB_REDIS_READ_REPLICA;
    budget bg = {0, 0};
    for (;;) {
        lb_redis_status st = LB_REDIS_OK;
        if (!c->have_map)
            st = read_map(c, r);
        int i = st == LB_REDIS_OK ? pick_node(c, slot, replica) : -1;
        if (st == LB_REDIS_OK && i < 0) {
            c->have_map = 0;
            st = lb_redis_set_error(r, LB_REDIS_ERR_CONNECT,
                                    "no node of the Redis Cluster serves slot %ld (is the "
                                    "cluster down, or its slots not all assigned?)",
                                    slot < 0 ? 0 : slot);
        }
        if (st != LB_REDIS_OK) {
            if (retryable(st, 0) && retry_later(c, &bg) == 0)
                continue;
            return st;
        }
        lb_redis *nc = node_conn(c, i);
        if (!nc)
            return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for a cluster node");
        if (replica && c->primary[slot] != i && ensure_readonly(c, r, i) != LB_REDIS_OK) {
            st = lb_redis_last_status(r);
            c->have_map = 0;
            if (retryable(st, 0) && retry_later(c, &bg) == 0)
                continue;
            return st;
        }
        lb_reply **rs = NULL;
        st = lb_redis_exec(nc, b, node_flags, &rs);
        if (st != LB_REDIS_OK) {
            lb_redis_take_error(r, nc);
            if (retryable(st, flags)) {
                c->have_map = 0; /* a failover, perhaps: ask the cluster again */
                if (retry_later(c, &bg) == 0)
                    continue;
            }
            return st;
        }
        int refused = 0;
        for (size_t k = 0; k < b->ncmds && !refused; k++)
            refused = cluster_refusal(rs[k]);
        if (refused) {
            st = redirected(c, r, b, flags, i, rs, &bg);
            if (st != LB_REDIS_OK)
                return st;
            rs = c->res;
        }
        if (replies)
            *replies = rs;
        return lb_redis_check_replies(r, rs, b->ncmds, flags);
    }
}

lb_redis_status lb_cluster_connect(lb_cluster *c, lb_redis *r)
{
    lb_redis_status st = c->have_map ? LB_REDIS_OK : read_map(c, r);
    if (st != LB_REDIS_OK)
        return st;
    int i = pick_node(c, -1, 0);
    if (i < 0)
        return lb_redis_set_error(r, LB_REDIS_ERR_CONNECT,
                                  "no node of the Redis Cluster serves any slot");
    lb_redis *nc = node_conn(c, i);
    if (!nc)
        return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for a cluster node");
    st = lb_redis_connect(nc);
    return st == LB_REDIS_OK ? st : lb_redis_take_error(r, nc);
}
