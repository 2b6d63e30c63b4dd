/* op.c: see op.h. */
#include "op.h"

#include <limits.h>

#include <string.h>

#include "cluster.h"
#include "reply.h"
#include "wire.h"

lb_redis_status lb_op_run(lb_op *op)
{
    for (;;) {
        const lb_redis_batch *req = NULL;
        int flags = 0;
        lb_redis_status st = op->vt->next(op, &req, &flags);
        if (st != LB_REDIS_OK || !req)
            return st;
        lb_reply **rs = NULL;
        st = lb_redis_exec(op->conn, req, flags, &rs);
        st = op->vt->done(op, st, rs);
        if (st != LB_REDIS_OK)
            return st;
    }
}

/* ------------------------------------------------------------------ wire */

enum { W_NONE = 0, W_NODE, W_ROUTE, W_HOP, W_OVER };

static int is_cluster(const lb_redis *conn)
{
    return !lb_wire_is(conn) && lb_redis_get_config(conn)->cluster_nodes != NULL;
}

lb_redis *lb_op_wire_client(lb_redis *conn, int node)
{
    if (lb_wire_is(conn))
        return node == 0 ? conn : NULL;
    if (is_cluster(conn) && node >= 0)
        return lb_cluster_node_conn(conn, node);
    return NULL;
}

static int op_over(lb_op *op, lb_redis_status st)
{
    op->w_st = st;
    op->w_phase = W_OVER;
    op->w_node = NULL;
    return 0;
}

int lb_op_wire_step(lb_op *op, lb_wire_step *s)
{
    lb_redis *c = op->conn;
    memset(s, 0, sizeof *s);
    for (;;) {
        lb_redis_status st;
        switch (op->w_phase) {
        case W_NONE: {
            const lb_redis_batch *req = NULL;
            int flags = 0;
            st = op->vt->next(op, &req, &flags);
            if (st != LB_REDIS_OK || !req)
                return op_over(op, st);
            if (req->ncmds == 0) { /* as lb_redis_exec: answered at once, nothing sent */
                st = op->vt->done(op, LB_REDIS_OK, NULL);
                if (st != LB_REDIS_OK)
                    return op_over(op, st);
                continue;
            }
            if (is_cluster(c)) {
                lb_cluster_route_begin(c, req, flags); /* a failure ends the route at once */
                op->w_phase = W_ROUTE;
            } else if (lb_wire_is(c)) {
                lb_wire_exec_begin(c, req, flags);
                op->w_node = c;
                op->w_node_id = 0;
                op->w_phase = W_NODE;
            } else {
                return op_over(op, lb_redis_set_error(c, LB_REDIS_ERR_ARG,
                                                      "the connection is not carried by an "
                                                      "outside transport"));
            }
            continue;
        }
        case W_ROUTE: {
            lb_cluster_hop h;
            if (!lb_cluster_route_next(c, &h)) {
                lb_reply **rs = NULL;
                st = lb_cluster_route_end(c, &rs);
                st = op->vt->done(op, st, rs);
                if (st != LB_REDIS_OK)
                    return op_over(op, st);
                op->w_phase = W_NONE;
                continue;
            }
            if (!h.b) {
                s->what = LB_WIRE_PAUSE;
                s->pause_ms = h.pause_ms;
                return 1;
            }
            lb_redis *n = lb_cluster_node_conn(c, h.node);
            if (!n || !lb_wire_is(n)) {
                lb_redis_set_error(c, LB_REDIS_ERR_NOMEM, "out of memory for a cluster node");
                lb_cluster_route_done(c, LB_REDIS_ERR_NOMEM, NULL);
                continue;
            }
            lb_wire_exec_begin(n, h.b, h.flags);
            op->w_node = n;
            op->w_node_id = h.node;
            op->w_phase = W_HOP;
            continue;
        }
        case W_NODE:
        case W_HOP: {
            lb_redis *n = op->w_node;
            if (lb_wire_exec_next(n, s)) {
                s->node = op->w_node_id;
                op->w_probe = s->probe;
                return 1;
            }
            lb_reply **rs = NULL;
            st = lb_wire_exec_end(n, &rs);
            if (op->w_phase == W_HOP) {
                lb_cluster_route_done(c, st, st == LB_REDIS_OK ? rs : NULL);
                op->w_phase = W_ROUTE;
                continue;
            }
            st = op->vt->done(op, st, rs);
            if (st != LB_REDIS_OK)
                return op_over(op, st);
            op->w_phase = W_NONE;
            continue;
        }
        default:
            return 0;
        }
    }
}

