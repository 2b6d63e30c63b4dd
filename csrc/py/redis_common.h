/* redis_common.h: what RedisFilter and RedisBloomFilter share: the
 * connection keywords (redis-py's names), the Python exception for each
 * lb_redis_status, and the part of the object that holds the connection and
 * the key, with what works on it alone. */
#ifndef LB_PY_REDIS_COMMON_H
#define LB_PY_REDIS_COMMON_H

#include "keys.h"
#include "module.h"
#include "client.h"
#include "factory.h"
#include "op.h"
#include "sharded.h"

/* The keywords, NULL when not given. */
typedef struct {
    PyObject *url, *host, *port, *db, *username, *password, *unix_socket_path, *socket_timeout,
        *socket_connect_timeout;
    /* TLS, redis-py's names */
    PyObject *ssl, *ssl_ca_certs, *ssl_ca_path, *ssl_certfile, *ssl_keyfile, *ssl_cert_reqs,
        *ssl_check_hostname;
    /* replication: WAIT after each write (see lb_redis_config) */
    PyObject *wait_replicas, *wait_timeout;
} lb_conn_kw;

/* For a kwlist: the names in the order of lb_conn_kw's fields. */
#define LB_CONN_KWNAMES                                                                       \
    "url", "host", "port", "db", "username", "password", "unix_socket_path", "socket_timeout", \
        "socket_connect_timeout", "ssl", "ssl_ca_certs", "ssl_ca_path", "ssl_certfile",        \
        "ssl_keyfile", "ssl_cert_reqs", "ssl_check_hostname", "wait_replicas", "wait_timeout"
/* ...and the matching PyArg format units and addresses. */
#define LB_CONN_KWFORMAT "OOOOOOOOOOOOOOOOOO"
#define LB_CONN_KWADDR(kw)                                                            \
    &(kw).url, &(kw).host, &(kw).port, &(kw).db, &(kw).username, &(kw).password,      \
        &(kw).unix_socket_path, &(kw).socket_timeout, &(kw).socket_connect_timeout, &(kw).ssl,  \
        &(kw).ssl_ca_certs, &(kw).ssl_ca_path, &(kw).ssl_certfile, &(kw).ssl_keyfile,            \
        &(kw).ssl_cert_reqs, &(kw).ssl_check_hostname, &(kw).wait_replicas, &(kw).wait_timeout

/* Operation and connect timeouts when none is given (seconds); None means
 * no timeout at all. */
#define LB_DEFAULT_SOCKET_TIMEOUT 10.0
#define LB_DEFAULT_CONNECT_TIMEOUT 5.0

/* Build the configuration: the URL first (redis://, rediss://, unix://), then
 * every keyword given overrides what the URL said.  No URL and no host or
 * socket path: localhost:6379.  0, or -1 with ValueError / TypeError, or
 * FileNotFoundError (an OSError) for a TLS file that cannot be read. */
int lb_conn_config(lb_state *st, const lb_conn_kw *kw, lb_redis_config *cfg);

/* Raise the exception for a failed call on conn (its text from
 * lb_redis_errstr).  key, when given, is the filter's key (set as .key on
 * WrongTypeError). */
void lb_raise_redis(lb_state *st, lb_redis_status status, const lb_redis *conn, PyObject *key);

/* Raise an exception of type exc with message msg and the given attributes
 * (name, value pairs, NULL-terminated; values are borrowed). */

/* ---- the part both filter objects start with ---------------------------- */

typedef struct lb_redis_filter_s lb_redis_filter;

/* The type's add or test of n keys (run with the GIL released). */
typedef lb_redis_status (*lb_redis_keys_fn)(lb_redis_filter *f, const lb_key *keys, size_t n,
                                            uint8_t *out);

