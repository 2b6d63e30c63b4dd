/* session.c: see session.h. */
#include "session.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "reply.h"

int lb_session_init(lb_session *s, const lb_redis_config *cfg, lb_redis_error *err)
{
    memset(s, 0, sizeof *s);
    s->cfg = cfg;
    s->err = err;
    s->hs_auth = s->hs_sel = -1;
    lb_redis_batch_init(&s->waitb);
    s->reader = lb_resp_reader_new();
    return s->reader ? 0 : -1;
}

void lb_session_fini(lb_session *s)
{
    lb_resp_reader_free(s->reader);
    free(s->replies);
    lb_redis_batch_free(&s->waitb);
    memset(s, 0, sizeof *s);
}

static void where(const lb_session *s, char *buf, size_t n)
{
    lb_redis_config_where(s->cfg, buf, n);
}

lb_redis_status lb_session_opened(lb_session *s)
{
    if (lb_resp_reader_reset(s->reader) < 0)
        return lb_error_set(s->err, LB_REDIS_ERR_NOMEM, "out of memory for a reply reader");
    s->open = 1;
    s->n = s->got = 0;
    s->failed = 0;
    s->hs_done = 0;
    return LB_REDIS_OK;
}

void lb_session_closed(lb_session *s)
{
    s->open = 0;
    s->n = s->got = 0;
}

/* -------------------------------------------------------------- handshake */

void lb_session_handshake(lb_session *s, lb_redis_batch *hb)
{
    const lb_redis_config *c = s->cfg;
    int n = 0;
    s->hs_auth = s->hs_sel = -1;
    lb_redis_batch_clear(hb);
    if (c->password || c->username) {
        if (c->username) {
            lb_redis_batch_cmd(hb, 3);
            lb_redis_batch_arg_str(hb, "AUTH");
            lb_redis_batch_arg_str(hb, c->username);
            lb_redis_batch_arg_str(hb, c->password ? c->password : "");
        } else {
            lb_redis_batch_cmd(hb, 2);
            lb_redis_batch_arg_str(hb, "AUTH");
            lb_redis_batch_arg_str(hb, c->password);
        }
        s->hs_auth = n++;
    }
    if (c->db != 0) {
        lb_redis_batch_cmd(hb, 2);
        lb_redis_batch_arg_str(hb, "SELECT");
        lb_redis_batch_arg_u64(hb, (uint64_t)c->db);
        s->hs_sel = n++;
    }
    /* AUTH and SELECT answer no array, and a status or an error text each */
    lb_redis_batch_expect_elements(hb, 0);
    lb_redis_batch_expect_bytes(hb, 0);
    if (hb->ncmds == 0)
        s->hs_done = 1;
}

/* AUTH and SELECT must answer +OK. */
lb_redis_status lb_session_handshake_check(lb_session *s, lb_reply **hr)
{
    const lb_redis_config *c = s->cfg;
    const int auth = s->hs_auth, sel = s->hs_sel;
    char w[160];
    where(s, w, sizeof w);
    if (auth >= 0 && hr[auth]->type == LB_REPLY_ERROR)
        return lb_error_set(s->err, LB_REDIS_ERR_AUTH, "Redis at %s refused AUTH%s%s: %s", w,
                            c->username ? " for user " : "", c->username ? c->username : "",
                            hr[auth]->str);
    if (sel >= 0 && hr[sel]->type == LB_REPLY_ERROR)
        return lb_error_set(s->err, LB_REDIS_ERR_REPLY, "SELECT %d failed on Redis at %s: %s",
                            c->db, w, hr[sel]->str);
    if ((auth >= 0 && !lb_reply_status_is(hr[auth], "OK")) ||
        (sel >= 0 && !lb_reply_status_is(hr[sel], "OK")))
        return lb_error_set(s->err, LB_REDIS_ERR_PROTOCOL,
                            "protocol error: Redis at %s answered %s with something other "
                            "than OK; connection dropped",
                            w, auth >= 0 && !lb_reply_status_is(hr[auth], "OK") ? "AUTH"
                                                                               : "SELECT");
    s->hs_done = 1;
    return LB_REDIS_OK;
}

/* ------------------------------------------------------------ round trips */

