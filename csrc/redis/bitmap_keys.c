/* bitmap_keys.c: add and test of a bitmap filter (bitmap_op.h): each chunk of
 * keys one round trip of SETBIT / BITFIELD (or a blocked filter's block), its
 * replies checked, and the body of the add / test operation. */
#define _POSIX_C_SOURCE 200809L
#include "bitmap_op.h"

#include "blocked.h"

#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------ add / test */

int lb_bitmap_cmds_reserve(lb_bitmap *bm, size_t n)
{
    if (bm->cmds_cap >= n)
        return 0;
    size_t cap = bm->cmds_cap ? bm->cmds_cap : 1024;
    while (cap < n)
        cap *= 2;
    cmd_info *c = realloc(bm->cmds, cap * sizeof *c);
    if (!c)
        return -1;
    bm->cmds = c;
    bm->cmds_cap = cap;
    return 0;
}

/* SET meta <ours> NX [PX ttl] in every write round trip: a filter that
 * expired or was deleted while this connection stayed open (its meta key
 * checked long ago) is written again with its meta key, in the same round
 * trip, never as a bare bitmap that other processes would refuse as not
 * theirs.  An existing meta key is left as it is. */
static size_t add_meta_guard(lb_bitmap *bm, size_t ncmd)
{
    char val[160];
    int vlen = lb_bitmap_meta_ours(bm, val, sizeof val);
    lb_bitmap_add_meta_set(bm, &bm->batch, val, vlen);
    if (lb_bitmap_cmds_reserve(bm, ncmd + 1) == 0) {
        bm->cmds[ncmd].key = META_SET;
        bm->cmds[ncmd].part = UINT32_MAX;
    }
    return ncmd + 1;
}

size_t lb_bitmap_add_expires(lb_bitmap *bm, size_t ncmd)
{
    if (bm->ttl_ms <= 0)
        return ncmd;
    lb_redis_batch *b = &bm->batch;
    for (uint64_t p = 0; p <= bm->nparts; p++) {
        uint64_t which = p == bm->nparts ? UINT64_MAX : p;
        size_t len;
        const char *n = lb_bitmap_name_of(bm, which, &len);
        lb_redis_batch_cmd(b, 3);
        lb_redis_batch_arg(b, "PEXPIRE", 7);
        lb_redis_batch_arg(b, n, len);
        lb_redis_batch_arg_u64(b, (uint64_t)bm->ttl_ms);
        if (lb_bitmap_cmds_reserve(bm, ncmd + 1) == 0) {
            bm->cmds[ncmd].key = NO_KEY;
            bm->cmds[ncmd].part = (uint32_t)(which == UINT64_MAX ? UINT32_MAX : which);
        }
        ncmd++;
    }
    return ncmd;
}

/* Emit the commands of one key's offsets within one part. */
/* *canary_due: the canary is still to be read in this round trip; a BITFIELD
 * of the last part reads it with one more field (GET u1 <canary>). */
static size_t emit(lb_bitmap *bm, int write, uint64_t part, const uint64_t *offs,
                   uint32_t cnt, uint32_t keyidx, size_t ncmd, int *canary_due)
{
    lb_redis_batch *b = &bm->batch;
    size_t len;
    const char *n = lb_bitmap_name_of(bm, part, &len);
    if (bm->mode == LB_BITMAP_BITFIELD) {
        int canary = *canary_due && part == bm->nparts - 1;
        lb_redis_batch_cmd(b, 2 + (int)cnt * (write ? 4 : 3) + (canary ? 3 : 0));
        /* BITFIELD_RO (Redis 6.2) for reads that a cluster replica may serve: a
         * replica redirects BITFIELD, a write command, to its primary */
        if (!write && lb_redis_get_config(bm->conn)->cluster_replica_reads)
            lb_redis_batch_arg(b, "BITFIELD_RO", 11);
        else
            lb_redis_batch_arg(b, "BITFIELD", 8);
        lb_redis_batch_arg(b, n, len);
        for (uint32_t i = 0; i < cnt; i++) {
            lb_redis_batch_arg(b, write ? "SET" : "GET", 3);
            lb_redis_batch_arg(b, "u1", 2);
            lb_redis_batch_arg_u64(b, offs[i]);
            if (write)
                lb_redis_batch_arg(b, "1", 1);
        }
        if (canary) {
            lb_redis_batch_arg(b, "GET", 3);
            lb_redis_batch_arg(b, "u1", 2);
            lb_redis_batch_arg_u64(b, lb_bitmap_canary_offset(bm));
            *canary_due = 0;
        }
        if (lb_bitmap_cmds_reserve(bm, ncmd + 1))
            return (size_t)-1;
        bm->cmds[ncmd].key = keyidx;
        bm->cmds[ncmd].part = (uint32_t)part;
        bm->cmds[ncmd].nbits = cnt;
        bm->cmds[ncmd].canary = (uint32_t)canary;
        return ncmd + 1;
    }
    if (lb_bitmap_cmds_reserve(bm, ncmd + cnt))
        return (size_t)-1;
    for (uint32_t i = 0; i < cnt; i++) {
        lb_redis_batch_cmd(b, write ? 4 : 3);
        if (write)
            lb_redis_batch_arg(b, "SETBIT", 6);
        else
            lb_redis_batch_arg(b, "GETBIT", 6);
        lb_redis_batch_arg(b, n, len);
        lb_redis_batch_arg_u64(b, offs[i]);
        if (write)
            lb_redis_batch_arg(b, "1", 1);
        bm->cmds[ncmd].key = keyidx;
        bm->cmds[ncmd].part = (uint32_t)part;
        bm->cmds[ncmd].nbits = 1;
        bm->cmds[ncmd].canary = 0;
        ncmd++;
    }
    return ncmd;
}

