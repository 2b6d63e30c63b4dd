/* redisbloom.c: see redisbloom.h. */
#define _POSIX_C_SOURCE 200809L
#include "redisbloom.h"
#include "maxmemory.h"
#include "reply.h"
#include "slots.h"
#include "wire.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A round trip that only reads: safe to repeat, and a cluster replica may serve it
 * (read_from_replicas). */
#define BF_READ (LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS | LB_REDIS_READ_REPLICA)

#define BF_RESTORE_TMP_TTL_MS 600000          /* temp key of restore: 10 minutes */
#define BF_RESTORE_ROUND_BYTES ((size_t)8 << 20) /* chunk bytes per restore round trip */
#define BF_REPLY_TEXT_MAX 512
#define BF_INFO_MAX_ELEMENTS 64 /* BF.INFO: name/value pairs (the module sends 5) */

struct lb_redisbloom {
    lb_redis *conn;
    lb_bf_options opt;
    char *key;
    size_t keylen;
    char *base; /* prefix of the restore temp key, in key's cluster slot */
    size_t baselen;
    char rate[40]; /* the error rate as sent */
    size_t chunk_keys;
    int reserved;
    unsigned long reserved_conn; /* lb_redis_connect_count when last reserved or checked */
    int type_ok;
    unsigned long type_conn;     /* ... when the key's type was last confirmed */
    long long full_processed;    /* FULL: keys of the call processed before the rejected one */
    long long last_new;          /* keys the last add reported new */
    unsigned long seq;
    lb_redis_batch batch;
    char reply_text[BF_REPLY_TEXT_MAX];
    /* the wire operation in progress (lb_bf_wire_*) */
    int w_phase, w_kind;
    size_t w_n;
    uint8_t *w_out;
    lb_redis_batch w_aux;     /* handshake, BF.INFO check or TYPE */
};

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

static int type_confirmed(const lb_redisbloom *bf)
{
    return bf->type_ok && bf->type_conn == lb_redis_connect_count(bf->conn) &&
           lb_redis_is_connected(bf->conn);
}

static void confirm_type(lb_redisbloom *bf)
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

static lb_redis_status bad_reply(lb_redisbloom *bf, const char *what)
{
    /* A reply that does not fit what was sent: the stream may be out of
     * step, and this is not the server we think: start afresh next time. */
    lb_redis_disconnect(bf->conn);
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_PROTOCOL,
                              "protocol error: a reply to %s that does not fit the command "
                              "sent (type, length or value); connection dropped",
                              what);
}

static const lb_reply_want want_ok = {LB_WANT_OK, 0, 0};
static const lb_reply_want want_bit = {LB_WANT_INT, 0, 1}; /* PEXPIRE, DEL of one key */

static lb_redis_status fail_reply(lb_redisbloom *bf, const lb_reply *x, const char *cmd, int adds);

/* A reply of a RAW_ERRORS batch: its error (fail_reply), or a protocol error
 * when it does not fit w, or OK. */
static lb_redis_status expect_reply(lb_redisbloom *bf, const lb_reply *x, const lb_reply_want *w,
                                    const char *what)
{
    if (x->type == LB_REPLY_ERROR)
        return fail_reply(bf, x, what, 0);
    return lb_reply_fits(x, w) ? LB_REDIS_OK : bad_reply(bf, what);
}

static void keep_text(lb_redisbloom *bf, const char *s, size_t n)
{
    if (n >= sizeof bf->reply_text)
        n = sizeof bf->reply_text - 1;
    memcpy(bf->reply_text, s, n);
    bf->reply_text[n] = '\0';
}

static int module_missing(const char *s)
{
    return (lb_ci_prefix(s, "ERR unknown command") || lb_ci_prefix(s, "unknown command")) &&
           lb_ci_contains(s, "bf.");
}

/* An error reply with no text ("" or "ERR "): what fakeredis answers when a
 * non-scaling filter is full. */
static int blank_error(const char *t)
{
    if (lb_ci_prefix(t, "ERR"))
        t += 3;
    while (*t == ' ')
        t++;
    return *t == '\0';
}

static lb_redis_status wrongtype(lb_redisbloom *bf, const char *text)
{
    char kb[160];
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_WRONGTYPE, "%s (key '%s')", text,
                              lb_redis_show(bf->key, bf->keylen, kb, sizeof kb));
}

/* An error reply x to cmd: the status and message it stands for.  adds: cmd
 * adds items (a "filter is full" answer is then FULL; fakeredis says it with
 * an empty error text). */
