/* test_redis_core.c: C tests of csrc/core/redis_conn and redis_bitmap against
 * a real redis-server started on a free port of 127.0.0.1.
 * Run: make -C tests/c test   (or: tests/c/test_redis_core [name-filter]) */
#include "redis_harness.h"

#include <fcntl.h>
#include <poll.h>
#include <stdint.h>

#include "../../csrc/core/redis_cluster.h"
#include "../../csrc/core/redis_conn.h"
#include "../../csrc/core/redis_reply.h"
#ifdef LB_TEST_BITMAP
#include "../../csrc/core/blocked.h"
#include "../../csrc/core/hash.h"
#include "../../csrc/core/redis_bitmap.h"
#endif

static t_server srv; /* the main server of the run */

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

static lb_redis *conn_url(const char *url)
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

/* ------------------------------------------------------------------ URLs */

static void test_url_good(void)
{
    lb_redis_config c;
    char err[256];

    CHECK(lb_redis_config_from_url(&c, "redis://localhost", err, sizeof err) == LB_REDIS_OK);
    CHECK(c.host && strcmp(c.host, "localhost") == 0 && c.port == 0 && c.db == 0);
    CHECK(!c.username && !c.password && !c.unix_path);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "redis://h.example:6380/3", err, sizeof err) == 0);
    CHECK(strcmp(c.host, "h.example") == 0 && c.port == 6380 && c.db == 3);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "REDIS://:s%40cr%3At@127.0.0.1:7000/0", err, sizeof err) == 0);
    CHECK(!c.username && c.password && strcmp(c.password, "s@cr:t") == 0 && c.port == 7000);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "redis://al%20ice:p%2Fw@host/12", err, sizeof err) == 0);
    CHECK(c.username && strcmp(c.username, "al ice") == 0);
    CHECK(c.password && strcmp(c.password, "p/w") == 0 && c.db == 12);
    lb_redis_config_free(&c);

    /* username only, as redis-py; '@' inside the password (last '@' splits) */
    CHECK(lb_redis_config_from_url(&c, "redis://bob@host", err, sizeof err) == 0);
    CHECK(c.username && strcmp(c.username, "bob") == 0 && !c.password);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, "redis://u:p@ss@host:1", err, sizeof err) == 0);
    CHECK(strcmp(c.password, "p@ss") == 0 && strcmp(c.host, "host") == 0 && c.port == 1);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "redis://[::1]:6380/2", err, sizeof err) == 0);
    CHECK(strcmp(c.host, "::1") == 0 && c.port == 6380 && c.db == 2);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, "redis://[fe80::1%25eth0]", err, sizeof err) == 0);
    CHECK(c.host && strcmp(c.host, "fe80::1%eth0") == 0 && c.port == 0);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "redis://", err, sizeof err) == 0);
    CHECK(!c.host && c.port == 0);
    lb_redis_config_free(&c);

    /* query options win over the URL's fields */
    CHECK(lb_redis_config_from_url(&c,
                                   "redis://u:p@h/1?db=4&password=x%26y&socket_timeout=0.25"
                                   "&socket_connect_timeout=2",
                                   err, sizeof err) == 0);
    CHECK(c.db == 4 && strcmp(c.password, "x&y") == 0 && c.timeout_ms == 250 &&
          c.connect_timeout_ms == 2000);
    lb_redis_config_free(&c);

    /* TLS: rediss:// and redis-py's ssl_* query options; verification on by default */
    CHECK(lb_redis_config_from_url(&c, "rediss://h:6380", err, sizeof err) == 0);
    CHECK(c.tls == 1 && c.port == 6380 && c.tls_cert_reqs == LB_REDIS_CERT_REQUIRED &&
          c.tls_check_hostname == 0 && !c.tls_ca_certs);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c,
                                   "rediss://h?ssl_cert_reqs=none&ssl_check_hostname=false"
                                   "&ssl_ca_certs=/a%20b/ca.pem&ssl_certfile=/c.pem"
                                   "&ssl_keyfile=/k.pem&ssl_ca_path=/cas",
                                   err, sizeof err) == 0);
    CHECK(c.tls == 1 && c.tls_cert_reqs == LB_REDIS_CERT_NONE && c.tls_check_hostname == 2);
    CHECK(strcmp(c.tls_ca_certs, "/a b/ca.pem") == 0 && strcmp(c.tls_certfile, "/c.pem") == 0 &&
          strcmp(c.tls_keyfile, "/k.pem") == 0 && strcmp(c.tls_ca_path, "/cas") == 0);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, "redis://h", err, sizeof err) == 0 && c.tls == 0);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "unix:///tmp/r.sock?db=2&password=pw", err, sizeof err) == 0);
    CHECK(c.unix_path && strcmp(c.unix_path, "/tmp/r.sock") == 0 && c.db == 2);
    CHECK(strcmp(c.password, "pw") == 0 && !c.host);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "unix://user:pw@/var/run/my%20redis.sock", err, sizeof err) == 0);
    CHECK(strcmp(c.unix_path, "/var/run/my redis.sock") == 0);
    CHECK(strcmp(c.username, "user") == 0 && strcmp(c.password, "pw") == 0);
    lb_redis_config_free(&c);
}

