/* redis_connection.h: what RedisFilter and RedisBloomFilter share: the
 * connection keywords (redis-py's names) and the Python exception for each
 * lb_redis_status. */
#ifndef LB_PY_REDIS_CONNECTION_H
#define LB_PY_REDIS_CONNECTION_H

#include "module.h"
#include "redis_conn.h"

/* The keywords, NULL when not given. */
typedef struct {
    PyObject *url, *host, *port, *db, *username, *password, *unix_socket_path, *socket_timeout,
        *socket_connect_timeout;
} lb_conn_kw;

/* For a kwlist: the names in the order of lb_conn_kw's fields. */
#define LB_CONN_KWNAMES                                                                       \
    "url", "host", "port", "db", "username", "password", "unix_socket_path", "socket_timeout", \
        "socket_connect_timeout"
/* ...and the matching PyArg format units and addresses. */
#define LB_CONN_KWFORMAT "OOOOOOOOO"
#define LB_CONN_KWADDR(kw)                                                            \
    &(kw).url, &(kw).host, &(kw).port, &(kw).db, &(kw).username, &(kw).password,      \
        &(kw).unix_socket_path, &(kw).socket_timeout, &(kw).socket_connect_timeout

/* Operation and connect timeouts when none is given (seconds); None means
 * no timeout at all. */
#define LB_DEFAULT_SOCKET_TIMEOUT 10.0
#define LB_DEFAULT_CONNECT_TIMEOUT 5.0

/* Build the configuration: the URL first (redis://, unix://), then every
 * keyword given overrides what the URL said.  No URL and no host or socket
 * path: localhost:6379.  0, or -1 with ValueError / NotSupportedError. */
int lb_conn_config(lb_state *st, const lb_conn_kw *kw, lb_redis_config *cfg);

/* Raise the exception for a failed call on conn (its text from
 * lb_redis_errstr).  key, when given, is the filter's key (set as .key on
 * WrongTypeError). */
void lb_raise_redis(lb_state *st, lb_redis_status status, const lb_redis *conn, PyObject *key);

/* Raise an exception of type exc with message msg and the given attributes
 * (name, value pairs, NULL-terminated; values are borrowed). */
void lb_raise_with(PyObject *exc, const char *msg, ...);

#endif