static lb_redis_status fail_reply(lb_redisbloom *bf, const lb_reply *x, const char *cmd, int adds)
{
    char kb[160];
    keep_text(bf, x->str ? x->str : "", x->len);
    const char *t = bf->reply_text;
    if (lb_ci_prefix(t, "WRONGTYPE") || lb_ci_prefix(t, "ERR WRONGTYPE")) /* the latter: fakeredis */
        return wrongtype(bf, t);
    if (module_missing(t))
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOMODULE,
                                  "the Redis server has no RedisBloom module (%s answered: %s)",
                                  cmd, t);
    if (adds && bf->opt.no_create && lb_ci_contains(t, "not found"))
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOTFOUND,
                                  "no RedisBloom filter at key '%s', and no_create forbids "
                                  "creating one (%s answered: %s)",
                                  lb_redis_show(bf->key, bf->keylen, kb, sizeof kb), cmd, t);
    if (adds && (lb_ci_contains(t, "filter is full") || blank_error(t)))
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_FULL,
                                  "the non-scaling RedisBloom filter at key '%s' is full (%s)",
                                  lb_redis_show(bf->key, bf->keylen, kb, sizeof kb),
                                  t[0] ? t : "no text");
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_REPLY, "%s at key '%s': %s", cmd,
                              lb_redis_show(bf->key, bf->keylen, kb, sizeof kb), t);
}

static void clear_call(lb_redisbloom *bf)
{
    bf->reply_text[0] = '\0';
}

static void arg_key(lb_redisbloom *bf)
{
    lb_redis_batch_arg(&bf->batch, bf->key, bf->keylen);
}

static void add_pexpire(lb_redisbloom *bf, const char *key, size_t keylen, int64_t ms)
{
    lb_redis_batch *b = &bf->batch;
    lb_redis_batch_cmd(b, 3);
    lb_redis_batch_arg(b, "PEXPIRE", 7);
    lb_redis_batch_arg(b, key, keylen);
    lb_redis_batch_arg_u64(b, (uint64_t)ms);
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
    lb_redis_batch_init(&bf->w_aux);
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
    lb_redis_batch_free(&bf->w_aux);
    free(bf->key);
    free(bf->base);
    free(bf);
}

void lb_bf_set_chunk_keys(lb_redisbloom *bf, size_t n)
{
    bf->chunk_keys = n ? (n > 1000000 ? 1000000 : n) : LB_BF_DEFAULT_CHUNK_KEYS;
}
void lb_bf_set_ttl(lb_redisbloom *bf, int64_t ttl_ms) { bf->opt.ttl_ms = ttl_ms > 0 ? ttl_ms : 0; }
const lb_bf_options *lb_bf_options_of(const lb_redisbloom *bf) { return &bf->opt; }
lb_redis *lb_bf_conn(const lb_redisbloom *bf) { return bf->conn; }
void lb_bf_set_conn(lb_redisbloom *bf, lb_redis *conn)
{
    bf->conn = conn; /* its connect counts go on from the old one's: nothing counts as checked */
}
int lb_bf_is_reserved(const lb_redisbloom *bf) { return bf->reserved; }
long long lb_bf_full_processed(const lb_redisbloom *bf) { return bf->full_processed; }
long long lb_bf_last_new(const lb_redisbloom *bf) { return bf->last_new; }

const char *lb_bf_reply_text(const lb_redisbloom *bf) { return bf->reply_text; }

/* -------------------------------------------------------------- reserve */

static lb_redis_status check_existing(lb_redisbloom *bf, int *exists);

lb_redis_status lb_bf_reserve(lb_redisbloom *bf, int *created)
{
    lb_redis_batch *b = &bf->batch;
    lb_reply **rs;
    char num[24];
    clear_call(bf);
    if (created)
        *created = 0;
    int exists;
    lb_redis_status cst = check_existing(bf, &exists);
    if (cst != LB_REDIS_OK || exists)
        return cst;
    lb_redis_batch_clear(b);
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0);
    lb_redis_batch_cmd(b, 4 + (bf->opt.non_scaling ? 1 : 2));
    lb_redis_batch_arg(b, "BF.RESERVE", 10);
    arg_key(bf);
    lb_redis_batch_arg_str(b, bf->rate);
    snprintf(num, sizeof num, "%llu", (unsigned long long)bf->opt.capacity);
    lb_redis_batch_arg_str(b, num);
    if (bf->opt.non_scaling) {
        lb_redis_batch_arg(b, "NONSCALING", 10);
    } else {
        lb_redis_batch_arg(b, "EXPANSION", 9);
        lb_redis_batch_arg_u64(b, bf->opt.expansion);
    }
    if (bf->opt.ttl_ms > 0)
        add_pexpire(bf, bf->key, bf->keylen, bf->opt.ttl_ms);
    /* Safe to repeat: a lost first attempt that did create it makes the
     * retry answer "item exists". */
    lb_redis_status st =
        lb_redis_exec(bf->conn, b, LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS | LB_REDIS_WRITE, &rs);
    if (st != LB_REDIS_OK)
        return st;
    const lb_reply *x = rs[0];
    int made = 0;
    if (lb_reply_fits(x, &want_ok))
        made = 1;
    else if (x->type == LB_REPLY_ERROR) {
        if (!(x->str && lb_ci_contains(x->str, "item exists")))
            return fail_reply(bf, x, "BF.RESERVE", 0);
    } else
        return bad_reply(bf, "BF.RESERVE");
    if (bf->opt.ttl_ms > 0 && (st = expect_reply(bf, rs[1], &want_bit, "PEXPIRE")) != LB_REDIS_OK)
        return st;
    bf->reserved = 1;
    bf->reserved_conn = lb_redis_connect_count(bf->conn);
    if (made)
        confirm_type(bf); /* "item exists" says nothing of the type on every server */
    if (created)
        *created = made;
    return LB_REDIS_OK;
}

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

