/* bitmap_bulk.c: the bitmap's whole-filter operations as step machines
 * (bitmap_op.h), behind the guard of bitmap.c: load (OR local bits in),
 * snapshot (read them all), bitcount; and read_meta (no guard). */
#define _POSIX_C_SOURCE 200809L
#include "bitmap_op.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reply.h"
#include "slots.h"

#define LB_BITMAP_LOAD_CHUNK ((size_t)8 << 20)  /* bytes per SETRANGE round trip */
#define LB_BITMAP_SNAP_CHUNK ((size_t)16 << 20) /* bytes per GETRANGE round trip */
#define LB_BITMAP_LOAD_TMP_TTL_MS 600000        /* temp key of load: 10 minutes */

static int all_zero(const uint8_t *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, p + i, 8);
        if (w)
            return 0;
    }
    for (; i < n; i++)
        if (p[i])
            return 0;
    return 1;
}

static uint8_t last_mask(uint64_t m)
{
    unsigned r = (unsigned)(m & 7);
    return r ? (uint8_t)(0xff << (8 - r)) : 0xff;
}

static size_t part_end(const bm_op *o, size_t pstart)
{
    return o->nbytes - pstart < LB_BITMAP_PART_BYTES ? o->nbytes : pstart + LB_BITMAP_PART_BYTES;
}

/* ------------------------------------------------------------------ load */

enum { LOAD_CHUNKS = 0, LOAD_CANARY, LOAD_EXPIRE, LOAD_CLEANUP, LOAD_OVER };

/* The next non-zero chunk to send: o->part and o->pos (o->last: the part's last
 * non-zero chunk, where the merge rides).  0 when every part is done. */
static int load_find(bm_op *o)
{
    lb_bitmap *bm = o->bm;
    for (; o->part < bm->nparts; o->part++, o->pos = (size_t)-1) {
        const size_t pstart = (size_t)(o->part * LB_BITMAP_PART_BYTES), pend = part_end(o, pstart);
        if (o->pos == (size_t)-1) {
            o->last = (size_t)-1;
            for (size_t c = pstart; c < pend; c += LB_BITMAP_LOAD_CHUNK) {
                size_t ce = pend - c < LB_BITMAP_LOAD_CHUNK ? pend : c + LB_BITMAP_LOAD_CHUNK;
                if (!all_zero(o->bits + c, ce - c))
                    o->last = c;
            }
            if (o->last == (size_t)-1)
                continue; /* nothing to OR into this part */
            o->pos = pstart;
        }
        for (; o->pos <= o->last; o->pos += LB_BITMAP_LOAD_CHUNK) {
            size_t c = o->pos, ce = pend - c < LB_BITMAP_LOAD_CHUNK ? pend : c + LB_BITMAP_LOAD_CHUNK;
            if (c == o->last || !all_zero(o->bits + c, ce - c))
                return 1;
        }
    }
    return 0;
}

static void want(bm_op *o, lb_want_kind kind, long long lo, long long hi, const char *name)
{
    o->wants[o->nw] = (lb_reply_want){kind, lo, hi};
    o->names[o->nw++] = name;
}

/* One chunk's round trip: SETRANGE into the temp key (the last byte masked
 * past m), its expiry, and on the part's last chunk BITOP OR into the part,
 * DEL of the temp key and the meta key with the bits (see add_meta_guard). */
