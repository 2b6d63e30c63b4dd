/* node.c: see node.h. */
#define _POSIX_C_SOURCE 200809L
#include "node.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "sentinel.h"
#include "session.h"
#include "transport.h"

struct lb_node {
    lb_redis base;
    lb_redis_config cfg;
    lb_session s;
    lb_transport t;
    unsigned long connects;
    lb_redis_batch scratch; /* handshake and ROLE */
};

#define NODE(r) ((lb_node *)(r))

static const lb_redis_vt node_vt;

static void where(const lb_node *n, char *buf, size_t len)
{
    lb_redis_config_where(&n->cfg, buf, len);
}

/* Close the socket and forget the connection; nothing is sent. */
static void drop(lb_node *n)
{
    lb_transport_close(&n->t);
    lb_session_closed(&n->s);
}

/* --------------------------------------------------------------- lifecycle */

void lb_node_free(lb_redis *r)
{
    lb_node *n = NODE(r);
    if (!n)
        return;
    lb_transport_fini(&n->t);
    lb_session_fini(&n->s);
    lb_redis_batch_free(&n->scratch);
    lb_redis_config_free(&n->cfg);
    free(n);
}

lb_redis *lb_node_new(const lb_redis_config *cfg)
{
    lb_node *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->base.vt = &node_vt;
    lb_error_clear(&n->base.err);
    lb_redis_batch_init(&n->scratch);
    n->t.fd = -1;
    if (lb_redis_config_copy(&n->cfg, cfg) != LB_REDIS_OK) {
        free(n);
        return NULL;
    }
    lb_redis_config_set(&n->cfg.cluster_nodes, NULL);
    n->cfg.connect_timeout_ms = cfg->connect_timeout_ms < 0 ? 0 : cfg->connect_timeout_ms;
    n->cfg.timeout_ms = cfg->timeout_ms < 0 ? 0 : cfg->timeout_ms;
    n->cfg.wait_replicas = cfg->wait_replicas < 0 ? 0 : cfg->wait_replicas;
    n->cfg.wait_timeout_ms =
        cfg->wait_timeout_ms > 0 ? cfg->wait_timeout_ms : LB_REDIS_WAIT_DEFAULT_MS;
    if (lb_transport_init(&n->t) < 0 || lb_session_init(&n->s, &n->cfg, &n->base.err) < 0) {
        lb_node_free(&n->base);
        return NULL;
    }
    return &n->base;
}

static lb_redis *node_new_like(const lb_redis *r)
{
    /* Calls only read the settings (lb_redis_set_timeout, between calls, aside). */
    return lb_node_new(&NODE(r)->cfg);
}

void lb_node_abandon(lb_redis *r)
{
    lb_transport_abandon(&NODE(r)->t);
}

void lb_node_disconnect(lb_redis *r)
{
    drop(NODE(r));
}

int lb_node_is_connected(const lb_redis *r)
{
    return lb_transport_is_open(&NODE(r)->t);
}

void lb_node_set_timeout(lb_redis *r, int timeout_ms)
{
    NODE(r)->cfg.timeout_ms = timeout_ms;
}

unsigned long lb_node_connect_count(const lb_redis *r) { return NODE(r)->connects; }
unsigned long lb_node_roundtrip_count(const lb_redis *r) { return NODE(r)->s.roundtrips; }
static const lb_redis_config *node_config(const lb_redis *r) { return &NODE(r)->cfg; }

/* -------------------------------------------------------------- connecting */

/* One round trip on the open connection, with b's bounds. */
static lb_redis_status roundtrip(lb_node *n, const lb_redis_batch *b)
{
    lb_redis_status st = lb_session_begin(&n->s, b);
    if (st != LB_REDIS_OK)
        return st;
    return lb_transport_roundtrip(&n->t, &n->s, b->buf, b->len);
}

/* Connect to cfg's host and port, then AUTH and SELECT in one round trip. */
static lb_redis_status connect_once(lb_node *n)
{
    lb_redis_status st = lb_transport_connect(&n->t, &n->cfg, &n->base.err);
    if (st == LB_REDIS_OK)
        st = lb_session_opened(&n->s);
    if (st != LB_REDIS_OK) {
        drop(n);
        return st;
    }
    n->connects++;
    lb_redis_batch *hb = &n->scratch;
    lb_session_handshake(&n->s, hb);
    if (hb->ncmds == 0)
        return LB_REDIS_OK;
    if (hb->failed)
        st = lb_error_set(&n->base.err, LB_REDIS_ERR_NOMEM, "out of memory building the handshake");
    else
        st = roundtrip(n, hb);
    if (st == LB_REDIS_OK)
        st = lb_session_handshake_check(&n->s, n->s.replies);
    if (st != LB_REDIS_OK)
        drop(n);
    return st;
}

