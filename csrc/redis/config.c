/* config.c: see config.h.  The URL is read in steps (scheme, userinfo, the
 * netloc of each scheme, the query), each its own function; the query's
 * options are a table. */
#define _POSIX_C_SOURCE 200809L
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---------------------------------------------------------------- config */

void lb_redis_config_init(lb_redis_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
}

/* The string fields, for free and copy. */
static const size_t str_fields[] = {
    offsetof(lb_redis_config, host),          offsetof(lb_redis_config, unix_path),
    offsetof(lb_redis_config, username),      offsetof(lb_redis_config, password),
    offsetof(lb_redis_config, tls_ca_certs),  offsetof(lb_redis_config, tls_ca_path),
    offsetof(lb_redis_config, tls_certfile),  offsetof(lb_redis_config, tls_keyfile),
    offsetof(lb_redis_config, sentinels),     offsetof(lb_redis_config, sentinel_service),
    offsetof(lb_redis_config, sentinel_username), offsetof(lb_redis_config, sentinel_password),
    offsetof(lb_redis_config, cluster_nodes),
};
#define N_STR_FIELDS (sizeof str_fields / sizeof str_fields[0])
#define STR_FIELD(cfg, i) ((char **)((char *)(cfg) + str_fields[i]))

void lb_redis_config_free(lb_redis_config *cfg)
{
    for (size_t i = 0; i < N_STR_FIELDS; i++)
        free(*STR_FIELD(cfg, i));
    lb_redis_config_init(cfg);
}

static char *dup_bytes(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

lb_redis_status lb_redis_config_set(char **field, const char *value)
{
    char *d = NULL;
    if (value && !(d = dup_bytes(value, strlen(value))))
        return LB_REDIS_ERR_NOMEM;
    free(*field);
    *field = d;
    return LB_REDIS_OK;
}

lb_redis_status lb_redis_config_copy(lb_redis_config *dst, const lb_redis_config *src)
{
    *dst = *src;
    for (size_t i = 0; i < N_STR_FIELDS; i++)
        *STR_FIELD(dst, i) = NULL;
    for (size_t i = 0; i < N_STR_FIELDS; i++)
        if (lb_redis_config_set(STR_FIELD(dst, i), *STR_FIELD(src, i)) != LB_REDIS_OK) {
            lb_redis_config_free(dst);
            return LB_REDIS_ERR_NOMEM;
        }
    return LB_REDIS_OK;
}

void lb_redis_config_where(const lb_redis_config *cfg, char *buf, size_t n)
{
    if (cfg->unix_path)
        snprintf(buf, n, "unix:%s", cfg->unix_path);
    else if (cfg->host && strchr(cfg->host, ':'))
        snprintf(buf, n, "[%s]:%d", cfg->host, cfg->port ? cfg->port : 6379);
    else
        snprintf(buf, n, "%s:%d", cfg->host ? cfg->host : "localhost", cfg->port ? cfg->port : 6379);
}

/* ---------------------------------------------------------- URL helpers */

/* The URL being read, and where its error goes. */
typedef struct {
    lb_redis_config *cfg;
    char *err;
    size_t errlen;
    int is_unix, is_sentinel, is_cluster;
    const char *hostpart, *netend; /* the netloc after the userinfo */
    const char *path, *end;        /* path: NULL when absent; end: '?' or the end */
} url_ctx;

static lb_redis_status url_err(url_ctx *u, lb_redis_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Write the message, empty the config (as config.h promises), return st. */
static lb_redis_status url_err(url_ctx *u, lb_redis_status st, const char *fmt, ...)
{
    if (u->err && u->errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(u->err, u->errlen, fmt, ap);
        va_end(ap);
    }
    lb_redis_config_free(u->cfg);
    return st;
}

static lb_redis_status url_nomem(url_ctx *u)
{
    return url_err(u, LB_REDIS_ERR_NOMEM, "out of memory parsing the Redis URL");
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decode s[0..n) into a new string.  Returns NULL and sets *bad = 1
 * on a malformed escape or a %00 (C strings), *bad = 0 when out of memory. */
static char *pct_decode(const char *s, size_t n, int *bad)
{
    char *d = malloc(n + 1), *o = d;
    *bad = 0;
    if (!d)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            *o++ = s[i];
            continue;
        }
        int a = i + 2 < n ? hexval(s[i + 1]) : -1, b = i + 2 < n ? hexval(s[i + 2]) : -1;
        if (a < 0 || b < 0 || (a == 0 && b == 0)) {
            free(d);
            *bad = 1;
            return NULL;
        }
        *o++ = (char)(a * 16 + b);
        i += 2;
    }
    *o = '\0';
    return d;
}

/* Parse a non-negative decimal integer s[0..n) (no sign, no spaces) <= max. */
static int parse_uint(const char *s, size_t n, long max, long *out)
{
    long v = 0;
    if (n == 0)
        return -1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return -1;
        v = v * 10 + (s[i] - '0');
        if (v > max)
            return -1;
    }
    *out = v;
    return 0;
}

