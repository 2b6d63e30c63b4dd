/* bitmap_guard.c: the guard around every operation of a bitmap filter
 * (bitmap_op.h): the canary that tells a lost filter, the meta key's look and
 * claim on every new connection, and the step machine that runs them before
 * the operation's own round trips (and again after a stale connection). */
#define _POSIX_C_SOURCE 200809L
#include "bitmap_op.h"

#include "maxmemory.h"

#include <stdio.h>
#include <string.h>

/* --------------------------------------------------------------- canary */

/* The bytes of the last part (the part holding bit m - 1). */
static uint64_t last_part_bytes(const lb_bitmap *bm)
{
    return lb_bitmap_bytes(&bm->g) - (bm->nparts - 1) * LB_BITMAP_PART_BYTES;
}

int lb_bitmap_has_canary(const lb_bitmap *bm)
{
    /* a filter with a ttl expires as a whole and is then empty, as documented:
     * no canary; nor is there room past a last part that is a full string */
    return bm->ttl_ms == 0 && last_part_bytes(bm) < LB_BITMAP_PART_BYTES;
}

/* The first bit of the byte after the filter's bytes, in the last part. */
uint64_t lb_bitmap_canary_offset(const lb_bitmap *bm)
{
    return 8 * last_part_bytes(bm);
}

int lb_bitmap_meta_ours(const lb_bitmap *bm, char *buf, size_t cap)
{
    return lb_bitmap_meta_format(&bm->g, bm->blocked, lb_bitmap_has_canary(bm), buf, cap);
}

void lb_bitmap_add_canary_set(lb_bitmap *bm, lb_redis_batch *b)
{
    size_t len;
    const char *n = lb_bitmap_name_of(bm, bm->nparts - 1, &len);
    lb_redis_batch_cmd(b, 4);
    lb_redis_batch_arg(b, "SETBIT", 6);
    lb_redis_batch_arg(b, n, len);
    lb_redis_batch_arg_u64(b, lb_bitmap_canary_offset(bm));
    lb_redis_batch_arg(b, "1", 1);
}

/* GETBIT <last part> <canary> as command ncmd of bm->batch. */
size_t lb_bitmap_add_canary_get(lb_bitmap *bm, size_t ncmd)
{
    size_t len;
    const char *n = lb_bitmap_name_of(bm, bm->nparts - 1, &len);
    lb_redis_batch *b = &bm->batch;
    lb_redis_batch_cmd(b, 3);
    lb_redis_batch_arg(b, "GETBIT", 6);
    lb_redis_batch_arg(b, n, len);
    lb_redis_batch_arg_u64(b, lb_bitmap_canary_offset(bm));
    if (lb_bitmap_cmds_reserve(bm, ncmd + 1))
        return (size_t)-1;
    bm->cmds[ncmd].key = CANARY_GET;
    bm->cmds[ncmd].part = (uint32_t)(bm->nparts - 1);
    bm->cmds[ncmd].nbits = 1;
    bm->cmds[ncmd].canary = 0;
    return ncmd + 1;
}

lb_redis_status lb_bitmap_lost(lb_bitmap *bm, int write)
{
    char kb[160];
    return lb_redis_set_error(bm->conn, LB_REDIS_ERR_LOST,
                              "the filter at Redis key '%s' is gone from the server (restarted "
                              "without its data, flushed, deleted or evicted)%s; it is not "
                              "re-created by a write: reset(), load() or a warm-up rebuilds it",
                              lb_redis_show(bm->key, bm->keylen, kb, sizeof kb),
                              write ? ": this write went into what is left, which other "
                                      "processes see as lost too"
                                    : "");
}

/* ----------------------------------------------------------------- meta */

/* Append the key name to a WRONGTYPE message. */
lb_redis_status lb_bitmap_name_wrongtype(lb_bitmap *bm, uint64_t part)
{
    char msg[300], kb[160];
    size_t len;
    const char *n = lb_bitmap_name_of(bm, part, &len);
    snprintf(msg, sizeof msg, "%s", lb_redis_errstr(bm->conn));
    return lb_redis_set_error(bm->conn, LB_REDIS_ERR_WRONGTYPE, "%s (key '%s')", msg,
                              lb_redis_show(n, len, kb, sizeof kb));
}

