/* cluster_map.h: the Redis Cluster's replies, as protocol: the slot map of
 * CLUSTER SHARDS / CLUSTER SLOTS, and the redirections and refusals a node
 * answers a command with.  Pure C, no I/O (cluster.c does the routing). */
#ifndef LB_REDIS_CLUSTER_MAP_H
#define LB_REDIS_CLUSTER_MAP_H

#include <stddef.h>

#include "resp.h"
#include "slots.h"

/* A -MOVED / -ASK reply's text: 1 MOVED, 2 ASK with slot, host (NUL-ended
 * in host[hostlen]) and port; 0 for any other text. */
int lb_cluster_redirect(const char *text, size_t len, long *slot, char *host, size_t hostlen,
                        int *port);

/* A reply that says the command was not run here, for the cluster's reasons
 * (MOVED, ASK, TRYAGAIN, CLUSTERDOWN). */
int lb_cluster_refusal(const lb_reply *x);

/* The slot map from a CLUSTER SHARDS (shards = 1) or CLUSTER SLOTS reply:
 * for each range, the primary's and replicas' addresses.  asked_host names
 * the node that answered (an empty or "?" address means that node).  tls:
 * prefer the "tls-port" of CLUSTER SHARDS.  The callback gets each range
 * once per node, primary first (replica = 0), and may return -1 to stop
 * (out of memory).  0 when the reply was a map; -1 when it was not (the
 * caller drops it as a protocol error). */
typedef int (*lb_cluster_range_fn)(void *ctx, long lo, long hi, const char *host, int port,
                                   int replica);
int lb_cluster_parse_map(const lb_reply *x, int shards, const char *asked_host, int tls,
                         lb_cluster_range_fn fn, void *ctx);

#endif