/* Seconds (decimal, may be fractional, > 0) to milliseconds (rounded up, >= 1). */
static int parse_seconds_ms(const char *s, int *ms)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end != '\0' || errno || !(v > 0) || !isfinite(v) || v > 2147483.0)
        return -1;
    double m = ceil(v * 1000.0);
    *ms = m < 1 ? 1 : (int)m;
    return 0;
}

/* Decode s[0..n) into *field; a bad escape is an error with message what. */
static lb_redis_status decode_into(url_ctx *u, char **field, const char *s, size_t n,
                                   const char *what)
{
    int bad;
    char *d = pct_decode(s, n, &bad);
    if (!d)
        return bad ? url_err(u, LB_REDIS_ERR_URL, "%s", what) : url_nomem(u);
    free(*field);
    *field = d;
    return LB_REDIS_OK;
}

/* ------------------------------------------------------------- the parts */

/* The scheme before "://": sets the kind and tls. */
static lb_redis_status url_scheme(url_ctx *u, const char *url, size_t slen)
{
    static const struct {
        const char *name;
        int is_unix, is_sentinel, is_cluster, tls;
    } schemes[] = {
        {"redis", 0, 0, 0, 0},          {"unix", 1, 0, 0, 0},
        {"rediss", 0, 0, 0, 1},         {"redis+sentinel", 0, 1, 0, 0},
        /* rediss+sentinel: TLS to the data nodes; the sentinels are asked over plain TCP */
        {"rediss+sentinel", 0, 1, 0, 1}, {"redis+cluster", 0, 0, 1, 0},
        {"rediss+cluster", 0, 0, 1, 1},
    };
    for (size_t i = 0; i < sizeof schemes / sizeof schemes[0]; i++) {
        if (strlen(schemes[i].name) == slen && strncasecmp(url, schemes[i].name, slen) == 0) {
            u->is_unix = schemes[i].is_unix;
            u->is_sentinel = schemes[i].is_sentinel;
            u->is_cluster = schemes[i].is_cluster;
            u->cfg->tls = schemes[i].tls;
            return LB_REDIS_OK;
        }
    }
    return url_err(u, LB_REDIS_ERR_URL,
                   "unsupported URL scheme '%.*s://' (expected redis://, unix://, rediss://, "
                   "redis+sentinel:// or redis+cluster://)",
                   (int)(slen > 32 ? 32 : slen), url);
}

/* userinfo: up to the last '@' of the netloc; sets u->hostpart. */
static lb_redis_status url_userinfo(url_ctx *u, const char *netloc)
{
    const char *at = NULL;
    for (const char *p = netloc; p < u->netend; p++)
        if (*p == '@')
            at = p;
    u->hostpart = netloc;
    if (!at)
        return LB_REDIS_OK;
    const char *colon = memchr(netloc, ':', (size_t)(at - netloc));
    const char *uend = colon ? colon : at;
    lb_redis_status st = LB_REDIS_OK;
    if (uend > netloc)
        st = decode_into(u, &u->cfg->username, netloc, (size_t)(uend - netloc),
                         "bad percent-escape in the user name of the Redis URL");
    if (st == LB_REDIS_OK && colon && at > colon + 1)
        st = decode_into(u, &u->cfg->password, colon + 1, (size_t)(at - colon - 1),
                         "bad percent-escape in the password of the Redis URL");
    u->hostpart = at + 1;
    return st;
}

