/* redisbloom.c: see redisbloom.h.  The state and the operations that write or
 * test items as step machines (op.h): reserve, add, test, reset; info, card,
 * dump and restore are in redisbloom_dump.c, what a reply means (the errors
 * that name the command, the server and the call) in redisbloom_reply.c. */
#define _POSIX_C_SOURCE 200809L
#include "redisbloom_op.h"

#include "maxmemory.h"
#include "reply.h"
#include "slots.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- helpers */

/* Shortest decimal that reads back as the same double (Go's 'f', -1 sends
 * 0.001 as "0.001"; so do we). */
static void format_rate(double p, char *buf, size_t cap)
{
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, cap, "%.*g", prec, p);
        if (strtod(buf, NULL) == p)
            return;
    }
}

int lb_bf_type_confirmed(const lb_redisbloom *bf)
{
    return bf->type_ok && bf->type_conn == lb_redis_connect_count(bf->conn) &&
           lb_redis_is_connected(bf->conn);
}

void lb_bf_confirm_type(lb_redisbloom *bf)
{
    bf->type_ok = 1;
    bf->type_conn = lb_redis_connect_count(bf->conn);
}

/* A TYPE answer that a Bloom filter (or nothing) may have. */
static int bloom_type(const char *t, size_t n)
{
    if (lb_ci_equal(t, n, "none") || lb_ci_equal(t, n, "MBbloom--"))
        return 1;
    return lb_ci_contains(t, "bloom") && !lb_ci_contains(t, "bloomcf"); /* not a cuckoo filter */
}

void lb_bf_clear_call(lb_redisbloom *bf)
{
    bf->reply_text[0] = '\0';
}

void lb_bf_arg_key(lb_redisbloom *bf)
{
    lb_redis_batch_arg(&bf->batch, bf->key, bf->keylen);
}

void lb_bf_add_pexpire(lb_redisbloom *bf, const char *key, size_t keylen, int64_t ms)
{
    lb_redis_batch *b = &bf->batch;
    lb_redis_batch_cmd(b, 3);
    lb_redis_batch_arg(b, "PEXPIRE", 7);
    lb_redis_batch_arg(b, key, keylen);
    lb_redis_batch_arg_u64(b, (uint64_t)ms);
}

/* A filter made without a ttl that this client saw on the server is never
 * made again by a write (BF.INSERT ... NOCREATE) and its tests ask TYPE key
 * in the same round trip: a filter gone (a restart without its data, a flush,
 * an eviction) is LB_REDIS_ERR_LOST, never an empty filter answering "absent"
 * to every key.  A filter with a ttl expires as a whole and is then empty. */
static int guards_loss(const lb_redisbloom *bf)
{
    return bf->opt.ttl_ms == 0;
}

/* ------------------------------------------------------------ lifecycle */

lb_redis_status lb_bf_new(lb_redis *conn, const void *key, size_t keylen,
                          const lb_bf_options *opt, lb_redisbloom **out)
{
    *out = NULL;
    if (!conn)
        return LB_REDIS_ERR_ARG;
    if (!key || keylen == 0)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "the Redis key must not be empty");
    if (!(opt->error_rate > 0.0 && opt->error_rate < 1.0))
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "error_rate must be in (0, 1)");
    if (opt->capacity == 0 || opt->capacity > (uint64_t)INT64_MAX)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "capacity must be at least 1");
    if (!opt->non_scaling && opt->expansion < 1)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "expansion must be at least 1");
    if (opt->ttl_ms < 0)
        return lb_redis_set_error(conn, LB_REDIS_ERR_ARG, "ttl must not be negative");

    lb_redisbloom *bf = calloc(1, sizeof *bf);
    if (!bf)
        return lb_redis_set_error(conn, LB_REDIS_ERR_NOMEM, "out of memory");
    bf->conn = conn;
    bf->opt = *opt;
    bf->chunk_keys = LB_BF_DEFAULT_CHUNK_KEYS;
    bf->full_processed = -1;
    lb_redis_batch_init(&bf->batch);
    lb_redis_batch_init(&bf->aux);
    format_rate(opt->error_rate, bf->rate, sizeof bf->rate);
    bf->keylen = keylen;
    if (lb_redis_slot_names(key, keylen, &bf->key, &bf->base, &bf->baselen) < 0) {
        lb_bf_free(bf);
        return lb_redis_set_error(conn, LB_REDIS_ERR_NOMEM, "out of memory");
    }
    *out = bf;
    return LB_REDIS_OK;
}