void lb_session_bounds(const lb_redis_batch *b, size_t *max_elements, size_t *max_bytes)
{
    *max_elements = b->max_set ? b->max_elements : LB_REDIS_DEFAULT_MAX_ELEMENTS;
    *max_bytes = 0;
    if (b->bytes_set) {
        size_t slack =
            b->ncmds > SIZE_MAX / LB_REDIS_REPLY_SLACK ? SIZE_MAX : b->ncmds * LB_REDIS_REPLY_SLACK;
        *max_bytes = b->max_bytes > SIZE_MAX - slack ? SIZE_MAX : b->max_bytes + slack;
    }
}

/* Room for n top-level replies. */
static lb_redis_status replies_reserve(lb_session *s, size_t n)
{
    if (s->replies_cap < n || s->replies_cap > n * 4 + 1024) {
        lb_reply **nr = realloc(s->replies, (n ? n : 1) * sizeof *nr);
        if (!nr)
            return lb_error_set(s->err, LB_REDIS_ERR_NOMEM, "out of memory for %zu replies", n);
        s->replies = nr;
        s->replies_cap = n;
    }
    return LB_REDIS_OK;
}

lb_redis_status lb_session_begin_n(lb_session *s, size_t n, size_t max_elements,
                                   size_t max_bytes)
{
    if (s->n != s->got || lb_resp_reader_pending(s->reader))
        /* replies of an earlier request still owed, or input nobody asked for */
        return lb_error_set(s->err, LB_REDIS_ERR_IO,
                            "the connection to Redis is out of step (input pending); "
                            "it must be dropped");
    if (replies_reserve(s, n) != LB_REDIS_OK)
        return s->err->status;
    lb_resp_reader_start(s->reader, max_elements, max_bytes);
    s->roundtrips++;
    s->n = n;
    s->got = 0;
    s->failed = 0;
    return LB_REDIS_OK;
}

lb_redis_status lb_session_begin(lb_session *s, const lb_redis_batch *b)
{
    size_t me, mb;
    lb_redis_status st = lb_redis_batch_check(b, s->err);
    if (st != LB_REDIS_OK)
        return st;
    lb_session_bounds(b, &me, &mb);
    return lb_session_begin_n(s, b->ncmds, me, mb);
}

lb_redis_status lb_session_more_replies(lb_session *s)
{
    char w[160];
    where(s, w, sizeof w);
    return lb_error_set(s->err, LB_REDIS_ERR_PROTOCOL,
                        "protocol error: Redis at %s sent more replies than commands", w);
}

lb_redis_status lb_session_feed(lb_session *s, const void *data, size_t len, int *complete)
{
    char w[160], why[240];
    lb_redis_status st;
    *complete = 0;
    if (!s->open || s->failed)
        return lb_error_set(s->err, LB_REDIS_ERR_IO, "no round trip is waiting for replies");
    if (s->got == s->n) {
        s->failed = 1;
        return len ? lb_session_more_replies(s) : LB_REDIS_OK;
    }
    if (len && (st = lb_resp_reader_feed(s->reader, data, len, why, sizeof why)) != LB_REDIS_OK) {
        s->failed = 1;
        where(s, w, sizeof w);
        if (st == LB_REDIS_ERR_NOMEM)
            return lb_error_set(s->err, st, "%s", why);
        return lb_error_set(s->err, st,
                            "protocol error: Redis at %s sent more reply bytes than the commands "
                            "sent can answer (%s)",
                            w, why);
    }
    st = lb_resp_reader_take(s->reader, s->n, s->replies, &s->got, why, sizeof why);
    if (st == LB_REDIS_OK && s->got == s->n && lb_resp_reader_pending(s->reader))
        st = lb_session_more_replies(s);
    else if (st != LB_REDIS_OK) {
        where(s, w, sizeof w);
        if (st == LB_REDIS_ERR_NOMEM)
            lb_error_set(s->err, st, "%s (from Redis at %s)", why, w);
        else
            lb_error_set(s->err, st, "protocol error from Redis at %s: %s", w, why);
    }
    if (st != LB_REDIS_OK) {
        s->failed = 1;
        return st;
    }
    *complete = s->got == s->n;
    return LB_REDIS_OK;
}

int lb_session_pending(const lb_session *s)
{
    return lb_resp_reader_pending(s->reader);
}

size_t lb_session_received(const lb_session *s)
{
    return lb_resp_reader_received(s->reader);
}

