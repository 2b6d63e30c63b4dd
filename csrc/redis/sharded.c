/* sharded.c: see sharded.h. */
#define _POSIX_C_SOURCE 200809L
#include "sharded.h"
#include "op.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocked.h"
#include "lanes.h"
#include "reply.h"
#include "slots.h"
#include "redisbloom.h"

struct lb_sharded {
    uint32_t n;                /* shards */
    lb_geometry g;             /* each shard's */
    int blocked;               /* bitmap shards in the blocked layout */
    lb_redis **conn;           /* conn[0] the caller's; the others owned */
    lb_bitmap **bm;      /* bitmap shards (RedisFilter), or NULL */
    lb_redisbloom **bf;        /* RedisBloom shards, or NULL */
    char rec[200];             /* the record's text */
    int reclen;
    lb_redis_status *st;       /* per shard, of the last operation */
    uint64_t *count;           /* per shard: keys of the batch, then bitcounts */
    char *tag;                 /* T (see the header) */
    size_t taglen;
    char *record;              /* "{T}:shards" */
    size_t recordlen;
    int record_ok;             /* the record was claimed or found ours */
    unsigned long record_conn; /* conn[0]'s connect count then */
    /* a batch, grouped by shard */
    size_t cap;
    size_t *pos;               /* key j is at pos[j] of the grouped arrays */
    lb_key *gk;
    uint8_t *gout;
    size_t *off;               /* shard i's keys: [off[i], off[i + 1]) */
    /* the asyncio transport's operation (lb_sharded_wire_*) */
    int w_kind, w_stage;
    size_t w_n;
    uint8_t *w_out;
    lb_redis_status w_st;
    uint32_t *w_list;          /* the shards concerned, and their machines */
    size_t w_nshards;
    size_t w_nlist;            /* machines of the running stage */
    lb_op **w_ops;
    void *w_record;            /* the record's claim (record_op) */
};

uint32_t lb_sharded_pick(lb_hash_pair h, uint32_t shards)
{
    return (uint32_t)lb_fastrange(lb_mix64(h.h1 + h.h2 * UINT64_C(0x9E3779B97F4A7C15)), shards);
}

uint32_t lb_sharded_count(const lb_sharded *sh) { return sh->n; }
lb_bitmap *lb_sharded_shard(const lb_sharded *sh, uint32_t i) { return sh->bm[i]; }

size_t lb_sharded_record_name(const lb_sharded *sh, char *buf, size_t cap)
{
    if (buf && cap) {
        size_t c = sh->recordlen < cap - 1 ? sh->recordlen : cap - 1;
        memcpy(buf, sh->record, c);
        buf[c] = '\0';
    }
    return sh->recordlen;
}

lb_redisbloom *lb_sharded_bf(const lb_sharded *sh, uint32_t i)
{
    return sh->bf && i < sh->n ? sh->bf[i] : NULL;
}

/* T: the key itself, or the hex of its hash when a brace would break the tag. */
static char *make_tag(const void *key, size_t keylen, size_t *len)
{
    if (!memchr(key, '{', keylen) && !memchr(key, '}', keylen)) {
        char *t = malloc(keylen + 1);
        if (t) {
            memcpy(t, key, keylen);
            t[keylen] = '\0';
            *len = keylen;
        }
        return t;
    }
    char *t = malloc(17);
    if (t) {
        snprintf(t, 17, "%016" PRIx64, lb_hash_xxh3(key, keylen).h1);
        *len = 16;
    }
    return t;
}

/* A standard record is version 1; a blocked one version 2 (as a blocked
 * bitmap's meta key: a reader older than the layout refuses it) with the
 * blocked layout's hash name and "layout=blocked". */
static int record_format(const lb_geometry *g, int blocked, uint32_t shards, char *buf,
                         size_t cap)
{
    if (blocked)
        return snprintf(buf, cap, "ling_bloom:v=%d;shards=%" PRIu32 ";m=%" PRIu64 ";k=%" PRIu32
                                  ";hash=%s;layout=blocked",
                        LB_BITMAP_FORMAT_VERSION_BLOCKED, shards, g->m, g->k, LB_BITMAP_BLOCKED_HASH);
    return snprintf(buf, cap, "ling_bloom:v=1;shards=%" PRIu32 ";m=%" PRIu64 ";k=%" PRIu32
                              ";hash=%s",
                    shards, g->m, g->k, lb_hash_scheme_name(g->scheme));
}

