/* factory.c: see factory.h. */
#include "factory.h"

#include "cluster.h"
#include "node.h"

lb_redis *lb_redis_new(const lb_redis_config *cfg)
{
    return cfg->cluster_nodes ? lb_cluster_new(cfg) : lb_node_new(cfg);
}