/* What each type supplies to the shared methods below. */
typedef struct {
    lb_redis_keys_fn add, test;        /* single keys */
    lb_chunk_fn add_chunk, test_chunk; /* batches (lb_run_batch) */
    void (*batch_begin)(void);         /* before a batch; may be NULL */
    /* Raise the exception for a failed call (not a batch: those go through
     * raise_backend, set in the base). */
    void (*raise)(lb_redis_filter *f, lb_redis_status status);
    void (*raise_backend)(lb_base *b);
    /* Free what the type built on the connection, then call
     * lb_redis_filter_release. */
    void (*release)(lb_base *b);
    /* Begin an operation (LB_REDIS_WIRE_*) for the _wire_* methods: the step
     * machine (csrc/redis/op.h) that the blocking calls run too. */
    lb_redis_status (*wire_begin)(lb_redis_filter *f, int kind, const lb_key *keys, size_t n,
                                  uint8_t *out, lb_op **op);
    /* f->conn was replaced (by the asyncio transport's client): point what
     * the type built on the connection at it. */
    void (*rebind)(lb_redis_filter *f);
    /* The shards (shards=N), or NULL. */
    lb_sharded *(*sharded)(lb_redis_filter *f);
} lb_redis_ops;

/* The kinds of wire operation (the same numbers as LB_BITMAP_WIRE_* and
 * LB_BF_WIRE_* of the core). */
#define LB_REDIS_WIRE_ADD 1
#define LB_REDIS_WIRE_TEST 2
#define LB_REDIS_WIRE_RESET 3

struct lb_redis_filter_s {
    lb_base base;
    lb_redis *conn;
    PyObject *key;            /* as given: str or bytes */
    PyObject *key_bytes;      /* its bytes */
    double ttl;               /* seconds; 0: none */
    size_t chunk;             /* keys per round trip */
    const lb_redis_ops *ops;
    lb_op *w_op;              /* the wire operation in progress (owned by the type's state) */
    lb_op **w_lanes;          /* ... its step machines running at once (shards: one stage's) */
    uint32_t *w_shard_of;     /* ... the shard of each (0 without shards) */
    size_t w_nlanes;
    int w_stages;             /* ... stages given so far */
    uint8_t *w_out;           /* the wire operation's results (w_n bytes) */
    size_t w_n;
    int evict_warned;         /* the EvictionWarning was given */
};

/* The EvictionWarning, once per filter, when a check of the filter (its
 * connection's, or a shard's) found a maxmemory-policy that can evict its keys
 * (lb_redis.evicting).  0, or -1 with the exception set (a warning filter
 * made it an error). */
int lb_redis_filter_warn(lb_redis_filter *f);

#define LB_REDIS_FILTER(o) ((lb_redis_filter *)(o))

/* The key argument as bytes (a str as its UTF-8): a new reference, or NULL
 * with TypeError (neither str nor bytes) or EmptyKeyError set. */
PyObject *lb_redis_key_bytes(lb_state *st, PyObject *key);
/* ttl= (seconds, or anything with total_seconds(); None: *out = 0).  0, or
 * -1 with ValueError. */
int lb_redis_parse_ttl(PyObject *obj, double *out);
/* chunk_size= (None leaves *out as it is).  0, or -1 with ValueError. */
int lb_redis_parse_chunk(PyObject *obj, size_t *out);

/* shards= (None: 1; else an int in 1..LB_SHARDED_MAX_SHARDS).  0, or -1 with
 * TypeError / ValueError. */
int lb_redis_parse_shards(lb_state *st, PyObject *obj, uint32_t *out);

/* The size limit of a Redis filter: what one filter may claim of the
 * server's memory unless max_bytes= says more (a typo in capacity, 10**12,
 * would otherwise take the server's memory).  256 MiB. */
#define LB_REDIS_DEFAULT_MAX_BYTES ((uint64_t)256 << 20)
/* max_bytes= (None: the default; else an int >= 1).  0, or -1 with
 * TypeError / ValueError. */