static void expect_bad(const char *url, lb_redis_status want, const char *needle)
{
    lb_redis_config c;
    char err[256] = "";
    lb_redis_status st = lb_redis_config_from_url(&c, url, err, sizeof err);
    CHECK_MSG(st == want, "%s -> %s (%s)", url, lb_redis_status_name(st), err);
    CHECK_MSG(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", url, err, needle);
    CHECK(c.host == NULL && c.password == NULL && c.unix_path == NULL);
    lb_redis_config_free(&c);
}

static void test_url_bad(void)
{
    expect_bad("rediss://h:6380?ssl_cert_reqs=maybe", LB_REDIS_ERR_URL, "ssl_cert_reqs");
    expect_bad("rediss://h:6380?ssl_check_hostname=perhaps", LB_REDIS_ERR_URL,
               "ssl_check_hostname");
    expect_bad("localhost:6379", LB_REDIS_ERR_URL, "expected redis://");
    expect_bad("http://h", LB_REDIS_ERR_URL, "unsupported URL scheme 'http://'");
    expect_bad("redis://h:0", LB_REDIS_ERR_URL, "invalid port '0'");
    expect_bad("redis://h:65536", LB_REDIS_ERR_URL, "invalid port");
    expect_bad("redis://h:abc", LB_REDIS_ERR_URL, "invalid port 'abc'");
    expect_bad("redis://h:", LB_REDIS_ERR_URL, "invalid port ''");
    expect_bad("redis://h/abc", LB_REDIS_ERR_URL, "invalid database 'abc'");
    expect_bad("redis://h/-1", LB_REDIS_ERR_URL, "invalid database");
    expect_bad("redis://h/99999999999", LB_REDIS_ERR_URL, "invalid database");
    expect_bad("redis://::1:6379", LB_REDIS_ERR_URL, "brackets");
    expect_bad("redis://[::1:6379", LB_REDIS_ERR_URL, "without its ']'");
    expect_bad("redis://[::1]x", LB_REDIS_ERR_URL, "after ']'");
    expect_bad("redis://[]:1", LB_REDIS_ERR_URL, "empty IPv6");
    expect_bad("redis://u:p%zz@h", LB_REDIS_ERR_URL, "password");
    expect_bad("redis://u%2@h", LB_REDIS_ERR_URL, "user name");
    expect_bad("redis://u:p%00@h", LB_REDIS_ERR_URL, "password");
    expect_bad("redis://h?db=x", LB_REDIS_ERR_URL, "db='x'");
    expect_bad("redis://h?db", LB_REDIS_ERR_URL, "has no value");
    expect_bad("redis://h?frobnicate=1", LB_REDIS_ERR_URL, "unknown URL option 'frobnicate'");
    expect_bad("redis://h?socket_timeout=-1", LB_REDIS_ERR_URL, "socket_timeout");
    expect_bad("redis://h?socket_timeout=nan", LB_REDIS_ERR_URL, "socket_timeout");
    expect_bad("redis://h/0#frag", LB_REDIS_ERR_URL, "'#'");
    expect_bad("redis://h st", LB_REDIS_ERR_URL, "space");
    expect_bad("unix://host/tmp/s", LB_REDIS_ERR_URL, "must not name a host");
    expect_bad("unix://", LB_REDIS_ERR_URL, "needs a socket path");
    expect_bad("unix:///", LB_REDIS_ERR_URL, "needs a socket path");
    expect_bad("unix:///tmp/s%4", LB_REDIS_ERR_URL, "socket path");
    /* the password never appears in an error message */
    lb_redis_config c;
    char err[256];
    lb_redis_config_from_url(&c, "redis://u:hunter2@h:99999", err, sizeof err);
    CHECK(strstr(err, "hunter2") == NULL);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, NULL, err, sizeof err) == LB_REDIS_ERR_URL);
}

/* ------------------------------------------------------------ connection */