static void load_chunk(bm_op *o)
{
    lb_bitmap *bm = o->bm;
    lb_redis_batch *b = &bm->batch;
    const uint8_t lastmask = last_mask(bm->g.m);
    const size_t pstart = (size_t)(o->part * LB_BITMAP_PART_BYTES), pend = part_end(o, pstart);
    const size_t c = o->pos, ce = pend - c < LB_BITMAP_LOAD_CHUNK ? pend : c + LB_BITMAP_LOAD_CHUNK;
    const int masked = ce == o->nbytes && lastmask != 0xff;
    const size_t body = ce - c - (masked ? 1 : 0);
    const long long part_bytes = (long long)LB_BITMAP_PART_BYTES;
    lb_redis_batch_clear(b);
    o->nw = 0;
    o->bitop = -1;
    o->canary_at = -1;
    const int canary = o->part == bm->nparts - 1 && lb_bitmap_has_canary(bm);
    if (canary && !o->tmp_canary) {
        /* the canary rides the temp key of the last part from its first chunk
         * on, into the part with the BITOP of its last: the filter is whole
         * again when its last bits are in, and not if the temp key was lost
         * between two chunks (a flush, a restart: the bits before it too) */
        lb_redis_batch_cmd(b, 4);
        lb_redis_batch_arg(b, "SETBIT", 6);
        lb_redis_batch_arg(b, o->tmp, o->tlen);
        lb_redis_batch_arg_u64(b, lb_bitmap_canary_offset(bm));
        lb_redis_batch_arg(b, "1", 1);
        want(o, LB_WANT_INT, 0, 1, "SETBIT of the canary");
        o->tmp_canary = 1;
    }
    if (body) {
        lb_redis_batch_cmd(b, 4);
        lb_redis_batch_arg(b, "SETRANGE", 8);
        lb_redis_batch_arg(b, o->tmp, o->tlen);
        lb_redis_batch_arg_u64(b, c - pstart);
        lb_redis_batch_arg(b, o->bits + c, body);
        /* SETRANGE: the string's new length, at least what it wrote up to, at most a part */
        want(o, LB_WANT_INT, (long long)(c - pstart + body), part_bytes, "SETRANGE");
    }
    if (masked) {
        uint8_t lbyte = o->bits[ce - 1] & lastmask;
        lb_redis_batch_cmd(b, 4);
        lb_redis_batch_arg(b, "SETRANGE", 8);
        lb_redis_batch_arg(b, o->tmp, o->tlen);
        lb_redis_batch_arg_u64(b, ce - 1 - pstart);
        lb_redis_batch_arg(b, &lbyte, 1);
        want(o, LB_WANT_INT, (long long)(ce - pstart), part_bytes, "SETRANGE");
    }
    lb_redis_batch_cmd(b, 3);
    lb_redis_batch_arg(b, "PEXPIRE", 7);
    lb_redis_batch_arg(b, o->tmp, o->tlen);
    lb_redis_batch_arg_u64(b, LB_BITMAP_LOAD_TMP_TTL_MS);
    want(o, LB_WANT_INT, 0, 1, "PEXPIRE");
    if (c != o->last)
        return;
    size_t pn;
    const char *pname = lb_bitmap_name_of(bm, o->part, &pn);
    o->bitop = (long)b->ncmds;
    lb_redis_batch_cmd(b, 5);
    lb_redis_batch_arg(b, "BITOP", 5);
    lb_redis_batch_arg(b, "OR", 2);
    lb_redis_batch_arg(b, pname, pn);
    lb_redis_batch_arg(b, pname, pn);
    lb_redis_batch_arg(b, o->tmp, o->tlen);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "DEL", 3);
    lb_redis_batch_arg(b, o->tmp, o->tlen);
    want(o, LB_WANT_INT, 0, part_bytes, "BITOP"); /* the result's length */
    want(o, LB_WANT_INT, 0, 1, "DEL");
    char val[160];
    int vlen = lb_bitmap_meta_ours(bm, val, sizeof val);
    lb_bitmap_add_meta_set(bm, b, val, vlen);
    want(o, LB_WANT_OK_OR_NIL, 0, 0, "SET NX of the meta key");
    if (canary) { /* read after the BITOP: 0 when the temp key lost it */
        lb_redis_batch_cmd(b, 3);
        lb_redis_batch_arg(b, "GETBIT", 6);
        lb_redis_batch_arg(b, pname, pn);
        lb_redis_batch_arg_u64(b, lb_bitmap_canary_offset(bm));
        o->canary_at = (long)o->nw;
        want(o, LB_WANT_INT, 0, 1, "GETBIT of the canary");
    }
}