void lb_bf_free(lb_redisbloom *bf)
{
    if (!bf)
        return;
    lb_redis_batch_free(&bf->batch);
    lb_redis_batch_free(&bf->aux);
    free(bf->key);
    free(bf->base);
    free(bf);
}

void lb_bf_set_chunk_keys(lb_redisbloom *bf, size_t n)
{
    bf->chunk_keys = n ? (n > 1000000 ? 1000000 : n) : LB_BF_DEFAULT_CHUNK_KEYS;
}

void lb_bf_set_conn(lb_redisbloom *bf, lb_redis *conn)
{
    bf->conn = conn; /* its connect counts go on from the old one's: nothing counts as checked */
    bf->op.op.conn = conn;
}
int lb_bf_is_reserved(const lb_redisbloom *bf) { return bf->reserved; }
int lb_bf_seen(const lb_redisbloom *bf) { return bf->seen; }
void lb_bf_mark_seen(lb_redisbloom *bf) { bf->seen = 1; }
long long lb_bf_full_processed(const lb_redisbloom *bf) { return bf->full_processed; }
long long lb_bf_last_new(const lb_redisbloom *bf) { return bf->last_new; }
const char *lb_bf_reply_text(const lb_redisbloom *bf) { return bf->reply_text; }

bf_op *lb_bf_op_start(lb_redisbloom *bf, const lb_op_vt *vt)
{
    bf_op *o = &bf->op;
    memset(o, 0, sizeof *o);
    o->op.vt = vt;
    o->op.conn = bf->conn;
    o->bf = bf;
    return o;
}

/* ------------------------------------------------- the check before writes */

/* The filter at key, if any, against this one's parameters, and room for a
 * new one: BF.INFO key + INFO memory in one round trip.  *exists = 1 when a
 * Bloom filter with matching parameters is there; 0 when the key is missing
 * and a new filter fits.  MISMATCH, WRONGTYPE, NOMODULE, TOOLARGE otherwise.
 * Nothing is written. */
static void build_existing(lb_redisbloom *bf, lb_redis_batch *b)
{
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "BF.INFO", 7);
    lb_redis_batch_arg(b, bf->key, bf->keylen);
    lb_maxmemory_cmd(b);
    lb_redis_batch_expect_elements(b, BF_INFO_MAX_ELEMENTS);
    lb_redis_batch_expect_bytes(b, 4096 + LB_MAXMEMORY_INFO_BYTES);
}

