/* client_helpers.h: clients and one-line commands for the C tests that talk
 * to the redis-server of the run (test_client.c, test_bitmap.c). */
#ifndef LB_TEST_CLIENT_HELPERS_H
#define LB_TEST_CLIENT_HELPERS_H

#include "redis_harness.h"

#include "client.h"
#include "factory.h"

static lb_redis *conn_port(int port, int timeout_ms)
{
    lb_redis_config cfg;
    lb_redis_config_init(&cfg);
    lb_redis_config_set(&cfg.host, "127.0.0.1");
    cfg.port = port;
    cfg.connect_timeout_ms = 2000;
    cfg.timeout_ms = timeout_ms;
    lb_redis *r = lb_redis_new(&cfg);
    lb_redis_config_free(&cfg);
    return r;
}

__attribute__((unused)) static lb_redis *conn_url(const char *url)
{
    lb_redis_config cfg;
    char err[256];
    if (lb_redis_config_from_url(&cfg, url, err, sizeof err) != LB_REDIS_OK) {
        fprintf(stderr, "bad url %s: %s\n", url, err);
        return NULL;
    }
    lb_redis *r = lb_redis_new(&cfg);
    lb_redis_config_free(&cfg);
    return r;
}

/* Run one command given as a string of space-separated words. */
static lb_redis_status cmd(lb_redis *r, lb_reply **out, const char *line)
{
    char buf[512];
    const char *argv[32];
    int argc = 0;
    snprintf(buf, sizeof buf, "%s", line);
    for (char *t = strtok(buf, " "); t && argc < 32; t = strtok(NULL, " "))
        argv[argc++] = t;
    return lb_redis_command_argv(r, argc, argv, NULL, 0, out);
}

static long long cmd_int(lb_redis *r, const char *line)
{
    lb_reply *x;
    if (cmd(r, &x, line) != LB_REDIS_OK || x->type != LB_REPLY_INTEGER) {
        fprintf(stderr, "cmd_int(%s): %s\n", line, lb_redis_errstr(r));
        return -999;
    }
    return x->integer;
}

#endif