static lb_redis_status load_next(bm_op *o, int *more, int *flags)
{
    lb_bitmap *bm = o->bm;
    lb_redis_batch *b = &bm->batch;
    if (o->stage == LOAD_CHUNKS && !o->tmp) {
        /* A temp key name unique to this call, in the filter's slot. */
        o->tmp = lb_redis_temp_name(bm->base, bm->baselen, "load", ++bm->load_seq, &o->tlen);
        if (!o->tmp)
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
        o->pos = (size_t)-1;
    }
    if (o->stage == LOAD_CHUNKS && load_find(o)) {
        load_chunk(o);
        *flags = LB_REDIS_KEPT_CONN | LB_REDIS_WRITE;
    } else if (o->stage == LOAD_CHUNKS && lb_bitmap_has_canary(bm) && !o->tmp_canary) {
        /* the bits are in, none in the last part (else the canary came with
         * them): the canary says the filter is whole again (a load brings a
         * lost filter back), with its meta key */
        o->stage = LOAD_CANARY;
        lb_redis_batch_clear(b);
        char val[160];
        int vlen = lb_bitmap_meta_ours(bm, val, sizeof val);
        lb_bitmap_add_meta_set(bm, b, val, vlen);
        lb_bitmap_add_canary_set(bm, b);
        lb_bitmap_batch_bounds(bm);
        *flags = LB_REDIS_KEPT_CONN | LB_REDIS_WRITE;
    } else if (o->stage == LOAD_CHUNKS && bm->ttl_ms > 0) {
        o->stage = LOAD_EXPIRE;
        lb_redis_batch_clear(b);
        o->nw = lb_bitmap_add_expires(bm, 0);
        *flags = LB_REDIS_KEPT_CONN | LB_REDIS_WRITE;
    } else if (o->stage == LOAD_CLEANUP) {
        /* best effort: do not leave the temp key behind (it expires anyway) */
        lb_redis_batch_clear(b);
        lb_redis_batch_cmd(b, 2);
        lb_redis_batch_arg(b, "DEL", 3);
        lb_redis_batch_arg(b, o->tmp, o->tlen);
        lb_redis_batch_expect_elements(b, 0);
        *flags = LB_REDIS_IDEMPOTENT;
    } else {
        return LB_REDIS_OK;
    }
    *more = 1;
    return LB_REDIS_OK;
}

static lb_redis_status load_done(bm_op *o, lb_redis_status st, lb_reply **rs)
{
    lb_bitmap *bm = o->bm;
    if (o->stage == LOAD_CLEANUP) /* the cleanup's own outcome does not matter */
        return lb_redis_set_error(bm->conn, o->failed, "load: %s", o->msg);
    if (o->stage == LOAD_CANARY) {
        static const lb_reply_want w[2] = {{LB_WANT_OK_OR_NIL, 0, 0}, {LB_WANT_INT, 0, 1}};
        static const char *const nm[2] = {"SET NX of the meta key", "SETBIT of the canary"};
        if (st == LB_REDIS_OK)
            st = lb_bitmap_check_replies(bm, rs, w, nm, 2);
        if (st == LB_REDIS_ERR_WRONGTYPE)
            return lb_bitmap_name_wrongtype(bm, bm->nparts - 1);
        o->stage = LOAD_OVER;
        return st;
    }
    if (o->stage == LOAD_EXPIRE) {
        for (size_t c = 0; st == LB_REDIS_OK && c < o->nw; c++)
            if (!lb_reply_is_bit(rs[c]))
                st = lb_bitmap_bad_reply(bm, "PEXPIRE");
        o->stage = LOAD_OVER;
        return st;
    }
    if (st == LB_REDIS_OK)
        st = lb_bitmap_check_replies(bm, rs, o->wants, o->names, o->nw);
    if (st == LB_REDIS_ERR_WRONGTYPE && lb_redis_err_index(bm->conn) == o->bitop)
        return lb_bitmap_name_wrongtype(bm, o->part); /* the DEL of tmp ran after it */
    if (st == LB_REDIS_OK && o->canary_at >= 0 && rs[o->canary_at]->integer == 0) {
        lb_bitmap_lost(bm, 1);
        snprintf(o->msg, sizeof o->msg, "%s", lb_redis_errstr(bm->conn));
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_LOST,
                                  "load: %s", o->msg);
    }
    if (st == LB_REDIS_OK) {
        o->pos += LB_BITMAP_LOAD_CHUNK;
        return st;
    }
    /* Prefix the message with what failed; clean the temp key up first. */
    snprintf(o->msg, sizeof o->msg, "%s", lb_redis_errstr(bm->conn));
    o->failed = st;
    if ((st == LB_REDIS_ERR_REPLY || st == LB_REDIS_ERR_WRONGTYPE) &&
        lb_redis_is_connected(bm->conn)) {
        o->stage = LOAD_CLEANUP;
        o->guard = 0;
        return LB_REDIS_OK;
    }
    return lb_redis_set_error(bm->conn, st, "load: %s", o->msg);
}