/* The replies of build_existing's round trip (sent with RAW_ERRORS). */
static lb_redis_status existing_replies(lb_redisbloom *bf, lb_reply **rs, int *exists)
{
    char kb[160];
    lb_redis_status st;
    *exists = 0;
    const lb_reply *x = rs[0];
    lb_redis_show(bf->key, bf->keylen, kb, sizeof kb);
    lb_maxmemory_note_policy(bf->conn, rs[1], bf->opt.ttl_ms > 0);
    lb_bf_note_reply(bf, x);
    if (x->type == LB_REPLY_ERROR) {
        if (!(x->str && lb_ci_contains(x->str, "not found")))
            return lb_bf_fail_reply(bf, x, "BF.INFO", 0);
        char what[200];
        snprintf(what, sizeof what, "the RedisBloom filter at key '%s'", kb);
        st = lb_maxmemory_check(bf->conn, rs[1], lb_bf_bytes_needed(&bf->opt), what);
        if (st == LB_REDIS_OK) {
            bf->reserved = 1;
            bf->reserved_conn = lb_redis_connect_count(bf->conn);
        }
        return st;
    }
    lb_bf_info info;
    int parsed = lb_bf_parse_info(x, &info);
    if (parsed == -2)
        return lb_bf_info_unreadable(bf, "the check before the first write", NULL);
    if (parsed < 0)
        return lb_bf_bad_reply(bf, "BF.INFO");
    /* BF.INFO reports the capacity summed over the sub-filters (each one
     * expansion times the one before) and nil expansion when non-scaling;
     * not the error rate (RedisBloom; valkey-bloom does), which therefore is
     * not compared.  A field the server does not report at all is not
     * compared either (a missing "Expansion rate": the capacity is compared
     * as if the expansion were ours). */
    int same = 1, expansion_known = (info.present & LB_BF_INFO_EXPANSION) != 0;
    if (bf->opt.non_scaling)
        same = (!expansion_known || info.expansion < 0) &&
               (info.capacity < 0 || (uint64_t)info.capacity == bf->opt.capacity);
    else if (expansion_known &&
             (info.expansion < 0 || (uint64_t)info.expansion != bf->opt.expansion))
        same = 0;
    else if (info.capacity >= 0) {
        long long nf = info.filters > 0 ? info.filters : 1;
        long double total = 0, term = (long double)bf->opt.capacity;
        for (long long i = 0; i < nf && total < 1e30L; i++, term *= bf->opt.expansion)
            total += term;
        same = total == (long double)info.capacity;
    }
    if (!same) {
        char theirs[96], ours[96];
        if (!expansion_known)
            snprintf(theirs, sizeof theirs, "capacity %lld over %lld sub-filter(s)",
                     info.capacity, info.filters);
        else if (info.expansion < 0)
            snprintf(theirs, sizeof theirs, "non-scaling, capacity %lld", info.capacity);
        else
            snprintf(theirs, sizeof theirs, "expansion %lld, capacity %lld over %lld sub-filter(s)",
                     info.expansion, info.capacity, info.filters);
        if (bf->opt.non_scaling)
            snprintf(ours, sizeof ours, "non-scaling, capacity %llu",
                     (unsigned long long)bf->opt.capacity);
        else
            snprintf(ours, sizeof ours, "expansion %u, capacity %llu", (unsigned)bf->opt.expansion,
                     (unsigned long long)bf->opt.capacity);
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_MISMATCH,
                                  "the RedisBloom filter at key '%s' is %s; this "
                                  "RedisBloomFilter is %s (nothing was written)",
                                  kb, theirs, ours);
    }
    *exists = 1;
    bf->reserved = 1;
    bf->reserved_conn = lb_redis_connect_count(bf->conn);
    bf->seen = 1;
    lb_bf_confirm_type(bf);
    return LB_REDIS_OK;
}

/* ------------------------------------------------------------ add / test */

/* BF.INSERT key CAPACITY c ERROR e (EXPANSION x | NONSCALING) ITEMS k...:
 * the parameters travel with every write, so a filter that expired or was
 * deleted is recreated as configured, never with the module's defaults
 * (the module uses them only when the command creates the filter).
 * no_create: BF.INSERT key NOCREATE ITEMS k... */
static void build_insert(lb_redisbloom *bf, const lb_key *keys, size_t n)
{
    lb_redis_batch *b = &bf->batch;
    char num[24];
    /* a filter this client saw: never made again by a write (see lost) */
    bf->nocreate_sent = bf->opt.no_create || (guards_loss(bf) && bf->seen);
    int head = bf->nocreate_sent ? 1 : 4 + (bf->opt.non_scaling ? 1 : 2);
    lb_redis_batch_expect_elements(b, n); /* one answer per item */
    lb_redis_batch_expect_bytes(b, 8 * n); /* ":1\r\n" or "#t\r\n" each */
    lb_redis_batch_cmd(b, (int)(2 + head + 1 + n));
    lb_redis_batch_arg(b, "BF.INSERT", 9);
    lb_bf_arg_key(bf);
    if (bf->nocreate_sent) {
        lb_redis_batch_arg(b, "NOCREATE", 8);
    } else {
        lb_redis_batch_arg(b, "CAPACITY", 8);
        snprintf(num, sizeof num, "%llu", (unsigned long long)bf->opt.capacity);
        lb_redis_batch_arg_str(b, num);
        lb_redis_batch_arg(b, "ERROR", 5);
        lb_redis_batch_arg_str(b, bf->rate);
        if (bf->opt.non_scaling) {
            lb_redis_batch_arg(b, "NONSCALING", 10);
        } else {
            lb_redis_batch_arg(b, "EXPANSION", 9);
            lb_redis_batch_arg_u64(b, bf->opt.expansion);
        }
    }
    lb_redis_batch_arg(b, "ITEMS", 5);
    for (size_t i = 0; i < n; i++)
        lb_redis_batch_arg(b, keys[i].data, keys[i].len);
}

