/* bitmap.c: see bitmap.h. */
#define _POSIX_C_SOURCE 200809L
#include "bitmap.h"
#include "blocked.h"
#include "maxmemory.h"
#include "reply.h"
#include "slots.h"
#include "wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LB_BITMAP_LOAD_CHUNK ((size_t)8 << 20)  /* bytes per SETRANGE round trip */
#define LB_BITMAP_SNAP_CHUNK ((size_t)16 << 20) /* bytes per GETRANGE round trip */
#define LB_BITMAP_LOAD_TMP_TTL_MS 600000        /* temp key of load: 10 minutes */
#define LB_BITMAP_PART_BYTES (LB_BITMAP_PART_BITS / 8)
#define NO_KEY UINT32_MAX
#define META_SET (UINT32_MAX - 1) /* cmd_info.key of the SET NX of the meta key */

typedef struct {
    uint32_t key;  /* index of the key in the chunk, NO_KEY for other commands */
    uint32_t part;
    uint32_t nbits; /* BITFIELD: the u1 fields sent (its reply's length) */
} cmd_info;

struct lb_bitmap {
    lb_redis *conn;
    lb_geometry g;
    char *key;
    size_t keylen;
    char *base;     /* prefix of meta/part names, see the header */
    size_t baselen;
    char *name;     /* scratch for a part name */
    size_t namecap;
    uint64_t nparts;
    int64_t ttl_ms;
    int meta_checked;
    unsigned long meta_conn; /* lb_redis_connect_count when the meta was checked */
    int adopt;               /* take over a key that exists without a meta key */
    lb_bitmap_mode mode;
    int blocked;             /* LB_BITMAP_BLOCKED: blocked.h's layout, see the header */
    size_t chunk_keys;
    lb_redis_batch batch;
    cmd_info *cmds;
    size_t cmds_cap;
    uint64_t *want;          /* blocked tests: the 8 lane masks of each key of the chunk */
    size_t want_cap;         /* keys it has room for */
    unsigned long load_seq;
    /* the wire operation in progress (lb_bitmap_wire_*) */
    int w_phase;
    int w_kind;
    size_t w_ncmd, w_n;
    uint8_t *w_out;
    lb_redis_batch w_aux;     /* handshake, look or claim */
    int w_claim;
};

static void batch_bounds(lb_bitmap *bm);

/* ----------------------------------------------------------------- names */

/* Name of part p (p < nparts), or of the meta key (UINT64_MAX), or of the
 * load temp key (UINT64_MAX - 1, suffix given).  Returns a pointer valid
 * until the next call (part 0: the key itself). */
static const char *name_of(lb_bitmap *bm, uint64_t p, size_t *len)
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
    const char *n = name_of((lb_bitmap *)bm, p, &len);
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
    lb_redis_batch_init(&bm->w_aux);
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
    lb_redis_batch_free(&bm->w_aux);
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
}

/* ----------------------------------------------------------------- meta */

static int meta_format(const lb_geometry *g, int blocked, char *buf, size_t cap)
{
    if (blocked)
        return snprintf(buf, cap, "ling_bloom:v=%d;m=%" PRIu64 ";k=%u;hash=%s;layout=blocked",
                        LB_BITMAP_FORMAT_VERSION_BLOCKED, g->m, (unsigned)g->k, LB_BITMAP_BLOCKED_HASH);
    return snprintf(buf, cap, "ling_bloom:v=%d;m=%" PRIu64 ";k=%u;hash=%s", LB_BITMAP_FORMAT_VERSION,
                    g->m, (unsigned)g->k, lb_hash_scheme_name(g->scheme));
}

/* Parse a meta value.  0 = ok; -1 = not a geometry; -2 = newer version.
 * *blocked: 1 for the blocked layout ("layout=blocked", with hash=xxh3-block). */
static int meta_parse(const char *s, size_t n, lb_geometry *out, int *blocked)
{
    static const char pre[] = "ling_bloom:";
    char buf[256];
    if (n >= sizeof buf || n < sizeof pre - 1 || memcmp(s, pre, sizeof pre - 1) != 0 ||
        memchr(s, '\0', n))
        return -1;
    memcpy(buf, s, n);
    buf[n] = '\0';
    long long v = -1;
    unsigned long long m = 0, k = 0;
    int scheme = -1, have = 0, blk = 0, blk_hash = 0;
    char *save = NULL;
    for (char *f = strtok_r(buf + sizeof pre - 1, ";", &save); f; f = strtok_r(NULL, ";", &save)) {
        char *eq = strchr(f, '=');
        if (!eq)
            return -1;
        *eq = '\0';
        const char *val = eq + 1;
        char *end;
        if (strcmp(f, "v") == 0) {
            v = strtoll(val, &end, 10);
            if (*end || end == val)
                return -1;
            have |= 1;
        } else if (strcmp(f, "m") == 0) {
            if (*val < '0' || *val > '9')
                return -1;
            m = strtoull(val, &end, 10);
            if (*end)
                return -1;
            have |= 2;
        } else if (strcmp(f, "k") == 0) {
            if (*val < '0' || *val > '9')
                return -1;
            k = strtoull(val, &end, 10);
            if (*end)
                return -1;
            have |= 4;
        } else if (strcmp(f, "hash") == 0) {
            blk_hash = strcmp(val, LB_BITMAP_BLOCKED_HASH) == 0;
            scheme = blk_hash ? (int)LB_HASH_XXH3_MIX : lb_hash_scheme_parse(val);
            have |= 8;
        } else if (strcmp(f, "layout") == 0) {
            if (strcmp(val, "blocked") != 0)
                return -2; /* a layout this version does not know */
            blk = 1;
        } /* unknown fields: ignored (forward compatible) */
    }
    if (!(have & 1))
        return -1;
    if (v > LB_BITMAP_FORMAT_VERSION_BLOCKED || (v == LB_BITMAP_FORMAT_VERSION_BLOCKED && !blk))
        return -2; /* a version 2 that is not the blocked layout: not one of ours */
    if (v < 1 || have != 15 || scheme < 0 || m == 0 || m > LB_MAX_BITS || k == 0 || k > LB_MAX_K)
        return -1;
    /* the blocked layout: version 2 (older readers refuse it as newer), its own hash name,
     * and a geometry it can have; a standard filter: version 1 */
    if (blk != blk_hash || (blk && v != LB_BITMAP_FORMAT_VERSION_BLOCKED) ||
        (blk && lb_blocked_check_geometry(m, k) != LB_OK))
        return -1;
    lb_geometry_init(out, m, (uint32_t)k, (lb_hash_scheme)scheme);
    if (blocked)
        *blocked = blk;
    return 0;
}

