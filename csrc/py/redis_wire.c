/* redis_wire.c: what ling_bloom.aio drives (see redis_common.h): the asyncio
 * transport's settings (_wire_config) and the _wire_* methods, the sans-IO side
 * of an operation. */
#include "redis_common.h"

#include "cluster.h"
#include "op.h"
#include "wire.h"

#include "sharded.h"


/* ---- the asyncio transport's settings -------------------------------------- */

static int put(PyObject *d, const char *name, PyObject *v)
{
    if (!v)
        return -1;
    int r = PyDict_SetItemString(d, name, v);
    Py_DECREF(v);
    return r;
}

static PyObject *str_or_none(const char *s)
{
    return s ? PyUnicode_DecodeFSDefault(s) : Py_NewRef(Py_None);
}

static PyObject *seconds_or_none(int ms)
{
    return ms > 0 ? PyFloat_FromDouble(ms / 1000.0) : Py_NewRef(Py_None);
}

PyObject *lb_redis_wire_config(PyObject *self, PyObject *unused)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (lb_enter(&f->base) < 0)
        return NULL;
    const lb_redis_config *c = lb_redis_get_config(f->conn);
    static const char *const reqs[] = {"required", "optional", "none"};
    PyObject *d = PyDict_New();
    if (d && (put(d, "host", PyUnicode_FromString(c->host ? c->host : "localhost")) < 0 ||
              put(d, "port", PyLong_FromLong(c->port ? c->port : 6379)) < 0 ||
              put(d, "unix_socket_path", str_or_none(c->unix_path)) < 0 ||
              put(d, "socket_timeout", seconds_or_none(c->timeout_ms)) < 0 ||
              put(d, "socket_connect_timeout", seconds_or_none(c->connect_timeout_ms)) < 0 ||
              put(d, "chunk_size", PyLong_FromSize_t(f->chunk)) < 0 ||
              put(d, "ssl", PyBool_FromLong(c->tls && !c->unix_path)) < 0 ||
              put(d, "ssl_ca_certs", str_or_none(c->tls_ca_certs)) < 0 ||
              put(d, "ssl_ca_path", str_or_none(c->tls_ca_path)) < 0 ||
              put(d, "ssl_certfile", str_or_none(c->tls_certfile)) < 0 ||
              put(d, "ssl_keyfile", str_or_none(c->tls_keyfile)) < 0 ||
              put(d, "ssl_cert_reqs",
                  PyUnicode_FromString(reqs[c->tls_cert_reqs >= 0 && c->tls_cert_reqs <= 2
                                                 ? c->tls_cert_reqs
                                                 : 0])) < 0 ||
              put(d, "ssl_check_hostname",
                  PyBool_FromLong(c->tls_check_hostname != 2 &&
                                  c->tls_cert_reqs != LB_REDIS_CERT_NONE)) < 0)) {
        Py_CLEAR(d);
    }
    lb_leave(&f->base);
    return d;
}

/* ---- the sans-IO side, for ling_bloom.aio ------------------------------------
 *
 * The asyncio transport does the socket I/O; everything else is the core's
 * (csrc/redis: wire.h, bitmap.h and redisbloom.h): the requests, the
 * reply reader and its bounds, the checks.  Each method enters the filter
 * (ClosedError once closed). */

static PyObject *wire_raise(lb_redis_filter *f, lb_redis_status st)
{
    f->ops->raise(f, st);
    lb_leave(&f->base);
    return NULL;
}

/* A client carried by the wire transport from now on (client.h's
 * lb_redis_to_wire: *out, c to be freed when it differs). */
static lb_redis_status wire_client(lb_redis *c, lb_redis **out)
{
    *out = lb_redis_to_wire(c);
    return *out ? LB_REDIS_OK : LB_REDIS_ERR_NOMEM;
}

/* The filter's connections (and its shards'), carried by the wire transport from now on. */
static lb_redis_status to_wire(lb_redis_filter *f)
{
    lb_sharded *sh = f->ops->sharded(f);
    lb_redis *w;
    for (uint32_t i = 1; sh && i < lb_sharded_count(sh); i++) {
        if (wire_client(lb_sharded_conn(sh, i), &w) != LB_REDIS_OK)
            return LB_REDIS_ERR_NOMEM;
        lb_sharded_set_conn(sh, i, w); /* the old one freed */
    }
    if (wire_client(f->conn, &w) != LB_REDIS_OK)
        return LB_REDIS_ERR_NOMEM;
    if (w != f->conn) {
        lb_redis_free(f->conn);
        f->conn = w;
        if (sh)
            lb_sharded_set_conn(sh, 0, w);
        f->ops->rebind(f);
    }
    if (!f->w_lanes) {
        size_t n = sh ? lb_sharded_count(sh) : 1;
        f->w_lanes = PyMem_Calloc(n, sizeof *f->w_lanes);
        f->w_shard_of = PyMem_Calloc(n, sizeof *f->w_shard_of);
        if (!f->w_lanes || !f->w_shard_of)
            return LB_REDIS_ERR_NOMEM;
    }
    return LB_REDIS_OK;
}

