/* cluster.c: see cluster.h.  The routing is one sans-I/O step machine (the
 * route, lb_cluster_route_*): it hands out hops (a batch for one node's
 * client: the caller's batch, READONLY, CLUSTER SHARDS/SLOTS, a sub-batch of
 * refused commands) and pauses (the backoff of a retry), and takes each hop's
 * result back; it never does I/O nor sleeps.  cluster_exec below is its
 * blocking driver (lb_node_exec on the node's socket, nanosleep);
 * the client interface's steps (lb_redis_step_*, which ling_bloom.aio's
 * transport carries through op.c) drive the same machine on wire clients
 * (lb_cluster_use_wire). */
#define _POSIX_C_SOURCE 200809L
#include "cluster.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cluster_map.h"
#include "node.h"
#include "session.h"
#include "wire.h"

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
    unsigned char seed;      /* named in the URL: kept for the client's life */
    unsigned char gone;      /* dropped (see prune): a free index, no address */
} cnode;

/* The most node indexes (int16 in the slot tables), and the most nodes a
 * route's redirects (-MOVED, -ASK) may add that the slot map does not name. */
#define MAX_NODES 32000
#define MAX_REDIRECT_NODES 64
/* A map that leaves slots unserved (a node that has not learned every slot
 * yet): at most this many more nodes are asked for a complete one. */
#define INCOMPLETE_MAP_TRIES 3

typedef struct cblock {
    struct cblock *next;
    size_t used, cap;
    char data[];
} cblock;

/* Where the route is (see the steps below). */
typedef enum {
    R_OVER,         /* no route, or it is over: rt_st */
    R_START,        /* a try begins: the map is read when out of date */
    R_PICK,         /* the map read (map_out): pick the node, READONLY when due */
    R_READONLY,     /* waiting for READONLY's result */
    R_SEND_BATCH,   /* hand out the batch for node cur */
    R_SEND,         /* waiting for the batch's result */
    R_ROUND,        /* a redirect round begins: where each refused command goes */
    R_ROUND_MAP,    /* the round reads the map when out of date */
    R_ROUND_MAPPED, /* the round's map read (map_out): aim what the map places */
    R_REFUSED,      /* hand out the next sub-batch of refused commands, from cursor */
    R_REFUSED_WAIT, /* waiting for a sub-batch's result */
    R_MAP,          /* reading the map: the next node to ask */
    R_MAP_ASK,      /* ask node map_i (CLUSTER SHARDS, or SLOTS: map_shards) */
    R_MAP_WAIT,     /* waiting for the map's reply */
    R_PAUSE         /* hand out a pause of pause_ms, then go on at pause_next */
} route_phase;

struct lb_cluster {
    lb_redis base;
    lb_redis_config cfg;     /* the client's settings, as given */
    lb_redis_config tmpl;    /* settings of every node connection (host, port aside) */
    int retry_ms;
    int replica_reads;
    int wire;                /* node clients are wire clients (lb_cluster_use_wire) */
    cnode *nodes;
    size_t nnodes, cap;      /* indexes in use (gone ones included) */
    int32_t *ht;             /* address -> index + 1 (0: empty); NULL: scan */
    size_t hmask;
    int *freeidx;            /* gone indexes, taken again first */
    size_t nfree;
    unsigned long gone_connects, gone_roundtrips; /* the counts of dropped nodes */
    unsigned long drops;     /* nodes dropped so far */
    int prune_due;           /* a map was read or a redirect added a node since the last prune */
    int route_new;           /* nodes the route's redirects added */
    int16_t cand_primary[LB_CLUSTER_SLOTS]; /* the most complete incomplete map of a read */
    int16_t cand_replica[LB_CLUSTER_SLOTS];
    long cand_served;        /* its served slots, -1: none */
    int map_incomplete;      /* incomplete maps in this read */
    int16_t primary[LB_CLUSTER_SLOTS]; /* node index per slot, -1 none */
    int16_t replica[LB_CLUSTER_SLOTS]; /* a replica of it for reads, -1 none */
    int have_map;
    unsigned long map_reads;
    lb_reply **res;          /* the replies of a redirected batch, copied */
    size_t res_cap;
    cblock *blocks;          /* where the copies live until the next call */

    /* The route. */
    route_phase phase;
    lb_redis_status rt_st;   /* R_OVER: the outcome */
    lb_reply **out;          /* the replies route_end tells (NULL: none) */
    const lb_redis_batch *b; /* the caller's batch, and how it goes */
    int flags, node_flags, use_replica; /* use_replica: a replica may serve it */
    long slot;               /* -1: keyless */
    int cur;                 /* the node picked for the batch */
    int64_t bg_first;        /* the retry budget: time of the first failure, 0: none yet */
    int bg_wait;             /* the next backoff, ms */
    int pause_ms;            /* R_PAUSE */
    route_phase pause_next;
    lb_cluster_hop hop;      /* the hop handed out (a waiting phase) */
    lb_redis_batch rob;      /* READONLY */
    /* reading the map: a sub-route that goes back to map_ret */
    route_phase map_ret;
    lb_redis_status map_st;  /* the last node's outcome */
    lb_redis_status map_out; /* the read's outcome, for map_ret */
    int map_pass;            /* 0: nodes with an open connection, 1: the rest */
    size_t map_i;
    int map_shards;
    char map_refused[LB_ERRSTR_SIZE]; /* the first refused map's message */
    lb_redis_batch mapb;
    /* redirects: per command of the batch */
    size_t *off;             /* where it starts in b (n + 1) */
    int16_t *target;         /* its node; -1 where the map says; -2 answered */
    char *asking;            /* ASK: ASKING goes before it */
    size_t redir_cap;
    int from;                /* the node that answered the batch */
    int redirects;
    size_t cursor;           /* R_REFUSED: where to look for the next target */
    lb_redis_batch sb;       /* the sub-batch handed out */
    size_t idx[64], cnt;     /* its commands' indexes in b */
    /* The route as steps (a transport outside C): the hop in progress. */
    lb_redis *st_node;       /* its node's client, NULL: none */
    int st_node_id;
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

static uint32_t addr_hash(const char *host, int port)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)host; *p; p++)
        h = (h ^ *p) * 16777619u;
    return (h ^ (uint32_t)port) * 16777619u;
}

/* The address table over the live nodes, built again (its size at least
 * twice their number); on failure (out of memory) lookups scan instead. */