/* 0 and the fields from a record's text, or -1 when it is not one.  A blocked
 * record's geometry carries the xxh3-mix scheme, as a blocked bitmap's does. */
static int record_parse(const char *s, size_t len, uint32_t *shards, lb_geometry *g,
                        int *blocked)
{
    char buf[200], hash[32];
    unsigned long long sh, m;
    unsigned k;
    int v = 0, end = 0, scheme;
    if (len >= sizeof buf)
        return -1;
    memcpy(buf, s, len);
    buf[len] = '\0';
    if (sscanf(buf, "ling_bloom:v=%d;", &v) != 1)
        return -1;
    if (v == 1) {
        if (sscanf(buf, "ling_bloom:v=1;shards=%llu;m=%llu;k=%u;hash=%31[a-z0-9-]%n", &sh, &m,
                   &k, hash, &end) != 4 ||
            (size_t)end != len)
            return -1;
        scheme = lb_hash_scheme_parse(hash);
        *blocked = 0;
    } else if (v == LB_BITMAP_FORMAT_VERSION_BLOCKED) {
        if (sscanf(buf, "ling_bloom:v=2;shards=%llu;m=%llu;k=%u;hash=%31[a-z0-9-];layout=blocked%n",
                   &sh, &m, &k, hash, &end) != 4 ||
            (size_t)end != len || strcmp(hash, LB_BITMAP_BLOCKED_HASH) != 0 ||
            lb_blocked_check_geometry(m, k) != LB_OK)
            return -1;
        scheme = LB_HASH_XXH3_MIX;
        *blocked = 1;
    } else
        return -1;
    if (sh < 2 || sh > LB_SHARDED_MAX_SHARDS || m < 1 || m > LB_MAX_BITS || k < 1 || k > LB_MAX_K ||
        scheme < 0)
        return -1;
    *shards = (uint32_t)sh;
    lb_geometry_init(g, m, k, (lb_hash_scheme)scheme);
    return 0;
}

/* The names are built byte by byte: the tag is binary (a NUL in a key is one
 * of its bytes, not its end), so no printf of it. */

/* "{T}:shards" into a malloc'd buffer (its length in *len), or NULL. */
static char *record_name_of(const char *tag, size_t taglen, size_t *len)
{
    static const char suffix[] = "}:shards";
    char *name = malloc(taglen + sizeof suffix + 1);
    if (!name)
        return NULL;
    name[0] = '{';
    memcpy(name + 1, tag, taglen);
    memcpy(name + 1 + taglen, suffix, sizeof suffix); /* with its NUL */
    *len = 1 + taglen + sizeof suffix - 1;
    return name;
}

/* "{T:i}" into buf (cap >= taglen + 14). */
static void shard_name(const char *tag, size_t taglen, uint32_t i, char *buf, size_t *len)
{
    buf[0] = '{';
    memcpy(buf + 1, tag, taglen);
    *len = 1 + taglen + (size_t)sprintf(buf + 1 + taglen, ":%" PRIu32 "}", i);
}