static lb_redis_status existing_replies(lb_redisbloom *bf, lb_reply **rs, int *exists);

static lb_redis_status check_existing(lb_redisbloom *bf, int *exists)
{
    lb_redis_batch *b = &bf->batch;
    lb_reply **rs;
    *exists = 0;
    lb_redis_batch_clear(b);
    build_existing(bf, b);
    lb_redis_status st = lb_redis_exec(bf->conn, b, LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS, &rs);
    if (st != LB_REDIS_OK)
        return st;
    return existing_replies(bf, rs, exists);
}

/* The replies of build_existing's round trip (sent with RAW_ERRORS). */
static lb_redis_status existing_replies(lb_redisbloom *bf, lb_reply **rs, int *exists)
{
    char kb[160];
    lb_redis_status st;
    *exists = 0;
    const lb_reply *x = rs[0];
    lb_redis_show(bf->key, bf->keylen, kb, sizeof kb);
    if (x->type == LB_REPLY_ERROR) {
        if (!(x->str && lb_ci_contains(x->str, "not found")))
            return fail_reply(bf, x, "BF.INFO", 0);
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
    if (lb_bf_parse_info(x, &info) < 0)
        return bad_reply(bf, "BF.INFO");
    /* BF.INFO reports the capacity summed over the sub-filters (each one
     * expansion times the one before) and nil expansion when non-scaling;
     * not the error rate, which therefore is not compared. */
    int same = 1;
    if (bf->opt.non_scaling)
        same = info.expansion < 0 && (info.capacity < 0 || (uint64_t)info.capacity == bf->opt.capacity);
    else if (info.expansion < 0 || (uint64_t)info.expansion != bf->opt.expansion)
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
        if (info.expansion < 0)
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
    confirm_type(bf);
    return LB_REDIS_OK;
}

/* Before the first write on a connection (again after a reconnect or a
 * reset): check_existing.  no_create writes only into an existing filter,
 * whatever its parameters, so it skips the check. */
static lb_redis_status ensure_checked(lb_redisbloom *bf)
{
    if (bf->opt.no_create)
        return LB_REDIS_OK;
    if (bf->reserved && bf->reserved_conn == lb_redis_connect_count(bf->conn) &&
        lb_redis_is_connected(bf->conn))
        return LB_REDIS_OK;
    int exists;
    return check_existing(bf, &exists);
}

/* BF.INSERT key CAPACITY c ERROR e (EXPANSION x | NONSCALING) ITEMS k...:
 * the parameters travel with every write, so a filter that expired or was
 * deleted is recreated as configured, never with the module's defaults
 * (the module uses them only when the command creates the filter).
 * no_create: BF.INSERT key NOCREATE ITEMS k... */
static void build_insert(lb_redisbloom *bf, const lb_key *keys, size_t n)
{
    lb_redis_batch *b = &bf->batch;
    char num[24];
    int head = bf->opt.no_create ? 1 : 4 + (bf->opt.non_scaling ? 1 : 2);
    lb_redis_batch_expect_elements(b, n); /* one answer per item */
    lb_redis_batch_expect_bytes(b, 8 * n); /* ":1\r\n" or "#t\r\n" each */
    lb_redis_batch_cmd(b, (int)(2 + head + 1 + n));
    lb_redis_batch_arg(b, "BF.INSERT", 9);
    arg_key(bf);
    if (bf->opt.no_create) {
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

/* ------------------------------------------------------------ add / test */

static void build_items(lb_redisbloom *bf, const char *one, const char *many, const lb_key *keys,
                        size_t n)
{
    lb_redis_batch *b = &bf->batch;
    lb_redis_batch_expect_elements(b, n > 1 ? n : 0); /* MADD/MEXISTS: one per item */
    lb_redis_batch_expect_bytes(b, 8 * n);              /* ":1\r\n" or "#t\r\n" each */
    lb_redis_batch_cmd(b, (int)(2 + n));
    lb_redis_batch_arg_str(b, n == 1 ? one : many);
    arg_key(bf);
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
    if (x->type == LB_REPLY_ERROR)
        return fail_reply(bf, x, cmd, adds);
    if (n == 1 && !adds) {
        int v = lb_bf_reply_bool(x);
        if (v < 0)
            return bad_reply(bf, cmd);
        if (out)
            out[0] = (uint8_t)v;
        *any_true = v;
        *ok_count = 1;
        return LB_REDIS_OK;
    }
    if (x->type != LB_REPLY_ARRAY && x->type != LB_REPLY_SET)
        return bad_reply(bf, cmd);
    size_t len = x->len;
    for (size_t i = 0; i < len && i < n; i++) {
        const lb_reply *e = x->element[i];
        if (e && e->type == LB_REPLY_ERROR) {
            /* The module stops at the failing item and ends the array with
             * its error: everything before it went in. */
            *ok_count = i;
            return fail_reply(bf, e, cmd, adds);
        }
        int v = lb_bf_reply_bool(e);
        if (v < 0)
            return bad_reply(bf, cmd);
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
        add_pexpire(bf, bf->key, bf->keylen, bf->opt.ttl_ms);
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
    if (bf->opt.ttl_ms > 0 && (st = expect_reply(bf, rs[1], &want_bit, "PEXPIRE")) != LB_REDIS_OK)
        return st;
    confirm_type(bf); /* a successful add proves the key is a Bloom filter */
    return LB_REDIS_OK;
}

static lb_redis_status add_chunk(lb_redisbloom *bf, const lb_key *keys, size_t n, uint8_t *out,
                                 long long *processed)
{
    *processed = -1;
    long long new_before = bf->last_new;
    for (int attempt = 0;; attempt++) {
        bf->last_new = new_before;
        int was_open = lb_redis_is_connected(bf->conn);
        unsigned long rt = lb_redis_roundtrip_count(bf->conn);
        lb_redis_status st = ensure_checked(bf);
        if (st != LB_REDIS_OK)
            return st;
        if (lb_redis_roundtrip_count(bf->conn) != rt)
            was_open = 0; /* the connection just answered: a failure now is not a stale one */
        build_add(bf, keys, n);
        lb_reply **rs;
        /* KEPT_CONN: a connection discarded for a pending late reply is
         * replaced by one that is reserved again (the loop) */
        st = lb_redis_exec(bf->conn, &bf->batch,
                           LB_REDIS_RAW_ERRORS | LB_REDIS_WRITE | LB_REDIS_KEPT_CONN, &rs);
        if (st == LB_REDIS_ERR_IO && (was_open || lb_redis_last_stale(bf->conn)) && attempt == 0)
            continue; /* stale connection (server restarted?): reserve again, send again */
        if (st != LB_REDIS_OK)
            return st;
        return add_replies(bf, rs, n, out, processed);
    }
}

lb_redis_status lb_bf_add(lb_redisbloom *bf, const lb_key *keys, size_t n, uint8_t *was_new)
{
    clear_call(bf);
    bf->full_processed = -1;
    bf->last_new = 0;
    for (size_t i = 0; i < n; i++)
        if (keys[i].len == 0 || !keys[i].data)
            return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "key %zu is empty", i);
    for (size_t start = 0; start < n; start += bf->chunk_keys) {
        size_t cn = n - start < bf->chunk_keys ? n - start : bf->chunk_keys;
        long long processed;
        lb_redis_status st = add_chunk(bf, keys + start, cn, was_new ? was_new + start : NULL,
                                       &processed);
        if (st == LB_REDIS_ERR_FULL)
            bf->full_processed = processed < 0 ? -1 : (long long)start + processed;
        if (st != LB_REDIS_OK)
            return st;
    }
    return LB_REDIS_OK;
}

/* TYPE key: OK when it holds nothing or a Bloom filter (the type is then
 * confirmed), WRONGTYPE naming what it holds otherwise. */
static lb_redis_status check_type_reply(lb_redisbloom *bf, const lb_reply *x, const char *why)
{
    if (x->type == LB_REPLY_ERROR)
        return fail_reply(bf, x, "TYPE", 0);
    if ((x->type != LB_REPLY_STATUS && x->type != LB_REPLY_STRING) || !x->str)
        return bad_reply(bf, "TYPE");
    if (bloom_type(x->str, x->len)) {
        confirm_type(bf);
        return LB_REDIS_OK;
    }
    char kb[160], tb[64];
    clear_call(bf);
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_WRONGTYPE,
                              "WRONGTYPE the key '%s' holds a %s, not a RedisBloom filter%s",
                              lb_redis_show(bf->key, bf->keylen, kb, sizeof kb),
                              lb_redis_show(x->str, x->len, tb, sizeof tb), why);
}

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
    if (any)
        confirm_type(bf);
    else if (!type_confirmed(bf))
        *ask_type = 1;
    return LB_REDIS_OK;
}

static void build_type(lb_redisbloom *bf, lb_redis_batch *b)
{
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "TYPE", 4);
    lb_redis_batch_arg(b, bf->key, bf->keylen);
}

