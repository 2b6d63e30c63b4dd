/* redis_conn.h: one Redis connection on hiredis (>= 0.14), its URL, and pipelining.
 *
 * Pure C, no Python.  hiredis is used for connecting (TCP with timeout, unix
 * sockets, IPv6) and for its RESP2 reply parser; the socket I/O of a round
 * trip is done here with poll() on a non-blocking fd, so that
 *   - a whole batch goes out as one buffer (one write when the socket takes it),
 *     and replies are read while the rest is still being written (no deadlock
 *     on huge pipelines);
 *   - the operation timeout is an inactivity timeout (no byte could be sent or
 *     received for timeout_ms -> LB_REDIS_ERR_TIMEOUT), as redis-py's
 *     socket_timeout;
 *   - we know whether anything of the batch was answered (for safe retry).
 * RESP2 only: every server speaks it.  TLS (OpenSSL, redis_tls.c) is done here
 * too, over the same round trip and reply checks: hiredis 0.14 has none.
 *
 * Threads: an lb_redis is used by one thread at a time (the binding holds a
 * lock around every call and releases the GIL during it).  There is no locking
 * inside and no global state.
 *
 * Fork: the connection remembers the pid that opened its socket.  When it is
 * used in another process (a forked child), the inherited socket is closed
 * without sending anything on it and a new connection is opened.
 *
 * Connection discipline: any failure in the middle of a round trip (timeout,
 * EOF, reset, protocol error) discards the connection: a reply read for the
 * wrong command is the worst bug a client can have.  A server error reply
 * (-ERR ..., -WRONGTYPE ...) does not: every reply of the batch is still read,
 * so the stream stays in step and the connection is kept. */
#ifndef LB_REDIS_CONN_H
#define LB_REDIS_CONN_H

#include <stddef.h>
#include <stdint.h>

/* Error kinds.  Suggested Python mapping in brackets. */
typedef enum {
    LB_REDIS_OK = 0,
    LB_REDIS_ERR_CONNECT,   /* cannot connect (refused, unknown host, ...)  [RedisConnectionError] */
    LB_REDIS_ERR_IO,        /* connection lost during a round trip          [RedisConnectionError] */
    LB_REDIS_ERR_TIMEOUT,   /* connect or operation timed out               [RedisTimeoutError]    */
    LB_REDIS_ERR_PROTOCOL,  /* unparsable or unexpected reply               [RedisError]           */
    LB_REDIS_ERR_REPLY,     /* server error reply; errstr = its text        [RedisResponseError]   */
    LB_REDIS_ERR_WRONGTYPE, /* -WRONGTYPE reply; errstr names the key       [WrongTypeError]       */
    LB_REDIS_ERR_AUTH,      /* AUTH refused (text in errstr)                [RedisConnectionError] */
    LB_REDIS_ERR_URL,       /* bad URL or config                            [ValueError]           */
    LB_REDIS_ERR_TLS,       /* TLS not available (unused since OpenSSL)     [NotSupportedError]    */
    LB_REDIS_ERR_MISMATCH,  /* stored geometry differs (redis_bitmap)       [GeometryMismatchError]*/
    LB_REDIS_ERR_NOTFOUND,  /* no filter stored at that key (redis_bitmap)  [BloomError/KeyError]  */
    LB_REDIS_ERR_ARG,       /* invalid argument                             [ValueError]           */
    LB_REDIS_ERR_NOMEM,     /* allocation failed                            [MemoryError]          */
    LB_REDIS_ERR_FULL,      /* non-scaling RedisBloom filter full (redisbloom) [FilterFullError]   */
    LB_REDIS_ERR_NOMODULE,  /* no BF.* commands on the server (redisbloom)  [ModuleMissingError]   */
    LB_REDIS_ERR_TOOLARGE,  /* the filter would not fit (size limit, maxmemory) [InvalidCapacityError] */
    LB_REDIS_ERR_NOTOWNED   /* the key holds data this library did not write [KeyNotOwnedError]   */
} lb_redis_status;

