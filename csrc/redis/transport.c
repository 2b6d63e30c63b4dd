/* transport.c: see transport.h. */
#define _POSIX_C_SOURCE 200809L
#include "transport.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "tls.h"

#ifndef MSG_NOSIGNAL
#define MSG_NOSIGNAL 0
#endif

#define LB_RBUF_SIZE (64 * 1024)

/* How bytes move: plain send/recv, or through the TLS session.
 *   send: > 0 sent; 0 nothing now (*ev = the poll events to wait for);
 *         -1 failed (message in e).
 *   recv: > 0 received; 0 the server closed; -1 nothing now (*ev as above);
 *         -2 failed (message in e). */
struct lb_transport_io {
    ssize_t (*send)(lb_transport *t, const lb_redis_config *cfg, const char *buf, size_t len,
                    short *ev, lb_redis_error *e);
    ssize_t (*recv)(lb_transport *t, const lb_redis_config *cfg, char *buf, size_t cap,
                    short *ev, lb_redis_error *e);
};

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int fd_of(const lb_transport *t)
{
    return ((redisContext *)t->ctx)->fd;
}

/* ---------------------------------------------------------------- plain */

static ssize_t plain_send(lb_transport *t, const lb_redis_config *cfg, const char *buf,
                          size_t len, short *ev, lb_redis_error *e)
{
    ssize_t k = send(fd_of(t), buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (k > 0)
        return k;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        int en = errno;
        char w[160];
        lb_redis_config_where(cfg, w, sizeof w);
        lb_error_set(e, LB_REDIS_ERR_IO, "connection to Redis at %s lost while sending: %s", w,
                     strerror(en));
        return -1;
    }
    *ev = POLLOUT;
    return 0;
}

static ssize_t plain_recv(lb_transport *t, const lb_redis_config *cfg, char *buf, size_t cap,
                          short *ev, lb_redis_error *e)
{
    ssize_t k = recv(fd_of(t), buf, cap, MSG_DONTWAIT);
    if (k >= 0)
        return k;
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) {
        *ev = POLLIN;
        return -1;
    }
    int en = errno;
    char w[160];
    lb_redis_config_where(cfg, w, sizeof w);
    lb_error_set(e, LB_REDIS_ERR_IO, "connection to Redis at %s lost: %s", w, strerror(en));
    return -2;
}

static const lb_transport_io plain_io = {plain_send, plain_recv};

/* ------------------------------------------------------------------ TLS */

/* TLS 1.3 servers check a client certificate after the client's handshake is
 * done: a server that wants one and got none closes the connection at the
 * first request.  Say so when a fresh session dies before any answer. */
static const char *tls_hint(const lb_transport *t, const lb_redis_config *cfg)
{
    if (!t->tls_unanswered)
        return "";
    return cfg->tls_certfile ? " (the server dropped the new TLS session: does it accept this "
                               "client certificate?)"
                             : " (the server dropped the new TLS session: does it require a "
                               "client certificate? see ssl_certfile / ssl_keyfile)";
}

static ssize_t tls_send(lb_transport *t, const lb_redis_config *cfg, const char *buf,
                        size_t len, short *ev, lb_redis_error *e)
{
    char msg[256], w[160];
    ssize_t k = lb_tls_write(t->tls, buf, len, msg, sizeof msg);
    if (k > 0)
        return k;
    if (k == LB_TLS_WANT_READ || k == LB_TLS_WANT_WRITE) {
        *ev = k == LB_TLS_WANT_READ ? POLLIN : POLLOUT;
        return 0;
    }
    lb_redis_config_where(cfg, w, sizeof w);
    lb_error_set(e, LB_REDIS_ERR_IO, "connection to Redis at %s lost while sending: %s%s", w, msg,
                 tls_hint(t, cfg));
    return -1;
}

static ssize_t tls_recv(lb_transport *t, const lb_redis_config *cfg, char *buf, size_t cap,
                        short *ev, lb_redis_error *e)
{
    char msg[256], w[160];
    ssize_t k = lb_tls_read(t->tls, buf, cap, msg, sizeof msg);
    if (k > 0)
        t->tls_unanswered = 0;
    if (k > 0 || (k == 0 && !t->tls_unanswered))
        return k;
    lb_redis_config_where(cfg, w, sizeof w);
    if (k == 0) {
        lb_error_set(e, LB_REDIS_ERR_IO,
                     "connection to Redis at %s closed by the server right after the TLS "
                     "handshake%s",
                     w, tls_hint(t, cfg));
        return -2;
    }
    if (k == LB_TLS_WANT_READ || k == LB_TLS_WANT_WRITE) {
        *ev = k == LB_TLS_WANT_READ ? POLLIN : POLLOUT;
        return -1;
    }
    lb_error_set(e, LB_REDIS_ERR_IO, "connection to Redis at %s lost: %s%s", w, msg,
                 tls_hint(t, cfg));
    return -2;
}

