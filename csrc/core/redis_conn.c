/* redis_conn.c: see redis_conn.h. */
#define _POSIX_C_SOURCE 200809L
#include "redis_conn.h"
#include "redis_cluster.h"
#include "redis_sentinel.h"
#include "redis_reply.h"
#include "redis_tls.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

/* <hiredis/hiredis.h> needs no -I flag on Debian (pkg-config gives -I.../hiredis too) */
#include <hiredis/hiredis.h>

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

#if defined(HIREDIS_MAJOR) && HIREDIS_MAJOR >= 1
typedef size_t lb_array_len_t;
#else
typedef int lb_array_len_t;
#endif

#define LB_ERRSTR_SIZE 512
#define LB_RBUF_SIZE (64 * 1024)
#define LB_ARENA_BLOCK (64 * 1024)

/* ----------------------------------------------------------------- names */

const char *lb_redis_status_name(lb_redis_status st)
{
    switch (st) {
    case LB_REDIS_OK: return "ok";
    case LB_REDIS_ERR_CONNECT: return "connect";
    case LB_REDIS_ERR_IO: return "io";
    case LB_REDIS_ERR_TIMEOUT: return "timeout";
    case LB_REDIS_ERR_PROTOCOL: return "protocol";
    case LB_REDIS_ERR_REPLY: return "reply";
    case LB_REDIS_ERR_WRONGTYPE: return "wrongtype";
    case LB_REDIS_ERR_AUTH: return "auth";
    case LB_REDIS_ERR_URL: return "url";
    case LB_REDIS_ERR_TLS: return "tls";
    case LB_REDIS_ERR_MISMATCH: return "mismatch";
    case LB_REDIS_ERR_NOTFOUND: return "notfound";
    case LB_REDIS_ERR_ARG: return "arg";
    case LB_REDIS_ERR_NOMEM: return "nomem";
    case LB_REDIS_ERR_FULL: return "full";
    case LB_REDIS_ERR_NOMODULE: return "nomodule";
    case LB_REDIS_ERR_TOOLARGE: return "toolarge";
    case LB_REDIS_ERR_NOTOWNED: return "notowned";
    }
    return "unknown";
}

/* ---------------------------------------------------------------- config */

void lb_redis_config_init(lb_redis_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
}

void lb_redis_config_free(lb_redis_config *cfg)
{
    free(cfg->host);
    free(cfg->unix_path);
    free(cfg->username);
    free(cfg->password);
    free(cfg->tls_ca_certs);
    free(cfg->tls_ca_path);
    free(cfg->tls_certfile);
    free(cfg->tls_keyfile);
    free(cfg->sentinels);
    free(cfg->sentinel_service);
    free(cfg->sentinel_username);
    free(cfg->sentinel_password);
    free(cfg->cluster_nodes);
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

/* ------------------------------------------------------------------- URL */

static lb_redis_status url_err(lb_redis_config *cfg, lb_redis_status st, char *err,
                               size_t errlen, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 5, 6)))
#endif
    ;

