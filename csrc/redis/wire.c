/* wire.c: see wire.h. */
#define _POSIX_C_SOURCE 200809L
#include "wire.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "session.h"

typedef struct {
    lb_redis base;
    lb_redis_config cfg;
    lb_session s;
    pid_t pid;                /* the process that opened the connection */
    lb_redis_batch hs;        /* the handshake of the open connection */
    unsigned long connects;
    unsigned long roundtrips0; /* round trips counted before (from) */
} lb_wire;

static const lb_redis_vt wire_vt;

#define WIRE(r) ((lb_wire *)(r))

int lb_wire_is(const lb_redis *r)
{
    return r && r->vt == &wire_vt;
}

static void wire_free(lb_redis *r)
{
    if (!r)
        return;
    lb_session_fini(&WIRE(r)->s);
    lb_redis_batch_free(&WIRE(r)->hs);
    lb_redis_config_free(&WIRE(r)->cfg);
    free(r);
}

static lb_redis *wire_new(const lb_redis_config *cfg, unsigned long connects,
                          unsigned long roundtrips)
{
    lb_wire *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->base.vt = &wire_vt;
    lb_error_clear(&w->base.err);
    lb_redis_batch_init(&w->hs);
    if (lb_redis_config_copy(&w->cfg, cfg) != LB_REDIS_OK) {
        free(w);
        return NULL;
    }
    w->connects = connects;
    w->roundtrips0 = roundtrips;
    if (lb_session_init(&w->s, &w->cfg, &w->base.err) < 0) {
        wire_free(&w->base);
        return NULL;
    }
    return &w->base;
}

lb_redis *lb_wire_new_from(const lb_redis *from)
{
    return wire_new(lb_redis_get_config(from), lb_redis_connect_count(from),
                    lb_redis_roundtrip_count(from));
}

static lb_redis *wire_new_like(const lb_redis *r)
{
    return wire_new(&WIRE(r)->cfg, 0, 0);
}

lb_redis *lb_wire_new_cfg(const lb_redis_config *cfg)
{
    return wire_new(cfg, 0, 0);
}

static lb_redis_status wire_exec(lb_redis *r, const lb_redis_batch *b, int flags,
                                 lb_reply ***replies)
{
    (void)b;
    (void)flags;
    if (replies)
        *replies = NULL;
    return lb_error_set(&r->err, LB_REDIS_ERR_ARG,
                        "this connection is carried by an outside transport (wire.h): it has no "
                        "socket of its own");
}

static lb_redis_status wire_connect(lb_redis *r)
{
    return wire_exec(r, NULL, 0, NULL);
}

static void wire_disconnect(lb_redis *r)
{
    lb_session_closed(&WIRE(r)->s); /* the outside transport must close its connection too */
}

static int wire_is_connected(const lb_redis *r)
{
    return WIRE(r)->s.open && WIRE(r)->pid == getpid();
}

static void wire_set_timeout(lb_redis *r, int timeout_ms) { WIRE(r)->cfg.timeout_ms = timeout_ms; }
static unsigned long wire_connect_count(const lb_redis *r) { return WIRE(r)->connects; }
static unsigned long wire_roundtrip_count(const lb_redis *r)
{
    return WIRE(r)->roundtrips0 + WIRE(r)->s.roundtrips;
}
static const lb_redis_config *wire_config(const lb_redis *r) { return &WIRE(r)->cfg; }
static void wire_abandon(lb_redis *r) { (void)r; /* no socket of its own */ }

/* ---------------------------------------------------------- the transport */

/* The calls below on a client of another kind: refused. */
static lb_redis_status not_wire(lb_redis *r)
{
    return lb_error_set(&r->err, LB_REDIS_ERR_ARG, "not a connection of an outside transport");
}

lb_redis_status lb_wire_opened(lb_redis *r)
{
    lb_wire *w = WIRE(r);
    if (!lb_wire_is(r))
        return not_wire(r);
    lb_error_clear(&r->err);
    lb_session_closed(&w->s);
    lb_redis_status st = lb_session_opened(&w->s);
    if (st != LB_REDIS_OK)
        return st;
    w->pid = getpid();
    w->connects++;
    return LB_REDIS_OK;
}

void lb_wire_closed(lb_redis *r)
{
    if (!lb_wire_is(r))
        return;
    lb_session_closed(&WIRE(r)->s);
}

int lb_wire_handshake_due(lb_redis *r, const lb_redis_batch **hb)
{
    lb_wire *w = WIRE(r);
    *hb = NULL;
    if (!lb_wire_is(r))
        return -1;
    if (w->s.hs_done)
        return 0;
    lb_session_handshake(&w->s, &w->hs);
    if (w->hs.failed)
        return -1;
    *hb = &w->hs;
    return w->hs.ncmds != 0;
}

lb_redis_status lb_wire_handshake_done(lb_redis *r)
{
    lb_reply **rs;
    lb_redis_status st = lb_wire_replies(r, LB_REDIS_RAW_ERRORS, &rs);
    if (st == LB_REDIS_OK)
        st = lb_session_handshake_check(&WIRE(r)->s, rs);
    if (st != LB_REDIS_OK)
        wire_disconnect(r); /* as a blocking connect drops a failed handshake */
    return st;
}

lb_redis_status lb_wire_begin(lb_redis *r, const lb_redis_batch *b)
{
    lb_wire *w = WIRE(r);
    lb_error_clear(&r->err);
    if (!lb_wire_is(r) || !wire_is_connected(r))
        return lb_error_set(&r->err, LB_REDIS_ERR_IO, "no connection is open on the transport");
    lb_redis_status st = lb_redis_batch_check(b, &r->err);
    if (st == LB_REDIS_OK && b->ncmds == 0)
        st = lb_error_set(&r->err, LB_REDIS_ERR_ARG,
                          "malformed Redis batch (argument count does not match)");
    return st == LB_REDIS_OK ? lb_session_begin(&w->s, b) : st;
}

lb_redis_status lb_wire_feed(lb_redis *r, const void *data, size_t len, int *complete)
{
    if (!lb_wire_is(r)) {
        *complete = 0;
        return not_wire(r);
    }
    return lb_session_feed(&WIRE(r)->s, data, len, complete);
}

lb_redis_status lb_wire_replies(lb_redis *r, int flags, lb_reply ***replies)
{
    lb_session *s = &WIRE(r)->s;
    lb_error_clear(&r->err);
    *replies = NULL;
    if (!lb_wire_is(r))
        return not_wire(r);
    if (s->failed || s->n == 0 || s->got != s->n)
        return lb_error_set(&r->err, LB_REDIS_ERR_IO, "the round trip is not complete");
    *replies = s->replies;
    return lb_session_errors(&r->err, s->replies, s->n, flags);
}

static const lb_redis_vt wire_vt = {
    .exec = wire_exec,
    .connect = wire_connect,
    .disconnect = wire_disconnect,
    .is_connected = wire_is_connected,
    .set_timeout = wire_set_timeout,
    .connect_count = wire_connect_count,
    .roundtrip_count = wire_roundtrip_count,
    .config = wire_config,
    .new_like = wire_new_like,
    .abandon = wire_abandon,
    .free = wire_free,
};
