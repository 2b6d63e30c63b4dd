/* redisbloom_op.h: what redisbloom.c and redisbloom_dump.c share (not an
 * interface): the filter's state, its operations as step machines (op.h), and
 * the reply helpers both use. */
#ifndef LB_REDISBLOOM_OP_H
#define LB_REDISBLOOM_OP_H

#include "op.h"
#include "reply.h"
#include "redisbloom.h"

/* A round trip that only reads: safe to repeat, and a cluster replica may serve it
 * (read_from_replicas). */
#define BF_READ (LB_REDIS_IDEMPOTENT | LB_REDIS_RAW_ERRORS | LB_REDIS_READ_REPLICA)
#define BF_REPLY_TEXT_MAX 512
#define BF_INFO_MAX_ELEMENTS 64 /* BF.INFO: name/value pairs (the module sends 5) */

typedef struct lb_bf_chunk lb_bf_chunk_t;

/* The operation in progress: one of redisbloom.c's or redisbloom_dump.c's. */
typedef struct {
    lb_op op;
    lb_redisbloom *bf;
    int stage;
    /* add / test */
    const lb_key *keys;
    size_t n, start, cn;
    uint8_t *out;
    int attempt, was_open;
    unsigned long rt;
    long long new_before;
    /* reserve, info, card, scandump, dump, restore */
    int *created;
    lb_bf_info *info;
    uint64_t *count;
    long long iter, next;
    uint64_t max_chunk;
    const char *data;
    size_t len;
    lb_bf_dump *dump;
    const lb_bf_chunk *chunks;
    size_t nchunks, first;
    int replace, sent_any;
    int typed;  /* card: TYPE key was asked after BF.CARD (see lost) */
    char *tmp;
    size_t tlen;
    lb_redis_status failed;
    char msg[600];
} bf_op;

struct lb_redisbloom {
    lb_redis *conn;
    lb_bf_options opt;
    char *key;
    size_t keylen;
    char *base; /* prefix of the restore temp key, in key's cluster slot */
    size_t baselen;
    char rate[40]; /* the error rate as sent */
    size_t chunk_keys;
    int reserved;
    unsigned long reserved_conn; /* lb_redis_connect_count when last reserved or checked */
    int type_ok;
    unsigned long type_conn;
    int seen;                    /* this client saw the filter there (or made it): see lost */
    int nocreate_sent;           /* the last BF.INSERT said NOCREATE */
    int exists_sent;             /* the last test asked TYPE key too */
    int module_seen;             /* a BF.* command answered (not "unknown command") */
    long long full_processed;    /* FULL: keys of the call processed before the rejected one */
    long long last_new;          /* keys the last add reported new */
    unsigned long seq;
    lb_redis_batch batch;        /* the operation's main round trip */
    lb_redis_batch aux;          /* the BF.INFO check before writes, TYPE */
    char reply_text[BF_REPLY_TEXT_MAX];
    bf_op op;                    /* the operation in progress */
};

/* Start the operation of vt on bf (the state cleared). */
bf_op *lb_bf_op_start(lb_redisbloom *bf, const lb_op_vt *vt);

/* Reply helpers (redisbloom_reply.c, but lb_bf_check_type_reply). */
lb_redis_status lb_bf_bad_reply(lb_redisbloom *bf, const char *what);
/* LB_REDIS_ERR_LOST: the filter is gone from the server; write: the write that
 * found it so was refused (NOCREATE). */
lb_redis_status lb_bf_lost(lb_redisbloom *bf, int write);
lb_redis_status lb_bf_wrongtype(lb_redisbloom *bf, const char *text);
lb_redis_status lb_bf_fail_reply(lb_redisbloom *bf, const lb_reply *x, const char *cmd, int adds);
lb_redis_status lb_bf_expect_reply(lb_redisbloom *bf, const lb_reply *x, const lb_reply_want *w,
                                   const char *what);
lb_redis_status lb_bf_check_type_reply(lb_redisbloom *bf, const lb_reply *x, const char *why);
void lb_bf_keep_text(lb_redisbloom *bf, const char *s, size_t n);
int lb_bf_module_missing(const char *s);
/* A reply x to a BF.* command: unless it is "unknown command", the server has
 * BF.* commands (module_seen). */
void lb_bf_note_reply(lb_redisbloom *bf, const lb_reply *x);
/* NOMODULE for BF.INFO answers this filter cannot read (lb_bf_parse_info's -2),
 * or that lack what `what` needs (`field`). */
lb_redis_status lb_bf_info_unreadable(lb_redisbloom *bf, const char *what, const char *field);
void lb_bf_clear_call(lb_redisbloom *bf);
void lb_bf_arg_key(lb_redisbloom *bf);
void lb_bf_add_pexpire(lb_redisbloom *bf, const char *key, size_t keylen, int64_t ms);
void lb_bf_confirm_type(lb_redisbloom *bf);
extern const lb_reply_want lb_bf_want_ok, lb_bf_want_bit;

#endif