int lb_redis_parse_max_bytes(lb_state *st, PyObject *obj, uint64_t *out);
/* 0 when need <= limit, else -1 with InvalidCapacityError saying both. */
int lb_redis_check_max_bytes(lb_state *st, uint64_t need, uint64_t limit, const char *what);

/* Allocate an object of type with the common part set up and its (not yet
 * connected) connection built from kw: the object, or NULL with the exception
 * set. */
lb_redis_filter *lb_redis_filter_new(PyTypeObject *type, lb_state *st, const lb_conn_kw *kw,
                                     PyObject *key, PyObject *key_bytes, double ttl,
                                     size_t chunk, const lb_redis_ops *ops);
/* Free the connection (release functions call it after freeing what uses it). */
void lb_redis_filter_release(lb_redis_filter *f);
/* In a forked child, for the after_fork hook of a type: a new connection
 * like the inherited one, which is abandoned (lb_redis_abandon).  0, or -1
 * with MemoryError (then conn is NULL). */
int lb_redis_filter_renew(lb_redis_filter *f);
/* tp_dealloc and tp_traverse. */
void lb_redis_filter_dealloc(PyObject *self);
int lb_redis_filter_traverse(PyObject *self, visitproc visit, void *arg);

/* Claim the filter (after lb_enter) and evaluate expr (an lb_redis_status,
 * stored in rs) with the GIL released.  A failure is raised (ops->raise)
 * before the claim is given back: its text is in the connection, which
 * another thread may use as soon as lb_busy_end has run. */
#define LB_REDIS_GIL_FREE(f, rs, expr)           \
    do {                                         \
        lb_busy_begin(&(f)->base);               \
        Py_BEGIN_ALLOW_THREADS                   \
        (rs) = (expr);                           \
        Py_END_ALLOW_THREADS                     \
        if ((rs) != LB_REDIS_OK)                 \
            (f)->ops->raise((f), (rs));          \
        lb_busy_end(&(f)->base);                 \
        if ((rs) == LB_REDIS_OK && lb_redis_filter_warn(f) < 0) \
            (rs) = LB_REDIS_ERR_ARG; /* the warning, made an error, is set */ \
    } while (0)

/* In a method returning PyObject *: enter, run expr as LB_REDIS_GIL_FREE,
 * leave, and on failure return NULL (the exception is set). */
#define LB_REDIS_CALL(f, expr)                 \
    do {                                       \
        lb_redis_status rs_;                   \
        if (lb_enter(&(f)->base) < 0)          \
            return NULL;                       \
        LB_REDIS_GIL_FREE((f), rs_, (expr));   \
        lb_leave(&(f)->base);                  \
        if (rs_ != LB_REDIS_OK)                \
            return NULL;                       \
    } while (0)

/* One key, one round trip, with the GIL released: its answer (0 or 1), or
 * -1 with the exception set. */
int lb_redis_single(lb_redis_filter *f, PyObject *key, lb_redis_keys_fn fn);

/* The methods add, test, __contains__, add_many, update, test_many and
 * close, in terms of the ops. */
/* remaining_ttl(): PTTL of the key, in seconds; None when it has no expiry
 * or does not exist. */
PyObject *lb_redis_remaining_ttl(PyObject *self, PyObject *unused);
/* _exists(): whether the key exists (PTTL, one round trip, nothing written);
 * for the command line's inspect, which must tell a missing key from a server
 * without the RedisBloom module. */
PyObject *lb_redis_exists(PyObject *self, PyObject *unused);
PyObject *lb_redis_add(PyObject *self, PyObject *key);
PyObject *lb_redis_test(PyObject *self, PyObject *key);
int lb_redis_contains(PyObject *self, PyObject *key);
/* add_many, update, test_many: METH_FASTCALL | METH_KEYWORDS, (keys, *,
 * skip_nulls=False), columns included (batch.h). */
