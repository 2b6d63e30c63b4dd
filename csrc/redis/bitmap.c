/* bitmap.c: see bitmap.h.  The state and the operations as step machines
 * (bitmap_op.h): names, the lifecycle, reset, the meta check and the entry
 * points here; the guard around every operation (the canary, the meta key's
 * look and claim, the step machine) in bitmap_guard.c; add / test in
 * bitmap_keys.c; load, snapshot, bitcount and read_meta in bitmap_bulk.c. */
#define _POSIX_C_SOURCE 200809L
#include "bitmap_op.h"

#include "blocked.h"
#include "slots.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ----------------------------------------------------------------- names */

/* Name of part p (p < nparts), or of the meta key (UINT64_MAX), or of the
 * load temp key (UINT64_MAX - 1, suffix given).  Returns a pointer valid
 * until the next call (part 0: the key itself). */
const char *lb_bitmap_name_of(lb_bitmap *bm, uint64_t p, size_t *len)
{
    if (p == 0) {
        *len = bm->keylen;
        return bm->key;
    }
    char *o = bm->name;
    memcpy(o, bm->base, bm->baselen);
    o += bm->baselen;
    if (p == UINT64_MAX)
        o += sprintf(o, ":meta");
    else
        o += sprintf(o, ":part:%" PRIu64, p);
    *len = (size_t)(o - bm->name);
    return bm->name;
}

size_t lb_bitmap_key_name(const lb_bitmap *bm, uint64_t p, char *buf, size_t cap)
{
    size_t len;
    const char *n = lb_bitmap_name_of((lb_bitmap *)bm, p, &len);
    if (cap)
        memcpy(buf, n, len < cap ? len : cap);
    return len;
}

/* ------------------------------------------------------------ lifecycle */

lb_redis_status lb_bitmap_new(lb_redis *conn, const void *key, size_t keylen,
                                    const lb_geometry *g, int64_t ttl_ms, lb_bitmap **out)
{
    *out = NULL;
    if (!conn)
        return LB_REDIS_ERR_ARG;
    if (!key || keylen == 0)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "the Redis key must not be empty");
    if (!g || g->m == 0 || g->m > LB_MAX_BITS)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "m must be in [1, 2^48]");
    if (g->k == 0 || g->k > LB_MAX_K)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "k must be in [1, %d]", LB_MAX_K);
    if ((unsigned)g->scheme >= LB_HASH_SCHEME_COUNT)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "unknown hash scheme");
    if (ttl_ms < 0)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "ttl must not be negative");

    lb_bitmap *bm = calloc(1, sizeof *bm);
    if (!bm)
        return lb_redis_set_error(conn, LB_REDIS_ERR_NOMEM, "out of memory");
    bm->conn = conn;
    lb_geometry_init(&bm->g, g->m, g->k, g->scheme);
    bm->nparts = (g->m + LB_BITMAP_PART_BITS - 1) / LB_BITMAP_PART_BITS;
    bm->ttl_ms = ttl_ms;
    bm->mode = LB_BITMAP_BITFIELD;
    bm->chunk_keys = LB_BITMAP_DEFAULT_CHUNK_KEYS;
    lb_redis_batch_init(&bm->batch);
    lb_redis_batch_init(&bm->aux);
    bm->keylen = keylen;
    if (lb_redis_slot_names(key, keylen, &bm->key, &bm->base, &bm->baselen) == 0) {
        bm->namecap = bm->baselen + 64;
        bm->name = malloc(bm->namecap);
    }
    if (!bm->name) {
        lb_bitmap_free(bm);
        return lb_redis_set_error(conn, LB_REDIS_ERR_NOMEM, "out of memory");
    }
    *out = bm;
    return LB_REDIS_OK;
}

void lb_bitmap_free(lb_bitmap *bm)
{
    if (!bm)
        return;
    lb_redis_batch_free(&bm->batch);
    lb_redis_batch_free(&bm->aux);
    free(bm->cmds);
    free(bm->want);
    free(bm->key);
    free(bm->base);
    free(bm->name);
    free(bm);
}

