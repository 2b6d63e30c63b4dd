/* resp_reader.c: the reply side of resp.h: hiredis's RESP parser (read.c:
 * no sockets) with callbacks that build every reply of a round trip in one
 * arena, within the round trip's bounds. */
#include "resp.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* <hiredis/hiredis.h> needs no -I flag on Debian (pkg-config gives -I.../hiredis too) */
#include <hiredis/hiredis.h>

#if defined(HIREDIS_MAJOR) && HIREDIS_MAJOR >= 1
typedef size_t lb_array_len_t;
#else
typedef int lb_array_len_t;
#endif

#define LB_ARENA_BLOCK (64 * 1024)

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

/* ---------------------------------------------------------------- reader */

struct lb_resp_reader {
    redisReader *rd;
    arena arena;
    size_t max_elements;  /* bound of the round trip's replies (array elements, nested) */
    size_t max_bytes;     /* bound of the round trip's reply bytes, 0 = none */
    size_t received;      /* reply bytes fed in this round trip */
    size_t reply_elements;/* elements announced so far in the reply being parsed */
    lb_redis_status parse_status; /* why a callback refused (0: it did not) */
    char parse_err[200];
};

/* --- callbacks: replies are built in the arena, no malloc per reply.
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

static void *refuse(lb_resp_reader *r, lb_redis_status st, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

static void *refuse(lb_resp_reader *r, lb_redis_status st, const char *fmt, ...)
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
static int attach(lb_resp_reader *r, const redisReadTask *task, lb_reply *x)
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
    lb_resp_reader *r = task->privdata;
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
    lb_resp_reader *r = task->privdata;
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
    lb_resp_reader *r = task->privdata;
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
    lb_resp_reader *r = task->privdata;
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

lb_resp_reader *lb_resp_reader_new(void)
{
    lb_resp_reader *r = calloc(1, sizeof *r);
    if (r && lb_resp_reader_reset(r) < 0) {
        free(r);
        return NULL;
    }
    return r;
}

int lb_resp_reader_reset(lb_resp_reader *r)
{
    if (r->rd)
        redisReaderFree(r->rd);
    r->rd = redisReaderCreateWithFunctions(&lb_reply_fns);
    if (!r->rd)
        return -1;
    r->rd->privdata = r; /* redisReaderSetPrivdata warns in 0.14 */
    return 0;
}

void lb_resp_reader_free(lb_resp_reader *r)
{
    if (!r)
        return;
    if (r->rd)
        redisReaderFree(r->rd);
    arena_free(&r->arena);
    free(r);
}

void lb_resp_reader_start(lb_resp_reader *r, size_t max_elements, size_t max_bytes)
{
    arena_reset(&r->arena);
    r->max_elements = max_elements;
    r->max_bytes = max_bytes;
    r->received = 0;
    r->reply_elements = 0;
    r->parse_status = LB_REDIS_OK;
    r->parse_err[0] = '\0';
}

lb_redis_status lb_resp_reader_feed(lb_resp_reader *r, const char *data, size_t len, char *why,
                                    size_t whylen)
{
    r->received += len;
    if (r->max_bytes && r->received > r->max_bytes) {
        snprintf(why, whylen, "%zu so far, at most %zu", r->received, r->max_bytes);
        return LB_REDIS_ERR_PROTOCOL;
    }
    if (redisReaderFeed(r->rd, data, len) != REDIS_OK) {
        snprintf(why, whylen, "out of memory reading replies");
        return LB_REDIS_ERR_NOMEM;
    }
    return LB_REDIS_OK;
}

lb_redis_status lb_resp_reader_take(lb_resp_reader *r, size_t n, lb_reply **out, size_t *got,
                                    char *why, size_t whylen)
{
    while (*got < n) {
        void *rep = NULL;
        if (redisReaderGetReply(r->rd, &rep) != REDIS_OK) {
            snprintf(why, whylen, "%s", r->parse_status ? r->parse_err : r->rd->errstr);
            return r->parse_status == LB_REDIS_ERR_NOMEM ? LB_REDIS_ERR_NOMEM
                                                         : LB_REDIS_ERR_PROTOCOL;
        }
        if (!rep)
            break;
        out[(*got)++] = rep;
    }
    return LB_REDIS_OK;
}

int lb_resp_reader_pending(const lb_resp_reader *r)
{
    return r->rd && r->rd->pos < r->rd->len;
}

size_t lb_resp_reader_received(const lb_resp_reader *r)
{
    return r->received;
}
