/* factory.h: which client a configuration gets.  Apart from the client
 * interface (client.h), so the interface knows none of its implementations:
 * node.c and cluster.c include client.h, and only this file includes them. */
#ifndef LB_REDIS_FACTORY_H
#define LB_REDIS_FACTORY_H

#include "client.h"
#include "config.h"

/* A client for cfg: a cluster client when cfg->cluster_nodes is set, else a
 * node client (connects lazily on first use).  NULL when out of memory. */
lb_redis *lb_redis_new(const lb_redis_config *cfg);

#endif
