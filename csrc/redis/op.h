/* op.h: a Redis operation as a step machine, and the one blocking driver
 * that runs it.
 *
 * An operation never does I/O: it says which batch goes out next and checks
 * the replies of each round trip.  lb_op_run carries it on its client with
 * lb_redis_exec (a node's socket or a cluster's nodes, the GIL released);
 * the binding's asyncio transport carries the same machine with
 * lb_op_wire_step and the calls after it: each request of the operation goes
 * to the client's round trip as steps (client.h's lb_redis_step_*: a wire
 * client's connection machine, conn.h, or a Redis Cluster's route over its
 * nodes' machines, cluster.h).  So every rule is written once, whichever
 * transport carries the bytes, and this file asks no client what it is.
 *
 *     for (;;) {
 *         next(op, &req, &flags);          req NULL: the operation is over
 *         st = send req (flags), read its replies rs;
 *         st = done(op, st, rs);           a failure ends the operation
 *     } */
#ifndef LB_REDIS_OP_H
#define LB_REDIS_OP_H

#include "client.h"
#include "wire.h" /* lb_wire_step: the binding's name for the steps */

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
    lb_redis *conn;     /* the client: errors, connection facts, its round trips */
    int state;          /* lb_op_wire_*: 0 before the first step, LB_OP_RT, LB_OP_OVER */
    lb_redis_status st; /* the outcome, once over */
};

enum { LB_OP_RT = 1, LB_OP_OVER };

/* Run op to its end on op->conn, blocking. */
lb_redis_status lb_op_run(lb_op *op);

/* The same machine over the client interface's steps: the wire transport's
 * (op->conn a wire client, or a cluster client whose nodes are:
 * lb_cluster_use_wire), and the blocking driver's of many at once (lanes.h:
 * a sharded filter's shards, whose clients give only WAIT and PAUSE steps).  Steps as wire.h's,
 * s->node naming the connection (a cluster's node index, 0 for one server;
 * with s->probe, that node's one-off connection to a sentinel):
 *
 *     while (lb_op_wire_step(op, &s)) {
 *         CONNECT: connect, lb_op_wire_connected(op, st, text)
 *         SEND:    write, lb_op_wire_feed(op, ...) until complete, lb_op_wire_sent(op, st, text)
 *         PAUSE:   wait
 *         after each: close the connection of s when lb_op_wire_step_open(op) is 0
 *     }
 *     st = lb_op_wire_status(op);   the operation's outcome, error text on op->conn */
int lb_op_wire_step(lb_op *op, lb_wire_step *s);
void lb_op_wire_connected(lb_op *op, lb_redis_status st, const char *text);
lb_redis_status lb_op_wire_feed(lb_op *op, const void *data, size_t len, int *complete);
void lb_op_wire_sent(lb_op *op, lb_redis_status st, const char *text);
lb_redis_status lb_op_wire_status(const lb_op *op);
/* 1 when the connection of the last step is still open (0: C dropped it). */
int lb_op_wire_step_open(const lb_op *op);

/* The wire client of node (a cluster's node index, 0 for one server) of a
 * client carried by the wire transport; NULL when there is none (yet).  For the
 * transport's lb_wire_is_open, lb_wire_closed, lb_wire_out_of_step.
 * (lb_redis_step_client.) */
lb_redis *lb_op_wire_client(lb_redis *conn, int node);

/* PTTL key: *ms is the milliseconds left, -1 when the key has no expiry, -2
 * when there is no key.  Any other reply is a protocol error (connection
 * dropped). */
lb_redis_status lb_redis_key_pttl(lb_redis *r, const void *key, size_t keylen, long long *ms);

#endif