/* redis+cluster://host:port[,host:port...][/0] */
static lb_redis_status url_cluster(url_ctx *u)
{
    char why[160];
    lb_redis_config *cfg = u->cfg;
    int pl = lb_redis_parse_host_list(u->hostpart, (size_t)(u->netend - u->hostpart), 6379,
                                      "cluster node", &cfg->cluster_nodes, why, sizeof why);
    if (pl == -2)
        return url_nomem(u);
    if (pl != 0)
        return url_err(u, LB_REDIS_ERR_URL, "invalid redis+cluster:// URL: %s", why);
    size_t seeds = 1;
    for (const char *c = cfg->cluster_nodes; *c; c++)
        seeds += *c == ',';
    if (seeds > LB_REDIS_CLUSTER_MAX_SEEDS)
        return url_err(u, LB_REDIS_ERR_URL,
                       "invalid redis+cluster:// URL: it names %zu nodes, at most %d (a few "
                       "seeds are enough: the others are learned from the slot map)",
                       seeds, LB_REDIS_CLUSTER_MAX_SEEDS);
    /* The first seed is also host:port (for messages before the map is read). */
    const char *p = cfg->cluster_nodes;
    char host[256];
    int port;
    lb_redis_host_list_next(&p, host, sizeof host, &port);
    if (!(cfg->host = dup_bytes(host, strlen(host))))
        return url_nomem(u);
    cfg->port = port;
    const char *path = u->path, *end = u->end;
    if (path && end - path > 1 && !(end - path == 2 && path[1] == '0'))
        return url_err(u, LB_REDIS_ERR_URL,
                       "a Redis Cluster has only database 0: redis+cluster://host:port"
                       "[,host:port...][/0], not '%.*s'",
                       (int)(end - path > 32 ? 32 : end - path), path);
    return LB_REDIS_OK;
}

/* redis+sentinel://host:port[,host:port...]/service_name[/db] */
static lb_redis_status url_sentinel(url_ctx *u)
{
    char why[160];
    lb_redis_config *cfg = u->cfg;
    int pl = lb_redis_parse_host_list(u->hostpart, (size_t)(u->netend - u->hostpart),
                                      LB_SENTINEL_DEFAULT_PORT, "sentinel", &cfg->sentinels, why,
                                      sizeof why);
    if (pl == -2)
        return url_nomem(u);
    if (pl != 0)
        return url_err(u, LB_REDIS_ERR_URL, "invalid redis+sentinel:// URL: %s", why);
    const char *end = u->end;
    const char *svc = u->path ? u->path + 1 : NULL;
    const char *svc_end = svc ? memchr(svc, '/', (size_t)(end - svc)) : NULL;
    if (!svc || (svc_end ? svc_end : end) == svc)
        return url_err(u, LB_REDIS_ERR_URL,
                       "a redis+sentinel:// URL names the service: "
                       "redis+sentinel://host:port[,host:port...]/service_name[/db]");
    lb_redis_status st = decode_into(u, &cfg->sentinel_service, svc,
                                     (size_t)((svc_end ? svc_end : end) - svc),
                                     "bad percent-escape in the service name of the URL");
    if (st != LB_REDIS_OK || !svc_end || end - svc_end <= 1)
        return st;
    long db;
    if (parse_uint(svc_end + 1, (size_t)(end - svc_end - 1), INT_MAX, &db))
        return url_err(u, LB_REDIS_ERR_URL,
                       "invalid database '%.*s' in the URL path (expected /service_name/N)",
                       (int)(end - svc_end - 1 > 32 ? 32 : end - svc_end - 1), svc_end + 1);
    cfg->db = (int)db;
    return LB_REDIS_OK;
}