static void ht_rebuild(lb_cluster *c)
{
    size_t size = 16;
    while (size < 2 * (c->nnodes + 1))
        size *= 2;
    free(c->ht);
    c->ht = calloc(size, sizeof *c->ht);
    if (!c->ht)
        return;
    c->hmask = size - 1;
    for (size_t i = 0; i < c->nnodes; i++) {
        if (c->nodes[i].gone)
            continue;
        size_t h = addr_hash(c->nodes[i].host, c->nodes[i].port) & c->hmask;
        while (c->ht[h])
            h = (h + 1) & c->hmask;
        c->ht[h] = (int32_t)i + 1;
    }
}

static int node_find(const lb_cluster *c, const char *host, int port)
{
    if (!c->ht) {
        for (size_t i = 0; i < c->nnodes; i++)
            if (!c->nodes[i].gone && c->nodes[i].port == port &&
                strcmp(c->nodes[i].host, host) == 0)
                return (int)i;
        return -1;
    }
    for (size_t h = addr_hash(host, port) & c->hmask; c->ht[h]; h = (h + 1) & c->hmask) {
        const cnode *n = &c->nodes[c->ht[h] - 1];
        if (n->port == port && strcmp(n->host, host) == 0)
            return c->ht[h] - 1;
    }
    return -1;
}

/* The node at host:port, added when new (*added set; a gone index is taken
 * again first); its index, or -1 (out of memory, or MAX_NODES). */
static int node_index(lb_cluster *c, const char *host, int port, int *added)
{
    if (added)
        *added = 0;
    int found = node_find(c, host, port);
    if (found >= 0)
        return found;
    if (strlen(host) >= sizeof c->nodes[0].host)
        return -1;
    size_t i;
    if (c->nfree) {
        i = (size_t)c->freeidx[--c->nfree];
    } else {
        if (c->nnodes >= MAX_NODES)
            return -1;
        if (c->nnodes == c->cap) {
            size_t cap = c->cap ? c->cap * 2 : 8;
            cnode *nn = realloc(c->nodes, cap * sizeof *nn);
            if (!nn)
                return -1;
            c->nodes = nn;
            c->cap = cap;
        }
        i = c->nnodes++;
    }
    cnode *n = &c->nodes[i];
    memset(n, 0, sizeof *n);
    strcpy(n->host, host);
    n->port = port;
    if (c->ht && 2 * (c->nnodes + 1) <= c->hmask + 1) {
        size_t h = addr_hash(host, port) & c->hmask;
        while (c->ht[h])
            h = (h + 1) & c->hmask;
        c->ht[h] = (int32_t)i + 1;
    } else {
        ht_rebuild(c);
    }
    if (added)
        *added = 1;
    return (int)i;
}

/* Drop (close, forget) every node that is neither named in the URL nor in the
 * slot map now in use: the nodes of an older map, the redirect targets the
 * map does not name.  Only between routes: no index is held then. */
static void prune(lb_cluster *c)
{
    unsigned char *keep = calloc(c->nnodes ? c->nnodes : 1, 1);
    if (!keep)
        return; /* another time */
    for (int s = 0; s < LB_CLUSTER_SLOTS; s++) {
        if (c->primary[s] >= 0)
            keep[c->primary[s]] = 1;
        if (c->replica[s] >= 0)
            keep[c->replica[s]] = 1;
    }
    int dropped = 0;
    for (size_t i = 0; i < c->nnodes; i++) {
        cnode *n = &c->nodes[i];
        if (keep[i] || n->seed || n->gone)
            continue;
        if (c->nfree == c->nnodes)
            break;
        if (!c->freeidx) {
            if (!(c->freeidx = malloc(MAX_NODES * sizeof *c->freeidx)))
                break;
        }
        if (n->conn) {
            c->gone_connects += lb_redis_connect_count(n->conn);
            c->gone_roundtrips += lb_redis_roundtrip_count(n->conn);
            lb_redis_free(n->conn);
        }
        memset(n, 0, sizeof *n);
        n->gone = 1;
        c->freeidx[c->nfree++] = (int)i;
        c->drops++;
        dropped = 1;
    }
    free(keep);
    if (dropped)
        ht_rebuild(c);
}

/* The connection of node i (created on first use), or NULL when out of memory. */
static lb_redis *node_conn(lb_cluster *c, int i)
{
    cnode *n = &c->nodes[i];
    if (n->gone)
        return NULL;
    if (!n->conn) {
        char *h = c->tmpl.host;
        c->tmpl.host = n->host;
        c->tmpl.port = n->port;
        n->conn = c->wire ? lb_wire_new_cfg(&c->tmpl) : lb_node_new(&c->tmpl);
        c->tmpl.host = h;
    }
    return n->conn;
}

static int is_cluster(const lb_redis *r) { return r && r->vt == &cluster_vt; }

lb_redis *lb_cluster_node_conn(lb_redis *r, int node)
{
    if (!is_cluster(r) || node < 0 || (size_t)node >= CLUSTER(r)->nnodes)
        return NULL;
    return node_conn(CLUSTER(r), node);
}

const char *lb_cluster_node_host(const lb_redis *r, int node)
{
    if (!is_cluster(r) || node < 0 || (size_t)node >= CCLUSTER(r)->nnodes ||
        CCLUSTER(r)->nodes[node].gone)
        return NULL;
    return CCLUSTER(r)->nodes[node].host;
}

int lb_cluster_node_port(const lb_redis *r, int node)
{
    if (!is_cluster(r) || node < 0 || (size_t)node >= CCLUSTER(r)->nnodes)
        return 0;
    return CCLUSTER(r)->nodes[node].port;
}

void lb_cluster_use_wire(lb_redis *r)
{
    if (!is_cluster(r))
        return;
    lb_cluster *c = CLUSTER(r);
    c->wire = 1;
    for (size_t i = 0; i < c->nnodes; i++) {
        if (c->nodes[i].conn && !lb_wire_is(c->nodes[i].conn)) {
            lb_redis_free(c->nodes[i].conn);
            c->nodes[i].conn = NULL;
            c->nodes[i].ro_conn = 0;
        }
    }
}