static void describe(const lb_geometry *g, int blocked, char *buf, size_t cap)
{
    snprintf(buf, cap, "m=%" PRIu64 " k=%u hash=%s%s", g->m, (unsigned)g->k,
             blocked ? LB_BITMAP_BLOCKED_HASH : lb_hash_scheme_name(g->scheme),
             blocked ? " layout=blocked" : "");
}

/* A reply that does not fit what was sent: the stream may be out of step,
 * and this is not the server we think: drop the connection. */
static lb_redis_status conn_bad_reply(lb_redis *conn, const char *what)
{
    lb_redis_disconnect(conn);
    return lb_redis_set_error(conn, LB_REDIS_ERR_PROTOCOL,
                              "protocol error: a reply to %s that does not fit the command "
                              "sent (type, length or value); connection dropped",
                              what);
}

/* Interpret a GET of the meta key. */
static lb_redis_status meta_check_reply(lb_redis *conn, const char *key, size_t keylen,
                                        const lb_reply *x, lb_geometry *got, int *blocked)
{
    char kb[128];
    if (x->type == LB_REPLY_NIL)
        return lb_redis_set_error(conn, LB_REDIS_ERR_NOTFOUND,
                                  "no ling_bloom filter at Redis key '%s' (no meta key)",
                                  lb_redis_show(key, keylen, kb, sizeof kb));
    if (x->type != LB_REPLY_STRING)
        return conn_bad_reply(conn, "GET of the meta key");
    int pr = meta_parse(x->str, x->len, got, blocked);
    if (pr == -2)
        return lb_redis_set_error(conn, LB_REDIS_ERR_MISMATCH,
                                  "the filter at Redis key '%s' was written by a newer ling_bloom "
                                  "(format '%.80s')",
                                  lb_redis_show(key, keylen, kb, sizeof kb), x->str);
    if (pr != 0) {
        char vb[100];
        return lb_redis_set_error(conn, LB_REDIS_ERR_MISMATCH,
                                  "the meta key of Redis key '%s' holds '%s', not a ling_bloom "
                                  "geometry",
                                  lb_redis_show(key, keylen, kb, sizeof kb),
                                  lb_redis_show(x->str, x->len, vb, sizeof vb));
    }
    return LB_REDIS_OK;
}

/* Append the key name to a WRONGTYPE message. */
static lb_redis_status name_wrongtype(lb_bitmap *bm, uint64_t part)
{
    char msg[300], kb[160];
    size_t len;
    const char *n = name_of(bm, part, &len);
    snprintf(msg, sizeof msg, "%s", lb_redis_errstr(bm->conn));
    return lb_redis_set_error(bm->conn, LB_REDIS_ERR_WRONGTYPE, "%s (key '%s')", msg,
                              lb_redis_show(n, len, kb, sizeof kb));
}

static void add_meta_set(lb_bitmap *bm, lb_redis_batch *b, const char *val, int vlen)
{
    size_t len;
    const char *mn = name_of(bm, UINT64_MAX, &len);
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
static lb_redis_status compare_meta(lb_bitmap *bm, const lb_reply *x)
{
    lb_geometry stored;
    int blocked = 0;
    lb_redis_status st = meta_check_reply(bm->conn, bm->key, bm->keylen, x, &stored, &blocked);
    if (st != LB_REDIS_OK)
        return st;
    if (stored.m != bm->g.m || stored.k != bm->g.k || stored.scheme != bm->g.scheme ||
        blocked != bm->blocked) {
        char kb[128], a[120], c[120];
        describe(&stored, blocked, a, sizeof a);
        describe(&bm->g, bm->blocked, c, sizeof c);
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_MISMATCH,
                                  "geometry mismatch at Redis key '%s': stored %s, this filter %s",
                                  lb_redis_show(bm->key, bm->keylen, kb, sizeof kb), a, c);
    }
    return LB_REDIS_OK;
}

/* First round trip of the check, nothing written: GET meta, TYPE key,
 * INFO memory (sent with LB_REDIS_RAW_ERRORS). */
static void build_look(lb_bitmap *bm, lb_redis_batch *b)
{
    size_t len;
    const char *mn = name_of(bm, UINT64_MAX, &len);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "GET", 3);
    lb_redis_batch_arg(b, mn, len);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "TYPE", 4);
    lb_redis_batch_arg(b, bm->key, bm->keylen);
    lb_maxmemory_cmd(b);
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, LB_MAXMEMORY_INFO_BYTES); /* meta < 256, TYPE a word */
}

/* Its replies.  OK with *claim = 1 when the meta key must be written (a new
 * filter, or an adopted bitmap), 0 when it is there and matches. */