void lb_bitmap_add_meta_set(lb_bitmap *bm, lb_redis_batch *b, const char *val, int vlen)
{
    size_t len;
    const char *mn = lb_bitmap_name_of(bm, UINT64_MAX, &len);
    lb_redis_batch_cmd(b, bm->ttl_ms > 0 ? 6 : 4);
    lb_redis_batch_arg(b, "SET", 3);
    lb_redis_batch_arg(b, mn, len);
    lb_redis_batch_arg(b, val, (size_t)vlen);
    lb_redis_batch_arg(b, "NX", 2);
    if (bm->ttl_ms > 0) {
        lb_redis_batch_arg(b, "PX", 2);
        lb_redis_batch_arg_u64(b, (uint64_t)bm->ttl_ms);
    }
}

/* The meta key already there (x: the reply to GET meta, a string): the
 * geometry it holds must be ours. */
static lb_redis_status compare_meta(lb_bitmap *bm, lb_reply **xs, int *canary)
{
    lb_geometry stored;
    int blocked = 0;
    lb_redis_status st = lb_bitmap_meta_reply(bm->conn, bm->key, bm->keylen,
                                              (const lb_reply *const *)xs, &stored, &blocked,
                                              canary);
    if (st != LB_REDIS_OK)
        return st;
    if (stored.m != bm->g.m || stored.k != bm->g.k || stored.scheme != bm->g.scheme ||
        blocked != bm->blocked) {
        char kb[128], a[120], c[120];
        lb_bitmap_describe(&stored, blocked, a, sizeof a);
        lb_bitmap_describe(&bm->g, bm->blocked, c, sizeof c);
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_MISMATCH,
                                  "geometry mismatch at Redis key '%s': stored %s, this filter %s",
                                  lb_redis_show(bm->key, bm->keylen, kb, sizeof kb), a, c);
    }
    return LB_REDIS_OK;
}

/* First round trip of the check, nothing written: EXISTS meta, GETRANGE meta,
 * TYPE key, INFO memory (sent with LB_REDIS_RAW_ERRORS). */
static void build_look(lb_bitmap *bm, lb_redis_batch *b)
{
    lb_bitmap_add_meta_get(bm, b);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "TYPE", 4);
    lb_redis_batch_arg(b, bm->key, bm->keylen);
    lb_maxmemory_cmd(b);
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, LB_MAXMEMORY_INFO_BYTES + LB_BITMAP_META_READ); /* TYPE a word */
}

/* The maxmemory-policy the look's INFO memory names, kept on the client when
 * it can evict this filter's keys (allkeys-*; volatile-* for a filter with a
 * ttl) under a maxmemory: the binding warns about it once. */
static void note_policy(lb_bitmap *bm, const lb_reply *info)
{
    lb_maxmemory_note_policy(bm->conn, info, bm->ttl_ms > 0);
}

/* Its replies.  OK with *claim = 1 when the meta key must be written (a new
 * filter, an adopted bitmap, or a filter of the previous version given its
 * canary), 0 when it is there and matches.  rebuild: the operation may bring
 * a lost filter back (reset, load); the others get LB_REDIS_ERR_LOST when
 * this client knew the filter and nothing at all is there now. */
static lb_redis_status check_look(lb_bitmap *bm, lb_reply **rs, int rebuild, int *claim)
{
    char kb[160];
    lb_redis_status st;
    *claim = 0;
    for (int i = 0; i < 3; i++) {
        if (rs[i]->type != LB_REPLY_ERROR)
            continue;
        const char *t = rs[i]->str ? rs[i]->str : "";
        if (strncmp(t, "WRONGTYPE", 9) != 0)
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_REPLY, "%s", t);
        lb_redis_set_error(bm->conn, LB_REDIS_ERR_WRONGTYPE, "%s", t);
        return lb_bitmap_name_wrongtype(bm, UINT64_MAX); /* GETRANGE of a meta key of another type */
    }
    note_policy(bm, rs[3]);
    if (!(rs[0]->type == LB_REPLY_INTEGER && rs[0]->integer == 0)) {
        int canary = 0;
        st = compare_meta(bm, rs, &canary);
        if (st != LB_REDIS_OK)
            return st;
        /* a meta key without the canary field where this client saw one: an
         * earlier version's write made the filter again after it was lost (a
         * restart), and the upgrade below would have taken what is there as
         * whole */
        if (!canary && bm->saw_canary && lb_bitmap_has_canary(bm) && !rebuild)
            return lb_bitmap_lost(bm, 0);
        bm->known = 1;
        bm->saw_canary |= canary;
        /* a filter of the previous version (no canary yet): given one now; so is
         * a filter whose claim by this client failed midway (its meta written,
         * not its canary) */
        bm->upgrade = *claim = lb_bitmap_has_canary(bm) && (!canary || bm->claiming);
        return LB_REDIS_OK;
    }
    const lb_reply *t = rs[2];
    if ((t->type != LB_REPLY_STATUS && t->type != LB_REPLY_STRING) || !t->str)
        return lb_bitmap_conn_bad_reply(bm->conn, "TYPE of the key");
    lb_redis_show(bm->key, bm->keylen, kb, sizeof kb);
    int missing = t->len == 4 && memcmp(t->str, "none", 4) == 0;
    if (!missing && !(t->len == 6 && memcmp(t->str, "string", 6) == 0)) {
        char tb[64];
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_WRONGTYPE,
                                  "WRONGTYPE the key '%s' holds a %s, not a bitmap (key '%s')",
                                  kb, lb_redis_show(t->str, t->len, tb, sizeof tb), kb);
    }
    if (!missing && !bm->adopt && !bm->claiming) /* claiming: its canary, not its meta, went in */
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOTOWNED,
                                  "the Redis key '%s' exists but has no ling_bloom meta key "
                                  "beside it: this library did not write it, and leaves it "
                                  "alone (to share a bitmap written by another program, "
                                  "such as a Go ling-base service, pass adopt=True with the "
                                  "m, k and hash it was written with)",
                                  kb);
    if (missing && bm->known && lb_bitmap_has_canary(bm) && !rebuild)
        return lb_bitmap_lost(bm, 0); /* never re-created as if nothing happened */
    if (missing) {
        char what[220];
        snprintf(what, sizeof what, "the filter at Redis key '%s'", kb);
        st = lb_maxmemory_check(bm->conn, rs[3], lb_bitmap_bytes(&bm->g), what);
        if (st != LB_REDIS_OK)
            return st;
    }
    bm->upgrade = 0; /* no meta at all: a claim of a new one (SET NX), not an upgrade */
    *claim = 1;
    return LB_REDIS_OK;
}

