/* test_conn.c: the connection machine (conn.h) driven by hand, with no
 * sockets: the steps it asks for and how it takes their outcomes.  These are
 * the rules both drivers follow (node.c's blocking one, wire.c's asyncio
 * one): the sentinel tries and their pauses, ROLE, the resends after a stale
 * connection and after a demoted primary, a connection found out of step. */
#include "redis_harness.h"

#include "conn.h"

static lb_redis_error err;

static void conn_new(lb_conn *c, int sentinel)
{
    lb_redis_config cfg;
    lb_redis_config_init(&cfg);
    if (sentinel) {
        lb_redis_config_set(&cfg.sentinels, "127.0.0.1:26379");
        lb_redis_config_set(&cfg.sentinel_service, "mymaster");
    } else {
        lb_redis_config_set(&cfg.host, "127.0.0.1");
        cfg.port = 6390;
    }
    memset(c, 0, sizeof *c);
    lb_error_clear(&err);
    CHECK(lb_conn_init(c, &cfg, &err) == 0);
    lb_redis_config_free(&cfg);
}

static void expect(lb_conn *c, int what, int probe)
{
    lb_redis_step s;
    int more = lb_conn_next(c, &s);
    CHECK_MSG(more && s.what == what && s.probe == probe, "step %d (probe %d), wanted %d (probe %d)",
              more ? s.what : -1, s.probe, what, probe);
}

/* A SEND step answered with reply (NULL: the connection broke, IO). */
static void answer(lb_conn *c, int probe, const char *reply)
{
    expect(c, LB_STEP_SEND, probe);
    if (!reply) {
        lb_conn_sent(c, LB_REDIS_ERR_IO, "connection reset");
        return;
    }
    int complete = 0;
    CHECK(lb_conn_feed(c, reply, strlen(reply), &complete) == LB_REDIS_OK && complete);
    lb_conn_sent(c, LB_REDIS_OK, NULL);
}

/* The sentinel names 127.0.0.1:6390, which is then connected to (refused
 * or not: connect_st). */
static void sentinel_walk(lb_conn *c, lb_redis_status connect_st)
{
    expect(c, LB_STEP_CONNECT, 1);
    lb_conn_connected(c, LB_REDIS_OK, NULL);
    answer(c, 1, "*2\r\n$9\r\n127.0.0.1\r\n$4\r\n6390\r\n");
    expect(c, LB_STEP_CONNECT, 0);
    CHECK(!lb_conn_is_open(c, 1)); /* the sentinel's connection: asked once, closed */
    CHECK(c->cfg.port == 6390);
    lb_conn_connected(c, connect_st, connect_st == LB_REDIS_OK ? NULL : "connection refused");
}

static void end_with(lb_conn *c, lb_redis_status want, const char *text)
{
    lb_redis_step s;
    CHECK(!lb_conn_next(c, &s));
    lb_reply **rs;
    lb_redis_status st = lb_conn_end(c, &rs);
    CHECK_MSG(st == want, "status %d, wanted %d (%s)", st, want, err.text);
    if (text)
        CHECK_MSG(strstr(err.text, text) != NULL, "'%s' not in '%s'", text, err.text);
}

static void ping(lb_redis_batch *b)
{
    lb_redis_batch_init(b);
    lb_redis_batch_cmd(b, 1);
    lb_redis_batch_arg_str(b, "PING");
}

static void test_sentinel_tries(void)
{
    lb_conn c;
    lb_redis_batch b;
    ping(&b);
    conn_new(&c, 1);
    CHECK(lb_conn_begin(&c, &b, LB_REDIS_IDEMPOTENT) == LB_REDIS_OK);
    for (int i = 0; i < 5; i++) {
        if (i) {
            lb_redis_step s;
            CHECK(lb_conn_next(&c, &s) && s.what == LB_STEP_PAUSE && s.pause_ms == 200);
        }
        sentinel_walk(&c, LB_REDIS_ERR_CONNECT); /* a failover: the primary named is gone */
    }
    end_with(&c, LB_REDIS_ERR_CONNECT, "connection refused");
    CHECK(c.connects == 0);
    lb_conn_fini(&c);
    lb_redis_batch_free(&b);
}

static void test_role_not_master(void)
{
    lb_conn c;
    lb_redis_batch b;
    ping(&b);
    conn_new(&c, 1);
    CHECK(lb_conn_begin(&c, &b, LB_REDIS_IDEMPOTENT) == LB_REDIS_OK);
    for (int i = 0; i < 5; i++) {
        if (i)
            expect(&c, LB_STEP_PAUSE, 0);
        sentinel_walk(&c, LB_REDIS_OK);
        answer(&c, 0, "*5\r\n$5\r\nslave\r\n$9\r\n127.0.0.1\r\n:6391\r\n$9\r\nconnected\r\n:1\r\n");
        CHECK(!lb_conn_is_open(&c, 0));
    }
    end_with(&c, LB_REDIS_ERR_CONNECT, "but it is not a master");
    CHECK(c.connects == 5);
    /* a ROLE reply that is no role: no more tries */
    CHECK(lb_conn_begin(&c, &b, LB_REDIS_IDEMPOTENT) == LB_REDIS_OK);
    sentinel_walk(&c, LB_REDIS_OK);
    answer(&c, 0, "+OK\r\n");
    end_with(&c, LB_REDIS_ERR_PROTOCOL, "answered ROLE with something other than a role");
    lb_conn_fini(&c);
    lb_redis_batch_free(&b);
}