static void build_items(lb_redisbloom *bf, const char *one, const char *many, const lb_key *keys,
                        size_t n)
{
    lb_redis_batch *b = &bf->batch;
    lb_redis_batch_expect_elements(b, n > 1 ? n : 0); /* MADD/MEXISTS: one per item */
    lb_redis_batch_expect_bytes(b, 8 * n);              /* ":1\r\n" or "#t\r\n" each */
    lb_redis_batch_cmd(b, (int)(2 + n));
    lb_redis_batch_arg_str(b, n == 1 ? one : many);
    lb_bf_arg_key(bf);
    for (size_t i = 0; i < n; i++)
        lb_redis_batch_arg(b, keys[i].data, keys[i].len);
}

/* Read the answers of BF.INSERT (adds: an array, even of one), BF.EXISTS
 * (n == 1) or BF.MEXISTS into out.  *ok_count = answers read before an error
 * element (BF.INSERT cut short by a full filter).
 * Returns OK, or the status of the error element / a shape error. */
static lb_redis_status read_answers(lb_redisbloom *bf, const lb_reply *x, size_t n, int adds,
                                    uint8_t *out, size_t *ok_count, int *any_true)
{
    const char *cmd = adds ? "BF.INSERT" : (n == 1 ? "BF.EXISTS" : "BF.MEXISTS");
    *ok_count = 0;
    *any_true = 0;
    lb_bf_note_reply(bf, x);
    if (x->type == LB_REPLY_ERROR)
        return lb_bf_fail_reply(bf, x, cmd, adds);
    if (n == 1 && !adds) {
        int v = lb_bf_reply_bool(x);
        if (v < 0)
            return lb_bf_bad_reply(bf, cmd);
        if (out)
            out[0] = (uint8_t)v;
        *any_true = v;
        *ok_count = 1;
        return LB_REDIS_OK;
    }
    if (x->type != LB_REPLY_ARRAY && x->type != LB_REPLY_SET)
        return lb_bf_bad_reply(bf, cmd);
    size_t len = x->len;
    for (size_t i = 0; i < len && i < n; i++) {
        const lb_reply *e = x->element[i];
        if (e && e->type == LB_REPLY_ERROR) {
            /* The module stops at the failing item and ends the array with
             * its error: everything before it went in. */
            *ok_count = i;
            return lb_bf_fail_reply(bf, e, cmd, adds);
        }
        int v = lb_bf_reply_bool(e);
        if (v < 0)
            return lb_bf_bad_reply(bf, cmd);
        if (out)
            out[i] = (uint8_t)v;
        if (adds)
            bf->last_new += v;
        *any_true |= v;
    }
    if (len != n) {
        /* Never pad a short reply with false (ling-base does): a false
         * negative is the one answer a Bloom filter must not give. */
        lb_redis_disconnect(bf->conn);
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_PROTOCOL,
                                  "%s of %zu items answered %zu results", cmd, n, len);
    }
    *ok_count = n;
    return LB_REDIS_OK;
}

/* An add's round trip: BF.INSERT (and PEXPIRE) into bf->batch. */
static void build_add(lb_redisbloom *bf, const lb_key *keys, size_t n)
{
    lb_redis_batch_clear(&bf->batch);
    build_insert(bf, keys, n);
    if (bf->opt.ttl_ms > 0)
        lb_bf_add_pexpire(bf, bf->key, bf->keylen, bf->opt.ttl_ms);
}

/* Its replies (sent with RAW_ERRORS).  FULL: *processed = items before the
 * rejected one, -1 when the server did not say. */
static lb_redis_status add_replies(lb_redisbloom *bf, lb_reply **rs, size_t n, uint8_t *out,
                                   long long *processed)
{
    size_t ok;
    int any;
    lb_redis_status st = read_answers(bf, rs[0], n, 1, out, &ok, &any);
    if (st == LB_REDIS_ERR_FULL)
        *processed = rs[0]->type == LB_REPLY_ERROR ? (n == 1 ? 0 : -1) : (long long)ok;
    if (st != LB_REDIS_OK)
        return st;
    if (bf->opt.ttl_ms > 0 && (st = lb_bf_expect_reply(bf, rs[1], &lb_bf_want_bit, "PEXPIRE")) != LB_REDIS_OK)
        return st;
    lb_bf_confirm_type(bf); /* a successful add proves the key is a Bloom filter */
    bf->seen = 1;
    return LB_REDIS_OK;
}

/* TYPE key: OK when it holds nothing or a Bloom filter (the type is then
 * confirmed), WRONGTYPE naming what it holds otherwise. */