static lb_redis_status url_err(lb_redis_config *cfg, lb_redis_status st, char *err,
                               size_t errlen, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    lb_redis_config_free(cfg);
    return st;
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
        if (s[i] == '%') {
            if (i + 2 >= n) {
                free(d);
                *bad = 1;
                return NULL;
            }
            int a = hexval(s[i + 1]), b = hexval(s[i + 2]);
            if (a < 0 || b < 0 || (a == 0 && b == 0)) {
                free(d);
                *bad = 1;
                return NULL;
            }
            *o++ = (char)(a * 16 + b);
            i += 2;
        } else {
            *o++ = s[i];
        }
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

static int take_decoded(char **field, const char *s, size_t n, int *bad)
{
    char *d = pct_decode(s, n, bad);
    if (!d)
        return -1;
    free(*field);
    *field = d;
    return 0;
}

lb_redis_status lb_redis_config_from_url(lb_redis_config *cfg, const char *url, char *err,
                                         size_t errlen)
{
    int bad;
    lb_redis_config_init(cfg);
    if (err && errlen)
        err[0] = '\0';
    if (!url)
        return url_err(cfg, LB_REDIS_ERR_URL, err, errlen, "the Redis URL is missing");

    const char *sep = strstr(url, "://");
    if (!sep)
        return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                       "invalid Redis URL: expected redis://host[:port][/db], "
                       "unix:///path/to/socket or rediss://");
    size_t slen = (size_t)(sep - url);
    int is_unix = 0, is_sentinel = 0, is_cluster = 0;
    if (slen == 5 && strncasecmp(url, "redis", 5) == 0) {
        is_unix = 0;
    } else if (slen == 4 && strncasecmp(url, "unix", 4) == 0) {
        is_unix = 1;
    } else if (slen == 6 && strncasecmp(url, "rediss", 6) == 0) {
        cfg->tls = 1;
    } else if (slen == 14 && strncasecmp(url, "redis+sentinel", 14) == 0) {
        is_sentinel = 1;
    } else if (slen == 15 && strncasecmp(url, "rediss+sentinel", 15) == 0) {
        is_sentinel = 1;
        cfg->tls = 1; /* to the data nodes; the sentinels are asked over plain TCP */
    } else if (slen == 13 && strncasecmp(url, "redis+cluster", 13) == 0) {
        is_cluster = 1;
    } else if (slen == 14 && strncasecmp(url, "rediss+cluster", 14) == 0) {
        is_cluster = 1;
        cfg->tls = 1;
    } else {
        return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                       "unsupported URL scheme '%.*s://' (expected redis://, unix://, rediss://, "
                       "redis+sentinel:// or redis+cluster://)",
                       (int)(slen > 32 ? 32 : slen), url);
    }

    const char *rest = sep + 3;
    for (const char *p = rest; *p; p++) {
        if ((unsigned char)*p <= 0x20 || *p == 0x7f)
            return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                           "invalid Redis URL: it contains a space or control character "
                           "(percent-encode it)");
    }
    if (strchr(rest, '#'))
        return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                       "invalid Redis URL: '#' is not allowed (percent-encode it as %%23)");

    const char *q = strchr(rest, '?');
    const char *end = q ? q : rest + strlen(rest);
    const char *slash = memchr(rest, '/', (size_t)(end - rest));
    const char *netloc = rest;
    const char *netend = slash ? slash : end;
    const char *path = slash; /* NULL when absent */

    /* userinfo: up to the last '@' of the netloc. */
    const char *at = NULL;
    for (const char *p = netloc; p < netend; p++)
        if (*p == '@')
            at = p;
    const char *hostpart = netloc;
    if (at) {
        const char *colon = memchr(netloc, ':', (size_t)(at - netloc));
        const char *uend = colon ? colon : at;
        if (uend > netloc && take_decoded(&cfg->username, netloc, (size_t)(uend - netloc), &bad))
            goto decode_fail_user;
        if (colon && at > colon + 1 &&
            take_decoded(&cfg->password, colon + 1, (size_t)(at - colon - 1), &bad))
            goto decode_fail_pass;
        hostpart = at + 1;
    }

    if (is_cluster) {
        char why[160];
        int pl = lb_redis_parse_host_list(hostpart, (size_t)(netend - hostpart), 6379,
                                          "cluster node", &cfg->cluster_nodes, why, sizeof why);
        if (pl == -2)
            goto nomem;
        if (pl != 0)
            return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                           "invalid redis+cluster:// URL: %s", why);
        /* The first seed is also host:port (for messages before the map is read). */
        const char *first = cfg->cluster_nodes;
        const char *comma = strchr(first, ',');
        size_t flen = comma ? (size_t)(comma - first) : strlen(first);
        const char *colon = NULL;
        for (const char *c = first; c < first + flen; c++)
            if (*c == ':')
                colon = c;
        if (!(cfg->host = dup_bytes(first, (size_t)(colon - first))))
            goto nomem;
        cfg->port = atoi(colon + 1);
        if (path && end - path > 1 && !(end - path == 2 && path[1] == '0'))
            return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                           "a Redis Cluster has only database 0: redis+cluster://host:port"
                           "[,host:port...][/0], not '%.*s'",
                           (int)(end - path > 32 ? 32 : end - path), path);
    } else if (is_sentinel) {
        char why[160];
        int pl = lb_sentinel_parse_list(hostpart, (size_t)(netend - hostpart), &cfg->sentinels,
                                        why, sizeof why);
        if (pl == -2)
            goto nomem;
        if (pl != 0)
            return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                           "invalid redis+sentinel:// URL: %s", why);
        /* The path: /service_name[/db]. */
        const char *svc = path ? path + 1 : NULL;
        const char *svc_end = svc ? memchr(svc, '/', (size_t)(end - svc)) : NULL;
        if (!svc || (svc_end ? svc_end : end) == svc)
            return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                           "a redis+sentinel:// URL names the service: "
                           "redis+sentinel://host:port[,host:port...]/service_name[/db]");
        if (take_decoded(&cfg->sentinel_service, svc, (size_t)((svc_end ? svc_end : end) - svc),
                         &bad)) {
            if (!bad)
                goto nomem;
            return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                           "bad percent-escape in the service name of the URL");
        }
        if (svc_end && end - svc_end > 1) {
            long db;
            if (parse_uint(svc_end + 1, (size_t)(end - svc_end - 1), INT_MAX, &db))
                return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                               "invalid database '%.*s' in the URL path (expected "
                               "/service_name/N)",
                               (int)(end - svc_end - 1 > 32 ? 32 : end - svc_end - 1),
                               svc_end + 1);
            cfg->db = (int)db;
        }
    } else if (is_unix) {
        if (hostpart != netend)
            return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                           "a unix:// URL must not name a host ('%.*s'); write unix:///path/to/socket",
                           (int)(netend - hostpart > 64 ? 64 : netend - hostpart), hostpart);
        if (!path || end - path <= 1)
            return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                           "a unix:// URL needs a socket path: unix:///path/to/socket[?db=N]");
        if (take_decoded(&cfg->unix_path, path, (size_t)(end - path), &bad)) {
            if (!bad)
                goto nomem;
            return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                           "bad percent-escape in the socket path of the unix:// URL");
        }
    } else {
        const char *h = hostpart, *hend = netend, *portp = NULL;
        if (h < hend && *h == '[') {
            const char *rb = memchr(h, ']', (size_t)(hend - h));
            if (!rb)
                return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                               "invalid Redis URL: '[' of an IPv6 address without its ']'");
            if (rb == h + 1)
                return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                               "invalid Redis URL: empty IPv6 address '[]'");
            for (const char *p = h + 1; p < rb; p++)
                if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') ||
                      (*p >= 'A' && *p <= 'Z') || *p == ':' || *p == '.' || *p == '%'))
                    return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                   "invalid IPv6 address '%.*s' in Redis URL",
                                   (int)(rb - h + 1 > 64 ? 64 : rb - h + 1), h);
            if (rb + 1 < hend) {
                if (rb[1] != ':')
                    return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                   "invalid Redis URL: unexpected text after ']' (expected ':port')");
                portp = rb + 2;
            }
            if (take_decoded(&cfg->host, h + 1, (size_t)(rb - h - 1), &bad)) {
                if (!bad)
                    goto nomem;
                return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                               "bad percent-escape in the IPv6 zone of the Redis URL");
            }
        } else {
            const char *colon = memchr(h, ':', (size_t)(hend - h));
            const char *hostend = colon ? colon : hend;
            if (colon && memchr(colon + 1, ':', (size_t)(hend - colon - 1)))
                return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                               "invalid Redis URL: too many ':' in host:port "
                               "(write an IPv6 address in brackets: redis://[::1]:6379)");
            for (const char *p = h; p < hostend; p++)
                if (*p == '[' || *p == ']' || *p == '%' || *p == '\\')
                    return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                   "invalid character '%c' in the host of the Redis URL", *p);
            if (hostend > h && !(cfg->host = dup_bytes(h, (size_t)(hostend - h))))
                goto nomem;
            if (colon)
                portp = colon + 1;
        }
        if (portp) {
            long port;
            if (parse_uint(portp, (size_t)(hend - portp), 65535, &port) || port == 0)
                return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                               "invalid port '%.*s' in Redis URL (expected 1..65535)",
                               (int)(hend - portp > 16 ? 16 : hend - portp), portp);
            cfg->port = (int)port;
        }
        if (path && end - path > 1) {
            long db;
            if (parse_uint(path + 1, (size_t)(end - path - 1), INT_MAX, &db))
                return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                               "invalid database '%.*s' in the Redis URL path "
                               "(expected /N, a non-negative integer)",
                               (int)(end - path - 1 > 32 ? 32 : end - path - 1), path + 1);
            cfg->db = (int)db;
        }
    }

    /* Query options. */
    if (q) {
        const char *p = q + 1;
        while (*p) {
            const char *amp = strchr(p, '&');
            const char *segend = amp ? amp : p + strlen(p);
            if (segend > p) {
                const char *eq = memchr(p, '=', (size_t)(segend - p));
                if (!eq)
                    return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                   "URL option '%.*s' has no value (expected name=value)",
                                   (int)(segend - p > 32 ? 32 : segend - p), p);
                char *name = NULL, *val = NULL;
                if (take_decoded(&name, p, (size_t)(eq - p), &bad)) {
                    if (!bad)
                        goto nomem;
                    return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                   "bad percent-escape in a URL option name");
                }
                if (take_decoded(&val, eq + 1, (size_t)(segend - eq - 1), &bad)) {
                    lb_redis_status st = url_err(
                        cfg, bad ? LB_REDIS_ERR_URL : LB_REDIS_ERR_NOMEM, err, errlen,
                        bad ? "bad percent-escape in the value of URL option '%.32s'"
                            : "out of memory parsing option '%.32s'",
                        name);
                    free(name);
                    return st;
                }
                lb_redis_status st = LB_REDIS_OK;
                if (strcmp(name, "db") == 0) {
                    long db;
                    if (parse_uint(val, strlen(val), INT_MAX, &db))
                        st = url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                     "invalid URL option db='%.32s' (expected a non-negative integer)",
                                     val);
                    else
                        cfg->db = (int)db;
                } else if (strcmp(name, "password") == 0) {
                    free(cfg->password);
                    cfg->password = val[0] ? val : NULL;
                    if (val[0])
                        val = NULL;
                } else if (strcmp(name, "sentinel_password") == 0 ||
                           strcmp(name, "sentinel_username") == 0) {
                    char **f = name[9] == 'p' ? &cfg->sentinel_password : &cfg->sentinel_username;
                    free(*f);
                    *f = val[0] ? val : NULL;
                    if (val[0])
                        val = NULL;
                } else if (strcmp(name, "wait_replicas") == 0) {
                    long n;
                    if (parse_uint(val, strlen(val), 1000, &n))
                        st = url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                     "invalid URL option wait_replicas='%.32s' (expected 0..1000)",
                                     val);
                    else
                        cfg->wait_replicas = (int)n;
                } else if (strcmp(name, "wait_timeout") == 0) {
                    int ms;
                    if (parse_seconds_ms(val, &ms))
                        st = url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                     "invalid URL option wait_timeout='%.32s' (expected seconds > 0)",
                                     val);
                    else
                        cfg->wait_timeout_ms = ms;
                } else if (strcmp(name, "cluster_retry_timeout") == 0) {
                    int ms;
                    if (parse_seconds_ms(val, &ms))
                        st = url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                     "invalid URL option cluster_retry_timeout='%.32s' "
                                     "(expected seconds > 0)",
                                     val);
                    else
                        cfg->cluster_retry_ms = ms;
                } else if (strcmp(name, "read_from_replicas") == 0) {
                    if (!strcasecmp(val, "true") || !strcasecmp(val, "yes") || !strcmp(val, "1"))
                        cfg->cluster_replica_reads = 1;
                    else if (!strcasecmp(val, "false") || !strcasecmp(val, "no") ||
                             !strcmp(val, "0"))
                        cfg->cluster_replica_reads = 0;
                    else
                        st = url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                     "invalid URL option read_from_replicas='%.32s' (expected "
                                     "true or false)",
                                     val);
                } else if (strcmp(name, "username") == 0) {
                    free(cfg->username);
                    cfg->username = val[0] ? val : NULL;
                    if (val[0])
                        val = NULL;
                } else if (strcmp(name, "socket_timeout") == 0 ||
                           strcmp(name, "socket_connect_timeout") == 0) {
                    int ms;
                    if (parse_seconds_ms(val, &ms))
                        st = url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                     "invalid URL option %s='%.32s' (expected seconds > 0)", name,
                                     val);
                    else if (name[7] == 't')
                        cfg->timeout_ms = ms;
                    else
                        cfg->connect_timeout_ms = ms;
                } else if (strcmp(name, "ssl_cert_reqs") == 0) {
                    if (strcasecmp(val, "required") == 0)
                        cfg->tls_cert_reqs = LB_REDIS_CERT_REQUIRED;
                    else if (strcasecmp(val, "optional") == 0)
                        cfg->tls_cert_reqs = LB_REDIS_CERT_OPTIONAL;
                    else if (strcasecmp(val, "none") == 0)
                        cfg->tls_cert_reqs = LB_REDIS_CERT_NONE;
                    else
                        st = url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                     "invalid URL option ssl_cert_reqs='%.32s' (expected "
                                     "required, optional or none)",
                                     val);
                } else if (strcmp(name, "ssl_check_hostname") == 0) {
                    if (!strcasecmp(val, "true") || !strcasecmp(val, "yes") || !strcmp(val, "1"))
                        cfg->tls_check_hostname = 1;
                    else if (!strcasecmp(val, "false") || !strcasecmp(val, "no") ||
                             !strcmp(val, "0"))
                        cfg->tls_check_hostname = 2;
                    else
                        st = url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                     "invalid URL option ssl_check_hostname='%.32s' (expected "
                                     "true or false)",
                                     val);
                } else if (strcmp(name, "ssl_ca_certs") == 0 || strcmp(name, "ssl_ca_path") == 0 ||
                           strcmp(name, "ssl_certfile") == 0 || strcmp(name, "ssl_keyfile") == 0) {
                    char **f = name[4] == 'k'   ? &cfg->tls_keyfile
                               : name[5] == 'e' ? &cfg->tls_certfile
                               : name[7] == 'c' ? &cfg->tls_ca_certs
                                                : &cfg->tls_ca_path;
                    free(*f);
                    *f = val[0] ? val : NULL;
                    if (val[0])
                        val = NULL;
                } else {
                    st = url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                                 "unknown URL option '%.32s' (known: db, username, password, "
                                 "socket_timeout, socket_connect_timeout, ssl_cert_reqs, "
                                 "ssl_check_hostname, ssl_ca_certs, ssl_ca_path, ssl_certfile, "
                                 "ssl_keyfile, sentinel_username, sentinel_password, "
                                 "read_from_replicas, cluster_retry_timeout, wait_replicas, "
                                 "wait_timeout)",
                                 name);
                }
                free(name);
                free(val);
                if (st != LB_REDIS_OK)
                    return st;
            }
            if (!amp)
                break;
            p = amp + 1;
        }
    }
    if (is_cluster && cfg->db != 0)
        return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                       "a Redis Cluster has only database 0 (db=%d in the URL)", cfg->db);
    if (!is_cluster && (cfg->cluster_replica_reads || cfg->cluster_retry_ms))
        return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                       "read_from_replicas and cluster_retry_timeout are options of "
                       "redis+cluster:// URLs");
    return LB_REDIS_OK;

decode_fail_user:
    if (!bad)
        goto nomem;
    return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                   "bad percent-escape in the user name of the Redis URL");
decode_fail_pass:
    if (!bad)
        goto nomem;
    return url_err(cfg, LB_REDIS_ERR_URL, err, errlen,
                   "bad percent-escape in the password of the Redis URL");
nomem:
    return url_err(cfg, LB_REDIS_ERR_NOMEM, err, errlen, "out of memory parsing the Redis URL");
}

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

/* ----------------------------------------------------------------- arena */

typedef struct arena_block {
    struct arena_block *next;
    size_t used, cap;
    /* data follows, 16-aligned */
} arena_block;

#define ARENA_HDR ((sizeof(arena_block) + 15) & ~(size_t)15)

typedef struct {
    arena_block *head;   /* the block being filled */
    arena_block *big;    /* dedicated blocks of large objects */
} arena;