static void test_basic_pipeline(void)
{
    lb_redis *r = conn_port(srv.port, 2000);
    lb_reply *x;
    CHECK(!lb_redis_is_connected(r));
    CHECK(cmd(r, &x, "PING") == LB_REDIS_OK && x->type == LB_REPLY_STATUS &&
          strcmp(x->str, "PONG") == 0);
    CHECK(lb_redis_is_connected(r) && lb_redis_connect_count(r) == 1);

    /* binary-safe arguments, replies in order */
    lb_redis_batch b;
    lb_reply **rs;
    lb_redis_batch_init(&b);
    lb_redis_batch_cmd(&b, 3);
    lb_redis_batch_arg_str(&b, "SET");
    lb_redis_batch_arg_str(&b, "t:bin");
    lb_redis_batch_arg(&b, "a\0b\r\nc", 6);
    lb_redis_batch_cmd(&b, 2);
    lb_redis_batch_arg_str(&b, "GET");
    lb_redis_batch_arg_str(&b, "t:bin");
    lb_redis_batch_cmd(&b, 2);
    lb_redis_batch_arg_str(&b, "GET");
    lb_redis_batch_arg_str(&b, "t:none");
    lb_redis_batch_cmd(&b, 3);
    lb_redis_batch_arg_str(&b, "INCRBY");
    lb_redis_batch_arg_str(&b, "t:n");
    lb_redis_batch_arg_i64(&b, -42);
    lb_redis_batch_cmd(&b, 4);
    lb_redis_batch_arg_str(&b, "LRANGE");
    lb_redis_batch_arg_str(&b, "t:none");
    lb_redis_batch_arg_u64(&b, 0);
    lb_redis_batch_arg_i64(&b, -1);
    CHECK(lb_redis_exec(r, &b, 0, &rs) == LB_REDIS_OK);
    CHECK(rs[0]->type == LB_REPLY_STATUS && strcmp(rs[0]->str, "OK") == 0);
    CHECK(rs[1]->type == LB_REPLY_STRING && rs[1]->len == 6 && memcmp(rs[1]->str, "a\0b\r\nc", 6) == 0);
    CHECK(rs[2]->type == LB_REPLY_NIL);
    CHECK(rs[3]->type == LB_REPLY_INTEGER && rs[3]->integer == -42);
    CHECK(rs[4]->type == LB_REPLY_ARRAY && rs[4]->len == 0);

    /* an error reply mid-batch: status REPLY, index, other replies read, connection kept */
    lb_redis_batch_clear(&b);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"INCR", "t:n"}, NULL);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"INCR", "t:bin"}, NULL);
    lb_redis_batch_argv(&b, 1, (const char *const[]){"NOSUCHCOMMAND"}, NULL);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"INCR", "t:n"}, NULL);
    CHECK(lb_redis_exec(r, &b, 0, &rs) == LB_REDIS_ERR_REPLY);
    CHECK(lb_redis_err_index(r) == 1);
    CHECK(strstr(lb_redis_errstr(r), "not an integer") != NULL);
    CHECK(rs && rs[0]->integer == -41 && rs[2]->type == LB_REPLY_ERROR && rs[3]->integer == -40);
    CHECK(lb_redis_is_connected(r) && lb_redis_connect_count(r) == 1);
    CHECK(lb_redis_exec(r, &b, LB_REDIS_RAW_ERRORS, &rs) == LB_REDIS_OK);
    CHECK(rs[3]->integer == -38);

    /* WRONGTYPE */
    CHECK(cmd(r, NULL, "LPUSH t:list x") == LB_REDIS_OK);
    CHECK(cmd(r, &x, "GETBIT t:list 3") == LB_REDIS_ERR_WRONGTYPE);
    CHECK(strncmp(lb_redis_errstr(r), "WRONGTYPE", 9) == 0);
    CHECK(lb_redis_err_index(r) == 0);

    /* malformed batch: nothing sent */
    lb_redis_batch_clear(&b);
    lb_redis_batch_cmd(&b, 3);
    lb_redis_batch_arg_str(&b, "GET");
    CHECK(lb_redis_exec(r, &b, 0, &rs) == LB_REDIS_ERR_ARG && rs == NULL);
    lb_redis_batch_clear(&b);
    CHECK(lb_redis_exec(r, &b, 0, &rs) == LB_REDIS_OK); /* empty */

    /* a big pipeline: 200k INCRs in one round trip, replies in order */
    for (int i = 0; i < 200000; i++) {
        lb_redis_batch_cmd(&b, 2);
        lb_redis_batch_arg_str(&b, "INCR");
        lb_redis_batch_arg_str(&b, "t:big");
    }
    CHECK(lb_redis_exec(r, &b, 0, &rs) == LB_REDIS_OK);
    int inorder = 1;
    for (int i = 0; i < 200000; i++)
        inorder &= rs[i]->integer == i + 1;
    CHECK(inorder);
    /* big values both ways (64 MiB) */
    size_t big = (size_t)64 << 20;
    char *v = malloc(big);
    for (size_t i = 0; i < big; i++)
        v[i] = (char)(i * 7);
    lb_redis_batch_clear(&b);
    lb_redis_batch_cmd(&b, 3);
    lb_redis_batch_arg_str(&b, "SET");
    lb_redis_batch_arg_str(&b, "t:huge");
    lb_redis_batch_arg(&b, v, big);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "t:huge"}, NULL);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"DEL", "t:huge"}, NULL);
    CHECK(lb_redis_exec(r, &b, 0, &rs) == LB_REDIS_OK);
    CHECK(rs[1]->len == big && memcmp(rs[1]->str, v, big) == 0);
    free(v);
    lb_redis_batch_free(&b);
    CHECK(lb_redis_connect_count(r) == 1);
    lb_redis_free(r);
}