static const lb_transport_io tls_io = {tls_send, tls_recv};

/* The TLS handshake on the connected non-blocking socket fd, bounded by the
 * connect timeout (else the operation timeout; as an inactivity timeout). */
static lb_redis_status tls_handshake(const lb_redis_config *cfg, int fd, const char *host,
                                     const char *w, lb_tls **out, lb_redis_error *e)
{
    char msg[400];
    lb_tls_options o;
    memset(&o, 0, sizeof o);
    o.host = host;
    o.ca_certs = cfg->tls_ca_certs;
    o.ca_path = cfg->tls_ca_path;
    o.certfile = cfg->tls_certfile;
    o.keyfile = cfg->tls_keyfile;
    o.cert_reqs = cfg->tls_cert_reqs == LB_REDIS_CERT_NONE       ? LB_TLS_CERT_NONE
                  : cfg->tls_cert_reqs == LB_REDIS_CERT_OPTIONAL ? LB_TLS_CERT_OPTIONAL
                                                                 : LB_TLS_CERT_REQUIRED;
    o.check_hostname = cfg->tls_check_hostname != 2;
    *out = NULL;
    lb_tls *tls = lb_tls_new(fd, &o, msg, sizeof msg);
    if (!tls)
        return lb_error_set(e, LB_REDIS_ERR_CONNECT, "error connecting to Redis at %s: %s", w, msg);
    const int tmo = cfg->connect_timeout_ms > 0 ? cfg->connect_timeout_ms : cfg->timeout_ms;
    int64_t deadline = tmo > 0 ? now_ms() + tmo : 0;
    for (;;) {
        int st = lb_tls_handshake(tls, msg, sizeof msg);
        if (st == 0)
            break;
        if (st == LB_TLS_ERROR) {
            lb_tls_free(tls);
            return lb_error_set(e, LB_REDIS_ERR_CONNECT, "error connecting to Redis at %s: %s", w,
                                msg);
        }
        struct pollfd pfd = {fd, st == LB_TLS_WANT_READ ? POLLIN : POLLOUT, 0};
        int wait = -1;
        if (tmo > 0) {
            int64_t left = deadline - now_ms();
            wait = left > 0 ? (int)left : 0;
        }
        int pr = poll(&pfd, 1, wait);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            int en = errno;
            lb_tls_free(tls);
            if (pr < 0)
                return lb_error_set(e, LB_REDIS_ERR_CONNECT, "poll failed: %s", strerror(en));
            return lb_error_set(e, LB_REDIS_ERR_TIMEOUT,
                                "timeout connecting to Redis at %s: no TLS handshake within %d "
                                "ms (does the server speak TLS on this port?)",
                                w, tmo);
        }
    }
    *out = tls;
    return LB_REDIS_OK;
}

/* ------------------------------------------------------------ lifecycle */

int lb_transport_init(lb_transport *t)
{
    memset(t, 0, sizeof *t);
    t->fd = -1;
    t->rbuf = malloc(LB_RBUF_SIZE);
    return t->rbuf ? 0 : -1;
}

void lb_transport_fini(lb_transport *t)
{
    lb_transport_close(t);
    free(t->rbuf);
    t->rbuf = NULL;
}

void lb_transport_close(lb_transport *t)
{
    t->fd = -1; /* first: a fork from here on must not close the fd again */
    if (t->tls) {
        lb_tls_free(t->tls); /* writes nothing (no close_notify), leaves the fd */
        t->tls = NULL;
    }
    if (t->ctx) {
        redisFree(t->ctx);
        t->ctx = NULL;
    }
}

void lb_transport_abandon(lb_transport *t)
{
    if (t->fd >= 0 && t->pid != getpid())
        close(t->fd);
}

int lb_transport_is_open(const lb_transport *t)
{
    return t->ctx != NULL && t->pid == getpid();
}