#define TYPE_WHY " (BF.EXISTS answers 0 on it, not an error)"

static lb_redis_status test_chunk(lb_redisbloom *bf, const lb_key *keys, size_t n, uint8_t *out)
{
    lb_redis_batch *b = &bf->batch;
    lb_reply **rs;
    lb_redis_batch_clear(b);
    build_items(bf, "BF.EXISTS", "BF.MEXISTS", keys, n);
    lb_redis_status st =
        lb_redis_exec(bf->conn, b, BF_READ, &rs);
    if (st != LB_REDIS_OK)
        return st;
    int ask_type;
    st = test_replies(bf, rs, n, out, &ask_type);
    if (st != LB_REDIS_OK || !ask_type)
        return st;
    lb_redis_batch_clear(b);
    build_type(bf, b);
    st = lb_redis_exec(bf->conn, b, BF_READ, &rs);
    if (st != LB_REDIS_OK)
        return st;
    return check_type_reply(bf, rs[0], TYPE_WHY);
}

lb_redis_status lb_bf_test(lb_redisbloom *bf, const lb_key *keys, size_t n, uint8_t *present)
{
    clear_call(bf);
    for (size_t i = 0; i < n; i++)
        if (keys[i].len == 0 || !keys[i].data)
            return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "key %zu is empty", i);
    for (size_t start = 0; start < n; start += bf->chunk_keys) {
        size_t cn = n - start < bf->chunk_keys ? n - start : bf->chunk_keys;
        lb_redis_status st = test_chunk(bf, keys + start, cn, present + start);
        if (st != LB_REDIS_OK)
            return st;
    }
    return LB_REDIS_OK;
}