static void test_auth_db_unix(void)
{
    char url[300];
    lb_redis *admin = conn_port(srv.port, 2000);
    CHECK(cmd(admin, NULL, "ACL SETUSER alice on >s3cr:t@ ~* &* +@all") == LB_REDIS_OK);

    /* ACL user + password (percent-encoded) + db */
    snprintf(url, sizeof url, "redis://alice:s3cr%%3At%%40@127.0.0.1:%d/5", srv.port);
    lb_redis *r = conn_url(url);
    CHECK(cmd(r, NULL, "SET t:db5 five") == LB_REDIS_OK);
    lb_reply *x;
    CHECK(cmd(r, &x, "ACL WHOAMI") == LB_REDIS_OK && x->str && strcmp(x->str, "alice") == 0);
    CHECK(cmd(admin, &x, "GET t:db5") == LB_REDIS_OK && x->type == LB_REPLY_NIL);
    CHECK(cmd(admin, NULL, "SELECT 5") == LB_REDIS_OK);
    CHECK(cmd(admin, &x, "GET t:db5") == LB_REDIS_OK && x->str && strcmp(x->str, "five") == 0);
    lb_redis_free(r);

    /* wrong password -> AUTH, message from the server, nothing left connected */
    snprintf(url, sizeof url, "redis://alice:nope@127.0.0.1:%d", srv.port);
    r = conn_url(url);
    CHECK(cmd(r, NULL, "PING") == LB_REDIS_ERR_AUTH);
    CHECK(strstr(lb_redis_errstr(r), "WRONGPASS") != NULL);
    CHECK(strstr(lb_redis_errstr(r), "nope") == NULL);
    CHECK(!lb_redis_is_connected(r));
    lb_redis_free(r);

    /* db out of range -> REPLY naming SELECT */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/999", srv.port);
    r = conn_url(url);
    CHECK(cmd(r, NULL, "PING") == LB_REDIS_ERR_REPLY);
    CHECK(strstr(lb_redis_errstr(r), "SELECT 999") != NULL);
    lb_redis_free(r);

    /* unix socket with db */
    snprintf(url, sizeof url, "unix://%s?db=5", srv.sock);
    r = conn_url(url);
    CHECK(cmd(r, &x, "GET t:db5") == LB_REDIS_OK && x->str && strcmp(x->str, "five") == 0);
    lb_redis_free(r);
    snprintf(url, sizeof url, "unix://%s.missing", srv.sock);
    r = conn_url(url);
    CHECK(cmd(r, NULL, "PING") == LB_REDIS_ERR_CONNECT);
    CHECK(strstr(lb_redis_errstr(r), ".missing") != NULL);
    lb_redis_free(r);

    CHECK(cmd(admin, NULL, "ACL DELUSER alice") == LB_REDIS_OK);
    CHECK(cmd(admin, NULL, "FLUSHALL") == LB_REDIS_OK);
    lb_redis_free(admin);
}

static void test_connect_refused(void)
{
    int port = t_free_port(); /* nobody listens there */
    lb_redis *r = conn_port(port, 500);
    CHECK(cmd(r, NULL, "PING") == LB_REDIS_ERR_CONNECT);
    CHECK(strstr(lb_redis_errstr(r), "refused") != NULL);
    CHECK(!lb_redis_is_connected(r));
    /* the server comes up: the next call connects */
    t_server s2;
    memset(&s2, 0, sizeof s2);
    s2.port = port;
    t_server_start(&s2, NULL);
    CHECK(cmd(r, NULL, "PING") == LB_REDIS_OK);
    t_server_destroy(&s2);
    lb_redis_free(r);
}

static void test_timeout_silent_listener(void)
{
    int port;
    int lfd = t_silent_listener(&port);
    lb_redis *r = conn_port(port, 300);
    double t0 = t_now();
    CHECK(cmd(r, NULL, "PING") == LB_REDIS_ERR_TIMEOUT);
    double dt = t_now() - t0;
    CHECK_MSG(dt >= 0.29 && dt < 1.0, "took %.3f s", dt);
    CHECK(strstr(lb_redis_errstr(r), "300 ms") != NULL);
    CHECK(!lb_redis_is_connected(r)); /* discarded */
    /* idempotent batches are not retried on timeout */
    lb_redis_batch b;
    lb_redis_batch_init(&b);
    lb_redis_batch_argv(&b, 3, (const char *const[]){"GETBIT", "k", "1"}, NULL);
    t0 = t_now();
    CHECK(lb_redis_exec(r, &b, LB_REDIS_IDEMPOTENT, NULL) == LB_REDIS_ERR_TIMEOUT);
    dt = t_now() - t0;
    CHECK_MSG(dt < 1.0, "took %.3f s", dt);
    CHECK(lb_redis_connect_count(r) == 2);
    lb_redis_batch_free(&b);
    /* handshake timeout (AUTH never answered) */
    char url[128];
    snprintf(url, sizeof url, "redis://:pw@127.0.0.1:%d/1?socket_timeout=0.2", port);
    lb_redis *r2 = conn_url(url);
    t0 = t_now();
    CHECK(cmd(r2, NULL, "PING") == LB_REDIS_ERR_TIMEOUT);
    CHECK(t_now() - t0 < 1.0);
    lb_redis_free(r2);
    lb_redis_free(r);
    close(lfd);
}