/* Sentinel: after the handshake, ROLE must say "master" (the sentinels may
 * name a primary that a failover has just demoted). */
static lb_redis_status check_role(lb_node *n)
{
    lb_redis_batch *b = &n->scratch;
    lb_sentinel_role_request(b);
    lb_redis_status st = b->failed ? LB_REDIS_ERR_NOMEM : roundtrip(n, b);
    if (st != LB_REDIS_OK)
        return st;
    char w[160];
    where(n, w, sizeof w);
    int m = lb_sentinel_role_is_master(n->s.replies[0]);
    if (m < 0)
        return lb_error_set(&n->base.err, LB_REDIS_ERR_PROTOCOL,
                            "protocol error: Redis at %s answered ROLE with something other "
                            "than a role; connection dropped", w);
    if (m == 0)
        return lb_error_set(&n->base.err, LB_REDIS_ERR_CONNECT,
                            "the sentinels named %s as the primary of '%s', but it is not a "
                            "master (a failover in progress?)",
                            w, n->cfg.sentinel_service);
    return LB_REDIS_OK;
}

/* Ask the sentinels (each on a node client of its own) for the primary. */
static lb_redis_status find_primary(lb_node *n, char **host, int *port, char *err, size_t errlen)
{
    lb_sentinel_walk w;
    const lb_redis_config *scfg;
    const lb_redis_batch *req;
    lb_sentinel_walk_init(&w, &n->cfg);
    while (lb_sentinel_walk_next(&w, &scfg, &req)) {
        lb_redis *s = lb_node_new(scfg);
        if (!s) {
            lb_sentinel_walk_answer(&w, LB_REDIS_ERR_NOMEM, "out of memory", NULL);
            break;
        }
        lb_reply **rs = NULL;
        lb_redis_status st = lb_node_exec(s, req, LB_REDIS_RAW_ERRORS, &rs);
        int found = lb_sentinel_walk_answer(&w, st, s->err.text, st == LB_REDIS_OK ? rs[0] : NULL);
        lb_node_free(s);
        if (found)
            break;
    }
    lb_redis_status st = lb_sentinel_walk_result(&w, host, port, err, errlen);
    lb_sentinel_walk_free(&w);
    return st;
}

/* Connect; through the sentinels when the config names a service: ask them,
 * connect to the primary they name, check its ROLE; a few tries, 200 ms apart,
 * while a failover leaves them naming a server that is gone or not a master. */
