/* Reply shapes that redisbloom.c must read (redisbloom_proto.c): integers and RESP3 booleans, BF.INFO as a
 * flat array or a map, fields in any order, unknown fields, nil expansion.  Built and
 * run by tests/test_redisbloom_filter.py (no server needed):
 *   cc -I csrc/redis test_redisbloom_shapes.c csrc/redis/redisbloom_proto.c -lm */
#include <stdio.h>
#include <string.h>

#include "redisbloom_proto.h"

static int failures;
#define CHECK(c)                                                              \
    do {                                                                      \
        if (!(c)) {                                                           \
            failures++;                                                       \
            fprintf(stderr, "FAIL %s:%d: %s\n", __FILE__, __LINE__, #c);      \
        }                                                                     \
    } while (0)

static lb_reply mk(int type, long long v, const char *s)
{
    lb_reply r;
    memset(&r, 0, sizeof r);
    r.type = type;
    r.integer = v;
    if (s) {
        r.str = (char *)s;
        r.len = strlen(s);
    }
    return r;
}

int main(void)
{
    /* booleans */
    lb_reply i0 = mk(LB_REPLY_INTEGER, 0, NULL), i1 = mk(LB_REPLY_INTEGER, 1, NULL);
    lb_reply bt = mk(LB_REPLY_BOOL, 1, NULL), bfl = mk(LB_REPLY_BOOL, 0, NULL);
    lb_reply i2 = mk(LB_REPLY_INTEGER, 2, NULL), s1 = mk(LB_REPLY_STRING, 0, "1");
    lb_reply nil = mk(LB_REPLY_NIL, 0, NULL);
    CHECK(lb_bf_reply_bool(&i0) == 0);
    CHECK(lb_bf_reply_bool(&i1) == 1);
    CHECK(lb_bf_reply_bool(&bt) == 1);
    CHECK(lb_bf_reply_bool(&bfl) == 0);
    CHECK(lb_bf_reply_bool(&i2) == -1);
    CHECK(lb_bf_reply_bool(&s1) == -1);
    CHECK(lb_bf_reply_bool(&nil) == -1);
    CHECK(lb_bf_reply_bool(NULL) == -1);

    /* BF.INFO, RESP2 flat array, the module's order */
    lb_reply n[6] = {mk(LB_REPLY_STATUS, 0, "Capacity"), mk(LB_REPLY_STATUS, 0, "Size"),
                     mk(LB_REPLY_STATUS, 0, "Number of filters"),
                     mk(LB_REPLY_STATUS, 0, "Number of items inserted"),
                     mk(LB_REPLY_STATUS, 0, "Expansion rate"),
                     mk(LB_REPLY_STRING, 0, "Some future field")};
    lb_reply v[6] = {mk(LB_REPLY_INTEGER, 1000, NULL), mk(LB_REPLY_INTEGER, 2080, NULL),
                     mk(LB_REPLY_INTEGER, 1, NULL), mk(LB_REPLY_INTEGER, 3, NULL),
                     mk(LB_REPLY_INTEGER, 2, NULL), mk(LB_REPLY_STRING, 0, "whatever")};
    lb_reply *el[12];
    for (int i = 0; i < 5; i++) {
        el[2 * i] = &n[i];
        el[2 * i + 1] = &v[i];
    }
    lb_reply arr = mk(LB_REPLY_ARRAY, 0, NULL);
    arr.element = el;
    arr.len = 10;
    lb_bf_info info;
    CHECK(lb_bf_parse_info(&arr, &info) == 0);
    CHECK(info.capacity == 1000 && info.size == 2080 && info.filters == 1 && info.items == 3 &&
          info.expansion == 2);

    /* RESP3 map, reversed order, an unknown field, nil expansion (non-scaling) */
    lb_reply *el2[12];
    int k = 0;
    el2[k++] = &n[5];
    el2[k++] = &v[5];
    for (int i = 4; i >= 0; i--) {
        el2[k++] = &n[i];
        el2[k++] = i == 4 ? &nil : &v[i];
    }
    lb_reply map = mk(LB_REPLY_MAP, 0, NULL);
    map.element = el2;
    map.len = (size_t)k;
    CHECK(lb_bf_parse_info(&map, &info) == 0);
    CHECK(info.capacity == 1000 && info.size == 2080 && info.filters == 1 && info.items == 3);
    CHECK(info.expansion == -1 && (info.present & LB_BF_INFO_EXPANSION)); /* nil: reported */

    /* names in another case; a field missing: reported absent */
    lb_reply lc = mk(LB_REPLY_STRING, 0, "capacity");
    lb_reply *el3[2] = {&lc, &v[0]};
    lb_reply one = mk(LB_REPLY_ARRAY, 0, NULL);
    one.element = el3;
    one.len = 2;
    CHECK(lb_bf_parse_info(&one, &info) == 0);
    CHECK(info.capacity == 1000 && info.size == -1 && info.items == -1 && info.expansion == -1);
    CHECK(info.present == LB_BF_INFO_CAPACITY);

    /* shapes that are not an INFO */
    lb_reply odd = arr;
    odd.len = 9;
    CHECK(lb_bf_parse_info(&odd, &info) == -1);
    CHECK(lb_bf_parse_info(&i1, &info) == -1);
    lb_reply unknown_only = mk(LB_REPLY_ARRAY, 0, NULL);
    lb_reply *el4[2] = {&n[5], &v[5]};
    unknown_only.element = el4;
    unknown_only.len = 2;
    CHECK(lb_bf_parse_info(&unknown_only, &info) == -2 && info.present == 0);
    lb_reply *el5[2] = {&n[0], &s1};
    lb_reply strval = mk(LB_REPLY_ARRAY, 0, NULL);
    strval.element = el5;
    strval.len = 2;
    CHECK(lb_bf_parse_info(&strval, &info) == 0 && info.capacity == 1);
    /* a known field named twice: not read as either value */
    lb_reply *eltwice[4] = {&n[0], &v[0], &n[0], &v[1]};
    lb_reply twice = mk(LB_REPLY_ARRAY, 0, NULL);
    twice.element = eltwice;
    twice.len = 4;
    CHECK(lb_bf_parse_info(&twice, &info) == -1);
    lb_reply bad = mk(LB_REPLY_STRING, 0, "lots");
    lb_reply *el6[2] = {&n[0], &bad};
    lb_reply badval = mk(LB_REPLY_ARRAY, 0, NULL);
    badval.element = el6;
    badval.len = 2;
    CHECK(lb_bf_parse_info(&badval, &info) == -1);

    /* options */
    lb_bf_options o;
    lb_bf_options_init(&o);
    CHECK(o.capacity == 1000 && o.error_rate == 0.001 && o.expansion == 2 && !o.non_scaling &&
          !o.no_create && o.ttl_ms == 0);

    printf("%s: %d failures\n", failures ? "FAILED" : "ok", failures);
    return failures != 0;
}
