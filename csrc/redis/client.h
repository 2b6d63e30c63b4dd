/* client.h: the Redis client interface, as the operations above it
 * (bitmap.h, redisbloom.h, sharded.h) and the binding see it.  Three
 * implementations: a single node (node.h: its own socket, through a sentinel
 * resolver when the config names a service), a Redis Cluster (cluster.h: it
 * owns one node client per node and routes each batch by slot), and a
 * connection carried by the wire transport (wire.h: asyncio).
 *
 * Threads: a client is used by one thread at a time (the binding holds a lock
 * around every call and releases the GIL during it).  There is no locking
 * inside and no global state.
 *
 * Connection discipline: any failure in the middle of a round trip (timeout,
 * EOF, reset, protocol error) discards the connection: a reply read for the
 * wrong command is the worst bug a client can have.  A server error reply
 * (-ERR ..., -WRONGTYPE ...) does not: every reply of the batch is still read,
 * so the stream stays in step and the connection is kept. */
#ifndef LB_REDIS_CLIENT_H
#define LB_REDIS_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"
#include "resp.h"
#include "status.h"

typedef struct lb_redis lb_redis;

/* A round trip as a step machine: for a wire client (wire.h: its connections
 * carried by the wire transport, ling_bloom.aio's asyncio; and a Redis
 * Cluster whose nodes are wire clients), what that transport does next; for
 * a client with sockets of its own, what the blocking driver waits for
 * (lanes.h). */
enum { LB_STEP_OVER = 0, LB_STEP_CONNECT, LB_STEP_SEND, LB_STEP_PAUSE, LB_STEP_WAIT };

typedef struct {
    int what;                    /* LB_STEP_* */
    int probe;                   /* 1: on the node's one-off connection to a sentinel */
    int node;                    /* the connection's node (a cluster's index; 0 for one server) */
    const lb_redis_config *cfg;  /* CONNECT: where and how; SEND: the connection's settings */
    const lb_redis_batch *req;   /* SEND: the bytes to write */
    int pause_ms;                /* PAUSE */
    /* WAIT (a client with sockets of its own, which connects and moves the
     * bytes itself): poll fd for events until deadline_ms (monotonic, as
     * lanes.h's clock; 0: none), then lb_redis_step_ready with what it saw. */
    int fd;
    short events;
    int64_t deadline_ms;
} lb_redis_step;

/* What each implementation supplies. */
typedef struct {
    lb_redis_status (*exec)(lb_redis *r, const lb_redis_batch *b, int flags, lb_reply ***replies);
    lb_redis_status (*connect)(lb_redis *r);
    void (*disconnect)(lb_redis *r);
    int (*is_connected)(const lb_redis *r);
    void (*set_timeout)(lb_redis *r, int timeout_ms);
    unsigned long (*connect_count)(const lb_redis *r);
    unsigned long (*roundtrip_count)(const lb_redis *r);
    const lb_redis_config *(*config)(const lb_redis *r);
    lb_redis *(*new_like)(const lb_redis *r);
    void (*abandon)(lb_redis *r);
    void (*free)(lb_redis *r);
    /* The round trip as steps (lb_redis_step_* below); NULL for a client with
     * sockets of its own. */
    lb_redis_status (*step_begin)(lb_redis *r, const lb_redis_batch *b, int flags);
    int (*step_next)(lb_redis *r, lb_redis_step *s);
    void (*step_connected)(lb_redis *r, lb_redis_status st, const char *text);
    lb_redis_status (*step_feed)(lb_redis *r, const void *data, size_t len, int *complete);
    void (*step_sent)(lb_redis *r, lb_redis_status st, const char *text);
    lb_redis_status (*step_end)(lb_redis *r, lb_reply ***replies);
    int (*step_open)(const lb_redis *r);
    lb_redis *(*step_client)(lb_redis *r, int node);
    void (*step_ready)(lb_redis *r, short revents, int poll_errno);
    lb_redis *(*to_wire)(lb_redis *r);
    int (*has_node)(const lb_redis *r, int node);
} lb_redis_vt;

/* The part every implementation starts with. */
struct lb_redis {
    const lb_redis_vt *vt;
    lb_redis_error err;
    /* The server's maxmemory-policy when a filter's check (INFO memory) found
     * that it can evict that filter's keys ("" otherwise; maxmemory.h). */
    char evicting[48];
};

