/* op.c: see op.h. */
#include "op.h"

#include <limits.h>

#include <string.h>

#include "reply.h"

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

lb_redis *lb_op_wire_client(lb_redis *conn, int node)
{
    return lb_redis_step_client(conn, node);
}

static int op_over(lb_op *op, lb_redis_status st)
{
    op->st = st;
    op->state = LB_OP_OVER;
    return 0;
}

int lb_op_wire_step(lb_op *op, lb_wire_step *s)
{
    lb_redis *c = op->conn;
    memset(s, 0, sizeof *s);
    for (;;) {
        lb_redis_status st;
        lb_reply **rs = NULL;
        if (op->state == LB_OP_RT) {
            if (lb_redis_step_next(c, s))
                return 1;
            st = lb_redis_step_end(c, &rs);
        } else if (op->state == 0) {
            const lb_redis_batch *req = NULL;
            int flags = 0;
            st = op->vt->next(op, &req, &flags);
            if (st != LB_REDIS_OK || !req)
                return op_over(op, st);
            if (req->ncmds != 0) {
                lb_redis_step_begin(c, req, flags); /* a failure ends the round trip at once */
                op->state = LB_OP_RT;
                continue;
            } /* else as lb_redis_exec: answered at once, nothing sent */
        } else {
            return 0;
        }
        op->state = 0;
        st = op->vt->done(op, st, rs);
        if (st != LB_REDIS_OK)
            return op_over(op, st);
    }
}

void lb_op_wire_connected(lb_op *op, lb_redis_status st, const char *text)
{
    if (op->state == LB_OP_RT)
        lb_redis_step_connected(op->conn, st, text);
}

lb_redis_status lb_op_wire_feed(lb_op *op, const void *data, size_t len, int *complete)
{
    *complete = 0;
    if (op->state != LB_OP_RT)
        return lb_redis_set_error(op->conn, LB_REDIS_ERR_PROTOCOL,
                                  "protocol error: a reply with no round trip out");
    return lb_redis_step_feed(op->conn, data, len, complete);
}

void lb_op_wire_sent(lb_op *op, lb_redis_status st, const char *text)
{
    if (op->state == LB_OP_RT)
        lb_redis_step_sent(op->conn, st, text);
}

int lb_op_wire_step_open(const lb_op *op)
{
    return op->state == LB_OP_RT && lb_redis_step_open(op->conn);
}

lb_redis_status lb_op_wire_status(const lb_op *op)
{
    return op->state == LB_OP_OVER ? op->st : LB_REDIS_ERR_ARG;
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
    pttl_op p = {{&pttl_vt, r, 0, LB_REDIS_OK}, {0}, 0, 0};
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
