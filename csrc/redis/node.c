/* node.c: see node.h. */
#define _POSIX_C_SOURCE 200809L
#include "node.h"

#include <stdlib.h>
#include <string.h>

#include "conn.h"
#include "lanes.h"
#include "transport.h"
#include "wire.h"

struct lb_node {
    lb_redis base;
    lb_conn c;        /* the connection's rules (conn.h) */
    lb_transport t;   /* its socket */
    lb_transport pt;  /* the one-off socket to a sentinel (set up on first use) */
    /* the round trip as steps (lanes.h drives them) */
    int empty;          /* an empty batch: answered at once, nothing sent */
    int rt_on;          /* a SEND in progress on rt */
    lb_transport *rt_t; /* its socket */
    lb_session *rt_s;   /* its session */
    lb_transport_rt rt;
    short revents;      /* what the wait saw (lb_redis_step_ready) */
    int poll_errno;
};

#define NODE(r) ((lb_node *)(r))

static const lb_redis_vt node_vt;

/* Close the socket and forget the connection; nothing is sent. */
static void drop(lb_node *n)
{
    lb_transport_close(&n->t);
    lb_conn_closed(&n->c);
}

/* --------------------------------------------------------------- lifecycle */

void lb_node_free(lb_redis *r)
{
    lb_node *n = NODE(r);
    if (!n)
        return;
    lb_transport_fini(&n->t);
    lb_transport_fini(&n->pt);
    lb_conn_fini(&n->c);
    free(n);
}

lb_redis *lb_node_new(const lb_redis_config *cfg)
{
    lb_node *n = calloc(1, sizeof *n);
    if (!n)
        return NULL;
    n->base.vt = &node_vt;
    lb_error_clear(&n->base.err);
    n->t.fd = n->pt.fd = -1;
    if (lb_conn_init(&n->c, cfg, &n->base.err) < 0 || lb_transport_init(&n->t) < 0) {
        lb_node_free(&n->base);
        return NULL;
    }
    lb_redis_config *c = &n->c.cfg;
    lb_redis_config_set(&c->cluster_nodes, NULL);
    c->connect_timeout_ms = cfg->connect_timeout_ms < 0 ? 0 : cfg->connect_timeout_ms;
    c->timeout_ms = cfg->timeout_ms < 0 ? 0 : cfg->timeout_ms;
    c->wait_replicas = cfg->wait_replicas < 0 ? 0 : cfg->wait_replicas;
    c->wait_timeout_ms = cfg->wait_timeout_ms > 0 ? cfg->wait_timeout_ms : LB_REDIS_WAIT_DEFAULT_MS;
    return &n->base;
}

static lb_redis *node_new_like(const lb_redis *r)
{
    /* Calls only read the settings (lb_redis_set_timeout, between calls, aside). */
    return lb_node_new(&NODE(r)->c.cfg);
}

void lb_node_abandon(lb_redis *r)
{
    lb_transport_abandon(&NODE(r)->t);
    lb_transport_abandon(&NODE(r)->pt);
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
    NODE(r)->c.cfg.timeout_ms = timeout_ms;
}

unsigned long lb_node_connect_count(const lb_redis *r) { return NODE(r)->c.connects; }
unsigned long lb_node_roundtrip_count(const lb_redis *r) { return NODE(r)->c.s.roundtrips; }
static const lb_redis_config *node_config(const lb_redis *r) { return &NODE(r)->c.cfg; }

/* ------------------------------------------------ the round trip as steps */

/* Close each socket whose connection the machine dropped (the sentinel's
 * once it answered, too). */
static void sync_sockets(lb_node *n)
{
    if (!lb_conn_is_open(&n->c, 0))
        lb_transport_close(&n->t);
    if (!lb_conn_is_open(&n->c, 1))
        lb_transport_close(&n->pt);
}

static lb_redis_status node_step_begin(lb_redis *r, const lb_redis_batch *b, int flags)
{
    lb_node *n = NODE(r);
    n->rt_on = 0;
    n->empty = 0;
    n->revents = 0;
    n->poll_errno = 0;
    if (b && b->ncmds == 0 && !b->failed && b->args_left == 0) {
        lb_error_clear(&r->err);
        n->empty = 1; /* as a round trip would, without connecting */
        return LB_REDIS_OK;
    }
    /* A kept connection with input pending before anything is sent is out
     * of step: dropped unread (the machine says what that means for b). */
    if (b && lb_transport_is_open(&n->t) && lb_transport_pending(&n->t, &n->c.s)) {
        lb_transport_close(&n->t);
        lb_conn_out_of_step(&n->c);
    }
    return lb_conn_begin(&n->c, b, flags);
}

