/* cluster_map.c: see cluster_map.h. */
#include "cluster_map.h"

#include <string.h>

/* ---------------------------------------------------------------- replies */

int lb_cluster_redirect(const char *text, size_t len, long *slot, char *host, size_t hostlen,
                        int *port)
{
    int kind;
    size_t p;
    if (len > 6 && memcmp(text, "MOVED ", 6) == 0) {
        kind = 1;
        p = 6;
    } else if (len > 4 && memcmp(text, "ASK ", 4) == 0) {
        kind = 2;
        p = 4;
    } else {
        return 0;
    }
    long s = 0;
    size_t d = 0;
    for (; p < len && text[p] >= '0' && text[p] <= '9' && d < 6; p++, d++)
        s = s * 10 + (text[p] - '0');
    if (!d || s >= LB_CLUSTER_SLOTS || p >= len || text[p] != ' ')
        return 0;
    p++;
    size_t ae = p;
    while (ae < len && text[ae] != ' ')
        ae++;
    size_t colon = ae;
    for (size_t i = p; i < ae; i++)
        if (text[i] == ':')
            colon = i;
    if (colon == ae)
        return 0;
    long pt = 0;
    d = 0;
    for (size_t i = colon + 1; i < ae; i++, d++) {
        if (text[i] < '0' || text[i] > '9' || d >= 5)
            return 0;
        pt = pt * 10 + (text[i] - '0');
    }
    if (!d || pt < 1 || pt > 65535 || colon - p >= hostlen)
        return 0;
    memcpy(host, text + p, colon - p); /* may be empty: the node that answered */
    host[colon - p] = '\0';
    *slot = s;
    *port = (int)pt;
    return kind;
}

/* A reply that says the command was not run here, for the cluster's reasons. */
int lb_cluster_refusal(const lb_reply *x)
{
    if (!x || x->type != LB_REPLY_ERROR || !x->str)
        return 0;
    return strncmp(x->str, "MOVED ", 6) == 0 || strncmp(x->str, "ASK ", 4) == 0 ||
           strncmp(x->str, "TRYAGAIN", 8) == 0 || strncmp(x->str, "CLUSTERDOWN", 11) == 0;
}

/* -------------------------------------------------------------- slot map */

/* The value of name in a RESP2 flat map (an array of key, value, ...). */
static const lb_reply *map_get(const lb_reply *m, const char *name)
{
    if (!m || m->type != LB_REPLY_ARRAY)
        return NULL;
    size_t nl = strlen(name);
    for (size_t i = 0; i + 1 < m->len; i += 2) {
        const lb_reply *k = m->element[i];
        if (k && (k->type == LB_REPLY_STRING || k->type == LB_REPLY_STATUS) && k->len == nl &&
            memcmp(k->str, name, nl) == 0)
            return m->element[i + 1];
    }
    return NULL;
}

/* An integer that may come as a bulk string. */
static int reply_long(const lb_reply *x, long *v)
{
    if (!x)
        return -1;
    if (x->type == LB_REPLY_INTEGER) {
        *v = (long)x->integer;
        return 0;
    }
    if (x->type != LB_REPLY_STRING || x->len == 0 || x->len > 18)
        return -1;
    long r = 0;
    for (size_t i = 0; i < x->len; i++) {
        if (x->str[i] < '0' || x->str[i] > '9')
            return -1;
        r = r * 10 + (x->str[i] - '0');
    }
    *v = r;
    return 0;
}

/* The address of an endpoint: "" or "?" (unknown) or nil means the node asked. */
static const char *endpoint(const lb_reply *x, const char *asked)
{
    if (!x || x->type != LB_REPLY_STRING || x->len == 0 || (x->len == 1 && x->str[0] == '?') ||
        memchr(x->str, '\0', x->len) || x->len > 255)
        return asked;
    return x->str;
}

static int str_is(const lb_reply *x, const char *s)
{
    size_t n = strlen(s);
    return x && x->type == LB_REPLY_STRING && x->len == n && memcmp(x->str, s, n) == 0;
}