lb_redis *lb_cluster_new(const lb_redis_config *given)
{
    lb_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->base.vt = &cluster_vt;
    lb_error_clear(&c->base.err);
    lb_redis_batch_init(&c->rob);
    lb_redis_batch_init(&c->mapb);
    lb_redis_batch_init(&c->sb);
    c->phase = R_OVER;
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
    while (lb_redis_host_list_next(&p, host, sizeof host, &port)) {
        int i = port ? node_index(c, host, port, NULL) : -1;
        if (i < 0)
            goto fail;
        c->nodes[i].seed = 1;
    }
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
        lb_redis_free(c->nodes[i].conn);
    free(c->nodes);
    free(c->ht);
    free(c->freeidx);
    free(c->res);
    free(c->off);
    free(c->target);
    free(c->asking);
    lb_redis_batch_free(&c->rob);
    lb_redis_batch_free(&c->mapb);
    lb_redis_batch_free(&c->sb);
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
            lb_redis_abandon(c->nodes[i].conn);
}

static void cluster_disconnect(lb_redis *r)
{
    lb_cluster *c = CLUSTER(r);
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn)
            lb_redis_disconnect(c->nodes[i].conn);
}

static int cluster_is_connected(const lb_redis *r)
{
    const lb_cluster *c = CCLUSTER(r);
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn && lb_redis_is_connected(c->nodes[i].conn))
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
            lb_redis_set_timeout(c->nodes[i].conn, timeout_ms);
}

/* The sum of a count over the node connections made so far. */
static unsigned long sum_nodes(const lb_cluster *c, unsigned long (*count)(const lb_redis *))
{
    unsigned long n = count == lb_redis_connect_count ? c->gone_connects : c->gone_roundtrips;
    for (size_t i = 0; i < c->nnodes; i++)
        if (c->nodes[i].conn)
            n += count(c->nodes[i].conn);
    return n;
}

static unsigned long cluster_connect_count(const lb_redis *r)
{
    return sum_nodes(CCLUSTER(r), lb_redis_connect_count);
}

static unsigned long cluster_roundtrip_count(const lb_redis *r)
{
    return sum_nodes(CCLUSTER(r), lb_redis_roundtrip_count);
}

unsigned long lb_cluster_map_reads(const lb_redis *r) { return CCLUSTER(r)->map_reads; }

unsigned long lb_cluster_drops(const lb_redis *r)
{
    return is_cluster(r) ? CCLUSTER(r)->drops : 0;
}

static const lb_redis_config *cluster_config(const lb_redis *r) { return &CCLUSTER(r)->cfg; }

static lb_redis *cluster_new_like(const lb_redis *r) { return lb_cluster_new(&CCLUSTER(r)->cfg); }


/* ----------------------------------------------------------- the route's ends */

/* The route is over with st (the error, if any, on c->base.err). */
static void route_over(lb_cluster *c, lb_redis_status st)
{
    c->rt_st = st;
    c->phase = R_OVER;
}

/* The batch got its replies rs: the route is over, error replies turned into
 * a status as lb_redis_exec does. */
static void route_replies(lb_cluster *c, lb_reply **rs)
{
    c->out = rs;
    route_over(c, lb_session_errors(&c->base.err, rs, c->b->ncmds, c->flags));
}

/* The retry budget: the backoff to wait before the next try (50, 100, 200 ...
 * 1000 ms, the last one cut to what is left), or -1 when the budget, counted
 * from the route's first failure, is spent. */
static int retry_pause(lb_cluster *c)
{
    int64_t now = now_ms();
    if (!c->bg_first) {
        c->bg_first = now;
        c->bg_wait = 50;
    }
    int64_t left = c->bg_first + c->retry_ms - now;
    if (left <= 0)
        return -1;
    int ms = c->bg_wait < left ? c->bg_wait : (int)left;
    c->bg_wait = c->bg_wait * 2 > 1000 ? 1000 : c->bg_wait * 2;
    return ms;
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

/* After a failure st (its message on c->base.err): a pause, then on at next,
 * when st is retryable for flags and the budget allows; else the end. */
static void retry_or_over(lb_cluster *c, lb_redis_status st, int flags, route_phase next)
{
    int ms = retryable(st, flags) ? retry_pause(c) : -1;
    if (ms < 0) {
        route_over(c, st);
        return;
    }
    c->pause_ms = ms;
    c->pause_next = next;
    c->phase = R_PAUSE;
}

/* Hand out batch b for node i, waiting at phase wait for its result. */
static int hand_out(lb_cluster *c, int i, const lb_redis_batch *b, int flags, route_phase wait,
                    lb_cluster_hop *hop)
{
    c->hop.node = i;
    c->hop.b = b;
    c->hop.flags = flags | LB_REDIS_RAW_ERRORS;
    c->hop.pause_ms = 0;
    c->phase = wait;
    *hop = c->hop;
    return 1;
}

/* A batch of the machine's own (READONLY, CLUSTER SHARDS/SLOTS) into b; OK,
 * or NOMEM on c->base.err. */
static lb_redis_status own_batch(lb_cluster *c, lb_redis_batch *b, int argc, const char *const *argv)
{
    lb_redis_batch_clear(b);
    lb_redis_batch_argv(b, argc, argv, NULL);
    if (b->failed)
        return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a cluster command");
    return LB_REDIS_OK;
}

/* --------------------------------------------------------- reading the map */

/* Read the map from the nodes known: the ones with an open connection first
 * (a node that hangs is not asked before the others), then the rest; each
 * with CLUSTER SHARDS, else CLUSTER SLOTS.  When none gave one, a refused map
 * is the error told (not a later node's).  The outcome goes to map_out, and
 * the route on at ret. */
static void map_begin(lb_cluster *c, route_phase ret)
{
    c->map_ret = ret;
    c->map_st = lb_error_set(&c->base.err, LB_REDIS_ERR_CONNECT,
                             "no node of the Redis Cluster is known");
    c->map_refused[0] = '\0';
    c->map_pass = 0;
    c->map_i = 0;
    c->cand_served = -1;
    c->map_incomplete = 0;
    c->phase = R_MAP;
}

/* The map in use from now on is m (primary, replica: node indexes per slot). */
static void map_take(lb_cluster *c, const int16_t *primary, const int16_t *replica)
{
    if (primary != c->primary)
        memcpy(c->primary, primary, sizeof c->primary);
    if (replica != c->replica)
        memcpy(c->replica, replica, sizeof c->replica);
    c->have_map = 1;
    c->prune_due = 1;
    c->map_reads++;
}

static void map_over(lb_cluster *c, lb_redis_status st)
{
    c->map_out = st;
    c->phase = c->map_ret;
}

/* Node map_i's outcome st: the read's end, or on to the next node. */
static void map_tried(lb_cluster *c, lb_redis_status st)
{
    c->map_st = st;
    if (st == LB_REDIS_OK || st == LB_REDIS_ERR_REPLY || st == LB_REDIS_ERR_NOMEM ||
        st == LB_REDIS_ERR_AUTH) {
        map_over(c, st);
        return;
    }
    if (st == LB_REDIS_ERR_PROTOCOL && !c->map_refused[0])
        snprintf(c->map_refused, sizeof c->map_refused, "%s", c->base.err.text);
    c->map_i++;
    c->phase = R_MAP;
}

/* R_MAP: the next node to ask, or the end of the read. */
static int map_next(lb_cluster *c)
{
    for (;;) {
        if (c->map_pass >= 2) {
            if (c->cand_served >= 0) {
                /* no node gave a complete map: the most complete one (slots may be
                 * unassigned; the route waits for the ones it needs) */
                map_take(c, c->cand_primary, c->cand_replica);
                lb_error_clear(&c->base.err);
                map_over(c, LB_REDIS_OK);
                return 0;
            }
            lb_redis_status st = c->map_st;
            if (c->map_refused[0] && st != LB_REDIS_ERR_PROTOCOL)
                st = lb_error_set(&c->base.err, LB_REDIS_ERR_PROTOCOL, "%s", c->map_refused);
            map_over(c, st);
            return 0;
        }
        if (c->map_i >= c->nnodes) {
            c->map_pass++;
            c->map_i = 0;
            continue;
        }
        const cnode *n = &c->nodes[c->map_i];
        int open = n->conn && lb_redis_is_connected(n->conn);
        if (!n->gone && open == (c->map_pass == 0))
            break;
        c->map_i++;
    }
    if (!node_conn(c, (int)c->map_i)) {
        map_tried(c, lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM,
                                  "out of memory for a cluster node"));
        return 0;
    }
    c->map_shards = 1;
    c->phase = R_MAP_ASK;
    return 0;
}