/* The claim, a second round trip: SET meta <ours> NX [PX ttl], SETBIT of
 * the canary (a filter that has one), then the meta read again.  Of two
 * processes claiming at once, the first wins and the other compares.  The
 * upgrade of a filter of the previous version: SET meta <ours> (its text with
 * the canary field) and the canary. */
static void build_claim(lb_bitmap *bm, lb_redis_batch *b)
{
    char val[160];
    int vlen = lb_bitmap_meta_ours(bm, val, sizeof val);
    if (bm->upgrade) {
        size_t len;
        const char *mn = lb_bitmap_name_of(bm, UINT64_MAX, &len);
        lb_redis_batch_cmd(b, 3);
        lb_redis_batch_arg(b, "SET", 3);
        lb_redis_batch_arg(b, mn, len);
        lb_redis_batch_arg(b, val, (size_t)vlen);
    } else {
        lb_bitmap_add_meta_set(bm, b, val, vlen);
    }
    if (lb_bitmap_has_canary(bm) && !bm->claim_bare)
        lb_bitmap_add_canary_set(bm, b);
    lb_bitmap_add_meta_get(bm, b);
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, LB_BITMAP_META_READ);
}

/* Its replies (st: the status of the round trip, error replies turned into
 * a status). */
static lb_redis_status check_claim(lb_bitmap *bm, lb_redis_status st, lb_reply **rs)
{
    if (st == LB_REDIS_ERR_WRONGTYPE) {
        /* the canary's SETBIT (command 1) names the last part, the rest the meta key */
        int canary = lb_bitmap_has_canary(bm) && !bm->claim_bare;
        return lb_bitmap_name_wrongtype(bm, canary && lb_redis_err_index(bm->conn) == 1
                                                ? bm->nparts - 1
                                                : UINT64_MAX);
    }
    if (st != LB_REDIS_OK)
        return st;
    static const lb_reply_want set_nx = {LB_WANT_OK_OR_NIL, 0, 0};
    if (!lb_reply_fits(rs[0], &set_nx))
        return lb_bitmap_conn_bad_reply(bm->conn, "SET NX of the meta key");
    size_t g = 1;
    if (lb_bitmap_has_canary(bm) && !bm->claim_bare && !lb_reply_is_bit(rs[g++]))
        return lb_bitmap_conn_bad_reply(bm->conn, "SETBIT of the canary");
    if (rs[g]->type == LB_REPLY_INTEGER && rs[g]->integer == 0) /* deleted meanwhile: a reset raced us */
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_REPLY,
                                  "the meta key vanished while being checked (a concurrent "
                                  "reset?); try again");
    int canary = 0;
    st = compare_meta(bm, rs + g, &canary);
    if (st != LB_REDIS_OK)
        return st;
    bm->known = 1;
    bm->saw_canary |= canary;
    bm->upgrade = 0;
    bm->claiming = 0;
    bm->meta_checked = 1;
    bm->meta_conn = lb_redis_connect_count(bm->conn);
    return LB_REDIS_OK;
}

