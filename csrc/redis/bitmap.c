/* bitmap.c: see bitmap.h.  The state and the operations as step machines
 * (bitmap_op.h): the guard around every operation, add / test, reset and the
 * meta check here; load, snapshot, bitcount and read_meta in bitmap_bulk.c. */
#define _POSIX_C_SOURCE 200809L
#include "bitmap_op.h"

#include "blocked.h"
#include "maxmemory.h"
#include "reply.h"
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

lb_bitmap_layout lb_bitmap_layout_of(const lb_bitmap *bm)
{
    return bm->blocked ? LB_BITMAP_BLOCKED : LB_BITMAP_STANDARD;
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
lb_redis *lb_bitmap_conn(const lb_bitmap *bm) { return bm->conn; }
void lb_bitmap_set_conn(lb_bitmap *bm, lb_redis *conn)
{
    bm->conn = conn; /* its connect counts go on from the old one's: nothing counts as checked */
    bm->op.op.conn = conn;
}

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
static size_t add_canary_get(lb_bitmap *bm, size_t ncmd)
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
    if (st == LB_REDIS_ERR_WRONGTYPE)
        return lb_bitmap_name_wrongtype(bm, UINT64_MAX);
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
        ncmd = add_canary_get(bm, ncmd);
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

static lb_redis_status check_keys(lb_bitmap *bm, const lb_key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (keys[i].len == 0 || !keys[i].data)
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG, "key %zu is empty", i);
    return LB_REDIS_OK;
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

/* ------------------------------------------------------- the step machine */

enum { BM_IDLE = 0, BM_LOOK, BM_CLAIM_DUE, BM_CLAIM, BM_BODY, BM_OVER };

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

/* -------------------------------------------------------------- the bodies */

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

static const bm_body keys_body = {keys_next, keys_done};

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
        lb_redis_status st = check_keys(bm, keys, n);
        if (st != LB_REDIS_OK)
            return st;
        bm_op *o = (bm_op *)lb_bitmap_op_start(bm, &keys_body, 1);
        o->keys = keys;
        o->n = n;
        o->write = kind == LB_BITMAP_OP_ADD;
        o->out = out;
        *op = &o->op;
    } else {
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG, "unknown wire operation");
    }
    /* The first round trip is built now: the keys need not live longer when
     * they fit in one chunk (an outside transport's operations do). */
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
