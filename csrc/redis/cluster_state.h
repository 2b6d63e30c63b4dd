/* cluster_state.h: what the two parts of the Redis Cluster client share, and
 * no other module sees: cluster.c (the client: its nodes, the interface's
 * calls, the route's blocking driver and its steps for asyncio) and
 * cluster_route.c (the route: the sans-I/O step machine of cluster.h's
 * lb_cluster_route_*).  The state, and the few calls each makes into the
 * other. */
#ifndef LB_REDIS_CLUSTER_STATE_H
#define LB_REDIS_CLUSTER_STATE_H

#include <stdint.h>

#include "cluster.h"
#include "slots.h"

typedef struct lb_cluster lb_cluster;
#define CLUSTER(r) ((lb_cluster *)(r))
#define CCLUSTER(r) ((const lb_cluster *)(r))

/* ------------------------------------------------------------ the state */

typedef struct {
    char host[256];
    int port;
    lb_redis *conn;          /* created on first use */
    unsigned long ro_conn;   /* connect count when READONLY was sent, 0: never */
    unsigned char seed;      /* named in the URL: kept for the client's life */
    unsigned char gone;      /* dropped (see prune): a free index, no address */
} cnode;

/* The most node indexes (int16 in the slot tables), and the most nodes a
 * route's redirects (-MOVED, -ASK) may add that the slot map does not name. */
#define MAX_NODES 32000
#define MAX_REDIRECT_NODES 64
/* A map that leaves slots unserved (a node that has not learned every slot
 * yet): at most this many more nodes are asked for a complete one. */
#define INCOMPLETE_MAP_TRIES 3

typedef struct cblock {
    struct cblock *next;
    size_t used, cap;
    char data[];
} cblock;

/* Where the route is (see the steps below). */
typedef enum {
    R_OVER,         /* no route, or it is over: rt_st */
    R_START,        /* a try begins: the map is read when out of date */
    R_PICK,         /* the map read (map_out): pick the node, READONLY when due */
    R_READONLY,     /* waiting for READONLY's result */
    R_SEND_BATCH,   /* hand out the batch for node cur */
    R_SEND,         /* waiting for the batch's result */
    R_ROUND,        /* a redirect round begins: where each refused command goes */
    R_ROUND_MAP,    /* the round reads the map when out of date */
    R_ROUND_MAPPED, /* the round's map read (map_out): aim what the map places */
    R_REFUSED,      /* hand out the next sub-batch of refused commands, from cursor */
    R_REFUSED_WAIT, /* waiting for a sub-batch's result */
    R_MAP,          /* reading the map: the next node to ask */
    R_MAP_ASK,      /* ask node map_i (CLUSTER SHARDS, or SLOTS: map_shards) */
    R_MAP_WAIT,     /* waiting for the map's reply */
    R_PAUSE         /* hand out a pause of pause_ms, then go on at pause_next */
} route_phase;

struct lb_cluster {
    lb_redis base;
    lb_redis_config cfg;     /* the client's settings, as given */
    lb_redis_config tmpl;    /* settings of every node connection (host, port aside) */
    int retry_ms;
    int replica_reads;
    int wire;                /* node clients are wire clients (lb_cluster_use_wire) */
    cnode *nodes;
    size_t nnodes, cap;      /* indexes in use (gone ones included) */
    int32_t *ht;             /* address -> index + 1 (0: empty); NULL: scan */
    size_t hmask;
    int *freeidx;            /* gone indexes, taken again first */
    size_t nfree;
    unsigned long gone_connects, gone_roundtrips; /* the counts of dropped nodes */
    unsigned long drops;     /* nodes dropped so far */
    int prune_due;           /* a map was read or a redirect added a node since the last prune */
    int route_new;           /* nodes the route's redirects added */
    int16_t cand_primary[LB_CLUSTER_SLOTS]; /* the most complete incomplete map of a read */
    int16_t cand_replica[LB_CLUSTER_SLOTS];
    long cand_served;        /* its served slots, -1: none */
    int map_incomplete;      /* incomplete maps in this read */
    int16_t primary[LB_CLUSTER_SLOTS]; /* node index per slot, -1 none */
    int16_t replica[LB_CLUSTER_SLOTS]; /* a replica of it for reads, -1 none */
    int have_map;
    unsigned long map_reads;
    lb_reply **res;          /* the replies of a redirected batch, copied */
    size_t res_cap;
    cblock *blocks;          /* where the copies live until the next call */

    /* The route. */
    route_phase phase;
    lb_redis_status rt_st;   /* R_OVER: the outcome */
    lb_reply **out;          /* the replies route_end tells (NULL: none) */
    const lb_redis_batch *b; /* the caller's batch, and how it goes */
    int flags, node_flags, use_replica; /* use_replica: a replica may serve it */
    long slot;               /* -1: keyless */
    int cur;                 /* the node picked for the batch */
    int64_t bg_first;        /* the retry budget: time of the first failure, 0: none yet */
    int bg_wait;             /* the next backoff, ms */
    int pause_ms;            /* R_PAUSE */
    route_phase pause_next;
    lb_cluster_hop hop;      /* the hop handed out (a waiting phase) */
    lb_redis_batch rob;      /* READONLY */
    /* reading the map: a sub-route that goes back to map_ret */
    route_phase map_ret;
    lb_redis_status map_st;  /* the last node's outcome */
    lb_redis_status map_out; /* the read's outcome, for map_ret */
    int map_pass;            /* 0: nodes with an open connection, 1: the rest */
    size_t map_i;
    int map_shards;
    char map_refused[LB_ERRSTR_SIZE]; /* the first refused map's message */
    lb_redis_batch mapb;
    /* redirects: per command of the batch */
    size_t *off;             /* where it starts in b (n + 1) */
    int16_t *target;         /* its node; -1 where the map says; -2 answered */
    char *asking;            /* ASK: ASKING goes before it */
    size_t redir_cap;
    int from;                /* the node that answered the batch */
    int redirects;
    size_t cursor;           /* R_REFUSED: where to look for the next target */
    lb_redis_batch sb;       /* the sub-batch handed out */
    size_t idx[64], cnt;     /* its commands' indexes in b */
    /* The route as steps (for the wire transport): the hop in progress. */
    lb_redis *st_node;       /* its node's client, NULL: none */
    int st_node_id;
};

/* ------------------------------------------------------------ cluster.c */

/* 1 when r is a cluster client. */
int lb_cl_is(const lb_redis *r);
int64_t lb_cl_now_ms(void);
uint32_t lb_cl_addr_hash(const char *host, int port);
/* The node at host:port, added when new (*added set; a gone index is taken
 * again first); its index, or -1 (out of memory, or too many nodes). */
int lb_cl_node_index(lb_cluster *c, const char *host, int port, int *added);
/* The client of node i (created on first use), or NULL when out of memory. */
lb_redis *lb_cl_node_conn(lb_cluster *c, int i);
/* Drop every node that neither the URL nor the map in use names. */
void lb_cl_prune(lb_cluster *c);

/* ------------------------------------------------------ cluster_route.c */

/* Free the reply copies of earlier calls. */
void lb_cl_blocks_free(lb_cluster *c);
/* The route is over with st (the error, if any, on c->base.err). */
void lb_cl_route_over(lb_cluster *c, lb_redis_status st);
/* Read the map, then go on at ret (the read's outcome in c->map_out). */
void lb_cl_map_begin(lb_cluster *c, route_phase ret);
/* The node serving slot (-1: any slot; replica: one of its replicas when the
 * map has one), -1 when none does. */
int lb_cl_pick_node(const lb_cluster *c, long slot, int replica);

#endif