lb_redis_status lb_bitmap_bad_reply(lb_bitmap *bm, const char *what)
{
    return lb_bitmap_conn_bad_reply(bm->conn, what);
}

/* Check every reply of the last batch against wants[0..n) (NULL: skip). */
lb_redis_status lb_bitmap_check_replies(lb_bitmap *bm, lb_reply **rs, const lb_reply_want *wants,
                                     const char *const *names, size_t n)
{
    for (size_t c = 0; c < n; c++)
        if (!lb_reply_fits(rs[c], &wants[c]))
            return lb_bitmap_bad_reply(bm, names[c]);
    return LB_REDIS_OK;
}

/* The bounds of what bm->batch's replies may hold: the one array any
 * command here answers is BITFIELD's, one element per GET; and no data
 * beyond what GETRANGE asked for (snapshot adds it): every other reply fits
 * in the session's per-command slack (resp.h). */
void lb_bitmap_batch_bounds(lb_bitmap *bm)
{
    lb_redis_batch_expect_elements(&bm->batch, bm->mode == LB_BITMAP_BITFIELD
                                                   ? bm->g.k + (size_t)lb_bitmap_has_canary(bm)
                                                   : 0);
    lb_redis_batch_expect_bytes(&bm->batch, 0);
}

/* One key of a blocked chunk: the k SET u1 of its block (an add; Redis bit
 * order: lane i, bit b of the block is its bit 64 i + (b ^ 7), byte 8 i + b/8
 * as the little-endian words of a BlockedFilter's bytes), or one GETRANGE of
 * the block's 64 bytes (a test, checked against want at the reply). */
static size_t emit_blocked(lb_bitmap *bm, int write, const lb_key *key, uint32_t keyidx,
                           size_t ncmd, int *canary_due)
{
    uint64_t want[LB_BLOCKED_LANES], offs[LB_MAX_K];
    const lb_hash_pair h = lb_hash_blocked(key->data, key->len);
    lb_blocked_masks(bm->g.k / LB_BLOCKED_LANES, h, want);
    /* a block never straddles two parts */
    const uint64_t nblocks = bm->g.m / LB_BLOCKED_BLOCK_BITS;
    uint64_t first = lb_blocked_block_of(nblocks, h) * LB_BLOCKED_BLOCK_BITS;
    uint64_t part = first >> 32, off = first & 0xffffffffu;
    if (write) {
        uint32_t cnt = 0;
        for (int i = 0; i < 8; i++)
            for (uint64_t w = want[i]; w; w &= w - 1)
                offs[cnt++] = off + 64 * (uint64_t)i + ((uint64_t)__builtin_ctzll(w) ^ 7);
        return emit(bm, 1, part, offs, cnt, keyidx, ncmd, canary_due);
    }
    if (lb_bitmap_cmds_reserve(bm, ncmd + 1))
        return (size_t)-1;
    memcpy(bm->want + 8 * (size_t)keyidx, want, sizeof want);
    size_t len;
    const char *n = lb_bitmap_name_of(bm, part, &len);
    lb_redis_batch *b = &bm->batch;
    lb_redis_batch_cmd(b, 4);
    lb_redis_batch_arg(b, "GETRANGE", 8);
    lb_redis_batch_arg(b, n, len);
    lb_redis_batch_arg_u64(b, off / 8);
    lb_redis_batch_arg_u64(b, off / 8 + 63);
    bm->cmds[ncmd].key = keyidx;
    bm->cmds[ncmd].part = (uint32_t)part;
    bm->cmds[ncmd].nbits = 0;
    bm->cmds[ncmd].canary = 0;
    return ncmd + 1;
}