lb_redis_status lb_bf_check_type_reply(lb_redisbloom *bf, const lb_reply *x, const char *why)
{
    if (x->type == LB_REPLY_ERROR)
        return lb_bf_fail_reply(bf, x, "TYPE", 0);
    if ((x->type != LB_REPLY_STATUS && x->type != LB_REPLY_STRING) || !x->str)
        return lb_bf_bad_reply(bf, "TYPE");
    if (bloom_type(x->str, x->len)) {
        lb_bf_confirm_type(bf);
        return LB_REDIS_OK;
    }
    char kb[160], tb[64];
    lb_bf_clear_call(bf);
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_WRONGTYPE,
                              "WRONGTYPE the key '%s' holds a %s, not a RedisBloom filter%s",
                              lb_redis_show(bf->key, bf->keylen, kb, sizeof kb),
                              lb_redis_show(x->str, x->len, tb, sizeof tb), why);
}

#define TYPE_WHY " (BF.EXISTS answers 0 on it, not an error)"

/* A test's replies (sent with RAW_ERRORS): *ask_type = 1 when every answer
 * was false and the key's type is not known yet (the module answers 0 on a
 * key of another type): a TYPE round trip (build_type) must follow. */
static lb_redis_status test_replies(lb_redisbloom *bf, lb_reply **rs, size_t n, uint8_t *out,
                                    int *ask_type)
{
    size_t ok;
    int any;
    *ask_type = 0;
    lb_redis_status st = read_answers(bf, rs[0], n, 0, out, &ok, &any);
    if (st != LB_REDIS_OK)
        return st;
    if (bf->exists_sent) { /* TYPE key, after the answers */
        const lb_reply *t = rs[1];
        if (t->type != LB_REPLY_ERROR && (t->type == LB_REPLY_STATUS || t->type == LB_REPLY_STRING) &&
            t->str && lb_ci_equal(t->str, t->len, "none"))
            return lb_bf_lost(bf, 0);
        st = lb_bf_check_type_reply(bf, t, TYPE_WHY);
        if (st != LB_REDIS_OK)
            return st;
    }
    if (any)
        lb_bf_confirm_type(bf);
    else if (!lb_bf_type_confirmed(bf))
        *ask_type = 1;
    return LB_REDIS_OK;
}

/* A test's round trip: BF.EXISTS / BF.MEXISTS, and TYPE key once this
 * client saw the filter there (see lost): "none" is a lost filter, and a key
 * of another type put there since (which BF.EXISTS answers 0 on, and EXISTS
 * 1) is WRONGTYPE, never "absent" for every key. */
static void build_test(lb_redisbloom *bf, const lb_key *keys, size_t n)
{
    lb_redis_batch_clear(&bf->batch);
    build_items(bf, "BF.EXISTS", "BF.MEXISTS", keys, n);
    bf->exists_sent = guards_loss(bf) && bf->seen;
    if (bf->exists_sent) {
        lb_redis_batch_cmd(&bf->batch, 2);
        lb_redis_batch_arg(&bf->batch, "TYPE", 4);
        lb_bf_arg_key(bf);
    }
}

static void build_type(lb_redisbloom *bf, lb_redis_batch *b)
{
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "TYPE", 4);
    lb_redis_batch_arg(b, bf->key, bf->keylen);
}

/* ---------------------------------------------------------------- reset */

/* BF.RESERVE key rate capacity (NONSCALING | EXPANSION n), appended to the
 * filter's batch. */
static void add_reserve(lb_redisbloom *bf)
{
    lb_redis_batch *b = &bf->batch;
    char num[24];
    lb_redis_batch_cmd(b, 4 + (bf->opt.non_scaling ? 1 : 2));
    lb_redis_batch_arg(b, "BF.RESERVE", 10);
    lb_bf_arg_key(bf);
    lb_redis_batch_arg_str(b, bf->rate);
    snprintf(num, sizeof num, "%llu", (unsigned long long)bf->opt.capacity);
    lb_redis_batch_arg_str(b, num);
    if (bf->opt.non_scaling) {
        lb_redis_batch_arg(b, "NONSCALING", 10);
    } else {
        lb_redis_batch_arg(b, "EXPANSION", 9);
        lb_redis_batch_arg_u64(b, bf->opt.expansion);
    }
}

/* DEL key; a filter that guards its loss is made again at once, in the same
 * round trip (BF.RESERVE): the others never find it missing. */
static int reset_reserves(const lb_redisbloom *bf)
{
    return guards_loss(bf) && !bf->opt.no_create;
}

