/* conn.h: one connection to one Redis server as a step machine, with no I/O:
 * every rule of a connection, written once, whichever transport carries the
 * bytes.  Two drivers: the node client's (node.c: the blocking transport,
 * transport.h, a short loop) and the wire client's (wire.c: its steps are
 * the client interface's, lb_redis_step_*, that the wire transport
 * carries: ling_bloom.aio's asyncio one, through op.c).  The steps are
 * client.h's lb_redis_step.
 *
 *     lb_conn_begin(c, batch, flags)        as lb_redis_exec's arguments
 *                                           (batch NULL: only connect)
 *     while (lb_conn_next(c, &step)) {
 *         LB_STEP_CONNECT  connect to step.cfg (host and port or unix path,
 *                          TLS as it says, within its connect timeout), then
 *                          lb_conn_connected(c, status, text)
 *         LB_STEP_SEND     send step.req on that connection and hand every
 *                          byte that arrives to lb_conn_feed (or a transport
 *                          feeds lb_conn_session itself) until
 *                          every reply is in (no byte for the operation
 *                          timeout: a timeout), then lb_conn_sent(c, status, text)
 *         LB_STEP_PAUSE    wait step.pause_ms
 *         after each: close step's connection when lb_conn_is_open(c, step.probe) is 0
 *     }
 *     st = lb_conn_end(c, &replies)         as lb_redis_exec's result
 *
 * A text NULL with a failure says the error is on the connection's error
 * state already (lb_conn_error: a blocking transport writes it there).
 *
 * The rules: a new connection's AUTH/SELECT (session.h); through the
 * sentinels when the config names a service (sentinel.h: each sentinel asked
 * on a one-off connection, step.probe = 1), ROLE checked, a few tries
 * (LB_CONN_SENTINEL_TRIES, LB_CONN_SENTINEL_PAUSE_MS apart) while a failover
 * leaves them naming a server that is gone or not a master; WAIT after writes
 * (wait_replicas); a connection opened by another process (fork) dropped
 * unused; an idempotent batch sent once more when a kept connection turns out
 * dead before any reply byte (stale), or up to twice when a demoted primary
 * refuses it (-READONLY); a connection found out of step (input nobody asked
 * for: lb_conn_out_of_step) never used again.  A failure of a round trip
 * drops the connection; an error reply does not. */
#ifndef LB_REDIS_CONN_H
#define LB_REDIS_CONN_H

#include <sys/types.h>

#include "client.h"
#include "config.h"
#include "resp.h"
#include "sentinel.h"
#include "session.h"

/* Sentinel: connections tried while a failover goes on, and the pause between. */
#define LB_CONN_SENTINEL_TRIES 5
#define LB_CONN_SENTINEL_PAUSE_MS 200
/* An idempotent batch is sent again on a new connection: after a stale one
 * while fewer than LB_CONN_STALE_RESENDS resends were made, after a demoted
 * primary's -READONLY while fewer than LB_CONN_DEMOTED_RESENDS were (the two
 * counted together). */
#define LB_CONN_STALE_RESENDS 1
#define LB_CONN_DEMOTED_RESENDS 2

typedef struct lb_conn_probe lb_conn_probe;

typedef struct {
    lb_redis_config cfg;      /* the settings (host and port: the primary found, sentinel) */
    lb_redis_error *err;      /* the owner's error state */
    lb_session s;
    pid_t pid;                /* the process that opened the connection */
    lb_redis_batch hs;        /* the handshake of the open connection */
    lb_redis_batch role;      /* ROLE (sentinel) */
    unsigned long connects;
    int stray;                /* closed for input nobody asked for */
    /* the round trip in progress */
    int phase, sending;       /* sending: a SEND step is out */
    const lb_redis_batch *b;  /* the batch (WAIT added); NULL: only connect */
    int flags;
    size_t nuser;             /* the caller's commands of b */
    int attempt, tries, fresh;  /* attempt: resends made */
    int pause;                /* a pause due before the next connection (ms) */
    lb_redis_status st;       /* its outcome */
    lb_reply **rs;
    lb_sentinel_walk walk;
    int walking;
    lb_conn_probe *probe;     /* the sentinel being asked */
} lb_conn;

/* c zeroed (calloc): a copy of cfg, errors to err.  0, or -1 out of memory
 * (lb_conn_fini then). */
int lb_conn_init(lb_conn *c, const lb_redis_config *cfg, lb_redis_error *err);
void lb_conn_fini(lb_conn *c);

/* Begin a round trip (b NULL: make sure a connection is open, nothing else).
 * A failure ends it at once (lb_conn_end gives the status too). */
lb_redis_status lb_conn_begin(lb_conn *c, const lb_redis_batch *b, int flags);
/* 1 with *s the next step; 0 when the round trip is over. */
int lb_conn_next(lb_conn *c, lb_redis_step *s);
/* The session and the error state of the connection of a step (probe: the
 * sentinel's): a blocking transport feeds that session and puts its
 * failures there. */
lb_session *lb_conn_session(lb_conn *c, int probe);
lb_redis_error *lb_conn_error(lb_conn *c, int probe);
void lb_conn_connected(lb_conn *c, lb_redis_status st, const char *text);
/* Reply bytes of a SEND step: *complete = 1 once every reply is in.  A
 * failure means the stream is out of step: lb_conn_sent(c, st, NULL). */
lb_redis_status lb_conn_feed(lb_conn *c, const void *data, size_t len, int *complete);
void lb_conn_sent(lb_conn *c, lb_redis_status st, const char *text);
/* lb_conn_sent of a SEND step that failed before every reply came, worded as
 * the blocking transport words it (the replies read of those asked): st
 * LB_REDIS_ERR_TIMEOUT, no byte for the operation timeout; LB_REDIS_ERR_IO,
 * the connection closed by the server. */
void lb_conn_sent_worded(lb_conn *c, lb_redis_status st);
/* The status and replies, as lb_redis_exec gives them. */
lb_redis_status lb_conn_end(lb_conn *c, lb_reply ***replies);

/* A connection was opened (lb_conn_connected says so): a new one, whose
 * handshake is due before its first batch. */
lb_redis_status lb_conn_opened(lb_conn *c);
/* 1 when the connection (probe: the sentinel's) is open in this process. */
int lb_conn_is_open(const lb_conn *c, int probe);
/* The driver closed the connection between round trips: the server closed
 * it, or input nobody asked for arrived on it (out of step: a batch that
 * counted on that connection, LB_REDIS_KEPT_CONN, then fails as stale
 * without sending). */
void lb_conn_closed(lb_conn *c);
void lb_conn_out_of_step(lb_conn *c);

#endif