/* A node entry of CLUSTER SHARDS: its address, its id from fns->node; 0, 1 when
 * it is skipped (a replica that is not online serves no reads), -1 when it is
 * no node entry or the callback stopped. */
static int shard_node(const lb_reply *nd, const char *asked_host, int tls,
                      const lb_cluster_map_fns *fns, void *ctx, int *primary, int *online,
                      int *id)
{
    *primary = str_is(map_get(nd, "role"), "master");
    *online = str_is(map_get(nd, "health"), "online");
    if (!*primary && !*online)
        return 1;
    long port = 0;
    const lb_reply *tp = tls ? map_get(nd, "tls-port") : NULL;
    if ((tp && reply_long(tp, &port) == 0 && port > 0) ||
        reply_long(map_get(nd, "port"), &port) == 0) {
        if (port < 1 || port > 65535)
            return -1;
    } else {
        return -1;
    }
    const char *host = endpoint(map_get(nd, "endpoint"), NULL);
    if (!host)
        host = endpoint(map_get(nd, "ip"), asked_host);
    *id = fns->node(ctx, host, (int)port);
    return *id < 0 ? -1 : 0;
}

int lb_cluster_parse_map(const lb_reply *x, int shards, const char *asked_host, int tls,
                         const lb_cluster_map_fns *fns, void *ctx)
{
    if (!x || x->type != LB_REPLY_ARRAY)
        return -1;
    for (size_t i = 0; i < x->len; i++) {
        const lb_reply *e = x->element[i];
        if (!e || e->type != LB_REPLY_ARRAY)
            return -1;
        if (!shards) {
            /* CLUSTER SLOTS: [lo, hi, [host, port, id, ...], replicas ...] */
            long lo, hi;
            if (e->len < 3 || reply_long(e->element[0], &lo) || reply_long(e->element[1], &hi) ||
                lo < 0 || hi < lo || hi >= LB_CLUSTER_SLOTS)
                return -1;
            int primary = -1, replica = -1;
            for (size_t j = 2; j < e->len; j++) {
                const lb_reply *nd = e->element[j];
                long port;
                if (!nd || nd->type != LB_REPLY_ARRAY || nd->len < 2 ||
                    reply_long(nd->element[1], &port) || port < 1 || port > 65535)
                    return -1;
                int id = fns->node(ctx, endpoint(nd->element[0], asked_host), (int)port);
                if (id < 0)
                    return -1;
                if (j == 2)
                    primary = id;
                else if (replica < 0)
                    replica = id;
            }
            if (fns->range(ctx, lo, hi, primary, replica))
                return -1;
            continue;
        }
        /* CLUSTER SHARDS: {slots: [lo, hi, ...], nodes: [{ip, endpoint, port, role, health}]}:
         * the nodes once, then the ranges once each (linear in the reply). */
        const lb_reply *slots = map_get(e, "slots"), *nodes = map_get(e, "nodes");
        if (!slots || !nodes || slots->type != LB_REPLY_ARRAY || nodes->type != LB_REPLY_ARRAY ||
            slots->len % 2)
            return -1;
        int primary = -1, primary_online = 0, replica = -1;
        for (size_t j = 0; j < nodes->len; j++) {
            int is_primary, online, id = -1;
            int r = shard_node(nodes->element[j], asked_host, tls, fns, ctx, &is_primary,
                               &online, &id);
            if (r < 0)
                return -1;
            if (r > 0)
                continue;
            if (is_primary) {
                if (primary < 0 || (online && !primary_online)) {
                    primary = id;
                    primary_online = online;
                }
            } else if (replica < 0) {
                replica = id;
            }
        }
        for (size_t s = 0; s + 1 < slots->len; s += 2) {
            long lo, hi;
            if (reply_long(slots->element[s], &lo) || reply_long(slots->element[s + 1], &hi) ||
                lo < 0 || hi < lo || hi >= LB_CLUSTER_SLOTS)
                return -1;
            if (fns->range(ctx, lo, hi, primary, replica))
                return -1;
        }
    }
    return 0;
}
