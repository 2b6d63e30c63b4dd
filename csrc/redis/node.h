/* node.h: the client of one Redis server (client.h's interface): the
 * connection machine (conn.h: its rules) driven over the blocking transport
 * (transport.h), connected lazily, again after a fork, and through the
 * sentinels (sentinel.h) when the config names a service.  Its exec pipelines
 * a batch in one round trip, adds WAIT after writes (wait_replicas), drops a
 * connection found out of step (input pending before a batch), and sends an
 * idempotent batch once more when a kept connection turns out dead.
 *
 * Fork: the node remembers the pid that opened its socket.  When it is used
 * in another process (a forked child), the inherited socket is closed
 * without sending anything on it and a new connection is opened. */
#ifndef LB_REDIS_NODE_H
#define LB_REDIS_NODE_H

#include "client.h"

typedef struct lb_node lb_node;

/* A node client for cfg (cfg->cluster_nodes is ignored).  NULL when out of
 * memory. */
lb_redis *lb_node_new(const lb_redis_config *cfg);

/* The calls of client.h on a node client (what a cluster client uses on the
 * nodes it owns). */
lb_redis_status lb_node_exec(lb_redis *r, const lb_redis_batch *b, int flags, lb_reply ***replies);
lb_redis_status lb_node_connect(lb_redis *r);
void lb_node_disconnect(lb_redis *r);
int lb_node_is_connected(const lb_redis *r);
void lb_node_set_timeout(lb_redis *r, int timeout_ms);
unsigned long lb_node_connect_count(const lb_redis *r);
unsigned long lb_node_roundtrip_count(const lb_redis *r);
void lb_node_abandon(lb_redis *r);
void lb_node_free(lb_redis *r);

#endif
