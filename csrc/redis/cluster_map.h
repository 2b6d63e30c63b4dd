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

/* The most bytes a slot map's reply may take (CLUSTER SHARDS / SLOTS): far
 * above any real cluster's (16384 single-slot ranges, each with a primary and
 * five replicas, is about 9 MB of CLUSTER SLOTS); a longer reply is a
 * protocol error as it arrives, before it is parsed. */
#define LB_CLUSTER_MAP_MAX_BYTES ((size_t)16 << 20)
/* The most distinct nodes one map may name. */
#define LB_CLUSTER_MAP_MAX_NODES 30000

/* The slot map from a CLUSTER SHARDS (shards = 1) or CLUSTER SLOTS reply, in
 * time linear in the reply's size.  asked_host names the node that answered
 * (an empty or "?" address means that node).  tls: prefer the "tls-port" of
 * CLUSTER SHARDS.  node is called for each node entry (CLUSTER SHARDS: every
 * primary and every online replica, once per shard; CLUSTER SLOTS: every node
 * of every range) and gives its id (>= 0; the same address may come again and
 * should get the same id), or -1 to stop (out of memory, too many nodes);
 * range is called once per range with the ids of its primary (the first
 * online one, else the first; -1: none) and of a replica for reads (the
 * first online one; -1: none), and may return -1 to stop (a slot named
 * twice).  0 when the reply was a map; -1 when it was not, or a callback
 * stopped it (the caller drops it as a protocol error). */
typedef struct {
    int (*node)(void *ctx, const char *host, int port);
    int (*range)(void *ctx, long lo, long hi, int primary, int replica);
} lb_cluster_map_fns;
int lb_cluster_parse_map(const lb_reply *x, int shards, const char *asked_host, int tls,
                         const lb_cluster_map_fns *fns, void *ctx);

#endif
