/* cluster.c: see cluster.h. */
#define _POSIX_C_SOURCE 200809L
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_map.h"
#include "node.h"
#include "session.h"

typedef struct lb_cluster lb_cluster;
static const lb_redis_vt cluster_vt;
static void cluster_free(lb_redis *r);
#define CLUSTER(r) ((lb_cluster *)(r))
#define CCLUSTER(r) ((const lb_cluster *)(r))

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
    lb_redis base;
    lb_redis_config cfg;     /* the client's settings, as given */
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
        n->conn = lb_node_new(&c->tmpl);
        c->tmpl.host = h;
    }
    return n->conn;
}

lb_redis *lb_cluster_new(const lb_redis_config *given)
{
    lb_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->base.vt = &cluster_vt;
    lb_error_clear(&c->base.err);
    if (lb_redis_config_copy(&c->cfg, given) != LB_REDIS_OK) {
        free(c);
        return NULL;
    }
    lb_redis_config *cfg = &c->cfg; /* normalised as a node's */
    cfg->connect_timeout_ms = cfg->connect_timeout_ms < 0 ? 0 : cfg->connect_timeout_ms;
    cfg->timeout_ms = cfg->timeout_ms < 0 ? 0 : cfg->timeout_ms;
    cfg->wait_replicas = cfg->wait_replicas < 0 ? 0 : cfg->wait_replicas;
    cfg->wait_timeout_ms = cfg->wait_timeout_ms > 0 ? cfg->wait_timeout_ms : LB_REDIS_WAIT_DEFAULT_MS;
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
    /* The nodes named in the URL are the first nodes. */
    const char *p = cfg->cluster_nodes;
    char host[256];
    int port;
    while (lb_redis_host_list_next(&p, host, sizeof host, &port))
        if (!port || node_index(c, host, port) < 0)
            goto fail;
    return &c->base;
fail:
    cluster_free(&c->base);
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

static void cluster_free(lb_redis *r)
{
    lb_cluster *c = CLUSTER(r);
    if (!c)
        return;
    for (size_t i = 0; i < c->nnodes; i++)
        lb_node_free(c->nodes[i].conn);
    free(c->nodes);
    free(c->res);
    blocks_free(c);
    lb_redis_config_free(&c->tmpl);
    lb_redis_config_free(&c->cfg);
    free(c);
}

static void cluster_abandon(lb_redis *r)
{
    lb_cluster *c = CLUSTER(r);
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn)
            lb_node_abandon(c->nodes[i].conn);
}

static void cluster_disconnect(lb_redis *r)
{
    lb_cluster *c = CLUSTER(r);
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn)
            lb_node_disconnect(c->nodes[i].conn);
}

static int cluster_is_connected(const lb_redis *r)
{
    const lb_cluster *c = CCLUSTER(r);
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn && lb_node_is_connected(c->nodes[i].conn))
            return 1;
    return 0;
}

static void cluster_set_timeout(lb_redis *r, int timeout_ms)
{
    lb_cluster *c = CLUSTER(r);
    c->cfg.timeout_ms = timeout_ms;
    c->tmpl.timeout_ms = timeout_ms;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn)
            lb_node_set_timeout(c->nodes[i].conn, timeout_ms);
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

static unsigned long cluster_connect_count(const lb_redis *r)
{
    return sum_nodes(CCLUSTER(r), lb_node_connect_count);
}

static unsigned long cluster_roundtrip_count(const lb_redis *r)
{
    return sum_nodes(CCLUSTER(r), lb_node_roundtrip_count);
}

unsigned long lb_cluster_map_reads(const lb_redis *r) { return CCLUSTER(r)->map_reads; }

static const lb_redis_config *cluster_config(const lb_redis *r) { return &CCLUSTER(r)->cfg; }