static const bm_body load_body = {load_next, load_done};

lb_redis_status lb_bitmap_load(lb_bitmap *bm, const uint8_t *bits, size_t nbytes)
{
    const uint64_t want = (bm->g.m + 7) / 8;
    if (nbytes != want)
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_MISMATCH,
                                  "load: %zu bytes given, the filter has %" PRIu64
                                  " (m=%" PRIu64 ")",
                                  nbytes, want, bm->g.m);
    bm_op *o = (bm_op *)lb_bitmap_op_start(bm, &load_body, 1);
    o->rebuild = 1;
    o->canary_last = 1;
    o->bits = bits;
    o->nbytes = nbytes;
    lb_redis_status st = lb_op_run(&o->op);
    free(o->tmp);
    o->tmp = NULL;
    return st;
}

/* -------------------------------------------------------------- snapshot */

/* GETBIT of the canary appended to b, after the bits a snapshot or a count
 * read: its reply's index.  A lost filter reads as lost, never as the empty
 * filter its bytes now make (a snapshot of no keys, a count of 0). */
static long add_canary_read(lb_bitmap *bm, lb_redis_batch *b)
{
    size_t len;
    const char *n = lb_bitmap_name_of(bm, bm->nparts - 1, &len);
    long at = (long)b->ncmds;
    lb_redis_batch_cmd(b, 3);
    lb_redis_batch_arg(b, "GETBIT", 6);
    lb_redis_batch_arg(b, n, len);
    lb_redis_batch_arg_u64(b, lb_bitmap_canary_offset(bm));
    return at;
}

static lb_redis_status canary_read(bm_op *o, lb_reply **rs)
{
    if (o->canary_at < 0)
        return LB_REDIS_OK;
    if (!lb_reply_is_bit(rs[o->canary_at]))
        return lb_bitmap_bad_reply(o->bm, "GETBIT of the canary");
    return rs[o->canary_at]->integer ? LB_REDIS_OK : lb_bitmap_lost(o->bm, 0);
}

/* Walk the parts in GETRANGE pieces, at most LB_BITMAP_SNAP_CHUNK bytes
 * requested per round trip, at most 8 pieces. */