/* R_MAP_ASK */
static int map_ask(lb_cluster *c, lb_cluster_hop *hop)
{
    const char *argv[2] = {"CLUSTER", c->map_shards ? "SHARDS" : "SLOTS"};
    lb_redis_status st = own_batch(c, &c->mapb, 2, argv);
    if (st != LB_REDIS_OK) {
        map_tried(c, st);
        return 0;
    }
    lb_redis_batch_expect_bytes(&c->mapb, LB_CLUSTER_MAP_MAX_BYTES);
    return hand_out(c, (int)c->map_i, &c->mapb, LB_REDIS_IDEMPOTENT, R_MAP_WAIT, hop);
}

/* A map being parsed: the nodes it names (their addresses point into the
 * reply), deduplicated by a table, and per slot the ids of its primary and
 * replica; nothing of the client changes until the whole map is read. */
typedef struct {
    const char *host;
    int port;
    int idx; /* the client's node index, once merged */
} map_node;

typedef struct {
    map_node *n;
    size_t len, cap;
    int32_t *ht; /* id + 1, 0: empty */
    size_t hmask;
    int16_t *primary, *replica; /* ids; primary -2: named with no primary */
} map_ctx;

static int map_ht_grow(map_ctx *m)
{
    size_t size = m->ht ? (m->hmask + 1) * 2 : 64;
    int32_t *ht = calloc(size, sizeof *ht);
    if (!ht)
        return -1;
    free(m->ht);
    m->ht = ht;
    m->hmask = size - 1;
    for (size_t i = 0; i < m->len; i++) {
        size_t h = addr_hash(m->n[i].host, m->n[i].port) & m->hmask;
        while (m->ht[h])
            h = (h + 1) & m->hmask;
        m->ht[h] = (int32_t)i + 1;
    }
    return 0;
}

static int map_node_fn(void *vctx, const char *host, int port)
{
    map_ctx *m = vctx;
    if (strlen(host) >= sizeof ((cnode *)0)->host)
        return -1;
    if (m->ht) {
        size_t h = addr_hash(host, port) & m->hmask;
        for (; m->ht[h]; h = (h + 1) & m->hmask) {
            const map_node *n = &m->n[m->ht[h] - 1];
            if (n->port == port && strcmp(n->host, host) == 0)
                return m->ht[h] - 1;
        }
    }
    if (m->len >= LB_CLUSTER_MAP_MAX_NODES)
        return -1;
    if (m->len == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 16;
        map_node *nn = realloc(m->n, cap * sizeof *nn);
        if (!nn)
            return -1;
        m->n = nn;
        m->cap = cap;
    }
    if ((!m->ht || 2 * (m->len + 1) > m->hmask + 1) && map_ht_grow(m))
        return -1;
    m->n[m->len] = (map_node){host, port, -1};
    size_t h = addr_hash(host, port) & m->hmask;
    while (m->ht[h])
        h = (h + 1) & m->hmask;
    m->ht[h] = (int32_t)m->len + 1;
    return (int)m->len++;
}

/* A slot named twice is no map (Redis names each once): so the slots filled
 * in all are at most 16384, whatever the reply. */
static int map_range_fn(void *vctx, long lo, long hi, int primary, int replica)
{
    map_ctx *m = vctx;
    for (long s = lo; s <= hi; s++)
        if (m->primary[s] != -1)
            return -1;
    for (long s = lo; s <= hi; s++) {
        m->primary[s] = (int16_t)(primary >= 0 ? primary : -2);
        m->replica[s] = (int16_t)replica;
    }
    return 0;
}

static const lb_cluster_map_fns map_fns = {map_node_fn, map_range_fn};

