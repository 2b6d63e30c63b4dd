/* lanes.c: see lanes.h. */
#define _POSIX_C_SOURCE 200809L
#include "lanes.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>

#define LANES_ON_STACK 16

static const char no_socket[] =
    "this connection is carried by the wire transport (wire.h): it has no socket of its own";

int64_t lb_lanes_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Take the lane's steps until one waits (a socket, a pause) or it is over. */
static void advance(lb_lane *l)
{
    for (;;) {
        if (!l->next(l, &l->s)) {
            l->on = 0;
            return;
        }
        switch (l->s.what) {
        case LB_STEP_WAIT:
            return;
        case LB_STEP_PAUSE:
            l->until = lb_lanes_now_ms() + (l->s.pause_ms > 0 ? l->s.pause_ms : 0);
            return;
        case LB_STEP_CONNECT:
            lb_redis_step_connected(l->r, LB_REDIS_ERR_ARG, no_socket);
            break;
        case LB_STEP_SEND:
            lb_redis_step_sent(l->r, LB_REDIS_ERR_ARG, no_socket);
            break;
        default:
            l->on = 0;
            return;
        }
    }
}

static void run(lb_lane *l, size_t n, struct pollfd *pfd, size_t *of)
{
    for (size_t i = 0; i < n; i++) {
        l[i].on = 1;
        advance(&l[i]);
    }
    for (;;) {
        int64_t now = lb_lanes_now_ms();
        int wait = -1, any = 0;
        size_t nfds = 0;
        for (size_t i = 0; i < n; i++) {
            lb_lane *x = &l[i];
            while (x->on && x->s.what == LB_STEP_PAUSE && now >= x->until) {
                advance(x);
                now = lb_lanes_now_ms();
            }
            if (!x->on)
                continue;
            any = 1;
            int64_t d = x->s.what == LB_STEP_PAUSE ? x->until : x->s.deadline_ms;
            if (x->s.what == LB_STEP_WAIT) {
                pfd[nfds].fd = x->s.fd;
                pfd[nfds].events = x->s.events;
                pfd[nfds].revents = 0;
                of[nfds++] = i;
            }
            if (d) {
                int64_t left = d - now;
                left = left < 0 ? 0 : left > 3600000 ? 3600000 : left;
                if (wait < 0 || left < wait)
                    wait = (int)left;
            }
        }
        if (!any)
            return;
        int pr = poll(pfd, (nfds_t)nfds, wait);
        int perr = pr < 0 && errno != EINTR ? errno : 0;
        now = lb_lanes_now_ms();
        for (size_t j = 0; j < nfds; j++) {
            lb_lane *x = &l[of[j]];
            short rev = pr > 0 ? pfd[j].revents : 0;
            if (rev || perr || (x->s.deadline_ms && now >= x->s.deadline_ms)) {
                lb_redis_step_ready(x->r, rev, perr);
                advance(x);
            }
        }
    }
}

void lb_lanes_run(lb_lane *l, size_t n)
{
    struct pollfd small[LANES_ON_STACK];
    size_t small_of[LANES_ON_STACK];
    if (n <= LANES_ON_STACK) {
        run(l, n, small, small_of);
        return;
    }
    struct pollfd *pfd = malloc(n * sizeof *pfd);
    size_t *of = malloc(n * sizeof *of);
    if (pfd && of) {
        run(l, n, pfd, of);
    } else {
        /* no memory for them all: a few lanes at a time */
        for (size_t i = 0; i < n; i += LANES_ON_STACK)
            run(l + i, n - i < LANES_ON_STACK ? n - i : LANES_ON_STACK, small, small_of);
    }
    free(pfd);
    free(of);
}

static int roundtrip_next(lb_lane *l, lb_redis_step *s)
{
    return lb_redis_step_next(l->r, s);
}

void lb_lanes_roundtrip(lb_redis *r)
{
    lb_lane l = {roundtrip_next, r, NULL, 0, {0}, 0};
    lb_lanes_run(&l, 1);
}