static void test_killed_mid_batch(void)
{
    t_server s2;
    memset(&s2, 0, sizeof s2);
    t_server_start(&s2, NULL);
    lb_redis *r = conn_port(s2.port, 5000);
    CHECK(cmd(r, NULL, "SET t:a 0") == LB_REDIS_OK);

    /* the batch blocks in BLPOP; a helper process kills the server meanwhile */
    pid_t killer = fork();
    if (killer == 0) {
        usleep(300000);
        kill(s2.pid, SIGKILL);
        _exit(0);
    }
    lb_redis_batch b;
    lb_reply **rs;
    lb_redis_batch_init(&b);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"INCR", "t:a"}, NULL);
    lb_redis_batch_argv(&b, 3, (const char *const[]){"BLPOP", "t:nolist", "4"}, NULL);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"INCR", "t:a"}, NULL);
    double t0 = t_now();
    lb_redis_status st = lb_redis_exec(r, &b, LB_REDIS_IDEMPOTENT, &rs);
    CHECK_MSG(st == LB_REDIS_ERR_IO, "%s: %s", lb_redis_status_name(st), lb_redis_errstr(r));
    CHECK(t_now() - t0 < 3.0);
    CHECK(strstr(lb_redis_errstr(r), "1 of 3 replies") != NULL);
    CHECK(!lb_redis_is_connected(r) && rs == NULL);
    waitpid(killer, NULL, 0);
    waitpid(s2.pid, NULL, 0);
    t_track(s2.pid, 0);
    s2.pid = 0;

    /* server down between calls: connect error; then restarted: works */
    CHECK(cmd(r, NULL, "PING") == LB_REDIS_ERR_CONNECT);
    t_server_start(&s2, NULL);
    CHECK(cmd(r, NULL, "PING") == LB_REDIS_OK);
    unsigned long c0 = lb_redis_connect_count(r);

    /* stale connection after a restart: an idempotent batch is retried once */
    t_server_stop(&s2, SIGKILL);
    t_server_start(&s2, NULL);
    lb_redis_batch_clear(&b);
    lb_redis_batch_argv(&b, 4, (const char *const[]){"SETBIT", "t:bits", "7", "1"}, NULL);
    st = lb_redis_exec(r, &b, LB_REDIS_IDEMPOTENT, &rs);
    CHECK_MSG(st == LB_REDIS_OK, "%s", lb_redis_errstr(r));
    CHECK(lb_redis_connect_count(r) == c0 + 1);
    /* ... a non-idempotent one too, as the dead connection's EOF is seen before
     * anything is sent (pending input: the connection is discarded unused) */
    t_server_stop(&s2, SIGKILL);
    t_server_start(&s2, NULL);
    lb_redis_batch_clear(&b);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"INCR", "t:a"}, NULL);
    c0 = lb_redis_connect_count(r);
    CHECK(lb_redis_exec(r, &b, 0, &rs) == LB_REDIS_OK && rs[0]->integer == 1);
    CHECK(lb_redis_connect_count(r) == c0 + 1);
    /* with LB_REDIS_KEPT_CONN nothing is sent: stale, for the caller to redo its set-up */
    t_server_stop(&s2, SIGKILL);
    t_server_start(&s2, NULL);
    CHECK(lb_redis_exec(r, &b, LB_REDIS_KEPT_CONN, &rs) == LB_REDIS_ERR_IO &&
          lb_redis_last_stale(r) && rs == NULL);
    CHECK(lb_redis_exec(r, &b, LB_REDIS_KEPT_CONN, &rs) == LB_REDIS_OK && rs[0]->integer == 1);
    /* graceful shutdown (server closes the socket): same */
    t_server_stop(&s2, SIGTERM);
    t_server_start(&s2, NULL);
    lb_redis_batch_clear(&b);
    lb_redis_batch_argv(&b, 3, (const char *const[]){"GETBIT", "t:bits", "7"}, NULL);
    CHECK(lb_redis_exec(r, &b, LB_REDIS_IDEMPOTENT, &rs) == LB_REDIS_OK && rs[0]->integer == 0);
    lb_redis_batch_free(&b);
    lb_redis_free(r);
    t_server_destroy(&s2);
}

static void test_fork(void)
{
    lb_redis *r = conn_port(srv.port, 2000);
    long long id = cmd_int(r, "CLIENT ID");
    CHECK(id > 0);
    /* leave a half-written state nowhere: just fork with an open socket */
    int pfd[2];
    CHECK(pipe(pfd) == 0);
    pid_t child = fork();
    if (child == 0) {
        close(pfd[0]);
        long long cid = cmd_int(r, "CLIENT ID");
        long long ok = cid > 0 && cid != id && lb_redis_connect_count(r) == 2;
        /* the child frees its object: closes its own fd, sends nothing */
        lb_redis_free(r);
        if (write(pfd[1], &ok, sizeof ok) != sizeof ok)
            _exit(3);
        _exit(0);
    }
    close(pfd[1]);
    long long ok = 0;
    CHECK(read(pfd[0], &ok, sizeof ok) == sizeof ok && ok == 1);
    close(pfd[0]);
    int status;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    /* the parent's connection is intact and still the same */
    CHECK(cmd_int(r, "CLIENT ID") == id);
    CHECK(lb_redis_connect_count(r) == 1);
    lb_redis_free(r);
}

/* redis_reply.h: replies that fit what was sent, and ones that do not. */
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

/* Element bounds on a real server: an array longer than the batch allows is
 * refused (and the connection dropped); within the bound it is read whole. */
