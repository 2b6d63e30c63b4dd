/* bitmap_op.h: what bitmap.c and its parts (bitmap_guard.c, bitmap_keys.c,
 * bitmap_bulk.c) share (not an interface):
 * the bitmap's state, and its operations as step machines (op.h): a guard
 * that checks (and claims) the meta key on every new connection before the
 * operation's own round trips, around a body of round trips that each
 * operation supplies. */
#ifndef LB_BITMAP_OP_H
#define LB_BITMAP_OP_H

#include "bitmap.h"
#include "op.h"
#include "reply.h"

#define LB_BITMAP_PART_BYTES (LB_BITMAP_PART_BITS / 8)
#define NO_KEY UINT32_MAX
#define META_SET (UINT32_MAX - 1) /* cmd_info.key of the SET NX of the meta key */
#define CANARY_GET (UINT32_MAX - 2) /* cmd_info.key of a GETBIT of the canary */
#define LB_BITMAP_META_READ 256     /* bytes of the meta key read (ours are shorter) */

typedef struct {
    uint32_t key;  /* index of the key in the chunk, NO_KEY for other commands */
    uint32_t part;
    uint32_t nbits; /* BITFIELD: the u1 fields sent (its reply's length) */
    uint32_t canary; /* BITFIELD: 1 when its last field (not counted in nbits) reads the canary */
} cmd_info;

typedef struct bm_op bm_op;

/* An operation's own round trips.  next builds the next one into bm->batch
 * (*more = 1, *flags: how it is sent; with LB_REDIS_KEPT_CONN a stale
 * connection makes the guard run again on a new one and the round trip go
 * out once more) or says the operation is over (*more = 0); done checks its
 * replies. */
typedef struct {
    lb_redis_status (*next)(bm_op *o, int *more, int *flags);
    lb_redis_status (*done)(bm_op *o, lb_redis_status st, lb_reply **rs);
} bm_body;

struct bm_op {
    lb_op op;
    lb_bitmap *bm;
    const bm_body *body;
    int phase;            /* BM_* below */
    int guard;            /* the body needs the meta key checked on its connection */
    int force_look;       /* look even when checked (lb_bitmap_check_meta) */
    int rebuild;          /* reset, load: may bring a lost filter back (see the canary) */
    int canary_last;      /* load: its own last round trip brings the canary, not the claim */
    int pending;          /* a body round trip is built and not answered yet */
    int flags;            /* ... how it is sent */
    int retried;          /* ... it went out again after a stale connection */
    /* add / test */
    const lb_key *keys;
    size_t n, start, cn, ncmd;
    int write;
    uint8_t *out;
    /* load, snapshot, bitcount, read_meta */
    const uint8_t *bits;
    uint8_t *dst;
    size_t nbytes;
    uint64_t part;
    size_t pos, last, dest[8], plen[8];
    int stage;
    long bitop;
    char *tmp;
    size_t tlen;
    int tmp_canary;       /* load: the last part's temp key holds the canary bit */
    long canary_at;       /* load: the reply of the GETBIT of the canary after the BITOP */
    lb_reply_want wants[8];
    const char *names[8];
    size_t nw;
    uint64_t *count;
    lb_geometry *geom;
    lb_bitmap_layout *layout;
    lb_redis_status failed;
    char msg[400];
};

