/* conn.c: see conn.h.  The only place a connection's rules are written. */
#define _POSIX_C_SOURCE 200809L
#include "conn.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The phases of a round trip. */
enum { X_IDLE, X_START, X_WALK, X_PROBE, X_CONNECT, X_HS, X_ROLE, X_BATCH, X_OVER };

/* The one-off connection to a sentinel: a machine of its own, with its own
 * error state (its text is the walk's). */
struct lb_conn_probe {
    lb_conn c;
    lb_redis_error err;
};

int lb_conn_init(lb_conn *c, const lb_redis_config *cfg, lb_redis_error *err)
{
    c->err = err;
    lb_redis_batch_init(&c->hs);
    lb_redis_batch_init(&c->role);
    if (lb_redis_config_copy(&c->cfg, cfg) != LB_REDIS_OK)
        return -1; /* the copy is left empty */
    return lb_session_init(&c->s, &c->cfg, err);
}

static void probe_free(lb_conn_probe *p)
{
    if (!p)
        return;
    lb_conn_fini(&p->c);
    free(p);
}

void lb_conn_fini(lb_conn *c)
{
    if (c->walking)
        lb_sentinel_walk_free(&c->walk);
    c->walking = 0;
    probe_free(c->probe);
    c->probe = NULL;
    lb_session_fini(&c->s);
    lb_redis_batch_free(&c->hs);
    lb_redis_batch_free(&c->role);
    lb_redis_config_free(&c->cfg);
}

static void where(const lb_conn *c, char *buf, size_t len)
{
    lb_redis_config_where(&c->cfg, buf, len);
}

/* Forget the connection (the driver closes its socket: lb_conn_is_open). */
static void drop(lb_conn *c)
{
    lb_session_closed(&c->s);
}

static int sentinel_mode(const lb_conn *c)
{
    return c->cfg.sentinel_service && !c->cfg.unix_path;
}

static int over(lb_conn *c, lb_redis_status st)
{
    c->st = st;
    c->phase = X_OVER;
    return 0;
}

/* The connection is ready: the batch goes next (none: the round trip is over). */
static void ready(lb_conn *c)
{
    if (c->b)
        c->phase = X_BATCH;
    else
        over(c, LB_REDIS_OK);
}

lb_redis_status lb_conn_begin(lb_conn *c, const lb_redis_batch *b, int flags)
{
    lb_error_clear(c->err);
    c->rs = NULL;
    c->sending = 0;
    c->attempt = c->tries = c->fresh = c->pause = 0;
    c->b = b;
    c->flags = flags;
    c->nuser = b ? b->ncmds : 0;
    lb_redis_status st = b ? lb_redis_batch_check(b, c->err) : LB_REDIS_OK;
    if (st == LB_REDIS_OK && b && b->ncmds == 0)
        st = lb_error_set(c->err, LB_REDIS_ERR_ARG,
                          "malformed Redis batch (argument count does not match)");
    if (st == LB_REDIS_OK && b && (flags & LB_REDIS_WRITE))
        st = lb_session_with_wait(&c->s, b, &c->b);
    if (st != LB_REDIS_OK) {
        over(c, st);
        return st;
    }
    c->phase = X_START;
    return LB_REDIS_OK;
}

/* A SEND step of batch b on the open connection. */
static int send_step(lb_conn *c, const lb_redis_batch *b, lb_redis_step *s)
{
    lb_redis_status st = lb_session_begin(&c->s, b);
    if (st != LB_REDIS_OK) {
        drop(c);
        return over(c, st);
    }
    s->what = LB_STEP_SEND;
    s->cfg = &c->cfg;
    s->req = b;
    c->sending = 1;
    return 1;
}

static int connect_step(lb_conn *c, lb_redis_step *s)
{
    c->phase = X_CONNECT;
    s->what = LB_STEP_CONNECT;
    s->cfg = &c->cfg;
    return 1;
}

/* The one-off connection to a sentinel: its own round trip, the walk's
 * question.  1 with a step of it; -1 when it is over (answered). */