/* ---------------------------------------------------------------- reset */

static void build_reset(lb_redisbloom *bf)
{
    lb_redis_batch *b = &bf->batch;
    lb_redis_batch_clear(b);
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "DEL", 3);
    arg_key(bf);
}

static lb_redis_status reset_replies(lb_redisbloom *bf, lb_reply **rs)
{
    lb_redis_status st = expect_reply(bf, rs[0], &want_bit, "DEL");
    if (st != LB_REDIS_OK)
        return st;
    bf->reserved = 0;
    bf->type_ok = 0;
    return LB_REDIS_OK;
}

lb_redis_status lb_bf_reset(lb_redisbloom *bf)
{
    lb_reply **rs;
    clear_call(bf);
    build_reset(bf);
    lb_redis_status st =
        lb_redis_exec(bf->conn, &bf->batch,
                      LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS | LB_REDIS_WRITE, &rs);
    if (st != LB_REDIS_OK)
        return st;
    return reset_replies(bf, rs);
}

/* ---------------------------------------------------------------- wire */

enum { W_IDLE = 0, W_NEXT, W_HS, W_CHECK, W_MAIN, W_TYPE, W_DONE };

lb_redis_status lb_bf_wire_begin(lb_redisbloom *bf, int kind, const lb_key *keys, size_t n,
                                 uint8_t *out)
{
    clear_call(bf);
    bf->full_processed = -1;
    bf->last_new = 0;
    bf->w_phase = W_IDLE;
    if (kind == LB_BF_WIRE_RESET) {
        build_reset(bf);
    } else if (kind == LB_BF_WIRE_ADD || kind == LB_BF_WIRE_TEST) {
        if (n == 0 || n > bf->chunk_keys)
            return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG,
                                      "a wire operation takes 1 to %zu keys, not %zu",
                                      bf->chunk_keys, n);
        for (size_t i = 0; i < n; i++)
            if (keys[i].len == 0 || !keys[i].data)
                return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "key %zu is empty", i);
        if (kind == LB_BF_WIRE_ADD) {
            build_add(bf, keys, n);
        } else {
            lb_redis_batch_clear(&bf->batch);
            build_items(bf, "BF.EXISTS", "BF.MEXISTS", keys, n);
        }
    } else {
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "unknown wire operation");
    }
    bf->w_kind = kind;
    bf->w_n = n;
    bf->w_out = out;
    bf->w_phase = W_NEXT;
    return LB_REDIS_OK;
}

lb_redis_status lb_bf_wire_next(lb_redisbloom *bf, const lb_redis_batch **req)
{
    lb_redis *c = bf->conn;
    lb_redis_status st;
    lb_redis_batch *aux = &bf->w_aux;
    *req = NULL;
    if (bf->w_phase == W_DONE)
        return LB_REDIS_OK;
    if (bf->w_phase != W_NEXT && bf->w_phase != W_TYPE)
        return lb_redis_set_error(c, LB_REDIS_ERR_ARG, "no wire operation is waiting to send");
    if (!lb_redis_is_connected(c))
        return lb_redis_set_error(c, LB_REDIS_ERR_IO, "no connection is open on the transport");
    unsigned long conn = lb_redis_connect_count(c);
    if (bf->w_phase == W_TYPE) { /* all false: ask the key's type once */
        lb_redis_batch_clear(aux);
        build_type(bf, aux);
        *req = aux;
    } else {
        int due = lb_wire_handshake_due(c, aux);
        if (due < 0)
            return lb_redis_set_error(c, LB_REDIS_ERR_NOMEM, "out of memory for the handshake");
        if (due) {
            bf->w_phase = W_HS;
            *req = aux;
        }
    }
    if (!*req && bf->w_kind == LB_BF_WIRE_ADD && !bf->opt.no_create &&
        !(bf->reserved && bf->reserved_conn == conn)) {
        lb_redis_batch_clear(aux);
        build_existing(bf, aux);
        bf->w_phase = W_CHECK;
        *req = aux;
    } else if (!*req) {
        bf->w_phase = W_MAIN;
        *req = &bf->batch;
    }
    st = lb_wire_begin(c, *req);
    if (st != LB_REDIS_OK) {
        *req = NULL;
        bf->w_phase = W_DONE;
    }
    return st;
}