static lb_redis_status check_look(lb_bitmap *bm, lb_reply **rs, int *claim)
{
    char kb[160];
    lb_redis_status st;
    *claim = 0;
    for (int i = 0; i < 2; i++) {
        if (rs[i]->type != LB_REPLY_ERROR)
            continue;
        const char *t = rs[i]->str ? rs[i]->str : "";
        if (strncmp(t, "WRONGTYPE", 9) != 0)
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_REPLY, "%s", t);
        lb_redis_set_error(bm->conn, LB_REDIS_ERR_WRONGTYPE, "%s", t);
        return name_wrongtype(bm, UINT64_MAX); /* GET of a meta key of another type */
    }
    if (rs[0]->type != LB_REPLY_NIL)
        return compare_meta(bm, rs[0]);
    const lb_reply *t = rs[1];
    if ((t->type != LB_REPLY_STATUS && t->type != LB_REPLY_STRING) || !t->str)
        return conn_bad_reply(bm->conn, "TYPE of the key");
    lb_redis_show(bm->key, bm->keylen, kb, sizeof kb);
    int missing = t->len == 4 && memcmp(t->str, "none", 4) == 0;
    if (!missing && !(t->len == 6 && memcmp(t->str, "string", 6) == 0)) {
        char tb[64];
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_WRONGTYPE,
                                  "WRONGTYPE the key '%s' holds a %s, not a bitmap (key '%s')",
                                  kb, lb_redis_show(t->str, t->len, tb, sizeof tb), kb);
    }
    if (!missing && !bm->adopt)
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOTOWNED,
                                  "the Redis key '%s' exists but has no ling_bloom meta key "
                                  "beside it: this library did not write it, and leaves it "
                                  "alone (to share a bitmap written by another program, "
                                  "such as a Go ling-base service, pass adopt=True with the "
                                  "m, k and hash it was written with)",
                                  kb);
    if (missing) {
        char what[220];
        snprintf(what, sizeof what, "the filter at Redis key '%s'", kb);
        st = lb_maxmemory_check(bm->conn, rs[2], lb_bitmap_bytes(&bm->g), what);
        if (st != LB_REDIS_OK)
            return st;
    }
    *claim = 1;
    return LB_REDIS_OK;
}

static lb_redis_status look_before_claiming(lb_bitmap *bm, int *claim)
{
    lb_redis_batch lb_, *b = &lb_;
    lb_reply **rs;
    *claim = 0;
    lb_redis_batch_init(b);
    build_look(bm, b);
    lb_redis_status st = lb_redis_exec(bm->conn, b, LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS, &rs);
    lb_redis_batch_free(b);
    if (st != LB_REDIS_OK)
        return st;
    return check_look(bm, rs, claim);
}

/* The claim, a second round trip: SET meta <ours> NX [PX ttl] + GET meta.
 * Of two processes claiming at once, the first wins and the other compares. */
static void build_claim(lb_bitmap *bm, lb_redis_batch *b)
{
    char val[160];
    int vlen = meta_format(&bm->g, bm->blocked, val, sizeof val);
    size_t len;
    add_meta_set(bm, b, val, vlen);
    const char *mn = name_of(bm, UINT64_MAX, &len);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "GET", 3);
    lb_redis_batch_arg(b, mn, len);
    lb_redis_batch_expect_elements(b, 0);
    lb_redis_batch_expect_bytes(b, 0); /* a meta value is < 256 bytes */
}

/* Its replies (st: the status of the round trip, error replies turned into
 * a status). */
static lb_redis_status check_claim(lb_bitmap *bm, lb_redis_status st, lb_reply **rs)
{
    if (st == LB_REDIS_ERR_WRONGTYPE)
        return name_wrongtype(bm, UINT64_MAX);
    if (st != LB_REDIS_OK)
        return st;
    static const lb_reply_want set_nx = {LB_WANT_OK_OR_NIL, 0, 0};
    if (!lb_reply_fits(rs[0], &set_nx))
        return conn_bad_reply(bm->conn, "SET NX of the meta key");
    if (rs[1]->type == LB_REPLY_NIL) /* deleted between SET NX and GET: a reset raced us */
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_REPLY,
                                  "the meta key vanished while being checked (a concurrent "
                                  "reset?); try again");
    st = compare_meta(bm, rs[1]);
    if (st != LB_REDIS_OK)
        return st;
    bm->meta_checked = 1;
    bm->meta_conn = lb_redis_connect_count(bm->conn);
    return LB_REDIS_OK;
}

lb_redis_status lb_bitmap_check_meta(lb_bitmap *bm)
{
    int claim;
    lb_redis_status st = look_before_claiming(bm, &claim);
    if (st != LB_REDIS_OK)
        return st;
    if (!claim) {
        bm->meta_checked = 1;
        bm->meta_conn = lb_redis_connect_count(bm->conn);
        return LB_REDIS_OK;
    }
    /* Its own batch: a failed batch in bm->batch is re-sent after this check
     * (bm_exec). */
    lb_redis_batch mb, *b = &mb;
    lb_reply **rs;
    lb_redis_batch_init(b);
    build_claim(bm, b);
    st = lb_redis_exec(bm->conn, b, LB_REDIS_IDEMPOTENT, &rs);
    lb_redis_batch_free(b); /* the replies live in the connection */
    return check_claim(bm, st, rs);
}

/* Check the meta key before the first command, and again after every
 * reconnect (the server may have restarted empty, or this is a forked child). */
static lb_redis_status ensure_meta(lb_bitmap *bm)
{
    if (bm->meta_checked && bm->meta_conn == lb_redis_connect_count(bm->conn) &&
        lb_redis_is_connected(bm->conn))
        return LB_REDIS_OK;
    return lb_bitmap_check_meta(bm);
}

/* Send bm->batch (every command of this file is safe to repeat).  The retry
 * of a stale connection (a server restarted, ...) is done here rather than
 * by lb_redis_exec, so that the new connection has its meta key checked
 * before the batch goes out again: a server that came back empty may have
 * been claimed meanwhile by a filter of another geometry.  The same holds
 * for a connection that exec discards because a late reply was pending on
 * it (LB_REDIS_KEPT_CONN). */
static lb_redis_status bm_exec(lb_bitmap *bm, int kind, lb_reply ***rs)
{
    batch_bounds(bm);
    const int flags = LB_REDIS_KEPT_CONN | kind;
    lb_redis_status st = lb_redis_exec(bm->conn, &bm->batch, flags, rs);
    if (st == LB_REDIS_ERR_IO && lb_redis_last_stale(bm->conn)) {
        st = ensure_meta(bm);
        if (st == LB_REDIS_OK)
            st = lb_redis_exec(bm->conn, &bm->batch, flags, rs);
    }
    return st;
}

lb_redis_status lb_bitmap_read_meta(lb_redis *conn, const void *key, size_t keylen,
                                          lb_geometry *out)
{
    return lb_bitmap_read_meta_layout(conn, key, keylen, out, NULL);
}