/* The lanes of the next stage of the operation begun. */
static size_t next_stage(lb_redis_filter *f)
{
    lb_sharded *sh = f->ops->sharded(f);
    if (sh)
        return f->w_nlanes = lb_sharded_wire_stage(sh, f->w_lanes, f->w_shard_of);
    if (f->w_op && f->w_stages++ == 0) {
        f->w_lanes[0] = f->w_op; /* the one step machine, once */
        f->w_shard_of[0] = 0;
        return f->w_nlanes = 1;
    }
    return f->w_nlanes = 0;
}

/* _wire_begin(kind, keys): 1 add, 2 test (1..chunk_size keys, a list or
 * tuple), 3 reset (keys None). */
PyObject *lb_wire_method_begin(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    int kind;
    PyObject *keys;
    if (!PyArg_ParseTuple(args, "iO:_wire_begin", &kind, &keys))
        return NULL;
    Py_ssize_t n = 0;
    PyObject *seq = NULL;
    lb_key *kv = NULL;
    lb_key_hold *holds = NULL;
    Py_ssize_t held = 0;
    if (kind != LB_REDIS_WIRE_RESET) {
        seq = lb_keys_fixed(keys, "keys must be a list or tuple");
        if (!seq)
            return NULL;
        n = PySequence_Fast_GET_SIZE(seq);
        kv = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *kv);
        holds = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *holds);
        if (!kv || !holds) {
            PyErr_NoMemory();
            goto fail;
        }
        for (; held < n; held++)
            if (lb_key_get(f->base.st, PySequence_Fast_GET_ITEM(seq, held), &kv[held],
                           &holds[held]) < 0)
                goto fail;
    }
    if (lb_enter(&f->base) < 0)
        goto fail;
    PyMem_Free(f->w_out);
    f->w_out = PyMem_Malloc((size_t)(n ? n : 1));
    f->w_n = (size_t)n;
    f->w_op = NULL;
    f->w_nlanes = 0;
    f->w_stages = 0;
    lb_redis_status st = f->w_out ? to_wire(f) : LB_REDIS_ERR_NOMEM;
    lb_sharded *sh = f->ops->sharded(f);
    if (st == LB_REDIS_OK && sh)
        st = lb_sharded_wire_begin(sh, kind, kv, (size_t)n, f->w_out);
    else if (st == LB_REDIS_OK)
        st = f->ops->wire_begin(f, kind, kv, (size_t)n, f->w_out, &f->w_op);
    size_t lanes = st == LB_REDIS_OK ? next_stage(f) : 0;
    if (st != LB_REDIS_OK) {
        if (st == LB_REDIS_ERR_NOMEM)
            PyErr_NoMemory();
        else
            f->ops->raise(f, st);
    }
    lb_leave(&f->base);
    if (st != LB_REDIS_OK)
        goto fail;
    for (Py_ssize_t i = 0; i < held; i++)
        lb_key_release(&holds[i]);
    PyMem_Free(kv);
    PyMem_Free(holds);
    Py_XDECREF(seq);
    return PyLong_FromSize_t(lanes);
fail:
    for (Py_ssize_t i = 0; i < held; i++)
        lb_key_release(&holds[i]);
    PyMem_Free(kv);
    PyMem_Free(holds);
    Py_XDECREF(seq);
    return NULL;
}

/* _wire_check(keys): TypeError / EmptyKeyError for the first bad key of a
 * list or tuple, before any of it is sent; else the keys to send, frozen
 * (lb_keys_checked: the same sequence when every key is a str or bytes, else
 * a list with the bytes of every other key). */
PyObject *lb_wire_method_check(PyObject *self, PyObject *keys)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (lb_enter_read(&f->base) < 0)
        return NULL;
    lb_leave(&f->base);
    PyObject *seq = lb_keys_fixed(keys, "keys must be a list or tuple");
    if (!seq)
        return NULL;
    PyObject *checked = lb_keys_checked(f->base.st, seq);
    Py_DECREF(seq);
    return checked;
}

static lb_op *wire_op(lb_redis_filter *f, Py_ssize_t lane)
{
    if (lane < 0 || (size_t)lane >= f->w_nlanes) {
        PyErr_SetString(PyExc_RuntimeError, "no wire operation is in progress on that lane");
        return NULL;
    }
    return f->w_lanes[lane];
}

