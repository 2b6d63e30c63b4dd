/* op.h: a Redis operation as a step machine, and the one blocking driver
 * that runs it.
 *
 * An operation never does I/O: it says which batch goes out next and checks
 * the replies of each round trip.  lb_op_run carries it on its client with
 * lb_redis_exec (a node's socket or a cluster's nodes, the GIL released);
 * the binding's asyncio transport carries the same machine over a wire
 * client (wire.h, lb_op_wire_next / lb_op_wire_done), asking the session for
 * the handshake of each new connection first.
 *
 *     for (;;) {
 *         next(op, &req, &flags);          req NULL: the operation is over
 *         st = send req (flags), read its replies rs;
 *         st = done(op, st, rs);           a failure ends the operation
 *     } */
#ifndef LB_REDIS_OP_H
#define LB_REDIS_OP_H

#include "client.h"

typedef struct lb_op lb_op;

typedef struct {
    /* The next round trip: OK with *req (and *flags, resp.h's LB_REDIS_*) set,
     * or OK with *req NULL when the operation is over; a failure ends it. */
    lb_redis_status (*next)(lb_op *op, const lb_redis_batch **req, int *flags);
    /* The round trip of the last next: st its status (error replies turned
     * into a status unless the flags had LB_REDIS_RAW_ERRORS), rs its replies
     * (NULL when st is a failure of the connection).  OK to go on. */
    lb_redis_status (*done)(lb_op *op, lb_redis_status st, lb_reply **rs);
} lb_op_vt;

struct lb_op {
    const lb_op_vt *vt;
    lb_redis *conn; /* the client: errors, connection facts, the blocking driver's I/O */
    int w_phase;    /* lb_op_wire_*: the request in flight (0 before the first) */
    int w_flags;    /* ... how the operation asked to send it */
};

/* Run op to its end on op->conn, blocking. */
lb_redis_status lb_op_run(lb_op *op);

/* The same machine over a wire client (wire.h) whose transport is outside C:
 * the request to send next (the handshake of a new connection first), NULL
 * when the operation is over; after the transport fed every reply of it,
 * lb_op_wire_done checks them. */
lb_redis_status lb_op_wire_next(lb_op *op, const lb_redis_batch **req);
lb_redis_status lb_op_wire_done(lb_op *op);

/* PTTL key: *ms is the milliseconds left, -1 when the key has no expiry, -2
 * when there is no key.  Any other reply is a protocol error (connection
 * dropped). */
lb_redis_status lb_redis_key_pttl(lb_redis *r, const void *key, size_t keylen, long long *ms);

#endif
