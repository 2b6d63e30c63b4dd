/* cluster_route.c: the route of a Redis Cluster client (cluster.h's
 * lb_cluster_route_*), one sans-I/O step machine: it hands out hops (a batch
 * for one node's client: the caller's batch, READONLY, CLUSTER SHARDS/SLOTS,
 * a sub-batch of refused commands) and pauses (the backoff of a retry), and
 * takes each hop's result back; it never does I/O nor sleeps.  Its drivers
 * are in cluster.c. */
#define _POSIX_C_SOURCE 200809L
#include "cluster_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster_map.h"
#include "session.h"

/* ----------------------------------------------------------- the route's ends */

void lb_cl_blocks_free(lb_cluster *c)
{
    while (c->blocks) {
        cblock *n = c->blocks->next;
        free(c->blocks);
        c->blocks = n;
    }
}

/* The route is over with st (the error, if any, on c->base.err). */
void lb_cl_route_over(lb_cluster *c, lb_redis_status st)
{
    c->rt_st = st;
    c->phase = R_OVER;
}

/* The batch got its replies rs: the route is over, error replies turned into
 * a status as lb_redis_exec does. */
static void route_replies(lb_cluster *c, lb_reply **rs)
{
    c->out = rs;
    lb_cl_route_over(c, lb_session_errors(&c->base.err, rs, c->b->ncmds, c->flags));
}

/* The retry budget: the backoff to wait before the next try (50, 100, 200 ...
 * 1000 ms, the last one cut to what is left), or -1 when the budget, counted
 * from the route's first failure, is spent. */
static int retry_pause(lb_cluster *c)
{
    int64_t now = lb_cl_now_ms();
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
        lb_cl_route_over(c, st);
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
void lb_cl_map_begin(lb_cluster *c, route_phase ret)
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
    if (!lb_cl_node_conn(c, (int)c->map_i)) {
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
        size_t h = lb_cl_addr_hash(m->n[i].host, m->n[i].port) & m->hmask;
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
        size_t h = lb_cl_addr_hash(host, port) & m->hmask;
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
    size_t h = lb_cl_addr_hash(host, port) & m->hmask;
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
    char asked[256]; /* lb_cl_node_index may move c->nodes */
    snprintf(asked, sizeof asked, "%s", c->nodes[i].host);
    map_ctx m = {NULL, 0, 0, NULL, 0, pm, pm + LB_CLUSTER_SLOTS};
    for (int s = 0; s < 2 * LB_CLUSTER_SLOTS; s++)
        pm[s] = -1;
    int bad = lb_cluster_parse_map(x, shards, asked, c->tmpl.tls, &map_fns, &m);
    /* The nodes it names join the client's (a refused map adds none: every later
     * map read would ask them, each a timeout when they never answer). */
    for (size_t k = 0; !bad && k < m.len; k++)
        bad = (m.n[k].idx = lb_cl_node_index(c, m.n[k].host, m.n[k].port, NULL)) < 0;
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

int lb_cl_pick_node(const lb_cluster *c, long slot, int replica)
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
    int i = st == LB_REDIS_OK ? lb_cl_pick_node(c, slot, c->use_replica) : -1;
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
    lb_redis *nc = lb_cl_node_conn(c, i);
    if (!nc) {
        lb_cl_route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM,
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
            lb_cl_route_over(c, st);
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
    lb_cl_blocks_free(c);
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
        int t = lb_cl_node_index(c, host, port, &added);
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
        lb_cl_route_over(c, st);
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
            c->target[i] = (int16_t)lb_cl_pick_node(c, c->slot, 0);
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
    if (!lb_cl_node_conn(c, t)) {
        lb_cl_route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a node"));
        return 0;
    }
    lb_redis_status st = lb_redis_batch_check(sb, &c->base.err);
    if (st != LB_REDIS_OK) {
        lb_cl_route_over(c, st);
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
        lb_cl_route_over(c, lb_redis_take_error(&c->base, c->nodes[t].conn));
        return;
    }
    size_t k = 0;
    for (size_t q = 0; q < c->cnt; q++) {
        size_t j = c->idx[q];
        if (c->asking[j])
            k++; /* ASKING's +OK */
        if (!(c->res[j] = copy_reply(c, rs[k++]))) {
            lb_cl_route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM,
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
            lb_cl_route_over(c, st);
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
        lb_cl_route_over(c, st);
        return;
    }
    c->phase = R_ROUND;
}

/* ----------------------------------------------------------------- the route */

lb_redis_status lb_cluster_route_begin(lb_redis *r, const lb_redis_batch *b, int flags)
{
    if (!lb_cl_is(r))
        return r ? lb_error_set(&r->err, LB_REDIS_ERR_ARG, "not a Redis Cluster client")
                 : LB_REDIS_ERR_ARG;
    lb_cluster *c = CLUSTER(r);
    lb_error_clear(&r->err);
    c->out = NULL;
    c->b = NULL;
    lb_cl_route_over(c, LB_REDIS_OK);
    lb_redis_status st = lb_redis_batch_check(b, &r->err);
    if (st != LB_REDIS_OK) {
        lb_cl_route_over(c, st);
        return st;
    }
    if (b->ncmds == 0)
        return LB_REDIS_OK;
    if (b->multi_slot) {
        lb_cl_route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
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
        lb_cl_prune(c);
        c->prune_due = 0;
    }
    c->phase = R_START;
    return LB_REDIS_OK;
}

int lb_cluster_route_next(lb_redis *r, lb_cluster_hop *hop)
{
    if (!lb_cl_is(r))
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
                lb_cl_map_begin(c, R_PICK);
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
                lb_cl_map_begin(c, R_ROUND_MAPPED);
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
    if (!lb_cl_is(r))
        return;
    lb_cluster *c = CLUSTER(r);
    const int i = c->hop.node;
    if (st == LB_REDIS_OK && !rs && c->phase != R_OVER && c->phase != R_PAUSE) {
        lb_cl_route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
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
            lb_cl_route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
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
    if (!lb_cl_is(r))
        return r ? lb_error_set(&r->err, LB_REDIS_ERR_ARG, "not a Redis Cluster client")
                 : LB_REDIS_ERR_ARG;
    lb_cluster *c = CLUSTER(r);
    if (c->phase != R_OVER) {
        c->out = NULL;
        lb_cl_route_over(c, lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
                                   "the cluster route was ended before its last hop"));
    }
    if (replies)
        *replies = c->out;
    return c->rt_st;
}