/* The connection machine's steps: connections made here (blocking, within
 * the connect timeout), a SEND's bytes moved here as far as the socket
 * lets them, and a wait on the socket, or a pause, handed to the driver. */
static int node_step_next(lb_redis *r, lb_redis_step *s)
{
    lb_node *n = NODE(r);
    if (n->empty) {
        memset(s, 0, sizeof *s);
        return 0;
    }
    for (;;) {
        if (n->rt_on) {
            lb_redis_status st;
            short events = 0;
            short rev = n->revents;
            int perr = n->poll_errno;
            n->revents = 0;
            n->poll_errno = 0;
            if (!lb_transport_rt_step(n->rt_t, n->rt_s, &n->rt, rev, perr, &events, &st)) {
                memset(s, 0, sizeof *s);
                s->what = LB_STEP_WAIT;
                s->probe = n->rt_t == &n->pt;
                s->fd = lb_transport_fd(n->rt_t);
                s->events = events;
                s->deadline_ms = n->rt.deadline;
                return 1;
            }
            n->rt_on = 0;
            lb_conn_sent(&n->c, st, NULL);
            sync_sockets(n);
            continue;
        }
        if (!lb_conn_next(&n->c, s)) {
            sync_sockets(n);
            return 0;
        }
        lb_transport *t = s->probe ? &n->pt : &n->t;
        if (s->what == LB_STEP_PAUSE) {
            return 1;
        } else if (s->what == LB_STEP_CONNECT) {
            lb_redis_error *e = lb_conn_error(&n->c, s->probe);
            lb_redis_status st = !t->rbuf && lb_transport_init(t) < 0
                                     ? lb_error_set(e, LB_REDIS_ERR_NOMEM, "out of memory")
                                     : lb_transport_connect(t, s->cfg, e);
            lb_conn_connected(&n->c, st, NULL);
            sync_sockets(n);
        } else {
            n->rt_t = t;
            n->rt_s = lb_conn_session(&n->c, s->probe);
            lb_transport_rt_begin(&n->rt, n->rt_s, s->req->buf, s->req->len);
            n->rt_on = 1;
        }
    }
}

static void node_step_ready(lb_redis *r, short revents, int poll_errno)
{
    NODE(r)->revents = revents;
    NODE(r)->poll_errno = poll_errno;
}

static lb_redis_status node_step_end(lb_redis *r, lb_reply ***replies)
{
    lb_node *n = NODE(r);
    if (n->empty) {
        n->empty = 0;
        if (replies)
            *replies = n->c.s.replies;
        return LB_REDIS_OK;
    }
    lb_reply **rs = NULL;
    lb_redis_status st = lb_conn_end(&n->c, &rs); /* replies may be NULL (connect) */
    if (replies)
        *replies = rs;
    return st;
}

static lb_redis *node_step_client(lb_redis *r, int node)
{
    return node == 0 ? r : NULL;
}

/* ------------------------------------------------------ the blocking driver */

lb_redis_status lb_node_connect(lb_redis *r)
{
    node_step_begin(r, NULL, 0);
    lb_lanes_roundtrip(r);
    return node_step_end(r, NULL);
}

lb_redis_status lb_node_exec(lb_redis *r, const lb_redis_batch *b, int flags,
                                 lb_reply ***replies)
{
    lb_reply **rs = NULL;
    if (replies)
        *replies = NULL;
    node_step_begin(r, b, flags);
    lb_lanes_roundtrip(r);
    lb_redis_status st = node_step_end(r, &rs);
    if (replies)
        *replies = rs;
    return st;
}

static lb_redis *node_to_wire(lb_redis *r) { return lb_wire_new_from(r); }

static const lb_redis_vt node_vt = {
    .to_wire = node_to_wire,
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
    .step_begin = node_step_begin,
    .step_next = node_step_next,
    .step_end = node_step_end,
    .step_client = node_step_client,
    .step_ready = node_step_ready,
};