static lb_redis_status snap_next(bm_op *o, int *more, int *flags)
{
    lb_bitmap *bm = o->bm;
    lb_redis_batch *b = &bm->batch;
    if (o->stage == 0) {
        memset(o->dst, 0, o->nbytes);
        o->stage = 1;
    }
    if (o->part >= bm->nparts) {
        o->dst[o->nbytes - 1] &= last_mask(bm->g.m);
        return LB_REDIS_OK;
    }
    lb_redis_batch_clear(b);
    size_t budget = LB_BITMAP_SNAP_CHUNK;
    o->nw = 0;
    while (o->part < bm->nparts && budget > 0 && o->nw < 8) {
        size_t pstart = (size_t)(o->part * LB_BITMAP_PART_BYTES);
        size_t psize = part_end(o, pstart) - pstart;
        size_t piece = psize - o->pos < budget ? psize - o->pos : budget;
        size_t pn;
        const char *pname = lb_bitmap_name_of(bm, o->part, &pn);
        if (lb_bitmap_cmds_reserve(bm, o->nw + 1))
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
        lb_redis_batch_cmd(b, 4);
        lb_redis_batch_arg(b, "GETRANGE", 8);
        lb_redis_batch_arg(b, pname, pn);
        lb_redis_batch_arg_u64(b, o->pos);
        lb_redis_batch_arg_u64(b, o->pos + piece - 1);
        lb_redis_batch_expect_bytes(b, piece);
        bm->cmds[o->nw].part = (uint32_t)o->part;
        o->dest[o->nw] = pstart + o->pos;
        o->plen[o->nw] = piece;
        o->nw++;
        budget -= piece;
        o->pos += piece;
        if (o->pos == psize) {
            o->part++;
            o->pos = 0;
        }
    }
    o->canary_at = -1;
    if (o->part >= bm->nparts && lb_bitmap_has_canary(bm))
        o->canary_at = add_canary_read(bm, b);
    *more = 1;
    *flags = LB_REDIS_KEPT_CONN | LB_REDIS_READ_REPLICA;
    return LB_REDIS_OK;
}

static lb_redis_status snap_done(bm_op *o, lb_redis_status st, lb_reply **rs)
{
    lb_bitmap *bm = o->bm;
    if (st == LB_REDIS_ERR_WRONGTYPE) {
        long e = lb_redis_err_index(bm->conn);
        return lb_bitmap_name_wrongtype(bm, e >= 0 && (size_t)e < o->nw ? bm->cmds[e].part : 0);
    }
    if (st != LB_REDIS_OK)
        return st;
    for (size_t c = 0; c < o->nw; c++) {
        const lb_reply *x = rs[c];
        if (x->type != LB_REPLY_STRING || x->len > o->plen[c])
            return lb_bitmap_bad_reply(bm, "GETRANGE");
        memcpy(o->dst + o->dest[c], x->str, x->len); /* shorter: the rest stays zero */
    }
    return canary_read(o, rs);
}

static const bm_body snap_body = {snap_next, snap_done};

lb_redis_status lb_bitmap_snapshot(lb_bitmap *bm, uint8_t *out, size_t nbytes)
{
    const uint64_t want = (bm->g.m + 7) / 8;
    if (nbytes != want)
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_MISMATCH,
                                  "snapshot: buffer of %zu bytes, the filter has %" PRIu64
                                  " (m=%" PRIu64 ")",
                                  nbytes, want, bm->g.m);
    bm_op *o = (bm_op *)lb_bitmap_op_start(bm, &snap_body, 1);
    o->dst = out;
    o->nbytes = nbytes;
    return lb_op_run(&o->op);
}

/* -------------------------------------------------------------- bitcount */

/* Count the part's own bytes only (BITCOUNT key 0 last): its reply is then at
 * most 8 bits per byte asked, and bytes another writer appended past the
 * filter do not count. */
static uint64_t part_bytes(const lb_bitmap *bm, uint64_t p)
{
    const uint64_t nbytes = (bm->g.m + 7) / 8, pstart = p * LB_BITMAP_PART_BYTES;
    return nbytes - pstart < LB_BITMAP_PART_BYTES ? nbytes - pstart : LB_BITMAP_PART_BYTES;
}

static lb_redis_status count_next(bm_op *o, int *more, int *flags)
{
    lb_bitmap *bm = o->bm;
    lb_redis_batch *b = &bm->batch;
    if (o->stage++)
        return LB_REDIS_OK;
    lb_redis_batch_clear(b);
    for (uint64_t p = 0; p < bm->nparts; p++) {
        size_t pn;
        const char *pname = lb_bitmap_name_of(bm, p, &pn);
        lb_redis_batch_cmd(b, 4);
        lb_redis_batch_arg(b, "BITCOUNT", 8);
        lb_redis_batch_arg(b, pname, pn);
        lb_redis_batch_arg_u64(b, 0);
        lb_redis_batch_arg_u64(b, part_bytes(bm, p) - 1);
    }
    o->canary_at = lb_bitmap_has_canary(bm) ? add_canary_read(bm, b) : -1;
    *more = 1;
    *flags = LB_REDIS_KEPT_CONN | LB_REDIS_READ_REPLICA;
    return LB_REDIS_OK;
}

