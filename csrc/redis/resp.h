/* resp.h: RESP2, with no sockets: the request encoder (lb_redis_batch) and
 * the reply reader (lb_resp_reader: hiredis's parser with this client's
 * callbacks, every reply of a round trip in one arena).  Pure C.
 *
 * Replies (lb_reply) use hiredis's REDIS_REPLY_* type numbers.  The reader's
 * memory grows with what arrived, never with what a header announces: an
 * array's element vector doubles as elements come, and each round trip
 * bounds what its replies can hold (array elements, nested ones included;
 * data bytes). */
#ifndef LB_REDIS_RESP_H
#define LB_REDIS_RESP_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* ------------------------------------------------------------------ replies */

enum {
    LB_REPLY_STRING = 1,
    LB_REPLY_ARRAY = 2,
    LB_REPLY_INTEGER = 3,
    LB_REPLY_NIL = 4,
    LB_REPLY_STATUS = 5,
    LB_REPLY_ERROR = 6
};

/* One reply.  Replies live in the reader's arena and stay valid until its
 * next round trip starts. */
typedef struct lb_reply {
    int type;
    long long integer;          /* INTEGER */
    size_t len;                 /* STRING/STATUS/ERROR: bytes; ARRAY: elements */
    char *str;                  /* STRING/STATUS/ERROR: NUL-terminated too */
    struct lb_reply **element;  /* ARRAY */
} lb_reply;

/* How a batch is sent (lb_redis_exec, client.h; the session reads
 * LB_REDIS_RAW_ERRORS). */
#define LB_REDIS_IDEMPOTENT 1   /* the batch may run twice (SETBIT, GETBIT, BITFIELD,
                                   EXPIRE, DEL, SET of the same value, ...) */
#define LB_REDIS_RAW_ERRORS 2   /* do not turn error replies into a failed status */
#define LB_REDIS_KEPT_CONN 4    /* the caller prepared the open connection (bitmap.c
                                   checked its meta key on it): if exec must discard it
                                   (unexpected input pending), send nothing and return
                                   LB_REDIS_ERR_IO with lb_redis_last_stale() = 1 */
#define LB_REDIS_READ_REPLICA 8 /* the batch only reads: a cluster client whose config
                                   asks for replica reads may send it to a replica */
#define LB_REDIS_WRITE 16       /* the batch writes: with wait_replicas, WAIT follows it */

/* ------------------------------------------------------------------ batches */

/* A pipeline being built: commands are encoded straight into one RESP buffer.
 * Usage:
 *     lb_redis_batch b; lb_redis_batch_init(&b);
 *     lb_redis_batch_cmd(&b, 3); arg_str(&b,"SET"); arg(&b,key,len); arg_u64(&b,1);
 *     ...
 *     lb_redis_exec(r, &b, flags, &replies);
 *     lb_redis_batch_free(&b);
 * Append errors (out of memory, wrong argument count) are sticky: they are
 * reported when the batch is sent (NOMEM / ARG), with nothing sent. */
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
    /* The Redis Cluster slot of the batch's keys (slots.h), kept as commands are
     * appended: a command's first key is the argument lb_command_key_index names. */
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
 * is a protocol error before anything is allocated for it.
 * lb_redis_batch_clear forgets it. */
#define LB_REDIS_DEFAULT_MAX_ELEMENTS ((size_t)1 << 20)
void lb_redis_batch_expect_elements(lb_redis_batch *b, size_t n);

/* The reply bytes the batch's data can take: each call adds n (e.g. the
 * bytes a GETRANGE asked for).  Once a batch called it, the round trip may
 * receive at most the sum plus LB_REDIS_REPLY_SLACK bytes per command (for
 * the framing, integers, statuses and error texts); more is a protocol
 * error as soon as it arrives.  A batch that never calls it has no byte
 * bound.  lb_redis_batch_clear forgets it. */
#define LB_REDIS_REPLY_SLACK 512
void lb_redis_batch_expect_bytes(lb_redis_batch *b, size_t n);

void lb_redis_batch_init(lb_redis_batch *b);
void lb_redis_batch_free(lb_redis_batch *b);
/* Empty the batch, keeping its buffer (shrunk when it grew past 4 MiB). */
void lb_redis_batch_clear(lb_redis_batch *b);
/* Room for more bytes; 0, or -1 (the batch failed: out of memory). */
int lb_redis_batch_reserve(lb_redis_batch *b, size_t more);
/* Begin a command of argc >= 1 arguments (the command name included). */
void lb_redis_batch_cmd(lb_redis_batch *b, int argc);
void lb_redis_batch_arg(lb_redis_batch *b, const void *data, size_t len);
void lb_redis_batch_arg_str(lb_redis_batch *b, const char *s);
void lb_redis_batch_arg_u64(lb_redis_batch *b, uint64_t v);
void lb_redis_batch_arg_i64(lb_redis_batch *b, int64_t v);
/* Append one command already encoded (RESP array of bulk strings), as
 * lb_redis_batch_offsets finds them: a sub-batch of another batch's commands. */
void lb_redis_batch_raw(lb_redis_batch *b, const char *cmd, size_t len);
/* Where each command of b starts: off[i] for i < b->ncmds, and off[ncmds] =
 * b->len (off has ncmds + 1 entries).  0, or -1 when b is not well formed. */
int lb_redis_batch_offsets(const lb_redis_batch *b, size_t *off);
/* A whole command from an argv array (lens may be NULL for C strings). */
void lb_redis_batch_argv(lb_redis_batch *b, int argc, const char *const *argv, const size_t *lens);
/* OK, or why the batch cannot be sent (NOMEM, ARG: argument count), with the
 * message in e. */
lb_redis_status lb_redis_batch_check(const lb_redis_batch *b, lb_redis_error *e);

/* ------------------------------------------------------------------- reader */

typedef struct lb_resp_reader lb_resp_reader;

/* NULL when out of memory. */
lb_resp_reader *lb_resp_reader_new(void);
void lb_resp_reader_free(lb_resp_reader *rd);
/* A new connection: forget every byte buffered (a new parser).  0, or -1
 * when out of memory. */
int lb_resp_reader_reset(lb_resp_reader *rd);
/* A new round trip: the replies of the last one are freed (the arena keeps
 * one block), and these bounds apply: max_elements (array elements per reply,
 * nested included), max_bytes (reply bytes in all, 0: none). */
void lb_resp_reader_start(lb_resp_reader *rd, size_t max_elements, size_t max_bytes);
/* Give received bytes to the parser.  OK; PROTOCOL when the round trip's byte
 * bound is passed (why says how much), NOMEM. */
lb_redis_status lb_resp_reader_feed(lb_resp_reader *rd, const char *data, size_t len, char *why,
                                    size_t whylen);
/* Move the replies parsed so far into out[*got..n).  OK; PROTOCOL (a reply
 * that is no RESP, or past the element bound) or NOMEM, with why. */
lb_redis_status lb_resp_reader_take(lb_resp_reader *rd, size_t n, lb_reply **out, size_t *got,
                                    char *why, size_t whylen);
/* 1 when bytes are buffered that no reply has taken yet. */
int lb_resp_reader_pending(const lb_resp_reader *rd);
/* Reply bytes fed since the round trip started. */
size_t lb_resp_reader_received(const lb_resp_reader *rd);

#endif