/* A short constant name of a status ("connect", "io", "timeout", ...). */
const char *lb_redis_status_name(lb_redis_status st);

/* ------------------------------------------------------------------ config */

/* Connection settings.  String fields are malloc'd, owned by the config, and
 * freed by lb_redis_config_free (set them with lb_redis_config_set or strdup).
 * NULL means "not given".  lb_redis_new copies everything it needs. */
typedef struct {
    char *host;              /* TCP host name or address (IPv6 without brackets); NULL -> "localhost" */
    int port;                /* 1..65535; 0 -> 6379 */
    char *unix_path;         /* unix socket path; when set, host/port are ignored */
    int db;                  /* SELECT db when != 0 */
    char *username;          /* Redis 6 ACL user: AUTH username password */
    char *password;          /* AUTH password (AUTH user "" when only a username is given) */
    int connect_timeout_ms;  /* 0 = no timeout (the OS's) */
    int timeout_ms;          /* operation (inactivity) timeout, 0 = none */
    /* TLS (rediss://, redis-py's ssl_* keywords); see redis_tls.h */
    int tls;                 /* 1: TLS over the TCP connection (not for unix sockets) */
    char *tls_ca_certs;      /* CA file (PEM); NULL with tls_ca_path NULL: the system's CAs */
    char *tls_ca_path;       /* CA directory (hashed names) */
    char *tls_certfile;      /* client certificate (PEM) */
    char *tls_keyfile;       /* its key (PEM); NULL: in tls_certfile */
    int tls_cert_reqs;       /* 0 "required" (default), 1 "optional", 2 "none" (verify nothing) */
    int tls_check_hostname;  /* 0 default (on), 1 on, 2 off; never with cert_reqs "none" */
    /* Sentinel (redis+sentinel://, see redis_sentinel.h): when sentinel_service is set,
     * each new connection asks the sentinels for the primary of that service (host and
     * port above are then the primary last found) and checks it with ROLE. */
    char *sentinels;         /* "host:port,host:port" (plain TCP) */
    char *sentinel_service;  /* the name the sentinels monitor */
    char *sentinel_username; /* AUTH for the sentinels (the URL's user and password are */
    char *sentinel_password; /*  the data nodes') */
    /* Redis Cluster (redis+cluster://, see redis_cluster.h): when cluster_nodes is set,
     * the connection routes each batch to the node that serves its keys' slot. */
    char *cluster_nodes;     /* seed nodes "host:port,host:port" */
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

#define LB_REDIS_CERT_REQUIRED 0
#define LB_REDIS_CERT_OPTIONAL 1
#define LB_REDIS_CERT_NONE 2

void lb_redis_config_init(lb_redis_config *cfg);   /* all zero / NULL */
void lb_redis_config_free(lb_redis_config *cfg);   /* frees the strings, re-inits */
/* Replace one string field (a pointer to a field of cfg) by a copy of value
 * (NULL clears it).  Returns LB_REDIS_OK or LB_REDIS_ERR_NOMEM. */
lb_redis_status lb_redis_config_set(char **field, const char *value);

/* Parse a URL in redis-py's form into cfg (cfg is initialised first):
 *   redis://[[username]:password@]host[:port][/db][?option=value&...]
 *   redis://[username@]host...          (username only, as redis-py)
 *   redis://[::1]:6380/2                (IPv6 in brackets)
 *   unix://[[username]:password@]/path/to/sock[?db=N&password=...]
 *   rediss://...                        TLS (cfg->tls = 1)
 * Userinfo and option values are percent-decoded.  Options: db, username,
 * password, socket_timeout and socket_connect_timeout (seconds, may be
 * fractional), and for TLS ssl_cert_reqs (required|optional|none),
 * ssl_check_hostname (true|false), ssl_ca_certs, ssl_ca_path, ssl_certfile,
 * ssl_keyfile.  An option given in the query wins over the URL's own field
 * (as redis-py).  Empty host -> localhost, no port -> 6379, no db -> 0.
 * On error returns LB_REDIS_ERR_URL with a message in
 * err (err may be NULL) and leaves cfg initialised and empty. */
lb_redis_status lb_redis_config_from_url(lb_redis_config *cfg, const char *url,
                                         char *err, size_t errlen);

/* Parse "host[:port],host[:port]..." (n bytes) into *out (malloc'd, replacing
 * it), normalised as "host:port,..." (default_port when left out; no IPv6
 * literals).  what names an entry in messages ("sentinel").  0; -1 with a
 * reason in why; -2 out of memory. */
int lb_redis_parse_host_list(const char *s, size_t n, int default_port, const char *what,
                             char **out, char *why, size_t whylen);

/* -------------------------------------------------------------- connection */

typedef struct lb_redis lb_redis;

/* Create an unconnected connection object (connects lazily on first use).
 * Returns NULL when out of memory. */
lb_redis *lb_redis_new(const lb_redis_config *cfg);
/* Close the socket (nothing is sent) and free everything.  NULL is fine. */
void lb_redis_free(lb_redis *r);

/* For a forked child whose parent had another thread inside a call on r at
 * the fork: r's reader, arena and buffers may be half-changed, so nothing of
 * r is freed or read but its settings.  lb_redis_new_like makes a new,
 * unconnected connection with r's settings; lb_redis_abandon closes this
 * process's copy of r's socket (nothing is sent) and leaves the rest of r
 * leaked on purpose: r must not be used or freed afterwards. */
lb_redis *lb_redis_new_like(const lb_redis *r);
void lb_redis_abandon(lb_redis *r);

/* Connect now if not connected (or connected by another process): connect,
 * AUTH, SELECT.  Not needed before lb_redis_exec, which does it itself. */
lb_redis_status lb_redis_connect(lb_redis *r);
/* Drop the connection (close the fd, send nothing); the next call reconnects. */
void lb_redis_disconnect(lb_redis *r);
/* 1 when a socket is open and belongs to this process. */
int lb_redis_is_connected(const lb_redis *r);
/* Change the operation timeout (ms, 0 = none); applies from the next round trip. */
void lb_redis_set_timeout(lb_redis *r, int timeout_ms);

/* The text of the last error ("" after success).  For REPLY and WRONGTYPE it
 * is the server's text (WRONGTYPE: followed by " (key 'name')" when the layer
 * above knows the key).  Valid until the next call on r. */
const char *lb_redis_errstr(const lb_redis *r);
/* The status of the last call. */
lb_redis_status lb_redis_last_status(const lb_redis *r);
/* For REPLY/WRONGTYPE: index in the batch of the first command whose reply
 * was an error, else -1. */
long lb_redis_err_index(const lb_redis *r);
/* 1 when the last lb_redis_exec failed with LB_REDIS_ERR_IO on a connection
 * opened by an earlier call before any byte of a reply came back (a stale
 * connection, as after a server restart): the batch was not answered and an
 * idempotent one may be sent again on a new connection.  Layers that must do
 * something on every new connection before their batch (redis_bitmap checks
 * its meta key) exec without LB_REDIS_IDEMPOTENT and retry themselves. */
int lb_redis_last_stale(const lb_redis *r);
/* Set the error state (for the layers above); returns st.  printf-style. */
lb_redis_status lb_redis_set_error(lb_redis *r, lb_redis_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Number of connections this object opened so far, and of round trips it
 * started (handshakes included): tests, diagnostics, and the layers above
 * (redis_bitmap re-checks its meta key after a reconnect). */
unsigned long lb_redis_connect_count(const lb_redis *r);
unsigned long lb_redis_roundtrip_count(const lb_redis *r);

/* ------------------------------------------------------------------ batches */

/* A pipeline being built: commands are encoded straight into one RESP buffer.
 * Usage:
 *     lb_redis_batch b; lb_redis_batch_init(&b);
 *     lb_redis_batch_cmd(&b, 3); arg_str(&b,"SET"); arg(&b,key,len); arg_u64(&b,1);
 *     ...
 *     lb_redis_exec(r, &b, flags, &replies);
 *     lb_redis_batch_free(&b);
 * Append errors (out of memory, wrong argument count) are sticky: they are
 * reported by lb_redis_exec (NOMEM / ARG) without sending anything. */
typedef struct {
    char *buf;
    size_t len, cap;
    size_t ncmds;       /* commands begun */
    long args_left;     /* arguments still owed to the current command */
    int failed;         /* 0, or LB_REDIS_ERR_NOMEM / LB_REDIS_ERR_ARG */
    size_t max_elements; /* see lb_redis_batch_expect_elements */
    int max_set;         /* 0: nobody asked, the default bound applies */
    size_t max_bytes;    /* see lb_redis_batch_expect_bytes */
    int bytes_set;       /* 0: no byte bound */
    /* The Redis Cluster slot of the batch's keys (see redis_cluster.h), kept as
     * commands are appended: a command's first key is its argument 1 (2 for
     * BITOP, OBJECT, MEMORY), unless the command is keyless (INFO, PING, ...). */
    long cmd_argc;       /* arguments of the command being appended */
    long cmd_key;        /* ... the index of its key, 0: none */
    int has_slot;        /* a keyed command was appended */
    int multi_slot;      /* two keys in different slots */
    unsigned slot;       /* the slot of the first key */
    size_t multi_cmd;    /* multi_slot: the first command in another slot */
    size_t key_off, key_len; /* the last key (its bytes in buf) */
} lb_redis_batch;

/* The most array elements one reply of this batch may hold, nested arrays'
 * elements included (e.g. BITFIELD with k GETs: k; BF.MEXISTS of n items: n;
 * commands answering no array: 0 is fine, they never need any).  The bound
 * of the batch is the largest any of its commands asked for; a batch that
 * asks nothing gets LB_REDIS_DEFAULT_MAX_ELEMENTS.  A reply announcing more
 * is a protocol error before anything is allocated for it; within the bound,
 * a reply's memory grows with the elements that arrived, not with the
 * length its header announced.  lb_redis_batch_clear forgets it. */
#define LB_REDIS_DEFAULT_MAX_ELEMENTS ((size_t)1 << 20)
void lb_redis_batch_expect_elements(lb_redis_batch *b, size_t n);

/* The reply bytes the batch's data can take: each call adds n (e.g. the
 * bytes a GETRANGE asked for).  Once a batch called it, the round trip may
 * receive at most the sum plus LB_REDIS_REPLY_SLACK bytes per command (for
 * the framing, integers, statuses and error texts); more is a protocol
 * error as soon as it arrives, so a bulk header like "$1000000000" followed
 * by data makes the client buffer at most the bound plus one read (64 KiB),
 * not the gigabyte.  A batch that never calls it has no byte bound (its
 * memory still grows only with what arrives).  lb_redis_batch_clear forgets
 * it. */
#define LB_REDIS_REPLY_SLACK 512
void lb_redis_batch_expect_bytes(lb_redis_batch *b, size_t n);

void lb_redis_batch_init(lb_redis_batch *b);
void lb_redis_batch_free(lb_redis_batch *b);
/* Empty the batch, keeping its buffer (shrunk when it grew past 4 MiB). */
void lb_redis_batch_clear(lb_redis_batch *b);
/* Begin a command of argc >= 1 arguments (the command name included). */
void lb_redis_batch_cmd(lb_redis_batch *b, int argc);
void lb_redis_batch_arg(lb_redis_batch *b, const void *data, size_t len);
void lb_redis_batch_arg_str(lb_redis_batch *b, const char *s);
void lb_redis_batch_arg_u64(lb_redis_batch *b, uint64_t v);
void lb_redis_batch_arg_i64(lb_redis_batch *b, int64_t v);
/* Append one command already encoded (RESP array of bulk strings), as
 * lb_redis_batch_command_at gives: a sub-batch of another batch's commands. */
void lb_redis_batch_raw(lb_redis_batch *b, const char *cmd, size_t len);
/* Where each command of b starts: off[i] for i < b->ncmds, and off[ncmds] =
 * b->len (off has ncmds + 1 entries).  0, or -1 when b is not well formed. */
int lb_redis_batch_offsets(const lb_redis_batch *b, size_t *off);
/* A whole command from an argv array (lens may be NULL for C strings). */
void lb_redis_batch_argv(lb_redis_batch *b, int argc, const char *const *argv, const size_t *lens);

/* ------------------------------------------------------------------ replies */

enum {
    LB_REPLY_STRING = 1,
    LB_REPLY_ARRAY = 2,
    LB_REPLY_INTEGER = 3,
    LB_REPLY_NIL = 4,
    LB_REPLY_STATUS = 5,
    LB_REPLY_ERROR = 6
};

/* One reply (the same type numbers as hiredis's REDIS_REPLY_*).  Replies live
 * in an arena inside the lb_redis and stay valid until the next round trip
 * (or lb_redis_free / disconnect). */
typedef struct lb_reply {
    int type;
    long long integer;          /* INTEGER */
    size_t len;                 /* STRING/STATUS/ERROR: bytes; ARRAY: elements */
    char *str;                  /* STRING/STATUS/ERROR: NUL-terminated too */
    struct lb_reply **element;  /* ARRAY */
} lb_reply;

/* Flags of lb_redis_exec. */
#define LB_REDIS_IDEMPOTENT 1   /* the batch may run twice (SETBIT, GETBIT, BITFIELD,
                                   EXPIRE, DEL, SET of the same value, ...) */
#define LB_REDIS_RAW_ERRORS 2   /* do not turn error replies into a failed status */
#define LB_REDIS_KEPT_CONN 4    /* the caller prepared the open connection (redis_bitmap
                                   checked its meta key on it): if exec must discard it
                                   (unexpected input pending), send nothing and return
                                   LB_REDIS_ERR_IO with lb_redis_last_stale() = 1 */