static lb_redis_status sharded_new(lb_redis *conn, const void *key, size_t keylen,
                                   const lb_geometry *g, const lb_bf_options *bo, uint32_t shards,
                                   lb_sharded **out)
{
    *out = NULL;
    if (shards < 2 || shards > LB_SHARDED_MAX_SHARDS)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "shards must be in 2..%d, not %" PRIu32,
                                  LB_SHARDED_MAX_SHARDS, shards);
    if (keylen == 0)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "the Redis key must not be empty");
    lb_sharded *sh = calloc(1, sizeof *sh);
    if (!sh)
        return lb_redis_set_error(conn, LB_REDIS_ERR_NOMEM, "out of memory");
    sh->n = shards;
    if (g) {
        sh->g = *g;
        sh->reclen = record_format(g, 0, shards, sh->rec, sizeof sh->rec);
    } else {
        sh->g.scheme = LB_HASH_DEFAULT; /* what picks a key's shard */
        sh->reclen = snprintf(sh->rec, sizeof sh->rec,
                              "ling_bloom:v=1;shards=%" PRIu32 ";redisbloom;capacity=%" PRIu64
                              ";error_rate=%.17g;%s=%" PRIu32,
                              shards, bo->capacity, bo->error_rate,
                              bo->non_scaling ? "non_scaling" : "expansion",
                              bo->non_scaling ? 1 : bo->expansion);
    }
    sh->conn = calloc(shards, sizeof *sh->conn);
    if (g)
        sh->bm = calloc(shards, sizeof *sh->bm);
    else
        sh->bf = calloc(shards, sizeof *sh->bf);
    sh->st = calloc(shards, sizeof *sh->st);
    sh->count = calloc(shards, sizeof *sh->count);
    sh->off = calloc(shards + 1, sizeof *sh->off);
    sh->tag = make_tag(key, keylen, &sh->taglen);
    if (!sh->conn || (!sh->bm && !sh->bf) || !sh->st || !sh->count || !sh->off || !sh->tag)
        goto nomem;
    if (!(sh->record = record_name_of(sh->tag, sh->taglen, &sh->recordlen)))
        goto nomem;
    size_t cap = sh->taglen + 32;
    char *name = malloc(cap);
    if (!name)
        goto nomem;
    for (uint32_t i = 0; i < shards; i++) {
        sh->conn[i] = i == 0 ? conn : lb_redis_new_like(conn);
        if (!sh->conn[i]) {
            free(name);
            goto nomem;
        }
        size_t len;
        shard_name(sh->tag, sh->taglen, i, name, &len);
        lb_redis_status st = g ? lb_bitmap_new(sh->conn[i], name, len, g, 0, &sh->bm[i])
                               : lb_bf_new(sh->conn[i], name, len, bo, &sh->bf[i]);
        if (st != LB_REDIS_OK) {
            if (i)
                lb_redis_take_error(conn, sh->conn[i]);
            free(name);
            lb_sharded_free(sh);
            return st;
        }
    }
    free(name);
    *out = sh;
    return LB_REDIS_OK;
nomem:
    lb_sharded_free(sh);
    return lb_redis_set_error(conn, LB_REDIS_ERR_NOMEM, "out of memory");
}

lb_redis_status lb_sharded_new(lb_redis *conn, const void *key, size_t keylen,
                                     const lb_geometry *g, uint32_t shards,
                                     lb_sharded **out)
{
    return sharded_new(conn, key, keylen, g, NULL, shards, out);
}

lb_redis_status lb_sharded_new_bf(lb_redis *conn, const void *key, size_t keylen,
                                        const lb_bf_options *shard_opt, uint32_t shards,
                                        lb_sharded **out)
{
    return sharded_new(conn, key, keylen, NULL, shard_opt, shards, out);
}

void lb_sharded_free(lb_sharded *sh)
{
    if (!sh)
        return;
    for (uint32_t i = 0; i < sh->n; i++) {
        if (sh->bm)
            lb_bitmap_free(sh->bm[i]);
        if (sh->bf)
            lb_bf_free(sh->bf[i]);
        if (sh->conn && i > 0)
            lb_redis_free(sh->conn[i]);
    }
    free(sh->conn);
    free(sh->bm);
    free(sh->bf);
    free(sh->st);
    free(sh->count);
    free(sh->off);
    free(sh->tag);
    free(sh->record);
    free(sh->pos);
    free(sh->gk);
    free(sh->gout);
    free(sh->w_list);
    free(sh->w_ops);
    free(sh->w_record);
    free(sh);
}

void lb_sharded_abandon(lb_sharded *sh)
{
    for (uint32_t i = 1; sh && i < sh->n; i++)
        lb_redis_abandon(sh->conn[i]);
}

lb_redis_status lb_sharded_set_layout(lb_sharded *sh, lb_bitmap_layout layout)
{
    if (!sh->bm)
        return lb_redis_set_error(sh->conn[0], LB_REDIS_ERR_ARG,
                                  "a layout is for bitmap shards, not RedisBloom ones");
    for (uint32_t i = 0; i < sh->n; i++) {
        lb_redis_status st = lb_bitmap_set_layout(sh->bm[i], layout);
        if (st != LB_REDIS_OK) {
            if (i)
                lb_redis_take_error(sh->conn[0], sh->conn[i]);
            return st;
        }
    }
    sh->blocked = layout == LB_BITMAP_BLOCKED;
    sh->reclen = record_format(&sh->g, sh->blocked, sh->n, sh->rec, sizeof sh->rec);
    sh->record_ok = 0;
    return LB_REDIS_OK;
}

void lb_sharded_set_mode(lb_sharded *sh, lb_bitmap_mode mode)
{
    for (uint32_t i = 0; sh->bm && i < sh->n; i++)
        lb_bitmap_set_mode(sh->bm[i], mode);
}