static void test_reply_element_bound(void)
{
    lb_redis *r = conn_port(srv.port, 5000);
    CHECK(cmd(r, NULL, "DEL t:list") == LB_REDIS_OK);
    CHECK(cmd(r, NULL, "RPUSH t:list a b c d e") == LB_REDIS_OK);
    lb_redis_batch b;
    lb_reply **rs;
    lb_redis_batch_init(&b);
    lb_redis_batch_argv(&b, 4, (const char *const[]){"LRANGE", "t:list", "0", "-1"}, NULL);
    lb_redis_batch_expect_elements(&b, 5);
    CHECK(lb_redis_exec(r, &b, 0, &rs) == LB_REDIS_OK && rs[0]->len == 5 &&
          rs[0]->element[4]->len == 1 && rs[0]->element[4]->str[0] == 'e');
    unsigned long c0 = lb_redis_connect_count(r);
    lb_redis_batch_clear(&b);
    lb_redis_batch_argv(&b, 4, (const char *const[]){"LRANGE", "t:list", "0", "-1"}, NULL);
    lb_redis_batch_expect_elements(&b, 4);
    lb_redis_status st = lb_redis_exec(r, &b, 0, &rs);
    CHECK_MSG(st == LB_REDIS_ERR_PROTOCOL && strstr(lb_redis_errstr(r), "more than the command"),
              "%s: %s", lb_redis_status_name(st), lb_redis_errstr(r));
    CHECK(!lb_redis_is_connected(r));
    /* a byte bound: GET of a 3000-byte value with room for 100 data bytes */
    char big[3001];
    memset(big, 'v', 3000);
    big[3000] = '\0';
    CHECK(lb_redis_command_argv(r, 3, (const char *const[]){"SET", "t:big", big}, NULL, 0, NULL) ==
          LB_REDIS_OK);
    CHECK(lb_redis_connect_count(r) == c0 + 1);
    lb_redis_batch_clear(&b);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "t:big"}, NULL);
    lb_redis_batch_expect_bytes(&b, 100);
    st = lb_redis_exec(r, &b, 0, &rs);
    CHECK_MSG(st == LB_REDIS_ERR_PROTOCOL && strstr(lb_redis_errstr(r), "reply bytes"), "%s: %s",
              lb_redis_status_name(st), lb_redis_errstr(r));
    lb_redis_batch_clear(&b);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "t:big"}, NULL);
    lb_redis_batch_expect_bytes(&b, 3000);
    CHECK(lb_redis_exec(r, &b, 0, &rs) == LB_REDIS_OK && rs[0]->len == 3000);
    lb_redis_batch_free(&b);
    lb_redis_free(r);
}

/* Redis Cluster: slots, batch slots, redirect texts, the slot map (redis_cluster.h). */
static int ranges_seen;
static long range_lo[8], range_hi[8], range_port[8], range_rep[8];
static char range_host[8][64];
static int note_range(void *ctx, long lo, long hi, const char *host, int port, int replica)
{
    (void)ctx;
    if (ranges_seen < 8) {
        range_lo[ranges_seen] = lo;
        range_hi[ranges_seen] = hi;
        range_port[ranges_seen] = port;
        range_rep[ranges_seen] = replica;
        snprintf(range_host[ranges_seen], sizeof range_host[0], "%s", host);
    }
    ranges_seen++;
    return 0;
}

static lb_reply *mk(int type, const char *str, long long v, size_t n, lb_reply **el)
{
    lb_reply *x = calloc(1, sizeof *x);
    x->type = type;
    x->integer = v;
    if (str) {
        x->str = strdup(str);
        x->len = strlen(str);
    }
    if (type == LB_REPLY_ARRAY) {
        x->len = n;
        x->element = malloc(n * sizeof *el);
        memcpy(x->element, el, n * sizeof *el);
    }
    return x;
}
static void unmk(lb_reply *x)
{
    if (x->type == LB_REPLY_ARRAY)
        for (size_t i = 0; i < x->len; i++)
            unmk(x->element[i]);
    free(x->element);
    free(x->str);
    free(x);
}
/* parse_map on a reply built here, then freed */
static int parse_built(lb_reply *x, int shards, int tls)
{
    int r = lb_cluster_parse_map(x, shards, "asked", tls, note_range, NULL);
    unmk(x);
    return r;
}
#define S(s) mk(LB_REPLY_STRING, s, 0, 0, NULL)
#define I(v) mk(LB_REPLY_INTEGER, NULL, v, 0, NULL)
#define A(...) mk(LB_REPLY_ARRAY, NULL, 0, sizeof((lb_reply *[]){__VA_ARGS__}) / sizeof(lb_reply *), \
                  (lb_reply *[]){__VA_ARGS__})