static int probe_next(lb_conn *c, lb_redis_step *s)
{
    lb_conn *p = &c->probe->c;
    if (lb_conn_next(p, s)) {
        s->probe = 1;
        return 1;
    }
    lb_reply **rs = NULL;
    lb_redis_status st = lb_conn_end(p, &rs);
    lb_sentinel_walk_answer(&c->walk, st, c->probe->err.text, st == LB_REDIS_OK ? rs[0] : NULL);
    drop(p); /* asked once: the driver closes it */
    c->phase = X_WALK;
    return -1;
}

/* A new connection is due: through the sentinels, or to the configured server. */
static int start(lb_conn *c, lb_redis_step *s)
{
    if (c->pause) {
        s->what = LB_STEP_PAUSE;
        s->pause_ms = c->pause;
        c->pause = 0;
        return 1;
    }
    if (c->s.open && c->pid != getpid())
        drop(c); /* opened by the parent of a fork: never used here */
    if (c->s.open) {
        c->fresh = 0;
        ready(c);
        return c->b ? send_step(c, c->b, s) : 0;
    }
    if (c->stray && (c->flags & LB_REDIS_KEPT_CONN)) {
        /* the caller prepared that connection: it resends after its own checks */
        char at[160];
        where(c, at, sizeof at);
        c->stray = 0;
        lb_redis_status st = lb_error_set(c->err, LB_REDIS_ERR_IO,
                                          "the connection to Redis at %s had unexpected "
                                          "input pending (a late reply?) and was discarded",
                                          at);
        c->err->stale = 1;
        return over(c, st);
    }
    c->stray = 0;
    c->fresh = 1;
    if (sentinel_mode(c)) {
        if (c->walking)
            lb_sentinel_walk_free(&c->walk);
        lb_sentinel_walk_init(&c->walk, &c->cfg);
        c->walking = 1;
        c->phase = X_WALK;
        return -1;
    }
    return connect_step(c, s);
}

/* The walk over the sentinels: the next one to ask (-1: go on), or connect
 * to the primary found. */
static int walk(lb_conn *c, lb_redis_step *s)
{
    const lb_redis_config *scfg;
    const lb_redis_batch *req;
    if (lb_sentinel_walk_next(&c->walk, &scfg, &req)) {
        probe_free(c->probe);
        c->probe = calloc(1, sizeof *c->probe);
        if (!c->probe || lb_conn_init(&c->probe->c, scfg, &c->probe->err) < 0 ||
            lb_conn_begin(&c->probe->c, req, LB_REDIS_RAW_ERRORS) != LB_REDIS_OK) {
            probe_free(c->probe);
            c->probe = NULL;
            lb_sentinel_walk_answer(&c->walk, LB_REDIS_ERR_NOMEM, "out of memory", NULL);
            return -1;
        }
        c->phase = X_PROBE;
        return -1;
    }
    char *host = NULL, err[512];
    int port = 0;
    lb_redis_status st = lb_sentinel_walk_result(&c->walk, &host, &port, err, sizeof err);
    lb_sentinel_walk_free(&c->walk);
    c->walking = 0;
    if (st != LB_REDIS_OK)
        return over(c, lb_error_set(c->err, st, "%s", err));
    free(c->cfg.host);
    c->cfg.host = host;
    c->cfg.port = port;
    return connect_step(c, s);
}

int lb_conn_next(lb_conn *c, lb_redis_step *s)
{
    memset(s, 0, sizeof *s);
    for (;;) {
        int k;
        switch (c->phase) {
        case X_START:
            k = start(c, s);
            break;
        case X_WALK:
            k = walk(c, s);
            break;
        case X_PROBE:
            k = probe_next(c, s);
            break;
        case X_CONNECT: /* a step is out: nothing to do until it is answered */
        case X_HS:
        case X_ROLE:
        case X_BATCH:
            if (!c->sending && c->phase != X_CONNECT)
                return send_step(c, c->phase == X_HS     ? &c->hs
                                    : c->phase == X_ROLE ? &c->role
                                                         : c->b,
                                 s);
            return over(c, lb_error_set(c->err, LB_REDIS_ERR_ARG,
                                        "a step of the round trip is still out"));
        default:
            return 0;
        }
        if (k >= 0)
            return k;
    }
}

