/* redisbloom_reply.c: what a BF.* reply means.  A reply that does not fit
 * the command sent (protocol error), and an error reply turned into the status
 * it stands for, with a message that names the key, the command, the server
 * and the call that needs it: a server whose BF.* lacks a command or an option
 * RedisBloom 2.x has (valkey-bloom has no BF.SCANDUMP), a filter that is full,
 * one that is gone (LB_REDIS_ERR_LOST), a key of another type. */
#define _POSIX_C_SOURCE 200809L
#include "redisbloom_op.h"

#include "reply.h"

#include <stdio.h>
#include <string.h>

lb_redis_status lb_bf_bad_reply(lb_redisbloom *bf, const char *what)
{
    /* A reply that does not fit what was sent: the stream may be out of
     * step, and this is not the server we think: start afresh next time. */
    lb_redis_disconnect(bf->conn);
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_PROTOCOL,
                              "protocol error: a reply to %s that does not fit the command "
                              "sent (type, length or value); connection dropped",
                              what);
}

const lb_reply_want lb_bf_want_ok = {LB_WANT_OK, 0, 0};
const lb_reply_want lb_bf_want_bit = {LB_WANT_INT, 0, 1}; /* PEXPIRE, DEL of one key */

/* A reply of a RAW_ERRORS batch: its error (fail_reply), or a protocol error
 * when it does not fit w, or OK. */
lb_redis_status lb_bf_expect_reply(lb_redisbloom *bf, const lb_reply *x, const lb_reply_want *w,
                                    const char *what)
{
    if (x->type == LB_REPLY_ERROR)
        return lb_bf_fail_reply(bf, x, what, 0);
    return lb_reply_fits(x, w) ? LB_REDIS_OK : lb_bf_bad_reply(bf, what);
}

void lb_bf_keep_text(lb_redisbloom *bf, const char *s, size_t n)
{
    if (n >= sizeof bf->reply_text)
        n = sizeof bf->reply_text - 1;
    memcpy(bf->reply_text, s, n);
    bf->reply_text[n] = '\0';
}

int lb_bf_module_missing(const char *s)
{
    return (lb_ci_prefix(s, "ERR unknown command") || lb_ci_prefix(s, "unknown command")) &&
           lb_ci_contains(s, "bf.");
}

void lb_bf_note_reply(lb_redisbloom *bf, const lb_reply *x)
{
    if (x && !(x->type == LB_REPLY_ERROR && x->str && lb_bf_module_missing(x->str)))
        bf->module_seen = 1;
}

/* The server the filter talks to, for messages: host:port, the unix socket,
 * the Sentinel service or the cluster's seed nodes. */
static const char *server_name(const lb_redisbloom *bf, char *buf, size_t cap)
{
    const lb_redis_config *c = lb_redis_get_config(bf->conn);
    if (!c)
        snprintf(buf, cap, "the Redis server");
    else if (c->unix_path)
        snprintf(buf, cap, "the Redis server at unix:%.200s", c->unix_path);
    else if (c->cluster_nodes)
        snprintf(buf, cap, "the Redis Cluster at %.200s", c->cluster_nodes);
    else if (c->sentinel_service)
        snprintf(buf, cap, "the Redis primary of Sentinel service '%.100s'", c->sentinel_service);
    else
        snprintf(buf, cap, "the Redis server at %.200s:%d", c->host ? c->host : "localhost",
                 c->port ? c->port : 6379);
    return buf;
}

/* What needs a BF.* command, for the message of a server without it. */
static const char *needed_by(const char *cmd)
{
    size_t n = strlen(cmd);
    if (lb_ci_equal(cmd, n, "BF.INSERT"))
        return "every add needs it";
    if (lb_ci_equal(cmd, n, "BF.EXISTS") || lb_ci_equal(cmd, n, "BF.MEXISTS"))
        return "every test needs it";
    if (lb_ci_equal(cmd, n, "BF.INFO"))
        return "info(), dump() and the check before the first write need it";
    if (lb_ci_equal(cmd, n, "BF.RESERVE"))
        return "reserve() and reset() need it";
    if (lb_ci_equal(cmd, n, "BF.SCANDUMP"))
        return "dump() needs it (valkey-bloom, for one, has no BF.SCANDUMP nor BF.LOADCHUNK)";
    if (lb_ci_equal(cmd, n, "BF.LOADCHUNK"))
        return "restore() needs it (valkey-bloom, for one, has no BF.SCANDUMP nor BF.LOADCHUNK)";
    return "this call needs it";
}

/* NOMODULE: cmd answered "unknown command" (text t).  The message names the
 * command, the server, and what needs the command; a server whose other BF.*
 * commands answered has a module that is not RedisBloom 2.x (or Redis 8). */
