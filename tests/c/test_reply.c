/* test_reply.c: reply-shape checks (csrc/redis/reply.h), no server.
 * Run: make -C tests/c test   (or: tests/c/test_reply) */
#include "redis_harness.h"

#include "reply.h"

/* reply.h: replies that fit what was sent, and ones that do not. */
static void test_reply_predicates(void)
{
    lb_reply i0 = {LB_REPLY_INTEGER, 0, 0, NULL, NULL}, i1 = {LB_REPLY_INTEGER, 1, 0, NULL, NULL};
    lb_reply i7 = {LB_REPLY_INTEGER, 7, 0, NULL, NULL}, im = {LB_REPLY_INTEGER, -1, 0, NULL, NULL};
    lb_reply ok = {LB_REPLY_STATUS, 0, 2, "OK", NULL}, okx = {LB_REPLY_STATUS, 0, 3, "OKX", NULL};
    lb_reply q = {LB_REPLY_STATUS, 0, 6, "QUEUED", NULL}, nil = {LB_REPLY_NIL, 0, 0, NULL, NULL};
    lb_reply s1 = {LB_REPLY_STRING, 0, 1, "1", NULL};
    CHECK(lb_reply_is_bit(&i0) && lb_reply_is_bit(&i1));
    CHECK(!lb_reply_is_bit(&i7) && !lb_reply_is_bit(&im) && !lb_reply_is_bit(&s1) &&
          !lb_reply_is_bit(NULL));
    CHECK(lb_reply_int_in(&i7, 0, 7) && !lb_reply_int_in(&i7, 0, 6) && !lb_reply_int_in(&im, 0, 9));
    CHECK(lb_reply_status_is(&ok, "OK") && !lb_reply_status_is(&okx, "OK") &&
          !lb_reply_status_is(&q, "OK") && !lb_reply_status_is(&s1, "1"));
    lb_reply_want w_ok = {LB_WANT_OK, 0, 0}, w_okn = {LB_WANT_OK_OR_NIL, 0, 0};
    lb_reply_want w_int = {LB_WANT_INT, 0, 1}, w_str = {LB_WANT_STRING, 0, 1};
    CHECK(lb_reply_fits(&ok, &w_ok) && !lb_reply_fits(&nil, &w_ok) && !lb_reply_fits(&i1, &w_ok));
    CHECK(lb_reply_fits(&ok, &w_okn) && lb_reply_fits(&nil, &w_okn) && !lb_reply_fits(&q, &w_okn));
    CHECK(lb_reply_fits(&i1, &w_int) && !lb_reply_fits(&i7, &w_int) && !lb_reply_fits(&ok, &w_int));
    CHECK(lb_reply_fits(&s1, &w_str) && !lb_reply_fits(&ok, &w_str) && !lb_reply_fits(&i1, &w_str));
    lb_reply *el[3] = {&i1, &i0, &i1};
    lb_reply arr = {LB_REPLY_ARRAY, 0, 3, NULL, el};
    int all = -1;
    CHECK(lb_reply_bits(&arr, 3, &all) && all == 0);
    el[1] = &i1;
    CHECK(lb_reply_bits(&arr, 3, &all) && all == 1);
    CHECK(!lb_reply_bits(&arr, 2, &all) && !lb_reply_bits(&arr, 4, &all)); /* length = fields sent */
    el[2] = &i7;
    CHECK(!lb_reply_bits(&arr, 3, &all));
    el[2] = &s1;
    CHECK(!lb_reply_bits(&arr, 3, &all));
    lb_reply empty = {LB_REPLY_ARRAY, 0, 0, NULL, NULL};
    CHECK(!lb_reply_bits(&empty, 3, &all) && !lb_reply_bits(&i1, 1, &all));
}

static const t_case cases[] = {
    {"reply_predicates", test_reply_predicates},
};

T_MAIN(cases, 0)
