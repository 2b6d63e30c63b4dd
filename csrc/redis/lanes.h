/* lanes.h: the blocking driver of round trips as steps (client.h's
 * lb_redis_step_*), for N lanes on one thread.  A lane is a client's round
 * trip, or an operation over one (op.h), whose steps say what to wait for:
 * a socket's events until a deadline (LB_STEP_WAIT: the client connects and
 * moves the bytes itself) or a pause.  lb_lanes_run polls every lane's socket
 * at once and hands each what it saw (lb_redis_step_ready), so one node's
 * round trip, a Redis Cluster's hops and the shards of a sharded filter are
 * all served here, and no thread is started for a call.
 *
 * Each lane keeps its own timeouts (its connection's inactivity timeout, as
 * it would alone); a lane that fails ends alone, the others run on.  A lane
 * whose client has no socket of its own (a connection carried by the wire transport,
 * wire.h) gets its CONNECT and SEND steps refused (ARG). */
#ifndef LB_REDIS_LANES_H
#define LB_REDIS_LANES_H

#include <stddef.h>
#include <stdint.h>

#include "client.h"

typedef struct lb_lane lb_lane;
struct lb_lane {
    /* The lane's next step: 1 with *s set, 0 when the lane is over. */
    int (*next)(lb_lane *l, lb_redis_step *s);
    lb_redis *r; /* the client the lane's steps are reported to */
    void *arg;   /* next's own */
    /* the driver's */
    int on;
    lb_redis_step s;
    int64_t until; /* a PAUSE's end */
};

/* Run the n lanes to their ends. */
void lb_lanes_run(lb_lane *lanes, size_t n);
/* One client's round trip, begun (lb_redis_step_begin, or the client's own),
 * run to the end of its steps; then lb_redis_step_end (or the client's own). */
void lb_lanes_roundtrip(lb_redis *r);
/* The driver's clock: monotonic milliseconds (a WAIT step's deadline). */
int64_t lb_lanes_now_ms(void);

#endif