static void *arena_alloc(arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n > LB_ARENA_BLOCK / 4) {
        arena_block *b = malloc(ARENA_HDR + n);
        if (!b)
            return NULL;
        b->cap = b->used = n;
        b->next = a->big;
        a->big = b;
        return (char *)b + ARENA_HDR;
    }
    if (!a->head || a->head->cap - a->head->used < n) {
        arena_block *b = malloc(ARENA_HDR + LB_ARENA_BLOCK);
        if (!b)
            return NULL;
        b->cap = LB_ARENA_BLOCK;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = (char *)a->head + ARENA_HDR + a->head->used;
    a->head->used += n;
    return p;
}

/* Free everything but one block, so memory stays flat between calls. */
static void arena_reset(arena *a)
{
    while (a->big) {
        arena_block *n = a->big->next;
        free(a->big);
        a->big = n;
    }
    if (a->head) {
        arena_block *keep = a->head, *b = keep->next;
        while (b) {
            arena_block *n = b->next;
            free(b);
            b = n;
        }
        keep->next = NULL;
        keep->used = 0;
    }
}

static void arena_free(arena *a)
{
    arena_reset(a);
    free(a->head);
    a->head = NULL;
}

/* ---------------------------------------------------------- connection */

struct lb_redis {
    lb_redis_config cfg;
    redisContext *ctx;    /* NULL when not connected */
    redisReader *reader;  /* our reader with arena-backed replies */
    lb_tls *tls;          /* the TLS session over ctx's socket, or NULL (plain TCP, unix) */
    int tls_unanswered;   /* TLS: nothing received since the handshake (for error hints) */
    pid_t pid;            /* the process that opened ctx */
    int fd;               /* ctx's socket while ctx is open, else -1 (lb_redis_abandon) */
    arena arena;
    lb_reply **replies;   /* top-level replies of the last round trip */
    size_t replies_cap;
    char *rbuf;           /* recv buffer, LB_RBUF_SIZE */
    unsigned long connects;
    unsigned long roundtrips;
    lb_redis_status status;
    long err_index;
    int stale;            /* last exec: IO on an old connection, nothing answered */
    size_t max_elements;  /* bound of the round trip's replies (array elements, nested) */
    size_t max_bytes;     /* bound of the round trip's reply bytes, 0 = none */
    size_t reply_elements;/* elements announced so far in the reply being parsed */
    lb_redis_status parse_status; /* why a reader callback refused (0: it did not) */
    char parse_err[200];
    /* sans-IO (lb_redis_wire_*): a transport outside this file carries the bytes */
    int ext;              /* 1 once the wire API is used: lb_redis_exec refuses */
    int ext_open;         /* the outside transport has a connection open */
    size_t ext_n;         /* replies the request being answered expects */
    size_t ext_got;       /* ... parsed so far */
    size_t ext_received;  /* reply bytes fed so far */
    int ext_failed;       /* the request's reply stream broke: the connection must go */
    int ext_hs_done;      /* the handshake of the open connection was answered */
    int ext_auth, ext_sel;/* its commands' indexes (-1: not sent) */
    lb_cluster *cluster;  /* a cluster connection (redis_cluster.c), else NULL */
    lb_redis_batch waitb; /* a write batch followed by WAIT (cfg.wait_replicas) */
    char errstr[LB_ERRSTR_SIZE];
};

lb_redis_status lb_redis_set_error(lb_redis *r, lb_redis_status st, const char *fmt, ...)
{
    r->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->errstr, sizeof r->errstr, fmt, ap);
    va_end(ap);
    return st;
}

static void clear_error(lb_redis *r)
{
    r->status = LB_REDIS_OK;
    r->err_index = -1;
    r->stale = 0;
    r->errstr[0] = '\0';
}

const char *lb_redis_errstr(const lb_redis *r) { return r->errstr; }
lb_redis_status lb_redis_last_status(const lb_redis *r) { return r->status; }
long lb_redis_err_index(const lb_redis *r) { return r->err_index; }
int lb_redis_last_stale(const lb_redis *r) { return r->stale; }
unsigned long lb_redis_connect_count(const lb_redis *r)
{
    return r->cluster ? lb_cluster_connect_count(r->cluster) : r->connects;
}
unsigned long lb_redis_roundtrip_count(const lb_redis *r)
{
    return r->cluster ? lb_cluster_roundtrip_count(r->cluster) : r->roundtrips;
}
void lb_redis_set_timeout(lb_redis *r, int timeout_ms)
{
    r->cfg.timeout_ms = timeout_ms < 0 ? 0 : timeout_ms;
    if (r->cluster)
        lb_cluster_set_timeout(r->cluster, r->cfg.timeout_ms);
}

lb_redis_status lb_redis_take_error(lb_redis *r, const lb_redis *from)
{
    r->status = from->status;
    r->err_index = from->err_index;
    r->stale = from->stale;
    memcpy(r->errstr, from->errstr, sizeof r->errstr);
    return r->status;
}

int lb_redis_is_connected(const lb_redis *r)
{
    if (r->cluster)
        return lb_cluster_is_connected(r->cluster);
    if (r->ext)
        return r->ext_open && r->pid == getpid();
    return r->ctx != NULL && r->pid == getpid();
}

/* --- reader callbacks: replies are built in the arena, no malloc per reply.
 *
 * An array is not allocated at the length its header announces: its element
 * vector starts small and doubles as elements arrive (the outgrown vectors
 * stay in the arena until the round trip ends: at most as much again), so a
 * header "*2147483647" costs nothing until elements come.  The announced
 * lengths of one reply (nested arrays included) may not exceed the bound the
 * batch gave (lb_redis_batch_expect_elements): over it, the callback refuses
 * and the reader stops with a protocol error. */

typedef struct {
    lb_reply pub;
    size_t cap; /* slots allocated in pub.element (pub.len: announced) */
} lb_array_obj;

#define LB_ARRAY_FIRST 8

static void *refuse(lb_redis *r, lb_redis_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void *refuse(lb_redis *r, lb_redis_status st, const char *fmt, ...)
{
    if (!r->parse_status) {
        r->parse_status = st;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->parse_err, sizeof r->parse_err, fmt, ap);
        va_end(ap);
    }
    return NULL;
}

/* Hang x into its parent's element vector (growing it); 0, or -1 refused. */
static int attach(lb_redis *r, const redisReadTask *task, lb_reply *x)
{
    if (!task->parent)
        return 0;
    lb_array_obj *p = task->parent->obj;
    if (task->idx < 0 || (size_t)task->idx >= p->pub.len) {
        refuse(r, LB_REDIS_ERR_PROTOCOL, "array element %d of an array of %zu", task->idx,
               p->pub.len);
        return -1;
    }
    size_t i = (size_t)task->idx;
    if (i >= p->cap) {
        size_t cap = p->cap * 2 > i + 1 ? p->cap * 2 : i + 1;
        if (cap > p->pub.len)
            cap = p->pub.len;
        lb_reply **el = arena_alloc(&r->arena, cap * sizeof *el);
        if (!el) {
            refuse(r, LB_REDIS_ERR_NOMEM, "out of memory reading an array of %zu elements",
                   p->pub.len);
            return -1;
        }
        memcpy(el, p->pub.element, p->cap * sizeof *el);
        memset(el + p->cap, 0, (cap - p->cap) * sizeof *el);
        p->pub.element = el;
        p->cap = cap;
    }
    p->pub.element[i] = x;
    return 0;
}

static void *cb_string(const redisReadTask *task, char *str, size_t len)
{
    lb_redis *r = task->privdata;
    lb_reply *x = arena_alloc(&r->arena, sizeof(lb_reply) + len + 1);
    if (!x)
        return refuse(r, LB_REDIS_ERR_NOMEM, "out of memory for a reply of %zu bytes", len);
    x->type = task->type;
    x->integer = 0;
    x->len = len;
    x->str = (char *)(x + 1);
    memcpy(x->str, str, len);
    x->str[len] = '\0';
    x->element = NULL;
    return attach(r, task, x) ? NULL : x;
}

static void *cb_array(const redisReadTask *task, lb_array_len_t n)
{
    lb_redis *r = task->privdata;
    long long want = (long long)n;
    if (!task->parent)
        r->reply_elements = 0; /* a new top-level reply */
    if (want < 0)
        return refuse(r, LB_REDIS_ERR_PROTOCOL, "an array of negative length %lld", want);
    if ((unsigned long long)want > r->max_elements - r->reply_elements)
        return refuse(r, LB_REDIS_ERR_PROTOCOL,
                      "a reply announced an array of %lld elements, more than the command "
                      "can answer (%zu)",
                      want, r->max_elements - r->reply_elements);
    size_t cnt = (size_t)want;
    r->reply_elements += cnt;
    size_t cap = cnt < LB_ARRAY_FIRST ? cnt : LB_ARRAY_FIRST;
    lb_array_obj *a = arena_alloc(&r->arena, sizeof *a + cap * sizeof(lb_reply *));
    if (!a)
        return refuse(r, LB_REDIS_ERR_NOMEM, "out of memory reading replies");
    lb_reply *x = &a->pub;
    x->type = LB_REPLY_ARRAY;
    x->integer = 0;
    x->len = cnt;
    x->str = NULL;
    x->element = (lb_reply **)(a + 1);
    a->cap = cap;
    for (size_t i = 0; i < cap; i++)
        x->element[i] = NULL;
    return attach(r, task, x) ? NULL : x;
}

static void *cb_integer(const redisReadTask *task, long long v)
{
    lb_redis *r = task->privdata;
    lb_reply *x = arena_alloc(&r->arena, sizeof(lb_reply));
    if (!x)
        return refuse(r, LB_REDIS_ERR_NOMEM, "out of memory reading replies");
    x->type = LB_REPLY_INTEGER;
    x->integer = v;
    x->len = 0;
    x->str = NULL;
    x->element = NULL;
    return attach(r, task, x) ? NULL : x;
}

static void *cb_nil(const redisReadTask *task)
{
    lb_redis *r = task->privdata;
    lb_reply *x = arena_alloc(&r->arena, sizeof(lb_reply));
    if (!x)
        return refuse(r, LB_REDIS_ERR_NOMEM, "out of memory reading replies");
    memset(x, 0, sizeof *x);
    x->type = LB_REPLY_NIL;
    return attach(r, task, x) ? NULL : x;
}

static void cb_free(void *obj) { (void)obj; /* arena-owned */ }

static redisReplyObjectFunctions lb_reply_fns = {
    .createString = cb_string,
    .createArray = cb_array,
    .createInteger = cb_integer,
    .createNil = cb_nil,
    .freeObject = cb_free,
};