/* R_MAP_WAIT: node i's answer to CLUSTER SHARDS/SLOTS (st, rs). */
static void map_answer(lb_cluster *c, int i, lb_redis_status st, lb_reply **rs)
{
    lb_redis *nc = c->nodes[i].conn;
    if (st != LB_REDIS_OK) {
        map_tried(c, lb_redis_take_error(&c->base, nc));
        return;
    }
    const int shards = c->map_shards;
    const lb_reply *x = rs[0];
    if (x->type == LB_REPLY_ERROR) {
        if (shards && (strstr(x->str, "nknown subcommand") || strstr(x->str, "nknown command"))) {
            c->map_shards = 0; /* before Redis 7: CLUSTER SLOTS */
            c->phase = R_MAP_ASK;
            return;
        }
        map_tried(c, lb_error_set(&c->base.err, LB_REDIS_ERR_REPLY,
                                  "Redis at %s:%d cannot tell its cluster's slots (%s): is "
                                  "it a cluster node? (a single server takes redis://)",
                                  c->nodes[i].host, c->nodes[i].port, x->str));
        return;
    }
    int16_t *pm = malloc(2 * LB_CLUSTER_SLOTS * sizeof *pm);
    if (!pm) {
        map_tried(c, lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a slot map"));
        return;
    }
    char asked[256]; /* node_index may move c->nodes */
    snprintf(asked, sizeof asked, "%s", c->nodes[i].host);
    map_ctx m = {NULL, 0, 0, NULL, 0, pm, pm + LB_CLUSTER_SLOTS};
    for (int s = 0; s < 2 * LB_CLUSTER_SLOTS; s++)
        pm[s] = -1;
    int bad = lb_cluster_parse_map(x, shards, asked, c->tmpl.tls, &map_fns, &m);
    /* The nodes it names join the client's (a refused map adds none: every later
     * map read would ask them, each a timeout when they never answer). */
    for (size_t k = 0; !bad && k < m.len; k++)
        bad = (m.n[k].idx = node_index(c, m.n[k].host, m.n[k].port, NULL)) < 0;
    if (bad) {
        free(m.n);
        free(m.ht);
        free(pm);
        lb_redis_disconnect(nc);
        map_tried(c, lb_error_set(&c->base.err, LB_REDIS_ERR_PROTOCOL,
                                  "protocol error: Redis at %s:%d answered CLUSTER %s with "
                                  "something that is not a slot map; connection dropped",
                                  asked, c->nodes[i].port, shards ? "SHARDS" : "SLOTS"));
        return;
    }
    long served = 0;
    for (int s = 0; s < LB_CLUSTER_SLOTS; s++) {
        pm[s] = pm[s] >= 0 ? (int16_t)m.n[pm[s]].idx : -1;
        pm[LB_CLUSTER_SLOTS + s] =
            pm[LB_CLUSTER_SLOTS + s] >= 0 ? (int16_t)m.n[pm[LB_CLUSTER_SLOTS + s]].idx : -1;
        served += pm[s] >= 0;
    }
    free(m.n);
    free(m.ht);
    if (served == LB_CLUSTER_SLOTS) {
        map_take(c, pm, pm + LB_CLUSTER_SLOTS);
        free(pm);
        map_tried(c, LB_REDIS_OK);
        return;
    }
    /* Slots no node serves: a node that has not learned every slot yet (a cluster just
     * formed) or an unassigned one.  Another node is asked (at most a few more); the
     * most complete map is taken when none is complete. */
    if (served > c->cand_served) {
        memcpy(c->cand_primary, pm, sizeof c->cand_primary);
        memcpy(c->cand_replica, pm + LB_CLUSTER_SLOTS, sizeof c->cand_replica);
        c->cand_served = served;
    }
    free(pm);
    c->prune_due = 1; /* the nodes it named, when no map keeps them */
    if (++c->map_incomplete > INCOMPLETE_MAP_TRIES) {
        map_take(c, c->cand_primary, c->cand_replica);
        map_tried(c, LB_REDIS_OK);
        return;
    }
    c->map_i++;
    c->phase = R_MAP;
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

/* R_PICK: the node for the batch (the map read's outcome in map_out); a
 * replica serves reads after READONLY on its connection. */
static int route_pick(lb_cluster *c, lb_cluster_hop *hop)
{
    lb_redis_status st = c->map_out;
    const long slot = c->slot;
    int i = st == LB_REDIS_OK ? pick_node(c, slot, c->use_replica) : -1;
    if (st == LB_REDIS_OK && i < 0) {
        c->have_map = 0;
        st = lb_error_set(&c->base.err, LB_REDIS_ERR_CONNECT,
                          "no node of the Redis Cluster serves slot %ld (is the "
                          "cluster down, or its slots not all assigned?)",
                          slot < 0 ? 0 : slot);
    }
    if (st != LB_REDIS_OK) {
        retry_or_over(c, st, 0, R_START);
        return 0;
    }
    lb_redis *nc = node_conn(c, i);
    if (!nc) {
        route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM,
                                   "out of memory for a cluster node"));
        return 0;
    }
    c->cur = i;
    c->phase = R_SEND_BATCH;
    if (c->use_replica && c->primary[slot] != i) {
        const cnode *n = &c->nodes[i];
        if (n->ro_conn && n->ro_conn == lb_redis_connect_count(nc) && lb_redis_is_connected(nc))
            return 0;
        st = own_batch(c, &c->rob, 1, (const char *const[]){"READONLY"});
        if (st != LB_REDIS_OK) {
            route_over(c, st);
            return 0;
        }
        return hand_out(c, i, &c->rob, LB_REDIS_IDEMPOTENT, R_READONLY, hop);
    }
    return 0;
}

