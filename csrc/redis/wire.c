/* wire.c: see wire.h. */
#define _POSIX_C_SOURCE 200809L
#include "wire.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sentinel.h"
#include "session.h"

/* The phases of a round trip (lb_wire_exec_*). */
enum { X_IDLE, X_START, X_WALK, X_PROBE, X_CONNECT, X_HS, X_ROLE, X_BATCH, X_OVER };

typedef struct lb_wire {
    lb_redis base;
    lb_redis_config cfg;
    lb_session s;
    pid_t pid;                /* the process that opened the connection */
    lb_redis_batch hs;        /* the handshake of the open connection */
    lb_redis_batch role;      /* ROLE (sentinel) */
    unsigned long connects;
    unsigned long roundtrips0; /* round trips counted before (from) */
    int stray;                /* closed for input nobody asked for */
    /* the round trip in progress */
    int phase, sending;       /* sending: a SEND step is out */
    const lb_redis_batch *b;  /* the batch (WAIT added) */
    int flags;
    size_t nuser;             /* the caller's commands of b */
    int attempt, tries, fresh;
    int pause;                /* a pause due before the next connection (ms) */
    lb_redis_status st;       /* its outcome */
    lb_reply **rs;
    lb_sentinel_walk walk;
    int walking;
    struct lb_wire *probe;    /* the sentinel being asked */
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
    lb_wire *w = WIRE(r);
    if (w->walking)
        lb_sentinel_walk_free(&w->walk);
    wire_free(w->probe ? &w->probe->base : NULL);
    lb_session_fini(&WIRE(r)->s);
    lb_redis_batch_free(&WIRE(r)->hs);
    lb_redis_batch_free(&WIRE(r)->role);
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
    lb_redis_batch_init(&w->role);
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

/* ----------------------------------------------------- the round trip */

static void where(const lb_wire *w, char *buf, size_t len)
{
    lb_redis_config_where(&w->cfg, buf, len);
}

/* Forget the connection (the transport closes its socket: lb_wire_is_open). */
static void drop(lb_wire *w)
{
    lb_session_closed(&w->s);
}

static int sentinel_mode(const lb_wire *w)
{
    return w->cfg.sentinel_service && !w->cfg.unix_path;
}

static int over(lb_wire *w, lb_redis_status st)
{
    w->st = st;
    w->phase = X_OVER;
    return 0;
}

lb_redis_status lb_wire_exec_begin(lb_redis *r, const lb_redis_batch *b, int flags)
{
    lb_wire *w = WIRE(r);
    if (!lb_wire_is(r))
        return lb_error_set(&r->err, LB_REDIS_ERR_ARG, "not a connection of an outside transport");
    lb_error_clear(&r->err);
    w->rs = NULL;
    w->sending = 0;
    w->attempt = w->tries = w->fresh = w->pause = 0;
    w->b = b;
    w->flags = flags;
    w->nuser = b ? b->ncmds : 0;
    lb_redis_status st = lb_redis_batch_check(b, &r->err);
    if (st == LB_REDIS_OK && b->ncmds == 0)
        st = lb_error_set(&r->err, LB_REDIS_ERR_ARG,
                          "malformed Redis batch (argument count does not match)");
    if (st == LB_REDIS_OK && (flags & LB_REDIS_WRITE))
        st = lb_session_with_wait(&w->s, b, &w->b);
    if (st != LB_REDIS_OK) {
        over(w, st);
        return st;
    }
    w->phase = X_START;
    return LB_REDIS_OK;
}

/* A SEND step of batch b on the open connection. */
static int send_step(lb_wire *w, const lb_redis_batch *b, lb_wire_step *s)
{
    lb_redis_status st = lb_session_begin(&w->s, b);
    if (st != LB_REDIS_OK) {
        drop(w);
        return over(w, st);
    }
    s->what = LB_WIRE_SEND;
    s->cfg = &w->cfg;
    s->req = b;
    w->sending = 1;
    return 1;
}

/* The one-off connection to a sentinel: its own round trip, the walk's
 * question, on a client with the sentinel's settings. */
static int probe_next(lb_wire *w, lb_wire_step *s)
{
    if (lb_wire_exec_next(&w->probe->base, s)) {
        s->probe = 1;
        return 1;
    }
    lb_reply **rs = NULL;
    lb_redis_status st = lb_wire_exec_end(&w->probe->base, &rs);
    lb_sentinel_walk_answer(&w->walk, st, w->probe->base.err.text,
                            st == LB_REDIS_OK ? rs[0] : NULL);
    drop(w->probe); /* asked once: the transport closes it */
    w->phase = X_WALK;
    return -1;
}

int lb_wire_exec_next(lb_redis *r, lb_wire_step *s)
{
    lb_wire *w = WIRE(r);
    memset(s, 0, sizeof *s);
    if (!lb_wire_is(r))
        return 0;
    for (;;) {
        switch (w->phase) {
        case X_START:
            if (w->pause) {
                s->what = LB_WIRE_PAUSE;
                s->pause_ms = w->pause;
                w->pause = 0;
                return 1;
            }
            if (w->s.open && w->pid != getpid())
                drop(w); /* opened by the parent of a fork: never used here */
            if (w->s.open) {
                w->fresh = 0;
                w->phase = X_BATCH;
                return send_step(w, w->b, s);
            }
            if (w->stray && (w->flags & LB_REDIS_KEPT_CONN)) {
                /* the caller prepared that connection: it resends after its own checks */
                char at[160];
                where(w, at, sizeof at);
                w->stray = 0;
                lb_redis_status st = lb_error_set(&w->base.err, LB_REDIS_ERR_IO,
                                                  "the connection to Redis at %s had unexpected "
                                                  "input pending (a late reply?) and was discarded",
                                                  at);
                w->base.err.stale = 1;
                return over(w, st);
            }
            w->stray = 0;
            w->fresh = 1;
            if (sentinel_mode(w)) {
                if (w->walking)
                    lb_sentinel_walk_free(&w->walk);
                lb_sentinel_walk_init(&w->walk, &w->cfg);
                w->walking = 1;
                w->phase = X_WALK;
                continue;
            }
            w->phase = X_CONNECT;
            s->what = LB_WIRE_CONNECT;
            s->cfg = &w->cfg;
            return 1;
        case X_WALK: {
            const lb_redis_config *scfg;
            const lb_redis_batch *req;
            if (lb_sentinel_walk_next(&w->walk, &scfg, &req)) {
                wire_free(w->probe ? &w->probe->base : NULL);
                lb_redis *p = wire_new(scfg, 0, 0);
                w->probe = p ? WIRE(p) : NULL;
                if (!p || lb_wire_exec_begin(p, req, LB_REDIS_RAW_ERRORS) != LB_REDIS_OK) {
                    lb_sentinel_walk_answer(&w->walk, LB_REDIS_ERR_NOMEM, "out of memory", NULL);
                    continue;
                }
                w->phase = X_PROBE;
                continue;
            }
            char *host = NULL, err[512];
            int port = 0;
            lb_redis_status st = lb_sentinel_walk_result(&w->walk, &host, &port, err, sizeof err);
            lb_sentinel_walk_free(&w->walk);
            w->walking = 0;
            if (st != LB_REDIS_OK)
                return over(w, lb_error_set(&w->base.err, st, "%s", err));
            free(w->cfg.host);
            w->cfg.host = host;
            w->cfg.port = port;
            w->phase = X_CONNECT;
            s->what = LB_WIRE_CONNECT;
            s->cfg = &w->cfg;
            return 1;
        }
        case X_PROBE: {
            int k = probe_next(w, s);
            if (k >= 0)
                return k;
            continue;
        }
        case X_CONNECT: /* a step is out: nothing to do until it is answered */
        case X_HS:
        case X_ROLE:
        case X_BATCH:
            if (!w->sending && w->phase != X_CONNECT)
                return send_step(w, w->phase == X_HS     ? &w->hs
                                    : w->phase == X_ROLE ? &w->role
                                                         : w->b,
                                 s);
            return over(w, lb_error_set(&w->base.err, LB_REDIS_ERR_ARG,
                                        "a step of the round trip is still out"));
        default:
            return 0;
        }
    }
}

/* After a connection that did not work (sentinel): again, 200 ms later, a few times. */
static void retry_sentinel(lb_wire *w, lb_redis_status st)
{
    if (st == LB_REDIS_ERR_CONNECT && sentinel_mode(w) && ++w->tries < 5) {
        w->phase = X_START;
        w->pause = 200;
        return;
    }
    over(w, st);
}

void lb_wire_exec_connected(lb_redis *r, lb_redis_status st, const char *text)
{
    lb_wire *w = WIRE(r);
    if (!lb_wire_is(r))
        return;
    if (w->phase == X_PROBE) {
        lb_wire_exec_connected(&w->probe->base, st, text);
        return;
    }
    if (w->phase != X_CONNECT)
        return;
    if (st != LB_REDIS_OK) {
        lb_error_set(&w->base.err, st, "%s", text ? text : "cannot connect");
        retry_sentinel(w, st);
        return;
    }
    st = lb_wire_opened(r);
    if (st != LB_REDIS_OK) {
        over(w, st);
        return;
    }
    lb_session_handshake(&w->s, &w->hs);
    if (w->hs.failed) {
        drop(w);
        over(w, lb_error_set(&w->base.err, LB_REDIS_ERR_NOMEM, "out of memory building the handshake"));
        return;
    }
    if (w->hs.ncmds) {
        w->phase = X_HS;
    } else if (sentinel_mode(w)) {
        lb_sentinel_role_request(&w->role);
        w->phase = X_ROLE;
    } else {
        w->phase = X_BATCH;
    }
}

lb_redis_status lb_wire_exec_feed(lb_redis *r, const void *data, size_t len, int *complete)
{
    lb_wire *w = WIRE(r);
    *complete = 0;
    if (!lb_wire_is(r))
        return lb_error_set(&r->err, LB_REDIS_ERR_ARG, "not a connection of an outside transport");
    if (w->phase == X_PROBE)
        return lb_wire_exec_feed(&w->probe->base, data, len, complete);
    if (!w->sending)
        return lb_error_set(&r->err, LB_REDIS_ERR_PROTOCOL,
                            "protocol error: input nobody asked for");
    return lb_session_feed(&w->s, data, len, complete);
}

static void batch_done(lb_wire *w, lb_redis_status st)
{
    if (st != LB_REDIS_OK) {
        size_t received = lb_session_received(&w->s);
        drop(w);
        w->base.err.stale = st == LB_REDIS_ERR_IO && !w->fresh && received == 0;
        if (w->base.err.stale && (w->flags & LB_REDIS_IDEMPOTENT) && w->attempt == 0) {
            w->attempt++; /* a stale connection: once more on a new one */
            w->phase = X_START;
            return;
        }
        over(w, st);
        return;
    }
    if (w->cfg.sentinel_service && lb_session_demoted(w->s.replies, w->b->ncmds)) {
        /* a primary that a failover demoted refused the writes: not done */
        drop(w);
        if ((w->flags & LB_REDIS_IDEMPOTENT) && w->attempt < 2) {
            w->attempt++;
            w->phase = X_START;
            return;
        }
        if (w->flags & LB_REDIS_KEPT_CONN) {
            char at[160];
            where(w, at, sizeof at);
            over(w, lb_error_set(&w->base.err, LB_REDIS_ERR_IO,
                                 "Redis at %s is no longer the primary of '%s' (READONLY): "
                                 "connection dropped",
                                 at, w->cfg.sentinel_service));
            w->base.err.stale = 1;
            return;
        }
    }
    w->base.err.stale = 0;
    w->rs = w->s.replies;
    st = lb_session_errors(&w->base.err, w->s.replies, w->nuser, w->flags);
    if (st == LB_REDIS_OK && w->nuser != w->b->ncmds) {
        int bad;
        st = lb_session_wait_check(&w->s, w->nuser, &bad); /* how many replicas have the writes */
        if (bad)
            drop(w);
    }
    over(w, st);
}

void lb_wire_exec_sent(lb_redis *r, lb_redis_status st, const char *text)
{
    lb_wire *w = WIRE(r);
    if (!lb_wire_is(r))
        return;
    if (w->phase == X_PROBE) {
        lb_wire_exec_sent(&w->probe->base, st, text);
        return;
    }
    if (!w->sending)
        return;
    w->sending = 0;
    if (st != LB_REDIS_OK && text)
        lb_error_set(&w->base.err, st, "%s", text);
    if (st == LB_REDIS_OK && (w->s.failed || w->s.got != w->s.n))
        st = lb_error_set(&w->base.err, LB_REDIS_ERR_IO, "the round trip is not complete");
    char at[160];
    switch (w->phase) {
    case X_HS:
        if (st == LB_REDIS_OK)
            st = lb_session_handshake_check(&w->s, w->s.replies);
        if (st != LB_REDIS_OK) {
            drop(w); /* as a blocking connect drops a failed handshake */
            over(w, st);
        } else if (sentinel_mode(w)) {
            lb_sentinel_role_request(&w->role);
            w->phase = X_ROLE;
        } else {
            w->phase = X_BATCH;
        }
        return;
    case X_ROLE: {
        if (st != LB_REDIS_OK) {
            drop(w);
            over(w, st);
            return;
        }
        where(w, at, sizeof at);
        int m = lb_sentinel_role_is_master(w->s.replies[0]);
        if (m > 0) {
            w->phase = X_BATCH;
            return;
        }
        drop(w);
        if (m < 0) {
            over(w, lb_error_set(&w->base.err, LB_REDIS_ERR_PROTOCOL,
                                 "protocol error: Redis at %s answered ROLE with something other "
                                 "than a role; connection dropped", at));
            return;
        }
        st = lb_error_set(&w->base.err, LB_REDIS_ERR_CONNECT,
                          "the sentinels named %s as the primary of '%s', but it is not a "
                          "master (a failover in progress?)",
                          at, w->cfg.sentinel_service);
        retry_sentinel(w, st);
        return;
    }
    case X_BATCH:
        batch_done(w, st);
        return;
    default:
        return;
    }
}

lb_redis_status lb_wire_exec_end(lb_redis *r, lb_reply ***replies)
{
    lb_wire *w = WIRE(r);
    *replies = NULL;
    if (!lb_wire_is(r))
        return lb_error_set(&r->err, LB_REDIS_ERR_ARG, "not a connection of an outside transport");
    if (w->phase != X_OVER)
        return lb_error_set(&r->err, LB_REDIS_ERR_ARG, "the round trip is not over");
    w->phase = X_IDLE;
    *replies = w->rs;
    return w->st;
}

lb_redis_status lb_wire_opened(lb_redis *r)
{
    if (!lb_wire_is(r))
        return lb_error_set(&r->err, LB_REDIS_ERR_ARG, "not a connection of an outside transport");
    lb_wire *w = WIRE(r);
    lb_session_closed(&w->s);
    lb_redis_status st = lb_session_opened(&w->s);
    if (st != LB_REDIS_OK)
        return st;
    w->pid = getpid();
    w->connects++;
    return LB_REDIS_OK;
}

int lb_wire_is_open(const lb_redis *r, int probe)
{
    if (!lb_wire_is(r))
        return 0;
    const lb_wire *w = WIRE(r);
    if (probe)
        return w->probe && lb_wire_is_open(&w->probe->base, 0);
    return w->s.open && w->pid == getpid();
}

void lb_wire_closed(lb_redis *r)
{
    if (lb_wire_is(r))
        drop(WIRE(r));
}

void lb_wire_out_of_step(lb_redis *r)
{
    if (!lb_wire_is(r))
        return;
    drop(WIRE(r));
    WIRE(r)->stray = 1;
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
