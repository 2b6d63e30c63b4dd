/* wire.h: a client (client.h) whose connection is carried by a transport
 * outside C (the asyncio one of ling_bloom.aio): a session (session.h) and
 * nothing else.  The transport connects, writes the requests it is given,
 * feeds every byte that arrives, and closes; the same handshake, reader,
 * bounds and error-reply rules as a node client's apply.  Its exec refuses
 * (it has no socket of its own).  One request at a time:
 *
 *     lb_wire_opened(r)              the transport connected
 *     lb_wire_handshake_due(r, &hb)  1: send AUTH/SELECT first (*hb), then
 *                                    lb_wire_handshake_done(r) checks them
 *                                    (0: none due, -1: out of memory)
 *     lb_wire_begin(r, &batch)       then send batch.buf[0..len)
 *     lb_wire_feed(r, bytes, n, &c)  with what arrives, until c == 1
 *     lb_wire_replies(r, flags, &rs) the replies, error replies turned into a
 *                                    status as lb_redis_exec does
 *     lb_wire_closed(r)              the transport dropped the connection
 *
 * Any failure of begin or feed (a protocol error, a reply past the bounds,
 * input nobody asked for) means the stream is out of step: the caller drops
 * the connection.  lb_redis_is_connected tells whether the transport's
 * connection is open (and was opened in this process); lb_redis_connect_count
 * counts lb_wire_opened calls. */
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

lb_redis_status lb_wire_opened(lb_redis *r);
void lb_wire_closed(lb_redis *r);
int lb_wire_handshake_due(lb_redis *r, const lb_redis_batch **hb);
lb_redis_status lb_wire_handshake_done(lb_redis *r);
lb_redis_status lb_wire_begin(lb_redis *r, const lb_redis_batch *b);
lb_redis_status lb_wire_feed(lb_redis *r, const void *data, size_t len, int *complete);
lb_redis_status lb_wire_replies(lb_redis *r, int flags, lb_reply ***replies);

#endif
