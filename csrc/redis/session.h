/* session.h: one Redis connection's protocol, with no I/O (as h11 is for
 * HTTP): the handshake (AUTH, SELECT), a round trip's state (the replies it
 * expects, the reader fed with what arrives, its bounds), WAIT after writes,
 * and the rule that turns error replies into a status.  Every transport
 * drives one: the blocking one (transport.c: poll, plain or TLS) and the
 * wire transport (wire.h: the asyncio transport of ling_bloom.aio).
 *
 *     lb_session_opened(s)             a connection was opened
 *     lb_session_handshake(s, &hb)     its AUTH/SELECT (0 commands: none due);
 *                                      after their round trip lb_session_handshake_check
 *     lb_session_begin(s, &batch)      a round trip: send batch.buf[0..len), then
 *     lb_session_feed(s, bytes, &done) with what arrives, until done
 *     lb_session_errors(...)           the replies' error replies as a status
 *     lb_session_closed(s)             the connection is gone
 *
 * Any failure of begin or feed (a protocol error, a reply past the bounds,
 * input nobody asked for) means the stream is out of step: the transport
 * drops the connection. */
#ifndef LB_REDIS_SESSION_H
#define LB_REDIS_SESSION_H

#include "config.h"
#include "resp.h"

typedef struct {
    const lb_redis_config *cfg; /* the owner's settings */
    lb_redis_error *err;        /* the owner's error state */
    lb_resp_reader *reader;
    lb_reply **replies;         /* the top-level replies of the round trip */
    size_t replies_cap;
    size_t n, got;              /* replies expected / parsed so far */
    int failed;                 /* the round trip's reply stream broke */
    int open;                   /* a connection is open */
    int hs_done;                /* its handshake was answered */
    int hs_auth, hs_sel;        /* the handshake's commands (-1: not sent) */
    unsigned long roundtrips;   /* round trips begun, handshakes included */
    lb_redis_batch waitb;       /* a write batch followed by WAIT */
} lb_session;

/* 0, or -1 when out of memory. */
int lb_session_init(lb_session *s, const lb_redis_config *cfg, lb_redis_error *err);
void lb_session_fini(lb_session *s);

lb_redis_status lb_session_opened(lb_session *s);
void lb_session_closed(lb_session *s);

/* The handshake of the open connection into hb (cleared first): AUTH and
 * SELECT as the config asks, hb->ncmds == 0 when none is due (then it counts
 * as done).  Its replies: lb_session_handshake_check. */
void lb_session_handshake(lb_session *s, lb_redis_batch *hb);
lb_redis_status lb_session_handshake_check(lb_session *s, lb_reply **rs);

/* The bounds of a round trip's replies from what its batch asked for. */
void lb_session_bounds(const lb_redis_batch *b, size_t *max_elements, size_t *max_bytes);
/* A round trip of n replies within the bounds.  IO when replies of an earlier
 * one are still owed or input nobody asked for is buffered; NOMEM. */
lb_redis_status lb_session_begin_n(lb_session *s, size_t n, size_t max_elements,
                                   size_t max_bytes);
/* The same with b's reply count and bounds (and b checked: NOMEM, ARG). */
lb_redis_status lb_session_begin(lb_session *s, const lb_redis_batch *b);
/* Reply bytes: *complete = 1 once every reply is in.  Bytes past the last
 * reply, past the byte bound, or that are no RESP: PROTOCOL. */
lb_redis_status lb_session_feed(lb_session *s, const void *data, size_t len, int *complete);
/* A round trip that got every reply when all its request was not sent yet. */
lb_redis_status lb_session_more_replies(lb_session *s);
/* 1 when input nobody asked for is buffered. */
int lb_session_pending(const lb_session *s);
size_t lb_session_received(const lb_session *s);
/* The connection was closed by the server before every reply of the round
 * trip came: IO, with the replies read (and the last one's text when it is an
 * error reply: what the server said before it closed), as both drivers word
 * it. */
lb_redis_status lb_session_closed_error(lb_session *s, const char *where);

/* Unless flags has LB_REDIS_RAW_ERRORS, the first error reply of n makes the
 * status: WRONGTYPE or REPLY, with the server's text and its index in e. */
lb_redis_status lb_session_errors(lb_redis_error *e, lb_reply **rs, size_t n, int flags);

/* WAIT (cfg->wait_replicas > 0): *out = b, or a copy of b followed by WAIT
 * n t (kept in s).  OK or NOMEM. */
lb_redis_status lb_session_with_wait(lb_session *s, const lb_redis_batch *b,
                                     const lb_redis_batch **out);
/* The WAIT reply after nuser replies: OK, REPLY (refused), PROTOCOL (not a
 * count: *drop = 1), TIMEOUT (too few replicas).  OK whatever WAIT said when
 * every one of the nuser replies is an error (nothing was written). */
lb_redis_status lb_session_wait_check(lb_session *s, size_t nuser, int *drop);

/* Sentinel: a reply of n says the server is no longer the primary
 * (-READONLY from a replica, -MASTERDOWN). */
int lb_session_demoted(lb_reply **rs, size_t n);

#endif
