/* maxmemory.h: will a new filter fit in the server's memory?  Pure C, on
 * top of the client (client.h); shared by bitmap.c and redisbloom.c.
 *
 * Before a Redis filter creates its key it asks "INFO memory" (in the same
 * round trip as its other checks) and compares what the new filter needs
 * with what the server still allows:
 *     maxmemory > 0 and used_memory + need > maxmemory  ->  LB_REDIS_ERR_TOOLARGE
 * maxmemory 0 (the default: no limit), a server that refuses INFO (ACL,
 * renamed command) or a reply without the two fields: no check (the static
 * size limit of the caller still applies).  The figure is a snapshot: other
 * clients may fill the server in between; the check catches typos (a
 * capacity of 10**12), it is not a reservation. */
#ifndef LB_REDIS_MEMORY_H
#define LB_REDIS_MEMORY_H

#include "client.h"

/* Append "INFO memory" to b.  Its reply is a text of about 1.5 KB (Redis
 * 7); a batch carrying it bounds its reply bytes (lb_redis_batch_expect_bytes)
 * by at least this much. */
#define LB_MAXMEMORY_INFO_BYTES ((size_t)16 << 10)
void lb_maxmemory_cmd(lb_redis_batch *b);

/* Read maxmemory and used_memory from the reply to "INFO memory": 0, or -1
 * when the reply is an error or lacks either field. */
int lb_maxmemory_parse(const lb_reply *x, uint64_t *maxmemory, uint64_t *used);

/* LB_REDIS_OK when need bytes fit (or nothing can be told), else
 * LB_REDIS_ERR_TOOLARGE with a message naming what (e.g. "the RedisBloom
 * filter at key 'k'"), need, maxmemory and used_memory. */
lb_redis_status lb_maxmemory_check(lb_redis *conn, const lb_reply *info, uint64_t need,
                                      const char *what);

/* Keep in conn->evicting the maxmemory-policy that INFO memory (info) names
 * when the server can evict a filter's keys: a maxmemory is set and the
 * policy is allkeys-*, or volatile-* for a filter with a ttl (has_ttl);
 * conn->evicting = "" otherwise, and when the reply cannot be read. */
void lb_maxmemory_note_policy(lb_redis *conn, const lb_reply *info, int has_ttl);

#endif