/* A GETRANGE reply of a blocked test: at most the 64 bytes asked (shorter, or
 * empty, where the string ends before the block: zeros); 1 when every bit of
 * want is set.  -1: not such a reply. */
static int blocked_present(const lb_reply *x, const uint64_t want[8])
{
    if (!x || x->type != LB_REPLY_STRING || x->len > 64 || (x->len && !x->str))
        return -1;
    uint8_t blk[64] = {0};
    memcpy(blk, x->str, x->len);
    for (int i = 0; i < 8; i++) {
        uint64_t w = 0;
        for (int j = 7; j >= 0; j--)
            w = (w << 8) | blk[8 * i + j]; /* little endian, as a BlockedFilter's bytes */
        if ((w & want[i]) != want[i])
            return 0;
    }
    return 1;
}

/* The round trip of one chunk of cn keys into bm->batch (bm->cmds tells
 * each command's key and part); *ncmd: its commands. */
static lb_redis_status build_chunk(lb_bitmap *bm, const lb_key *keys, size_t cn, int write,
                                   size_t *ncmd_out)
{
    const uint32_t k = bm->g.k;
    uint64_t idx[LB_MAX_K], offs[LB_MAX_K];
    unsigned char done[LB_MAX_K];
    size_t ncmd = 0;
    /* The canary is read by the round trip's last command, after every bit it
     * reads: a pipeline is not atomic, and a flush run between two of its
     * commands left the canary read first (1) beside bits read after it (0),
     * an "absent" that raised nothing.  It rides the last key's BITFIELD when
     * that is the last command (one part), else a GETBIT closes the batch. */
    const int has_canary = lb_bitmap_has_canary(bm);
    int canary_due = 0;
    lb_redis_batch_clear(&bm->batch);
    if (bm->blocked && !write && bm->want_cap < cn) {
        uint64_t *w = realloc(bm->want, cn * 8 * sizeof *w);
        if (!w)
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
        bm->want = w;
        bm->want_cap = cn;
    }
    for (size_t i = 0; i < cn; i++) {
        const lb_key *key = &keys[i];
        if (i + 1 == cn)
            canary_due = has_canary && bm->nparts == 1;
        if (bm->blocked) {
            ncmd = emit_blocked(bm, write, key, (uint32_t)i, ncmd, &canary_due);
            if (ncmd == (size_t)-1)
                return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
            continue;
        }
        lb_indices(&bm->g, lb_hash(bm->g.scheme, key->data, key->len), idx);
        if (bm->nparts == 1) {
            ncmd = emit(bm, write, 0, idx, k, (uint32_t)i, ncmd, &canary_due);
        } else {
            memset(done, 0, k);
            for (uint32_t a = 0; a < k && ncmd != (size_t)-1; a++) {
                if (done[a])
                    continue;
                uint64_t part = idx[a] >> 32;
                uint32_t cnt = 0;
                for (uint32_t c = a; c < k; c++)
                    if (!done[c] && idx[c] >> 32 == part) {
                        offs[cnt++] = idx[c] & 0xffffffffu;
                        done[c] = 1;
                    }
                ncmd = emit(bm, write, part, offs, cnt, (uint32_t)i, ncmd, &canary_due);
            }
        }
        if (ncmd == (size_t)-1)
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
    }
    if (canary_due || (has_canary && bm->nparts > 1)) /* no BITFIELD read it: a GETBIT */
        ncmd = lb_bitmap_add_canary_get(bm, ncmd);
    if (ncmd == (size_t)-1)
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
    if (write)
        ncmd = lb_bitmap_add_expires(bm, add_meta_guard(bm, ncmd));
    if (lb_bitmap_cmds_reserve(bm, ncmd))
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
    lb_bitmap_batch_bounds(bm);
    if (bm->blocked && !write)
        lb_redis_batch_expect_bytes(&bm->batch, 64 * cn); /* a block per GETRANGE */
    *ncmd_out = ncmd;
    return LB_REDIS_OK;
}