void lb_sharded_set_chunk_keys(lb_sharded *sh, size_t chunk_keys)
{
    for (uint32_t i = 0; i < sh->n; i++) {
        if (sh->bm)
            lb_bitmap_set_chunk_keys(sh->bm[i], chunk_keys);
        else
            lb_bf_set_chunk_keys(sh->bf[i], chunk_keys);
    }
}

/* ------------------------------------------------------------- the record */

/* The hash name a record of this layout shows (for messages). */
static const char *hash_shown(const lb_geometry *g, int blocked)
{
    return blocked ? LB_BITMAP_BLOCKED_HASH : lb_hash_scheme_name(g->scheme);
}

static lb_redis_status record_reply(lb_redis *conn, const char *name, size_t namelen,
                                    const lb_reply *x, const lb_geometry *want_g,
                                    int want_blocked, uint32_t want_n, uint32_t *shards,
                                    lb_geometry *g, int *blocked)
{
    char shown[120];
    lb_redis_show(name, namelen, shown, sizeof shown);
    if (x->type == LB_REPLY_NIL)
        return LB_REDIS_ERR_NOTFOUND;
    if (x->type != LB_REPLY_STRING || record_parse(x->str, x->len, shards, g, blocked))
        return lb_redis_set_error(conn, LB_REDIS_ERR_MISMATCH,
                                  "the key '%s' holds no sharded-filter record this version "
                                  "reads",
                                  shown);
    if (want_g && (*shards != want_n || g->m != want_g->m || g->k != want_g->k ||
                   *blocked != want_blocked || g->scheme != want_g->scheme))
        return lb_redis_set_error(
            conn, LB_REDIS_ERR_MISMATCH,
            "the sharded filter at '%s' has shards=%" PRIu32 " m=%" PRIu64 " k=%" PRIu32
            " hash=%s%s per shard; this one shards=%" PRIu32 " m=%" PRIu64 " k=%" PRIu32
            " hash=%s%s",
            shown, *shards, g->m, g->k, hash_shown(g, *blocked),
            *blocked ? " layout=blocked" : "", want_n, want_g->m, want_g->k,
            hash_shown(want_g, want_blocked), want_blocked ? " layout=blocked" : "");
    return LB_REDIS_OK;
}

/* The record's operations as step machines (op.h), run by lb_op_run: the
 * claim (SET NX) and comparison before the first command and after conn[0]
 * reconnected, and the read of RedisFilter.open. */
typedef struct {
    lb_op op;
    lb_sharded *sh;      /* the claim; NULL: a read */
    const char *name;    /* the record's name */
    size_t namelen;
    lb_redis_batch b;
    int sent;
    uint32_t *shards;    /* a read's results */
    lb_geometry *g;
    int blocked;
} record_op;

static lb_redis_status record_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    record_op *o = (record_op *)op;
    if (o->sent++)
        return LB_REDIS_OK;
    lb_redis_batch *b = &o->b;
    if (o->sh) {
        lb_redis_batch_cmd(b, 4);
        lb_redis_batch_arg(b, "SET", 3);
        lb_redis_batch_arg(b, o->name, o->namelen);
        lb_redis_batch_arg(b, o->sh->rec, (size_t)o->sh->reclen);
        lb_redis_batch_arg(b, "NX", 2);
        lb_redis_batch_expect_elements(b, 0);
        lb_redis_batch_expect_bytes(b, 256);
    }
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "GET", 3);
    lb_redis_batch_arg(b, o->name, o->namelen);
    *req = b;
    *flags = LB_REDIS_IDEMPOTENT | (o->sh ? LB_REDIS_WRITE : 0);
    return LB_REDIS_OK;
}

/* RedisBloom shards: the same parameters, to the letter. */
static lb_redis_status bf_record_reply(lb_sharded *sh, const lb_reply *x)
{
    char shown[120];
    const char *val = sh->rec;
    lb_redis_show(sh->record, sh->recordlen, shown, sizeof shown);
    if (x->type == LB_REPLY_NIL)
        return LB_REDIS_ERR_NOTFOUND;
    if (x->type == LB_REPLY_STRING && x->len == (size_t)sh->reclen && memcmp(x->str, val, x->len) == 0)
        return LB_REDIS_OK;
    int theirs = x->type == LB_REPLY_STRING ? (int)(x->len > 160 ? 160 : x->len) : 0;
    return lb_redis_set_error(sh->conn[0], LB_REDIS_ERR_MISMATCH,
                              "the sharded filter at '%s' was made as '%.*s'; this one is '%s'",
                              shown, theirs, theirs ? x->str : "", val);
}