/* A client for a configuration: lb_redis_new, in factory.h. */
/* Close every socket (nothing is sent) and free everything.  NULL is fine. */
void lb_redis_free(lb_redis *r);

/* For a forked child whose parent had another thread inside a call on r at
 * the fork: r's reader, arena and buffers may be half-changed, so nothing of
 * r is freed or read but its settings.  lb_redis_new_like makes a new,
 * unconnected client with r's settings (of r's kind); lb_redis_abandon closes
 * this process's copies of r's sockets (nothing is sent) and leaves the rest
 * of r leaked on purpose: r must not be used or freed afterwards. */
lb_redis *lb_redis_new_like(const lb_redis *r);
void lb_redis_abandon(lb_redis *r);

/* Connect now if not connected (or connected by another process): connect,
 * AUTH, SELECT.  Not needed before lb_redis_exec, which does it itself. */
lb_redis_status lb_redis_connect(lb_redis *r);
/* Drop the connection (close the fd, send nothing); the next call reconnects. */
void lb_redis_disconnect(lb_redis *r);
/* 1 when a connection is open and belongs to this process. */
int lb_redis_is_connected(const lb_redis *r);
/* Change the operation timeout (ms, 0 = none); applies from the next round trip. */
void lb_redis_set_timeout(lb_redis *r, int timeout_ms);
/* The client's settings. */
const lb_redis_config *lb_redis_get_config(const lb_redis *r);

/* The text of the last error ("" after success).  For REPLY and WRONGTYPE it
 * is the server's text (WRONGTYPE: followed by " (key 'name')" when the layer
 * above knows the key).  Valid until the next call on r. */
const char *lb_redis_errstr(const lb_redis *r);
/* For REPLY/WRONGTYPE: index in the batch of the first command whose reply
 * was an error, else -1. */
long lb_redis_err_index(const lb_redis *r);
/* 1 when the last lb_redis_exec failed with LB_REDIS_ERR_IO on a connection
 * opened by an earlier call before any byte of a reply came back (a stale
 * connection, as after a server restart): the batch was not answered and an
 * idempotent one may be sent again on a new connection.  Operations that
 * must do something on every new connection before their batch (bitmap.c
 * checks its meta key) exec without LB_REDIS_IDEMPOTENT and retry themselves. */
