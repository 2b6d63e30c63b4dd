/* redisbloom_dump.c: the RedisBloom operations that read a whole filter or
 * write one back, as step machines (op.h) run by lb_op_run: info, card,
 * scandump, the bounded dump, restore. */
#define _POSIX_C_SOURCE 200809L
#include "redisbloom_op.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reply.h"
#include "slots.h"

#define BF_RESTORE_TMP_TTL_MS 600000          /* temp key of restore: 10 minutes */
#define BF_RESTORE_ROUND_BYTES ((size_t)8 << 20) /* chunk bytes per restore round trip */

/* ------------------------------------------------------------- info / card */

/* Pipelined TYPE + cmd: interpret the TYPE reply (rs[0]) after cmd's
 * (rs[1]): a missing module wins, then a missing key, then another type. */
static lb_redis_status typed_reply(lb_redisbloom *bf, lb_reply **rs, const char *cmd)
{
    char kb[160];
    if (rs[1]->type == LB_REPLY_ERROR && rs[1]->str && lb_bf_module_missing(rs[1]->str))
        return lb_bf_fail_reply(bf, rs[1], cmd, 0);
    lb_bf_note_reply(bf, rs[1]);
    const lb_reply *t = rs[0];
    if ((t->type == LB_REPLY_STATUS || t->type == LB_REPLY_STRING) && t->str &&
        lb_ci_equal(t->str, t->len, "none")) {
        if (rs[1]->type == LB_REPLY_ERROR)
            lb_bf_keep_text(bf, rs[1]->str ? rs[1]->str : "", rs[1]->len);
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOTFOUND,
                                  "no RedisBloom filter at key '%s' (%s: the key does not exist)",
                                  lb_redis_show(bf->key, bf->keylen, kb, sizeof kb), cmd);
    }
    lb_redis_status st = lb_bf_check_type_reply(bf, t, "");
    if (st != LB_REDIS_OK)
        return st;
    if (rs[1]->type == LB_REPLY_ERROR)
        return lb_bf_fail_reply(bf, rs[1], cmd, 0);
    return LB_REDIS_OK;
}

/* TYPE key + BF.INFO key into bf->batch. */
static const lb_redis_batch *info_request(lb_redisbloom *bf, int *flags)
{
    lb_redis_batch *b = &bf->batch;
    lb_redis_batch_clear(b);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "TYPE", 4);
    lb_bf_arg_key(bf);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "BF.INFO", 7);
    lb_bf_arg_key(bf);
    lb_redis_batch_expect_elements(b, BF_INFO_MAX_ELEMENTS);
    lb_redis_batch_expect_bytes(b, 4096);
    *flags = BF_READ;
    return b;
}

/* what: the call that asked (for the message of an INFO it cannot read). */
static lb_redis_status info_reply(lb_redisbloom *bf, lb_redis_status st, lb_reply **rs,
                                  lb_bf_info *out, const char *what)
{
    if (st != LB_REDIS_OK)
        return st;
    st = typed_reply(bf, rs, "BF.INFO");
    if (st != LB_REDIS_OK)
        return st;
    /* a filter holds at least one sub-filter of capacity >= 1 */
    int parsed = lb_bf_parse_info(rs[1], out);
    if (parsed == -2)
        return lb_bf_info_unreadable(bf, what, NULL);
    if (parsed < 0 || out->capacity == 0 || out->filters == 0)
        return lb_bf_bad_reply(bf, "BF.INFO");
    return LB_REDIS_OK;
}

static lb_redis_status info_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    bf_op *o = (bf_op *)op;
    if (o->stage++ == 0)
        *req = info_request(o->bf, flags);
    return LB_REDIS_OK;
}

static lb_redis_status info_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    bf_op *o = (bf_op *)op;
    return info_reply(o->bf, st, rs, o->info, "info()");
}

static const lb_op_vt info_vt = {info_next, info_done};

lb_redis_status lb_bf_info_get(lb_redisbloom *bf, lb_bf_info *out)
{
    lb_bf_clear_call(bf);
    bf_op *o = lb_bf_op_start(bf, &info_vt);
    o->info = out;
    return lb_op_run(&o->op);
}