static void test_cluster_protocol(void)
{
    /* The specification's check value, and its hash tag examples. */
    CHECK(lb_cluster_crc16("123456789", 9) == 0x31C3);
    CHECK(lb_cluster_key_slot("123456789", 9) == 12739);
    CHECK(lb_cluster_key_slot("foo", 3) == 12182);
    CHECK(lb_cluster_key_slot("{user1000}.following", 20) ==
          lb_cluster_key_slot("{user1000}.followers", 20));
    CHECK(lb_cluster_key_slot("{user1000}.following", 20) == lb_cluster_key_slot("user1000", 8));
    CHECK(lb_cluster_key_slot("foo{}{bar}", 10) == lb_cluster_key_slot("foo{}{bar}", 10) &&
          lb_cluster_key_slot("foo{}{bar}", 10) == (lb_cluster_crc16("foo{}{bar}", 10) & 16383));
    CHECK(lb_cluster_key_slot("foo{{bar}}zap", 13) == lb_cluster_key_slot("{bar", 4));
    CHECK(lb_cluster_key_slot("foo{bar}{zap}", 13) == lb_cluster_key_slot("bar", 3));
    CHECK(lb_cluster_key_slot("", 0) == 0);
    /* Keys are bytes: a NUL is one of them, inside a tag or out of it. */
    CHECK(lb_cluster_key_slot("a\0b", 3) == (lb_cluster_crc16("a\0b", 3) & 16383) &&
          lb_cluster_key_slot("a\0b", 3) != lb_cluster_key_slot("a", 1));
    CHECK(lb_cluster_key_slot("x{a\0b}y", 7) == lb_cluster_key_slot("a\0b", 3));
    CHECK(lb_cluster_key_slot("\0{b}", 4) == lb_cluster_key_slot("b", 1));
    CHECK(lb_cluster_key_slot("}\0{", 3) == (lb_cluster_crc16("}\0{", 3) & 16383));
    {
        char *k, *base;
        size_t baselen;
        CHECK(lb_redis_slot_names("a\0b", 3, &k, &base, &baselen) == 0 && baselen == 5 &&
              memcmp(k, "a\0b", 3) == 0 && memcmp(base, "{a\0b}", 5) == 0);
        free(k);
        free(base);
        CHECK(lb_redis_slot_names("{\0}x", 4, &k, &base, &baselen) == 0 && baselen == 4 &&
              memcmp(base, "{\0}x", 4) == 0);
        free(k);
        free(base);
    }

    /* A batch knows its slot: key arguments, BITOP's second, keyless commands. */
    lb_redis_batch b;
    lb_redis_batch_init(&b);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"INFO", "memory"}, NULL);
    CHECK(!b.has_slot);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "{t}a"}, NULL);
    lb_redis_batch_argv(&b, 5, (const char *const[]){"BITOP", "OR", "{t}b", "{t}b", "{t}c"}, NULL);
    lb_redis_batch_argv(&b, 3, (const char *const[]){"WAIT", "1", "0"}, NULL);
    CHECK(b.has_slot && b.slot == lb_cluster_key_slot("t", 1) && !b.multi_slot);
    size_t off[5];
    CHECK(lb_redis_batch_offsets(&b, off) == 0 && off[0] == 0 && off[4] == b.len);
    lb_redis_batch sub;
    lb_redis_batch_init(&sub);
    lb_redis_batch_raw(&sub, b.buf + off[1], off[2] - off[1]);
    CHECK(sub.ncmds == 1 && sub.len == off[2] - off[1] && memcmp(sub.buf, "*2\r\n$3\r\nGET", 11) == 0);
    lb_redis_batch_free(&sub);
    lb_redis_batch_argv(&b, 2, (const char *const[]){"GET", "other"}, NULL);
    CHECK(b.multi_slot && b.multi_cmd == 4);
    lb_redis_batch_clear(&b);
    CHECK(!b.has_slot && !b.multi_slot);
    lb_redis_batch_free(&b);

    /* Redirect texts. */
    long slot;
    int port;
    char host[64];
    CHECK(lb_cluster_redirect("MOVED 3999 127.0.0.1:6381", 25, &slot, host, sizeof host, &port) == 1 &&
          slot == 3999 && port == 6381 && strcmp(host, "127.0.0.1") == 0);
    CHECK(lb_cluster_redirect("ASK 0 :7000", 11, &slot, host, sizeof host, &port) == 2 &&
          slot == 0 && port == 7000 && host[0] == 0);
    CHECK(lb_cluster_redirect("MOVED 16384 h:1", 15, &slot, host, sizeof host, &port) == 0);
    CHECK(lb_cluster_redirect("MOVED 1 h:0", 11, &slot, host, sizeof host, &port) == 0);
    CHECK(lb_cluster_redirect("MOVED 1 h", 9, &slot, host, sizeof host, &port) == 0);
    CHECK(lb_cluster_redirect("ERR MOVED 1 h:1", 15, &slot, host, sizeof host, &port) == 0);

    /* CLUSTER SLOTS: an unknown endpoint ("?") is the node asked. */
    lb_reply *slots = A(A(I(0), I(5460), A(S("10.0.0.1"), I(7000), S("id1")),
                          A(S("?"), I(7003), S("id4"))),
                        A(I(5461), I(16383), A(S(""), I(7001), S("id2"))));
    ranges_seen = 0;
    CHECK(lb_cluster_parse_map(slots, 0, "asked", 0, note_range, NULL) == 0 && ranges_seen == 3);
    CHECK(range_lo[0] == 0 && range_hi[0] == 5460 && range_port[0] == 7000 && !range_rep[0] &&
          strcmp(range_host[0], "10.0.0.1") == 0);
    CHECK(range_rep[1] && strcmp(range_host[1], "asked") == 0 && range_port[1] == 7003);
    CHECK(strcmp(range_host[2], "asked") == 0 && range_lo[2] == 5461);
    /* CLUSTER SHARDS: the primary first; a failed replica serves nothing; tls-port. */
    lb_reply *shards = A(A(S("slots"), A(I(0), I(99), I(200), I(300)), S("nodes"),
                           A(A(S("id"), S("r"), S("port"), I(7004), S("ip"), S("10.0.0.4"),
                               S("endpoint"), S("10.0.0.4"), S("role"), S("replica"),
                               S("health"), S("online")),
                             A(S("id"), S("x"), S("port"), I(7005), S("ip"), S("10.0.0.5"),
                               S("role"), S("replica"), S("health"), S("failed")),
                             A(S("id"), S("p"), S("port"), I(7000), S("tls-port"), I(8000),
                               S("ip"), S("10.0.0.1"), S("endpoint"), S("?"), S("role"),
                               S("master"), S("health"), S("online")))));
    ranges_seen = 0;
    CHECK(lb_cluster_parse_map(shards, 1, "asked", 1, note_range, NULL) == 0 && ranges_seen == 4);
    CHECK(!range_rep[0] && range_port[0] == 8000 && strcmp(range_host[0], "10.0.0.1") == 0);
    CHECK(range_rep[1] && range_port[1] == 7004 && range_hi[1] == 99);
    CHECK(range_lo[2] == 200 && range_hi[2] == 300 && !range_rep[2]);
    ranges_seen = 0;
    CHECK(lb_cluster_parse_map(shards, 1, "asked", 0, note_range, NULL) == 0 &&
          range_port[0] == 7000);
    unmk(slots);
    unmk(shards);
    /* Not a map: refused. */
    CHECK(parse_built(S("x"), 0, 0) == -1);
    CHECK(parse_built(A(A(I(5), I(2), A(S("h"), I(1)))), 0, 0) == -1);
    CHECK(parse_built(A(A(I(0), I(16384), A(S("h"), I(1)))), 0, 0) == -1);
    CHECK(parse_built(A(A(I(0), I(1), A(S("h"), I(70000)))), 0, 0) == -1);
    CHECK(parse_built(A(A(S("slots"), A(I(1)), S("nodes"), A(I(1)))), 1, 0) == -1);

    /* URLs. */
    lb_redis_config c;
    char err[256];
    CHECK(lb_redis_config_from_url(&c, "redis+cluster://u:p@h1:7000,h2?read_from_replicas=true&"
                                       "cluster_retry_timeout=2.5", err, sizeof err) == 0);
    CHECK(c.cluster_nodes && strcmp(c.cluster_nodes, "h1:7000,h2:6379") == 0);
    CHECK(strcmp(c.host, "h1") == 0 && c.port == 7000 && c.cluster_replica_reads == 1 &&
          c.cluster_retry_ms == 2500 && strcmp(c.password, "p") == 0);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, "rediss+cluster://h:1/0", err, sizeof err) == 0 && c.tls == 1);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, "redis+cluster://h:1/1", err, sizeof err) == LB_REDIS_ERR_URL &&
          strstr(err, "database 0"));
    CHECK(lb_redis_config_from_url(&c, "redis://h:1?cluster_retry_timeout=1", err, sizeof err) ==
          LB_REDIS_ERR_URL);
    char longurl[400] = "redis+cluster://";
    memset(longurl + 16, 'h', 300);
    strcpy(longurl + 316, ":1");
    CHECK(lb_redis_config_from_url(&c, longurl, err, sizeof err) == LB_REDIS_ERR_URL &&
          strstr(err, "longer than 253"));
}