lb_redis_status lb_bf_wire_done(lb_redisbloom *bf)
{
    lb_redis *c = bf->conn;
    lb_reply **rs;
    lb_redis_status st = lb_wire_replies(c, LB_REDIS_RAW_ERRORS, &rs);
    int next = W_DONE, exists, ask_type;
    long long processed = -1;
    if (st == LB_REDIS_OK) {
        switch (bf->w_phase) {
        case W_HS:
            st = lb_wire_handshake_done(c);
            next = W_NEXT;
            break;
        case W_CHECK:
            st = existing_replies(bf, rs, &exists);
            next = W_NEXT;
            break;
        case W_MAIN:
            if (bf->w_kind == LB_BF_WIRE_ADD) {
                st = add_replies(bf, rs, bf->w_n, bf->w_out, &processed);
                if (st == LB_REDIS_ERR_FULL)
                    bf->full_processed = processed;
            } else if (bf->w_kind == LB_BF_WIRE_TEST) {
                st = test_replies(bf, rs, bf->w_n, bf->w_out, &ask_type);
                if (st == LB_REDIS_OK && ask_type)
                    next = W_TYPE;
            } else {
                st = reset_replies(bf, rs);
            }
            break;
        case W_TYPE:
            st = check_type_reply(bf, rs[0], TYPE_WHY);
            break;
        default:
            return lb_redis_set_error(c, LB_REDIS_ERR_ARG, "no wire round trip is in progress");
        }
    }
    bf->w_phase = st == LB_REDIS_OK ? next : W_DONE;
    return st;
}

/* ----------------------------------------------------------- info / card */

/* Pipelined TYPE + cmd: interpret the TYPE reply (rs[0]) after cmd's
 * (rs[1]): a missing module wins, then a missing key, then another type. */
static lb_redis_status typed_reply(lb_redisbloom *bf, lb_reply **rs, const char *cmd)
{
    char kb[160];
    if (rs[1]->type == LB_REPLY_ERROR && rs[1]->str && module_missing(rs[1]->str))
        return fail_reply(bf, rs[1], cmd, 0);
    const lb_reply *t = rs[0];
    if ((t->type == LB_REPLY_STATUS || t->type == LB_REPLY_STRING) && t->str &&
        lb_ci_equal(t->str, t->len, "none")) {
        if (rs[1]->type == LB_REPLY_ERROR)
            keep_text(bf, rs[1]->str ? rs[1]->str : "", rs[1]->len);
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOTFOUND,
                                  "no RedisBloom filter at key '%s' (%s: the key does not exist)",
                                  lb_redis_show(bf->key, bf->keylen, kb, sizeof kb), cmd);
    }
    lb_redis_status st = check_type_reply(bf, t, "");
    if (st != LB_REDIS_OK)
        return st;
    if (rs[1]->type == LB_REPLY_ERROR)
        return fail_reply(bf, rs[1], cmd, 0);
    return LB_REDIS_OK;
}

lb_redis_status lb_bf_info_get(lb_redisbloom *bf, lb_bf_info *out)
{
    lb_redis_batch *b = &bf->batch;
    lb_reply **rs;
    clear_call(bf);
    lb_redis_batch_clear(b);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "TYPE", 4);
    arg_key(bf);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "BF.INFO", 7);
    arg_key(bf);
    lb_redis_batch_expect_elements(b, BF_INFO_MAX_ELEMENTS);
    lb_redis_batch_expect_bytes(b, 4096);
    lb_redis_status st = lb_redis_exec(bf->conn, b, BF_READ, &rs);
    if (st != LB_REDIS_OK)
        return st;
    st = typed_reply(bf, rs, "BF.INFO");
    if (st != LB_REDIS_OK)
        return st;
    /* a filter holds at least one sub-filter of capacity >= 1 */
    if (lb_bf_parse_info(rs[1], out) < 0 || out->capacity == 0 || out->filters == 0)
        return bad_reply(bf, "BF.INFO");
    return LB_REDIS_OK;
}

lb_redis_status lb_bf_card(lb_redisbloom *bf, uint64_t *out)
{
    lb_redis_batch *b = &bf->batch;
    lb_reply **rs;
    *out = 0;
    clear_call(bf);
    lb_redis_batch_clear(b);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "BF.CARD", 7);
    arg_key(bf);
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0);
    lb_redis_status st = lb_redis_exec(bf->conn, b, BF_READ, &rs);
    if (st != LB_REDIS_OK)
        return st;
    const lb_reply *x = rs[0];
    if (x->type == LB_REPLY_ERROR && x->str && module_missing(x->str)) {
        /* A module older than BF.CARD (v2.4.4): the same count from BF.INFO. */
        lb_bf_info info;
        st = lb_bf_info_get(bf, &info);
        if (st == LB_REDIS_ERR_NOTFOUND)
            return LB_REDIS_OK;
        if (st != LB_REDIS_OK)
            return st;
        if (info.items < 0)
            return bad_reply(bf, "BF.INFO");
        *out = (uint64_t)info.items;
        return LB_REDIS_OK;
    }
    if (x->type == LB_REPLY_ERROR)
        return fail_reply(bf, x, "BF.CARD", 0);
    if (x->type != LB_REPLY_INTEGER || x->integer < 0)
        return bad_reply(bf, "BF.CARD");
    *out = (uint64_t)x->integer;
    return LB_REDIS_OK;
}

