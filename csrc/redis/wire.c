/* wire.c: see wire.h.  A client around one connection machine (conn.h):
 * the round trip's steps are the machine's, handed to the wire transport. */
#include "wire.h"

#include <stdlib.h>

#include "conn.h"

typedef struct {
    lb_redis base;
    lb_conn c;
    unsigned long roundtrips0; /* round trips counted before (from) */
    int probe;                 /* the last step was on the sentinel's connection */
} lb_wire;

static const lb_redis_vt wire_vt;

#define WIRE(r) ((lb_wire *)(r))

int lb_wire_is(const lb_redis *r)
{
    return r && r->vt == &wire_vt;
}

static void wire_free(lb_redis *r)
{
    if (!r)
        return;
    lb_conn_fini(&WIRE(r)->c);
    free(r);
}

static lb_redis *wire_new(const lb_redis_config *cfg, unsigned long connects,
                          unsigned long roundtrips)
{
    lb_wire *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->base.vt = &wire_vt;
    lb_error_clear(&w->base.err);
    if (lb_conn_init(&w->c, cfg, &w->base.err) < 0) {
        wire_free(&w->base);
        return NULL;
    }
    w->c.connects = connects;
    w->roundtrips0 = roundtrips;
    return &w->base;
}

lb_redis *lb_wire_new_from(const lb_redis *from)
{
    return wire_new(lb_redis_get_config(from), lb_redis_connect_count(from),
                    lb_redis_roundtrip_count(from));
}

static lb_redis *wire_new_like(const lb_redis *r)
{
    return wire_new(&WIRE(r)->c.cfg, 0, 0);
}

lb_redis *lb_wire_new_cfg(const lb_redis_config *cfg)
{
    return wire_new(cfg, 0, 0);
}

static lb_redis_status wire_exec(lb_redis *r, const lb_redis_batch *b, int flags,
                                 lb_reply ***replies)
{
    (void)b;
    (void)flags;
    if (replies)
        *replies = NULL;
    return lb_error_set(&r->err, LB_REDIS_ERR_ARG,
                        "this connection is carried by the wire transport (wire.h): it has no "
                        "socket of its own");
}

static lb_redis_status wire_connect(lb_redis *r)
{
    return wire_exec(r, NULL, 0, NULL);
}

static void wire_disconnect(lb_redis *r)
{
    lb_conn_closed(&WIRE(r)->c); /* the wire transport must close its connection too */
}

static int wire_is_connected(const lb_redis *r)
{
    return lb_conn_is_open(&WIRE(r)->c, 0);
}

static void wire_set_timeout(lb_redis *r, int timeout_ms) { WIRE(r)->c.cfg.timeout_ms = timeout_ms; }
static unsigned long wire_connect_count(const lb_redis *r) { return WIRE(r)->c.connects; }
static unsigned long wire_roundtrip_count(const lb_redis *r)
{
    return WIRE(r)->roundtrips0 + WIRE(r)->c.s.roundtrips;
}
static const lb_redis_config *wire_config(const lb_redis *r) { return &WIRE(r)->c.cfg; }
static void wire_abandon(lb_redis *r) { (void)r; /* no socket of its own */ }

/* ------------------------------------------ the round trip, as steps */

static lb_redis_status wire_step_begin(lb_redis *r, const lb_redis_batch *b, int flags)
{
    return lb_conn_begin(&WIRE(r)->c, b, flags);
}

static int wire_step_next(lb_redis *r, lb_redis_step *s)
{
    int more = lb_conn_next(&WIRE(r)->c, s);
    WIRE(r)->probe = s->probe;
    return more;
}

static void wire_step_connected(lb_redis *r, lb_redis_status st, const char *text)
{
    lb_conn_connected(&WIRE(r)->c, st, text || st == LB_REDIS_OK ? text : "cannot connect");
}

static lb_redis_status wire_step_feed(lb_redis *r, const void *data, size_t len, int *complete)
{
    return lb_conn_feed(&WIRE(r)->c, data, len, complete);
}

static void wire_step_sent(lb_redis *r, lb_redis_status st, const char *text)
{
    if (!text && (st == LB_REDIS_ERR_IO || st == LB_REDIS_ERR_TIMEOUT))
        lb_conn_sent_worded(&WIRE(r)->c, st); /* the server's EOF, or a timeout */
    else
        lb_conn_sent(&WIRE(r)->c, st, text);
}

static lb_redis_status wire_step_end(lb_redis *r, lb_reply ***replies)
{
    return lb_conn_end(&WIRE(r)->c, replies);
}

static int wire_step_open(const lb_redis *r)
{
    return lb_conn_is_open(&WIRE(r)->c, WIRE(r)->probe);
}

static lb_redis *wire_step_client(lb_redis *r, int node)
{
    return node == 0 ? r : NULL;
}

static lb_redis_status not_wire(lb_redis *r)
{
    return lb_error_set(&r->err, LB_REDIS_ERR_ARG, "not a connection of the wire transport");
}

lb_redis_status lb_wire_opened(lb_redis *r)
{
    if (!lb_wire_is(r))
        return not_wire(r);
    return lb_conn_opened(&WIRE(r)->c);
}

int lb_wire_is_open(const lb_redis *r, int probe)
{
    return lb_wire_is(r) && lb_conn_is_open(&WIRE(r)->c, probe);
}

void lb_wire_closed(lb_redis *r)
{
    if (lb_wire_is(r))
        lb_conn_closed(&WIRE(r)->c);
}

void lb_wire_out_of_step(lb_redis *r)
{
    if (lb_wire_is(r))
        lb_conn_out_of_step(&WIRE(r)->c);
}

static lb_redis *wire_to_wire(lb_redis *r) { return r; }

static const lb_redis_vt wire_vt = {
    .to_wire = wire_to_wire,
    .exec = wire_exec,
    .connect = wire_connect,
    .disconnect = wire_disconnect,
    .is_connected = wire_is_connected,
    .set_timeout = wire_set_timeout,
    .connect_count = wire_connect_count,
    .roundtrip_count = wire_roundtrip_count,
    .config = wire_config,
    .new_like = wire_new_like,
    .abandon = wire_abandon,
    .free = wire_free,
    .step_begin = wire_step_begin,
    .step_next = wire_step_next,
    .step_connected = wire_step_connected,
    .step_feed = wire_step_feed,
    .step_sent = wire_step_sent,
    .step_end = wire_step_end,
    .step_open = wire_step_open,
    .step_client = wire_step_client,
};