void lb_op_wire_connected(lb_op *op, lb_redis_status st, const char *text)
{
    if (op->w_node)
        lb_wire_exec_connected(op->w_node, st, text);
}

lb_redis_status lb_op_wire_feed(lb_op *op, const void *data, size_t len, int *complete)
{
    *complete = 0;
    if (!op->w_node)
        return lb_redis_set_error(op->conn, LB_REDIS_ERR_PROTOCOL,
                                  "protocol error: input nobody asked for");
    lb_redis_status st = lb_wire_exec_feed(op->w_node, data, len, complete);
    if (st != LB_REDIS_OK && op->w_node != op->conn)
        lb_redis_take_error(op->conn, op->w_node); /* the text for the exception raised now */
    return st;
}

void lb_op_wire_sent(lb_op *op, lb_redis_status st, const char *text)
{
    if (op->w_node)
        lb_wire_exec_sent(op->w_node, st, text);
}

int lb_op_wire_step_open(const lb_op *op)
{
    return op->w_node && lb_wire_is_open(op->w_node, op->w_probe);
}

lb_redis_status lb_op_wire_status(const lb_op *op)
{
    return op->w_phase == W_OVER ? op->w_st : LB_REDIS_ERR_ARG;
}

/* ------------------------------------------------------------------ PTTL */

typedef struct {
    lb_op op;
    lb_redis_batch b;
    int sent;
    long long ms;
} pttl_op;

static lb_redis_status pttl_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    pttl_op *p = (pttl_op *)op;
    if (!p->sent) {
        p->sent = 1;
        *req = &p->b;
        *flags = LB_REDIS_IDEMPOTENT;
    }
    return LB_REDIS_OK;
}

static lb_redis_status pttl_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    pttl_op *p = (pttl_op *)op;
    if (st != LB_REDIS_OK)
        return st;
    /* An integer: milliseconds left, -1 (no expiry) or -2 (no key). */
    if (!lb_reply_int_in(rs[0], -2, LLONG_MAX)) {
        lb_redis_disconnect(op->conn);
        return lb_redis_set_error(op->conn, LB_REDIS_ERR_PROTOCOL,
                                  "protocol error: a reply to PTTL that does not fit the command "
                                  "sent (type, length or value); connection dropped");
    }
    p->ms = rs[0]->integer;
    return LB_REDIS_OK;
}

static const lb_op_vt pttl_vt = {pttl_next, pttl_done};

lb_redis_status lb_redis_key_pttl(lb_redis *r, const void *key, size_t keylen, long long *ms)
{
    pttl_op p = {{&pttl_vt, r, 0, NULL, 0, 0, LB_REDIS_OK}, {0}, 0, 0};
    lb_redis_batch_init(&p.b);
    lb_redis_batch_cmd(&p.b, 2);
    lb_redis_batch_arg(&p.b, "PTTL", 4);
    lb_redis_batch_arg(&p.b, key, keylen);
    lb_redis_batch_expect_elements(&p.b, 0);
    lb_redis_batch_expect_bytes(&p.b, 0);
    lb_redis_status st = lb_op_run(&p.op);
    lb_redis_batch_free(&p.b);
    if (st == LB_REDIS_OK)
        *ms = p.ms;
    return st;
}
