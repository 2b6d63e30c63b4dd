/* test_client.c: the client (csrc/redis: client, node, session, transport,
 * resp) against a real redis-server started on a free port of 127.0.0.1.
 * Run: make -C tests/c test   (or: tests/c/test_client [name-filter]) */
#include "client_helpers.h"

#include <fcntl.h>
#include <poll.h>
#include <stdint.h>

#include "lanes.h"
#include "reply.h"
#include "sentinel.h"

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

    /* the batch blocks in BLPOP; a helper process kills the server meanwhile, once
     * the server counts the batch's client as blocked */
    pid_t killer = fork();
    if (killer == 0) {
        int blocked;
        T_WAIT_UNTIL(blocked, t_info_field(s2.port, "clients", "blocked_clients") == 1, 10.0);
        (void)blocked; /* killed either way: the batch must not hang */
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

/* Redis Cluster: slots, batch slots, redirect texts, the slot map (cluster_map.h). */
/* The sentinel walk keeps a sentinel round trip's out-of-memory failure as
 * NOMEM (MemoryError), never as a failure to connect, and stops there. */
static void test_sentinel_walk_nomem(void)
{
    lb_redis_config cfg;
    char err[512];
    CHECK(lb_redis_config_from_url(&cfg, "redis+sentinel://127.0.0.1:1,127.0.0.1:2/svc", err,
                                   sizeof err) == 0);
    lb_sentinel_walk w;
    const lb_redis_config *scfg;
    const lb_redis_batch *req;
    lb_sentinel_walk_init(&w, &cfg);
    CHECK(lb_sentinel_walk_next(&w, &scfg, &req) == 1);
    CHECK(lb_sentinel_walk_answer(&w, LB_REDIS_ERR_NOMEM, "out of memory reading replies",
                                  NULL) == 0);
    CHECK(lb_sentinel_walk_next(&w, &scfg, &req) == 0); /* no second sentinel asked */
    char *host = NULL;
    int port = 0;
    CHECK(lb_sentinel_walk_result(&w, &host, &port, err, sizeof err) == LB_REDIS_ERR_NOMEM);
    CHECK_MSG(strstr(err, "out of memory") != NULL, "%s", err);
    lb_sentinel_walk_free(&w);
    /* a refused connection stays CONNECT */
    lb_sentinel_walk_init(&w, &cfg);
    CHECK(lb_sentinel_walk_next(&w, &scfg, &req) == 1);
    lb_sentinel_walk_answer(&w, LB_REDIS_ERR_CONNECT, "refused", NULL);
    CHECK(lb_sentinel_walk_next(&w, &scfg, &req) == 1);
    lb_sentinel_walk_answer(&w, LB_REDIS_ERR_CONNECT, "refused", NULL);
    CHECK(lb_sentinel_walk_next(&w, &scfg, &req) == 0);
    CHECK(lb_sentinel_walk_result(&w, &host, &port, err, sizeof err) == LB_REDIS_ERR_CONNECT);
    lb_sentinel_walk_free(&w);
    lb_redis_config_free(&cfg);
}

/* lb_redis_connect on a node client connects, and says so (it read its
 * replies through a NULL pointer before). */
static void test_node_connect(void)
{
    lb_redis *r = conn_port(srv.port, 2000);
    CHECK(lb_redis_connect(r) == LB_REDIS_OK);
    CHECK(lb_redis_is_connected(r) && lb_redis_connect_count(r) == 1);
    CHECK(cmd(r, NULL, "PING") == LB_REDIS_OK && lb_redis_connect_count(r) == 1);
    lb_redis_free(r);
}

/* The blocking driver of lanes.h: round trips of many clients on one thread,
 * one poll over their sockets; a lane that fails (a server that never
 * answers: its timeout) ends alone, with the text it has alone. */
static int lane_next(lb_lane *l, lb_redis_step *s)
{
    int more = lb_redis_step_next(l->r, s);
    if (more)
        CHECK(s->what == LB_STEP_WAIT || s->what == LB_STEP_PAUSE);
    return more;
}

static void test_lanes(void)
{
    enum { N = 21 }; /* more than the driver keeps on its stack */
    int port;
    int lfd = t_silent_listener(&port);
    lb_redis *r[N];
    lb_lane l[N];
    lb_redis_batch b;
    lb_redis_batch_init(&b);
    lb_redis_batch_argv(&b, 1, (const char *const[]){"PING"}, NULL);
    for (int i = 0; i < N; i++) {
        r[i] = conn_port(i == 7 ? port : srv.port, 300);
        if (i % 2)
            CHECK(lb_redis_connect(r[i]) == LB_REDIS_OK || i == 7); /* kept connections too */
        CHECK(lb_redis_step_begin(r[i], &b, 0) == LB_REDIS_OK);
        lb_lane x = {lane_next, r[i], NULL, 0, {0}, 0};
        l[i] = x;
    }
    lb_lanes_run(l, N);
    for (int i = 0; i < N; i++) {
        lb_reply **rs = NULL;
        lb_redis_status st = lb_redis_step_end(r[i], &rs);
        if (i == 7) {
            CHECK(st == LB_REDIS_ERR_TIMEOUT && !rs);
            CHECK_MSG(strstr(lb_redis_errstr(r[i]), "did not answer within 300 ms"), "%s",
                      lb_redis_errstr(r[i]));
            CHECK(!lb_redis_is_connected(r[i]));
        } else {
            CHECK_MSG(st == LB_REDIS_OK && rs && rs[0]->type == LB_REPLY_STATUS &&
                          strcmp(rs[0]->str, "PONG") == 0,
                      "lane %d: %s", i, lb_redis_errstr(r[i]));
            CHECK(lb_redis_is_connected(r[i]) && lb_redis_connect_count(r[i]) == 1);
        }
        lb_redis_free(r[i]);
    }
    lb_redis_batch_free(&b);
    close(lfd);
}

/* A wait that poll answers with POLLNVAL (the socket is no longer open) ends
 * the round trip with the read's error; it was taken as "not readable" and
 * waited on again, which poll answers at once: a lane that never ended. */
static void test_lane_on_a_closed_socket_ends(void)
{
    int port;
    int lfd = t_silent_listener(&port);
    lb_redis *r = conn_port(port, 2000);
    CHECK(lb_redis_connect(r) == LB_REDIS_OK);
    lb_redis_batch b;
    lb_redis_batch_init(&b);
    lb_redis_batch_argv(&b, 1, (const char *const[]){"PING"}, NULL);
    CHECK(lb_redis_step_begin(r, &b, 0) == LB_REDIS_OK);
    lb_redis_step s;
    int more = lb_redis_step_next(r, &s);
    CHECK(more && s.what == LB_STEP_WAIT && s.fd >= 0);
    if (more && s.what == LB_STEP_WAIT && s.fd >= 0) {
        close(s.fd);
        int turns = 0;
        while (more && turns < 5) {
            lb_redis_step_ready(r, POLLNVAL, 0);
            more = lb_redis_step_next(r, &s);
            turns++;
        }
        CHECK_MSG(!more, "still waiting after %d turns of POLLNVAL", turns);
        lb_reply **rs = NULL;
        CHECK(lb_redis_step_end(r, &rs) != LB_REDIS_OK && !rs);
        CHECK_MSG(strstr(lb_redis_errstr(r), "Bad file descriptor") != NULL, "%s",
                  lb_redis_errstr(r));
    }
    lb_redis_batch_free(&b);
    lb_redis_free(r);
    close(lfd);
}

static const t_case cases[] = {
    {"basic_pipeline", test_basic_pipeline},
    {"auth_db_unix", test_auth_db_unix},
    {"connect_refused", test_connect_refused},
    {"timeout_silent_listener", test_timeout_silent_listener},
    {"killed_mid_batch", test_killed_mid_batch},
    {"fork", test_fork},
    {"reply_element_bound", test_reply_element_bound},
    {"sentinel_walk_nomem", test_sentinel_walk_nomem},
    {"node_connect", test_node_connect},
    {"lanes", test_lanes},
    {"lane_on_a_closed_socket_ends", test_lane_on_a_closed_socket_ends},
};

T_MAIN(cases, 1)