/* card: BF.CARD (0 for a missing key); a module without it (before v2.4.4):
 * BF.INFO's "Number of items inserted".  A filter made without a ttl that
 * this client saw (see lost in redisbloom.c) and that is gone now is
 * LB_REDIS_ERR_LOST, as for a test, never a count of 0: TYPE key is asked in
 * the same round trip. */
static int card_guards_loss(const lb_redisbloom *bf)
{
    return bf->opt.ttl_ms == 0 && bf->seen;
}

enum { CD_CARD = 0, CD_CARDING, CD_INFO, CD_INFOING, CD_OVER };

static lb_redis_status card_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    bf_op *o = (bf_op *)op;
    lb_redisbloom *bf = o->bf;
    lb_redis_batch *b = &bf->batch;
    if (o->stage == CD_CARD) {
        lb_redis_batch_clear(b);
        lb_redis_batch_cmd(b, 2);
        lb_redis_batch_arg(b, "BF.CARD", 7);
        lb_bf_arg_key(bf);
        lb_redis_batch_expect_elements(b, 0);
        lb_redis_batch_expect_bytes(b, 0);
        o->typed = card_guards_loss(bf);
        if (o->typed) {
            lb_redis_batch_cmd(b, 2);
            lb_redis_batch_arg(b, "TYPE", 4);
            lb_bf_arg_key(bf);
            lb_redis_batch_expect_elements(b, 0);
            lb_redis_batch_expect_bytes(b, 64);
        }
        *req = b;
        *flags = BF_READ;
        o->stage = CD_CARDING;
    } else if (o->stage == CD_INFO) {
        lb_bf_clear_call(bf);
        *req = info_request(bf, flags);
        o->stage = CD_INFOING;
    }
    return LB_REDIS_OK;
}

static lb_redis_status card_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    bf_op *o = (bf_op *)op;
    lb_redisbloom *bf = o->bf;
    if (o->stage == CD_INFOING) {
        lb_bf_info info;
        o->stage = CD_OVER;
        st = info_reply(bf, st, rs, &info, "card() on a server without BF.CARD");
        if (st == LB_REDIS_ERR_NOTFOUND)
            return card_guards_loss(bf) ? lb_bf_lost(bf, 0) : LB_REDIS_OK;
        if (st == LB_REDIS_OK && !(info.present & LB_BF_INFO_ITEMS))
            return lb_bf_info_unreadable(bf, "card() on a server without BF.CARD",
                                         "Number of items inserted");
        if (st == LB_REDIS_OK && info.items < 0)
            return lb_bf_bad_reply(bf, "BF.INFO");
        if (st == LB_REDIS_OK)
            *o->count = (uint64_t)info.items;
        return st;
    }
    if (st != LB_REDIS_OK)
        return st;
    const lb_reply *x = rs[0];
    o->stage = CD_OVER;
    lb_bf_note_reply(bf, x);
    if (x->type == LB_REPLY_ERROR && x->str && lb_bf_module_missing(x->str)) {
        o->stage = CD_INFO; /* the same count from BF.INFO */
        return LB_REDIS_OK;
    }
    if (x->type == LB_REPLY_ERROR)
        return lb_bf_fail_reply(bf, x, "BF.CARD", 0);
    if (x->type != LB_REPLY_INTEGER || x->integer < 0)
        return lb_bf_bad_reply(bf, "BF.CARD");
    if (o->typed) {
        const lb_reply *t = rs[1];
        if ((t->type == LB_REPLY_STATUS || t->type == LB_REPLY_STRING) && t->str &&
            lb_ci_equal(t->str, t->len, "none"))
            return lb_bf_lost(bf, 0);
    }
    *o->count = (uint64_t)x->integer;
    return LB_REDIS_OK;
}

static const lb_op_vt card_vt = {card_next, card_done};

lb_op *lb_bf_card_begin(lb_redisbloom *bf, uint64_t *out)
{
    *out = 0;
    lb_bf_clear_call(bf);
    bf_op *o = lb_bf_op_start(bf, &card_vt);
    o->count = out;
    return &o->op;
}

lb_redis_status lb_bf_card(lb_redisbloom *bf, uint64_t *out)
{
    return lb_op_run(lb_bf_card_begin(bf, out));
}

/* ------------------------------------------------------------- scandump */

/* One BF.SCANDUMP (TYPE first at iterator 0); o->max_chunk > 0: its chunk may
 * not be longer (the bytes a dump has left), checked as the bytes arrive. */