/* ------------------------------------------------------- dump / restore */

/* One BF.SCANDUMP; max_chunk > 0: its chunk may not be longer (the bytes a
 * dump has left, lb_bf_dump_step), checked as the bytes arrive. */
static lb_redis_status scandump(lb_redisbloom *bf, long long iter, uint64_t max_chunk,
                                long long *next, const char **data, size_t *len);

lb_redis_status lb_bf_scandump(lb_redisbloom *bf, long long iter, long long *next,
                               const char **data, size_t *len)
{
    return scandump(bf, iter, 0, next, data, len);
}

static lb_redis_status scandump(lb_redisbloom *bf, long long iter, uint64_t max_chunk,
                                long long *next, const char **data, size_t *len)
{
    lb_redis_batch *b = &bf->batch;
    lb_reply **rs;
    *next = 0;
    *data = NULL;
    *len = 0;
    clear_call(bf);
    if (iter < 0)
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "scandump iterator must be >= 0");
    lb_redis_batch_clear(b);
    if (iter == 0) {
        lb_redis_batch_cmd(b, 2);
        lb_redis_batch_arg(b, "TYPE", 4);
        arg_key(bf);
    }
    lb_redis_batch_cmd(b, 3);
    lb_redis_batch_arg(b, "BF.SCANDUMP", 11);
    arg_key(bf);
    lb_redis_batch_arg_i64(b, iter);
    lb_redis_batch_expect_elements(b, 2); /* [next iterator, chunk] */
    if (max_chunk)
        lb_redis_batch_expect_bytes(b, max_chunk > SIZE_MAX ? SIZE_MAX : (size_t)max_chunk);
    lb_redis_status st = lb_redis_exec(bf->conn, b, BF_READ, &rs);
    if (st != LB_REDIS_OK)
        return st;
    const lb_reply *x = rs[iter == 0 ? 1 : 0];
    if (iter == 0) {
        st = typed_reply(bf, rs, "BF.SCANDUMP");
        if (st != LB_REDIS_OK)
            return st;
    } else if (x->type == LB_REPLY_ERROR) {
        return fail_reply(bf, x, "BF.SCANDUMP", 0);
    }
    if (x->type != LB_REPLY_ARRAY || x->len != 2 || !x->element[0] || !x->element[1] ||
        x->element[0]->type != LB_REPLY_INTEGER || x->element[0]->integer < 0)
        return bad_reply(bf, "BF.SCANDUMP");
    const lb_reply *c = x->element[1];
    *next = x->element[0]->integer;
    if (*next == 0)
        return LB_REDIS_OK; /* the end: "" (module) or nil (fakeredis) */
    if (c->type != LB_REPLY_STRING)
        return bad_reply(bf, "BF.SCANDUMP");
    *data = c->str;
    *len = c->len;
    return LB_REDIS_OK;
}

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

lb_redis_status lb_bf_dump_step(lb_redisbloom *bf, lb_bf_dump *d, int *done, long long *iter,
                                const char **data, size_t *len)
{
    *done = 0;
    *iter = 0;
    *data = NULL;
    *len = 0;
    if (d->done)
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "the dump is over");
    if (!d->started) {
        lb_bf_info info;
        lb_redis_status st = lb_bf_info_get(bf, &info);
        if (st != LB_REDIS_OK) {
            d->done = 1;
            return st;
        }
        dump_bounds(&info, d);
        d->started = 1;
    }
    long long next;
    const char *c;
    size_t n;
    lb_redis_status st = scandump(bf, d->iter, d->max_bytes - d->bytes + 1, &next, &c, &n);
    if (st != LB_REDIS_OK) {
        d->done = 1;
        return st;
    }
    if (next == 0) {
        d->done = 1;
        *done = 1;
        return LB_REDIS_OK;
    }
    int added = next == d->iter ? 0 : iter_seen_add(d, next);
    if (added < 0) {
        d->done = 1;
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOMEM, "out of memory");
    }
    d->chunks++;
    d->bytes += n;
    if (!added || d->chunks > d->max_chunks || d->bytes > d->max_bytes) {
        char kb[160];
        d->done = 1;
        lb_redis_disconnect(bf->conn);
        if (!added)
            return lb_redis_set_error(bf->conn, LB_REDIS_ERR_PROTOCOL,
                                      "protocol error: BF.SCANDUMP of '%s' answered the "
                                      "iterator %lld again after %zu chunks (a cycle); "
                                      "connection dropped",
                                      lb_redis_show(bf->key, bf->keylen, kb, sizeof kb), next,
                                      d->chunks - 1);
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_PROTOCOL,
                                  "protocol error: BF.SCANDUMP of '%s' goes on past what "
                                  "BF.INFO allows (%zu chunks, %llu bytes; at most %zu chunks, "
                                  "%llu bytes); connection dropped",
                                  lb_redis_show(bf->key, bf->keylen, kb, sizeof kb), d->chunks,
                                  (unsigned long long)d->bytes, d->max_chunks,
                                  (unsigned long long)d->max_bytes);
    }
    d->iter = next;
    *iter = next;
    *data = c;
    *len = n;
    return LB_REDIS_OK;
}