/* unix:///path/to/socket */
static lb_redis_status url_unix(url_ctx *u)
{
    const char *h = u->hostpart, *path = u->path, *end = u->end;
    if (h != u->netend)
        return url_err(u, LB_REDIS_ERR_URL,
                       "a unix:// URL must not name a host ('%.*s'); write unix:///path/to/socket",
                       (int)(u->netend - h > 64 ? 64 : u->netend - h), h);
    if (!path || end - path <= 1)
        return url_err(u, LB_REDIS_ERR_URL,
                       "a unix:// URL needs a socket path: unix:///path/to/socket[?db=N]");
    return decode_into(u, &u->cfg->unix_path, path, (size_t)(end - path),
                       "bad percent-escape in the socket path of the unix:// URL");
}

/* [v6addr]: sets the host and *portp (NULL: no port given). */
static lb_redis_status url_ipv6(url_ctx *u, const char **portp)
{
    const char *h = u->hostpart, *hend = u->netend;
    const char *rb = memchr(h, ']', (size_t)(hend - h));
    if (!rb)
        return url_err(u, LB_REDIS_ERR_URL,
                       "invalid Redis URL: '[' of an IPv6 address without its ']'");
    if (rb == h + 1)
        return url_err(u, LB_REDIS_ERR_URL, "invalid Redis URL: empty IPv6 address '[]'");
    for (const char *p = h + 1; p < rb; p++)
        if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
              *p == ':' || *p == '.' || *p == '%'))
            return url_err(u, LB_REDIS_ERR_URL, "invalid IPv6 address '%.*s' in Redis URL",
                           (int)(rb - h + 1 > 64 ? 64 : rb - h + 1), h);
    if (rb + 1 < hend) {
        if (rb[1] != ':')
            return url_err(u, LB_REDIS_ERR_URL,
                           "invalid Redis URL: unexpected text after ']' (expected ':port')");
        *portp = rb + 2;
    }
    return decode_into(u, &u->cfg->host, h + 1, (size_t)(rb - h - 1),
                       "bad percent-escape in the IPv6 zone of the Redis URL");
}

/* host[:port]: sets the host and *portp. */
static lb_redis_status url_host(url_ctx *u, const char **portp)
{
    const char *h = u->hostpart, *hend = u->netend;
    const char *colon = memchr(h, ':', (size_t)(hend - h));
    const char *hostend = colon ? colon : hend;
    if (colon && memchr(colon + 1, ':', (size_t)(hend - colon - 1)))
        return url_err(u, LB_REDIS_ERR_URL,
                       "invalid Redis URL: too many ':' in host:port "
                       "(write an IPv6 address in brackets: redis://[::1]:6379)");
    for (const char *p = h; p < hostend; p++)
        if (*p == '[' || *p == ']' || *p == '%' || *p == '\\')
            return url_err(u, LB_REDIS_ERR_URL,
                           "invalid character '%c' in the host of the Redis URL", *p);
    if (hostend > h && !(u->cfg->host = dup_bytes(h, (size_t)(hostend - h))))
        return url_nomem(u);
    if (colon)
        *portp = colon + 1;
    return LB_REDIS_OK;
}

/* redis://host[:port][/db] and rediss:// */
static lb_redis_status url_tcp(url_ctx *u)
{
    const char *portp = NULL, *hend = u->netend, *path = u->path, *end = u->end;
    lb_redis_status st = u->hostpart < hend && *u->hostpart == '[' ? url_ipv6(u, &portp)
                                                                   : url_host(u, &portp);
    if (st != LB_REDIS_OK)
        return st;
    if (portp) {
        long port;
        if (parse_uint(portp, (size_t)(hend - portp), 65535, &port) || port == 0)
            return url_err(u, LB_REDIS_ERR_URL,
                           "invalid port '%.*s' in Redis URL (expected 1..65535)",
                           (int)(hend - portp > 16 ? 16 : hend - portp), portp);
        u->cfg->port = (int)port;
    }
    if (path && end - path > 1) {
        long db;
        if (parse_uint(path + 1, (size_t)(end - path - 1), INT_MAX, &db))
            return url_err(u, LB_REDIS_ERR_URL,
                           "invalid database '%.*s' in the Redis URL path "
                           "(expected /N, a non-negative integer)",
                           (int)(end - path - 1 > 32 ? 32 : end - path - 1), path + 1);
        u->cfg->db = (int)db;
    }
    return LB_REDIS_OK;
}

/* ------------------------------------------------------- query options */