#ifdef LB_TEST_BITMAP
#include "test_redis_bitmap.inc"
#endif

typedef struct {
    const char *name;
    void (*fn)(void);
} t_case;

static const t_case cases[] = {
    {"url_good", test_url_good},
    {"url_bad", test_url_bad},
    {"basic_pipeline", test_basic_pipeline},
    {"auth_db_unix", test_auth_db_unix},
    {"connect_refused", test_connect_refused},
    {"timeout_silent_listener", test_timeout_silent_listener},
    {"killed_mid_batch", test_killed_mid_batch},
    {"fork", test_fork},
    {"reply_predicates", test_reply_predicates},
    {"reply_element_bound", test_reply_element_bound},
    {"cluster_protocol", test_cluster_protocol},
#ifdef LB_TEST_BITMAP
    LB_BITMAP_CASES
#endif
};

int main(int argc, char **argv)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    t_harness_init();
    t_server_start(&srv, NULL);
    printf("redis-server on 127.0.0.1:%d (pid %d)\n", srv.port, (int)srv.pid);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (filter && !strstr(cases[i].name, filter))
            continue;
        int before = t_failures;
        t_current = cases[i].name;
        double t0 = t_now();
        cases[i].fn();
        printf("%-28s %s (%.2f s)\n", cases[i].name, t_failures == before ? "ok" : "FAILED",
               t_now() - t0);
        fflush(stdout);
    }
    t_server_destroy(&srv);
    printf("%d checks, %d failures\n", t_checks, t_failures);
    return t_failures ? 1 : 0;
}