/* R_READONLY: READONLY's answer. */
static void readonly_answer(lb_cluster *c, int i, lb_redis_status st, lb_reply **rs)
{
    lb_redis *nc = c->nodes[i].conn;
    if (st != LB_REDIS_OK) {
        st = lb_redis_take_error(&c->base, nc);
    } else if (rs[0]->type == LB_REPLY_ERROR) {
        lb_error_clear(&c->base.err); /* as the node's own call would tell it */
        st = lb_session_errors(&c->base.err, rs, 1, LB_REDIS_IDEMPOTENT);
    }
    if (st != LB_REDIS_OK) {
        c->have_map = 0;
        retry_or_over(c, st, 0, R_START);
        return;
    }
    c->nodes[i].ro_conn = lb_redis_connect_count(nc);
    c->phase = R_SEND_BATCH;
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

/* Some replies rs of the batch were refusals (MOVED, ASK, TRYAGAIN,
 * CLUSTERDOWN): keep every reply (copied into c->res), and get ready to send
 * the refused commands where they belong (the rounds, R_ROUND on).  OK, or
 * the error on c->base.err. */
static lb_redis_status redirected(lb_cluster *c, lb_reply **rs)
{
    const size_t n = c->b->ncmds;
    blocks_free(c);
    if (c->res_cap < n) {
        lb_reply **nr = realloc(c->res, n * sizeof *nr);
        if (!nr)
            return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for replies");
        c->res = nr;
        c->res_cap = n;
    }
    if (c->redir_cap < n) {
        size_t *off = realloc(c->off, (n + 1) * sizeof *off);
        if (off)
            c->off = off;
        int16_t *target = realloc(c->target, n * sizeof *target);
        if (target)
            c->target = target;
        char *asking = realloc(c->asking, n);
        if (asking)
            c->asking = asking;
        if (!off || !target || !asking)
            return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for replies");
        c->redir_cap = n;
    }
    for (size_t i = 0; i < n; i++)
        if (!(c->res[i] = copy_reply(c, rs[i])))
            return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for replies");
    if (lb_redis_batch_offsets(c->b, c->off))
        return lb_error_set(&c->base.err, LB_REDIS_ERR_ARG, "malformed Redis batch");
    c->redirects = 0;
    return LB_REDIS_OK;
}

/* Where each refused command of c->res goes now: target[i] its node, -1
 * where the map says (after a wait: TRYAGAIN, CLUSTERDOWN), -2 answered;
 * asking[i] for ASK.  *pending: refused commands; *wait: one must wait. */
static lb_redis_status redirect_targets(lb_cluster *c, size_t *pending, int *wait)
{
    const size_t n = c->b->ncmds;
    *pending = 0;
    *wait = 0;
    for (size_t i = 0; i < n; i++) {
        c->target[i] = -2;
        c->asking[i] = 0;
        const lb_reply *x = c->res[i];
        if (!lb_cluster_refusal(x))
            continue;
        (*pending)++;
        long s;
        int port;
        char host[256];
        int kind = lb_cluster_redirect(x->str, x->len, &s, host, sizeof host, &port);
        if (!kind) {
            c->target[i] = -1; /* TRYAGAIN, CLUSTERDOWN: later, where the map says */
            *wait = 1;
            continue;
        }
        if (!host[0])
            snprintf(host, sizeof host, "%s", c->nodes[c->from].host);
        int added;
        int t = node_index(c, host, port, &added);
        if (t < 0)
            return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a node");
        if (added) { /* a node the map does not name: dropped at the next route's start */
            c->prune_due = 1;
            if (++c->route_new > MAX_REDIRECT_NODES)
                return lb_error_set(&c->base.err, LB_REDIS_ERR_PROTOCOL,
                                    "protocol error: the Redis Cluster redirected one call to "
                                    "more than %d nodes its slot map does not name",
                                    MAX_REDIRECT_NODES);
        }
        c->target[i] = (int16_t)t;
        c->asking[i] = kind == 2;
        if (kind == 1)
            c->have_map = 0; /* MOVED: the map is out of date */
    }
    return LB_REDIS_OK;
}

/* R_ROUND: a round of the redirects, until no command is refused, or the
 * redirects or the budget run out (the refusals then stay as the commands'
 * replies). */
static void round_begin(lb_cluster *c)
{
    size_t pending;
    int wait;
    lb_redis_status st = redirect_targets(c, &pending, &wait);
    if (st != LB_REDIS_OK) {
        route_over(c, st);
        return;
    }
    if (!pending) {
        route_replies(c, c->res);
        return;
    }
    if (wait) {
        int ms = retry_pause(c);
        if (ms < 0) {
            route_replies(c, c->res);
            return;
        }
        c->have_map = 0;
        c->pause_ms = ms;
        c->pause_next = R_ROUND_MAP;
        c->phase = R_PAUSE;
        return;
    }
    if (c->redirects++ >= LB_CLUSTER_MAX_REDIRECTS) {
        route_replies(c, c->res);
        return;
    }
    c->phase = R_ROUND_MAP;
}

/* R_ROUND_MAPPED: the refused commands the map places are aimed; then one
 * sub-batch per target node, one node after the other. */
static void round_mapped(lb_cluster *c)
{
    if (c->map_out != LB_REDIS_OK) {
        retry_or_over(c, c->base.err.status, 0, R_ROUND);
        return;
    }
    for (size_t i = 0; i < c->b->ncmds; i++)
        if (c->target[i] == -1)
            c->target[i] = (int16_t)pick_node(c, c->slot, 0);
    c->cursor = 0;
    c->phase = R_REFUSED;
}

/* R_REFUSED: the next sub-batch of the refused commands for one node (the
 * first target from the cursor; up to 64 of them, ASKING before each ASK). */
static int refused_next(lb_cluster *c, lb_cluster_hop *hop)
{
    const lb_redis_batch *b = c->b;
    const size_t n = b->ncmds;
    size_t i = c->cursor;
    while (i < n && c->target[i] < 0)
        i++;
    if (i >= n) {
        c->phase = R_ROUND;
        return 0;
    }
    c->cursor = i; /* looked at again after: it may have more commands beyond the chunk */
    const int t = c->target[i];
    lb_redis_batch *sb = &c->sb;
    lb_redis_batch_clear(sb);
    if (b->max_set)
        lb_redis_batch_expect_elements(sb, b->max_elements);
    if (b->bytes_set)
        lb_redis_batch_expect_bytes(sb, b->max_bytes);
    c->cnt = 0;
    for (size_t j = i; j < n && c->cnt < 64; j++) {
        if (c->target[j] != t)
            continue;
        if (c->asking[j]) {
            lb_redis_batch_cmd(sb, 1);
            lb_redis_batch_arg(sb, "ASKING", 6);
        }
        lb_redis_batch_raw(sb, b->buf + c->off[j], c->off[j + 1] - c->off[j]);
        c->idx[c->cnt++] = j;
    }
    if (!node_conn(c, t)) {
        route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a node"));
        return 0;
    }
    lb_redis_status st = lb_redis_batch_check(sb, &c->base.err);
    if (st != LB_REDIS_OK) {
        route_over(c, st);
        return 0;
    }
    return hand_out(c, t, sb, c->flags & ~(LB_REDIS_READ_REPLICA | LB_REDIS_KEPT_CONN),
                    R_REFUSED_WAIT, hop);
}

/* R_REFUSED_WAIT: a sub-batch's answer.  A node that could not be reached,
 * with budget left: the commands were not run, they stay pending. */
static void refused_answer(lb_cluster *c, int t, lb_redis_status st, lb_reply **rs)
{
    if (st != LB_REDIS_OK) {
        if (retryable(st, c->flags)) {
            int ms = retry_pause(c);
            if (ms >= 0) {
                c->have_map = 0;
                c->pause_ms = ms;
                c->pause_next = R_ROUND;
                c->phase = R_PAUSE;
                return;
            }
        }
        route_over(c, lb_redis_take_error(&c->base, c->nodes[t].conn));
        return;
    }
    size_t k = 0;
    for (size_t q = 0; q < c->cnt; q++) {
        size_t j = c->idx[q];
        if (c->asking[j])
            k++; /* ASKING's +OK */
        if (!(c->res[j] = copy_reply(c, rs[k++]))) {
            route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM,
                                       "out of memory for replies"));
            return;
        }
        c->target[j] = -2;
    }
    c->phase = R_REFUSED;
}