lb_redis *lb_redis_new(const lb_redis_config *cfg)
{
    lb_redis *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->err_index = -1;
    r->fd = -1;
    r->cfg.port = cfg->port;
    r->cfg.db = cfg->db;
    r->cfg.connect_timeout_ms = cfg->connect_timeout_ms < 0 ? 0 : cfg->connect_timeout_ms;
    r->cfg.timeout_ms = cfg->timeout_ms < 0 ? 0 : cfg->timeout_ms;
    r->cfg.tls = cfg->tls;
    r->cfg.tls_cert_reqs = cfg->tls_cert_reqs;
    r->cfg.tls_check_hostname = cfg->tls_check_hostname;
    r->cfg.cluster_replica_reads = cfg->cluster_replica_reads;
    r->cfg.cluster_retry_ms = cfg->cluster_retry_ms;
    r->cfg.wait_replicas = cfg->wait_replicas < 0 ? 0 : cfg->wait_replicas;
    r->cfg.wait_timeout_ms = cfg->wait_timeout_ms > 0 ? cfg->wait_timeout_ms : LB_REDIS_WAIT_DEFAULT_MS;
    if (lb_redis_config_set(&r->cfg.host, cfg->host) ||
        lb_redis_config_set(&r->cfg.unix_path, cfg->unix_path) ||
        lb_redis_config_set(&r->cfg.username, cfg->username) ||
        lb_redis_config_set(&r->cfg.password, cfg->password) ||
        lb_redis_config_set(&r->cfg.tls_ca_certs, cfg->tls_ca_certs) ||
        lb_redis_config_set(&r->cfg.tls_ca_path, cfg->tls_ca_path) ||
        lb_redis_config_set(&r->cfg.tls_certfile, cfg->tls_certfile) ||
        lb_redis_config_set(&r->cfg.tls_keyfile, cfg->tls_keyfile) ||
        lb_redis_config_set(&r->cfg.sentinels, cfg->sentinels) ||
        lb_redis_config_set(&r->cfg.sentinel_service, cfg->sentinel_service) ||
        lb_redis_config_set(&r->cfg.sentinel_username, cfg->sentinel_username) ||
        lb_redis_config_set(&r->cfg.sentinel_password, cfg->sentinel_password) ||
        lb_redis_config_set(&r->cfg.cluster_nodes, cfg->cluster_nodes) ||
        !(r->rbuf = malloc(LB_RBUF_SIZE)) ||
        (r->cfg.cluster_nodes && !(r->cluster = lb_cluster_new(&r->cfg)))) {
        lb_redis_free(r);
        return NULL;
    }
    return r;
}

/* Close the socket and forget the connection.  Nothing is sent: hiredis's
 * redisFree only close()s the fd (no QUIT, no shutdown()), so a forked
 * child dropping an inherited socket leaves the parent's connection intact. */
static void drop(lb_redis *r)
{
    r->fd = -1; /* first: a fork from here on must not close the fd again */
    if (r->tls) {
        lb_tls_free(r->tls); /* writes nothing (no close_notify), leaves the fd */
        r->tls = NULL;
    }
    if (r->ctx) {
        redisFree(r->ctx);
        r->ctx = NULL;
    }
    if (r->reader) {
        redisReaderFree(r->reader);
        r->reader = NULL;
    }
    arena_reset(&r->arena);
}

void lb_redis_disconnect(lb_redis *r)
{
    drop(r);
    if (r->cluster)
        lb_cluster_disconnect(r->cluster);
    r->ext_open = 0; /* an outside transport must close its connection too */
}

void lb_redis_free(lb_redis *r)
{
    if (!r)
        return;
    drop(r);
    lb_cluster_free(r->cluster);
    lb_redis_batch_free(&r->waitb);
    arena_free(&r->arena);
    free(r->replies);
    free(r->rbuf);
    lb_redis_config_free(&r->cfg);
    free(r);
}

lb_redis *lb_redis_new_like(const lb_redis *r)
{
    /* Calls only read the settings (lb_redis_set_timeout, between calls, aside). */
    return lb_redis_new(&r->cfg);
}

void lb_redis_abandon(lb_redis *r)
{
    if (r && r->cluster)
        lb_cluster_abandon(r->cluster);
    if (r && r->fd >= 0 && r->pid != getpid())
        close(r->fd);
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void where(const lb_redis *r, char *buf, size_t n)
{
    if (r->cfg.unix_path)
        snprintf(buf, n, "unix:%s", r->cfg.unix_path);
    else if (r->cfg.host && strchr(r->cfg.host, ':'))
        snprintf(buf, n, "[%s]:%d", r->cfg.host, r->cfg.port ? r->cfg.port : 6379);
    else
        snprintf(buf, n, "%s:%d", r->cfg.host ? r->cfg.host : "localhost",
                 r->cfg.port ? r->cfg.port : 6379);
}

/* Transport: the bytes of the Redis protocol over plain TCP / unix (send,
 * recv) or TLS (lb_tls).  Everything above these two calls (request bytes,
 * the reader, every reply check) is the same for both.
 *   tx_send: > 0 sent; 0 nothing now (*ev = the poll events to wait for);
 *            -1 failed (message in r->errstr via lb_redis_set_error).
 *   tx_recv: > 0 received; 0 the server closed; -1 nothing now (*ev as
 *            above); -2 failed (errstr set). */
/* TLS 1.3 servers check a client certificate after the client's handshake is
 * done: a server that wants one and got none closes the connection at the
 * first request.  Say so when a fresh session dies before any answer. */
static const char *tls_hint(const lb_redis *r)
{
    if (!r->tls_unanswered)
        return "";
    return r->cfg.tls_certfile ? " (the server dropped the new TLS session: does it accept this "
                                 "client certificate?)"
                               : " (the server dropped the new TLS session: does it require a "
                                 "client certificate? see ssl_certfile / ssl_keyfile)";
}

static ssize_t tx_send(lb_redis *r, const char *buf, size_t len, short *ev)
{
    char w[160];
    if (r->tls) {
        char e[256];
        ssize_t k = lb_tls_write(r->tls, buf, len, e, sizeof e);
        if (k > 0)
            return k;
        if (k == LB_TLS_WANT_READ || k == LB_TLS_WANT_WRITE) {
            *ev = k == LB_TLS_WANT_READ ? POLLIN : POLLOUT;
            return 0;
        }
        where(r, w, sizeof w);
        lb_redis_set_error(r, LB_REDIS_ERR_IO, "connection to Redis at %s lost while sending: %s%s",
                           w, e, tls_hint(r));
        return -1;
    }
    ssize_t k = send(r->ctx->fd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0)
        return k;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        int e = errno;
        where(r, w, sizeof w);
        lb_redis_set_error(r, LB_REDIS_ERR_IO, "connection to Redis at %s lost while sending: %s",
                           w, strerror(e));
        return -1;
    }
    *ev = POLLOUT;
    return 0;
}

static ssize_t tx_recv(lb_redis *r, char *buf, size_t cap, short *ev)
{
    char w[160];
    if (r->tls) {
        char e[256];
        ssize_t k = lb_tls_read(r->tls, buf, cap, e, sizeof e);
        if (k > 0)
            r->tls_unanswered = 0;
        if (k > 0 || (k == 0 && !r->tls_unanswered))
            return k;
        if (k == 0) {
            where(r, w, sizeof w);
            lb_redis_set_error(r, LB_REDIS_ERR_IO, "connection to Redis at %s closed by the server "
                               "right after the TLS handshake%s", w, tls_hint(r));
            return -2;
        }
        if (k == LB_TLS_WANT_READ || k == LB_TLS_WANT_WRITE) {
            *ev = k == LB_TLS_WANT_READ ? POLLIN : POLLOUT;
            return -1;
        }
        where(r, w, sizeof w);
        lb_redis_set_error(r, LB_REDIS_ERR_IO, "connection to Redis at %s lost: %s%s", w, e,
                           tls_hint(r));
        return -2;
    }
    ssize_t k = recv(r->ctx->fd, buf, cap, MSG_DONTWAIT);
    if (k >= 0)
        return k;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        *ev = POLLIN;
        return -1;
    }
    int e = errno;
    where(r, w, sizeof w);
    lb_redis_set_error(r, LB_REDIS_ERR_IO, "connection to Redis at %s lost: %s", w, strerror(e));
    return -2;
}

static lb_redis_status more_replies_than_commands(lb_redis *r)
{
    char w[160];
    where(r, w, sizeof w);
    return lb_redis_set_error(r, LB_REDIS_ERR_PROTOCOL,
                              "protocol error: Redis at %s sent more replies than commands", w);
}

/* Move the replies the reader has parsed into out[*got..n).  OK, or the
 * protocol error (or NOMEM) the reader or its callbacks met. */
static lb_redis_status take_replies(lb_redis *r, size_t n, lb_reply **out, size_t *got)
{
    char w[160];
    while (*got < n) {
        void *rep = NULL;
        if (redisReaderGetReply(r->reader, &rep) != REDIS_OK) {
            where(r, w, sizeof w);
            if (r->parse_status == LB_REDIS_ERR_NOMEM)
                return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "%s (from Redis at %s)",
                                          r->parse_err, w);
            return lb_redis_set_error(r, LB_REDIS_ERR_PROTOCOL,
                                      "protocol error from Redis at %s: %s", w,
                                      r->parse_status ? r->parse_err : r->reader->errstr);
        }
        if (!rep)
            break;
        out[(*got)++] = rep;
    }
    if (*got == n && r->reader->pos < r->reader->len)
        return more_replies_than_commands(r);
    return LB_REDIS_OK;
}

/* Give k received bytes to the reader, within the round trip's byte bound. */
static lb_redis_status feed_reader(lb_redis *r, const char *data, size_t k, size_t *received)
{
    char w[160];
    *received += k;
    if (r->max_bytes && *received > r->max_bytes) {
        where(r, w, sizeof w);
        return lb_redis_set_error(r, LB_REDIS_ERR_PROTOCOL,
                                  "protocol error: Redis at %s sent more reply bytes "
                                  "than the commands sent can answer (%zu so far, at "
                                  "most %zu)",
                                  w, *received, r->max_bytes);
    }
    if (redisReaderFeed(r->reader, data, k) != REDIS_OK)
        return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory reading replies");
    return LB_REDIS_OK;
}

