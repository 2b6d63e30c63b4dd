/* wire.h: a wire client: a client (client.h) whose connections are carried
 * by the wire transport (ling_bloom.aio's asyncio; "wire" is the one name of
 * that transport and of its clients in C, Python and the docs): the connection machine
 * (conn.h) that the node client (node.h) drives too, with no I/O.  Its exec
 * refuses (it has no socket of its own); instead its round trip is the
 * client interface's step machine (client.h: lb_redis_step_begin, next,
 * connected, feed, sent, end), the same round trip a node client's exec
 * makes, with conn.h's rules: the handshake, the sentinels (each asked on a
 * one-off connection, step.probe = 1: the transport closes it when
 * lb_wire_is_open(r, 1) says so), ROLE, WAIT, the resends after a stale
 * connection or a demoted primary, a connection found out of step
 * (lb_wire_out_of_step) never used again.  A failure of a round trip drops
 * the connection (lb_wire_is_open is then 0: the transport closes its
 * socket); an error reply does not.  A CONNECT failure reported without a
 * text reads "cannot connect".
 *
 * lb_redis_is_connected tells whether the transport's connection is open
 * (and was opened in this process); lb_redis_connect_count counts the
 * connections opened. */
#ifndef LB_REDIS_WIRE_H
#define LB_REDIS_WIRE_H

#include "client.h"

/* A wire client with from's settings, its counts going on from from's (so
 * that what was checked on from's connections counts as not checked here).
 * NULL when out of memory. */
lb_redis *lb_wire_new_from(const lb_redis *from);
/* A wire client with cfg's settings (cfg->cluster_nodes is ignored), its
 * counts from 0: a cluster client's node (cluster.h).  NULL when out of memory. */
lb_redis *lb_wire_new_cfg(const lb_redis_config *cfg);
/* 1 when r is a wire client. */
int lb_wire_is(const lb_redis *r);

/* The steps, by their wire names (client.h's). */
enum {
    LB_WIRE_OVER = LB_STEP_OVER,
    LB_WIRE_CONNECT = LB_STEP_CONNECT,
    LB_WIRE_SEND = LB_STEP_SEND,
    LB_WIRE_PAUSE = LB_STEP_PAUSE
};
typedef lb_redis_step lb_wire_step;

/* A connection of the transport is open (a CONNECT step's success says so;
 * a transport or a test may too): a new one, whose handshake is due before
 * its first batch. */
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