lb_redis_status lb_bitmap_read_meta_layout(lb_redis *conn, const void *key, size_t keylen,
                                                 lb_geometry *out, lb_bitmap_layout *layout)
{
    int blocked = 0;
    lb_geometry g;
    lb_geometry_init(&g, 1, 1, LB_HASH_XXH3);
    lb_bitmap *bm;
    lb_redis_status st = lb_bitmap_new(conn, key, keylen, &g, 0, &bm);
    if (st != LB_REDIS_OK)
        return st;
    size_t len;
    const char *mn = name_of(bm, UINT64_MAX, &len);
    lb_reply **rs;
    lb_redis_batch_cmd(&bm->batch, 2);
    lb_redis_batch_arg(&bm->batch, "GET", 3);
    lb_redis_batch_arg(&bm->batch, mn, len);
    lb_redis_batch_expect_elements(&bm->batch, 0);
    lb_redis_batch_expect_bytes(&bm->batch, 0);
    st = lb_redis_exec(conn, &bm->batch, LB_REDIS_IDEMPOTENT, &rs);
    if (st == LB_REDIS_ERR_WRONGTYPE)
        st = name_wrongtype(bm, UINT64_MAX);
    else if (st == LB_REDIS_OK)
        st = meta_check_reply(conn, key, keylen, rs[0], out, &blocked);
    if (layout)
        *layout = blocked ? LB_BITMAP_BLOCKED : LB_BITMAP_STANDARD;
    lb_bitmap_free(bm);
    return st;
}

/* ------------------------------------------------------------ add / test */

static int cmds_reserve(lb_bitmap *bm, size_t n)
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

/* PEXPIRE every part and the meta key (write batches with a TTL). */
/* SET meta <ours> NX [PX ttl] in every write round trip: a filter that
 * expired or was deleted while this connection stayed open (its meta key
 * checked long ago) is written again with its meta key, in the same round
 * trip, never as a bare bitmap that other processes would refuse as not
 * theirs.  An existing meta key is left as it is. */
static size_t add_meta_guard(lb_bitmap *bm, size_t ncmd)
{
    char val[160];
    int vlen = meta_format(&bm->g, bm->blocked, val, sizeof val);
    add_meta_set(bm, &bm->batch, val, vlen);
    if (cmds_reserve(bm, ncmd + 1) == 0) {
        bm->cmds[ncmd].key = META_SET;
        bm->cmds[ncmd].part = UINT32_MAX;
    }
    return ncmd + 1;
}

static size_t add_expires(lb_bitmap *bm, size_t ncmd)
{
    if (bm->ttl_ms <= 0)
        return ncmd;
    lb_redis_batch *b = &bm->batch;
    for (uint64_t p = 0; p <= bm->nparts; p++) {
        uint64_t which = p == bm->nparts ? UINT64_MAX : p;
        size_t len;
        const char *n = name_of(bm, which, &len);
        lb_redis_batch_cmd(b, 3);
        lb_redis_batch_arg(b, "PEXPIRE", 7);
        lb_redis_batch_arg(b, n, len);
        lb_redis_batch_arg_u64(b, (uint64_t)bm->ttl_ms);
        if (cmds_reserve(bm, ncmd + 1) == 0) {
            bm->cmds[ncmd].key = NO_KEY;
            bm->cmds[ncmd].part = (uint32_t)(which == UINT64_MAX ? UINT32_MAX : which);
        }
        ncmd++;
    }
    return ncmd;
}

/* Emit the commands of one key's offsets within one part. */
static size_t emit(lb_bitmap *bm, int write, uint64_t part, const uint64_t *offs,
                   uint32_t cnt, uint32_t keyidx, size_t ncmd)
{
    lb_redis_batch *b = &bm->batch;
    size_t len;
    const char *n = name_of(bm, part, &len);
    if (bm->mode == LB_BITMAP_BITFIELD) {
        lb_redis_batch_cmd(b, 2 + (int)cnt * (write ? 4 : 3));
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
        if (cmds_reserve(bm, ncmd + 1))
            return (size_t)-1;
        bm->cmds[ncmd].key = keyidx;
        bm->cmds[ncmd].part = (uint32_t)part;
        bm->cmds[ncmd].nbits = cnt;
        return ncmd + 1;
    }
    if (cmds_reserve(bm, ncmd + cnt))
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
        ncmd++;
    }
    return ncmd;
}

static lb_redis_status bad_reply(lb_bitmap *bm, const char *what)
{
    return conn_bad_reply(bm->conn, what);
}

/* Check every reply of the last batch against wants[0..n) (NULL: skip). */
static lb_redis_status check_replies(lb_bitmap *bm, lb_reply **rs, const lb_reply_want *wants,
                                     const char *const *names, size_t n)
{
    for (size_t c = 0; c < n; c++)
        if (!lb_reply_fits(rs[c], &wants[c]))
            return bad_reply(bm, names[c]);
    return LB_REDIS_OK;
}

/* The bounds of what bm->batch's replies may hold: the one array any
 * command here answers is BITFIELD's, one element per GET; and no data
 * beyond what GETRANGE asked for (snapshot adds it): every other reply fits
 * in the session's per-command slack (resp.h). */
static void batch_bounds(lb_bitmap *bm)
{
    lb_redis_batch_expect_elements(&bm->batch, bm->mode == LB_BITMAP_BITFIELD ? bm->g.k : 0);
    lb_redis_batch_expect_bytes(&bm->batch, 0);
}

/* One key of a blocked chunk: the k SET u1 of its block (an add; Redis bit
 * order: lane i, bit b of the block is its bit 64 i + (b ^ 7), byte 8 i + b/8
 * as the little-endian words of a BlockedFilter's bytes), or one GETRANGE of
 * the block's 64 bytes (a test, checked against want at the reply). */