/* The socket, set up: non-blocking, keepalive, no SIGPIPE. */
static lb_redis_status socket_setup(redisContext *c, const lb_redis_config *cfg, const char *w,
                                    lb_redis_error *e)
{
    int fl = fcntl(c->fd, F_GETFL);
    if (fl < 0 || fcntl(c->fd, F_SETFL, fl | O_NONBLOCK) < 0) {
        int en = errno;
        return lb_error_set(e, LB_REDIS_ERR_CONNECT, "cannot set up the socket to %s: %s", w,
                            strerror(en));
    }
    if (!cfg->unix_path)
        (void)redisEnableKeepAlive(c); /* best effort */
#ifdef SO_NOSIGPIPE /* where send() has no MSG_NOSIGNAL (macOS) */
    {
        int one = 1;
        (void)setsockopt(c->fd, SOL_SOCKET, SO_NOSIGPIPE, &one, sizeof one);
    }
#endif
    return LB_REDIS_OK;
}

lb_redis_status lb_transport_connect(lb_transport *t, const lb_redis_config *cfg,
                                     lb_redis_error *e)
{
    char w[160];
    const int ct = cfg->connect_timeout_ms;
    struct timeval tv = {ct / 1000, (ct % 1000) * 1000};
    const char *host = cfg->host ? cfg->host : "localhost";
    const int port = cfg->port ? cfg->port : 6379;
    redisContext *c;

    lb_transport_close(t);
    lb_redis_config_where(cfg, w, sizeof w);
    errno = 0;
    if (cfg->unix_path)
        c = ct > 0 ? redisConnectUnixWithTimeout(cfg->unix_path, tv)
                   : redisConnectUnix(cfg->unix_path);
    else
        c = ct > 0 ? redisConnectWithTimeout(host, port, tv) : redisConnect(host, port);
    int en = errno;
    if (!c)
        return lb_error_set(e, LB_REDIS_ERR_NOMEM, "out of memory connecting to %s", w);
    if (c->err) {
        int timed_out = en == ETIMEDOUT || en == EINPROGRESS || strstr(c->errstr, "timed out") ||
                        strstr(c->errstr, "Timed out");
        lb_redis_status st = timed_out ? LB_REDIS_ERR_TIMEOUT : LB_REDIS_ERR_CONNECT;
        lb_error_set(e, st, "%s connecting to Redis at %s: %s", timed_out ? "timeout" : "error", w,
                     c->errstr);
        redisFree(c);
        return st;
    }
    lb_redis_status st = socket_setup(c, cfg, w, e);
    lb_tls *tls = NULL;
    if (st == LB_REDIS_OK && cfg->tls && !cfg->unix_path)
        st = tls_handshake(cfg, c->fd, host, w, &tls, e);
    if (st != LB_REDIS_OK) {
        redisFree(c);
        return st;
    }
    t->ctx = c;
    t->tls = tls;
    t->tls_unanswered = tls != NULL;
    t->io = tls ? &tls_io : &plain_io;
    t->pid = getpid();
    t->fd = c->fd;
    return LB_REDIS_OK;
}

/* ----------------------------------------------------------- round trip */

void lb_transport_rt_begin(lb_transport_rt *rt, const lb_session *s, const char *buf, size_t len)
{
    const int tmo = s->cfg->timeout_ms;
    rt->buf = buf;
    rt->len = len;
    rt->sent = 0;
    rt->wev = POLLOUT; /* what the last send / recv waits for */
    rt->rev = POLLIN;
    rt->deadline = tmo > 0 ? now_ms() + tmo : 0;
    rt->complete = s->got == s->n;
    rt->waiting = 0;
}

int64_t lb_transport_now_ms(void) { return now_ms(); }

/* The timeout of a wait that saw nothing by the deadline, in the session's state. */
static lb_redis_status rt_timeout(lb_session *s)
{
    char w[160];
    lb_redis_config_where(s->cfg, w, sizeof w);
    return lb_error_set(s->err, LB_REDIS_ERR_TIMEOUT,
                        "timeout: Redis at %s did not answer within %d ms (%zu of %zu replies "
                        "read)",
                        w, s->cfg->timeout_ms, s->got, s->n);
}

