/* op.c: see op.h. */
#include "op.h"

#include <limits.h>

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

enum { W_NONE = 0, W_HS, W_OP, W_OVER };

lb_redis_status lb_op_wire_next(lb_op *op, const lb_redis_batch **req)
{
    lb_redis *c = op->conn;
    *req = NULL;
    if (op->w_phase == W_OVER)
        return LB_REDIS_OK;
    if (op->w_phase != W_NONE)
        return lb_redis_set_error(c, LB_REDIS_ERR_ARG, "no wire operation is waiting to send");
    if (!lb_redis_is_connected(c))
        return lb_redis_set_error(c, LB_REDIS_ERR_IO, "no connection is open on the transport");
    lb_redis_status st = LB_REDIS_OK;
    int due = lb_wire_handshake_due(c, req);
    if (due < 0)
        return lb_redis_set_error(c, LB_REDIS_ERR_NOMEM, "out of memory building the handshake");
    if (due) {
        op->w_phase = W_HS; /* a new connection's AUTH / SELECT first */
    } else {
        st = op->vt->next(op, req, &op->w_flags);
        op->w_phase = st == LB_REDIS_OK && *req ? W_OP : W_OVER;
        if (op->w_phase == W_OVER)
            return st;
    }
    st = lb_wire_begin(c, *req);
    if (st != LB_REDIS_OK) {
        *req = NULL;
        op->w_phase = W_OVER;
    }
    return st;
}

lb_redis_status lb_op_wire_done(lb_op *op)
{
    lb_redis *c = op->conn;
    lb_reply **rs;
    lb_redis_status st;
    if (op->w_phase == W_HS) {
        st = lb_wire_handshake_done(c);
    } else if (op->w_phase == W_OP) {
        st = lb_wire_replies(c, op->w_flags & LB_REDIS_RAW_ERRORS, &rs);
        st = op->vt->done(op, st, rs);
    } else {
        return lb_redis_set_error(c, LB_REDIS_ERR_ARG, "no wire round trip is in progress");
    }
    op->w_phase = st == LB_REDIS_OK ? W_NONE : W_OVER;
    return st;
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
    pttl_op p = {{&pttl_vt, r, 0, 0}, {0}, 0, 0};
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
