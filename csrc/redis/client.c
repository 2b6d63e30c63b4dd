/* client.c: see client.h.  The calls of the interface (factory.c picks the
 * implementation). */
#include "client.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void lb_redis_free(lb_redis *r)
{
    if (r)
        r->vt->free(r);
}

lb_redis *lb_redis_new_like(const lb_redis *r) { return r->vt->new_like(r); }

void lb_redis_abandon(lb_redis *r)
{
    if (r)
        r->vt->abandon(r);
}

lb_redis_status lb_redis_connect(lb_redis *r)
{
    lb_error_clear(&r->err);
    return r->vt->connect(r);
}

void lb_redis_disconnect(lb_redis *r) { r->vt->disconnect(r); }
int lb_redis_is_connected(const lb_redis *r) { return r->vt->is_connected(r); }
void lb_redis_set_timeout(lb_redis *r, int timeout_ms)
{
    r->vt->set_timeout(r, timeout_ms < 0 ? 0 : timeout_ms);
}
const lb_redis_config *lb_redis_get_config(const lb_redis *r) { return r->vt->config(r); }
unsigned long lb_redis_connect_count(const lb_redis *r) { return r->vt->connect_count(r); }
unsigned long lb_redis_roundtrip_count(const lb_redis *r) { return r->vt->roundtrip_count(r); }

const char *lb_redis_errstr(const lb_redis *r) { return r->err.text; }
long lb_redis_err_index(const lb_redis *r) { return r->err.index; }
int lb_redis_last_stale(const lb_redis *r) { return r->err.stale; }

lb_redis_status lb_redis_set_error(lb_redis *r, lb_redis_status st, const char *fmt, ...)
{
    r->err.status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->err.text, sizeof r->err.text, fmt, ap);
    va_end(ap);
    return st;
}

lb_redis_status lb_redis_take_error(lb_redis *r, const lb_redis *from)
{
    return lb_error_copy(&r->err, &from->err);
}

lb_redis_status lb_redis_exec(lb_redis *r, const lb_redis_batch *b, int flags, lb_reply ***replies)
{
    return r->vt->exec(r, b, flags, replies);
}

/* ------------------------------------------------- the round trip as steps */

static lb_redis_status no_steps(lb_redis *r)
{
    return lb_redis_set_error(r, LB_REDIS_ERR_ARG,
                              "the connection is not carried by the wire transport");
}

lb_redis_status lb_redis_step_begin(lb_redis *r, const lb_redis_batch *b, int flags)
{
    return r->vt->step_begin ? r->vt->step_begin(r, b, flags) : no_steps(r);
}

int lb_redis_step_next(lb_redis *r, lb_redis_step *s)
{
    if (r->vt->step_next)
        return r->vt->step_next(r, s);
    memset(s, 0, sizeof *s);
    return 0;
}

void lb_redis_step_connected(lb_redis *r, lb_redis_status st, const char *text)
{
    if (r->vt->step_connected)
        r->vt->step_connected(r, st, text);
}

lb_redis_status lb_redis_step_feed(lb_redis *r, const void *data, size_t len, int *complete)
{
    *complete = 0;
    return r->vt->step_feed ? r->vt->step_feed(r, data, len, complete) : no_steps(r);
}

void lb_redis_step_sent(lb_redis *r, lb_redis_status st, const char *text)
{
    if (r->vt->step_sent)
        r->vt->step_sent(r, st, text);
}

lb_redis_status lb_redis_step_end(lb_redis *r, lb_reply ***replies)
{
    if (r->vt->step_end)
        return r->vt->step_end(r, replies);
    *replies = NULL;
    return no_steps(r);
}

int lb_redis_step_open(const lb_redis *r)
{
    return r->vt->step_open && r->vt->step_open(r);
}

lb_redis *lb_redis_step_client(lb_redis *r, int node)
{
    return r->vt->step_client ? r->vt->step_client(r, node) : NULL;
}

void lb_redis_step_ready(lb_redis *r, short revents, int poll_errno)
{
    if (r->vt->step_ready)
        r->vt->step_ready(r, revents, poll_errno);
}

lb_redis *lb_redis_to_wire(lb_redis *r)
{
    return r->vt->to_wire(r);
}

int lb_redis_has_node(const lb_redis *r, int node)
{
    return r->vt->has_node ? r->vt->has_node(r, node) : node == 0;
}

lb_redis_status lb_redis_command_argv(lb_redis *r, int argc, const char *const *argv,
                                      const size_t *lens, int flags, lb_reply **reply)
{
    lb_redis_batch b;
    lb_reply **rs = NULL;
    lb_redis_batch_init(&b);
    lb_redis_batch_argv(&b, argc, argv, lens);
    lb_redis_status st = lb_redis_exec(r, &b, flags, &rs);
    lb_redis_batch_free(&b);
    if (reply)
        *reply = rs ? rs[0] : NULL;
    return st;
}
