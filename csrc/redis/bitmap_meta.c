/* bitmap_meta.c: the meta key's text (bitmap.h): its format, its parse, and
 * the check of a GET of it.  No I/O. */
#define _POSIX_C_SOURCE 200809L
#include "bitmap_op.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "blocked.h"

int lb_bitmap_meta_format(const lb_geometry *g, int blocked, char *buf, size_t cap)
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

/* Interpret a GET of the meta key. */
lb_redis_status lb_bitmap_meta_reply(lb_redis *conn, const char *key, size_t keylen,
                                        const lb_reply *x, lb_geometry *got, int *blocked)
{
    char kb[128];
    if (x->type == LB_REPLY_NIL)
        return lb_redis_set_error(conn, LB_REDIS_ERR_NOTFOUND,
                                  "no ling_bloom filter at Redis key '%s' (no meta key)",
                                  lb_redis_show(key, keylen, kb, sizeof kb));
    if (x->type != LB_REPLY_STRING)
        return lb_bitmap_conn_bad_reply(conn, "GET of the meta key");
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
