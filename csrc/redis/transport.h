/* transport.h: the blocking transport of a session: a socket opened with
 * hiredis (net.c only connects: TCP with timeout, unix sockets, IPv6), made
 * non-blocking, plain or TLS (tls.h), and a poll() loop that moves a round
 * trip's bytes and hands every byte received to the session (session.h), so
 * that
 *   - a whole batch goes out as one buffer, and replies are read while the
 *     rest is still being written (no deadlock on huge pipelines);
 *   - the operation timeout is an inactivity timeout (no byte could be sent or
 *     received for timeout_ms -> LB_REDIS_ERR_TIMEOUT), as redis-py's
 *     socket_timeout;
 *   - the caller knows whether anything of the batch was answered (retry).
 *
 * Fork: the transport remembers the pid that opened its socket; closing it in
 * another process sends nothing (hiredis's redisFree only close()s the fd, and
 * a TLS session is freed without a close_notify). */
#ifndef LB_REDIS_TRANSPORT_H
#define LB_REDIS_TRANSPORT_H

#include <stdint.h>
#include <sys/types.h>

#include "session.h"

typedef struct lb_transport_io lb_transport_io; /* plain or TLS */

typedef struct {
    void *ctx;                 /* hiredis's redisContext, NULL when closed */
    int fd;                    /* its socket while open, else -1 (lb_transport_abandon) */
    pid_t pid;                 /* the process that opened it */
    struct lb_tls *tls;        /* the TLS session over the socket, or NULL */
    int tls_unanswered;        /* TLS: nothing received since the handshake (error hints) */
    const lb_transport_io *io;
    char *rbuf;                /* receive buffer */
} lb_transport;

/* 0, or -1 when out of memory. */
int lb_transport_init(lb_transport *t);
void lb_transport_fini(lb_transport *t);

/* Connect to cfg's host and port (or unix socket), TLS when cfg->tls, within
 * the connect timeout.  Errors (CONNECT, TIMEOUT, NOMEM) go to e. */
lb_redis_status lb_transport_connect(lb_transport *t, const lb_redis_config *cfg,
                                     lb_redis_error *e);
/* Close the socket, sending nothing. */
void lb_transport_close(lb_transport *t);
/* For a forked child whose parent was inside a call: close this process's
 * copy of the socket and nothing else (nothing is freed). */
void lb_transport_abandon(lb_transport *t);
/* 1 when a socket is open and belongs to this process. */
int lb_transport_is_open(const lb_transport *t);

/* One round trip of a session that has begun (lb_session_begin): send
 * buf[0..len) while reading, until the session has every reply.  Errors (IO,
 * TIMEOUT, PROTOCOL, NOMEM) go to the session's error state. */
lb_redis_status lb_transport_roundtrip(lb_transport *t, lb_session *s, const char *buf,
                                       size_t len);

/* The same round trip in steps, for a driver that waits on many sockets at
 * once (lanes.h): begin, then step until it returns 1 (*st the outcome, as
 * lb_transport_roundtrip's).  A step that returns 0 waits: poll t's socket
 * (lb_transport_fd) for *events until rt->deadline (monotonic ms,
 * lb_transport_now_ms; 0: no deadline), then step again with what poll saw
 * (revents 0: nothing yet, the deadline passed or another socket woke the
 * driver; poll_errno: poll itself failed).  A TLS session's buffered bytes
 * are read without waiting (the socket need not be readable for them). */
typedef struct {
    const char *buf;
    size_t len, sent;
    short wev, rev;   /* what the last send / recv waits for */
    int64_t deadline; /* no byte moved by then: a timeout (0: none) */
    int complete;
    int waiting;      /* the last step asked for a wait */
} lb_transport_rt;

void lb_transport_rt_begin(lb_transport_rt *rt, const lb_session *s, const char *buf, size_t len);
int lb_transport_rt_step(lb_transport *t, lb_session *s, lb_transport_rt *rt, short revents,
                         int poll_errno, short *events, lb_redis_status *st);
int lb_transport_fd(const lb_transport *t);
int64_t lb_transport_now_ms(void);

/* 1 when the open connection has input nobody asked for: bytes left in the
 * session's reader, or anything readable on the socket (a late or unsolicited
 * reply, the server's EOF or a reset) before a request is sent. */
int lb_transport_pending(lb_transport *t, lb_session *s);

#endif
