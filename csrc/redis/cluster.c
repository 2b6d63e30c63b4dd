/* cluster.c: see cluster.h.  The client: its nodes, the interface's calls,
 * and the route's two drivers.  The routing is one sans-I/O step machine
 * (the route, lb_cluster_route_*, in cluster_route.c): it hands out hops and
 * pauses and takes each hop's result back.  Its hops are its nodes' round
 * trips as steps (the client interface's, lb_redis_step_*): cluster_exec
 * below runs them on the nodes' own sockets with the blocking driver of
 * lanes.h; ling_bloom.aio's transport carries them (through op.c) on wire
 * clients (lb_cluster_use_wire). */
#define _POSIX_C_SOURCE 200809L
#include "cluster.h"
#include "cluster_state.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "node.h"
#include "lanes.h"
#include "wire.h"

static const lb_redis_vt cluster_vt;
static void cluster_free(lb_redis *r);

int64_t lb_cl_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

uint32_t lb_cl_addr_hash(const char *host, int port)
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
        size_t h = lb_cl_addr_hash(c->nodes[i].host, c->nodes[i].port) & c->hmask;
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
    for (size_t h = lb_cl_addr_hash(host, port) & c->hmask; c->ht[h]; h = (h + 1) & c->hmask) {
        const cnode *n = &c->nodes[c->ht[h] - 1];
        if (n->port == port && strcmp(n->host, host) == 0)
            return c->ht[h] - 1;
    }
    return -1;
}

/* The node at host:port, added when new (*added set; a gone index is taken
 * again first); its index, or -1 (out of memory, or MAX_NODES). */
int lb_cl_node_index(lb_cluster *c, const char *host, int port, int *added)
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
        size_t h = lb_cl_addr_hash(host, port) & c->hmask;
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
void lb_cl_prune(lb_cluster *c)
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
lb_redis *lb_cl_node_conn(lb_cluster *c, int i)
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

int lb_cl_is(const lb_redis *r) { return r && r->vt == &cluster_vt; }

lb_redis *lb_cluster_node_conn(lb_redis *r, int node)
{
    if (!lb_cl_is(r) || node < 0 || (size_t)node >= CLUSTER(r)->nnodes)
        return NULL;
    return lb_cl_node_conn(CLUSTER(r), node);
}

const char *lb_cluster_node_host(const lb_redis *r, int node)
{
    if (!lb_cl_is(r) || node < 0 || (size_t)node >= CCLUSTER(r)->nnodes ||
        CCLUSTER(r)->nodes[node].gone)
        return NULL;
    return CCLUSTER(r)->nodes[node].host;
}

int lb_cluster_node_port(const lb_redis *r, int node)
{
    if (!lb_cl_is(r) || node < 0 || (size_t)node >= CCLUSTER(r)->nnodes)
        return 0;
    return CCLUSTER(r)->nodes[node].port;
}

void lb_cluster_use_wire(lb_redis *r)
{
    if (!lb_cl_is(r))
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
        int i = port ? lb_cl_node_index(c, host, port, NULL) : -1;
        if (i < 0)
            goto fail;
        c->nodes[i].seed = 1;
    }
    return &c->base;
fail:
    cluster_free(&c->base);
    return NULL;
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
    lb_cl_blocks_free(c);
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
    return lb_cl_is(r) ? CCLUSTER(r)->drops : 0;
}

static const lb_redis_config *cluster_config(const lb_redis *r) { return &CCLUSTER(r)->cfg; }

static lb_redis *cluster_new_like(const lb_redis *r) { return lb_cluster_new(&CCLUSTER(r)->cfg); }


/* ------------------------------------- the route as steps, for asyncio */

/* The route's hops carried by the wire transport: each hop is a round
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

static void cluster_step_ready(lb_redis *r, short revents, int poll_errno)
{
    if (CLUSTER(r)->st_node)
        lb_redis_step_ready(CLUSTER(r)->st_node, revents, poll_errno);
}

/* ------------------------------------------------------ the blocking driver */

/* The route begun, run to its end on the nodes' own sockets (their round
 * trips as steps, lanes.h: one driver for a node, a cluster's hops and the
 * shards of a sharded filter). */
static lb_redis_status drive(lb_redis *r, lb_reply ***replies)
{
    lb_lanes_roundtrip(r);
    return lb_cluster_route_end(r, replies);
}

static lb_redis *cluster_step_client(lb_redis *r, int node)
{
    return node >= 0 ? lb_cluster_node_conn(r, node) : NULL;
}

/* A client whose nodes' connections the wire transport carries has no
 * socket of its own to drive the route on. */
static lb_redis_status no_sockets(lb_cluster *c)
{
    return lb_error_set(&c->base.err, LB_REDIS_ERR_ARG,
                        "this Redis Cluster client's connections are carried by the wire "
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
    cluster_step_begin(r, b, flags);
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
        c->st_node = NULL;
        lb_cl_route_over(c, LB_REDIS_OK);
        lb_cl_map_begin(c, R_OVER);
        lb_redis_status st = drive(r, NULL);
        if (st == LB_REDIS_OK)
            st = c->map_out;
        if (st != LB_REDIS_OK)
            return st;
    }
    int i = lb_cl_pick_node(c, -1, 0);
    if (i < 0)
        return lb_error_set(&c->base.err, LB_REDIS_ERR_CONNECT,
                            "no node of the Redis Cluster serves any slot");
    lb_redis *nc = lb_cl_node_conn(c, i);
    if (!nc)
        return lb_error_set(&c->base.err, LB_REDIS_ERR_NOMEM, "out of memory for a cluster node");
    lb_error_clear(&nc->err);
    lb_redis_status st = lb_redis_connect(nc);
    return st == LB_REDIS_OK ? st : lb_error_copy(&c->base.err, &nc->err);
}

static lb_redis *cluster_to_wire(lb_redis *r)
{
    lb_cluster_use_wire(r);
    return r;
}

static int cluster_has_node(const lb_redis *r, int node)
{
    return lb_cluster_node_host(r, node) != NULL;
}

static const lb_redis_vt cluster_vt = {
    .to_wire = cluster_to_wire,
    .has_node = cluster_has_node,
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
    .step_ready = cluster_step_ready,
};