typedef enum {
    OPT_STRING,  /* a string field; "" clears it */
    OPT_UINT,    /* a non-negative integer <= max */
    OPT_SECONDS, /* seconds > 0, stored as milliseconds */
    OPT_BOOL,    /* true/yes/1 -> on, false/no/0 -> off */
    OPT_CERTS    /* required / optional / none */
} opt_kind;

typedef struct {
    const char *name;
    opt_kind kind;
    size_t off;          /* the field of lb_redis_config */
    long max;            /* OPT_UINT */
    int on, off_value;   /* OPT_BOOL */
    const char *expect;  /* what the message says a value must be */
} url_option;

#define F(field) offsetof(lb_redis_config, field)
/* In the order the message of an unknown option lists them. */
static const url_option options[] = {
    {"db", OPT_UINT, F(db), INT_MAX, 0, 0, "a non-negative integer"},
    {"username", OPT_STRING, F(username), 0, 0, 0, NULL},
    {"password", OPT_STRING, F(password), 0, 0, 0, NULL},
    {"socket_timeout", OPT_SECONDS, F(timeout_ms), 0, 0, 0, "seconds > 0"},
    {"socket_connect_timeout", OPT_SECONDS, F(connect_timeout_ms), 0, 0, 0, "seconds > 0"},
    {"ssl_cert_reqs", OPT_CERTS, F(tls_cert_reqs), 0, 0, 0, "required, optional or none"},
    {"ssl_check_hostname", OPT_BOOL, F(tls_check_hostname), 0, 1, 2, "true or false"},
    {"ssl_ca_certs", OPT_STRING, F(tls_ca_certs), 0, 0, 0, NULL},
    {"ssl_ca_path", OPT_STRING, F(tls_ca_path), 0, 0, 0, NULL},
    {"ssl_certfile", OPT_STRING, F(tls_certfile), 0, 0, 0, NULL},
    {"ssl_keyfile", OPT_STRING, F(tls_keyfile), 0, 0, 0, NULL},
    {"sentinel_username", OPT_STRING, F(sentinel_username), 0, 0, 0, NULL},
    {"sentinel_password", OPT_STRING, F(sentinel_password), 0, 0, 0, NULL},
    {"read_from_replicas", OPT_BOOL, F(cluster_replica_reads), 0, 1, 0, "true or false"},
    {"cluster_retry_timeout", OPT_SECONDS, F(cluster_retry_ms), 0, 0, 0, "seconds > 0"},
    {"wait_replicas", OPT_UINT, F(wait_replicas), 1000, 0, 0, "0..1000"},
    {"wait_timeout", OPT_SECONDS, F(wait_timeout_ms), 0, 0, 0, "seconds > 0"},
};
#undef F
#define N_OPTIONS (sizeof options / sizeof options[0])

static int parse_bool(const char *v, int *out)
{
    if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") || !strcmp(v, "1"))
        *out = 1;
    else if (!strcasecmp(v, "false") || !strcasecmp(v, "no") || !strcmp(v, "0"))
        *out = 0;
    else
        return -1;
    return 0;
}

static int parse_cert_reqs(const char *v, int *out)
{
    static const char *const names[] = {"required", "optional", "none"};
    static const int values[] = {LB_REDIS_CERT_REQUIRED, LB_REDIS_CERT_OPTIONAL, LB_REDIS_CERT_NONE};
    for (int i = 0; i < 3; i++)
        if (strcasecmp(v, names[i]) == 0) {
            *out = values[i];
            return 0;
        }
    return -1;
}

static lb_redis_status unknown_option(url_ctx *u, const char *name)
{
    char known[400];
    size_t o = 0;
    for (size_t i = 0; i < N_OPTIONS && o < sizeof known; i++)
        o += (size_t)snprintf(known + o, sizeof known - o, "%s%s", i ? ", " : "", options[i].name);
    return url_err(u, LB_REDIS_ERR_URL, "unknown URL option '%.32s' (known: %s)", name, known);
}