static size_t emit_blocked(lb_bitmap *bm, int write, const lb_key *key, uint32_t keyidx,
                           size_t ncmd)
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
        return emit(bm, 1, part, offs, cnt, keyidx, ncmd);
    }
    if (cmds_reserve(bm, ncmd + 1))
        return (size_t)-1;
    memcpy(bm->want + 8 * (size_t)keyidx, want, sizeof want);
    size_t len;
    const char *n = name_of(bm, part, &len);
    lb_redis_batch *b = &bm->batch;
    lb_redis_batch_cmd(b, 4);
    lb_redis_batch_arg(b, "GETRANGE", 8);
    lb_redis_batch_arg(b, n, len);
    lb_redis_batch_arg_u64(b, off / 8);
    lb_redis_batch_arg_u64(b, off / 8 + 63);
    bm->cmds[ncmd].key = keyidx;
    bm->cmds[ncmd].part = (uint32_t)part;
    bm->cmds[ncmd].nbits = 0;
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
        if (bm->blocked) {
            ncmd = emit_blocked(bm, write, key, (uint32_t)i, ncmd);
            if (ncmd == (size_t)-1)
                return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
            continue;
        }
        lb_indices(&bm->g, lb_hash(bm->g.scheme, key->data, key->len), idx);
        if (bm->nparts == 1) {
            ncmd = emit(bm, write, 0, idx, k, (uint32_t)i, ncmd);
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
                ncmd = emit(bm, write, part, offs, cnt, (uint32_t)i, ncmd);
            }
        }
        if (ncmd == (size_t)-1)
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
    }
    if (write)
        ncmd = add_expires(bm, add_meta_guard(bm, ncmd));
    if (cmds_reserve(bm, ncmd))
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
    batch_bounds(bm);
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
        return name_wrongtype(bm, part == UINT32_MAX ? UINT64_MAX : part);
    }
    if (st != LB_REDIS_OK)
        return st;
    if (out)
        memset(out, write ? 0 : 1, cn);
    for (size_t c = 0; c < ncmd; c++) {
        const lb_reply *x = rs[c];
        uint32_t ki = bm->cmds[c].key;
        if (ki == META_SET) {
            static const lb_reply_want set_nx = {LB_WANT_OK_OR_NIL, 0, 0};
            if (!lb_reply_fits(x, &set_nx))
                return bad_reply(bm, "SET NX of the meta key");
            continue;
        }
        if (ki == NO_KEY) {
            if (!lb_reply_is_bit(x)) /* PEXPIRE: 1 set, 0 no such key */
                return bad_reply(bm, "PEXPIRE");
            continue;
        }
        int all = 1;
        if (bm->blocked && !write) {
            all = blocked_present(x, bm->want + 8 * (size_t)ki);
            if (all < 0)
                return bad_reply(bm, "GETRANGE");
        } else if (bm->mode == LB_BITMAP_BITFIELD) {
            /* exactly one u1 per field sent, each 0 or 1 */
            if (!lb_reply_bits(x, bm->cmds[c].nbits, &all))
                return bad_reply(bm, "BITFIELD");
        } else {
            if (!lb_reply_is_bit(x))
                return bad_reply(bm, write ? "SETBIT" : "GETBIT");
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
    return LB_REDIS_OK;
}

static lb_redis_status check_keys(lb_bitmap *bm, const lb_key *keys, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (keys[i].len == 0 || !keys[i].data)
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG, "key %zu is empty", i);
    return LB_REDIS_OK;
}

static lb_redis_status run_keys(lb_bitmap *bm, const lb_key *keys, size_t n, int write,
                                uint8_t *out)
{
    if (n == 0)
        return LB_REDIS_OK;
    lb_redis_status st = check_keys(bm, keys, n);
    if (st == LB_REDIS_OK)
        st = ensure_meta(bm);
    if (st != LB_REDIS_OK)
        return st;
    for (size_t start = 0; start < n; start += bm->chunk_keys) {
        size_t cn = n - start < bm->chunk_keys ? n - start : bm->chunk_keys;
        size_t ncmd;
        st = build_chunk(bm, keys + start, cn, write, &ncmd);
        if (st != LB_REDIS_OK)
            return st;
        lb_reply **rs;
        st = bm_exec(bm, write ? LB_REDIS_WRITE : LB_REDIS_READ_REPLICA, &rs);
        st = check_chunk(bm, st, rs, ncmd, cn, write, out ? out + start : NULL);
        if (st != LB_REDIS_OK)
            return st;
    }
    return LB_REDIS_OK;
}

lb_redis_status lb_bitmap_add(lb_bitmap *bm, const lb_key *keys, size_t n,
                                    uint8_t *was_new)
{
    return run_keys(bm, keys, n, 1, was_new);
}

lb_redis_status lb_bitmap_test(lb_bitmap *bm, const lb_key *keys, size_t n,
                                     uint8_t *present)
{
    return run_keys(bm, keys, n, 0, present);
}

/* ------------------------------------------------------------ reset */

/* Reset's round trip: DEL every part and the meta key, then SET the meta
 * key again (ours). */
static void build_reset(lb_bitmap *bm)
{
    lb_redis_batch *b = &bm->batch;
    char val[160];
    int vlen = meta_format(&bm->g, bm->blocked, val, sizeof val);
    lb_redis_batch_clear(b);
    lb_redis_batch_cmd(b, (int)(bm->nparts + 2));
    lb_redis_batch_arg(b, "DEL", 3);
    for (uint64_t p = 0; p <= bm->nparts; p++) {
        size_t len;
        const char *n = name_of(bm, p == bm->nparts ? UINT64_MAX : p, &len);
        lb_redis_batch_arg(b, n, len);
    }
    add_meta_set(bm, b, val, vlen);
    batch_bounds(bm);
}

static lb_redis_status check_reset(lb_bitmap *bm, lb_redis_status st, lb_reply **rs)
{
    if (st != LB_REDIS_OK)
        return st;
    const lb_reply_want wants[2] = {{LB_WANT_INT, 0, (long long)bm->nparts + 1},
                                    {LB_WANT_OK_OR_NIL, 0, 0}};
    static const char *const names[2] = {"DEL", "SET NX of the meta key"};
    return check_replies(bm, rs, wants, names, 2);
}