/* R_SEND: the batch's answer. */
static void batch_answer(lb_cluster *c, int i, lb_redis_status st, lb_reply **rs)
{
    if (st != LB_REDIS_OK) {
        lb_redis_take_error(&c->base, c->nodes[i].conn);
        if (retryable(st, c->flags)) {
            c->have_map = 0; /* a failover, perhaps: ask the cluster again */
            retry_or_over(c, st, c->flags, R_START);
        } else {
            route_over(c, st);
        }
        return;
    }
    int refused = 0;
    for (size_t k = 0; k < c->b->ncmds && !refused; k++)
        refused = lb_cluster_refusal(rs[k]);
    if (!refused) {
        route_replies(c, rs);
        return;
    }
    c->from = i;
    st = redirected(c, rs);
    if (st != LB_REDIS_OK) {
        route_over(c, st);
        return;
    }
    c->phase = R_ROUND;
}

/* ----------------------------------------------------------------- the route */

lb_redis_status lb_cluster_route_begin(lb_redis *r, const lb_redis_batch *b, int flags)
{
    if (!is_cluster(r))
        return r ? lb_error_set(&r->err, LB_REDIS_ERR_ARG, "not a Redis Cluster client")
                 : LB_REDIS_ERR_ARG;
    lb_cluster *c = CLUSTER(r);
    lb_error_clear(&r->err);
    c->out = NULL;
    c->b = NULL;
    route_over(c, LB_REDIS_OK);
    lb_redis_status st = lb_redis_batch_check(b, &r->err);
    if (st != LB_REDIS_OK) {
        route_over(c, st);
        return st;
    }
    if (b->ncmds == 0)
        return LB_REDIS_OK;
    if (b->multi_slot) {
        route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
                                   "a batch for a Redis Cluster keeps its keys in one slot "
                                   "(command %zu names a key of another slot than the first)",
                                   b->multi_cmd));
        return c->rt_st;
    }
    c->b = b;
    c->flags = flags;
    c->slot = b->has_slot ? (long)b->slot : -1;
    c->use_replica = (flags & LB_REDIS_READ_REPLICA) && c->replica_reads && c->slot >= 0;
    c->node_flags = (flags | LB_REDIS_RAW_ERRORS) & ~LB_REDIS_READ_REPLICA;
    c->bg_first = 0;
    c->bg_wait = 0;
    c->route_new = 0;
    if (c->prune_due) { /* no index is held between routes */
        prune(c);
        c->prune_due = 0;
    }
    c->phase = R_START;
    return LB_REDIS_OK;
}

int lb_cluster_route_next(lb_redis *r, lb_cluster_hop *hop)
{
    if (!is_cluster(r))
        return 0;
    lb_cluster *c = CLUSTER(r);
    for (;;) {
        int got = 0;
        switch (c->phase) {
        case R_OVER:
            return 0;
        case R_START:
            if (c->have_map) {
                c->map_out = LB_REDIS_OK;
                c->phase = R_PICK;
            } else {
                map_begin(c, R_PICK);
            }
            break;
        case R_PICK:
            got = route_pick(c, hop);
            break;
        case R_SEND_BATCH:
            got = hand_out(c, c->cur, c->b, c->node_flags, R_SEND, hop);
            break;
        case R_ROUND:
            round_begin(c);
            break;
        case R_ROUND_MAP:
            if (c->have_map) {
                c->map_out = LB_REDIS_OK;
                c->phase = R_ROUND_MAPPED;
            } else {
                map_begin(c, R_ROUND_MAPPED);
            }
            break;
        case R_ROUND_MAPPED:
            round_mapped(c);
            break;
        case R_REFUSED:
            got = refused_next(c, hop);
            break;
        case R_MAP:
            got = map_next(c);
            break;
        case R_MAP_ASK:
            got = map_ask(c, hop);
            break;
        case R_PAUSE:
            hop->node = -1;
            hop->b = NULL;
            hop->flags = 0;
            hop->pause_ms = c->pause_ms;
            c->phase = c->pause_next;
            return 1;
        case R_READONLY:
        case R_SEND:
        case R_REFUSED_WAIT:
        case R_MAP_WAIT:
            *hop = c->hop; /* still waiting for its result */
            return 1;
        }
        if (got)
            return 1;
    }
}

void lb_cluster_route_done(lb_redis *r, lb_redis_status st, lb_reply **rs)
{
    if (!is_cluster(r))
        return;
    lb_cluster *c = CLUSTER(r);
    const int i = c->hop.node;
    if (st == LB_REDIS_OK && !rs && c->phase != R_OVER && c->phase != R_PAUSE) {
        route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
                                   "a cluster hop's result came without its replies"));
        return;
    }
    switch (c->phase) {
    case R_READONLY:
    case R_SEND:
    case R_REFUSED_WAIT:
    case R_MAP_WAIT:
        if (i < 0 || (size_t)i >= c->nnodes || !c->nodes[i].conn) {
            /* its client went (lb_cluster_use_wire during the route) */
            route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
                                       "the cluster node's client went during its round trip"));
            return;
        }
        break;
    default:
        return; /* no hop is waiting: nothing to take */
    }
    switch (c->phase) {
    case R_READONLY:
        readonly_answer(c, i, st, rs);
        break;
    case R_SEND:
        batch_answer(c, i, st, rs);
        break;
    case R_REFUSED_WAIT:
        refused_answer(c, i, st, rs);
        break;
    case R_MAP_WAIT:
        map_answer(c, i, st, rs);
        break;
    default:
        break; /* no hop is waiting: nothing to take */
    }
}

