/* wire.h: a client (client.h) whose connections are carried by a transport
 * outside C (the asyncio one of ling_bloom.aio): the connection machine
 * (conn.h) that the node client (node.h) drives too, with no I/O.  Its exec refuses (it has
 * no socket of its own); instead a round trip is a step machine the
 * transport drives, the same round trip a node client's exec makes:
 *
 *     lb_wire_exec_begin(r, batch, flags)      as lb_redis_exec's arguments
 *     while (lb_wire_exec_next(r, &step)) {
 *         LB_WIRE_CONNECT  connect to step.cfg (host and port or unix path,
 *                          TLS as it says, within its connect timeout), then
 *                          lb_wire_exec_connected(r, status, text)
 *         LB_WIRE_SEND     send step.req on that connection, hand every byte
 *                          that arrives to lb_wire_exec_feed until it says
 *                          complete (no byte for the operation timeout: a
 *                          timeout), then lb_wire_exec_sent(r, status, text)
 *         LB_WIRE_PAUSE    wait step.pause_ms
 *     }
 *     st = lb_wire_exec_end(r, &replies)      as lb_redis_exec's result
 *
 * The rules are conn.h's, the ones lb_node_exec follows: the handshake, the
 * sentinels (each asked on a one-off connection, step.probe = 1: the
 * transport closes it when lb_wire_is_open(r, 1) says so), ROLE, WAIT, the
 * resends after a stale connection or a demoted primary, a connection found
 * out of step (lb_wire_out_of_step) never used again.  A failure of a round
 * trip drops the connection (lb_wire_is_open is then 0: the transport closes
 * its socket); an error reply does not.  A CONNECT failure reported without
 * a text reads "cannot connect".
 *
 * lb_redis_is_connected tells whether the transport's connection is open
 * (and was opened in this process); lb_redis_connect_count counts the
 * connections opened. */
#ifndef LB_REDIS_WIRE_H
#define LB_REDIS_WIRE_H

#include "client.h"
#include "conn.h"

/* A wire client with from's settings, its counts going on from from's (so
 * that what was checked on from's connections counts as not checked here).
 * NULL when out of memory. */
lb_redis *lb_wire_new_from(const lb_redis *from);
/* A wire client with cfg's settings (cfg->cluster_nodes is ignored), its
 * counts from 0: a cluster client's node (cluster.h).  NULL when out of memory. */
lb_redis *lb_wire_new_cfg(const lb_redis_config *cfg);
/* 1 when r is a wire client. */
int lb_wire_is(const lb_redis *r);

/* What the transport does next: the steps of the connection machine (conn.h). */
enum {
    LB_WIRE_OVER = LB_CONN_OVER,
    LB_WIRE_CONNECT = LB_CONN_CONNECT,
    LB_WIRE_SEND = LB_CONN_SEND,
    LB_WIRE_PAUSE = LB_CONN_PAUSE
};
typedef lb_conn_step lb_wire_step;

lb_redis_status lb_wire_exec_begin(lb_redis *r, const lb_redis_batch *b, int flags);
/* 1 with *s the next step; 0 when the round trip is over. */
int lb_wire_exec_next(lb_redis *r, lb_wire_step *s);
/* The outcome of a CONNECT step: OK, or CONNECT / TIMEOUT with the text. */
void lb_wire_exec_connected(lb_redis *r, lb_redis_status st, const char *text);
/* Reply bytes of a SEND step: *complete = 1 once every reply is in.  A
 * failure (a reply that does not fit: PROTOCOL) means the stream is out of
 * step: report it with lb_wire_exec_sent(r, st, NULL). */
lb_redis_status lb_wire_exec_feed(lb_redis *r, const void *data, size_t len, int *complete);
/* The outcome of a SEND step: OK (every reply fed), IO or TIMEOUT with the
 * text, or the feed's failure with text NULL. */
void lb_wire_exec_sent(lb_redis *r, lb_redis_status st, const char *text);
/* The round trip's status and replies, as lb_redis_exec gives them. */
lb_redis_status lb_wire_exec_end(lb_redis *r, lb_reply ***replies);

/* A connection of the transport is open (lb_wire_exec_connected says so for
 * a CONNECT step; a transport or a test may too): a new one, whose handshake
 * is due before its first batch. */
lb_redis_status lb_wire_opened(lb_redis *r);
/* 1 when the connection (probe: the sentinel's) is open in this process. */
int lb_wire_is_open(const lb_redis *r, int probe);
/* The transport closed the connection between round trips: the server
 * closed it (EOF), or input nobody asked for arrived on it (out of step: a
 * batch that counted on that connection, LB_REDIS_KEPT_CONN, then fails as
 * stale without sending, as lb_node_exec does). */
void lb_wire_closed(lb_redis *r);
void lb_wire_out_of_step(lb_redis *r);

#endif