lb_redis_status lb_bitmap_reset(lb_bitmap *bm)
{
    lb_redis_status st = ensure_meta(bm); /* never delete another filter's bitmap */
    if (st != LB_REDIS_OK)
        return st;
    build_reset(bm);
    lb_reply **rs;
    st = bm_exec(bm, LB_REDIS_WRITE, &rs);
    return check_reset(bm, st, rs);
}

/* ------------------------------------------------------------ wire */

enum { W_IDLE = 0, W_NEXT, W_HS, W_LOOK, W_CLAIM, W_MAIN, W_DONE };

lb_redis_status lb_bitmap_wire_begin(lb_bitmap *bm, int kind, const lb_key *keys,
                                           size_t n, uint8_t *out)
{
    lb_redis_status st;
    bm->w_phase = W_IDLE;
    bm->w_claim = 0;
    if (kind == LB_BITMAP_WIRE_RESET) {
        build_reset(bm);
        bm->w_ncmd = 2;
    } else if (kind == LB_BITMAP_WIRE_ADD || kind == LB_BITMAP_WIRE_TEST) {
        if (n == 0 || n > bm->chunk_keys)
            return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG,
                                      "a wire operation takes 1 to %zu keys, not %zu",
                                      bm->chunk_keys, n);
        st = check_keys(bm, keys, n);
        if (st == LB_REDIS_OK)
            st = build_chunk(bm, keys, n, kind == LB_BITMAP_WIRE_ADD, &bm->w_ncmd);
        if (st != LB_REDIS_OK)
            return st;
    } else {
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_ARG, "unknown wire operation");
    }
    bm->w_kind = kind;
    bm->w_n = n;
    bm->w_out = out;
    bm->w_phase = W_NEXT;
    return LB_REDIS_OK;
}

/* What goes out next: the handshake of a new connection, the meta look (and
 * claim) that every new connection gets before its first command, then the
 * operation's own round trip; NULL when it is done. */
lb_redis_status lb_bitmap_wire_next(lb_bitmap *bm, const lb_redis_batch **req)
{
    lb_redis *c = bm->conn;
    lb_redis_status st;
    *req = NULL;
    if (bm->w_phase == W_DONE)
        return LB_REDIS_OK;
    if (bm->w_phase != W_NEXT)
        return lb_redis_set_error(c, LB_REDIS_ERR_ARG, "no wire operation is waiting to send");
    if (!lb_redis_is_connected(c))
        return lb_redis_set_error(c, LB_REDIS_ERR_IO, "no connection is open on the transport");
    unsigned long conn = lb_redis_connect_count(c);
    lb_redis_batch *aux = &bm->w_aux;
    int due = lb_wire_handshake_due(c, aux);
    if (due < 0)
        return lb_redis_set_error(c, LB_REDIS_ERR_NOMEM, "out of memory building the handshake");
    if (due) {
        bm->w_phase = W_HS;
        *req = aux;
    } else if (bm->w_claim) {
        lb_redis_batch_clear(aux);
        build_claim(bm, aux);
        bm->w_phase = W_CLAIM;
        *req = aux;
    } else if (!(bm->meta_checked && bm->meta_conn == conn)) {
        lb_redis_batch_clear(aux);
        build_look(bm, aux);
        bm->w_phase = W_LOOK;
        *req = aux;
    } else {
        bm->w_phase = W_MAIN;
        *req = &bm->batch;
    }
    st = lb_wire_begin(c, *req);
    if (st != LB_REDIS_OK) {
        *req = NULL;
        bm->w_phase = W_DONE;
    }
    return st;
}

/* After lb_wire_feed completed the round trip of wire_next's request:
 * check its replies with the same functions the blocking calls use. */
lb_redis_status lb_bitmap_wire_done(lb_bitmap *bm)
{
    lb_redis *c = bm->conn;
    lb_reply **rs;
    lb_redis_status st;
    int claim = 0;
    switch (bm->w_phase) {
    case W_HS:
        st = lb_wire_handshake_done(c);
        break;
    case W_LOOK:
        st = lb_wire_replies(c, LB_REDIS_RAW_ERRORS, &rs);
        if (st == LB_REDIS_OK)
            st = check_look(bm, rs, &claim);
        if (st == LB_REDIS_OK && !claim) {
            bm->meta_checked = 1;
            bm->meta_conn = lb_redis_connect_count(c);
        }
        bm->w_claim = st == LB_REDIS_OK && claim;
        break;
    case W_CLAIM:
        bm->w_claim = 0;
        st = lb_wire_replies(c, 0, &rs);
        st = check_claim(bm, st, rs);
        break;
    case W_MAIN:
        st = lb_wire_replies(c, 0, &rs);
        if (bm->w_kind == LB_BITMAP_WIRE_RESET)
            st = check_reset(bm, st, rs);
        else
            st = check_chunk(bm, st, rs, bm->w_ncmd, bm->w_n, bm->w_kind == LB_BITMAP_WIRE_ADD,
                             bm->w_out);
        bm->w_phase = W_DONE;
        return st;
    default:
        return lb_redis_set_error(c, LB_REDIS_ERR_ARG, "no wire round trip is in progress");
    }
    bm->w_phase = st == LB_REDIS_OK ? W_NEXT : W_DONE;
    return st;
}

/* ------------------------------------------------------------ load */

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

/* Prefix the current message with the temp key's name (errors of load). */
static lb_redis_status load_fail(lb_bitmap *bm, lb_redis_status st, const char *tmp,
                                 size_t tlen, int cleanup)
{
    char msg[400];
    snprintf(msg, sizeof msg, "%s", lb_redis_errstr(bm->conn));
    if (cleanup && lb_redis_is_connected(bm->conn)) {
        /* best effort: do not leave the temp key behind (it expires anyway) */
        lb_redis_batch *b = &bm->batch;
        lb_redis_batch_clear(b);
        lb_redis_batch_cmd(b, 2);
        lb_redis_batch_arg(b, "DEL", 3);
        lb_redis_batch_arg(b, tmp, tlen);
        lb_redis_batch_expect_elements(b, 0);
        (void)lb_redis_exec(bm->conn, b, LB_REDIS_IDEMPOTENT, NULL);
    }
    return lb_redis_set_error(bm->conn, st, "load: %s", msg);
}

