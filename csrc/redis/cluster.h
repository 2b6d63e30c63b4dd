/* cluster.h: the client of a Redis Cluster (client.h's interface), which
 * owns one node client (node.h) per node it learns of.
 *
 * A config that names cluster_nodes (redis+cluster:// URLs) makes a cluster
 * client; its exec
 *   - finds the batch's hash slot (slots.h: CRC16 of its keys, hash tags
 *     honoured; the encoder tracks it as commands are appended): every keyed
 *     command of one batch must fall in one slot (the operations above name
 *     all their keys in one slot, see bitmap.h), else LB_REDIS_ERR_ARG,
 *     nothing sent; a batch of keyless commands goes to any primary;
 *   - sends it to the primary that serves the slot, or with
 *     LB_REDIS_READ_REPLICA to one of its replicas (after READONLY) when the
 *     config asks for replica reads, on that node's client (AUTH, TLS,
 *     timeouts, fork rules as any node's);
 *   - reads the slot map with CLUSTER SHARDS (Redis 7), else CLUSTER SLOTS,
 *     from the nodes it knows, then from the nodes named in the URL (cluster_map.h parses it;
 *     at most LB_CLUSTER_MAP_MAX_BYTES); a map that leaves slots unserved (a node
 *     that has not learned every slot yet) is read from up to 3 more nodes, and the
 *     most complete one is used when none is complete;
 *   - handles the cluster's replies to each command:
 *       -MOVED slot host:port   the map is out of date: it is read again and the
 *                               command sent to host:port;
 *       -ASK slot host:port     a slot being migrated: ASKING, then the command,
 *                               on host:port (once; the map is kept);
 *       -TRYAGAIN, -CLUSTERDOWN the command is sent again after 50, 100, 200 ...
 *                               ms (at most the retry budget, see below);
 *     a command that got any of these was not run, so sending it again is
 *     safe whatever the batch; the other replies of the batch stay as they
 *     came.  At most LB_CLUSTER_MAX_REDIRECTS rounds per call.
 *   - a node that cannot be reached (refused, reset before any reply: a killed
 *     primary whose replica is not yet promoted) makes it read the map again
 *     and try again, with the same backoff, within the retry budget: the
 *     batch was not sent (CONNECT) or, for a batch sent with
 *     LB_REDIS_IDEMPOTENT only, may have run in part (IO / stale).  A timeout
 *     is never retried (a hung node: LB_REDIS_ERR_TIMEOUT after the
 *     operation timeout, as for one server).
 * The retry budget is cluster_retry_ms of the config (0: 5000 ms), counted
 * from the call's first failure.  Connection and round-trip counts are the
 * sums over the nodes, the map reads included.
 *
 * All of this is one sans-I/O step machine, the route (lb_cluster_route_*
 * below): it does no I/O and never sleeps, it hands out hops and takes their
 * results.  A hop is one round trip on one node's client (the batch itself,
 * READONLY, CLUSTER SHARDS/SLOTS, a sub-batch of redirected commands with
 * ASKING); a pause is a hop with no batch: wait that long, then ask for the
 * next.  Two drivers carry the hops: this client's exec (lb_node_exec on the
 * node's socket, nanosleep for a pause), and the client interface's steps
 * (client.h's lb_redis_step_*, which ling_bloom.aio's transport carries
 * through op.c): each hop is then its node's round trip as steps (the nodes'
 * clients are wire clients, lb_cluster_use_wire), a pause a step of its own,
 * an asyncio sleep:
 *
 *     st = lb_cluster_route_begin(r, b, flags);
 *     while (lb_cluster_route_next(r, &hop)) {
 *         if (!hop.b) { wait hop.pause_ms; continue; }
 *         carry hop.b on lb_cluster_node_conn(r, hop.node) with hop.flags;
 *         lb_cluster_route_done(r, st, st == LB_REDIS_OK ? replies : NULL);
 *     }
 *     st = lb_cluster_route_end(r, &replies);
 *
 * A driver that drops a node's connection when its client says it is no
 * longer connected after a hop (lb_redis_is_connected: a refused map drops
 * it) stays in step with the machine. */