int lb_redis_last_stale(const lb_redis *r);
/* Set the error state (for the layers above); returns st.  printf-style. */
lb_redis_status lb_redis_set_error(lb_redis *r, lb_redis_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Take over the status, text and staleness of another client's last call
 * (returns the status). */
lb_redis_status lb_redis_take_error(lb_redis *r, const lb_redis *from);
/* Number of connections this client opened so far, and of round trips it
 * started (handshakes included): tests, diagnostics, and the layers above
 * (bitmap.c re-checks its meta key after a reconnect). */
unsigned long lb_redis_connect_count(const lb_redis *r);
unsigned long lb_redis_roundtrip_count(const lb_redis *r);

/* Send the batch in one round trip and read its b->ncmds replies in order.
 *
 * On LB_REDIS_OK, *replies (if replies != NULL) points to b->ncmds replies.
 * Unless LB_REDIS_RAW_ERRORS is given, the first error reply makes the call
 * return LB_REDIS_ERR_WRONGTYPE (a reply starting with "WRONGTYPE") or
 * LB_REDIS_ERR_REPLY, with the server text in errstr and its index in
 * lb_redis_err_index; *replies is still set (all replies were read) and the
 * connection is kept.
 *
 * CONNECT, AUTH, TIMEOUT, IO, PROTOCOL: the connection is discarded (the next
 * call reconnects); *replies is NULL.
 *
 * Retry: with LB_REDIS_IDEMPOTENT, when a connection opened by an earlier call
 * turns out dead (EOF / reset / broken pipe) before any byte of a reply came
 * back, as after a server restart, the batch is sent once more on a fresh
 * connection.  Timeouts are never retried; non-idempotent batches never are.
 *
 * A kept connection with input pending before anything is sent (a late or
 * unsolicited reply, or the server's EOF) is out of step: it is discarded,
 * unread, and the batch goes out on a new connection (with LB_REDIS_KEPT_CONN:
 * nothing is sent, see resp.h).
 *
 * An empty batch returns LB_REDIS_OK without connecting.  Replies stay valid
 * until the next call on r. */
lb_redis_status lb_redis_exec(lb_redis *r, const lb_redis_batch *b, int flags,
                              lb_reply ***replies);

/* The round trip of lb_redis_exec as a step machine that the wire transport
 * drives (a wire client, wire.h, or a cluster client after
 * lb_cluster_use_wire; a client with sockets of its own gives only the
 * steps below, for lanes.h):
 *
 *     lb_redis_step_begin(r, batch, flags)      as lb_redis_exec's arguments
 *     while (lb_redis_step_next(r, &step)) {
 *         LB_STEP_CONNECT  connect to step.cfg (host and port or unix path, TLS
 *                          as it says, within its connect timeout), then
 *                          lb_redis_step_connected(r, status, text)
 *         LB_STEP_SEND     send step.req on that connection, hand every byte
 *                          that arrives to lb_redis_step_feed until it says
 *                          complete (no byte for the operation timeout: a
 *                          timeout), then lb_redis_step_sent(r, status, text)
 *         LB_STEP_PAUSE    wait step.pause_ms
 *         after CONNECT and SEND: close that connection (step.node, step.probe)
 *         when lb_redis_step_open(r) is 0
 *     }
 *     st = lb_redis_step_end(r, &replies)       as lb_redis_exec's result
 *
 * Outcomes: CONNECT, TIMEOUT (connect); OK, IO, TIMEOUT (send) with the
 * text (text NULL: IO, the server closed the connection; TIMEOUT, no byte for
 * the operation timeout; worded as the blocking transport words them); a
 * failed feed (the stream is out of step) is reported as its own
 * status with text NULL.  lb_redis_step_client(r, node) is the client whose
 * connection node is (for wire.h's lb_wire_closed and lb_wire_out_of_step),
 * NULL when there is none. */
lb_redis_status lb_redis_step_begin(lb_redis *r, const lb_redis_batch *b, int flags);
int lb_redis_step_next(lb_redis *r, lb_redis_step *s);
void lb_redis_step_connected(lb_redis *r, lb_redis_status st, const char *text);
lb_redis_status lb_redis_step_feed(lb_redis *r, const void *data, size_t len, int *complete);
void lb_redis_step_sent(lb_redis *r, lb_redis_status st, const char *text);
lb_redis_status lb_redis_step_end(lb_redis *r, lb_reply ***replies);
int lb_redis_step_open(const lb_redis *r);
lb_redis *lb_redis_step_client(lb_redis *r, int node);

/* A client with sockets of its own (a node, node.h, and a cluster of them)
 * carries its round trip as steps too, for the blocking driver that serves
 * many at once on one thread (lanes.h): it connects and moves the bytes
 * itself, and its steps are only
 *         LB_STEP_WAIT     poll step.fd for step.events until step.deadline_ms,
 *                          then lb_redis_step_ready(r, revents, poll_errno)
 *                          (revents 0: nothing seen; poll_errno: poll failed)
 *         LB_STEP_PAUSE    wait step.pause_ms */
void lb_redis_step_ready(lb_redis *r, short revents, int poll_errno);

/* The client carried by the wire transport from now on (ling_bloom.aio): a
 * wire client is r itself; a cluster client is r, its nodes now wire clients
 * (lb_cluster_use_wire); a node client gives a new wire client with its
 * settings and counts (lb_wire_new_from; r stays the caller's to free).
 * NULL when out of memory. */
lb_redis *lb_redis_to_wire(lb_redis *r);
/* 1 when node names a connection of r: 0 for one server, a node of a Redis
 * Cluster client that its map still names (it drops the others). */
int lb_redis_has_node(const lb_redis *r, int node);

/* Convenience for one command (tests, handshakes): builds a batch and runs
 * it; *reply valid until the next call. */
lb_redis_status lb_redis_command_argv(lb_redis *r, int argc, const char *const *argv,
                                      const size_t *lens, int flags, lb_reply **reply);

#endif