PyObject *lb_redis_add_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                            PyObject *kwnames);
PyObject *lb_redis_update(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                          PyObject *kwnames);
PyObject *lb_redis_test_many(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                             PyObject *kwnames);
#define LB_REDIS_FASTCALL(fn) (PyCFunction)(void (*)(void))(fn), METH_FASTCALL | METH_KEYWORDS
PyObject *lb_redis_close(PyObject *self, PyObject *unused);

/* _wire_config() -> dict: where and how the asyncio transport connects
 * (host, port, unix_socket_path, the timeouts in seconds or None, tls and
 * the ssl_* settings), as the URL and keywords gave them. */
PyObject *lb_redis_wire_config(PyObject *self, PyObject *unused);

/* The _wire_* methods that ling_bloom.aio drives (not public API): check a
 * batch's keys; begin an operation (kind, keys: the lanes of its first
 * stage); a lane's next step (connect, send, pause, or over); the next
 * stage; the outcome of a connect; reply bytes; the outcome
 * of a send (each says whether C keeps the connection); a connection the
 * transport lost between round trips; the results (or the exception the blocking call
 * raises).  See csrc/redis/op.h. */
PyObject *lb_wire_method_check(PyObject *self, PyObject *keys);
PyObject *lb_wire_method_begin(PyObject *self, PyObject *args);
PyObject *lb_wire_method_step(PyObject *self, PyObject *lane);
PyObject *lb_wire_method_stage(PyObject *self, PyObject *unused);
PyObject *lb_wire_method_connected(PyObject *self, PyObject *args);
PyObject *lb_wire_method_feed(PyObject *self, PyObject *args);
PyObject *lb_wire_method_sent(PyObject *self, PyObject *args);
PyObject *lb_wire_method_lost(PyObject *self, PyObject *args);
PyObject *lb_wire_method_result(PyObject *self, PyObject *unused);
PyObject *lb_wire_method_drops(PyObject *self, PyObject *unused);
PyObject *lb_wire_method_live(PyObject *self, PyObject *args);
#define LB_REDIS_WIRE_METHODS                                               \
    {"_wire_check", lb_wire_method_check, METH_O, NULL},                    \
        {"_wire_begin", lb_wire_method_begin, METH_VARARGS, NULL},          \
        {"_wire_step", lb_wire_method_step, METH_O, NULL},                  \
        {"_wire_stage", lb_wire_method_stage, METH_NOARGS, NULL},           \
        {"_wire_connected", lb_wire_method_connected, METH_VARARGS, NULL},  \
        {"_wire_feed", lb_wire_method_feed, METH_VARARGS, NULL},            \
        {"_wire_sent", lb_wire_method_sent, METH_VARARGS, NULL},            \
        {"_wire_lost", lb_wire_method_lost, METH_VARARGS, NULL},            \
        {"_wire_result", lb_wire_method_result, METH_NOARGS, NULL},         \
        {"_wire_drops", lb_wire_method_drops, METH_NOARGS, NULL},           \
        {"_wire_live", lb_wire_method_live, METH_VARARGS, NULL},            \
        {"_wire_config", lb_redis_wire_config, METH_NOARGS, NULL}

/* Getters of the properties key and ttl. */
PyObject *lb_redis_get_key(PyObject *self, void *unused);
PyObject *lb_redis_get_ttl(PyObject *self, void *unused);

/* The bodies of the classmethods from_url(url, key, ...) and
 * from_redis(client, key, ...): cls(*args[1:], url=url, **kwargs), and
 * cls(*args[1:], **the client's connection settings, **kwargs).  args must
 * hold at least 2 items and, unless max_args is 0, at most max_args; else
 * TypeError(usage). */
PyObject *lb_redis_from_url(PyObject *cls, PyObject *args, PyObject *kwargs, Py_ssize_t max_args,
                            const char *usage);
PyObject *lb_redis_from_redis(PyObject *cls, PyObject *args, PyObject *kwargs,
                              Py_ssize_t max_args, const char *usage);

#endif
