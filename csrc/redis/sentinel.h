/* sentinel.h: finding the primary of a Sentinel-managed service, as a
 * resolver the connection machine calls (conn.c), with no I/O of its own.
 *
 * A node client whose config names a sentinel_service (redis+sentinel://
 * URLs) asks the sentinels, in the order given, for the address of the
 * service's primary (SENTINEL get-master-addr-by-name), connects there, and
 * checks with ROLE that the server is a master; a replica, or no answer,
 * makes it ask again (a failover in progress), a few times.  Every new
 * connection asks anew, so after a failover the next connection goes to the
 * new primary; a demoted primary's -READONLY reply drops the connection
 * (conn.c).
 *
 * The walk over the sentinels is a step machine the caller drives:
 *
 *     lb_sentinel_walk w;  lb_sentinel_walk_init(&w, cfg);
 *     while (lb_sentinel_walk_next(&w, &scfg, &req)) {
 *         ask the sentinel scfg (plain TCP, each probe bounded by the connect
 *         timeout, else the operation timeout, else 5 s) the request req;
 *         if (lb_sentinel_walk_answer(&w, status, errstr, reply) == 1) break;
 *     }
 *     st = lb_sentinel_walk_result(&w, &host, &port, err, errlen);
 *     lb_sentinel_walk_free(&w); */
#ifndef LB_REDIS_SENTINEL_H
#define LB_REDIS_SENTINEL_H

#include <stddef.h>

#include "config.h"
#include "resp.h"

#define LB_SENTINEL_PROBE_MS 5000


/* The reply to SENTINEL get-master-addr-by-name: 1 with host and port, 0 for
 * nil (the sentinel does not know the service), -1 for anything else (not an
 * array of two bulk strings, a port outside 1..65535, a host too long). */
int lb_sentinel_addr_reply(const lb_reply *x, char *host, size_t hostlen, int *port);

/* The reply to ROLE: 1 master, 0 another role, -1 not a ROLE reply. */
int lb_sentinel_role_is_master(const lb_reply *x);
/* The ROLE request (a master lists its replicas: its bounds allow for them). */
void lb_sentinel_role_request(lb_redis_batch *b);

typedef struct {
    const lb_redis_config *cfg; /* the data node's config (sentinels, service, credentials) */
    const char *p;              /* the next entry of cfg->sentinels */
    char shost[256];            /* the sentinel being asked */
    int sport;
    lb_redis_config scfg;       /* its settings */
    lb_redis_batch req;         /* the question */
    char addr[256];             /* the answer found */
    int port;
    int found, unknown, asked;
    lb_redis_status st, worst;
    char last[512];             /* the last failure's text */
} lb_sentinel_walk;

void lb_sentinel_walk_init(lb_sentinel_walk *w, const lb_redis_config *cfg);
void lb_sentinel_walk_free(lb_sentinel_walk *w);
/* The next sentinel to ask: 1 with its settings and the request, 0 when none
 * is left (or out of memory: see lb_sentinel_walk_result). */
int lb_sentinel_walk_next(lb_sentinel_walk *w, const lb_redis_config **scfg,
                          const lb_redis_batch **req);
/* What it answered: st and errstr of the round trip (sent with
 * LB_REDIS_RAW_ERRORS), its reply when st is OK.  1 found (stop asking), 0
 * unknown or failed (ask the next one). */
int lb_sentinel_walk_answer(lb_sentinel_walk *w, lb_redis_status st, const char *errstr,
                            const lb_reply *reply);
/* LB_REDIS_OK with *host (malloc'd) and *port; else the status of the
 * failure with a message in err: LB_REDIS_ERR_CONNECT (no sentinel
 * reachable, or none knows the service), LB_REDIS_ERR_TIMEOUT (the last one
 * failed by timing out), LB_REDIS_ERR_PROTOCOL (a sentinel answered
 * something that is no address, and none answered one), LB_REDIS_ERR_NOMEM. */
lb_redis_status lb_sentinel_walk_result(lb_sentinel_walk *w, char **host, int *port, char *err,
                                        size_t errlen);

#endif