/* One round trip on the connected socket: send buf[0..len) while reading,
 * until n replies were parsed into out[].  *received counts reply bytes. */
static lb_redis_status roundtrip(lb_redis *r, const char *buf, size_t len, size_t n,
                                 lb_reply **out, size_t *received)
{
    const int fd = r->ctx->fd;
    const int tmo = r->cfg.timeout_ms;
    size_t sent = 0, got = 0;
    short wev = POLLOUT, rev = POLLIN; /* what the last send / recv waits for */
    int64_t deadline = tmo > 0 ? now_ms() + tmo : 0;
    char w[160];
    *received = 0;
    r->roundtrips++;
    r->parse_status = LB_REDIS_OK;
    r->parse_err[0] = '\0';
    r->reply_elements = 0;

    for (;;) {
        /* Hand out every reply already parsed. */
        if (take_replies(r, n, out, &got) != LB_REDIS_OK)
            return r->status;
        if (got == n) {
            if (sent < len)
                return more_replies_than_commands(r);
            return LB_REDIS_OK;
        }

        int progress = 0;
        if (sent < len) {
            ssize_t k = tx_send(r, buf + sent, len - sent, &wev);
            if (k > 0) {
                sent += (size_t)k;
                progress = 1;
            } else if (k < 0) {
                return r->status;
            }
        }
        if (!progress && !(r->tls && lb_tls_pending(r->tls) > 0)) {
            struct pollfd pfd = {fd, rev, 0};
            if (sent < len)
                pfd.events |= wev;
            int wait = -1;
            if (tmo > 0) {
                int64_t left = deadline - now_ms();
                wait = left > 0 ? (int)left : 0;
            }
            int pr = poll(&pfd, 1, wait);
            if (pr < 0) {
                if (errno == EINTR)
                    continue;
                int e = errno;
                return lb_redis_set_error(r, LB_REDIS_ERR_IO, "poll failed: %s", strerror(e));
            }
            if (pr == 0) {
                where(r, w, sizeof w);
                return lb_redis_set_error(r, LB_REDIS_ERR_TIMEOUT,
                                          "timeout: Redis at %s did not answer within %d ms "
                                          "(%zu of %zu replies read)",
                                          w, tmo, got, n);
            }
            if (!r->tls && !(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
                continue; /* writable only: send on the next turn */
        }
        rev = POLLIN;
        ssize_t k = tx_recv(r, r->rbuf, LB_RBUF_SIZE, &rev);
        if (k > 0) {
            if (feed_reader(r, r->rbuf, (size_t)k, received) != LB_REDIS_OK)
                return r->status;
            progress = 1;
        } else if (k == 0) {
            where(r, w, sizeof w);
            return lb_redis_set_error(r, LB_REDIS_ERR_IO,
                                      "connection to Redis at %s closed by the server "
                                      "(%zu of %zu replies read)",
                                      w, got, n);
        } else if (k == -2) {
            return r->status;
        }
        if (progress && tmo > 0)
            deadline = now_ms() + tmo;
    }
}

/* Batches ----------------------------------------------------------------- */

void lb_redis_batch_init(lb_redis_batch *b)
{
    memset(b, 0, sizeof *b);
}

void lb_redis_batch_free(lb_redis_batch *b)
{
    free(b->buf);
    lb_redis_batch_init(b);
}

void lb_redis_batch_clear(lb_redis_batch *b)
{
    if (b->cap > ((size_t)4 << 20)) {
        free(b->buf);
        b->buf = NULL;
        b->cap = 0;
    }
    b->len = 0;
    b->ncmds = 0;
    b->args_left = 0;
    b->failed = 0;
    b->max_elements = 0;
    b->max_set = 0;
    b->max_bytes = 0;
    b->bytes_set = 0;
    b->cmd_argc = 0;
    b->cmd_key = 0;
    b->has_slot = 0;
    b->multi_slot = 0;
    b->slot = 0;
    b->multi_cmd = 0;
    b->key_off = b->key_len = 0;
}

void lb_redis_batch_expect_bytes(lb_redis_batch *b, size_t n)
{
    b->max_bytes = b->max_bytes + n < b->max_bytes ? SIZE_MAX : b->max_bytes + n;
    b->bytes_set = 1;
}

void lb_redis_batch_expect_elements(lb_redis_batch *b, size_t n)
{
    if (!b->max_set || n > b->max_elements)
        b->max_elements = n;
    b->max_set = 1;
}

static int batch_reserve(lb_redis_batch *b, size_t more)
{
    if (b->failed)
        return -1;
    if (b->cap - b->len >= more)
        return 0;
    size_t need = b->len + more;
    if (need < b->len) {
        b->failed = LB_REDIS_ERR_NOMEM;
        return -1;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap = cap * 2 > cap ? cap * 2 : need;
    char *nb = realloc(b->buf, cap);
    if (!nb) {
        b->failed = LB_REDIS_ERR_NOMEM;
        return -1;
    }
    b->buf = nb;
    b->cap = cap;
    return 0;
}

/* Write v in decimal at p; returns the number of characters. */
static size_t fmt_u64(char *p, uint64_t v)
{
    char t[24];
    size_t n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = t[n - 1 - i];
    return n;
}

void lb_redis_batch_cmd(lb_redis_batch *b, int argc)
{
    if (b->failed)
        return;
    if (argc < 1 || b->args_left != 0) {
        b->failed = LB_REDIS_ERR_ARG;
        return;
    }
    if (batch_reserve(b, 32))
        return;
    char *p = b->buf + b->len;
    *p++ = '*';
    p += fmt_u64(p, (uint64_t)argc);
    *p++ = '\r';
    *p++ = '\n';
    b->len = (size_t)(p - b->buf);
    b->args_left = argc;
    b->cmd_argc = argc;
    b->ncmds++;
}

/* Which argument of a command is its first key (for the slot of a batch):
 * 1 for most, 2 for BITOP (BITOP op destkey key...), OBJECT and MEMORY
 * (OBJECT ENCODING key), 0 for the keyless ones. */
static int key_index(const char *name, size_t len)
{
    static const char *const keyless[] = {"INFO", "PING", "ROLE", "WAIT", "CLUSTER", "ECHO",
                                          "TIME", "DBSIZE", "ASKING", "READONLY", "SELECT",
                                          "AUTH", "HELLO", "COMMAND", "CONFIG", NULL};
    for (const char *const *n = keyless; *n; n++)
        if (strlen(*n) == len && strncasecmp(*n, name, len) == 0)
            return 0;
    if ((len == 5 && strncasecmp(name, "BITOP", 5) == 0) ||
        (len == 6 && strncasecmp(name, "OBJECT", 6) == 0) ||
        (len == 6 && strncasecmp(name, "MEMORY", 6) == 0))
        return 2;
    return 1;
}

/* The argument just written at buf[off..off+len) is argument i of its command. */
static void track_slot(lb_redis_batch *b, long i, size_t off, size_t len)
{
    if (i == 0) {
        b->cmd_key = key_index(b->buf + off, len);
        return;
    }
    if (i != b->cmd_key)
        return;
    if (b->has_slot && len == b->key_len && memcmp(b->buf + b->key_off, b->buf + off, len) == 0)
        return; /* the same key as the last one */
    unsigned slot = lb_cluster_key_slot(b->buf + off, len);
    if (!b->has_slot) {
        b->has_slot = 1;
        b->slot = slot;
    } else if (slot != b->slot && !b->multi_slot) {
        b->multi_slot = 1;
        b->multi_cmd = b->ncmds - 1;
    }
    b->key_off = off;
    b->key_len = len;
}

void lb_redis_batch_arg(lb_redis_batch *b, const void *data, size_t len)
{
    if (b->failed)
        return;
    if (b->args_left <= 0) {
        b->failed = LB_REDIS_ERR_ARG;
        return;
    }
    if (batch_reserve(b, len + 32))
        return;
    char *p = b->buf + b->len;
    *p++ = '$';
    p += fmt_u64(p, len);
    *p++ = '\r';
    *p++ = '\n';
    if (len)
        memcpy(p, data, len);
    long i = b->cmd_argc - b->args_left;
    if (i <= 2)
        track_slot(b, i, (size_t)(p - b->buf), len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    b->len = (size_t)(p - b->buf);
    b->args_left--;
}

/* Parse "<c>N\r\n" at buf[*pos..len): N, or -1. */
static long long resp_header(const char *buf, size_t len, size_t *pos, char c)
{
    size_t p = *pos;
    if (p >= len || buf[p] != c)
        return -1;
    long long v = 0;
    size_t digits = 0;
    for (p++; p < len && buf[p] >= '0' && buf[p] <= '9' && digits < 18; p++, digits++)
        v = v * 10 + (buf[p] - '0');
    if (!digits || p + 1 >= len || buf[p] != '\r' || buf[p + 1] != '\n')
        return -1;
    *pos = p + 2;
    return v;
}

/* Skip one command at buf[*pos..len); 0, or -1 when it is not well formed. */
static int skip_command(const char *buf, size_t len, size_t *pos)
{
    long long argc = resp_header(buf, len, pos, '*');
    if (argc < 1)
        return -1;
    for (long long a = 0; a < argc; a++) {
        long long n = resp_header(buf, len, pos, '$');
        if (n < 0 || (size_t)n > len - *pos || len - *pos - (size_t)n < 2)
            return -1;
        *pos += (size_t)n + 2;
    }
    return 0;
}

int lb_redis_batch_offsets(const lb_redis_batch *b, size_t *off)
{
    size_t pos = 0;
    for (size_t c = 0; c < b->ncmds; c++) {
        off[c] = pos;
        if (skip_command(b->buf, b->len, &pos))
            return -1;
    }
    off[b->ncmds] = pos;
    return pos == b->len ? 0 : -1;
}

void lb_redis_batch_raw(lb_redis_batch *b, const char *cmd, size_t len)
{
    if (b->failed)
        return;
    if (b->args_left != 0) {
        b->failed = LB_REDIS_ERR_ARG;
        return;
    }
    if (batch_reserve(b, len))
        return;
    memcpy(b->buf + b->len, cmd, len);
    b->len += len;
    b->ncmds++;
}

void lb_redis_batch_arg_str(lb_redis_batch *b, const char *s)
{
    lb_redis_batch_arg(b, s, strlen(s));
}

void lb_redis_batch_arg_u64(lb_redis_batch *b, uint64_t v)
{
    char t[24];
    lb_redis_batch_arg(b, t, fmt_u64(t, v));
}

void lb_redis_batch_arg_i64(lb_redis_batch *b, int64_t v)
{
    char t[24];
    if (v < 0) {
        t[0] = '-';
        lb_redis_batch_arg(b, t, 1 + fmt_u64(t + 1, (uint64_t)0 - (uint64_t)v));
    } else {
        lb_redis_batch_arg(b, t, fmt_u64(t, (uint64_t)v));
    }
}

void lb_redis_batch_argv(lb_redis_batch *b, int argc, const char *const *argv, const size_t *lens)
{
    lb_redis_batch_cmd(b, argc);
    for (int i = 0; i < argc; i++)
        lb_redis_batch_arg(b, argv[i], lens ? lens[i] : strlen(argv[i]));
}

/* Connecting -------------------------------------------------------------- */

/* The TLS handshake on the connected non-blocking socket fd, bounded by the
 * connect timeout (else the operation timeout; as an inactivity timeout). */
static lb_redis_status tls_handshake(lb_redis *r, int fd, const char *host, const char *w,
                                     lb_tls **out)
{
    char e[400];
    lb_tls_options o;
    memset(&o, 0, sizeof o);
    o.host = host;
    o.ca_certs = r->cfg.tls_ca_certs;
    o.ca_path = r->cfg.tls_ca_path;
    o.certfile = r->cfg.tls_certfile;
    o.keyfile = r->cfg.tls_keyfile;
    o.cert_reqs = r->cfg.tls_cert_reqs == LB_REDIS_CERT_NONE       ? LB_TLS_CERT_NONE
                  : r->cfg.tls_cert_reqs == LB_REDIS_CERT_OPTIONAL ? LB_TLS_CERT_OPTIONAL
                                                                   : LB_TLS_CERT_REQUIRED;
    o.check_hostname = r->cfg.tls_check_hostname != 2;
    *out = NULL;
    lb_tls *t = lb_tls_new(fd, &o, e, sizeof e);
    if (!t)
        return lb_redis_set_error(r, LB_REDIS_ERR_CONNECT, "error connecting to Redis at %s: %s",
                                  w, e);
    const int tmo = r->cfg.connect_timeout_ms > 0 ? r->cfg.connect_timeout_ms : r->cfg.timeout_ms;
    int64_t deadline = tmo > 0 ? now_ms() + tmo : 0;
    for (;;) {
        int st = lb_tls_handshake(t, e, sizeof e);
        if (st == 0)
            break;
        if (st == LB_TLS_ERROR) {
            lb_tls_free(t);
            return lb_redis_set_error(r, LB_REDIS_ERR_CONNECT,
                                      "error connecting to Redis at %s: %s", w, e);
        }
        struct pollfd pfd = {fd, st == LB_TLS_WANT_READ ? POLLIN : POLLOUT, 0};
        int wait = -1;
        if (tmo > 0) {
            int64_t left = deadline - now_ms();
            wait = left > 0 ? (int)left : 0;
        }
        int pr = poll(&pfd, 1, wait);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            int en = errno;
            lb_tls_free(t);
            if (pr < 0)
                return lb_redis_set_error(r, LB_REDIS_ERR_CONNECT, "poll failed: %s",
                                          strerror(en));
            return lb_redis_set_error(r, LB_REDIS_ERR_TIMEOUT,
                                      "timeout connecting to Redis at %s: no TLS handshake "
                                      "within %d ms (does the server speak TLS on this port?)",
                                      w, tmo);
        }
    }
    *out = t;
    return LB_REDIS_OK;
}

/* The handshake of a new connection, AUTH and SELECT in one round trip, as
 * every transport sends it: hb->ncmds is 0 when none is needed; *auth and
 * *sel are the indexes of the two commands in it (-1: not sent). */
static void handshake_build(const lb_redis *r, lb_redis_batch *hb, int *auth, int *sel)
{
    int n = 0;
    *auth = *sel = -1;
    lb_redis_batch_init(hb);
    if (r->cfg.password || r->cfg.username) {
        if (r->cfg.username) {
            lb_redis_batch_cmd(hb, 3);
            lb_redis_batch_arg_str(hb, "AUTH");
            lb_redis_batch_arg_str(hb, r->cfg.username);
            lb_redis_batch_arg_str(hb, r->cfg.password ? r->cfg.password : "");
        } else {
            lb_redis_batch_cmd(hb, 2);
            lb_redis_batch_arg_str(hb, "AUTH");
            lb_redis_batch_arg_str(hb, r->cfg.password);
        }
        *auth = n++;
    }
    if (r->cfg.db != 0) {
        lb_redis_batch_cmd(hb, 2);
        lb_redis_batch_arg_str(hb, "SELECT");
        lb_redis_batch_arg_u64(hb, (uint64_t)r->cfg.db);
        *sel = n++;
    }
}

/* Its replies: AUTH and SELECT must answer +OK. */
static lb_redis_status handshake_check(lb_redis *r, lb_reply **hr, int auth, int sel)
{
    char w[160];
    where(r, w, sizeof w);
    if (auth >= 0 && hr[auth]->type == LB_REPLY_ERROR)
        return lb_redis_set_error(r, LB_REDIS_ERR_AUTH, "Redis at %s refused AUTH%s%s: %s", w,
                                  r->cfg.username ? " for user " : "",
                                  r->cfg.username ? r->cfg.username : "", hr[auth]->str);
    if (sel >= 0 && hr[sel]->type == LB_REPLY_ERROR)
        return lb_redis_set_error(r, LB_REDIS_ERR_REPLY, "SELECT %d failed on Redis at %s: %s",
                                  r->cfg.db, w, hr[sel]->str);
    if ((auth >= 0 && !lb_reply_status_is(hr[auth], "OK")) ||
        (sel >= 0 && !lb_reply_status_is(hr[sel], "OK")))
        return lb_redis_set_error(r, LB_REDIS_ERR_PROTOCOL,
                                  "protocol error: Redis at %s answered %s with something other "
                                  "than OK; connection dropped",
                                  w, auth >= 0 && !lb_reply_status_is(hr[auth], "OK") ? "AUTH"
                                                                                     : "SELECT");
    return LB_REDIS_OK;
}

static lb_redis_status connect_once(lb_redis *r);

/* Sentinel: after the handshake, ROLE must say "master" (the sentinels may
 * name a primary that a failover has just demoted). */
static lb_redis_status check_role(lb_redis *r)
{
    lb_redis_batch b;
    lb_redis_batch_init(&b);
    lb_redis_batch_cmd(&b, 1);
    lb_redis_batch_arg_str(&b, "ROLE");
    lb_reply *rr[1];
    size_t received;
    r->max_elements = 64 * 1024; /* a master lists its replicas */
    r->max_bytes = (size_t)LB_REDIS_REPLY_SLACK + 64 * 1024;
    lb_redis_status st = b.failed ? LB_REDIS_ERR_NOMEM : roundtrip(r, b.buf, b.len, 1, rr, &received);
    lb_redis_batch_free(&b);
    if (st != LB_REDIS_OK)
        return st;
    char w[160];
    where(r, w, sizeof w);
    int m = lb_sentinel_role_is_master(rr[0]);
    if (m < 0)
        return lb_redis_set_error(r, LB_REDIS_ERR_PROTOCOL,
                                  "protocol error: Redis at %s answered ROLE with something "
                                  "other than a role; connection dropped", w);
    if (m == 0)
        return lb_redis_set_error(r, LB_REDIS_ERR_CONNECT,
                                  "the sentinels named %s as the primary of '%s', but it is "
                                  "not a master (a failover in progress?)",
                                  w, r->cfg.sentinel_service);
    return LB_REDIS_OK;
}

/* Connect; through the sentinels when the config names a service: ask them,
 * connect to the primary they name, check its ROLE; a few tries, 200 ms apart,
 * while a failover leaves them naming a server that is gone or not a master. */
static lb_redis_status do_connect(lb_redis *r)
{
    if (!r->cfg.sentinel_service || r->cfg.unix_path)
        return connect_once(r);
    lb_redis_status st = LB_REDIS_ERR_CONNECT;
    for (int attempt = 0; attempt < 5; attempt++) {
        if (attempt) {
            struct timespec pause = {0, 200 * 1000 * 1000};
            nanosleep(&pause, NULL);
        }
        char *host = NULL, err[512];
        int port = 0;
        st = lb_sentinel_find_primary(&r->cfg, &host, &port, err, sizeof err);
        if (st != LB_REDIS_OK)
            return lb_redis_set_error(r, st, "%s", err);
        free(r->cfg.host);
        r->cfg.host = host;
        r->cfg.port = port;
        st = connect_once(r);
        if (st == LB_REDIS_OK) {
            st = check_role(r);
            if (st == LB_REDIS_OK)
                return st;
            drop(r);
        }
        if (st != LB_REDIS_ERR_CONNECT)
            return st;
    }
    return st;
}

static lb_redis_status connect_once(lb_redis *r)
{
    char w[160];
    const int ct = r->cfg.connect_timeout_ms;
    struct timeval tv = {ct / 1000, (ct % 1000) * 1000};
    const char *host = r->cfg.host ? r->cfg.host : "localhost";
    const int port = r->cfg.port ? r->cfg.port : 6379;
    redisContext *c;

    where(r, w, sizeof w);
    errno = 0;
    if (r->cfg.unix_path)
        c = ct > 0 ? redisConnectUnixWithTimeout(r->cfg.unix_path, tv)
                   : redisConnectUnix(r->cfg.unix_path);
    else
        c = ct > 0 ? redisConnectWithTimeout(host, port, tv) : redisConnect(host, port);
    int e = errno;
    if (!c)
        return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory connecting to %s", w);
    if (c->err) {
        int timed_out = e == ETIMEDOUT || e == EINPROGRESS || strstr(c->errstr, "timed out") ||
                        strstr(c->errstr, "Timed out");
        lb_redis_status st = timed_out ? LB_REDIS_ERR_TIMEOUT : LB_REDIS_ERR_CONNECT;
        lb_redis_set_error(r, st, "%s connecting to Redis at %s: %s",
                           timed_out ? "timeout" : "error", w, c->errstr);
        redisFree(c);
        return st;
    }
    int fl = fcntl(c->fd, F_GETFL);
    if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int e2 = errno;
        redisFree(c);
        return lb_redis_set_error(r, LB_REDIS_ERR_CONNECT, "cannot set up the socket to %s: %s",
                                  w, strerror(e2));
    }
    if (!r->cfg.unix_path)
        (void)redisEnableKeepAlive(c); /* best effort */
#ifdef SO_NOSIGPIPE /* where send() has no MSG_NOSIGNAL (macOS) */
    {
        int one = 1;
        (void)setsockopt(c->fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
    }
#endif
    lb_tls *tls = NULL;
    if (r->cfg.tls && !r->cfg.unix_path) {
        lb_redis_status hs = tls_handshake(r, c->fd, host, w, &tls);
        if (hs != LB_REDIS_OK) {
            redisFree(c);
            return hs;
        }
    }
    redisReader *rd = redisReaderCreateWithFunctions(&lb_reply_fns);
    if (!rd) {
        lb_tls_free(tls);
        redisFree(c);
        return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory connecting to %s", w);
    }
    rd->privdata = r; /* redisReaderSetPrivdata warns in 0.14 */
    r->ctx = c;
    r->tls = tls;
    r->tls_unanswered = tls != NULL;
    r->reader = rd;
    r->pid = getpid();
    r->fd = c->fd;
    r->connects++;

    /* Handshake: AUTH and SELECT in one round trip. */
    lb_redis_batch hb;
    int auth, sel;
    handshake_build(r, &hb, &auth, &sel);
    if (hb.ncmds == 0) {
        lb_redis_batch_free(&hb);
        return LB_REDIS_OK;
    }
    lb_reply *hr[2];
    size_t received;
    lb_redis_status st;
    if (hb.failed)
        st = lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory building the handshake");
    else {
        r->max_elements = 0; /* AUTH and SELECT answer no array */
        r->max_bytes = (size_t)LB_REDIS_REPLY_SLACK * hb.ncmds;
        st = roundtrip(r, hb.buf, hb.len, hb.ncmds, hr, &received);
    }
    lb_redis_batch_free(&hb);
    if (st == LB_REDIS_OK)
        st = handshake_check(r, hr, auth, sel);
    if (st != LB_REDIS_OK)
        drop(r);
    return st;
}

/* 1 when the open connection has input nobody asked for: bytes left in the
 * reader, or anything readable on the socket (a late or unsolicited reply,
 * the server's EOF or a reset) before this call sent a byte.  Every reply of
 * the last round trip was read, so such input would be taken as the answer
 * to the next command. */
static int has_pending_input(lb_redis *r)
{
    if (r->reader && r->reader->pos < r->reader->len)
        return 1;
    if (r->tls && lb_tls_pending(r->tls) > 0)
        return 1;
    struct pollfd pfd = {r->ctx->fd, POLLIN, 0};
    int pr;
    do
        pr = poll(&pfd, 1, 0);
    while (pr < 0 && errno == EINTR);
    if (pr > 0 && r->tls && !(pfd.revents & (POLLHUP | POLLERR))) {
        /* TLS records that carry no data (TLS 1.3 session tickets, key
         * updates) make the socket readable too: read, and only data or the
         * end of the connection counts. */
        char one[1];
        short ev;
        ssize_t k = tx_recv(r, one, 1, &ev);
        r->status = LB_REDIS_OK; /* a failure here only means "not clean" */
        r->errstr[0] = '\0';
        return !(k == -1 && ev == POLLIN);
    }
    return pr != 0; /* readable, hung up, or poll itself failing: not clean */
}

/* Make sure this process has an open connection.  *fresh = 1 when it was
 * opened by this call. */
static lb_redis_status ensure_connected(lb_redis *r, int *fresh)
{
    *fresh = 0;
    if (r->ctx && r->pid != getpid())
        drop(r); /* inherited over fork(): close our copy of the fd, send nothing */
    if (r->ctx)
        return LB_REDIS_OK;
    *fresh = 1;
    return do_connect(r);
}

lb_redis_status lb_redis_connect(lb_redis *r)
{
    int fresh;
    clear_error(r);
    if (r->cluster)
        return lb_cluster_connect(r->cluster, r);
    return ensure_connected(r, &fresh);
}

/* Exec -------------------------------------------------------------------- */

/* Unless flags has LB_REDIS_RAW_ERRORS, the first error reply of n makes
 * the status: WRONGTYPE or REPLY, with the server's text and its index. */
lb_redis_status lb_redis_check_replies(lb_redis *r, lb_reply **rs, size_t n, int flags)
{
    if (flags & LB_REDIS_RAW_ERRORS)
        return LB_REDIS_OK;
    for (size_t i = 0; i < n; i++) {
        const lb_reply *x = rs[i];
        if (x->type == LB_REPLY_ERROR) {
            r->err_index = (long)i;
            int wt = x->len >= 9 && memcmp(x->str, "WRONGTYPE", 9) == 0;
            return lb_redis_set_error(r, wt ? LB_REDIS_ERR_WRONGTYPE : LB_REDIS_ERR_REPLY, "%s",
                                      x->str);
        }
    }
    return LB_REDIS_OK;
}

static lb_redis_status reply_errors(lb_redis *r, size_t n, int flags)
{
    return lb_redis_check_replies(r, r->replies, n, flags);
}

/* Room for n top-level replies. */
static lb_redis_status replies_reserve(lb_redis *r, size_t n)
{
    if (r->replies_cap < n || r->replies_cap > n * 4 + 1024) {
        lb_reply **nr = realloc(r->replies, n * sizeof *nr);
        if (!nr)
            return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for %zu replies", n);
        r->replies = nr;
        r->replies_cap = n;
    }
    return LB_REDIS_OK;
}

/* The bounds of a round trip's replies, from what its batch asked for. */
static void set_bounds(lb_redis *r, const lb_redis_batch *b)
{
    r->max_elements = b->max_set ? b->max_elements : LB_REDIS_DEFAULT_MAX_ELEMENTS;
    r->max_bytes = 0;
    if (b->bytes_set) {
        size_t slack =
            b->ncmds > SIZE_MAX / LB_REDIS_REPLY_SLACK ? SIZE_MAX : b->ncmds * LB_REDIS_REPLY_SLACK;
        r->max_bytes = b->max_bytes > SIZE_MAX - slack ? SIZE_MAX : b->max_bytes + slack;
    }
}

/* Sentinel: a reply of the last round trip says the server is no longer the
 * primary (-READONLY from a replica, -MASTERDOWN). */
static int demoted(lb_redis *r, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        const lb_reply *x = r->replies[i];
        if (x->type == LB_REPLY_ERROR && x->str &&
            (strncmp(x->str, "READONLY", 8) == 0 || strncmp(x->str, "MASTERDOWN", 10) == 0))
            return 1;
    }
    return 0;
}

lb_redis_status lb_redis_exec(lb_redis *r, const lb_redis_batch *b, int flags, lb_reply ***replies)
{
    clear_error(r);
    if (replies)
        *replies = NULL;
    if (b->failed == LB_REDIS_ERR_NOMEM)
        return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory building a Redis batch");
    if (b->failed || b->args_left != 0)
        return lb_redis_set_error(r, LB_REDIS_ERR_ARG,
                                  "malformed Redis batch (argument count does not match)");
    if (b->ncmds == 0) {
        if (replies)
            *replies = r->replies;
        return LB_REDIS_OK;
    }
    if (r->ext)
        return lb_redis_set_error(r, LB_REDIS_ERR_ARG,
                                  "this connection is carried by an outside transport "
                                  "(lb_redis_wire_*): it has no socket of its own");
    if (r->cluster)
        return lb_cluster_exec(r->cluster, r, b, flags, replies);
    const size_t nuser = b->ncmds; /* the caller's commands; WAIT may follow them */
    if ((flags & LB_REDIS_WRITE) && r->cfg.wait_replicas > 0) {
        lb_redis_batch *w = &r->waitb;
        lb_redis_batch_clear(w);
        if (batch_reserve(w, b->len + 64) == 0) {
            memcpy(w->buf, b->buf, b->len);
            w->len = b->len;
            w->ncmds = b->ncmds;
        }
        w->max_elements = b->max_elements;
        w->max_set = b->max_set;
        w->max_bytes = b->max_bytes;
        w->bytes_set = b->bytes_set;
        lb_redis_batch_cmd(w, 3);
        lb_redis_batch_arg(w, "WAIT", 4);
        lb_redis_batch_arg_u64(w, (uint64_t)r->cfg.wait_replicas);
        lb_redis_batch_arg_u64(w, (uint64_t)r->cfg.wait_timeout_ms);
        if (w->failed)
            return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory building a Redis batch");
        b = w;
    }
    if (replies_reserve(r, b->ncmds) != LB_REDIS_OK)
        return r->status;

    if (lb_redis_is_connected(r) && has_pending_input(r)) {
        drop(r); /* out of step: never read a reply meant for another command */
        if (flags & LB_REDIS_KEPT_CONN) {
            r->stale = 1;
            char w[160];
            where(r, w, sizeof w);
            return lb_redis_set_error(r, LB_REDIS_ERR_IO,
                                      "the connection to Redis at %s had unexpected input "
                                      "pending (a late reply?) and was discarded",
                                      w);
        }
    }

    lb_redis_status st;
    for (int attempt = 0;; attempt++) {
        int fresh;
        st = ensure_connected(r, &fresh);
        if (st != LB_REDIS_OK)
            return st;
        arena_reset(&r->arena);
        size_t received = 0;
        set_bounds(r, b);
        st = roundtrip(r, b->buf, b->len, b->ncmds, r->replies, &received);
        if (st == LB_REDIS_OK && r->cfg.sentinel_service && demoted(r, b->ncmds)) {
            /* A primary that a failover demoted refuses writes (-READONLY): this
             * connection must go, so that the next one asks the sentinels.  The
             * writes were refused, not done: an idempotent batch is sent again. */
            drop(r);
            if ((flags & LB_REDIS_IDEMPOTENT) && attempt < 2)
                continue;
            if (flags & LB_REDIS_KEPT_CONN) {
                /* The caller resends on a new connection itself, after its own
                 * checks (RedisFilter's meta key), as for a stale connection. */
                r->stale = 1;
                char w[160];
                where(r, w, sizeof w);
                return lb_redis_set_error(r, LB_REDIS_ERR_IO,
                                          "Redis at %s is no longer the primary of '%s' "
                                          "(READONLY): connection dropped",
                                          w, r->cfg.sentinel_service);
            }
            break;
        }
        if (st == LB_REDIS_OK)
            break;
        drop(r);
        r->stale = st == LB_REDIS_ERR_IO && !fresh && received == 0;
        if (r->stale && (flags & LB_REDIS_IDEMPOTENT) && attempt == 0)
            continue; /* a stale connection: try once more on a new one */
        return st;
    }
    r->stale = 0;

    if (replies)
        *replies = r->replies;
    if (nuser != b->ncmds) { /* WAIT's answer: how many replicas have the writes */
        const lb_reply *x = r->replies[nuser];
        st = reply_errors(r, nuser, flags);
        if (st != LB_REDIS_OK)
            return st;
        char w[160];
        where(r, w, sizeof w);
        if (x->type == LB_REPLY_ERROR)
            return lb_redis_set_error(r, LB_REDIS_ERR_REPLY, "WAIT refused by Redis at %s: %s", w,
                                      x->str);
        if (x->type != LB_REPLY_INTEGER || x->integer < 0) {
            drop(r);
            return lb_redis_set_error(r, LB_REDIS_ERR_PROTOCOL,
                                      "protocol error: Redis at %s answered WAIT with something "
                                      "other than a count; connection dropped", w);
        }
        if (x->integer < r->cfg.wait_replicas)
            return lb_redis_set_error(r, LB_REDIS_ERR_TIMEOUT,
                                      "the writes are done on Redis at %s, but only %lld of the "
                                      "%d replicas asked for (wait_replicas) acknowledged them "
                                      "within %d ms: they may be lost if that primary fails now",
                                      w, x->integer, r->cfg.wait_replicas, r->cfg.wait_timeout_ms);
    }
    return reply_errors(r, nuser, flags);
}

/* The sans-IO side (see redis_conn.h, "wire") ------------------------------ */

const lb_redis_config *lb_redis_get_config(const lb_redis *r) { return &r->cfg; }

lb_redis_status lb_redis_wire_opened(lb_redis *r)
{
    clear_error(r);
    drop(r);
    r->ext = 1;
    redisReader *rd = redisReaderCreateWithFunctions(&lb_reply_fns);
    if (!rd)
        return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory for a reply reader");
    rd->privdata = r;
    r->reader = rd;
    r->ext_open = 1;
    r->ext_n = r->ext_got = r->ext_received = 0;
    r->ext_failed = 0;
    r->ext_hs_done = 0;
    r->pid = getpid();
    r->connects++;
    return LB_REDIS_OK;
}

void lb_redis_wire_closed(lb_redis *r)
{
    r->ext = 1;
    r->ext_open = 0;
    r->ext_n = r->ext_got = 0;
    drop(r);
}

int lb_redis_wire_handshake_due(lb_redis *r, lb_redis_batch *hb)
{
    if (r->ext_hs_done)
        return 0;
    lb_redis_batch_free(hb);
    handshake_build(r, hb, &r->ext_auth, &r->ext_sel);
    lb_redis_batch_expect_elements(hb, 0);
    lb_redis_batch_expect_bytes(hb, 0);
    if (hb->failed)
        return -1;
    if (hb->ncmds == 0)
        r->ext_hs_done = 1;
    return hb->ncmds != 0;
}

lb_redis_status lb_redis_wire_handshake_done(lb_redis *r)
{
    lb_reply **rs;
    lb_redis_status st = lb_redis_wire_replies(r, LB_REDIS_RAW_ERRORS, &rs);
    if (st == LB_REDIS_OK)
        st = handshake_check(r, rs, r->ext_auth, r->ext_sel);
    if (st == LB_REDIS_OK)
        r->ext_hs_done = 1;
    else
        lb_redis_disconnect(r); /* as a blocking connect drops a failed handshake */
    return st;
}

lb_redis_status lb_redis_wire_begin(lb_redis *r, const lb_redis_batch *b)
{
    clear_error(r);
    if (!r->ext || !r->ext_open || r->pid != getpid())
        return lb_redis_set_error(r, LB_REDIS_ERR_IO, "no connection is open on the transport");
    if (b->failed == LB_REDIS_ERR_NOMEM)
        return lb_redis_set_error(r, LB_REDIS_ERR_NOMEM, "out of memory building a Redis batch");
    if (b->failed || b->args_left != 0 || b->ncmds == 0)
        return lb_redis_set_error(r, LB_REDIS_ERR_ARG,
                                  "malformed Redis batch (argument count does not match)");
    if (r->ext_n != r->ext_got || r->reader->pos < r->reader->len) {
        /* replies of an earlier request still owed, or input nobody asked for */
        return lb_redis_set_error(r, LB_REDIS_ERR_IO,
                                  "the connection to Redis is out of step (input pending); "
                                  "it must be dropped");
    }
    if (replies_reserve(r, b->ncmds) != LB_REDIS_OK)
        return r->status;
    arena_reset(&r->arena);
    set_bounds(r, b);
    r->roundtrips++;
    r->parse_status = LB_REDIS_OK;
    r->parse_err[0] = '\0';
    r->reply_elements = 0;
    r->ext_n = b->ncmds;
    r->ext_got = 0;
    r->ext_received = 0;
    r->ext_failed = 0;
    return LB_REDIS_OK;
}

lb_redis_status lb_redis_wire_feed(lb_redis *r, const void *data, size_t len, int *complete)
{
    *complete = 0;
    if (!r->ext || !r->ext_open || r->ext_failed)
        return lb_redis_set_error(r, LB_REDIS_ERR_IO, "no round trip is waiting for replies");
    if (r->ext_got == r->ext_n) {
        r->ext_failed = 1;
        return len ? more_replies_than_commands(r) : LB_REDIS_OK;
    }
    if (len && feed_reader(r, data, len, &r->ext_received) != LB_REDIS_OK) {
        r->ext_failed = 1;
        return r->status;
    }
    if (take_replies(r, r->ext_n, r->replies, &r->ext_got) != LB_REDIS_OK) {
        r->ext_failed = 1;
        return r->status;
    }
    *complete = r->ext_got == r->ext_n;
    return LB_REDIS_OK;
}

lb_redis_status lb_redis_wire_replies(lb_redis *r, int flags, lb_reply ***replies)
{
    clear_error(r);
    *replies = NULL;
    if (!r->ext || r->ext_failed || r->ext_n == 0 || r->ext_got != r->ext_n)
        return lb_redis_set_error(r, LB_REDIS_ERR_IO, "the round trip is not complete");
    *replies = r->replies;
    return reply_errors(r, r->ext_n, flags);
}

lb_redis_status lb_redis_command_argv(lb_redis *r, int argc, const char *const *argv,
                                      const size_t *lens, int flags, lb_reply **reply)
{
    lb_redis_batch b;
    lb_reply **rs = NULL;
    lb_redis_batch_init(&b);
    lb_redis_batch_argv(&b, argc, argv, lens);
    lb_redis_status st = lb_redis_exec(r, &b, flags, &rs);
    lb_redis_batch_free(&b);
    if (reply)
        *reply = rs ? rs[0] : NULL;
    return st;
}

lb_redis_status lb_redis_key_pttl(lb_redis *r, const void *key, size_t keylen, long long *ms)
{
    lb_redis_batch b;
    lb_reply **rs = NULL;
    lb_redis_batch_init(&b);
    lb_redis_batch_cmd(&b, 2);
    lb_redis_batch_arg(&b, "PTTL", 4);
    lb_redis_batch_arg(&b, key, keylen);
    lb_redis_batch_expect_elements(&b, 0);
    lb_redis_batch_expect_bytes(&b, 0);
    lb_redis_status st = lb_redis_exec(r, &b, LB_REDIS_IDEMPOTENT, &rs);
    lb_redis_batch_free(&b);
    if (st != LB_REDIS_OK)
        return st;
    /* An integer: milliseconds left, -1 (no expiry) or -2 (no key). */
    if (!lb_reply_int_in(rs[0], -2, LLONG_MAX)) {
        lb_redis_disconnect(r);
        return lb_redis_set_error(r, LB_REDIS_ERR_PROTOCOL,
                                  "protocol error: a reply to PTTL that does not fit the command "
                                  "sent (type, length or value); connection dropped");
    }
    *ms = rs[0]->integer;
    return LB_REDIS_OK;
}

/* --------------------------------------------------------------- key names */

const char *lb_redis_show(const char *k, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)k[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    if (o + 8 >= cap && n)
        o += (size_t)snprintf(buf + o, cap - o, "...");
    buf[o < cap ? o : cap - 1] = '\0';
    return buf;
}

/* Redis Cluster's rule: the first '{' and the first '}' after it, with at
 * least one byte between. */
static int has_hash_tag(const char *k, size_t n)
{
    const char *o = memchr(k, '{', n);
    if (!o)
        return 0;
    const char *c = memchr(o + 1, '}', n - (size_t)(o + 1 - k));
    return c && c > o + 1;
}

int lb_redis_slot_names(const void *key, size_t keylen, char **key_out, char **base_out,
                        size_t *baselen)
{
    int wrap = !has_hash_tag(key, keylen) && !memchr(key, '}', keylen);
    char *k = malloc(keylen);
    char *base = malloc(keylen + (wrap ? 2 : 0));
    *key_out = *base_out = NULL;
    if (!k || !base) {
        free(k);
        free(base);
        return -1;
    }
    memcpy(k, key, keylen);
    if (wrap) {
        base[0] = '{';
        memcpy(base + 1, key, keylen);
        base[keylen + 1] = '}';
    } else {
        memcpy(base, key, keylen);
    }
    *key_out = k;
    *base_out = base;
    *baselen = keylen + (wrap ? 2 : 0);
    return 0;
}

char *lb_redis_temp_name(const char *base, size_t baselen, const char *what, unsigned long seq,
                         size_t *len)
{
    char *tmp = malloc(baselen + strlen(what) + 96);
    if (!tmp)
        return NULL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    memcpy(tmp, base, baselen);
    *len = baselen + (size_t)sprintf(tmp + baselen, ":%s:%ld:%lu:%lld%09ld", what, (long)getpid(),
                                     seq, (long long)ts.tv_sec, ts.tv_nsec);
    return tmp;
}