/* The client of shard (0 without shards). */
static lb_redis *shard_conn(lb_redis_filter *f, int shard)
{
    lb_sharded *sh = f->ops->sharded(f);
    if (sh)
        return shard >= 0 ? lb_sharded_conn(sh, (uint32_t)shard) : NULL;
    return shard == 0 ? f->conn : NULL;
}

static PyObject *seconds(int ms)
{
    return ms > 0 ? PyFloat_FromDouble(ms / 1000.0) : Py_NewRef(Py_None);
}

/* _wire_step(lane) -> the next step of the lane's step machine:
 *   (0,)                                                     over
 *   (1, shard, node, probe, host, port, unix_path, tls, connect_timeout)   CONNECT
 *   (2, shard, node, probe, request_bytes, timeout)          SEND
 *   (3, seconds)                                             PAUSE
 * (shard, node, probe) names the connection: the shard's client (0 without
 * shards), a cluster's node index (0 for one server), and that node's
 * one-off connection to a sentinel; timeouts in seconds or None. */
PyObject *lb_wire_method_step(PyObject *self, PyObject *arg)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    Py_ssize_t lane = PyLong_AsSsize_t(arg);
    if (lane == -1 && PyErr_Occurred())
        return NULL;
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_op *op = wire_op(f, lane);
    if (!op) {
        lb_leave(&f->base);
        return NULL;
    }
    lb_wire_step s;
    PyObject *out;
    if (!lb_op_wire_step(op, &s)) {
        out = Py_BuildValue("(i)", 0);
    } else if (s.what == LB_WIRE_PAUSE) {
        out = Py_BuildValue("(id)", 3, s.pause_ms / 1000.0);
    } else if (s.what == LB_WIRE_CONNECT) {
        const lb_redis_config *c = s.cfg;
        PyObject *unix_path = c->unix_path ? PyUnicode_DecodeFSDefault(c->unix_path)
                                           : Py_NewRef(Py_None);
        out = unix_path ? Py_BuildValue("(iIiisiNiN)", 1, f->w_shard_of[lane], s.node, s.probe,
                                        c->host ? c->host : "localhost", c->port ? c->port : 6379,
                                        unix_path, c->tls && !c->unix_path,
                                        seconds(c->connect_timeout_ms))
                        : NULL;
    } else {
        out = Py_BuildValue("(iIiiy#N)", 2, f->w_shard_of[lane], s.node, s.probe, s.req->buf,
                            (Py_ssize_t)s.req->len,
                            seconds(s.cfg->timeout_ms));
    }
    lb_leave(&f->base);
    return out;
}

/* The transport's outcomes, as the numbers ling_bloom.aio passes. */
static lb_redis_status outcome(int kind)
{
    switch (kind) {
    case 0: return LB_REDIS_OK;
    case 1: return LB_REDIS_ERR_CONNECT;
    case 2: return LB_REDIS_ERR_TIMEOUT;
    case 3: return LB_REDIS_ERR_IO;
    default: return LB_REDIS_ERR_PROTOCOL; /* the feed failed: its text is in C already */
    }
}

/* _wire_connected(lane, outcome, text) -> whether the connection stays open:
 * a CONNECT step's outcome (0 OK, 1 refused or unreachable, 2 timed out). */
PyObject *lb_wire_method_connected(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    Py_ssize_t lane;
    int kind;
    const char *text = NULL;
    if (!PyArg_ParseTuple(args, "ni|z:_wire_connected", &lane, &kind, &text))
        return NULL;
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_op *op = wire_op(f, lane);
    if (op)
        lb_op_wire_connected(op, outcome(kind), text);
    int open = op && lb_op_wire_step_open(op);
    lb_leave(&f->base);
    return op ? PyBool_FromLong(open) : NULL;
}

/* _wire_feed(lane, data) -> 1 every reply is in, 0 more to come, -1 the
 * replies do not fit (out of step: report _wire_sent(lane, 4)). */