static lb_redis_status do_connect(lb_node *n)
{
    if (!n->cfg.sentinel_service || n->cfg.unix_path)
        return connect_once(n);
    lb_redis_status st = LB_REDIS_ERR_CONNECT;
    for (int attempt = 0; attempt < 5; attempt++) {
        if (attempt) {
            struct timespec pause = {0, 200 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        char *host = NULL, err[512];
        int port = 0;
        st = find_primary(n, &host, &port, err, sizeof err);
        if (st != LB_REDIS_OK)
            return lb_error_set(&n->base.err, st, "%s", err);
        free(n->cfg.host);
        n->cfg.host = host;
        n->cfg.port = port;
        st = connect_once(n);
        if (st == LB_REDIS_OK) {
            st = check_role(n);
            if (st == LB_REDIS_OK)
                return st;
            drop(n);
        }
        if (st != LB_REDIS_ERR_CONNECT)
            return st;
    }
    return st;
}

/* Make sure this process has an open connection.  *fresh = 1 when it was
 * opened by this call. */
static lb_redis_status ensure_connected(lb_node *n, int *fresh)
{
    *fresh = 0;
    if (lb_transport_inherited(&n->t))
        drop(n); /* inherited over fork(): close our copy of the fd, send nothing */
    if (lb_transport_is_open(&n->t))
        return LB_REDIS_OK;
    *fresh = 1;
    return do_connect(n);
}

lb_redis_status lb_node_connect(lb_redis *r)
{
    int fresh;
    return ensure_connected(NODE(r), &fresh);
}

/* -------------------------------------------------------------------- exec */

/* A kept connection with input pending before anything is sent is out of
 * step: it is dropped unread.  With KEPT_CONN the caller resends (after its
 * own checks): IO, stale. */
static lb_redis_status drop_if_out_of_step(lb_node *n, int flags)
{
    if (!lb_transport_is_open(&n->t) || !lb_transport_pending(&n->t, &n->s))
        return LB_REDIS_OK;
    drop(n); /* out of step: never read a reply meant for another command */
    if (!(flags & LB_REDIS_KEPT_CONN))
        return LB_REDIS_OK;
    n->base.err.stale = 1;
    char w[160];
    where(n, w, sizeof w);
    return lb_error_set(&n->base.err, LB_REDIS_ERR_IO,
                        "the connection to Redis at %s had unexpected input pending (a late "
                        "reply?) and was discarded",
                        w);
}

/* The round trip, with the retries: a stale connection once (idempotent
 * batches), a demoted primary's -READONLY (sentinel) twice. */
static lb_redis_status send_batch(lb_node *n, const lb_redis_batch *b, int flags)
{
    lb_redis_status st;
    for (int attempt = 0;; attempt++) {
        int fresh;
        st = ensure_connected(n, &fresh);
        if (st != LB_REDIS_OK)
            return st;
        st = roundtrip(n, b);
        if (st == LB_REDIS_OK && n->cfg.sentinel_service && lb_session_demoted(n->s.replies, b->ncmds)) {
            /* A primary that a failover demoted refuses writes (-READONLY): this
             * connection must go, so that the next one asks the sentinels.  The
             * writes were refused, not done: an idempotent batch is sent again. */
            drop(n);
            if ((flags & LB_REDIS_IDEMPOTENT) && attempt < 2)
                continue;
            if (flags & LB_REDIS_KEPT_CONN) {
                /* The caller resends on a new connection itself, after its own
                 * checks (RedisFilter's meta key), as for a stale connection. */
                n->base.err.stale = 1;
                char w[160];
                where(n, w, sizeof w);
                return lb_error_set(&n->base.err, LB_REDIS_ERR_IO,
                                    "Redis at %s is no longer the primary of '%s' (READONLY): "
                                    "connection dropped",
                                    w, n->cfg.sentinel_service);
            }
            return LB_REDIS_OK;
        }
        if (st == LB_REDIS_OK)
            return st;
        size_t received = lb_session_received(&n->s);
        drop(n);
        n->base.err.stale = st == LB_REDIS_ERR_IO && !fresh && received == 0;
        if (n->base.err.stale && (flags & LB_REDIS_IDEMPOTENT) && attempt == 0)
            continue; /* a stale connection: try once more on a new one */
        return st;
    }
}

lb_redis_status lb_node_exec(lb_redis *r, const lb_redis_batch *b, int flags,
                                 lb_reply ***replies)
{
    lb_node *n = NODE(r);
    lb_error_clear(&r->err);
    if (replies)
        *replies = NULL;
    lb_redis_status st = lb_redis_batch_check(b, &r->err);
    if (st != LB_REDIS_OK)
        return st;
    if (b->ncmds == 0) {
        if (replies)
            *replies = n->s.replies;
        return LB_REDIS_OK;
    }
    const size_t nuser = b->ncmds; /* the caller's commands; WAIT may follow them */
    if ((flags & LB_REDIS_WRITE) && (st = lb_session_with_wait(&n->s, b, &b)) != LB_REDIS_OK)
        return st;
    if ((st = drop_if_out_of_step(n, flags)) != LB_REDIS_OK)
        return st;
    if ((st = send_batch(n, b, flags)) != LB_REDIS_OK)
        return st;
    r->err.stale = 0;
    if (replies)
        *replies = n->s.replies;
    st = lb_session_errors(&r->err, n->s.replies, nuser, flags);
    if (st != LB_REDIS_OK || nuser == b->ncmds)
        return st;
    int bad;
    st = lb_session_wait_check(&n->s, nuser, &bad); /* how many replicas have the writes */
    if (bad)
        drop(n);
    return st;
}

static const lb_redis_vt node_vt = {
    .exec = lb_node_exec,
    .connect = lb_node_connect,
    .disconnect = lb_node_disconnect,
    .is_connected = lb_node_is_connected,
    .set_timeout = lb_node_set_timeout,
    .connect_count = lb_node_connect_count,
    .roundtrip_count = lb_node_roundtrip_count,
    .config = node_config,
    .new_like = node_new_like,
    .abandon = lb_node_abandon,
    .free = lb_node_free,
};