lb_redis_status lb_bf_restore(lb_redisbloom *bf, const lb_bf_chunk *chunks, size_t n,
                              int replace)
{
    clear_call(bf);
    if (n == 0)
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG, "restore needs at least one chunk");
    for (size_t i = 0; i < n; i++)
        if (chunks[i].iter <= 0 || (!chunks[i].data && chunks[i].len))
            return lb_redis_set_error(bf->conn, LB_REDIS_ERR_ARG,
                                      "chunk %zu: the iterator must be a positive integer", i);
    if (!replace) { /* never replace a key of another type unasked */
        lb_reply **trs;
        lb_redis_batch_clear(&bf->batch);
        lb_redis_batch_expect_elements(&bf->batch, 0);
        lb_redis_batch_expect_bytes(&bf->batch, 0);
        lb_redis_batch_cmd(&bf->batch, 2);
        lb_redis_batch_arg(&bf->batch, "TYPE", 4);
        arg_key(bf);
        lb_redis_status tst =
            lb_redis_exec(bf->conn, &bf->batch, LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS, &trs);
        if (tst == LB_REDIS_OK)
            tst = check_type_reply(bf, trs[0], "; restore(..., replace=True) replaces it");
        if (tst != LB_REDIS_OK)
            return tst;
    }

    size_t tlen;
    char *tmp = lb_redis_temp_name(bf->base, bf->baselen, "restore", ++bf->seq, &tlen);
    if (!tmp)
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOMEM, "out of memory");
    lb_redis_batch *b = &bf->batch;
    lb_redis_status st = LB_REDIS_OK;
    size_t i = 0;
    int sent_any = 0;
    while (i < n && st == LB_REDIS_OK) {
        lb_redis_batch_clear(b);
        size_t first = i, bytes = 0;
        if (i == 0) { /* a leftover of an earlier life with the same name: gone */
            lb_redis_batch_cmd(b, 2);
            lb_redis_batch_arg(b, "DEL", 3);
            lb_redis_batch_arg(b, tmp, tlen);
        }
        while (i < n && (i == first || bytes + chunks[i].len <= BF_RESTORE_ROUND_BYTES)) {
            lb_redis_batch_cmd(b, 4);
            lb_redis_batch_arg(b, "BF.LOADCHUNK", 12);
            lb_redis_batch_arg(b, tmp, tlen);
            lb_redis_batch_arg_i64(b, chunks[i].iter);
            lb_redis_batch_arg(b, chunks[i].data, chunks[i].len);
            bytes += chunks[i].len;
            i++;
        }
        add_pexpire(bf, tmp, tlen, BF_RESTORE_TMP_TTL_MS);
        lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0);
        int last = i == n;
        if (last) {
            lb_redis_batch_cmd(b, 3);
            lb_redis_batch_arg(b, "RENAME", 6);
            lb_redis_batch_arg(b, tmp, tlen);
            arg_key(bf);
            if (bf->opt.ttl_ms > 0)
                add_pexpire(bf, bf->key, bf->keylen, bf->opt.ttl_ms);
        }
        lb_reply **rs;
        sent_any = 1;
        st = lb_redis_exec(bf->conn, b, LB_REDIS_RAW_ERRORS | LB_REDIS_WRITE, &rs);
        if (st != LB_REDIS_OK)
            break;
        for (size_t c = 0; c < b->ncmds && st == LB_REDIS_OK; c++) {
            /* which command: DEL?, LOADCHUNKs, PEXPIRE tmp, RENAME, PEXPIRE key */
            size_t nload = i - first, off = first == 0 ? 1 : 0;
            const char *what = c < off ? "DEL" : c < off + nload ? "BF.LOADCHUNK"
                               : c == off + nload ? "PEXPIRE" : c == off + nload + 1 ? "RENAME"
                                                                                 : "PEXPIRE";
            const lb_reply_want *w = c < off ? &want_bit : c < off + nload ? &want_ok
                                     : c == off + nload + 1 ? &want_ok : &want_bit;
            st = expect_reply(bf, rs[c], w, what);
        }
    }
    if (st != LB_REDIS_OK && sent_any && lb_redis_is_connected(bf->conn)) {
        /* best effort: do not leave the temp key behind (it expires anyway) */
        char msg[600];
        lb_redis_status keep = st;
        snprintf(msg, sizeof msg, "%s", lb_redis_errstr(bf->conn));
        lb_redis_batch_clear(b);
        lb_redis_batch_cmd(b, 2);
        lb_redis_batch_arg(b, "DEL", 3);
        lb_redis_batch_arg(b, tmp, tlen);
        lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0);
        (void)lb_redis_exec(bf->conn, b, LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS, NULL);
        st = lb_redis_set_error(bf->conn, keep, "%s", msg);
    }
    free(tmp);
    if (st == LB_REDIS_OK) {
        bf->reserved = 1;
        bf->reserved_conn = lb_redis_connect_count(bf->conn);
        confirm_type(bf);
    }
    return st;
}