#ifndef LB_REDIS_CLUSTER_H
#define LB_REDIS_CLUSTER_H

#include "client.h"

#define LB_CLUSTER_MAX_REDIRECTS 8
#define LB_CLUSTER_DEFAULT_RETRY_MS 5000

/* A cluster client for cfg (cfg->cluster_nodes: the nodes named in the URL).  NULL when out of
 * memory. */
lb_redis *lb_cluster_new(const lb_redis_config *cfg);
/* Times the slot map was read (r a cluster client). */
unsigned long lb_cluster_map_reads(const lb_redis *r);
/* Nodes dropped so far (see lb_cluster_node_conn): the wire transport
 * that keeps connections by node index closes the ones of nodes
 * lb_cluster_node_host no longer names when this changes. */
unsigned long lb_cluster_drops(const lb_redis *r);

/* ---------------------------------------------------------------- the route */

/* What the route asks its driver to do next. */
typedef struct {
    int node;                 /* the node to carry the batch: lb_cluster_node_conn(r, node) */
    const lb_redis_batch *b;  /* the batch; NULL for a pause */
    int flags;                /* the node-level exec flags (LB_REDIS_RAW_ERRORS always set) */
    int pause_ms;             /* b NULL: wait this long, then ask for the next hop */
} lb_cluster_hop;

/* Begin a route: the same arguments as lb_redis_exec on the cluster client
 * (checks the batch: ARG for a batch whose keys are in more than one slot,
 * the batch's own append errors; an empty batch ends at once with OK).  A
 * non-OK return means the route is over already (lb_cluster_route_end still
 * gives the status).  b must stay as it is until the route is over.  A route
 * begun while another one runs replaces it. */
lb_redis_status lb_cluster_route_begin(lb_redis *r, const lb_redis_batch *b, int flags);
/* 1: *hop is the next thing to do (a hop with a batch: its result goes to
 * lb_cluster_route_done before the next call; asked again before that, the
 * same hop); 0: the route is over. */
int lb_cluster_route_next(lb_redis *r, lb_cluster_hop *hop);
/* The result of the last hop with a batch: st and rs as lb_node_exec returns
 * them for hop->flags (rs NULL unless st is OK; read before this returns);
 * the node's client (lb_cluster_node_conn) holds the error text, stale flag
 * and counts of a failure.  Ignored when no hop is waiting for its result. */
void lb_cluster_route_done(lb_redis *r, lb_redis_status st, lb_reply **rs);
/* The route's outcome, as lb_redis_exec on the cluster client returns it
 * (status, error text/index on r, *replies valid until the next call on r or
 * on the node that answered).  Called before the route is over, it ends the
 * route with LB_REDIS_ERR_ARG. */
lb_redis_status lb_cluster_route_end(lb_redis *r, lb_reply ***replies);
/* Node i's client (created on first use), NULL when out of memory (or no
 * such node); its address (NULL / 0 for no such node).  The nodes are the
 * ones named in the URL (kept for the client's life), the ones the slot map
 * in use names, and the targets of -MOVED / -ASK replies the map does not
 * name (at most 64 added by one route); when a route begins, a node that
 * neither the URL nor the map in use names is dropped (its client freed, its
 * connection closed; no such node until its index is given to a new one). */
lb_redis *lb_cluster_node_conn(lb_redis *r, int node);
const char *lb_cluster_node_host(const lb_redis *r, int node);
int lb_cluster_node_port(const lb_redis *r, int node);
/* From now on the nodes' connections are carried by the wire transport:
 * node clients are made with lb_wire_new_cfg (wire.h) instead of lb_node_new
 * (existing node clients are freed; call it before the first hop of the
 * asyncio transport).  lb_redis_exec and lb_redis_connect on r then refuse
 * (LB_REDIS_ERR_ARG): r has no socket of its own. */
void lb_cluster_use_wire(lb_redis *r);

#endif