#define LB_REDIS_READ_REPLICA 8 /* the batch only reads: a cluster connection whose config
                                   asks for replica reads may send it to a replica */
#define LB_REDIS_WRITE 16       /* the batch writes: with wait_replicas, WAIT follows it */

/* Send the batch in one round trip and read its b->ncmds replies in order.
 *
 * On LB_REDIS_OK, *replies (if replies != NULL) points to b->ncmds replies.
 * Unless LB_REDIS_RAW_ERRORS is given, the first error reply makes the call
 * return LB_REDIS_ERR_WRONGTYPE (a reply starting with "WRONGTYPE") or
 * LB_REDIS_ERR_REPLY, with the server text in errstr and its index in
 * lb_redis_err_index; *replies is still set (all replies were read) and the
 * connection is kept.
 *
 * CONNECT, AUTH, TIMEOUT, IO, PROTOCOL: the connection is discarded (the next
 * call reconnects); *replies is NULL.
 *
 * Retry: with LB_REDIS_IDEMPOTENT, when a connection opened by an earlier call
 * turns out dead (EOF / reset / broken pipe) before any byte of a reply came
 * back, as after a server restart, the batch is sent once more on a fresh
 * connection.  Timeouts are never retried; non-idempotent batches never are.
 *
 * A kept connection with input pending before anything is sent (a late or
 * unsolicited reply, or the server's EOF) is out of step: it is discarded,
 * unread, and the batch goes out on a new connection (with LB_REDIS_KEPT_CONN:
 * nothing is sent, see above).
 *
 * An empty batch returns LB_REDIS_OK without connecting. */