static void build_reset(lb_redisbloom *bf)
{
    lb_redis_batch *b = &bf->batch;
    lb_redis_batch_clear(b);
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "DEL", 3);
    lb_bf_arg_key(bf);
    if (reset_reserves(bf))
        add_reserve(bf);
}

static lb_redis_status reset_replies(lb_redisbloom *bf, lb_reply **rs)
{
    lb_redis_status st = lb_bf_expect_reply(bf, rs[0], &lb_bf_want_bit, "DEL");
    if (st != LB_REDIS_OK)
        return st;
    bf->reserved = 0;
    bf->type_ok = 0;
    if (reset_reserves(bf)) {
        st = lb_bf_expect_reply(bf, rs[1], &lb_bf_want_ok, "BF.RESERVE");
        if (st != LB_REDIS_OK)
            return st;
        bf->reserved = 1;
        bf->reserved_conn = lb_redis_connect_count(bf->conn);
        bf->seen = 1;
        lb_bf_confirm_type(bf);
    }
    return LB_REDIS_OK;
}

/* ------------------------------------------------------- the step machines */

/* Before the first write on a connection (again after a reconnect or a
 * reset): the check of build_existing.  no_create writes only into an
 * existing filter, whatever its parameters, so it skips the check. */
static int check_due(const lb_redisbloom *bf)
{
    if (bf->opt.no_create)
        return 0;
    return !(bf->reserved && bf->reserved_conn == lb_redis_connect_count(bf->conn) &&
             lb_redis_is_connected(bf->conn));
}

static const lb_redis_batch *send_check(lb_redisbloom *bf, int *flags)
{
    lb_redis_batch_clear(&bf->aux);
    build_existing(bf, &bf->aux);
    *flags = LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS;
    return &bf->aux;
}

/* reserve: the check (always), then BF.RESERVE when the key is missing. */
enum { RS_CHECK = 0, RS_CHECKING, RS_RESERVE, RS_RESERVING, RS_OVER };

static void build_reserve(lb_redisbloom *bf)
{
    lb_redis_batch *b = &bf->batch;
    lb_redis_batch_clear(b);
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0);
    add_reserve(bf);
    if (bf->opt.ttl_ms > 0)
        lb_bf_add_pexpire(bf, bf->key, bf->keylen, bf->opt.ttl_ms);
}

static lb_redis_status reserve_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    bf_op *o = (bf_op *)op;
    if (o->stage == RS_CHECK) {
        o->stage = RS_CHECKING;
        *req = send_check(o->bf, flags);
    } else if (o->stage == RS_RESERVE) {
        o->stage = RS_RESERVING;
        build_reserve(o->bf);
        *req = &o->bf->batch;
        /* Safe to repeat: a lost first attempt that did create it makes the
         * retry answer "item exists". */
        *flags = LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS | LB_REDIS_WRITE;
    }
    return LB_REDIS_OK;
}

static lb_redis_status reserve_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    bf_op *o = (bf_op *)op;
    lb_redisbloom *bf = o->bf;
    int exists, made = 0;
    if (st != LB_REDIS_OK)
        return st;
    if (o->stage == RS_CHECKING) {
        st = existing_replies(bf, rs, &exists);
        o->stage = st == LB_REDIS_OK && !exists ? RS_RESERVE : RS_OVER;
        return st;
    }
    o->stage = RS_OVER;
    const lb_reply *x = rs[0];
    lb_bf_note_reply(bf, x);
    if (lb_reply_fits(x, &lb_bf_want_ok))
        made = 1;
    else if (x->type == LB_REPLY_ERROR) {
        if (!(x->str && lb_ci_contains(x->str, "item exists")))
            return lb_bf_fail_reply(bf, x, "BF.RESERVE", 0);
    } else
        return lb_bf_bad_reply(bf, "BF.RESERVE");
    if (bf->opt.ttl_ms > 0 &&
        (st = lb_bf_expect_reply(bf, rs[1], &lb_bf_want_bit, "PEXPIRE")) != LB_REDIS_OK)
        return st;
    bf->reserved = 1;
    bf->reserved_conn = lb_redis_connect_count(bf->conn);
    bf->seen = 1; /* there now, made or found */
    if (made)
        lb_bf_confirm_type(bf); /* "item exists" says nothing of the type on every server */
    if (o->created)
        *o->created = made;
    return LB_REDIS_OK;
}

static const lb_op_vt reserve_vt = {reserve_next, reserve_done};

