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
 *     from the nodes it knows, then from the nodes named in the URL (cluster_map.h parses it);
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
 * sums over the nodes, the map reads included. */
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

#endif
