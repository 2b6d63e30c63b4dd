/* bitmap_meta.c: the meta key's text (bitmap.h): its format, its parse, and
 * the check of a GET of it.  No I/O. */
#define _POSIX_C_SOURCE 200809L
#include "bitmap_op.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocked.h"

int lb_bitmap_meta_format(const lb_geometry *g, int blocked, int canary, char *buf, size_t cap)
{
    /* ";canary=1": the filter carries the canary bit (bitmap.h); a reader that
     * does not know the field ignores it (unknown fields are ignored) */
    const char *c = canary ? ";canary=1" : "";
    if (blocked)
        return snprintf(buf, cap, "ling_bloom:v=%d;m=%" PRIu64 ";k=%u;hash=%s;layout=blocked%s",
                        LB_BITMAP_FORMAT_VERSION_BLOCKED, g->m, (unsigned)g->k, LB_BITMAP_BLOCKED_HASH,
                        c);
    return snprintf(buf, cap, "ling_bloom:v=%d;m=%" PRIu64 ";k=%u;hash=%s%s", LB_BITMAP_FORMAT_VERSION,
                    g->m, (unsigned)g->k, lb_hash_scheme_name(g->scheme), c);
}

/* Parse a meta value.  0 = ok; -1 = not a geometry; -2 = newer version.
 * *blocked: 1 for the blocked layout ("layout=blocked", with hash=xxh3-block);
 * *canary: 1 when it says the filter carries the canary bit ("canary=1"). */
static int meta_parse(const char *s, size_t n, lb_geometry *out, int *blocked, int *canary)
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
    int scheme = -1, have = 0, blk = 0, blk_hash = 0, can = 0;
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
        } else if (strcmp(f, "canary") == 0) {
            can = strcmp(val, "1") == 0;
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
    if (canary)
        *canary = can;
    return 0;
}

void lb_bitmap_describe(const lb_geometry *g, int blocked, char *buf, size_t cap)
{
    snprintf(buf, cap, "m=%" PRIu64 " k=%u hash=%s%s", g->m, (unsigned)g->k,
             blocked ? LB_BITMAP_BLOCKED_HASH : lb_hash_scheme_name(g->scheme),
             blocked ? " layout=blocked" : "");
}

/* A reply that does not fit what was sent: the stream may be out of step,
 * and this is not the server we think: drop the connection. */
lb_redis_status lb_bitmap_conn_bad_reply(lb_redis *conn, const char *what)
{
    lb_redis_disconnect(conn);
    return lb_redis_set_error(conn, LB_REDIS_ERR_PROTOCOL,
                              "protocol error: a reply to %s that does not fit the command "
                              "sent (type, length or value); connection dropped",
                              what);
}

/* The read of the meta key, two commands: EXISTS meta, GETRANGE meta 0 255.
 * A GET would take whatever another program stored there (a value of any
 * size); the meta key of a ling_bloom filter is shorter than 256 bytes, so
 * the first 256 bytes tell ours from anything else, and the reply stays
 * small (EXISTS tells a missing key from an empty one). */
void lb_bitmap_add_meta_get(lb_bitmap *bm, lb_redis_batch *b)
{
    size_t len;
    const char *mn = lb_bitmap_name_of(bm, UINT64_MAX, &len);
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "EXISTS", 6);
    lb_redis_batch_arg(b, mn, len);
    mn = lb_bitmap_name_of(bm, UINT64_MAX, &len);
    lb_redis_batch_cmd(b, 4);
    lb_redis_batch_arg(b, "GETRANGE", 8);
    lb_redis_batch_arg(b, mn, len);
    lb_redis_batch_arg_u64(b, 0);
    lb_redis_batch_arg_u64(b, LB_BITMAP_META_READ - 1);
}

/* Interpret the read of the meta key (lb_bitmap_add_meta_get's two replies,
 * neither an error reply). */
lb_redis_status lb_bitmap_meta_reply(lb_redis *conn, const char *key, size_t keylen,
                                        const lb_reply *const *xs, lb_geometry *got, int *blocked,
                                        int *canary)
{
    char kb[128];
    const lb_reply *e = xs[0], *x = xs[1];
    if (!lb_reply_is_bit(e))
        return lb_bitmap_conn_bad_reply(conn, "EXISTS of the meta key");
    if (e->integer == 0)
        return lb_redis_set_error(conn, LB_REDIS_ERR_NOTFOUND,
                                  "no ling_bloom filter at Redis key '%s' (no meta key)",
                                  lb_redis_show(key, keylen, kb, sizeof kb));
    if (x->type != LB_REPLY_STRING || x->len > LB_BITMAP_META_READ || (x->len && !x->str))
        return lb_bitmap_conn_bad_reply(conn, "GETRANGE of the meta key");
    int pr = x->len < LB_BITMAP_META_READ ? meta_parse(x->str ? x->str : "", x->len, got, blocked,
                                                       canary)
                                          : -1;
    if (pr == -2)
        return lb_redis_set_error(conn, LB_REDIS_ERR_MISMATCH,
                                  "the filter at Redis key '%s' was written by a newer ling_bloom "
                                  "(format '%.80s')",
                                  lb_redis_show(key, keylen, kb, sizeof kb), x->str);
    if (pr != 0) {
        char vb[100];
        return lb_redis_set_error(conn, LB_REDIS_ERR_MISMATCH,
                                  "the meta key of Redis key '%s' holds '%s'%s, not a ling_bloom "
                                  "geometry: another program's value (a key name clash?)",
                                  lb_redis_show(key, keylen, kb, sizeof kb),
                                  lb_redis_show(x->str ? x->str : "", x->len, vb, sizeof vb),
                                  x->len >= LB_BITMAP_META_READ ? " (256 bytes or more)" : "");
    }
    return LB_REDIS_OK;
}