static lb_redis_status missing_command(lb_redisbloom *bf, const char *cmd, const char *t)
{
    char sb[260];
    server_name(bf, sb, sizeof sb);
    if (bf->module_seen)
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOMODULE,
                                  "%s has BF.* commands but no %s, which RedisBloom 2.x and "
                                  "Redis 8 have: %s (%s answered: %s)",
                                  sb, cmd, needed_by(cmd), cmd, t);
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOMODULE,
                              "%s has no RedisBloom module, or a BF.* module without %s: %s "
                              "(%s answered: %s)",
                              sb, cmd, needed_by(cmd), cmd, t);
}

/* A BF.INSERT ... NOCREATE refused as a syntax the server does not know (an
 * implementation of BF.INSERT without the NOCREATE option). */
static int rejects_nocreate(const char *t)
{
    return lb_ci_contains(t, "nocreate") || lb_ci_contains(t, "unknown argument") ||
           lb_ci_contains(t, "syntax error") || lb_ci_contains(t, "unknown option") ||
           lb_ci_contains(t, "unrecognized") || lb_ci_contains(t, "invalid argument");
}

lb_redis_status lb_bf_info_unreadable(lb_redisbloom *bf, const char *what, const char *field)
{
    char sb[260];
    server_name(bf, sb, sizeof sb);
    if (!field)
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOMODULE,
                                  "BF.INFO of %s answered none of the fields RedisBloomFilter "
                                  "reads (" LB_BF_INFO_FIELDS "): its BF.* module names them "
                                  "otherwise than RedisBloom 2.x; %s needs them",
                                  sb, what);
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOMODULE,
                              "BF.INFO of %s does not report '%s', which %s needs", sb, field,
                              what);
}

/* An error reply with no text ("" or "ERR "): what fakeredis answers when a
 * non-scaling filter is full. */
static int blank_error(const char *t)
{
    if (lb_ci_prefix(t, "ERR"))
        t += 3;
    while (*t == ' ')
        t++;
    return *t == '\0';
}

lb_redis_status lb_bf_wrongtype(lb_redisbloom *bf, const char *text)
{
    char kb[160];
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_WRONGTYPE, "%s (key '%s')", text,
                              lb_redis_show(bf->key, bf->keylen, kb, sizeof kb));
}

/* An error reply x to cmd: the status and message it stands for.  adds: cmd
 * adds items (a "filter is full" answer is then FULL; fakeredis says it with
 * an empty error text). */
lb_redis_status lb_bf_fail_reply(lb_redisbloom *bf, const lb_reply *x, const char *cmd, int adds)
{
    char kb[160];
    lb_bf_keep_text(bf, x->str ? x->str : "", x->len);
    const char *t = bf->reply_text;
    if (lb_ci_prefix(t, "WRONGTYPE") || lb_ci_prefix(t, "ERR WRONGTYPE")) /* the latter: fakeredis */
        return lb_bf_wrongtype(bf, t);
    if (lb_bf_module_missing(t))
        return missing_command(bf, cmd, t);
    if (adds && bf->nocreate_sent && bf->seen && lb_ci_contains(t, "not found"))
        return lb_bf_lost(bf, 1);
    if (adds && bf->opt.no_create && lb_ci_contains(t, "not found"))
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_NOTFOUND,
                                  "no RedisBloom filter at key '%s', and no_create forbids "
                                  "creating one (%s answered: %s)",
                                  lb_redis_show(bf->key, bf->keylen, kb, sizeof kb), cmd, t);
    if (adds && bf->nocreate_sent && rejects_nocreate(t)) {
        char sb[260];
        return lb_redis_set_error(
            bf->conn, LB_REDIS_ERR_NOMODULE,
            "the BF.INSERT of %s does not take NOCREATE, which RedisBloom 2.x's does (%s "
            "answered: %s): %s", server_name(bf, sb, sizeof sb), cmd, t,
            bf->opt.no_create ? "no_create=True needs it"
                              : "a filter without a ttl sends it once it has seen its key, so "
                                "that a lost filter is never made again empty by a write (a "
                                "filter with a ttl does not)");
    }
    if (adds && (lb_ci_contains(t, "filter is full") || blank_error(t)))
        return lb_redis_set_error(bf->conn, LB_REDIS_ERR_FULL,
                                  "the non-scaling RedisBloom filter at key '%s' is full (%s)",
                                  lb_redis_show(bf->key, bf->keylen, kb, sizeof kb),
                                  t[0] ? t : "no text");
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_REPLY, "%s at key '%s': %s", cmd,
                              lb_redis_show(bf->key, bf->keylen, kb, sizeof kb), t);
}

lb_redis_status lb_bf_lost(lb_redisbloom *bf, int write)
{
    char kb[160];
    return lb_redis_set_error(bf->conn, LB_REDIS_ERR_LOST,
                              "the RedisBloom filter at key '%s' is gone from the server "
                              "(restarted without its data, flushed, deleted or evicted)%s; it "
                              "is not re-created by a write: reset(), restore() or a warm-up "
                              "rebuilds it",
                              lb_redis_show(bf->key, bf->keylen, kb, sizeof kb),
                              write ? ": this write was refused (NOCREATE)" : "");
}