/* ------------------------------------------------------- the step machine */

/* The meta key was checked on the open connection (again after every
 * reconnect: the server may have restarted empty, or this is a forked child). */
static int meta_ok(const lb_bitmap *bm)
{
    return bm->meta_checked && bm->meta_conn == lb_redis_connect_count(bm->conn) &&
           lb_redis_is_connected(bm->conn);
}

/* The guard first (the look, nothing written: GET meta, TYPE key, INFO
 * memory; then, for a new filter or an adopted bitmap, the claim: SET meta
 * NX + GET meta), then the body's round trips. */
static lb_redis_status bm_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    bm_op *o = (bm_op *)op;
    lb_bitmap *bm = o->bm;
    *req = NULL;
    if (o->phase == BM_OVER)
        return LB_REDIS_OK;
    if (o->phase == BM_CLAIM_DUE) {
        lb_redis_batch_clear(&bm->aux);
        /* A load's claim (a filter found gone, or new) writes the meta key
         * only, and the load's last round trip the canary with the last bits:
         * set now, it let every other process find the filter whole and
         * empty while the load ran, and answer "absent" for keys it had */
        bm->claim_bare = o->canary_last && !bm->upgrade;
        build_claim(bm, &bm->aux);
        bm->claiming = lb_bitmap_has_canary(bm) && !bm->claim_bare;
        o->phase = BM_CLAIM;
        *req = &bm->aux;
        *flags = LB_REDIS_IDEMPOTENT;
        return LB_REDIS_OK;
    }
    if (o->guard && (o->force_look || !meta_ok(bm))) {
        o->force_look = 0;
        lb_redis_batch_clear(&bm->aux);
        build_look(bm, &bm->aux);
        o->phase = BM_LOOK;
        *req = &bm->aux;
        *flags = LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS;
        return LB_REDIS_OK;
    }
    if (!o->pending) {
        int more = 0;
        lb_redis_status st = o->body->next(o, &more, &o->flags);
        if (st != LB_REDIS_OK || !more) {
            o->phase = BM_OVER;
            return st;
        }
        o->pending = 1;
        o->retried = 0;
    }
    /* Sent with KEPT_CONN: the retry of a stale connection (a server restarted,
     * ...) is done by this machine rather than by lb_redis_exec, so that the
     * new connection has its meta key checked before the round trip goes out
     * again: a server that came back empty may have been claimed meanwhile by
     * a filter of another geometry.  The same holds for a connection that
     * exec discards because a late reply was pending on it. */
    if (o->flags & LB_REDIS_KEPT_CONN)
        lb_bitmap_batch_bounds(bm);
    o->phase = BM_BODY;
    *req = &bm->batch;
    *flags = o->flags;
    return LB_REDIS_OK;
}

static lb_redis_status bm_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    bm_op *o = (bm_op *)op;
    lb_bitmap *bm = o->bm;
    int claim = 0;
    switch (o->phase) {
    case BM_LOOK:
        if (st == LB_REDIS_OK)
            st = check_look(bm, rs, o->rebuild, &claim);
        if (st == LB_REDIS_OK && !claim) {
            bm->meta_checked = 1;
            bm->meta_conn = lb_redis_connect_count(bm->conn);
        }
        o->phase = st == LB_REDIS_OK && claim ? BM_CLAIM_DUE : BM_IDLE;
        break;
    case BM_CLAIM:
        st = check_claim(bm, st, rs);
        o->phase = BM_IDLE;
        break;
    case BM_BODY:
        o->phase = BM_IDLE;
        if (st == LB_REDIS_ERR_IO && (o->flags & LB_REDIS_KEPT_CONN) && !o->retried &&
            lb_redis_last_stale(bm->conn)) {
            o->retried = 1; /* the guard on a new connection, then the same round trip */
            return LB_REDIS_OK;
        }
        o->pending = 0;
        st = o->body->done(o, st, rs);
        break;
    default:
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG,
                                  "no round trip of this operation is in progress");
    }
    if (st != LB_REDIS_OK)
        o->phase = BM_OVER;
    return st;
}

static const lb_op_vt bm_vt = {bm_next, bm_done};

lb_op *lb_bitmap_op_start(lb_bitmap *bm, const bm_body *body, int guard)
{
    bm_op *o = &bm->op;
    memset(o, 0, sizeof *o);
    o->op.vt = &bm_vt;
    o->op.conn = bm->conn;
    o->bm = bm;
    o->body = body;
    o->guard = guard;
    return &o->op;
}
