/* redis_sentinel.c: see redis_sentinel.h. */
#include "redis_sentinel.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int lb_sentinel_parse_list(const char *s, size_t n, char **out, char *why, size_t whylen)
{
    return lb_redis_parse_host_list(s, n, LB_SENTINEL_DEFAULT_PORT, "sentinel", out, why, whylen);
}

int lb_sentinel_addr_reply(const lb_reply *x, char *host, size_t hostlen, int *port)
{
    if (x && x->type == LB_REPLY_NIL)
        return 0;
    if (!x || x->type != LB_REPLY_ARRAY || x->len != 2)
        return -1;
    const lb_reply *h = x->element[0], *p = x->element[1];
    if (!h || !p || h->type != LB_REPLY_STRING || p->type != LB_REPLY_STRING || h->len == 0 ||
        h->len >= hostlen || p->len == 0 || p->len > 5)
        return -1;
    long v = 0;
    for (size_t i = 0; i < p->len; i++) {
        if (p->str[i] < '0' || p->str[i] > '9')
            return -1;
        v = v * 10 + (p->str[i] - '0');
    }
    if (v < 1 || v > 65535 || memchr(h->str, '\0', h->len))
        return -1;
    memcpy(host, h->str, h->len);
    host[h->len] = '\0';
    *port = (int)v;
    return 1;
}

int lb_sentinel_role_is_master(const lb_reply *x)
{
    if (!x || x->type != LB_REPLY_ARRAY || x->len < 1 || !x->element[0] ||
        x->element[0]->type != LB_REPLY_STRING)
        return -1;
    const lb_reply *r = x->element[0];
    if (r->len == 6 && memcmp(r->str, "master", 6) == 0)
        return 1;
    if ((r->len == 5 && memcmp(r->str, "slave", 5) == 0) ||
        (r->len == 8 && memcmp(r->str, "sentinel", 8) == 0))
        return 0;
    return -1;
}

/* One sentinel: 1 found, 0 does not know the service, -1 failed (status and
 * message in *st / err). */
static int ask_one(const lb_redis_config *cfg, const char *shost, int sport, char *host,
                   size_t hostlen, int *port, lb_redis_status *st, char *err, size_t errlen)
{
    lb_redis_config sc;
    lb_redis_config_init(&sc);
    int probe = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms
                : cfg->timeout_ms > 0      ? cfg->timeout_ms
                                           : LB_SENTINEL_PROBE_MS;
    sc.port = sport;
    sc.connect_timeout_ms = probe;
    sc.timeout_ms = probe;
    lb_redis *s = NULL;
    if (lb_redis_config_set(&sc.host, shost) ||
        lb_redis_config_set(&sc.username, cfg->sentinel_username) ||
        lb_redis_config_set(&sc.password, cfg->sentinel_password) || !(s = lb_redis_new(&sc))) {
        lb_redis_config_free(&sc);
        *st = LB_REDIS_ERR_NOMEM;
        snprintf(err, errlen, "out of memory asking the sentinels");
        return -1;
    }
    lb_redis_config_free(&sc);
    lb_redis_batch b;
    lb_redis_batch_init(&b);
    lb_redis_batch_cmd(&b, 3);
    lb_redis_batch_arg_str(&b, "SENTINEL");
    lb_redis_batch_arg_str(&b, "get-master-addr-by-name");
    lb_redis_batch_arg_str(&b, cfg->sentinel_service);
    lb_redis_batch_expect_elements(&b, 2);
    lb_redis_batch_expect_bytes(&b, hostlen + 8);
    lb_reply **rs = NULL;
    lb_redis_status rst = lb_redis_exec(s, &b, LB_REDIS_RAW_ERRORS, &rs);
    lb_redis_batch_free(&b);
    int found = -1;
    if (rst != LB_REDIS_OK) {
        *st = rst == LB_REDIS_ERR_TIMEOUT ? LB_REDIS_ERR_TIMEOUT
              : rst == LB_REDIS_ERR_PROTOCOL ? LB_REDIS_ERR_PROTOCOL
              : rst == LB_REDIS_ERR_AUTH     ? LB_REDIS_ERR_AUTH
                                             : LB_REDIS_ERR_CONNECT;
        snprintf(err, errlen, "sentinel %s:%d: %s", shost, sport, lb_redis_errstr(s));
    } else if (rs[0]->type == LB_REPLY_ERROR) {
        *st = LB_REDIS_ERR_CONNECT;
        snprintf(err, errlen, "sentinel %s:%d answered: %s", shost, sport, rs[0]->str);
    } else {
        found = lb_sentinel_addr_reply(rs[0], host, hostlen, port);
        if (found < 0) {
            *st = LB_REDIS_ERR_PROTOCOL;
            snprintf(err, errlen,
                     "protocol error: sentinel %s:%d answered SENTINEL get-master-addr-by-name "
                     "with something other than an address",
                     shost, sport);
        }
    }
    lb_redis_free(s);
    return found;
}

lb_redis_status lb_sentinel_find_primary(const lb_redis_config *cfg, char **host, int *port,
                                         char *err, size_t errlen)
{
    char addr[256], last[512];
    lb_redis_status st = LB_REDIS_ERR_CONNECT, worst = LB_REDIS_OK;
    int unknown = 0, asked = 0;
    last[0] = '\0';
    const char *list = cfg->sentinels ? cfg->sentinels : "";
    const char *p = list;
    while (*p) {
        const char *comma = strchr(p, ',');
        const char *e = comma ? comma : p + strlen(p);
        const char *colon = memchr(p, ':', (size_t)(e - p));
        char shost[256];
        size_t hl = colon ? (size_t)(colon - p) : 0;
        if (colon && hl < sizeof shost) {
            memcpy(shost, p, hl);
            shost[hl] = '\0';
            int sport = atoi(colon + 1);
            asked++;
            int r = ask_one(cfg, shost, sport, addr, sizeof addr, port, &st, last, sizeof last);
            if (r == 1) {
                size_t al = strlen(addr);
                if (!(*host = malloc(al + 1))) {
                    snprintf(err, errlen, "out of memory");
                    return LB_REDIS_ERR_NOMEM;
                }
                memcpy(*host, addr, al + 1);
                return LB_REDIS_OK;
            }
            if (r == 0)
                unknown++;
            else if (st == LB_REDIS_ERR_NOMEM) {
                snprintf(err, errlen, "%s", last);
                return st;
            } else if (worst != LB_REDIS_ERR_PROTOCOL)
                worst = st;
        }
        if (!comma)
            break;
        p = comma + 1;
    }
    if (unknown && worst == LB_REDIS_OK) {
        snprintf(err, errlen, "no sentinel of %s knows a primary of service '%s'", list,
                 cfg->sentinel_service);
        return LB_REDIS_ERR_CONNECT;
    }
    snprintf(err, errlen, "no sentinel of %s gave the primary of service '%s'%s (%d asked; "
             "last: %s)",
             list, cfg->sentinel_service, unknown ? " (some do not know it)" : "", asked,
             last[0] ? last : "none");
    return worst == LB_REDIS_OK ? LB_REDIS_ERR_CONNECT : worst;
}