lb_redis_status lb_redis_exec(lb_redis *r, const lb_redis_batch *b, int flags,
                              lb_reply ***replies);

/* For redis_cluster.c, which runs a cluster connection's batches on one
 * lb_redis per node: take over the status, text and staleness of another
 * connection's last call (returns the status); turn error replies into a
 * status as lb_redis_exec does (unless flags has LB_REDIS_RAW_ERRORS). */
lb_redis_status lb_redis_take_error(lb_redis *r, const lb_redis *from);
lb_redis_status lb_redis_check_replies(lb_redis *r, lb_reply **rs, size_t n, int flags);

/* Convenience for one command (tests, handshakes): builds a batch and runs
 * it; *reply valid until the next call. */
lb_redis_status lb_redis_command_argv(lb_redis *r, int argc, const char *const *argv,
                                      const size_t *lens, int flags, lb_reply **reply);

/* -------------------------------------------------------------------- wire */

/* The sans-IO side, for a transport outside this file (the asyncio one of
 * ling_bloom.aio): the same requests, the same reply reader with the same
 * bounds, and the same checks as lb_redis_exec, with the socket I/O left to
 * the caller.  Once used, the connection has no socket of its own
 * (lb_redis_exec refuses).  One request at a time:
 *
 *     lb_redis_wire_opened(r)              the transport connected
 *     lb_redis_wire_handshake_due(r, &hb)  1: send AUTH/SELECT first (hb), then
 *                                          lb_redis_wire_handshake_done(r) checks them
 *                                          (0: none due, -1: out of memory)
 *     lb_redis_wire_begin(r, &batch)       then send batch.buf[0..len)
 *     lb_redis_wire_feed(r, bytes, n, &c)  with what arrives, until c == 1
 *     lb_redis_wire_replies(r, flags, &rs) the replies, error replies turned into a
 *                                          status as lb_redis_exec does
 *     lb_redis_wire_closed(r)              the transport dropped the connection
 *
 * Any failure of begin or feed (a protocol error, a reply past the bounds,
 * input nobody asked for) means the stream is out of step: the caller drops
 * the connection, as lb_redis_exec would.  lb_redis_is_connected tells
 * whether the transport's connection is open (and was opened in this
 * process); lb_redis_connect_count counts wire_opened calls too. */