void lb_bitmap_set_mode(lb_bitmap *bm, lb_bitmap_mode mode)
{
    bm->mode = bm->blocked ? LB_BITMAP_BITFIELD : mode;
}

void lb_bitmap_set_adopt(lb_bitmap *bm, int adopt)
{
    bm->adopt = !bm->blocked && adopt != 0;
}

lb_redis_status lb_bitmap_set_layout(lb_bitmap *bm, lb_bitmap_layout layout)
{
    if (layout == LB_BITMAP_STANDARD) {
        bm->blocked = 0;
        return LB_REDIS_OK;
    }
    if (layout != LB_BITMAP_BLOCKED)
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG, "unknown layout");
    if (lb_blocked_check_geometry(bm->g.m, bm->g.k) != LB_OK || bm->g.scheme != LB_HASH_XXH3_MIX)
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG,
                                  "the blocked layout needs m a multiple of 512, k a multiple "
                                  "of 8 in 8..64 and the xxh3-mix key hash, not m=%" PRIu64
                                  " k=%u hash=%s",
                                  bm->g.m, (unsigned)bm->g.k, lb_hash_scheme_name(bm->g.scheme));
    bm->blocked = 1;
    bm->mode = LB_BITMAP_BITFIELD;
    bm->adopt = 0;
    return LB_REDIS_OK;
}

uint64_t lb_bitmap_bytes(const lb_geometry *g)
{
    /* every part but the last is full; each is a string of its bits / 8 */
    return g->m / 8 + (g->m % 8 != 0);
}

void lb_bitmap_set_chunk_keys(lb_bitmap *bm, size_t n)
{
    bm->chunk_keys = n ? (n > 1000000 ? 1000000 : n) : LB_BITMAP_DEFAULT_CHUNK_KEYS;
}

void lb_bitmap_set_ttl(lb_bitmap *bm, int64_t ttl_ms) { bm->ttl_ms = ttl_ms > 0 ? ttl_ms : 0; }
const lb_geometry *lb_bitmap_geometry(const lb_bitmap *bm) { return &bm->g; }
uint64_t lb_bitmap_nparts(const lb_bitmap *bm) { return bm->nparts; }
void lb_bitmap_set_conn(lb_bitmap *bm, lb_redis *conn)
{
    bm->conn = conn; /* its connect counts go on from the old one's: nothing counts as checked */
    bm->op.op.conn = conn;
}

/* ------------------------------------------------------------ reset */

/* Reset's round trip: DEL every part and the meta key, then SET the meta
 * key again (ours). */
static void build_reset(lb_bitmap *bm)
{
    lb_redis_batch *b = &bm->batch;
    char val[160];
    int vlen = lb_bitmap_meta_ours(bm, val, sizeof val);
    lb_redis_batch_clear(b);
    lb_redis_batch_cmd(b, (int)(bm->nparts + 2));
    lb_redis_batch_arg(b, "DEL", 3);
    for (uint64_t p = 0; p <= bm->nparts; p++) {
        size_t len;
        const char *n = lb_bitmap_name_of(bm, p == bm->nparts ? UINT64_MAX : p, &len);
        lb_redis_batch_arg(b, n, len);
    }
    lb_bitmap_add_meta_set(bm, b, val, vlen);
    if (lb_bitmap_has_canary(bm))
        lb_bitmap_add_canary_set(bm, b); /* a reset brings a lost filter back, whole */
    lb_bitmap_batch_bounds(bm);
}

static lb_redis_status check_reset(lb_bitmap *bm, lb_redis_status st, lb_reply **rs)
{
    if (st != LB_REDIS_OK)
        return st;
    const lb_reply_want wants[3] = {{LB_WANT_INT, 0, (long long)bm->nparts + 1},
                                    {LB_WANT_OK_OR_NIL, 0, 0},
                                    {LB_WANT_INT, 0, 1}};
    static const char *const names[3] = {"DEL", "SET NX of the meta key", "SETBIT of the canary"};
    st = lb_bitmap_check_replies(bm, rs, wants, names, 2 + (size_t)lb_bitmap_has_canary(bm));
    if (st == LB_REDIS_OK)
        bm->known = 1;
    return st;
}

/* -------------------------------------------------------------- the bodies */