static lb_redis_status claim_done(record_op *o, lb_redis_status st, lb_reply **rs)
{
    lb_sharded *sh = o->sh;
    lb_redis *c = sh->conn[0];
    if (st == LB_REDIS_ERR_WRONGTYPE) {
        char shown[120], msg[300]; /* the server's text, copied: errstr is rewritten */
        lb_redis_show(sh->record, sh->recordlen, shown, sizeof shown);
        snprintf(msg, sizeof msg, "%s", lb_redis_errstr(c));
        return lb_redis_set_error(c, st, "%s (key '%s')", msg, shown);
    }
    if (st != LB_REDIS_OK)
        return st;
    uint32_t n;
    lb_geometry g;
    int blocked;
    if (sh->bf)
        st = bf_record_reply(sh, rs[1]);
    else
        st = record_reply(c, sh->record, sh->recordlen, rs[1], &sh->g, sh->blocked, sh->n, &n, &g,
                          &blocked);
    if (st == LB_REDIS_ERR_NOTFOUND) { /* deleted between the SET and the GET */
        char shown[120];
        return lb_redis_set_error(c, LB_REDIS_ERR_IO, "the record '%s' vanished; try again",
                                  lb_redis_show(sh->record, sh->recordlen, shown, sizeof shown));
    }
    if (st == LB_REDIS_OK) {
        sh->record_ok = 1;
        sh->record_conn = lb_redis_connect_count(c);
    }
    return st;
}

static lb_redis_status record_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    record_op *o = (record_op *)op;
    if (o->sh)
        return claim_done(o, st, rs);
    if (st != LB_REDIS_OK)
        return st;
    return record_reply(op->conn, o->name, o->namelen, rs[0], NULL, 0, 0, o->shards, o->g,
                        &o->blocked);
}

static const lb_op_vt record_vt = {record_next, record_done};

static lb_redis_status run_record(record_op *o)
{
    o->op.vt = &record_vt;
    lb_redis_batch_init(&o->b);
    lb_redis_status st = lb_op_run(&o->op);
    lb_redis_batch_free(&o->b);
    return st;
}

static lb_redis_status ensure_record(lb_sharded *sh)
{
    lb_redis *c = sh->conn[0];
    if (sh->record_ok && sh->record_conn == lb_redis_connect_count(c) && lb_redis_is_connected(c))
        return LB_REDIS_OK;
    record_op o = {{NULL, c, 0, LB_REDIS_OK}, sh, sh->record, sh->recordlen, {0}, 0, NULL, NULL, 0};
    return run_record(&o);
}

lb_redis_status lb_sharded_read_record(lb_redis *conn, const void *key, size_t keylen,
                                       uint32_t *shards, lb_geometry *g,
                                       lb_bitmap_layout *layout)
{
    size_t taglen, namelen = 0;
    char *tag = make_tag(key, keylen, &taglen);
    char *name = tag ? record_name_of(tag, taglen, &namelen) : NULL;
    free(tag);
    if (!name)
        return lb_redis_set_error(conn, LB_REDIS_ERR_NOMEM, "out of memory");
    record_op o = {{NULL, conn, 0, 0}, NULL, name, namelen, {0}, 0, shards, g, 0};
    lb_redis_status st = run_record(&o);
    if (st == LB_REDIS_OK && layout)
        *layout = o.blocked ? LB_BITMAP_BLOCKED : LB_BITMAP_STANDARD;
    free(name);
    return st;
}

/* ------------------------------------------------------ running the shards */

enum { OP_ADD, OP_TEST, OP_RESET, OP_BITCOUNT, OP_CARD };