lb_redis_status lb_bitmap_load(lb_bitmap *bm, const uint8_t *bits, size_t nbytes)
{
    const uint64_t want = (bm->g.m + 7) / 8;
    if (nbytes != want)
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_MISMATCH,
                                  "load: %zu bytes given, the filter has %" PRIu64
                                  " (m=%" PRIu64 ")",
                                  nbytes, want, bm->g.m);
    lb_redis_status st = ensure_meta(bm);
    if (st != LB_REDIS_OK)
        return st;

    /* A temp key name unique to this call, in the filter's slot. */
    size_t tlen;
    char *tmp = lb_redis_temp_name(bm->base, bm->baselen, "load", ++bm->load_seq, &tlen);
    if (!tmp)
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
    const uint8_t lastmask = last_mask(bm->g.m);
    lb_redis_batch *b = &bm->batch;

    for (uint64_t p = 0; p < bm->nparts && st == LB_REDIS_OK; p++) {
        const size_t pstart = (size_t)(p * LB_BITMAP_PART_BYTES);
        const size_t pend = nbytes - pstart < LB_BITMAP_PART_BYTES ? nbytes : pstart + LB_BITMAP_PART_BYTES;
        /* the last non-zero chunk of this part (the merge rides on its round trip) */
        size_t last = (size_t)-1;
        for (size_t c = pstart; c < pend; c += LB_BITMAP_LOAD_CHUNK) {
            size_t ce = pend - c < LB_BITMAP_LOAD_CHUNK ? pend : c + LB_BITMAP_LOAD_CHUNK;
            if (!all_zero(bits + c, ce - c))
                last = c;
        }
        if (last == (size_t)-1)
            continue; /* nothing to OR into this part */
        for (size_t c = pstart; c <= last; c += LB_BITMAP_LOAD_CHUNK) {
            size_t ce = pend - c < LB_BITMAP_LOAD_CHUNK ? pend : c + LB_BITMAP_LOAD_CHUNK;
            if (c != last && all_zero(bits + c, ce - c))
                continue;
            int masked = ce == nbytes && lastmask != 0xff;
            size_t body = ce - c - (masked ? 1 : 0);
            /* what each command can answer: SETRANGE the string's new length
             * (at least what it wrote up to, at most a part), PEXPIRE 0/1,
             * BITOP the result's length, DEL the keys removed */
            lb_reply_want wants[6];
            const char *names[6];
            size_t nw = 0;
            const long long part_bytes = (long long)LB_BITMAP_PART_BYTES;
            lb_redis_batch_clear(b);
            if (body) {
                lb_redis_batch_cmd(b, 4);
                lb_redis_batch_arg(b, "SETRANGE", 8);
                lb_redis_batch_arg(b, tmp, tlen);
                lb_redis_batch_arg_u64(b, c - pstart);
                lb_redis_batch_arg(b, bits + c, body);
                wants[nw] = (lb_reply_want){LB_WANT_INT, (long long)(c - pstart + body), part_bytes};
                names[nw++] = "SETRANGE";
            }
            if (masked) {
                uint8_t lbyte = bits[ce - 1] & lastmask;
                lb_redis_batch_cmd(b, 4);
                lb_redis_batch_arg(b, "SETRANGE", 8);
                lb_redis_batch_arg(b, tmp, tlen);
                lb_redis_batch_arg_u64(b, ce - 1 - pstart);
                lb_redis_batch_arg(b, &lbyte, 1);
                wants[nw] = (lb_reply_want){LB_WANT_INT, (long long)(ce - pstart), part_bytes};
                names[nw++] = "SETRANGE";
            }
            lb_redis_batch_cmd(b, 3);
            lb_redis_batch_arg(b, "PEXPIRE", 7);
            lb_redis_batch_arg(b, tmp, tlen);
            lb_redis_batch_arg_u64(b, LB_BITMAP_LOAD_TMP_TTL_MS);
            wants[nw] = (lb_reply_want){LB_WANT_INT, 0, 1};
            names[nw++] = "PEXPIRE";
            long bitop = -1;
            if (c == last) {
                size_t pn;
                const char *pname = name_of(bm, p, &pn);
                bitop = (long)b->ncmds;
                lb_redis_batch_cmd(b, 5);
                lb_redis_batch_arg(b, "BITOP", 5);
                lb_redis_batch_arg(b, "OR", 2);
                lb_redis_batch_arg(b, pname, pn);
                lb_redis_batch_arg(b, pname, pn);
                lb_redis_batch_arg(b, tmp, tlen);
                lb_redis_batch_cmd(b, 2);
                lb_redis_batch_arg(b, "DEL", 3);
                lb_redis_batch_arg(b, tmp, tlen);
                wants[nw] = (lb_reply_want){LB_WANT_INT, 0, part_bytes};
                names[nw++] = "BITOP";
                wants[nw] = (lb_reply_want){LB_WANT_INT, 0, 1};
                names[nw++] = "DEL";
                /* the meta key with the bits (see add_meta_guard) */
                char val[160];
                int vlen = meta_format(&bm->g, bm->blocked, val, sizeof val);
                add_meta_set(bm, b, val, vlen);
                wants[nw] = (lb_reply_want){LB_WANT_OK_OR_NIL, 0, 0};
                names[nw++] = "SET NX of the meta key";
            }
            lb_reply **rs;
            st = bm_exec(bm, LB_REDIS_WRITE, &rs);
            if (st == LB_REDIS_OK)
                st = check_replies(bm, rs, wants, names, nw);
            if (st == LB_REDIS_ERR_WRONGTYPE && lb_redis_err_index(bm->conn) == bitop) {
                st = name_wrongtype(bm, p); /* the DEL of tmp ran after it */
                break;
            }
            if (st != LB_REDIS_OK) {
                st = load_fail(bm, st, tmp, tlen, st == LB_REDIS_ERR_REPLY ||
                                                      st == LB_REDIS_ERR_WRONGTYPE);
                break;
            }
        }
    }
    free(tmp);
    if (st == LB_REDIS_OK && bm->ttl_ms > 0) {
        lb_redis_batch_clear(b);
        size_t ne = add_expires(bm, 0);
        lb_reply **rs;
        st = bm_exec(bm, LB_REDIS_WRITE, &rs);
        for (size_t c = 0; st == LB_REDIS_OK && c < ne; c++)
            if (!lb_reply_is_bit(rs[c]))
                st = bad_reply(bm, "PEXPIRE");
    }
    return st;
}