lb_redis_status lb_session_closed_error(lb_session *s, const char *where)
{
    /* the last reply read, when it is an error: what the server said before it
     * closed (a server at its maxclients writes its error, then closes) */
    const lb_reply *last = s->got > 0 && s->replies ? s->replies[s->got - 1] : NULL;
    if (last && last->type == LB_REPLY_ERROR && last->str) {
        char said[200];
        return lb_error_set(s->err, LB_REDIS_ERR_IO,
                            "connection to Redis at %s closed by the server (%zu of %zu "
                            "replies read; it answered: %s)",
                            where, s->got, s->n, lb_redis_show(last->str, last->len, said,
                                                               sizeof said));
    }
    return lb_error_set(s->err, LB_REDIS_ERR_IO,
                        "connection to Redis at %s closed by the server (%zu of %zu "
                        "replies read)",
                        where, s->got, s->n);
}

/* ---------------------------------------------------------------- replies */

lb_redis_status lb_session_errors(lb_redis_error *e, lb_reply **rs, size_t n, int flags)
{
    if (flags & LB_REDIS_RAW_ERRORS)
        return LB_REDIS_OK;
    for (size_t i = 0; i < n; i++) {
        const lb_reply *x = rs[i];
        if (x->type == LB_REPLY_ERROR) {
            e->index = (long)i;
            int wt = x->len >= 9 && memcmp(x->str, "WRONGTYPE", 9) == 0;
            return lb_error_set(e, wt ? LB_REDIS_ERR_WRONGTYPE : LB_REDIS_ERR_REPLY, "%s", x->str);
        }
    }
    return LB_REDIS_OK;
}

lb_redis_status lb_session_with_wait(lb_session *s, const lb_redis_batch *b,
                                     const lb_redis_batch **out)
{
    *out = b;
    if (s->cfg->wait_replicas <= 0)
        return LB_REDIS_OK;
    lb_redis_batch *w = &s->waitb;
    lb_redis_batch_clear(w);
    if (lb_redis_batch_reserve(w, b->len + 64) == 0) {
        memcpy(w->buf, b->buf, b->len);
        w->len = b->len;
        w->ncmds = b->ncmds;
    }
    w->max_elements = b->max_elements;
    w->max_set = b->max_set;
    w->max_bytes = b->max_bytes;
    w->bytes_set = b->bytes_set;
    lb_redis_batch_cmd(w, 3);
    lb_redis_batch_arg(w, "WAIT", 4);
    lb_redis_batch_arg_u64(w, (uint64_t)s->cfg->wait_replicas);
    lb_redis_batch_arg_u64(w, (uint64_t)s->cfg->wait_timeout_ms);
    if (w->failed)
        return lb_error_set(s->err, LB_REDIS_ERR_NOMEM, "out of memory building a Redis batch");
    *out = w;
    return LB_REDIS_OK;
}

lb_redis_status lb_session_wait_check(lb_session *s, size_t nuser, int *drop)
{
    const lb_reply *x = s->replies[nuser];
    char w[160];
    *drop = 0;
    /* Every command refused (a cluster's -MOVED from a primary a failover demoted, whose
     * WAIT then fails too): nothing was written, so there is nothing to wait for; the
     * refusals are the answer (a cluster client sends the batch where it belongs). */
    size_t refused = 0;
    while (refused < nuser && s->replies[refused]->type == LB_REPLY_ERROR)
        refused++;
    if (nuser > 0 && refused == nuser)
        return LB_REDIS_OK;
    where(s, w, sizeof w);
    if (x->type == LB_REPLY_ERROR)
        return lb_error_set(s->err, LB_REDIS_ERR_REPLY, "WAIT refused by Redis at %s: %s", w,
                            x->str);
    if (x->type != LB_REPLY_INTEGER || x->integer < 0) {
        *drop = 1;
        return lb_error_set(s->err, LB_REDIS_ERR_PROTOCOL,
                            "protocol error: Redis at %s answered WAIT with something other "
                            "than a count; connection dropped", w);
    }
    if (x->integer < s->cfg->wait_replicas)
        return lb_error_set(s->err, LB_REDIS_ERR_TIMEOUT,
                            "the writes are done on Redis at %s, but only %lld of the %d "
                            "replicas asked for (wait_replicas) acknowledged them within %d ms: "
                            "they may be lost if that primary fails now",
                            w, x->integer, s->cfg->wait_replicas, s->cfg->wait_timeout_ms);
    return LB_REDIS_OK;
}

int lb_session_demoted(lb_reply **rs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const lb_reply *x = rs[i];
        if (x->type == LB_REPLY_ERROR && x->str &&
            (strncmp(x->str, "READONLY", 8) == 0 || strncmp(x->str, "MASTERDOWN", 10) == 0))
            return 1;
    }
    return 0;
}