/* Shard i's step machine for op (its keys the grouped ones), in *out. */
static lb_redis_status begin_one(lb_sharded *sh, int op, uint32_t i, lb_op **out)
{
    size_t a = sh->off[i], n = sh->off[i + 1] - a;
    *out = NULL;
    if (sh->bf) {
        lb_redisbloom *bf = sh->bf[i];
        switch (op) {
        case OP_ADD:
        case OP_TEST:
            return lb_bf_begin(bf, op == OP_ADD ? LB_BF_OP_ADD : LB_BF_OP_TEST, sh->gk + a, n,
                               sh->gout + a, out);
        case OP_RESET:
            return lb_bf_begin(bf, LB_BF_OP_RESET, NULL, 0, NULL, out);
        default:
            *out = lb_bf_card_begin(bf, &sh->count[i]);
            return LB_REDIS_OK;
        }
    }
    lb_bitmap *bm = sh->bm[i];
    switch (op) {
    case OP_ADD:
    case OP_TEST:
        return lb_bitmap_begin(bm, op == OP_ADD ? LB_BITMAP_OP_ADD : LB_BITMAP_OP_TEST,
                               sh->gk + a, n, sh->gout + a, out);
    case OP_RESET:
        return lb_bitmap_begin(bm, LB_BITMAP_OP_RESET, NULL, 0, NULL, out);
    default:
        *out = lb_bitmap_bitcount_begin(bm, &sh->count[i]);
        return LB_REDIS_OK;
    }
}

/* A shard's lane: its machine begun when the driver first asks for a step,
 * so that the first shards' requests are out while the next are built. */
typedef struct {
    lb_sharded *sh;
    int op;
    uint32_t i;
    lb_op *o; /* NULL until begun (and when begin failed) */
} shard_lane;

static int shard_lane_next(lb_lane *l, lb_redis_step *s)
{
    shard_lane *x = l->arg;
    if (!x->o) {
        lb_sharded *sh = x->sh;
        sh->st[x->i] = begin_one(sh, x->op, x->i, &x->o);
        if (sh->st[x->i] != LB_REDIS_OK || !x->o) {
            x->o = NULL;
            memset(s, 0, sizeof *s);
            return 0;
        }
        sh->st[x->i] = LB_REDIS_ERR_ARG; /* until the machine says */
    }
    return lb_op_wire_step(x->o, s);
}

/* Run op on the shards listed, each on its own connection, all at once on
 * this thread (lanes.h: one poll over their sockets); then the first failure
 * by shard, if any. */
static lb_redis_status run(lb_sharded *sh, int op, const uint32_t *list, size_t nlist)
{
    enum { SMALL = 16 };
    lb_lane small_l[SMALL];
    shard_lane small_x[SMALL];
    lb_lane *l = nlist <= SMALL ? small_l : malloc(nlist * sizeof *l);
    shard_lane *x = nlist <= SMALL ? small_x : malloc(nlist * sizeof *x);
    lb_redis_status st = LB_REDIS_OK;
    if (!l || !x) {
        st = lb_redis_set_error(sh->conn[0], LB_REDIS_ERR_NOMEM, "out of memory");
        goto out;
    }
    for (size_t s = 0; s < nlist; s++) {
        uint32_t i = list[s];
        shard_lane xs = {sh, op, i, NULL};
        lb_lane ls = {shard_lane_next, sh->conn[i], &x[s], 0, {0}, 0};
        x[s] = xs;
        l[s] = ls;
        sh->st[i] = LB_REDIS_OK;
    }
    lb_lanes_run(l, nlist);
    for (size_t s = 0; s < nlist; s++)
        if (x[s].o)
            sh->st[x[s].i] = lb_op_wire_status(x[s].o);
    for (size_t s = 0; s < nlist; s++) {
        uint32_t i = list[s];
        if (sh->st[i] != LB_REDIS_OK) {
            if (i != 0)
                lb_redis_take_error(sh->conn[0], sh->conn[i]);
            st = sh->st[i];
            break;
        }
    }
out:
    if (l != small_l)
        free(l);
    if (x != small_x)
        free(x);
    return st;
}

static lb_redis_status all_shards(lb_sharded *sh, int op)
{
    uint32_t *list = malloc(sh->n * sizeof *list);
    if (!list)
        return lb_redis_set_error(sh->conn[0], LB_REDIS_ERR_NOMEM, "out of memory");
    for (uint32_t i = 0; i < sh->n; i++)
        list[i] = i;
    lb_redis_status st = run(sh, op, list, sh->n);
    free(list);
    return st;
}

/* Group the n keys by shard (a counting sort that keeps their order) into
 * gk, and list the shards that got some.  OK or NOMEM. */