/* The replies of a chunk's round trip (st: its status, error replies turned
 * into a status): out[0..cn) gets was_new (write) or present. */
static lb_redis_status check_chunk(lb_bitmap *bm, lb_redis_status st, lb_reply **rs,
                                   size_t ncmd, size_t cn, int write, uint8_t *out)
{
    if (st == LB_REDIS_ERR_WRONGTYPE) {
        long e = lb_redis_err_index(bm->conn);
        uint32_t part = e >= 0 && (size_t)e < ncmd ? bm->cmds[e].part : 0;
        return lb_bitmap_name_wrongtype(bm, part == UINT32_MAX ? UINT64_MAX : part);
    }
    if (st != LB_REDIS_OK)
        return st;
    if (out)
        memset(out, write ? 0 : 1, cn);
    int canary = 1;
    for (size_t c = 0; c < ncmd; c++) {
        const lb_reply *x = rs[c];
        uint32_t ki = bm->cmds[c].key;
        if (ki == CANARY_GET) {
            if (!lb_reply_is_bit(x))
                return lb_bitmap_bad_reply(bm, "GETBIT of the canary");
            canary = (int)x->integer;
            continue;
        }
        if (ki == META_SET) {
            static const lb_reply_want set_nx = {LB_WANT_OK_OR_NIL, 0, 0};
            if (!lb_reply_fits(x, &set_nx))
                return lb_bitmap_bad_reply(bm, "SET NX of the meta key");
            continue;
        }
        if (ki == NO_KEY) {
            if (!lb_reply_is_bit(x)) /* PEXPIRE: 1 set, 0 no such key */
                return lb_bitmap_bad_reply(bm, "PEXPIRE");
            continue;
        }
        int all = 1;
        if (bm->blocked && !write) {
            all = blocked_present(x, bm->want + 8 * (size_t)ki);
            if (all < 0)
                return lb_bitmap_bad_reply(bm, "GETRANGE");
        } else if (bm->mode == LB_BITMAP_BITFIELD) {
            /* exactly one u1 per field sent, each 0 or 1; the canary's last */
            const uint32_t nb = bm->cmds[c].nbits, cf = bm->cmds[c].canary;
            if (!lb_reply_bits(x, nb + cf, &all))
                return lb_bitmap_bad_reply(bm, "BITFIELD");
            if (cf) {
                canary = (int)x->element[nb]->integer;
                all = 1;
                for (uint32_t j = 0; j < nb; j++)
                    all &= (int)x->element[j]->integer;
            }
        } else {
            if (!lb_reply_is_bit(x))
                return lb_bitmap_bad_reply(bm, write ? "SETBIT" : "GETBIT");
            all = (int)x->integer;
        }
        int any_zero = !all;
        if (out) {
            if (write)
                out[ki] |= (uint8_t)any_zero;
            else
                out[ki] &= (uint8_t)all;
        }
    }
    if (!canary) /* the filter's bits are gone (a write put back only its own) */
        return lb_bitmap_lost(bm, write);
    return LB_REDIS_OK;
}

lb_redis_status lb_bitmap_check_keys(lb_bitmap *bm, const lb_key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (keys[i].len == 0 || !keys[i].data)
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG, "key %zu is empty", i);
    return LB_REDIS_OK;
}

/* ------------------------------------------------------ the body of add / test */

/* add / test: one round trip per chunk of chunk_keys keys. */
static lb_redis_status keys_next(bm_op *o, int *more, int *flags)
{
    lb_bitmap *bm = o->bm;
    if (o->start >= o->n)
        return LB_REDIS_OK;
    o->cn = o->n - o->start < bm->chunk_keys ? o->n - o->start : bm->chunk_keys;
    lb_redis_status st = build_chunk(bm, o->keys + o->start, o->cn, o->write, &o->ncmd);
    *more = st == LB_REDIS_OK;
    *flags = LB_REDIS_KEPT_CONN | (o->write ? LB_REDIS_WRITE : LB_REDIS_READ_REPLICA);
    return st;
}

static lb_redis_status keys_done(bm_op *o, lb_redis_status st, lb_reply **rs)
{
    st = check_chunk(o->bm, st, rs, o->ncmd, o->cn, o->write, o->out ? o->out + o->start : NULL);
    o->start += o->cn;
    return st;
}

const bm_body lb_bitmap_keys_body = {keys_next, keys_done};