static const lb_redis_batch *scandump_request(bf_op *o, int *flags)
{
    lb_redisbloom *bf = o->bf;
    lb_redis_batch *b = &bf->batch;
    lb_redis_batch_clear(b);
    if (o->iter == 0) {
        lb_redis_batch_cmd(b, 2);
        lb_redis_batch_arg(b, "TYPE", 4);
        lb_bf_arg_key(bf);
    }
    lb_redis_batch_cmd(b, 3);
    lb_redis_batch_arg(b, "BF.SCANDUMP", 11);
    lb_bf_arg_key(bf);
    lb_redis_batch_arg_i64(b, o->iter);
    lb_redis_batch_expect_elements(b, 2); /* [next iterator, chunk] */
    if (o->max_chunk)
        lb_redis_batch_expect_bytes(b, o->max_chunk > SIZE_MAX ? SIZE_MAX : (size_t)o->max_chunk);
    *flags = BF_READ;
    return b;
}

static lb_redis_status scandump_reply(bf_op *o, lb_redis_status st, lb_reply **rs)
{
    lb_redisbloom *bf = o->bf;
    if (st != LB_REDIS_OK)
        return st;
    const lb_reply *x = rs[o->iter == 0 ? 1 : 0];
    if (o->iter == 0) {
        st = typed_reply(bf, rs, "BF.SCANDUMP");
        if (st != LB_REDIS_OK)
            return st;
    } else if (x->type == LB_REPLY_ERROR) {
        return lb_bf_fail_reply(bf, x, "BF.SCANDUMP", 0);
    }
    if (x->type != LB_REPLY_ARRAY || x->len != 2 || !x->element[0] || !x->element[1] ||
        x->element[0]->type != LB_REPLY_INTEGER || x->element[0]->integer < 0)
        return lb_bf_bad_reply(bf, "BF.SCANDUMP");
    const lb_reply *c = x->element[1];
    o->next = x->element[0]->integer;
    if (o->next == 0)
        return LB_REDIS_OK; /* the end: "" (module) or nil (fakeredis) */
    if (c->type != LB_REPLY_STRING)
        return lb_bf_bad_reply(bf, "BF.SCANDUMP");
    o->data = c->str;
    o->len = c->len;
    return LB_REDIS_OK;
}

static lb_redis_status scandump_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    bf_op *o = (bf_op *)op;
    if (o->stage++ == 0)
        *req = scandump_request(o, flags);
    return LB_REDIS_OK;
}

static lb_redis_status scandump_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    return scandump_reply((bf_op *)op, st, rs);
}

static const lb_op_vt scandump_vt = {scandump_next, scandump_done};

lb_redis_status lb_bf_scandump(lb_redisbloom *bf, long long iter, long long *next,
                               const char **data, size_t *len)
{
    *next = 0;
    *data = NULL;
    *len = 0;
    lb_bf_clear_call(bf);
    if (iter < 0)
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "scandump iterator must be >= 0");
    bf_op *o = lb_bf_op_start(bf, &scandump_vt);
    o->iter = iter;
    lb_redis_status st = lb_op_run(&o->op);
    if (st == LB_REDIS_OK) {
        *next = o->next;
        *data = o->data;
        *len = o->len;
    }
    return st;
}

/* ------------------------------------------------------------------ dump */

void lb_bf_dump_init(lb_bf_dump *d)
{
    memset(d, 0, sizeof *d);
}

void lb_bf_dump_free(lb_bf_dump *d)
{
    free(d->seen);
    lb_bf_dump_init(d);
}

static size_t iter_slot(long long v, size_t cap)
{
    uint64_t h = (uint64_t)v * UINT64_C(0x9E3779B97F4A7C15);
    return (size_t)(h >> 17) & (cap - 1);
}