struct lb_bitmap {
    lb_redis *conn;
    lb_geometry g;
    char *key;
    size_t keylen;
    char *base;     /* prefix of meta/part names, see the header */
    size_t baselen;
    char *name;     /* scratch for a part name */
    size_t namecap;
    uint64_t nparts;
    int64_t ttl_ms;
    int meta_checked;
    int known;               /* this client saw the filter there (its meta read or written) */
    int upgrade;             /* the look found a meta without the canary field: the claim adds it */
    int claiming;            /* a claim went out and its answer was not read (a failure midway) */
    int claim_bare;          /* the claim in progress writes the meta key, not the canary */
    int saw_canary;          /* this client saw (or wrote) the meta key's canary field */
    unsigned long meta_conn; /* lb_redis_connect_count when the meta was checked */
    int adopt;               /* take over a key that exists without a meta key */
    lb_bitmap_mode mode;
    int blocked;             /* LB_BITMAP_BLOCKED: blocked.h's layout, see the header */
    size_t chunk_keys;
    lb_redis_batch batch;    /* the operation's round trip */
    lb_redis_batch aux;      /* the guard's look or claim */
    cmd_info *cmds;
    size_t cmds_cap;
    uint64_t *want;          /* blocked tests: the 8 lane masks of each key of the chunk */
    size_t want_cap;         /* keys it has room for */
    unsigned long load_seq;
    bm_op op;                /* the operation in progress */
};

/* The phases of an operation's step machine (bitmap_guard.c). */
enum { BM_IDLE = 0, BM_LOOK, BM_CLAIM_DUE, BM_CLAIM, BM_BODY, BM_OVER };

/* Start op o of bm with body (guard: check the meta key first). */
lb_op *lb_bitmap_op_start(lb_bitmap *bm, const bm_body *body, int guard);

/* Helpers of both files. */
const char *lb_bitmap_name_of(lb_bitmap *bm, uint64_t p, size_t *len);
int lb_bitmap_meta_format(const lb_geometry *g, int blocked, int canary, char *buf, size_t cap);
/* The meta text this filter writes (with the canary field when it has one). */
int lb_bitmap_meta_ours(const lb_bitmap *bm, char *buf, size_t cap);
/* The canary (bitmap.h): 1 when this filter has one; its part and bit offset. */
int lb_bitmap_has_canary(const lb_bitmap *bm);
uint64_t lb_bitmap_canary_offset(const lb_bitmap *bm);
/* Append GETBIT <last part> <canary> to bm->batch as its command ncmd: the
 * next command's number, or (size_t)-1 when out of memory. */
size_t lb_bitmap_add_canary_get(lb_bitmap *bm, size_t ncmd);
/* add / test (bitmap_keys.c): the check of the keys before anything is sent
 * (LB_REDIS_ERR_ARG naming an empty one), and the operation's body. */
lb_redis_status lb_bitmap_check_keys(lb_bitmap *bm, const lb_key *keys, size_t n);
extern const bm_body lb_bitmap_keys_body;
/* Append SETBIT <last part> <canary> 1 to b. */
void lb_bitmap_add_canary_set(lb_bitmap *bm, lb_redis_batch *b);
/* The error of a filter found gone (write: a write went in meanwhile). */
lb_redis_status lb_bitmap_lost(lb_bitmap *bm, int write);
void lb_bitmap_add_meta_get(lb_bitmap *bm, lb_redis_batch *b);
void lb_bitmap_add_meta_set(lb_bitmap *bm, lb_redis_batch *b, const char *val, int vlen);
size_t lb_bitmap_add_expires(lb_bitmap *bm, size_t ncmd);
int lb_bitmap_cmds_reserve(lb_bitmap *bm, size_t n);
lb_redis_status lb_bitmap_bad_reply(lb_bitmap *bm, const char *what);
lb_redis_status lb_bitmap_name_wrongtype(lb_bitmap *bm, uint64_t part);
lb_redis_status lb_bitmap_check_replies(lb_bitmap *bm, lb_reply **rs, const lb_reply_want *wants,
                                        const char *const *names, size_t n);
lb_redis_status lb_bitmap_meta_reply(lb_redis *conn, const char *key, size_t keylen,
                                     const lb_reply *const *xs, lb_geometry *got, int *blocked,
                                     int *canary);
void lb_bitmap_batch_bounds(lb_bitmap *bm);
void lb_bitmap_describe(const lb_geometry *g, int blocked, char *buf, size_t cap);
/* A reply that does not fit what was sent: the stream may be out of step,
 * and this is not the server we think: drop the connection. */
lb_redis_status lb_bitmap_conn_bad_reply(lb_redis *conn, const char *what);

#endif