static lb_redis_status group(lb_sharded *sh, const lb_key *keys, size_t n, uint32_t *list,
                             size_t *nlist)
{
    if (sh->cap < n) {
        size_t *pos = realloc(sh->pos, n * sizeof *pos);
        if (pos)
            sh->pos = pos;
        lb_key *gk = realloc(sh->gk, n * sizeof *gk);
        if (gk)
            sh->gk = gk;
        uint8_t *gout = realloc(sh->gout, n);
        if (gout)
            sh->gout = gout;
        if (!pos || !gk || !gout)
            return lb_redis_set_error(sh->conn[0], LB_REDIS_ERR_NOMEM, "out of memory");
        sh->cap = n;
    }
    memset(sh->count, 0, sh->n * sizeof *sh->count);
    for (size_t j = 0; j < n; j++) {
        lb_hash_pair h = sh->blocked ? lb_hash_blocked(keys[j].data, keys[j].len)
                                     : lb_hash(sh->g.scheme, keys[j].data, keys[j].len);
        uint32_t s = lb_sharded_pick(h, sh->n);
        sh->pos[j] = s;
        sh->count[s]++;
    }
    sh->off[0] = 0;
    for (uint32_t i = 0; i < sh->n; i++)
        sh->off[i + 1] = sh->off[i] + sh->count[i];
    *nlist = 0;
    for (uint32_t i = 0; i < sh->n; i++)
        if (sh->count[i])
            list[(*nlist)++] = i;
    for (size_t j = 0; j < n; j++) {
        uint32_t s = (uint32_t)sh->pos[j];
        size_t p = sh->off[s + 1] - sh->count[s]--;
        sh->pos[j] = p;
        sh->gk[p] = keys[j];
    }
    return LB_REDIS_OK;
}

static lb_redis_status keys_op(lb_sharded *sh, int op, const lb_key *keys, size_t n,
                               uint8_t *out)
{
    if (n == 0)
        return LB_REDIS_OK;
    lb_redis_status st = ensure_record(sh);
    if (st != LB_REDIS_OK)
        return st;
    uint32_t list[LB_SHARDED_MAX_SHARDS];
    size_t nlist;
    if ((st = group(sh, keys, n, list, &nlist)) != LB_REDIS_OK)
        return st;
    st = run(sh, op, list, nlist);
    if (st == LB_REDIS_OK && out)
        for (size_t j = 0; j < n; j++)
            out[j] = sh->gout[sh->pos[j]];
    return st;
}

lb_redis_status lb_sharded_add(lb_sharded *sh, const lb_key *keys, size_t n,
                                     uint8_t *was_new)
{
    return keys_op(sh, OP_ADD, keys, n, was_new);
}

lb_redis_status lb_sharded_test(lb_sharded *sh, const lb_key *keys, size_t n,
                                      uint8_t *present)
{
    return keys_op(sh, OP_TEST, keys, n, present);
}

lb_redis_status lb_sharded_reset(lb_sharded *sh)
{
    lb_redis_status st = ensure_record(sh); /* never reset another filter's shards */
    return st == LB_REDIS_OK ? all_shards(sh, OP_RESET) : st;
}

lb_redis_status lb_sharded_bitcount(lb_sharded *sh, uint64_t *count)
{
    lb_redis_status st = all_shards(sh, sh->bf ? OP_CARD : OP_BITCOUNT);
    *count = 0;
    for (uint32_t i = 0; st == LB_REDIS_OK && i < sh->n; i++)
        *count += sh->count[i];
    return st;
}

/* ------------------------------------------ the asyncio transport's form */

lb_redis *lb_sharded_conn(const lb_sharded *sh, uint32_t i)
{
    return i < sh->n ? sh->conn[i] : NULL;
}

void lb_sharded_set_conn(lb_sharded *sh, uint32_t i, lb_redis *conn)
{
    if (i >= sh->n || sh->conn[i] == conn)
        return;
    if (i > 0)
        lb_redis_free(sh->conn[i]);
    sh->conn[i] = conn;
    if (sh->bm)
        lb_bitmap_set_conn(sh->bm[i], conn);
    else
        lb_bf_set_conn(sh->bf[i], conn);
}

enum { WS_RECORD, WS_SHARDS, WS_END };

