/* status.h: what a Redis call can fail with, and where its message goes.
 *
 * Pure C, the bottom of csrc/redis: every other file of the client reports
 * through an lb_redis_error (a status, the message, which command of a batch
 * failed, and whether the failure left the batch unanswered). */
#ifndef LB_REDIS_STATUS_H
#define LB_REDIS_STATUS_H

#include <stddef.h>

/* Error kinds.  The binding's Python mapping in brackets. */
typedef enum {
    LB_REDIS_OK = 0,
    LB_REDIS_ERR_CONNECT,   /* cannot connect (refused, unknown host, ...)  [RedisConnectionError] */
    LB_REDIS_ERR_IO,        /* connection lost during a round trip          [RedisConnectionError] */
    LB_REDIS_ERR_TIMEOUT,   /* connect or operation timed out               [RedisTimeoutError]    */
    LB_REDIS_ERR_PROTOCOL,  /* unparsable or unexpected reply               [RedisProtocolError]   */
    LB_REDIS_ERR_REPLY,     /* server error reply; errstr = its text        [RedisResponseError]   */
    LB_REDIS_ERR_WRONGTYPE, /* -WRONGTYPE reply; errstr names the key       [WrongTypeError]       */
    LB_REDIS_ERR_AUTH,      /* AUTH refused (text in errstr)                [RedisConnectionError] */
    LB_REDIS_ERR_URL,       /* bad URL or config                            [ValueError]           */
    LB_REDIS_ERR_TLS,       /* TLS not available (unused since OpenSSL)     [NotSupportedError]    */
    LB_REDIS_ERR_MISMATCH,  /* stored geometry differs (bitmap)             [GeometryMismatchError]*/
    LB_REDIS_ERR_NOTFOUND,  /* no filter stored at that key (bitmap)        [BloomError/KeyError]  */
    LB_REDIS_ERR_ARG,       /* invalid argument                             [ValueError]           */
    LB_REDIS_ERR_NOMEM,     /* allocation failed                            [MemoryError]          */
    LB_REDIS_ERR_FULL,      /* non-scaling RedisBloom filter full (redisbloom) [FilterFullError]   */
    LB_REDIS_ERR_NOMODULE,  /* no BF.* commands on the server (redisbloom)  [ModuleMissingError]   */
    LB_REDIS_ERR_TOOLARGE,  /* the filter would not fit (size limit, maxmemory) [InvalidCapacityError] */
    LB_REDIS_ERR_NOTOWNED,  /* the key holds data this library did not write [KeyNotOwnedError]   */
    LB_REDIS_ERR_LOST       /* the filter this client saw is gone from the server [FilterLostError] */
} lb_redis_status;

/* A short constant name of a status ("connect", "io", "timeout", ...). */
const char *lb_redis_status_name(lb_redis_status st);

#define LB_ERRSTR_SIZE 512

/* The error state of a client (see client.h): the status of the last call,
 * its message ("" after success), the index in the batch of the first
 * command whose reply was an error (-1: none), and stale (1: the call failed
 * with LB_REDIS_ERR_IO on a connection opened earlier, before any byte of a
 * reply came back). */
typedef struct {
    lb_redis_status status;
    long index;
    int stale;
    char text[LB_ERRSTR_SIZE];
} lb_redis_error;

void lb_error_clear(lb_redis_error *e);
/* Set status and message (printf-style); returns st. */
lb_redis_status lb_error_set(lb_redis_error *e, lb_redis_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;
/* Copy another error state; returns its status. */
lb_redis_status lb_error_copy(lb_redis_error *to, const lb_redis_error *from);

/* A printable rendering of a binary key for messages (truncated, \xNN);
 * returns buf. */
const char *lb_redis_show(const char *k, size_t n, char *buf, size_t cap);

#endif