static lb_redis *cluster_new_like(const lb_redis *r) { return lb_cluster_new(&CCLUSTER(r)->cfg); }

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
static lb_redis_status map_from(lb_cluster *c, int i)
{
    lb_redis *nc = node_conn(c, i);
    if (!nc)
        return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a cluster node");
    char asked[256];
    snprintf(asked, sizeof asked, "%s", c->nodes[i].host);
    for (int shards = 1; shards >= 0; shards--) {
        lb_redis_batch b;
        lb_reply **rs;
        lb_redis_batch_init(&b);
        lb_redis_batch_cmd(&b, 2);
        lb_redis_batch_arg_str(&b, "CLUSTER");
        lb_redis_batch_arg_str(&b, shards ? "SHARDS" : "SLOTS");
        lb_redis_status st = lb_node_exec(nc, &b, LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS, &rs);
        lb_redis_batch_free(&b);
        if (st != LB_REDIS_OK)
            return lb_error_copy(&c->base.err, &nc->err);
        const lb_reply *x = rs[0];
        if (x->type == LB_REPLY_ERROR) {
            if (shards && (strstr(x->str, "nknown subcommand") || strstr(x->str, "nknown command")))
                continue; /* before Redis 7: CLUSTER SLOTS */
            return lb_error_set(&c->base.err, LB_REDIS_ERR_REPLY,
                                      "Redis at %s:%d cannot tell its cluster's slots (%s): is "
                                      "it a cluster node? (a single server takes redis://)",
                                      c->nodes[i].host, c->nodes[i].port, x->str);
        }
        int16_t *pm = malloc(2 * LB_CLUSTER_SLOTS * sizeof *pm);
        if (!pm)
            return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a slot map");
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
            lb_node_disconnect(nc);
            return lb_error_set(&c->base.err, LB_REDIS_ERR_PROTOCOL,
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
    return lb_error_set(&c->base.err, LB_REDIS_ERR_REPLY, "CLUSTER SLOTS refused");
}

/* Read the map from the nodes known: the ones with an open connection first
 * (a node that hangs is not asked before the others), then the rest.  When
 * none gave one, a refused map is the error told (not a later node's). */
static lb_redis_status read_map(lb_cluster *c)
{
    lb_redis_status st = LB_REDIS_ERR_CONNECT;
    char refused[512] = ""; /* the size of a connection's message */
    lb_error_set(&c->base.err, st, "no node of the Redis Cluster is known");
    for (int pass = 0; pass < 2; pass++) {
        for (size_t i = 0; i < c->nnodes; i++) {
            int open = c->nodes[i].conn && lb_node_is_connected(c->nodes[i].conn);
            if (open != (pass == 0))
                continue;
            st = map_from(c, (int)i);
            if (st == LB_REDIS_OK || st == LB_REDIS_ERR_REPLY || st == LB_REDIS_ERR_NOMEM ||
                st == LB_REDIS_ERR_AUTH)
                return st;
            if (st == LB_REDIS_ERR_PROTOCOL && !refused[0])
                snprintf(refused, sizeof refused, "%s", c->base.err.text);
        }
    }
    if (refused[0] && st != LB_REDIS_ERR_PROTOCOL)
        return lb_error_set(&c->base.err, LB_REDIS_ERR_PROTOCOL, "%s", refused);
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
static lb_redis_status ensure_readonly(lb_cluster *c, int i)
{
    cnode *n = &c->nodes[i];
    if (n->ro_conn && n->ro_conn == lb_node_connect_count(n->conn) &&
        lb_node_is_connected(n->conn))
        return LB_REDIS_OK;
    lb_redis_batch b;
    lb_reply **x;
    lb_redis_batch_init(&b);
    lb_redis_batch_cmd(&b, 1);
    lb_redis_batch_arg_str(&b, "READONLY");
    lb_redis_status st = lb_node_exec(n->conn, &b, LB_REDIS_IDEMPOTENT, &x);
    lb_redis_batch_free(&b);
    if (st != LB_REDIS_OK)
        return lb_error_copy(&c->base.err, &n->conn->err);
    n->ro_conn = lb_node_connect_count(n->conn);
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

/* Where each refused command of c->res[0..n) goes now: target[i] its node,
 * -1 where the map says (after a wait: TRYAGAIN, CLUSTERDOWN), -2 answered;
 * asking[i] for ASK.  *pending: refused commands; *wait: one must wait. */
static lb_redis_status redirect_targets(lb_cluster *c, size_t n, int from, int16_t *target,
                                        char *asking, size_t *pending, int *wait)
{
    *pending = 0;
    *wait = 0;
    for (size_t i = 0; i < n; i++) {
        target[i] = -2;
        asking[i] = 0;
        const lb_reply *x = c->res[i];
        if (!lb_cluster_refusal(x))
            continue;
        (*pending)++;
        long s;
        int port;
        char host[256];
        int kind = lb_cluster_redirect(x->str, x->len, &s, host, sizeof host, &port);
        if (!kind) {
            target[i] = -1; /* TRYAGAIN, CLUSTERDOWN: later, where the map says */
            *wait = 1;
            continue;
        }
        if (!host[0])
            snprintf(host, sizeof host, "%s", c->nodes[from].host);
        int t = node_index(c, host, port);
        if (t < 0)
            return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a node");
        target[i] = (int16_t)t;
        asking[i] = kind == 2;
        if (kind == 1)
            c->have_map = 0; /* MOVED: the map is out of date */
    }
    return LB_REDIS_OK;
}

/* One sub-batch of the refused commands for node target[i] (up to 64 of
 * them, ASKING before each ASK), sent and its replies copied into c->res.
 * *again = 1 when the node could not be reached but the budget allows
 * another round. */
static lb_redis_status send_refused(lb_cluster *c, const lb_redis_batch *b, int flags,
                                    const size_t *off, int16_t *target, const char *asking,
                                    size_t i, budget *bg, int *again)
{
    const size_t n = b->ncmds;
    const int t = target[i];
    lb_redis_batch sb;
    lb_redis_batch_init(&sb);
    if (b->max_set)
        lb_redis_batch_expect_elements(&sb, b->max_elements);
    if (b->bytes_set)
        lb_redis_batch_expect_bytes(&sb, b->max_bytes);
    size_t idx[64], cnt = 0; /* a chunk of the commands for t */
    for (size_t j = i; j < n && cnt < 64; j++) {
        if (target[j] != t)
            continue;
        if (asking[j]) {
            lb_redis_batch_cmd(&sb, 1);
            lb_redis_batch_arg(&sb, "ASKING", 6);
        }
        lb_redis_batch_raw(&sb, b->buf + off[j], off[j + 1] - off[j]);
        idx[cnt++] = j;
    }
    *again = 0;
    lb_redis *nc = node_conn(c, t);
    lb_reply **srs = NULL;
    lb_redis_status s2 = LB_REDIS_ERR_NOMEM;
    if (nc)
        s2 = lb_node_exec(nc, &sb,
                          (flags | LB_REDIS_RAW_ERRORS) & ~(LB_REDIS_READ_REPLICA | LB_REDIS_KEPT_CONN),
                          &srs);
    lb_redis_batch_free(&sb);
    if (s2 != LB_REDIS_OK) {
        if (!nc)
            return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a node");
        if (retryable(s2, flags) && retry_later(c, bg) == 0) {
            /* the refused commands were not run: they stay pending */
            c->have_map = 0;
            *again = 1;
            return LB_REDIS_OK;
        }
        return lb_error_copy(&c->base.err, &nc->err);
    }
    size_t k = 0;
    for (size_t q = 0; q < cnt; q++) {
        if (asking[idx[q]])
            k++; /* ASKING's +OK */
        if (!(c->res[idx[q]] = copy_reply(c, srs[k++])))
            return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for replies");
        target[idx[q]] = -2;
    }
    return LB_REDIS_OK;
}

/* The rounds of redirected: until no command is refused, or the redirects or
 * the budget run out (the refusal then stays as the command's reply). */
static lb_redis_status redirect_rounds(lb_cluster *c, const lb_redis_batch *b, int flags,
                                       int from, const size_t *off, int16_t *target,
                                       char *asking, budget *bg)
{
    const size_t n = b->ncmds;
    const long slot = b->has_slot ? (long)b->slot : -1;
    int redirects = 0;
    for (;;) {
        size_t pending;
        int wait;
        lb_redis_status st = redirect_targets(c, n, from, target, asking, &pending, &wait);
        if (st != LB_REDIS_OK || !pending)
            return st;
        if (wait) {
            if (retry_later(c, bg))
                return LB_REDIS_OK; /* the refusals stay as the replies */
            c->have_map = 0;
        } else if (redirects++ >= LB_CLUSTER_MAX_REDIRECTS) {
            return LB_REDIS_OK;
        }
        if (!c->have_map && read_map(c) != LB_REDIS_OK) {
            st = c->base.err.status;
            if (retryable(st, 0) && retry_later(c, bg) == 0)
                continue;
            return st;
        }
        for (size_t i = 0; i < n; i++)
            if (target[i] == -1)
                target[i] = (int16_t)pick_node(c, slot, 0);
        /* One sub-batch per target node, one node after the other. */
        for (size_t i = 0; i < n; i++) {
            if (target[i] < 0)
                continue;
            int again;
            st = send_refused(c, b, flags, off, target, asking, i, bg, &again);
            if (st != LB_REDIS_OK)
                return st;
            if (again)
                break;
            i--; /* look at i again: it may have more commands for t beyond the chunk */
        }
    }
}

/* Some replies of the batch were refusals (MOVED, ASK, TRYAGAIN, CLUSTERDOWN):
 * keep every reply (copied), and send the refused commands where they belong
 * until each got a real answer, or the redirects or the budget run out. */
static lb_redis_status redirected(lb_cluster *c, const lb_redis_batch *b, int flags,
                                  int from, lb_reply **rs, budget *bg)
{
    const size_t n = b->ncmds;
    lb_redis_status st = LB_REDIS_OK;
    blocks_free(c);
    if (c->res_cap < n) {
        lb_reply **nr = realloc(c->res, n * sizeof *nr);
        if (!nr)
            return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for replies");
        c->res = nr;
        c->res_cap = n;
    }
    size_t *off = malloc((n + 1) * sizeof *off);
    int16_t *target = malloc(n * sizeof *target); /* per refused command: node, -1 by the map, -2 done */
    char *asking = malloc(n);
    if (!off || !target || !asking)
        st = lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for replies");
    for (size_t i = 0; st == LB_REDIS_OK && i < n; i++)
        if (!(c->res[i] = copy_reply(c, rs[i])))
            st = lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for replies");
    if (st == LB_REDIS_OK && lb_redis_batch_offsets(b, off))
        st = lb_error_set(&c->base.err, LB_REDIS_ERR_ARG, "malformed Redis batch");
    if (st == LB_REDIS_OK)
        st = redirect_rounds(c, b, flags, from, off, target, asking, bg);
    free(off);
    free(target);
    free(asking);
    return st;
}

static lb_redis_status cluster_exec(lb_redis *r, const lb_redis_batch *b, int flags,
                                   lb_reply ***replies)
{
    lb_cluster *c = CLUSTER(r);
    lb_error_clear(&r->err);
    if (replies)
        *replies = NULL;
    lb_redis_status st0 = lb_redis_batch_check(b, &r->err);
    if (st0 != LB_REDIS_OK)
        return st0;
    if (b->ncmds == 0)
        return LB_REDIS_OK;
    if (b->multi_slot)
        return lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
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
            st = read_map(c);
        int i = st == LB_REDIS_OK ? pick_node(c, slot, replica) : -1;
        if (st == LB_REDIS_OK && i < 0) {
            c->have_map = 0;
            st = lb_error_set(&c->base.err, LB_REDIS_ERR_CONNECT,
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
            return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a cluster node");
        if (replica && c->primary[slot] != i && ensure_readonly(c, i) != LB_REDIS_OK) {
            st = c->base.err.status;
            c->have_map = 0;
            if (retryable(st, 0) && retry_later(c, &bg) == 0)
                continue;
            return st;
        }
        lb_reply **rs = NULL;
        st = lb_node_exec(nc, b, node_flags, &rs);
        if (st != LB_REDIS_OK) {
            lb_error_copy(&c->base.err, &nc->err);
            if (retryable(st, flags)) {
                c->have_map = 0; /* a failover, perhaps: ask the cluster again */
                if (retry_later(c, &bg) == 0)
                    continue;
            }
            return st;
        }
        int refused = 0;
        for (size_t k = 0; k < b->ncmds && !refused; k++)
            refused = lb_cluster_refusal(rs[k]);
        if (refused) {
            st = redirected(c, b, flags, i, rs, &bg);
            if (st != LB_REDIS_OK)
                return st;
            rs = c->res;
        }
        if (replies)
            *replies = rs;
        return lb_session_errors(&c->base.err, rs, b->ncmds, flags);
    }
}

static lb_redis_status cluster_connect(lb_redis *r)
{
    lb_cluster *c = CLUSTER(r);
    lb_redis_status st = c->have_map ? LB_REDIS_OK : read_map(c);
    if (st != LB_REDIS_OK)
        return st;
    int i = pick_node(c, -1, 0);
    if (i < 0)
        return lb_error_set(&c->base.err, LB_REDIS_ERR_CONNECT,
                                  "no node of the Redis Cluster serves any slot");
    lb_redis *nc = node_conn(c, i);
    if (!nc)
        return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a cluster node");
    lb_error_clear(&nc->err);
    st = lb_node_connect(nc);
    return st == LB_REDIS_OK ? st : lb_error_copy(&c->base.err, &nc->err);
}

static const lb_redis_vt cluster_vt = {
    .exec = cluster_exec,
    .connect = cluster_connect,
    .disconnect = cluster_disconnect,
    .is_connected = cluster_is_connected,
    .set_timeout = cluster_set_timeout,
    .connect_count = cluster_connect_count,
    .roundtrip_count = cluster_roundtrip_count,
    .config = cluster_config,
    .new_like = cluster_new_like,
    .abandon = cluster_abandon,
    .free = cluster_free,
};