/* add: per chunk, the check when due, then BF.INSERT (and PEXPIRE).  A write
 * that fails with a lost connection that had been open before the chunk goes
 * out once more, after the check (the retry may report its keys as not new:
 * they are in the filter either way). */
enum { AD_CHUNK = 0, AD_CHECKING, AD_SEND, AD_SENDING };

static void add_chunk_begin(bf_op *o)
{
    lb_redisbloom *bf = o->bf;
    if (o->attempt == 0) {
        o->cn = o->n - o->start < bf->chunk_keys ? o->n - o->start : bf->chunk_keys;
        o->new_before = bf->last_new;
        build_add(bf, o->keys + o->start, o->cn);
    }
    bf->last_new = o->new_before;
    o->was_open = lb_redis_is_connected(bf->conn);
    o->rt = lb_redis_roundtrip_count(bf->conn);
    o->stage = AD_SEND;
}

static lb_redis_status add_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    bf_op *o = (bf_op *)op;
    lb_redisbloom *bf = o->bf;
    if (o->stage == AD_CHUNK) {
        if (o->start >= o->n)
            return LB_REDIS_OK;
        add_chunk_begin(o);
    }
    if (check_due(bf)) {
        o->stage = AD_CHECKING;
        *req = send_check(bf, flags);
        return LB_REDIS_OK;
    }
    if (lb_redis_roundtrip_count(bf->conn) != o->rt)
        o->was_open = 0; /* the connection just answered: a failure now is not a stale one */
    o->stage = AD_SENDING;
    *req = &bf->batch;
    /* KEPT_CONN: a connection discarded for a pending late reply is replaced
     * by one that is checked again (the retry) */
    *flags = LB_REDIS_RAW_ERRORS | LB_REDIS_WRITE | LB_REDIS_KEPT_CONN;
    return LB_REDIS_OK;
}

static lb_redis_status add_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    bf_op *o = (bf_op *)op;
    lb_redisbloom *bf = o->bf;
    int exists;
    long long processed = -1;
    if (o->stage == AD_CHECKING) {
        o->stage = AD_SEND;
        return st == LB_REDIS_OK ? existing_replies(bf, rs, &exists) : st;
    }
    if (st == LB_REDIS_ERR_IO && (o->was_open || lb_redis_last_stale(bf->conn)) &&
        o->attempt == 0) {
        o->attempt = 1; /* stale connection (server restarted?): check again, send again */
        add_chunk_begin(o);
        return LB_REDIS_OK;
    }
    if (st != LB_REDIS_OK)
        return st;
    st = add_replies(bf, rs, o->cn, o->out ? o->out + o->start : NULL, &processed);
    if (st == LB_REDIS_ERR_FULL)
        bf->full_processed = processed < 0 ? -1 : (long long)o->start + processed;
    o->start += o->cn;
    o->attempt = 0;
    o->stage = AD_CHUNK;
    return st;
}

static const lb_op_vt add_vt = {add_next, add_done};

/* test: per chunk, BF.EXISTS / BF.MEXISTS, and TYPE after an all-false answer
 * while the key's type is unknown (the module answers 0 on a key of another
 * type). */
enum { TS_CHUNK = 0, TS_SENDING, TS_TYPE, TS_TYPING };

static lb_redis_status test_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    bf_op *o = (bf_op *)op;
    lb_redisbloom *bf = o->bf;
    *flags = BF_READ;
    if (o->stage == TS_TYPE) {
        lb_redis_batch_clear(&bf->aux);
        build_type(bf, &bf->aux);
        o->stage = TS_TYPING;
        *req = &bf->aux;
        return LB_REDIS_OK;
    }
    if (o->start >= o->n)
        return LB_REDIS_OK;
    if (!o->cn) { /* not built by begin */
        o->cn = o->n - o->start < bf->chunk_keys ? o->n - o->start : bf->chunk_keys;
        build_test(bf, o->keys + o->start, o->cn);
    }
    o->stage = TS_SENDING;
    *req = &bf->batch;
    return LB_REDIS_OK;
}

static lb_redis_status test_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    bf_op *o = (bf_op *)op;
    lb_redisbloom *bf = o->bf;
    int ask_type = 0;
    if (st != LB_REDIS_OK)
        return st;
    if (o->stage == TS_TYPING)
        st = lb_bf_check_type_reply(bf, rs[0], TYPE_WHY);
    else
        st = test_replies(bf, rs, o->cn, o->out ? o->out + o->start : NULL, &ask_type);
    if (ask_type) {
        o->stage = TS_TYPE;
        return st;
    }
    o->start += o->cn;
    o->cn = 0;
    o->stage = TS_CHUNK;
    return st;
}