/* Add v to the set of iterators seen: 1 added, 0 already there, -1 no memory. */
static int iter_seen_add(lb_bf_dump *d, long long v)
{
    if ((d->seen_n + 1) * 2 > d->seen_cap) {
        size_t cap = d->seen_cap ? d->seen_cap * 2 : 64;
        long long *ns = malloc(cap * sizeof *ns);
        if (!ns)
            return -1;
        for (size_t i = 0; i < cap; i++)
            ns[i] = -1; /* iterators are > 0 */
        for (size_t i = 0; i < d->seen_cap; i++) {
            if (d->seen[i] < 0)
                continue;
            size_t j = iter_slot(d->seen[i], cap);
            while (ns[j] >= 0)
                j = (j + 1) & (cap - 1);
            ns[j] = d->seen[i];
        }
        free(d->seen);
        d->seen = ns;
        d->seen_cap = cap;
    }
    size_t j = iter_slot(v, d->seen_cap);
    while (d->seen[j] >= 0) {
        if (d->seen[j] == v)
            return 0;
        j = (j + 1) & (d->seen_cap - 1);
    }
    d->seen[j] = v;
    d->seen_n++;
    return 1;
}

/* The bounds of a dump from BF.INFO (see redisbloom.h). */
static void dump_bounds(const lb_bf_info *info, lb_bf_dump *d)
{
    const double cap_bytes = 1099511627776.0; /* 1 TiB: no Redis holds more */
    double size = info->size > 0 ? (double)info->size : 0;
    double filters = info->filters > 0 ? (double)info->filters : 1;
    if (filters > 65536)
        filters = 65536; /* a chain is a few dozen links; keep the numbers finite */
    double e = info->expansion > 1 ? (double)info->expansion : 1;
    double cap = info->capacity > 0 ? (double)info->capacity : 1;
    /* capacity * (1 + e + ... + e^(filters-1)), in closed form (no loop a
     * server could make long); overflow to inf is clamped below */
    double items = e == 1 ? cap * filters : cap * (pow(e, filters) - 1) / (e - 1);
    double b = 1048576.0 + 4 * size + 16 * items;
    if (!(b < cap_bytes))
        b = cap_bytes;
    d->max_bytes = (uint64_t)b;
    double c = 64 + 4 * filters + b / 4096;
    d->max_chunks = c > 1e9 ? (size_t)1e9 : (size_t)c;
}

/* The step's scandump against the walk's bounds (see redisbloom.h). */
static lb_redis_status dump_checked(bf_op *o)
{
    lb_redisbloom *bf = o->bf;
    lb_bf_dump *d = o->dump;
    if (o->next == 0) {
        d->done = 1;
        return LB_REDIS_OK;
    }
    int added = o->next == d->iter ? 0 : iter_seen_add(d, o->next);
    if (added < 0) {
        d->done = 1;
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOMEM, "out of memory");
    }
    d->chunks++;
    d->bytes += o->len;
    if (added && d->chunks <= d->max_chunks && d->bytes <= d->max_bytes) {
        d->iter = o->next;
        return LB_REDIS_OK;
    }
    char kb[160];
    d->done = 1;
    lb_redis_disconnect(bf->conn);
    if (!added)
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_PROTOCOL,
                                  "protocol error: BF.SCANDUMP of '%s' answered the iterator %lld "
                                  "again after %zu chunks (a cycle); connection dropped",
                                  lb_redis_show(bf->key, bf->keylen, kb, sizeof kb), o->next,
                                  d->chunks - 1);
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_PROTOCOL,
                              "protocol error: BF.SCANDUMP of '%s' goes on past what BF.INFO "
                              "allows (%zu chunks, %llu bytes; at most %zu chunks, %llu bytes); "
                              "connection dropped",
                              lb_redis_show(bf->key, bf->keylen, kb, sizeof kb), d->chunks,
                              (unsigned long long)d->bytes, d->max_chunks,
                              (unsigned long long)d->max_bytes);
}

enum { DS_INFO = 0, DS_INFOING, DS_SCAN, DS_SCANNING, DS_OVER };

static lb_redis_status dump_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    bf_op *o = (bf_op *)op;
    lb_bf_dump *d = o->dump;
    if (o->stage == DS_INFO && d->started)
        o->stage = DS_SCAN;
    if (o->stage == DS_INFO) {
        *req = info_request(o->bf, flags);
        o->stage = DS_INFOING;
    } else if (o->stage == DS_SCAN) {
        lb_bf_clear_call(o->bf);
        o->iter = d->iter;
        o->max_chunk = d->max_bytes - d->bytes + 1;
        *req = scandump_request(o, flags);
        o->stage = DS_SCANNING;
    }
    return LB_REDIS_OK;
}

