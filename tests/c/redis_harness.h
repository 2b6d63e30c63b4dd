/* redis_harness.h: tiny test framework + a real redis-server on a free port
 * of 127.0.0.1 (never a fixed port, never another address), for the C tests
 * of the Redis client (csrc/redis).  Every server started is stopped: explicitly, at exit,
 * and by the kernel if the test process dies (PR_SET_PDEATHSIG). */
#ifndef LB_REDIS_HARNESS_H
#define LB_REDIS_HARNESS_H

#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static int t_failures, t_checks;
static const char *t_current = "";

#define CHECK(cond)                                                                   \
    do {                                                                              \
        t_checks++;                                                                   \
        if (!(cond)) {                                                                \
            t_failures++;                                                             \
            fprintf(stderr, "FAIL %s:%d [%s]: %s\n", __FILE__, __LINE__, t_current, #cond); \
        }                                                                             \
    } while (0)

#define CHECK_MSG(cond, ...)                                                          \
    do {                                                                              \
        t_checks++;                                                                   \
        if (!(cond)) {                                                                \
            t_failures++;                                                             \
            fprintf(stderr, "FAIL %s:%d [%s]: %s: ", __FILE__, __LINE__, t_current, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fputc('\n', stderr);                                                      \
        }                                                                             \
    } while (0)

static double t_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* A free TCP port of 127.0.0.1: bind port 0, read it back, close. */
static int t_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        perror("free port");
        exit(2);
    }
    close(fd);
    return ntohs(a.sin_port);
}

/* A listener on 127.0.0.1 that never accepts nor answers (the kernel still
 * completes connections into its backlog).  Returns the fd, *port set. */
__attribute__((unused)) static int t_silent_listener(int *port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        perror("listener");
        exit(2);
    }
    *port = ntohs(a.sin_port);
    return fd;
}

typedef struct {
    pid_t pid;
    int port;
    char dir[64];
    char sock[128];
} t_server;

#define T_MAX_SERVERS 16
static pid_t t_pids[T_MAX_SERVERS];

static void t_kill_all(void)
{
    for (int i = 0; i < T_MAX_SERVERS; i++)
        if (t_pids[i] > 0) {
            kill(t_pids[i], SIGKILL);
            waitpid(t_pids[i], NULL, 0);
            t_pids[i] = 0;
        }
}

static void t_on_signal(int sig)
{
    t_kill_all();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void t_track(pid_t pid, int add)
{
    for (int i = 0; i < T_MAX_SERVERS; i++) {
        if (add && t_pids[i] == 0) {
            t_pids[i] = pid;
            return;
        }
        if (!add && t_pids[i] == pid) {
            t_pids[i] = 0;
            return;
        }
    }
}

static void t_harness_init(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    atexit(t_kill_all);
    signal(SIGINT, t_on_signal);
    signal(SIGTERM, t_on_signal);
    signal(SIGSEGV, t_on_signal);
    signal(SIGABRT, t_on_signal);
    signal(SIGPIPE, SIG_IGN);
}

/* Is something answering PING on 127.0.0.1:port?  (raw socket, no library) */
static int t_ping(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    struct timeval tv = {0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    int ok = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 &&
        write(fd, "PING\r\n", 6) == 6) {
        char buf[16];
        ssize_t n = read(fd, buf, sizeof buf);
        ok = n >= 5 && memcmp(buf, "+PONG", 5) == 0;
    }
    close(fd);
    return ok;
}

/* Poll cond (an expression) every millisecond until it holds or `limit` seconds
 * have passed; ok is set to whether it held.  A wait on a condition in place of a
 * sleep that hopes for it; the limit only tells a hang from an answer. */
#define T_WAIT_UNTIL(ok, cond, limit)                                                 \
    do {                                                                              \
        double t_end_ = t_now() + (limit);                                            \
        while (!((ok) = !!(cond)) && t_now() < t_end_)                                \
            usleep(1000);                                                             \
    } while (0)

/* A field of the server's INFO (e.g. "blocked_clients"), asked on a raw socket;
 * -1 when the server does not answer within 200 ms or has no such field. */
__attribute__((unused)) static long t_info_field(int port, const char *section,
                                                 const char *field)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    struct timeval tv = {0, 200000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    long value = -1;
    char req[64], buf[8192], key[64];
    int rn = snprintf(req, sizeof req, "INFO %s\r\n", section);
    snprintf(key, sizeof key, "\n%s:", field);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, req, (size_t)rn) == rn) {
        size_t got = 0;
        ssize_t n;
        while (got < sizeof buf - 1 && (n = read(fd, buf + got, sizeof buf - 1 - got)) > 0) {
            got += (size_t)n;
            buf[got] = 0;
            const char *at = strstr(buf, key);
            if (at && strchr(at + strlen(key), '\r')) {
                value = strtol(at + strlen(key), NULL, 10);
                break;
            }
        }
    }
    close(fd);
    return value;
}

/* Bytes that clients sent to 127.0.0.1:port and the server has not read yet (the
 * receive queues of its established connections, /proc/net/tcp): above 0 once a
 * request waits at a server that is stopped or busy in a script. */