lb_redis_status lb_sharded_wire_begin(lb_sharded *sh, int kind, const lb_key *keys, size_t n,
                                      uint8_t *out)
{
    if (!sh->w_list)
        sh->w_list = malloc(sh->n * sizeof *sh->w_list);
    if (!sh->w_ops)
        sh->w_ops = malloc(sh->n * sizeof *sh->w_ops);
    if (!sh->w_record)
        sh->w_record = calloc(1, sizeof(record_op));
    if (!sh->w_list || !sh->w_ops || !sh->w_record)
        return lb_redis_set_error(sh->conn[0], LB_REDIS_ERR_NOMEM, "out of memory");
    const int reset = kind == LB_BITMAP_OP_RESET;
    sh->w_kind = kind;
    sh->w_n = reset ? 0 : n;
    sh->w_out = out;
    sh->w_st = LB_REDIS_OK;
    sh->w_nlist = 0;
    sh->w_stage = WS_RECORD;
    sh->w_nshards = 0;
    if (!reset && n == 0) {
        sh->w_stage = WS_END;
        return LB_REDIS_OK;
    }
    /* Every shard's machine begins now (each builds its first round trip: the
     * keys need not live longer); they run after the record's check. */
    size_t nlist = 0;
    if (reset) {
        for (uint32_t i = 0; i < sh->n; i++)
            sh->w_list[nlist++] = i;
    } else {
        lb_redis_status st = group(sh, keys, n, sh->w_list, &nlist);
        if (st != LB_REDIS_OK)
            return st;
    }
    for (size_t j = 0; j < nlist; j++) {
        uint32_t i = sh->w_list[j];
        size_t a = sh->off[i], cnt = reset ? 0 : sh->off[i + 1] - a;
        const lb_key *k = reset ? NULL : sh->gk + a;
        uint8_t *o = reset ? NULL : sh->gout + a;
        lb_redis_status st = sh->bm ? lb_bitmap_begin(sh->bm[i], kind, k, cnt, o, &sh->w_ops[j])
                                    : lb_bf_begin(sh->bf[i], kind, k, cnt, o, &sh->w_ops[j]);
        if (st != LB_REDIS_OK) {
            if (i != 0)
                lb_redis_take_error(sh->conn[0], sh->conn[i]);
            return st;
        }
    }
    sh->w_nshards = nlist;
    return LB_REDIS_OK;
}

/* The outcome of the stage that ran: the first failure by shard. */
static void stage_over(lb_sharded *sh)
{
    for (size_t j = 0; j < sh->w_nlist && sh->w_st == LB_REDIS_OK; j++) {
        const lb_op *op = sh->w_stage == WS_SHARDS ? &((record_op *)sh->w_record)->op
                                                   : sh->w_ops[j];
        uint32_t i = sh->w_stage == WS_SHARDS ? 0 : sh->w_list[j];
        lb_redis_status st = lb_op_wire_status(op);
        if (st != LB_REDIS_OK) {
            if (i != 0)
                lb_redis_take_error(sh->conn[0], sh->conn[i]);
            sh->w_st = st;
        }
    }
    sh->w_nlist = 0;
}

size_t lb_sharded_wire_stage(lb_sharded *sh, lb_op **ops, uint32_t *shard_of)
{
    stage_over(sh);
    if (sh->w_st != LB_REDIS_OK)
        return 0;
    if (sh->w_stage == WS_RECORD) {
        sh->w_stage = WS_SHARDS;
        lb_redis *c = sh->conn[0];
        if (!(sh->record_ok && sh->record_conn == lb_redis_connect_count(c) &&
              lb_redis_is_connected(c))) {
            record_op *o = sh->w_record;
            lb_redis_batch_free(&o->b);
            record_op fresh = {{&record_vt, c, 0, LB_REDIS_OK}, sh, sh->record,
                               sh->recordlen, {0}, 0, NULL, NULL, 0};
            *o = fresh;
            lb_redis_batch_init(&o->b);
            ops[0] = &o->op;
            shard_of[0] = 0;
            return sh->w_nlist = 1;
        }
    }
    if (sh->w_stage == WS_SHARDS) {
        sh->w_stage = WS_END;
        for (size_t j = 0; j < sh->w_nshards; j++) {
            ops[j] = sh->w_ops[j];
            shard_of[j] = sh->w_list[j];
        }
        return sh->w_nlist = sh->w_nshards;
    }
    return 0;
}

lb_redis_status lb_sharded_wire_end(lb_sharded *sh)
{
    stage_over(sh);
    record_op *o = sh->w_record;
    if (o)
        lb_redis_batch_free(&o->b);
    if (sh->w_st == LB_REDIS_OK && sh->w_out)
        for (size_t j = 0; j < sh->w_n; j++)
            sh->w_out[j] = sh->gout[sh->pos[j]];
    return sh->w_st;
}
