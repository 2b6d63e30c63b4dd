/* redis_cluster.h: one lb_redis that speaks to a Redis Cluster.
 *
 * A connection whose config names cluster_nodes (redis+cluster:// URLs) is a
 * cluster connection: lb_redis_exec hands its batch to lb_cluster_exec, which
 *   - finds the batch's hash slot (CRC16 of its keys, hash tags honoured): the
 *     key of a command is its first argument after the name (the second for
 *     BITOP, OBJECT, MEMORY), except for the keyless commands (INFO, PING,
 *     ROLE, WAIT, ...; see key_index in redis_conn.c); every keyed command of
 *     one batch must fall in one slot (the layers above name all their keys in
 *     one slot, see redis_bitmap.h), else LB_REDIS_ERR_ARG, nothing sent;
 *     a batch of keyless commands goes to any primary;
 *   - sends it to the primary that serves the slot, or with
 *     LB_REDIS_READ_REPLICA to one of its replicas (after READONLY) when the
 *     config asks for replica reads, on a connection of its own per node
 *     (each one an ordinary lb_redis: AUTH, TLS, timeouts, fork rules);
 *   - reads the slot map with CLUSTER SHARDS (Redis 7), else CLUSTER SLOTS,
 *     from the nodes it knows, then from the seeds;
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
 * from the call's first failure.
 *
 * Protocol (slots, redirect replies, the map) is here; the sockets are the
 * per-node lb_redis connections.  Not thread-safe (one thread at a time, as
 * any lb_redis). */
#ifndef LB_REDIS_CLUSTER_H
#define LB_REDIS_CLUSTER_H

#include <stddef.h>
#include <stdint.h>

#include "redis_conn.h"

#define LB_CLUSTER_SLOTS 16384
#define LB_CLUSTER_MAX_REDIRECTS 8
#define LB_CLUSTER_DEFAULT_RETRY_MS 5000

/* The hash slot of a key: CRC16 (XMODEM) of its hash tag when it has one
 * (the bytes between the first '{' and the next '}', if not empty), else of
 * the whole key, modulo 16384. */
unsigned lb_cluster_key_slot(const void *key, size_t len);
uint16_t lb_cluster_crc16(const void *data, size_t len);

/* A -MOVED / -ASK reply's text: 1 MOVED, 2 ASK with slot, host (NUL-ended
 * in host[hostlen]) and port; 0 for any other text. */
int lb_cluster_redirect(const char *text, size_t len, long *slot, char *host, size_t hostlen,
                        int *port);

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

/* The cluster state of one lb_redis (redis_conn.c creates and frees it). */
typedef struct lb_cluster lb_cluster;
lb_cluster *lb_cluster_new(const lb_redis_config *cfg);
void lb_cluster_free(lb_cluster *c);
/* For a forked child whose parent was inside a call (see lb_redis_abandon):
 * close this process's copies of the node sockets, free nothing. */
void lb_cluster_abandon(lb_cluster *c);
void lb_cluster_disconnect(lb_cluster *c);
int lb_cluster_is_connected(const lb_cluster *c);
void lb_cluster_set_timeout(lb_cluster *c, int timeout_ms);
/* Connections opened and round trips started on every node so far, the map
 * reads included. */
unsigned long lb_cluster_connect_count(const lb_cluster *c);
unsigned long lb_cluster_roundtrip_count(const lb_cluster *c);
/* Times the slot map was read. */
unsigned long lb_cluster_map_reads(const lb_cluster *c);
/* Connect to the node that serves slot 0's primary (reading the map): for
 * lb_redis_connect. */
lb_redis_status lb_cluster_connect(lb_cluster *c, lb_redis *r);

/* lb_redis_exec of a cluster connection r: see above.  Statuses and texts
 * are set on r; *replies valid until the next call on r. */
lb_redis_status lb_cluster_exec(lb_cluster *c, lb_redis *r, const lb_redis_batch *b, int flags,
                                lb_reply ***replies);

#endif