/* After a connection that did not work (sentinel): again, a little later, a few times. */
static void retry_sentinel(lb_conn *c, lb_redis_status st)
{
    if (st == LB_REDIS_ERR_CONNECT && sentinel_mode(c) && ++c->tries < LB_CONN_SENTINEL_TRIES) {
        c->phase = X_START;
        c->pause = LB_CONN_SENTINEL_PAUSE_MS;
        return;
    }
    over(c, st);
}

/* The handshake is done (or none was due): ROLE next (sentinel), else ready. */
static void handshaken(lb_conn *c)
{
    if (sentinel_mode(c)) {
        lb_sentinel_role_request(&c->role);
        c->phase = X_ROLE;
    } else {
        ready(c);
    }
}

void lb_conn_connected(lb_conn *c, lb_redis_status st, const char *text)
{
    if (c->phase == X_PROBE) {
        lb_conn_connected(&c->probe->c, st, text);
        return;
    }
    if (c->phase != X_CONNECT)
        return;
    if (st != LB_REDIS_OK) {
        if (text)
            lb_error_set(c->err, st, "%s", text);
        retry_sentinel(c, st);
        return;
    }
    st = lb_conn_opened(c);
    if (st != LB_REDIS_OK) {
        over(c, st);
        return;
    }
    lb_session_handshake(&c->s, &c->hs);
    if (c->hs.failed) {
        drop(c);
        over(c, lb_error_set(c->err, LB_REDIS_ERR_NOMEM, "out of memory building the handshake"));
        return;
    }
    if (c->hs.ncmds)
        c->phase = X_HS;
    else
        handshaken(c);
}

lb_redis_status lb_conn_feed(lb_conn *c, const void *data, size_t len, int *complete)
{
    *complete = 0;
    if (c->phase == X_PROBE)
        return lb_conn_feed(&c->probe->c, data, len, complete);
    if (!c->sending)
        return lb_error_set(c->err, LB_REDIS_ERR_PROTOCOL, "protocol error: input nobody asked for");
    return lb_session_feed(&c->s, data, len, complete);
}

/* A demoted primary refused the batch's writes (-READONLY, sentinel): not
 * done.  1 when the round trip goes on (a resend, or the replies as they are). */
static int demoted(lb_conn *c)
{
    drop(c);
    if ((c->flags & LB_REDIS_IDEMPOTENT) && c->attempt < LB_CONN_DEMOTED_RESENDS) {
        c->attempt++;
        c->phase = X_START;
        return 0;
    }
    if (c->flags & LB_REDIS_KEPT_CONN) {
        /* The caller resends on a new connection itself, after its own
         * checks (RedisFilter's meta key), as for a stale connection. */
        char at[160];
        where(c, at, sizeof at);
        over(c, lb_error_set(c->err, LB_REDIS_ERR_IO,
                             "Redis at %s is no longer the primary of '%s' (READONLY): "
                             "connection dropped",
                             at, c->cfg.sentinel_service));
        c->err->stale = 1;
        return 0;
    }
    return 1;
}

static void batch_done(lb_conn *c, lb_redis_status st)
{
    if (st != LB_REDIS_OK) {
        size_t received = lb_session_received(&c->s);
        drop(c);
        c->err->stale = st == LB_REDIS_ERR_IO && !c->fresh && received == 0;
        if (c->err->stale && (c->flags & LB_REDIS_IDEMPOTENT) &&
            c->attempt < LB_CONN_STALE_RESENDS) {
            c->attempt++; /* a stale connection: once more on a new one */
            c->phase = X_START;
            return;
        }
        over(c, st);
        return;
    }
    if (c->cfg.sentinel_service && lb_session_demoted(c->s.replies, c->b->ncmds) && !demoted(c))
        return;
    c->err->stale = 0;
    c->rs = c->s.replies;
    st = lb_session_errors(c->err, c->s.replies, c->nuser, c->flags);
    if (st == LB_REDIS_OK && c->nuser != c->b->ncmds) {
        int bad;
        st = lb_session_wait_check(&c->s, c->nuser, &bad); /* how many replicas have the writes */
        if (bad)
            drop(c);
    }
    over(c, st);
}