int lb_transport_rt_step(lb_transport *t, lb_session *s, lb_transport_rt *rt, short revents,
                         int poll_errno, short *events, lb_redis_status *st)
{
    const lb_redis_config *cfg = s->cfg;
    const int tmo = cfg->timeout_ms;
    char w[160];
    for (;;) {
        int progress = 0;
        if (rt->waiting) {
            /* what the wait for the socket saw */
            rt->waiting = 0;
            if (poll_errno) {
                *st = lb_error_set(s->err, LB_REDIS_ERR_IO, "poll failed: %s", strerror(poll_errno));
                return 1;
            }
            if (!revents) {
                if (tmo > 0 && now_ms() >= rt->deadline) {
                    *st = rt_timeout(s);
                    return 1;
                }
                rt->waiting = 1; /* woken for another lane: wait on */
                *events = (short)(rt->rev | (rt->sent < rt->len ? rt->wev : 0));
                return 0;
            }
            /* POLLNVAL too: a socket no longer open is read, and its error ends the
             * round trip (waiting on it again would see POLLNVAL at once, for ever) */
            const int ready = t->tls || (revents & (POLLIN | POLLHUP | POLLERR | POLLNVAL));
            revents = 0;
            if (!ready)
                continue; /* writable only: send on the next turn */
        } else {
            if (rt->complete) {
                *st = rt->sent < rt->len ? lb_session_more_replies(s) : LB_REDIS_OK;
                return 1;
            }
            if (rt->sent < rt->len) {
                ssize_t k = t->io->send(t, cfg, rt->buf + rt->sent, rt->len - rt->sent, &rt->wev,
                                        s->err);
                if (k < 0) {
                    *st = s->err->status;
                    return 1;
                }
                rt->sent += (size_t)k;
                progress = k > 0;
            }
            if (!progress && !(t->tls && lb_tls_pending(t->tls) > 0)) {
                rt->waiting = 1;
                *events = (short)(rt->rev | (rt->sent < rt->len ? rt->wev : 0));
                return 0;
            }
        }
        rt->rev = POLLIN;
        ssize_t k = t->io->recv(t, cfg, t->rbuf, LB_RBUF_SIZE, &rt->rev, s->err);
        if (k > 0) {
            if (lb_session_feed(s, t->rbuf, (size_t)k, &rt->complete) != LB_REDIS_OK) {
                *st = s->err->status;
                return 1;
            }
            progress = 1;
        } else if (k == 0) {
            lb_redis_config_where(cfg, w, sizeof w);
            *st = lb_session_closed_error(s, w);
            return 1;
        } else if (k == -2) {
            *st = s->err->status;
            return 1;
        }
        if (progress && tmo > 0)
            rt->deadline = now_ms() + tmo;
    }
}

lb_redis_status lb_transport_roundtrip(lb_transport *t, lb_session *s, const char *buf,
                                       size_t len)
{
    lb_transport_rt rt;
    lb_redis_status st;
    short events = 0, revents = 0;
    int poll_errno = 0;
    lb_transport_rt_begin(&rt, s, buf, len);
    while (!lb_transport_rt_step(t, s, &rt, revents, poll_errno, &events, &st)) {
        struct pollfd pfd = {t->fd, events, 0};
        int wait = -1;
        if (rt.deadline) {
            int64_t left = rt.deadline - now_ms();
            wait = left > 0 ? (int)left : 0;
        }
        int pr = poll(&pfd, 1, wait);
        revents = pr > 0 ? (pfd.revents ? pfd.revents : POLLIN) : 0;
        poll_errno = pr < 0 && errno != EINTR ? errno : 0;
    }
    return st;
}

int lb_transport_fd(const lb_transport *t)
{
    return t->ctx ? fd_of(t) : -1;
}

int lb_transport_pending(lb_transport *t, lb_session *s)
{
    if (lb_session_pending(s))
        return 1;
    if (t->tls && lb_tls_pending(t->tls) > 0)
        return 1;
    struct pollfd pfd = {fd_of(t), POLLIN, 0};
    int pr;
    do
        pr = poll(&pfd, 1, 0);
    while (pr < 0 && errno == EINTR);
    if (pr > 0 && t->tls && !(pfd.revents & (POLLHUP | POLLERR))) {
        /* TLS records that carry no data (TLS 1.3 session tickets, key
         * updates) make the socket readable too: read, and only data or the
         * end of the connection counts. */
        char one[1];
        short ev;
        lb_redis_error scratch; /* a failure here only means "not clean" */
        ssize_t k = t->io->recv(t, s->cfg, one, 1, &ev, &scratch);
        return !(k == -1 && ev == POLLIN);
    }
    return pr != 0; /* readable, hung up, or poll itself failing: not clean */
}