__attribute__((unused)) static long t_unread_input(int port)
{
    FILE *f = fopen("/proc/net/tcp", "r");
    if (!f)
        return -1;
    char line[512];
    long total = 0;
    if (!fgets(line, sizeof line, f)) { /* the header */
        fclose(f);
        return -1;
    }
    while (fgets(line, sizeof line, f)) {
        unsigned local_port, state;
        unsigned long tx, rx;
        if (sscanf(line, " %*d: %*x:%x %*x:%*x %x %lx:%lx", &local_port, &state, &tx, &rx) == 4 &&
            local_port == (unsigned)port && state == 1)
            total += (long)rx;
    }
    fclose(f);
    return total;
}

/* Start redis-server on s->port (0: pick a free one) with no persistence,
 * bound to 127.0.0.1, plus a unix socket in a private temp dir. */
static void t_server_start(t_server *s, const char *const *extra)
{
    t_harness_init();
    if (!s->dir[0]) {
        strcpy(s->dir, "/tmp/lb_redis_test_XXXXXX");
        if (!mkdtemp(s->dir)) {
            perror("mkdtemp");
            exit(2);
        }
        snprintf(s->sock, sizeof s->sock, "%s/redis.sock", s->dir);
    }
    for (int attempt = 0; attempt < 5; attempt++) {
        int port = s->port ? s->port : t_free_port();
        char portbuf[16];
        snprintf(portbuf, sizeof portbuf, "%d", port);
        const char *argv[48];
        int n = 0;
        argv[n++] = "redis-server";
        argv[n++] = "--port";
        argv[n++] = portbuf;
        argv[n++] = "--bind";
        argv[n++] = "127.0.0.1";
        argv[n++] = "--save";
        argv[n++] = "";
        argv[n++] = "--appendonly";
        argv[n++] = "no";
        argv[n++] = "--daemonize";
        argv[n++] = "no";
        argv[n++] = "--protected-mode";
        argv[n++] = "yes";
        argv[n++] = "--dir";
        argv[n++] = s->dir;
        argv[n++] = "--unixsocket";
        argv[n++] = s->sock;
        argv[n++] = "--unixsocketperm";
        argv[n++] = "700";
        argv[n++] = "--logfile";
        argv[n++] = "redis.log";
        for (int i = 0; extra && extra[i] && n < 46; i++)
            argv[n++] = extra[i];
        argv[n] = NULL;
        pid_t pid = fork();
        if (pid < 0) {
            perror("fork");
            exit(2);
        }
        if (pid == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            execvp("redis-server", (char *const *)argv);
            perror("exec redis-server");
            _exit(127);
        }
        t_track(pid, 1);
        for (int i = 0; i < 500; i++) { /* up to 5 s */
            if (t_ping(port)) {
                s->pid = pid;
                s->port = port;
                return;
            }
            int status;
            if (waitpid(pid, &status, WNOHANG) == pid) {
                t_track(pid, 0);
                pid = 0;
                break;
            }
            usleep(10000); /* a poll, up to 5 s */
        }
        if (pid) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            t_track(pid, 0);
        }
        if (s->port && attempt >= 2) /* fixed port (restart) keeps failing */
            break;
        usleep(100000); /* between two of the 5 tries (a port taken meanwhile) */
    }
    fprintf(stderr, "cannot start redis-server (see %s/redis.log)\n", s->dir);
    exit(2);
}

/* Stop with a signal (SIGKILL = crash, SIGTERM = shutdown) and reap. */
static void t_server_stop(t_server *s, int sig)
{
    if (s->pid > 0) {
        kill(s->pid, sig);
        waitpid(s->pid, NULL, 0);
        t_track(s->pid, 0);
        s->pid = 0;
    }
}

/* Stop and remove the temp dir. */
static void t_server_destroy(t_server *s)
{
    char path[256];
    t_server_stop(s, SIGKILL);
    snprintf(path, sizeof path, "%s/redis.log", s->dir);
    unlink(path);
    unlink(s->sock);
    rmdir(s->dir);
}


/* ---- the runner every test program shares ---- */

typedef struct {
    const char *name;
    void (*fn)(void);
} t_case;

static t_server srv; /* the main server of the run (when the program asks for one) */

/* Run the cases whose name contains argv[1] (all without it); with_server:
 * start srv first.  The exit status of the program. */
static int t_run(const t_case *cases, size_t n, int argc, char **argv, int with_server)
{
    const char *filter = argc > 1 ? argv[1] : NULL;
    t_harness_init();
    if (with_server) {
        t_server_start(&srv, NULL);
        printf("redis-server on 127.0.0.1:%d (pid %d)\n", srv.port, (int)srv.pid);
    }
    for (size_t i = 0; i < n; i++) {
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
    if (with_server)
        t_server_destroy(&srv);
    printf("%s: %d checks, %d failures\n", argv[0], t_checks, t_failures);
    return t_failures ? 1 : 0;
}

#define T_MAIN(cases, with_server)                                                  \
    int main(int argc, char **argv)                                                 \
    {                                                                               \
        return t_run(cases, sizeof cases / sizeof cases[0], argc, argv, with_server); \
    }

#endif