/* reset: DEL every part and the meta key, then SET the meta key again. */
static lb_redis_status reset_next(bm_op *o, int *more, int *flags)
{
    if (o->stage++ == 0) {
        build_reset(o->bm);
        *more = 1;
        *flags = LB_REDIS_KEPT_CONN | LB_REDIS_WRITE;
    }
    return LB_REDIS_OK;
}

static lb_redis_status reset_done(bm_op *o, lb_redis_status st, lb_reply **rs)
{
    return check_reset(o->bm, st, rs);
}

static const bm_body reset_body = {reset_next, reset_done};

/* the meta check alone: the guard, forced */
static lb_redis_status none_next(bm_op *o, int *more, int *flags)
{
    (void)o;
    (void)more;
    (void)flags;
    return LB_REDIS_OK;
}

static const bm_body none_body = {none_next, NULL};

/* ------------------------------------------------------------ operations */

lb_redis_status lb_bitmap_begin(lb_bitmap *bm, int kind, const lb_key *keys, size_t n,
                                uint8_t *out, lb_op **op)
{
    *op = NULL;
    if (kind == LB_BITMAP_OP_RESET) {
        /* never delete another filter's bitmap: the guard first */
        *op = lb_bitmap_op_start(bm, &reset_body, 1);
        ((bm_op *)*op)->rebuild = 1;
    } else if (kind == LB_BITMAP_OP_ADD || kind == LB_BITMAP_OP_TEST) {
        lb_redis_status st = lb_bitmap_check_keys(bm, keys, n);
        if (st != LB_REDIS_OK)
            return st;
        bm_op *o = (bm_op *)lb_bitmap_op_start(bm, &lb_bitmap_keys_body, 1);
        o->keys = keys;
        o->n = n;
        o->write = kind == LB_BITMAP_OP_ADD;
        o->out = out;
        *op = &o->op;
    } else {
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG, "unknown wire operation");
    }
    /* The first round trip is built now: the keys need not live longer when
     * they fit in one chunk (the wire transport's operations do). */
    bm_op *o = (bm_op *)*op;
    int more = 0;
    lb_redis_status st = o->body->next(o, &more, &o->flags);
    o->pending = more;
    if (st != LB_REDIS_OK || !more)
        o->phase = BM_OVER;
    return st;
}

lb_redis_status lb_bitmap_wire_begin(lb_bitmap *bm, int kind, const lb_key *keys, size_t n,
                                     uint8_t *out, lb_op **op)
{
    *op = NULL;
    if ((kind == LB_BITMAP_OP_ADD || kind == LB_BITMAP_OP_TEST) && (n == 0 || n > bm->chunk_keys))
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG,
                                  "a wire operation takes 1 to %zu keys, not %zu", bm->chunk_keys,
                                  n);
    return lb_bitmap_begin(bm, kind, keys, n, out, op);
}

static lb_redis_status run(lb_bitmap *bm, int kind, const lb_key *keys, size_t n, uint8_t *out)
{
    lb_op *op;
    lb_redis_status st = lb_bitmap_begin(bm, kind, keys, n, out, &op);
    return st == LB_REDIS_OK ? lb_op_run(op) : st;
}

lb_redis_status lb_bitmap_add(lb_bitmap *bm, const lb_key *keys, size_t n, uint8_t *was_new)
{
    return n ? run(bm, LB_BITMAP_OP_ADD, keys, n, was_new) : LB_REDIS_OK;
}

lb_redis_status lb_bitmap_test(lb_bitmap *bm, const lb_key *keys, size_t n, uint8_t *present)
{
    return n ? run(bm, LB_BITMAP_OP_TEST, keys, n, present) : LB_REDIS_OK;
}

lb_redis_status lb_bitmap_reset(lb_bitmap *bm)
{
    return run(bm, LB_BITMAP_OP_RESET, NULL, 0, NULL);
}

lb_redis_status lb_bitmap_check_meta(lb_bitmap *bm)
{
    bm_op *o = (bm_op *)lb_bitmap_op_start(bm, &none_body, 1);
    o->force_look = 1;
    return lb_op_run(&o->op);
}
