/* sentinel.c: see sentinel.h. */
#include "sentinel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

void lb_sentinel_role_request(lb_redis_batch *b)
{
    lb_redis_batch_clear(b);
    lb_redis_batch_cmd(b, 1);
    lb_redis_batch_arg_str(b, "ROLE");
    lb_redis_batch_expect_elements(b, 64 * 1024); /* a master lists its replicas */
    lb_redis_batch_expect_bytes(b, 64 * 1024);
}

/* ------------------------------------------------------------------ walk */

void lb_sentinel_walk_init(lb_sentinel_walk *w, const lb_redis_config *cfg)
{
    memset(w, 0, sizeof *w);
    w->cfg = cfg;
    w->p = cfg->sentinels ? cfg->sentinels : "";
    w->st = LB_REDIS_ERR_CONNECT;
    w->worst = LB_REDIS_OK;
    lb_redis_config_init(&w->scfg);
    lb_redis_batch_init(&w->req);
}

void lb_sentinel_walk_free(lb_sentinel_walk *w)
{
    lb_redis_config_free(&w->scfg);
    lb_redis_batch_free(&w->req);
}

/* The settings and request for asking shost:sport; -1 out of memory. */
static int prepare(lb_sentinel_walk *w)
{
    const lb_redis_config *cfg = w->cfg;
    lb_redis_config *sc = &w->scfg;
    int probe = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms
                : cfg->timeout_ms > 0      ? cfg->timeout_ms
                                           : LB_SENTINEL_PROBE_MS;
    lb_redis_config_free(sc);
    sc->port = w->sport;
    sc->connect_timeout_ms = probe;
    sc->timeout_ms = probe;
    if (lb_redis_config_set(&sc->host, w->shost) ||
        lb_redis_config_set(&sc->username, cfg->sentinel_username) ||
        lb_redis_config_set(&sc->password, cfg->sentinel_password))
        return -1;
    lb_redis_batch *b = &w->req;
    lb_redis_batch_clear(b);
    lb_redis_batch_cmd(b, 3);
    lb_redis_batch_arg_str(b, "SENTINEL");
    lb_redis_batch_arg_str(b, "get-master-addr-by-name");
    lb_redis_batch_arg_str(b, cfg->sentinel_service);
    lb_redis_batch_expect_elements(b, 2);
    lb_redis_batch_expect_bytes(b, sizeof w->addr + 8);
    return b->failed ? -1 : 0;
}

int lb_sentinel_walk_next(lb_sentinel_walk *w, const lb_redis_config **scfg,
                          const lb_redis_batch **req)
{
    if (w->found || w->st == LB_REDIS_ERR_NOMEM)
        return 0;
    while (lb_redis_host_list_next(&w->p, w->shost, sizeof w->shost, &w->sport)) {
        if (!w->sport)
            continue;
        w->asked++;
        if (prepare(w) < 0) {
            w->st = LB_REDIS_ERR_NOMEM;
            snprintf(w->last, sizeof w->last, "out of memory asking the sentinels");
            return 0;
        }
        *scfg = &w->scfg;
        *req = &w->req;
        return 1;
    }
    return 0;
}

int lb_sentinel_walk_answer(lb_sentinel_walk *w, lb_redis_status st, const char *errstr,
                            const lb_reply *x)
{
    int found = -1;
    if (st != LB_REDIS_OK) {
        w->st = st == LB_REDIS_ERR_TIMEOUT    ? LB_REDIS_ERR_TIMEOUT
                : st == LB_REDIS_ERR_PROTOCOL ? LB_REDIS_ERR_PROTOCOL
                : st == LB_REDIS_ERR_AUTH     ? LB_REDIS_ERR_AUTH
                : st == LB_REDIS_ERR_NOMEM    ? LB_REDIS_ERR_NOMEM
                                              : LB_REDIS_ERR_CONNECT;
        snprintf(w->last, sizeof w->last, "sentinel %s:%d: %s", w->shost, w->sport, errstr);
    } else if (x->type == LB_REPLY_ERROR) {
        w->st = LB_REDIS_ERR_CONNECT;
        snprintf(w->last, sizeof w->last, "sentinel %s:%d answered: %s", w->shost, w->sport,
                 x->str);
    } else {
        found = lb_sentinel_addr_reply(x, w->addr, sizeof w->addr, &w->port);
        if (found < 0) {
            w->st = LB_REDIS_ERR_PROTOCOL;
            snprintf(w->last, sizeof w->last,
                     "protocol error: sentinel %s:%d answered SENTINEL get-master-addr-by-name "
                     "with something other than an address",
                     w->shost, w->sport);
        }
    }
    if (found == 1)
        w->found = 1;
    else if (found == 0)
        w->unknown++;
    else if (w->worst != LB_REDIS_ERR_PROTOCOL)
        w->worst = w->st;
    return found == 1;
}

lb_redis_status lb_sentinel_walk_result(lb_sentinel_walk *w, char **host, int *port, char *err,
                                        size_t errlen)
{
    const lb_redis_config *cfg = w->cfg;
    const char *list = cfg->sentinels ? cfg->sentinels : "";
    if (w->found) {
        size_t al = strlen(w->addr);
        if (!(*host = malloc(al + 1))) {
            snprintf(err, errlen, "out of memory");
            return LB_REDIS_ERR_NOMEM;
        }
        memcpy(*host, w->addr, al + 1);
        *port = w->port;
        return LB_REDIS_OK;
    }
    if (w->st == LB_REDIS_ERR_NOMEM) {
        snprintf(err, errlen, "%s", w->last);
        return LB_REDIS_ERR_NOMEM;
    }
    if (w->unknown && w->worst == LB_REDIS_OK) {
        snprintf(err, errlen, "no sentinel of %s knows a primary of service '%s'", list,
                 cfg->sentinel_service);
        return LB_REDIS_ERR_CONNECT;
    }
    snprintf(err, errlen, "no sentinel of %s gave the primary of service '%s'%s (%d asked; "
             "last: %s)",
             list, cfg->sentinel_service, w->unknown ? " (some do not know it)" : "", w->asked,
             w->last[0] ? w->last : "none");
    return w->worst == LB_REDIS_OK ? LB_REDIS_ERR_CONNECT : w->worst;
}