static lb_redis_status dump_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    bf_op *o = (bf_op *)op;
    lb_bf_dump *d = o->dump;
    if (o->stage == DS_INFOING) {
        lb_bf_info info;
        st = info_reply(o->bf, st, rs, &info, "dump() (the bound of its walk)");
        if (st == LB_REDIS_OK && !(info.present & (LB_BF_INFO_CAPACITY | LB_BF_INFO_SIZE)))
            st = lb_bf_info_unreadable(o->bf, "dump() (the bound of its walk)", "Capacity");
        if (st == LB_REDIS_OK) {
            dump_bounds(&info, d);
            d->started = 1;
        }
        o->stage = DS_SCAN;
    } else {
        st = scandump_reply(o, st, rs);
        if (st == LB_REDIS_OK)
            st = dump_checked(o);
        o->stage = DS_OVER;
    }
    if (st != LB_REDIS_OK)
        d->done = 1;
    return st;
}

static const lb_op_vt dump_vt = {dump_next, dump_done};

lb_redis_status lb_bf_dump_step(lb_redisbloom *bf, lb_bf_dump *d, int *done, long long *iter,
                                const char **data, size_t *len)
{
    *done = 0;
    *iter = 0;
    *data = NULL;
    *len = 0;
    if (d->done)
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "the dump is over");
    lb_bf_clear_call(bf);
    bf_op *o = lb_bf_op_start(bf, &dump_vt);
    o->dump = d;
    lb_redis_status st = lb_op_run(&o->op);
    if (st != LB_REDIS_OK)
        return st;
    if (o->next == 0) {
        *done = 1;
        return LB_REDIS_OK;
    }
    *iter = o->next;
    *data = o->data;
    *len = o->len;
    return LB_REDIS_OK;
}

/* --------------------------------------------------------------- restore */

enum { RT_TYPE = 0, RT_TYPING, RT_ROUND, RT_SENDING, RT_CLEANUP, RT_CLEANING, RT_OVER };

/* The next round of chunks into bf->batch: the DEL of a leftover temp key
 * first, LOADCHUNKs of at most BF_RESTORE_ROUND_BYTES (one at least), the
 * temp key's expiry, and with the last chunk the RENAME over the key. */
static void restore_round(bf_op *o)
{
    lb_redisbloom *bf = o->bf;
    lb_redis_batch *b = &bf->batch;
    size_t i = o->start, bytes = 0;
    lb_redis_batch_clear(b);
    o->first = i;
    if (i == 0) { /* a leftover of an earlier life with the same name: gone */
        lb_redis_batch_cmd(b, 2);
        lb_redis_batch_arg(b, "DEL", 3);
        lb_redis_batch_arg(b, o->tmp, o->tlen);
    }
    while (i < o->nchunks && (i == o->first || bytes + o->chunks[i].len <= BF_RESTORE_ROUND_BYTES)) {
        lb_redis_batch_cmd(b, 4);
        lb_redis_batch_arg(b, "BF.LOADCHUNK", 12);
        lb_redis_batch_arg(b, o->tmp, o->tlen);
        lb_redis_batch_arg_i64(b, o->chunks[i].iter);
        lb_redis_batch_arg(b, o->chunks[i].data, o->chunks[i].len);
        bytes += o->chunks[i].len;
        i++;
    }
    o->start = i;
    lb_bf_add_pexpire(bf, o->tmp, o->tlen, BF_RESTORE_TMP_TTL_MS);
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0);
    if (i == o->nchunks) {
        lb_redis_batch_cmd(b, 3);
        lb_redis_batch_arg(b, "RENAME", 6);
        lb_redis_batch_arg(b, o->tmp, o->tlen);
        lb_bf_arg_key(bf);
        if (bf->opt.ttl_ms > 0)
            lb_bf_add_pexpire(bf, bf->key, bf->keylen, bf->opt.ttl_ms);
    }
}