PyObject *lb_wire_method_feed(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    Py_ssize_t lane;
    Py_buffer view;
    if (!PyArg_ParseTuple(args, "ny*:_wire_feed", &lane, &view))
        return NULL;
    if (lb_enter(&f->base) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    lb_op *op = wire_op(f, lane);
    int complete = 0;
    lb_redis_status st = op ? lb_op_wire_feed(op, view.buf, (size_t)view.len, &complete)
                            : LB_REDIS_OK;
    PyBuffer_Release(&view);
    lb_leave(&f->base);
    if (!op)
        return NULL;
    return PyLong_FromLong(st != LB_REDIS_OK ? -1 : complete);
}

/* _wire_sent(lane, outcome, text) -> whether the connection stays open (False:
 * the transport closes it): a SEND step's outcome (0 every reply in, 2 timed
 * out, 3 the connection broke, 4 the feed failed; text None for a timeout or a
 * connection the server closed: the connection machine words them). */
PyObject *lb_wire_method_sent(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    Py_ssize_t lane;
    int kind;
    const char *text = NULL;
    if (!PyArg_ParseTuple(args, "ni|z:_wire_sent", &lane, &kind, &text))
        return NULL;
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_op *op = wire_op(f, lane);
    if (op)
        lb_op_wire_sent(op, outcome(kind), kind >= 4 ? NULL : text);
    int open = op && lb_op_wire_step_open(op);
    lb_leave(&f->base);
    return op ? PyBool_FromLong(open) : NULL;
}

/* _wire_lost(shard, node, stray): the transport closed a connection between
 * round trips: the server closed it (stray 0), or input nobody asked for
 * came on it (stray 1: out of step). */
PyObject *lb_wire_method_lost(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    int shard, node, stray;
    if (!PyArg_ParseTuple(args, "iii:_wire_lost", &shard, &node, &stray))
        return NULL;
    if (f->base.closed || !f->conn)
        Py_RETURN_NONE; /* closing after close(): nothing left to forget */
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_redis *c = shard_conn(f, shard);
    lb_redis *w = c ? lb_op_wire_client(c, node) : NULL;
    if (w && stray)
        lb_wire_out_of_step(w);
    else if (w)
        lb_wire_closed(w);
    lb_leave(&f->base);
    Py_RETURN_NONE;
}

/* _wire_drops() -> the nodes a Redis Cluster client (every shard's) dropped
 * so far: when it changes, the transport closes the connections of the nodes
 * _wire_live no longer names.  0 for one server. */
PyObject *lb_wire_method_drops(PyObject *self, PyObject *unused)
{
    (void)unused;
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (f->base.closed || !f->conn)
        return PyLong_FromLong(0);
    if (lb_enter(&f->base) < 0)
        return NULL;
    unsigned long n = 0;
    lb_sharded *sh = f->ops->sharded(f);
    uint32_t shards = sh ? lb_sharded_count(sh) : 1;
    for (uint32_t i = 0; i < shards; i++)
        n += lb_cluster_drops(shard_conn(f, (int)i));
    lb_leave(&f->base);
    return PyLong_FromUnsignedLong(n);
}

/* _wire_live(shard, node) -> whether that node of that shard's client is
 * still one (a Redis Cluster client drops the nodes its map no longer names). */
PyObject *lb_wire_method_live(PyObject *self, PyObject *args)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    int shard, node;
    if (!PyArg_ParseTuple(args, "ii:_wire_live", &shard, &node))
        return NULL;
    if (f->base.closed || !f->conn)
        Py_RETURN_FALSE;
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_redis *c = shard_conn(f, shard);
    int live = c && lb_redis_has_node(c, node);
    lb_leave(&f->base);
    return PyBool_FromLong(live);
}

/* _wire_stage() -> the lanes of the operation's next stage, all over now
 * (0: the operation is over: _wire_result). */
PyObject *lb_wire_method_stage(PyObject *self, PyObject *unused)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (lb_enter(&f->base) < 0)
        return NULL;
    size_t lanes = next_stage(f);
    lb_leave(&f->base);
    return PyLong_FromSize_t(lanes);
}

/* The results of the finished operation: a list of bools, or the exception
 * the blocking call raises. */
PyObject *lb_wire_method_result(PyObject *self, PyObject *unused)
{
    lb_redis_filter *f = LB_REDIS_FILTER(self);
    if (lb_enter(&f->base) < 0)
        return NULL;
    lb_sharded *sh = f->ops->sharded(f);
    lb_redis_status st = sh ? lb_sharded_wire_end(sh)
                       : f->w_op ? lb_op_wire_status(f->w_op)
                                 : lb_redis_set_error(f->conn, LB_REDIS_ERR_ARG,
                                                      "no wire operation was begun");
    f->w_nlanes = 0;
    if (st != LB_REDIS_OK)
        return wire_raise(f, st);
    lb_leave(&f->base);
    if (lb_redis_filter_warn(f) < 0)
        return NULL;
    PyObject *list = PyList_New((Py_ssize_t)f->w_n);
    if (!list)
        return NULL;
    for (size_t i = 0; i < f->w_n; i++)
        PyList_SET_ITEM(list, (Py_ssize_t)i, Py_NewRef(f->w_out[i] ? Py_True : Py_False));
    return list;
}