lb_redis_status lb_cluster_route_end(lb_redis *r, lb_reply ***replies)
{
    if (replies)
        *replies = NULL;
    if (!is_cluster(r))
        return r ? lb_error_set(&r->err, LB_REDIS_ERR_ARG, "not a Redis Cluster client")
                 : LB_REDIS_ERR_ARG;
    lb_cluster *c = CLUSTER(r);
    if (c->phase != R_OVER) {
        c->out = NULL;
        route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
                                   "the cluster route was ended before its last hop"));
    }
    if (replies)
        *replies = c->out;
    return c->rt_st;
}

/* ------------------------------------------------------ the blocking driver */

/* Run the route on the nodes' own sockets, sleeping its pauses. */
static lb_redis_status drive(lb_redis *r, lb_reply ***replies)
{
    lb_cluster_hop h;
    while (lb_cluster_route_next(r, &h)) {
        if (!h.b) {
            sleep_ms(h.pause_ms);
            continue;
        }
        lb_reply **rs = NULL;
        lb_redis_status s = lb_node_exec(lb_cluster_node_conn(r, h.node), h.b, h.flags, &rs);
        lb_cluster_route_done(r, s, s == LB_REDIS_OK ? rs : NULL);
    }
    return lb_cluster_route_end(r, replies);
}

/* ------------------------------------- the route as steps, for asyncio */

/* The route's hops carried by a transport outside C: each hop is a round
 * trip of its node's client as steps (a wire client), a pause a step of its
 * own. */
static lb_redis_status cluster_step_begin(lb_redis *r, const lb_redis_batch *b, int flags)
{
    CLUSTER(r)->st_node = NULL;
    return lb_cluster_route_begin(r, b, flags); /* a failure ends the route at once */
}

static int cluster_step_next(lb_redis *r, lb_redis_step *s)
{
    lb_cluster *c = CLUSTER(r);
    for (;;) {
        if (c->st_node) {
            if (lb_redis_step_next(c->st_node, s)) {
                s->node = c->st_node_id;
                return 1;
            }
            lb_reply **rs = NULL;
            lb_redis_status st = lb_redis_step_end(c->st_node, &rs);
            c->st_node = NULL;
            lb_cluster_route_done(r, st, st == LB_REDIS_OK ? rs : NULL);
            continue;
        }
        lb_cluster_hop h;
        if (!lb_cluster_route_next(r, &h))
            return 0;
        if (!h.b) {
            memset(s, 0, sizeof *s);
            s->what = LB_STEP_PAUSE;
            s->pause_ms = h.pause_ms;
            return 1;
        }
        lb_redis *n = lb_cluster_node_conn(r, h.node);
        if (!n || !n->vt->step_begin) {
            lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for a cluster node");
            lb_cluster_route_done(r, LB_REDIS_ERR_NOMEM, NULL);
            continue;
        }
        lb_redis_step_begin(n, h.b, h.flags);
        c->st_node = n;
        c->st_node_id = h.node;
    }
}

static void cluster_step_connected(lb_redis *r, lb_redis_status st, const char *text)
{
    if (CLUSTER(r)->st_node)
        lb_redis_step_connected(CLUSTER(r)->st_node, st, text);
}

static lb_redis_status cluster_step_feed(lb_redis *r, const void *data, size_t len, int *complete)
{
    lb_redis *n = CLUSTER(r)->st_node;
    if (!n) {
        *complete = 0;
        return lb_redis_set_error(r, LB_REDIS_ERR_PROTOCOL, "protocol error: a reply with no hop out");
    }
    lb_redis_status st = lb_redis_step_feed(n, data, len, complete);
    if (st != LB_REDIS_OK)
        lb_redis_take_error(r, n); /* the text for the exception raised now */
    return st;
}

static void cluster_step_sent(lb_redis *r, lb_redis_status st, const char *text)
{
    if (CLUSTER(r)->st_node)
        lb_redis_step_sent(CLUSTER(r)->st_node, st, text);
}

static lb_redis_status cluster_step_end(lb_redis *r, lb_reply ***replies)
{
    return lb_cluster_route_end(r, replies);
}

static int cluster_step_open(const lb_redis *r)
{
    const lb_cluster *c = CCLUSTER(r);
    return c->st_node && lb_redis_step_open(c->st_node);
}

static lb_redis *cluster_step_client(lb_redis *r, int node)
{
    return node >= 0 ? lb_cluster_node_conn(r, node) : NULL;
}

/* A client whose nodes' connections an outside transport carries has no
 * socket of its own to drive the route on. */
static lb_redis_status no_sockets(lb_cluster *c)
{
    return lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
                        "this Redis Cluster client's connections are carried by an outside "
                        "transport (wire.h): it has no socket of its own");
}

static lb_redis_status cluster_exec(lb_redis *r, const lb_redis_batch *b, int flags,
                                    lb_reply ***replies)
{
    if (CLUSTER(r)->wire) {
        if (replies)
            *replies = NULL;
        return no_sockets(CLUSTER(r));
    }
    lb_cluster_route_begin(r, b, flags);
    return drive(r, replies);
}

static lb_redis_status cluster_connect(lb_redis *r)
{
    lb_cluster *c = CLUSTER(r);
    if (c->wire)
        return no_sockets(c);
    if (!c->have_map) {
        /* a route that only reads the map */
        c->out = NULL;
        c->b = NULL;
        route_over(c, LB_REDIS_OK);
        map_begin(c, R_OVER);
        lb_redis_status st = drive(r, NULL);
        if (st == LB_REDIS_OK)
            st = c->map_out;
        if (st != LB_REDIS_OK)
            return st;
    }
    int i = pick_node(c, -1, 0);
    if (i < 0)
        return lb_error_set(&c->base.err, LB_REDIS_ERR_CONNECT,
                            "no node of the Redis Cluster serves any slot");
    lb_redis *nc = node_conn(c, i);
    if (!nc)
        return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a cluster node");
    lb_error_clear(&nc->err);
    lb_redis_status st = lb_redis_connect(nc);
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
    .step_begin = cluster_step_begin,
    .step_next = cluster_step_next,
    .step_connected = cluster_step_connected,
    .step_feed = cluster_step_feed,
    .step_sent = cluster_step_sent,
    .step_end = cluster_step_end,
    .step_open = cluster_step_open,
    .step_client = cluster_step_client,
};
