/* config.h: the settings of a Redis client, and the URL (redis-py's form)
 * they are read from.  Pure C, no I/O. */
#ifndef LB_REDIS_CONFIG_H
#define LB_REDIS_CONFIG_H

#include <stddef.h>

#include "status.h"

/* Connection settings.  String fields are malloc'd, owned by the config, and
 * freed by lb_redis_config_free (set them with lb_redis_config_set or strdup).
 * NULL means "not given".  A client copies everything it needs. */
typedef struct {
    char *host;              /* TCP host name or address (IPv6 without brackets); NULL -> "localhost" */
    int port;                /* 1..65535; 0 -> 6379 */
    char *unix_path;         /* unix socket path; when set, host/port are ignored */
    int db;                  /* SELECT db when != 0 */
    char *username;          /* Redis 6 ACL user: AUTH username password */
    char *password;          /* AUTH password (AUTH user "" when only a username is given) */
    int connect_timeout_ms;  /* 0 = no timeout (the OS's) */
    int timeout_ms;          /* operation (inactivity) timeout, 0 = none */
    /* TLS (rediss://, redis-py's ssl_* keywords); see tls.h */
    int tls;                 /* 1: TLS over the TCP connection (not for unix sockets) */
    char *tls_ca_certs;      /* CA file (PEM); NULL with tls_ca_path NULL: the system's CAs */
    char *tls_ca_path;       /* CA directory (hashed names) */
    char *tls_certfile;      /* client certificate (PEM) */
    char *tls_keyfile;       /* its key (PEM); NULL: in tls_certfile */
    int tls_cert_reqs;       /* 0 "required" (default), 1 "optional", 2 "none" (verify nothing) */
    int tls_check_hostname;  /* 0 default (on), 1 on, 2 off; never with cert_reqs "none" */
    /* Sentinel (redis+sentinel://, see sentinel.h): when sentinel_service is set,
     * each new connection asks the sentinels for the primary of that service (host and
     * port above are then the primary last found) and checks it with ROLE. */
    char *sentinels;         /* "host:port,host:port" (plain TCP) */
    char *sentinel_service;  /* the name the sentinels monitor */
    char *sentinel_username; /* AUTH for the sentinels (the URL's user and password are */
    char *sentinel_password; /*  the data nodes') */
    /* Redis Cluster (redis+cluster://, see cluster.h): when cluster_nodes is set,
     * the client routes each batch to the node that serves its keys' slot. */
    char *cluster_nodes;     /* seed nodes "host:port,host:port" */
#define LB_REDIS_CLUSTER_MAX_SEEDS 1000
    int cluster_replica_reads; /* 1: batches sent with LB_REDIS_READ_REPLICA go to a replica */
    int cluster_retry_ms;    /* retry budget for a cluster in transition; 0: the default */
    /* Replication: a batch sent with LB_REDIS_WRITE is followed, in the same pipeline, by
     * WAIT wait_replicas wait_timeout_ms; fewer replicas acknowledging in time make the
     * call fail with LB_REDIS_ERR_TIMEOUT (the writes are done on the primary, but not
     * known to be on that many replicas). */
    int wait_replicas;       /* 0: no WAIT */
    int wait_timeout_ms;     /* > 0 when wait_replicas is set (0: LB_REDIS_WAIT_DEFAULT_MS) */
} lb_redis_config;

#define LB_REDIS_WAIT_DEFAULT_MS 1000
#define LB_SENTINEL_DEFAULT_PORT 26379

#define LB_REDIS_CERT_REQUIRED 0
#define LB_REDIS_CERT_OPTIONAL 1
#define LB_REDIS_CERT_NONE 2

void lb_redis_config_init(lb_redis_config *cfg);   /* all zero / NULL */
void lb_redis_config_free(lb_redis_config *cfg);   /* frees the strings, re-inits */
/* Replace one string field (a pointer to a field of cfg) by a copy of value
 * (NULL clears it).  Returns LB_REDIS_OK or LB_REDIS_ERR_NOMEM. */
lb_redis_status lb_redis_config_set(char **field, const char *value);
/* dst (initialised or freed before) = a deep copy of src.  OK or NOMEM (then
 * dst is empty). */
lb_redis_status lb_redis_config_copy(lb_redis_config *dst, const lb_redis_config *src);

/* Parse a URL in redis-py's form into cfg (cfg is initialised first):
 *   redis://[[username]:password@]host[:port][/db][?option=value&...]
 *   redis://[username@]host...          (username only, as redis-py)
 *   redis://[::1]:6380/2                (IPv6 in brackets)
 *   unix://[[username]:password@]/path/to/sock[?db=N&password=...]
 *   rediss://...                        TLS (cfg->tls = 1)
 *   redis+sentinel://host:port[,host:port...]/service_name[/db]
 *   redis+cluster://host:port[,host:port...][/0]   at most LB_REDIS_CLUSTER_MAX_SEEDS
 *                                       nodes (the nodes it learns from the slot map
 *                                       come on top)
 * Userinfo and option values are percent-decoded.  The options are a table
 * (config.c): db, username, password, socket_timeout and
 * socket_connect_timeout (seconds, may be fractional), for TLS ssl_cert_reqs
 * (required|optional|none), ssl_check_hostname (true|false), ssl_ca_certs,
 * ssl_ca_path, ssl_certfile, ssl_keyfile; sentinel_username,
 * sentinel_password; read_from_replicas and cluster_retry_timeout (cluster);
 * wait_replicas, wait_timeout.  An option given in the query wins over the
 * URL's own field (as redis-py).  Empty host -> localhost, no port -> 6379,
 * no db -> 0.  On error returns LB_REDIS_ERR_URL (or NOMEM) with a message in
 * err (err may be NULL) and leaves cfg initialised and empty. */
lb_redis_status lb_redis_config_from_url(lb_redis_config *cfg, const char *url,
                                         char *err, size_t errlen);

/* Parse "host[:port],host[:port]..." (n bytes) into *out (malloc'd, replacing
 * it), normalised as "host:port,..." (default_port when left out; no IPv6
 * literals).  what names an entry in messages ("sentinel").  0; -1 with a
 * reason in why; -2 out of memory. */
int lb_redis_parse_host_list(const char *s, size_t n, int default_port, const char *what,
                             char **out, char *why, size_t whylen);

/* The next entry of a normalised host list at *p ("host:port,..."): the host
 * (NUL-ended in host[hostlen]) and port; *p moves past it.  1, or 0 at the
 * end (or for an entry whose host does not fit: skipped, *port = 0). */
int lb_redis_host_list_next(const char **p, char *host, size_t hostlen, int *port);

/* "host:port" of cfg for messages ("unix:path", "[v6]:port"). */
void lb_redis_config_where(const lb_redis_config *cfg, char *buf, size_t n);

#endif