static lb_redis_status restore_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    bf_op *o = (bf_op *)op;
    lb_redisbloom *bf = o->bf;
    lb_redis_batch *b = &bf->batch;
    if (o->stage == RT_TYPE) { /* never replace a key of another type unasked */
        lb_redis_batch_clear(b);
        lb_redis_batch_expect_elements(b, 0);
        lb_redis_batch_expect_bytes(b, 0);
        lb_redis_batch_cmd(b, 2);
        lb_redis_batch_arg(b, "TYPE", 4);
        lb_bf_arg_key(bf);
        *flags = LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS;
        o->stage = RT_TYPING;
    } else if (o->stage == RT_ROUND && o->start < o->nchunks) {
        if (!o->tmp &&
            !(o->tmp = lb_redis_temp_name(bf->base, bf->baselen, "restore", ++bf->seq, &o->tlen)))
            return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOMEM, "out of memory");
        restore_round(o);
        o->sent_any = 1;
        *flags = LB_REDIS_RAW_ERRORS | LB_REDIS_WRITE;
        o->stage = RT_SENDING;
    } else if (o->stage == RT_CLEANUP) {
        /* best effort: do not leave the temp key behind (it expires anyway) */
        lb_redis_batch_clear(b);
        lb_redis_batch_cmd(b, 2);
        lb_redis_batch_arg(b, "DEL", 3);
        lb_redis_batch_arg(b, o->tmp, o->tlen);
        lb_redis_batch_expect_elements(b, 0);
        lb_redis_batch_expect_bytes(b, 0);
        *flags = LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS;
        o->stage = RT_CLEANING;
    } else {
        return LB_REDIS_OK;
    }
    *req = b;
    return LB_REDIS_OK;
}

/* Which command of a round: DEL?, LOADCHUNKs, PEXPIRE tmp, RENAME, PEXPIRE key. */
static lb_redis_status round_replies(bf_op *o, lb_reply **rs)
{
    lb_redisbloom *bf = o->bf;
    const size_t nload = o->start - o->first, off = o->first == 0 ? 1 : 0;
    lb_redis_status st = LB_REDIS_OK;
    for (size_t c = 0; c < bf->batch.ncmds && st == LB_REDIS_OK; c++) {
        const char *what = c < off ? "DEL" : c < off + nload ? "BF.LOADCHUNK"
                           : c == off + nload ? "PEXPIRE" : c == off + nload + 1 ? "RENAME"
                                                                             : "PEXPIRE";
        const lb_reply_want *w = c < off ? &lb_bf_want_bit : c < off + nload ? &lb_bf_want_ok
                                 : c == off + nload + 1 ? &lb_bf_want_ok : &lb_bf_want_bit;
        st = lb_bf_expect_reply(bf, rs[c], w, what);
    }
    return st;
}

static lb_redis_status restore_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    bf_op *o = (bf_op *)op;
    lb_redisbloom *bf = o->bf;
    if (o->stage == RT_TYPING) {
        if (st == LB_REDIS_OK)
            st = lb_bf_check_type_reply(bf, rs[0], "; restore(..., replace=True) replaces it");
        o->stage = RT_ROUND;
        return st;
    }
    if (o->stage == RT_CLEANING) /* its own outcome does not matter */
        return lb_redis_set_error(bf->conn, o->failed, "%s", o->msg);
    if (st == LB_REDIS_OK)
        st = round_replies(o, rs);
    o->stage = RT_ROUND;
    if (st == LB_REDIS_OK) {
        if (o->start == o->nchunks) {
            bf->reserved = 1;
            bf->reserved_conn = lb_redis_connect_count(bf->conn);
            bf->seen = 1; /* restored: whole again */
            lb_bf_confirm_type(bf);
        }
        return st;
    }
    if (!o->sent_any || !lb_redis_is_connected(bf->conn))
        return st;
    o->failed = st;
    snprintf(o->msg, sizeof o->msg, "%s", lb_redis_errstr(bf->conn));
    o->stage = RT_CLEANUP;
    return LB_REDIS_OK;
}

static const lb_op_vt restore_vt = {restore_next, restore_done};

lb_redis_status lb_bf_restore(lb_redisbloom *bf, const lb_bf_chunk *chunks, size_t n,
                              int replace)
{
    lb_bf_clear_call(bf);
    if (n == 0)
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "restore needs at least one chunk");
    for (size_t i = 0; i < n; i++)
        if (chunks[i].iter <= 0 || (!chunks[i].data && chunks[i].len))
            return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG,
                                      "chunk %zu: the iterator must be a positive integer", i);
    bf_op *o = lb_bf_op_start(bf, &restore_vt);
    o->chunks = chunks;
    o->nchunks = n;
    o->stage = replace ? RT_ROUND : RT_TYPE;
    lb_redis_status st = lb_op_run(&o->op);
    free(o->tmp);
    o->tmp = NULL;
    return st;
}