static lb_redis_status count_done(bm_op *o, lb_redis_status st, lb_reply **rs)
{
    lb_bitmap *bm = o->bm;
    if (st == LB_REDIS_ERR_WRONGTYPE)
        return lb_bitmap_name_wrongtype(bm, (uint64_t)lb_redis_err_index(bm->conn));
    if (st != LB_REDIS_OK)
        return st;
    for (uint64_t p = 0; p < bm->nparts; p++) {
        if (!lb_reply_int_in(rs[p], 0, (long long)(part_bytes(bm, p) * 8)))
            return lb_bitmap_bad_reply(bm, "BITCOUNT");
        *o->count += (uint64_t)rs[p]->integer;
    }
    return canary_read(o, rs);
}

static const bm_body count_body = {count_next, count_done};

lb_op *lb_bitmap_bitcount_begin(lb_bitmap *bm, uint64_t *count)
{
    *count = 0;
    bm_op *o = (bm_op *)lb_bitmap_op_start(bm, &count_body, 1);
    o->count = count;
    return &o->op;
}

lb_redis_status lb_bitmap_bitcount(lb_bitmap *bm, uint64_t *count)
{
    return lb_op_run(lb_bitmap_bitcount_begin(bm, count));
}

/* ------------------------------------------------------------- read_meta */

static lb_redis_status read_next(bm_op *o, int *more, int *flags)
{
    lb_bitmap *bm = o->bm;
    if (o->stage++)
        return LB_REDIS_OK;
    lb_redis_batch_clear(&bm->batch);
    lb_bitmap_add_meta_get(bm, &bm->batch);
    lb_redis_batch_expect_elements(&bm->batch, 0);
    lb_redis_batch_expect_bytes(&bm->batch, LB_BITMAP_META_READ);
    *more = 1;
    *flags = LB_REDIS_IDEMPOTENT;
    return LB_REDIS_OK;
}

static lb_redis_status read_done(bm_op *o, lb_redis_status st, lb_reply **rs)
{
    lb_bitmap *bm = o->bm;
    int blocked = 0;
    if (st == LB_REDIS_ERR_WRONGTYPE)
        st = lb_bitmap_name_wrongtype(bm, UINT64_MAX);
    else if (st == LB_REDIS_OK)
        st = lb_bitmap_meta_reply(bm->conn, bm->key, bm->keylen, (const lb_reply *const *)rs,
                                  o->geom, &blocked, NULL);
    if (o->layout)
        *o->layout = blocked ? LB_BITMAP_BLOCKED : LB_BITMAP_STANDARD;
    return st;
}

static const bm_body read_body = {read_next, read_done};

lb_redis_status lb_bitmap_read_meta(lb_redis *conn, const void *key, size_t keylen,
                                    lb_geometry *out)
{
    return lb_bitmap_read_meta_layout(conn, key, keylen, out, NULL);
}

lb_redis_status lb_bitmap_read_meta_layout(lb_redis *conn, const void *key, size_t keylen,
                                           lb_geometry *out, lb_bitmap_layout *layout)
{
    lb_geometry g;
    lb_geometry_init(&g, 1, 1, LB_HASH_XXH3);
    lb_bitmap *bm;
    lb_redis_status st = lb_bitmap_new(conn, key, keylen, &g, 0, &bm);
    if (st != LB_REDIS_OK)
        return st;
    bm_op *o = (bm_op *)lb_bitmap_op_start(bm, &read_body, 0);
    o->geom = out;
    o->layout = layout;
    if (layout)
        *layout = LB_BITMAP_STANDARD;
    st = lb_op_run(&o->op);
    lb_bitmap_free(bm);
    return st;
}