/* ROLE's reply (sentinel): a master, or drop it (not one: try again). */
static void role_done(lb_conn *c, lb_redis_status st)
{
    if (st != LB_REDIS_OK) {
        drop(c);
        over(c, st);
        return;
    }
    int m = lb_sentinel_role_is_master(c->s.replies[0]);
    if (m > 0) {
        ready(c);
        return;
    }
    char at[160];
    where(c, at, sizeof at);
    drop(c);
    if (m < 0) {
        over(c, lb_error_set(c->err, LB_REDIS_ERR_PROTOCOL,
                             "protocol error: Redis at %s answered ROLE with something other "
                             "than a role; connection dropped", at));
        return;
    }
    st = lb_error_set(c->err, LB_REDIS_ERR_CONNECT,
                      "the sentinels named %s as the primary of '%s', but it is not a "
                      "master (a failover in progress?)",
                      at, c->cfg.sentinel_service);
    retry_sentinel(c, st);
}

void lb_conn_sent(lb_conn *c, lb_redis_status st, const char *text)
{
    if (c->phase == X_PROBE) {
        lb_conn_sent(&c->probe->c, st, text);
        return;
    }
    if (!c->sending)
        return;
    c->sending = 0;
    if (st != LB_REDIS_OK && text)
        lb_error_set(c->err, st, "%s", text);
    if (st == LB_REDIS_OK && (c->s.failed || c->s.got != c->s.n))
        st = lb_error_set(c->err, LB_REDIS_ERR_IO, "the round trip is not complete");
    switch (c->phase) {
    case X_HS:
        if (st == LB_REDIS_OK)
            st = lb_session_handshake_check(&c->s, c->s.replies);
        if (st != LB_REDIS_OK) {
            drop(c); /* a failed handshake: the connection goes */
            over(c, st);
        } else {
            handshaken(c);
        }
        return;
    case X_ROLE:
        role_done(c, st);
        return;
    case X_BATCH:
        batch_done(c, st);
        return;
    default:
        return;
    }
}

void lb_conn_sent_worded(lb_conn *c, lb_redis_status st)
{
    if (c->phase == X_PROBE) {
        lb_conn_sent_worded(&c->probe->c, st);
        return;
    }
    if (!c->sending)
        return;
    char w[300];
    where(c, w, sizeof w);
    char text[LB_ERRSTR_SIZE];
    if (st == LB_REDIS_ERR_TIMEOUT) {
        snprintf(text, sizeof text,
                 "timeout: Redis at %s did not answer within %d ms (%zu of %zu replies read)",
                 w, c->cfg.timeout_ms, c->s.got, c->s.n);
    } else {
        lb_session_closed_error(&c->s, w); /* its text, as the blocking transport's */
        snprintf(text, sizeof text, "%s", c->s.err->text);
    }
    lb_conn_sent(c, st, text);
}

lb_redis_status lb_conn_end(lb_conn *c, lb_reply ***replies)
{
    *replies = NULL;
    if (c->phase != X_OVER)
        return lb_error_set(c->err, LB_REDIS_ERR_ARG, "the round trip is not over");
    c->phase = X_IDLE;
    *replies = c->rs;
    return c->st;
}

lb_redis_status lb_conn_opened(lb_conn *c)
{
    lb_session_closed(&c->s);
    lb_redis_status st = lb_session_opened(&c->s);
    if (st != LB_REDIS_OK)
        return st;
    c->pid = getpid();
    c->connects++;
    return LB_REDIS_OK;
}

lb_session *lb_conn_session(lb_conn *c, int probe)
{
    return probe && c->probe ? &c->probe->c.s : &c->s;
}

lb_redis_error *lb_conn_error(lb_conn *c, int probe)
{
    return probe && c->probe ? &c->probe->err : c->err;
}

int lb_conn_is_open(const lb_conn *c, int probe)
{
    if (probe)
        return c->probe && lb_conn_is_open(&c->probe->c, 0);
    return c->s.open && c->pid == getpid();
}

void lb_conn_closed(lb_conn *c)
{
    drop(c);
}

void lb_conn_out_of_step(lb_conn *c)
{
    drop(c);
    c->stray = 1;
}
