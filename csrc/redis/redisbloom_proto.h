/* redisbloom_proto.h: RedisBloom's protocol without a connection: a
 * filter's options and what it costs the server, and the shapes of the
 * replies (BF.EXISTS, BF.MEXISTS, BF.INSERT, BF.INFO) in RESP2 and RESP3 that
 * redisbloom.c reads.  Pure C, no I/O: tests/c/test_redisbloom_shapes.c
 * links this alone. */
#ifndef LB_REDISBLOOM_PROTO_H
#define LB_REDISBLOOM_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "resp.h"

#define LB_BF_DEFAULT_CHUNK_KEYS 10000
#define LB_BF_DEFAULT_CAPACITY 1000
#define LB_BF_DEFAULT_ERROR_RATE 0.001
#define LB_BF_DEFAULT_EXPANSION 2

typedef struct {
    double error_rate;  /* in (0, 1) */
    uint64_t capacity;  /* >= 1 */
    uint32_t expansion; /* >= 1; not sent when non_scaling */
    int non_scaling;
    int no_create;      /* never create the filter (BF.INSERT ... NOCREATE) */
    int64_t ttl_ms;     /* 0: no expiry */
} lb_bf_options;

/* The defaults above, scaling, creating, no TTL. */
void lb_bf_options_init(lb_bf_options *o);

/* Bytes the module allocates for the first sub-filter of o (what a new
 * filter costs the server): capacity * -ln(p) / ln(2)^2 / 8, with p the
 * error rate (non-scaling) or half of it (scaling: the module tightens it). */
uint64_t lb_bf_bytes_needed(const lb_bf_options *o);

/* BF.INFO, by field name; -1 = the server did not report that field (or
 * reported nil: expansion of a non-scaling filter).  present says which
 * fields the reply had (nil included): RedisBloom 2.x and valkey-bloom send
 * all five (valkey-bloom more besides); another BF.* implementation may not. */
typedef struct {
    long long capacity;  /* "Capacity" */
    long long size;      /* "Size" (bytes, on the module) */
    long long filters;   /* "Number of filters" */
    long long items;     /* "Number of items inserted" */
    long long expansion; /* "Expansion rate" */
    unsigned present;    /* LB_BF_INFO_* bits */
} lb_bf_info;

#define LB_BF_INFO_CAPACITY 1u
#define LB_BF_INFO_SIZE 2u
#define LB_BF_INFO_FILTERS 4u
#define LB_BF_INFO_ITEMS 8u
#define LB_BF_INFO_EXPANSION 16u
/* The field names, for messages. */
#define LB_BF_INFO_FIELDS                                                                     \
    "Capacity, Size, Number of filters, Number of items inserted, Expansion rate"

/* RESP3 types as hiredis >= 1.0 numbers them; lb_reply carries them when the
 * connection layer parses RESP3 (the integer field holds a boolean's value). */
#define LB_REPLY_DOUBLE 7
#define LB_REPLY_BOOL 8
#define LB_REPLY_MAP 9
#define LB_REPLY_SET 10

/* An integer 0/1 or a boolean: 0 or 1; -1 for any other shape. */
int lb_bf_reply_bool(const lb_reply *x);
/* Parse BF.INFO's reply (flat pairs or map).  0; -1 for another shape (a
 * value of a known field that is not a number, or a known field named twice); -2 for name/value pairs none of
 * which is a field above (a BF.* implementation that names them otherwise). */
int lb_bf_parse_info(const lb_reply *x, lb_bf_info *out);

/* Case-insensitive text tests of server messages: s contains needle; s
 * starts with prefix; a[0..alen) equals b. */
int lb_ci_contains(const char *s, const char *needle);
int lb_ci_prefix(const char *s, const char *prefix);
int lb_ci_equal(const char *a, size_t alen, const char *b);

#endif