static void test_stale_resend(void)
{
    lb_conn c;
    lb_redis_batch b;
    ping(&b);
    conn_new(&c, 0);
    CHECK(lb_conn_begin(&c, &b, LB_REDIS_IDEMPOTENT) == LB_REDIS_OK);
    expect(&c, LB_STEP_CONNECT, 0);
    lb_conn_connected(&c, LB_REDIS_OK, NULL);
    answer(&c, 0, "+PONG\r\n");
    end_with(&c, LB_REDIS_OK, NULL);
    /* the kept connection is dead (a server restart): once more on a new one */
    CHECK(lb_conn_begin(&c, &b, LB_REDIS_IDEMPOTENT) == LB_REDIS_OK);
    answer(&c, 0, NULL);
    CHECK(!lb_conn_is_open(&c, 0));
    expect(&c, LB_STEP_CONNECT, 0);
    lb_conn_connected(&c, LB_REDIS_OK, NULL);
    answer(&c, 0, "+PONG\r\n");
    end_with(&c, LB_REDIS_OK, NULL);
    CHECK(c.connects == 2 && !err.stale);
    /* dead again on the new one too: not a third time */
    CHECK(lb_conn_begin(&c, &b, LB_REDIS_IDEMPOTENT) == LB_REDIS_OK);
    answer(&c, 0, NULL);
    expect(&c, LB_STEP_CONNECT, 0);
    lb_conn_connected(&c, LB_REDIS_OK, NULL);
    answer(&c, 0, NULL);
    end_with(&c, LB_REDIS_ERR_IO, "connection reset");
    CHECK(!err.stale); /* a fresh connection's failure is not a stale one */
    /* not idempotent: no resend, the caller is told it was stale */
    CHECK(lb_conn_begin(&c, &b, 0) == LB_REDIS_OK);
    expect(&c, LB_STEP_CONNECT, 0);
    lb_conn_connected(&c, LB_REDIS_OK, NULL);
    answer(&c, 0, "+PONG\r\n");
    end_with(&c, LB_REDIS_OK, NULL);
    CHECK(lb_conn_begin(&c, &b, 0) == LB_REDIS_OK);
    answer(&c, 0, NULL);
    end_with(&c, LB_REDIS_ERR_IO, NULL);
    CHECK(err.stale);
    lb_conn_fini(&c);
    lb_redis_batch_free(&b);
}

/* A demoted primary's -READONLY: the idempotent batch goes out three times
 * in all, each on a connection found anew through the sentinels. */
static void test_demoted(void)
{
    lb_conn c;
    lb_redis_batch b;
    ping(&b);
    conn_new(&c, 1);
    const char *ro = "-READONLY You can't write against a read only replica.\r\n";
    const char *master = "*3\r\n$6\r\nmaster\r\n:0\r\n*0\r\n";
    for (int kept = 0; kept < 2; kept++) {
        CHECK(lb_conn_begin(&c, &b, LB_REDIS_IDEMPOTENT | (kept ? LB_REDIS_KEPT_CONN : 0)) ==
              LB_REDIS_OK);
        for (int i = 0; i < 3; i++) {
            sentinel_walk(&c, LB_REDIS_OK);
            answer(&c, 0, master);
            answer(&c, 0, ro);
            CHECK(!lb_conn_is_open(&c, 0));
        }
        if (kept) {
            end_with(&c, LB_REDIS_ERR_IO, "is no longer the primary of 'mymaster'");
            CHECK(err.stale);
        } else {
            end_with(&c, LB_REDIS_ERR_REPLY, "READONLY");
        }
    }
    lb_conn_fini(&c);
    lb_redis_batch_free(&b);
}

static void test_out_of_step(void)
{
    lb_conn c;
    lb_redis_batch b;
    ping(&b);
    conn_new(&c, 0);
    CHECK(lb_conn_begin(&c, NULL, 0) == LB_REDIS_OK); /* only connect */
    expect(&c, LB_STEP_CONNECT, 0);
    lb_conn_connected(&c, LB_REDIS_OK, NULL);
    end_with(&c, LB_REDIS_OK, NULL);
    CHECK(lb_conn_is_open(&c, 0));
    /* input nobody asked for: a batch that counted on that connection fails, unsent */
    lb_conn_out_of_step(&c);
    CHECK(lb_conn_begin(&c, &b, LB_REDIS_KEPT_CONN | LB_REDIS_IDEMPOTENT) == LB_REDIS_OK);
    end_with(&c, LB_REDIS_ERR_IO, "had unexpected input pending");
    CHECK(err.stale);
    /* any other batch goes out on a new connection */
    CHECK(lb_conn_begin(&c, &b, LB_REDIS_KEPT_CONN) == LB_REDIS_OK);
    expect(&c, LB_STEP_CONNECT, 0);
    lb_conn_connected(&c, LB_REDIS_OK, NULL);
    answer(&c, 0, "+PONG\r\n");
    end_with(&c, LB_REDIS_OK, NULL);
    lb_conn_out_of_step(&c);
    CHECK(lb_conn_begin(&c, &b, 0) == LB_REDIS_OK);
    expect(&c, LB_STEP_CONNECT, 0);
    lb_conn_connected(&c, LB_REDIS_OK, NULL);
    answer(&c, 0, "+PONG\r\n");
    end_with(&c, LB_REDIS_OK, NULL);
    CHECK(c.connects == 3);
    lb_conn_fini(&c);
    lb_redis_batch_free(&b);
}

static const t_case cases[] = {
    {"conn_sentinel_tries", test_sentinel_tries},
    {"conn_role_not_master", test_role_not_master},
    {"conn_stale_resend", test_stale_resend},
    {"conn_demoted", test_demoted},
    {"conn_out_of_step", test_out_of_step},
};

int main(int argc, char **argv) { return t_run(cases, sizeof cases / sizeof cases[0], argc, argv, 0); }