/* The connection's settings (for a transport outside C to connect with). */
const lb_redis_config *lb_redis_get_config(const lb_redis *r);
lb_redis_status lb_redis_wire_opened(lb_redis *r);
void lb_redis_wire_closed(lb_redis *r);
int lb_redis_wire_handshake_due(lb_redis *r, lb_redis_batch *hb);
lb_redis_status lb_redis_wire_handshake_done(lb_redis *r);
lb_redis_status lb_redis_wire_begin(lb_redis *r, const lb_redis_batch *b);
lb_redis_status lb_redis_wire_feed(lb_redis *r, const void *data, size_t len, int *complete);
lb_redis_status lb_redis_wire_replies(lb_redis *r, int flags, lb_reply ***replies);

/* PTTL key: *ms is the milliseconds left, -1 when the key has no expiry, -2
 * when there is no key.  Any other reply is a protocol error (connection
 * dropped). */
lb_redis_status lb_redis_key_pttl(lb_redis *r, const void *key, size_t keylen, long long *ms);

/* --------------------------------------------------------------- key names */

/* For the layers above (redis_bitmap, redisbloom), which keep a user key and
 * name other keys after it. */

/* A printable rendering of a binary key for messages (truncated, \xNN);
 * returns buf. */
const char *lb_redis_show(const char *k, size_t n, char *buf, size_t cap);

/* Copy key (binary-safe, keylen >= 1) into *key_out, and build into *base_out
 * the prefix of the names that must land in key's Redis Cluster slot: key
 * when it has a hash tag (the first '{' followed later by a '}' with at least
 * one byte between them) or contains a '}', else "{" key "}" (see
 * redis_bitmap.h).  Both malloc'd.  0, or -1 when out of memory (then both
 * are NULL). */
int lb_redis_slot_names(const void *key, size_t keylen, char **key_out, char **base_out,
                        size_t *baselen);

/* A temporary key name unique to this call: base ":" what ":" pid ":" seq
 * ":" time, in base's slot.  malloc'd (its length in *len), or NULL when out
 * of memory. */
char *lb_redis_temp_name(const char *base, size_t baselen, const char *what, unsigned long seq,
                         size_t *len);

#endif