/* Apply name=val (both decoded; *val is taken when a string field keeps it). */
static lb_redis_status url_option_set(url_ctx *u, const char *name, char **val)
{
    const url_option *o = NULL;
    for (size_t i = 0; i < N_OPTIONS && !o; i++)
        if (strcmp(name, options[i].name) == 0)
            o = &options[i];
    if (!o)
        return unknown_option(u, name);
    void *field = (char *)u->cfg + o->off;
    const char *v = *val;
    long n;
    int i;
    switch (o->kind) {
    case OPT_STRING:
        free(*(char **)field);
        *(char **)field = v[0] ? *val : NULL;
        if (v[0])
            *val = NULL;
        return LB_REDIS_OK;
    case OPT_UINT:
        if (parse_uint(v, strlen(v), o->max, &n) == 0) {
            *(int *)field = (int)n;
            return LB_REDIS_OK;
        }
        break;
    case OPT_SECONDS:
        if (parse_seconds_ms(v, (int *)field) == 0)
            return LB_REDIS_OK;
        break;
    case OPT_BOOL:
        if (parse_bool(v, &i) == 0) {
            *(int *)field = i ? o->on : o->off_value;
            return LB_REDIS_OK;
        }
        break;
    case OPT_CERTS:
        if (parse_cert_reqs(v, (int *)field) == 0)
            return LB_REDIS_OK;
        break;
    }
    return url_err(u, LB_REDIS_ERR_URL, "invalid URL option %s='%.32s' (expected %s)", o->name,
                   v, o->expect);
}

/* One "name=value" segment s[0..n) of the query. */
static lb_redis_status url_segment(url_ctx *u, const char *p, const char *segend)
{
    int bad;
    const char *eq = memchr(p, '=', (size_t)(segend - p));
    if (!eq)
        return url_err(u, LB_REDIS_ERR_URL, "URL option '%.*s' has no value (expected name=value)",
                       (int)(segend - p > 32 ? 32 : segend - p), p);
    char *name = NULL, *val = NULL;
    lb_redis_status st = decode_into(u, &name, p, (size_t)(eq - p),
                                     "bad percent-escape in a URL option name");
    if (st != LB_REDIS_OK)
        return st;
    if (!(val = pct_decode(eq + 1, (size_t)(segend - eq - 1), &bad))) {
        st = url_err(u, bad ? LB_REDIS_ERR_URL : LB_REDIS_ERR_NOMEM,
                     bad ? "bad percent-escape in the value of URL option '%.32s'"
                         : "out of memory parsing option '%.32s'",
                     name);
        free(name);
        return st;
    }
    st = url_option_set(u, name, &val);
    free(name);
    free(val);
    return st;
}

static lb_redis_status url_query(url_ctx *u, const char *q)
{
    const char *p = q + 1;
    while (*p) {
        const char *amp = strchr(p, '&');
        const char *segend = amp ? amp : p + strlen(p);
        if (segend > p) {
            lb_redis_status st = url_segment(u, p, segend);
            if (st != LB_REDIS_OK)
                return st;
        }
        if (!amp)
            break;
        p = amp + 1;
    }
    return LB_REDIS_OK;
}

/* ------------------------------------------------------------------ URL */