static const lb_op_vt test_vt = {test_next, test_done};

/* reset: DEL the key; the next add checks and creates it again. */
static lb_redis_status reset_next(lb_op *op, const lb_redis_batch **req, int *flags)
{
    bf_op *o = (bf_op *)op;
    if (o->stage++ == 0) {
        *req = &o->bf->batch; /* built by begin */
        *flags = LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS | LB_REDIS_WRITE;
    }
    return LB_REDIS_OK;
}

static lb_redis_status reset_done(lb_op *op, lb_redis_status st, lb_reply **rs)
{
    return st == LB_REDIS_OK ? reset_replies(((bf_op *)op)->bf, rs) : st;
}

static const lb_op_vt reset_vt = {reset_next, reset_done};

/* ------------------------------------------------------------ operations */

static lb_redis_status check_keys(lb_redisbloom *bf, const lb_key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (keys[i].len == 0 || !keys[i].data)
            return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "key %zu is empty", i);
    return LB_REDIS_OK;
}

lb_redis_status lb_bf_begin(lb_redisbloom *bf, int kind, const lb_key *keys, size_t n,
                            uint8_t *out, lb_op **op)
{
    *op = NULL;
    lb_bf_clear_call(bf);
    bf->full_processed = -1;
    bf->last_new = 0;
    bf_op *o;
    if (kind == LB_BF_OP_RESET) {
        o = lb_bf_op_start(bf, &reset_vt);
        build_reset(bf);
    } else if (kind == LB_BF_OP_ADD || kind == LB_BF_OP_TEST) {
        lb_redis_status st = check_keys(bf, keys, n);
        if (st != LB_REDIS_OK)
            return st;
        o = lb_bf_op_start(bf, kind == LB_BF_OP_ADD ? &add_vt : &test_vt);
        o->keys = keys;
        o->n = n;
        o->out = out;
        /* The first chunk is built now: the keys need not live longer when
         * they fit in one (the wire transport's operations do). */
        if (kind == LB_BF_OP_ADD && n)
            add_chunk_begin(o);
        else if (n) {
            o->cn = n < bf->chunk_keys ? n : bf->chunk_keys;
            build_test(bf, keys, o->cn);
        }
    } else {
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "unknown wire operation");
    }
    *op = &o->op;
    return LB_REDIS_OK;
}

lb_redis_status lb_bf_wire_begin(lb_redisbloom *bf, int kind, const lb_key *keys, size_t n,
                                 uint8_t *out, lb_op **op)
{
    *op = NULL;
    if ((kind == LB_BF_OP_ADD || kind == LB_BF_OP_TEST) && (n == 0 || n > bf->chunk_keys)) {
        lb_bf_clear_call(bf);
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG,
                                  "a wire operation takes 1 to %zu keys, not %zu", bf->chunk_keys,
                                  n);
    }
    return lb_bf_begin(bf, kind, keys, n, out, op);
}

static lb_redis_status run(lb_redisbloom *bf, int kind, const lb_key *keys, size_t n,
                           uint8_t *out)
{
    lb_op *op;
    lb_redis_status st = lb_bf_begin(bf, kind, keys, n, out, &op);
    return st == LB_REDIS_OK ? lb_op_run(op) : st;
}

lb_redis_status lb_bf_add(lb_redisbloom *bf, const lb_key *keys, size_t n, uint8_t *was_new)
{
    return run(bf, LB_BF_OP_ADD, keys, n, was_new);
}

lb_redis_status lb_bf_test(lb_redisbloom *bf, const lb_key *keys, size_t n, uint8_t *present)
{
    return run(bf, LB_BF_OP_TEST, keys, n, present);
}

lb_redis_status lb_bf_reset(lb_redisbloom *bf)
{
    return run(bf, LB_BF_OP_RESET, NULL, 0, NULL);
}

lb_redis_status lb_bf_reserve(lb_redisbloom *bf, int *created)
{
    lb_bf_clear_call(bf);
    if (created)
        *created = 0;
    bf_op *o = lb_bf_op_start(bf, &reserve_vt);
    o->created = created;
    return lb_op_run(&o->op);
}
