/* redis_sentinel.h: finding the primary of a Sentinel-managed service.
 *
 * A connection whose config names a sentinel_service (redis+sentinel:// URLs)
 * asks the sentinels, in the order given, for the address of the service's
 * primary (SENTINEL get-master-addr-by-name), connects there, and checks with
 * ROLE (sent with the handshake) that the server is a master; a replica, or
 * no answer, makes it ask again (a failover in progress), a few times.  Every
 * new connection asks anew, so after a failover the next connection goes to
 * the new primary; a demoted primary's -READONLY reply drops the connection
 * (redis_conn.c, lb_redis_exec).
 *
 * Protocol (the reply checks) and the walk over the sentinels are here; the
 * sockets are lb_redis connections like any other (plain TCP to the sentinels,
 * each probe bounded by the connect timeout, else the operation timeout, else 5 s). */
#ifndef LB_REDIS_SENTINEL_H
#define LB_REDIS_SENTINEL_H

#include <stddef.h>

#include "redis_conn.h"

#define LB_SENTINEL_DEFAULT_PORT 26379
#define LB_SENTINEL_PROBE_MS 5000

/* Parse "host[:port],host[:port]..." (n bytes) into *out, normalised as
 * "host:port,..." (the port 26379 when left out).  0; -1 with a reason in why
 * (empty entry, bad port, brackets); -2 out of memory. */
int lb_sentinel_parse_list(const char *s, size_t n, char **out, char *why, size_t whylen);

/* The reply to SENTINEL get-master-addr-by-name: 1 with host and port, 0 for
 * nil (the sentinel does not know the service), -1 for anything else (not an
 * array of two bulk strings, a port outside 1..65535, a host too long). */
int lb_sentinel_addr_reply(const lb_reply *x, char *host, size_t hostlen, int *port);

/* The reply to ROLE: 1 master, 0 another role, -1 not a ROLE reply. */
int lb_sentinel_role_is_master(const lb_reply *x);

/* Ask the sentinels of cfg for the primary of cfg->sentinel_service.  LB_REDIS_OK
 * with *host (malloc'd) and *port; else the status of the failure with a message
 * in err: LB_REDIS_ERR_CONNECT (no sentinel reachable, or none knows the
 * service), LB_REDIS_ERR_TIMEOUT (the last one failed by timing out),
 * LB_REDIS_ERR_PROTOCOL (a sentinel answered something that is no address, and
 * none answered one), LB_REDIS_ERR_NOMEM. */
lb_redis_status lb_sentinel_find_primary(const lb_redis_config *cfg, char **host, int *port,
                                         char *err, size_t errlen);

#endif