lb_redis_status lb_redis_config_from_url(lb_redis_config *cfg, const char *url, char *err,
                                         size_t errlen)
{
    url_ctx u = {cfg, err, errlen, 0, 0, 0, NULL, NULL, NULL, NULL};
    lb_redis_config_init(cfg);
    if (err && errlen)
        err[0] = '\0';
    if (!url)
        return url_err(&u, LB_REDIS_ERR_URL, "the Redis URL is missing");
    const char *sep = strstr(url, "://");
    if (!sep)
        return url_err(&u, LB_REDIS_ERR_URL,
                       "invalid Redis URL: expected redis://host[:port][/db], "
                       "unix:///path/to/socket or rediss://");
    lb_redis_status st = url_scheme(&u, url, (size_t)(sep - url));
    if (st != LB_REDIS_OK)
        return st;
    const char *rest = sep + 3;
    for (const char *p = rest; *p; p++)
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return url_err(&u, LB_REDIS_ERR_URL,
                           "invalid Redis URL: it contains a space or control character "
                           "(percent-encode it)");
    if (strchr(rest, '#'))
        return url_err(&u, LB_REDIS_ERR_URL,
                       "invalid Redis URL: '#' is not allowed (percent-encode it as %%23)");
    const char *q = strchr(rest, '?');
    u.end = q ? q : rest + strlen(rest);
    u.path = memchr(rest, '/', (size_t)(u.end - rest));
    u.netend = u.path ? u.path : u.end;
    st = url_userinfo(&u, rest);
    if (st == LB_REDIS_OK)
        st = u.is_cluster ? url_cluster(&u)
             : u.is_sentinel ? url_sentinel(&u)
             : u.is_unix ? url_unix(&u)
                         : url_tcp(&u);
    if (st == LB_REDIS_OK && q)
        st = url_query(&u, q);
    if (st != LB_REDIS_OK)
        return st;
    if (u.is_cluster && cfg->db != 0)
        return url_err(&u, LB_REDIS_ERR_URL,
                       "a Redis Cluster has only database 0 (db=%d in the URL)", cfg->db);
    if (!u.is_cluster && (cfg->cluster_replica_reads || cfg->cluster_retry_ms))
        return url_err(&u, LB_REDIS_ERR_URL,
                       "read_from_replicas and cluster_retry_timeout are options of "
                       "redis+cluster:// URLs");
    return LB_REDIS_OK;
}

/* ----------------------------------------------------------- host lists */

int lb_redis_parse_host_list(const char *s, size_t n, int default_port, const char *what,
                             char **out, char *why, size_t whylen)
{
    /* Each entry grows by at most ":65535". */
    size_t entries = 1;
    for (size_t i = 0; i < n; i++)
        entries += s[i] == ',';
    char *buf = malloc(n + entries * 7 + 1);
    if (!buf)
        return -2;
    size_t len = 0;
    const char *p = s, *end = s + n;
    while (p <= end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        const char *colon = memchr(p, ':', (size_t)(e - p));
        const char *hend = colon ? colon : e;
        if (hend == p) {
            snprintf(why, whylen, "an empty %s address (expected host:port,host:port)", what);
            goto bad;
        }
        if (hend - p > 253) { /* the longest DNS name */
            snprintf(why, whylen, "a %s host name longer than 253 bytes", what);
            goto bad;
        }
        for (const char *c = p; c < hend; c++)
            if (*c == '[' || *c == ']' || *c == '%' || *c == '\\' || *c == '/' || *c == '@') {
                snprintf(why, whylen, "invalid character '%c' in %s host '%.*s'", *c, what,
                         (int)(hend - p > 64 ? 64 : hend - p), p);
                goto bad;
            }
        long port = default_port;
        if (colon) {
            port = 0;
            if (colon + 1 == e || e - colon > 6)
                port = -1;
            for (const char *c = colon + 1; c < e && port >= 0; c++)
                port = (*c >= '0' && *c <= '9') ? port * 10 + (*c - '0') : -1;
            if (port < 1 || port > 65535) {
                snprintf(why, whylen, "invalid %s port '%.*s' (expected 1..65535)", what,
                         (int)(e - colon - 1 > 16 ? 16 : e - colon - 1), colon + 1);
                goto bad;
            }
        }
        len += (size_t)snprintf(buf + len, (size_t)(hend - p) + 16, "%s%.*s:%ld",
                                len ? "," : "", (int)(hend - p), p, port);
        if (!comma)
            break;
        p = comma + 1;
    }
    free(*out);
    *out = buf;
    return 0;
bad:
    free(buf);
    return -1;
}

int lb_redis_host_list_next(const char **pp, char *host, size_t hostlen, int *port)
{
    const char *p = *pp;
    if (!p || !*p)
        return 0;
    const char *comma = strchr(p, ',');
    const char *e = comma ? comma : p + strlen(p);
    const char *colon = NULL;
    for (const char *c = p; c < e; c++)
        if (*c == ':')
            colon = c;
    *port = 0;
    host[0] = '\0';
    if (colon && (size_t)(colon - p) < hostlen) {
        memcpy(host, p, (size_t)(colon - p));
        host[colon - p] = '\0';
        *port = atoi(colon + 1);
    }
    *pp = comma ? comma + 1 : e;
    return 1;
}
