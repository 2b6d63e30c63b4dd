/* reply.h: checking a parsed reply against what was sent.
 *
 * Protocol, not transport: these take an lb_reply (however it was read) and
 * what the command can answer, and say whether the reply fits.  The layers
 * above (bitmap, redisbloom) check every reply with them; one that does
 * not fit is a protocol error that discards the connection (a server that
 * answers the wrong type, length or value is not a server we understand, and
 * its stream may be out of step).  Pure C, header only. */
#ifndef LB_REDIS_REPLY_H
#define LB_REDIS_REPLY_H

#include <stddef.h>
#include <string.h>

#include "resp.h"

/* An integer in [lo, hi]. */
static inline int lb_reply_int_in(const lb_reply *x, long long lo, long long hi)
{
    return x && x->type == LB_REPLY_INTEGER && x->integer >= lo && x->integer <= hi;
}

/* A bit: an integer 0 or 1 (GETBIT, SETBIT, a u1 of BITFIELD). */
static inline int lb_reply_is_bit(const lb_reply *x)
{
    return lb_reply_int_in(x, 0, 1);
}

/* A status reply with exactly this text ("OK"). */
static inline int lb_reply_status_is(const lb_reply *x, const char *text)
{
    size_t n = strlen(text);
    return x && x->type == LB_REPLY_STATUS && x->len == n && x->str && memcmp(x->str, text, n) == 0;
}

/* An array of exactly n bits (BITFIELD with n u1 fields).  *all = 1 when
 * every one is 1 (also when n == 0, which fits only a command of no field). */
static inline int lb_reply_bits(const lb_reply *x, size_t n, int *all)
{
    if (!x || x->type != LB_REPLY_ARRAY || x->len != n)
        return 0;
    int a = 1;
    for (size_t i = 0; i < n; i++) {
        if (!lb_reply_is_bit(x->element[i]))
            return 0;
        a &= (int)x->element[i]->integer;
    }
    *all = a;
    return 1;
}

/* What one command of a batch can answer, for lb_reply_fits. */
typedef enum {
    LB_WANT_INT = 1,   /* an integer in [lo, hi] */
    LB_WANT_OK,        /* +OK */
    LB_WANT_OK_OR_NIL, /* +OK, or nil (SET ... NX that did not set) */
    LB_WANT_STRING     /* a bulk string of at most hi bytes */
} lb_want_kind;

typedef struct {
    lb_want_kind kind;
    long long lo, hi;
} lb_reply_want;

static inline int lb_reply_fits(const lb_reply *x, const lb_reply_want *w)
{
    switch (w->kind) {
    case LB_WANT_INT:
        return lb_reply_int_in(x, w->lo, w->hi);
    case LB_WANT_OK:
        return lb_reply_status_is(x, "OK");
    case LB_WANT_OK_OR_NIL:
        return lb_reply_status_is(x, "OK") || (x && x->type == LB_REPLY_NIL);
    case LB_WANT_STRING:
        return x && x->type == LB_REPLY_STRING && (long long)x->len <= w->hi;
    }
    return 0;
}

#endif