/* ------------------------------------------------------------ snapshot */

lb_redis_status lb_bitmap_snapshot(lb_bitmap *bm, uint8_t *out, size_t nbytes)
{
    const uint64_t want = (bm->g.m + 7) / 8;
    if (nbytes != want)
        return lb_redis_set_error(bm->conn, LB_REDIS_ERR_MISMATCH,
                                  "snapshot: buffer of %zu bytes, the filter has %" PRIu64
                                  " (m=%" PRIu64 ")",
                                  nbytes, want, bm->g.m);
    lb_redis_status st = ensure_meta(bm);
    if (st != LB_REDIS_OK)
        return st;
    memset(out, 0, nbytes);
    lb_redis_batch *b = &bm->batch;

    /* Walk the parts in GETRANGE pieces, at most LB_BITMAP_SNAP_CHUNK bytes
     * requested per round trip; cmds[] remembers each piece's part. */
    uint64_t p = 0;
    size_t off = 0; /* within part p */
    size_t dest[8];  /* output offset of each piece */
    size_t plen[8];  /* requested length of each piece */
    while (p < bm->nparts) {
        lb_redis_batch_clear(b);
        size_t budget = LB_BITMAP_SNAP_CHUNK, ncmd = 0;
        while (p < bm->nparts && budget > 0 && ncmd < 8) {
            size_t pstart = (size_t)(p * LB_BITMAP_PART_BYTES);
            size_t psize = nbytes - pstart < LB_BITMAP_PART_BYTES ? nbytes - pstart : LB_BITMAP_PART_BYTES;
            size_t piece = psize - off < budget ? psize - off : budget;
            size_t pn;
            const char *pname = name_of(bm, p, &pn);
            if (cmds_reserve(bm, ncmd + 1))
                return lb_redis_set_error(bm->conn, LB_REDIS_ERR_NOMEM, "out of memory");
            lb_redis_batch_cmd(b, 4);
            lb_redis_batch_arg(b, "GETRANGE", 8);
            lb_redis_batch_arg(b, pname, pn);
            lb_redis_batch_arg_u64(b, off);
            lb_redis_batch_arg_u64(b, off + piece - 1);
            lb_redis_batch_expect_bytes(b, piece);
            bm->cmds[ncmd].part = (uint32_t)p;
            dest[ncmd] = pstart + off;
            plen[ncmd] = piece;
            ncmd++;
            budget -= piece;
            off += piece;
            if (off == psize) {
                p++;
                off = 0;
            }
        }
        lb_reply **rs;
        st = bm_exec(bm, LB_REDIS_READ_REPLICA, &rs);
        if (st == LB_REDIS_ERR_WRONGTYPE) {
            long e = lb_redis_err_index(bm->conn);
            return name_wrongtype(bm, e >= 0 && (size_t)e < ncmd ? bm->cmds[e].part : 0);
        }
        if (st != LB_REDIS_OK)
            return st;
        for (size_t c = 0; c < ncmd; c++) {
            const lb_reply *x = rs[c];
            if (x->type != LB_REPLY_STRING || x->len > plen[c])
                return bad_reply(bm, "GETRANGE");
            memcpy(out + dest[c], x->str, x->len); /* shorter: the rest stays zero */
        }
    }
    out[nbytes - 1] &= last_mask(bm->g.m);
    return LB_REDIS_OK;
}

lb_redis_status lb_bitmap_bitcount(lb_bitmap *bm, uint64_t *count)
{
    *count = 0;
    lb_redis_status st = ensure_meta(bm);
    if (st != LB_REDIS_OK)
        return st;
    lb_redis_batch *b = &bm->batch;
    lb_redis_batch_clear(b);
    /* Count the part's own bytes only (BITCOUNT key 0 last): its reply is then
     * at most 8 bits per byte asked, and bytes another writer appended past
     * the filter do not count. */
    const uint64_t nbytes = (bm->g.m + 7) / 8;
    for (uint64_t p = 0; p < bm->nparts; p++) {
        size_t pn;
        const char *pname = name_of(bm, p, &pn);
        uint64_t pstart = p * LB_BITMAP_PART_BYTES;
        uint64_t pbytes = nbytes - pstart < LB_BITMAP_PART_BYTES ? nbytes - pstart : LB_BITMAP_PART_BYTES;
        lb_redis_batch_cmd(b, 4);
        lb_redis_batch_arg(b, "BITCOUNT", 8);
        lb_redis_batch_arg(b, pname, pn);
        lb_redis_batch_arg_u64(b, 0);
        lb_redis_batch_arg_u64(b, pbytes - 1);
    }
    lb_reply **rs;
    st = bm_exec(bm, LB_REDIS_READ_REPLICA, &rs);
    if (st == LB_REDIS_ERR_WRONGTYPE)
        return name_wrongtype(bm, (uint64_t)lb_redis_err_index(bm->conn));
    if (st != LB_REDIS_OK)
        return st;
    for (uint64_t p = 0; p < bm->nparts; p++) {
        uint64_t pstart = p * LB_BITMAP_PART_BYTES;
        uint64_t pbytes = nbytes - pstart < LB_BITMAP_PART_BYTES ? nbytes - pstart : LB_BITMAP_PART_BYTES;
        if (!lb_reply_int_in(rs[p], 0, (long long)(pbytes * 8)))
            return bad_reply(bm, "BITCOUNT");
        *count += (uint64_t)rs[p]->integer;
    }
    return LB_REDIS_OK;
}
