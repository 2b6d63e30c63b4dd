/* status.c: see status.h. */
#include "status.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *lb_redis_status_name(lb_redis_status st)
{
    static const char *const names[] = {
        [LB_REDIS_OK] = "ok",           [LB_REDIS_ERR_CONNECT] = "connect",
        [LB_REDIS_ERR_IO] = "io",       [LB_REDIS_ERR_TIMEOUT] = "timeout",
        [LB_REDIS_ERR_PROTOCOL] = "protocol", [LB_REDIS_ERR_REPLY] = "reply",
        [LB_REDIS_ERR_WRONGTYPE] = "wrongtype", [LB_REDIS_ERR_AUTH] = "auth",
        [LB_REDIS_ERR_URL] = "url",     [LB_REDIS_ERR_TLS] = "tls",
        [LB_REDIS_ERR_MISMATCH] = "mismatch", [LB_REDIS_ERR_NOTFOUND] = "notfound",
        [LB_REDIS_ERR_ARG] = "arg",     [LB_REDIS_ERR_NOMEM] = "nomem",
        [LB_REDIS_ERR_FULL] = "full",   [LB_REDIS_ERR_NOMODULE] = "nomodule",
        [LB_REDIS_ERR_TOOLARGE] = "toolarge", [LB_REDIS_ERR_NOTOWNED] = "notowned",
        [LB_REDIS_ERR_LOST] = "lost",
    };
    if ((unsigned)st < sizeof names / sizeof names[0] && names[st])
        return names[st];
    return "unknown";
}

void lb_error_clear(lb_redis_error *e)
{
    e->status = LB_REDIS_OK;
    e->index = -1;
    e->stale = 0;
    e->text[0] = '\0';
}

lb_redis_status lb_error_set(lb_redis_error *e, lb_redis_status st, const char *fmt, ...)
{
    e->status = st;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->text, sizeof e->text, fmt, ap);
    va_end(ap);
    return st;
}

lb_redis_status lb_error_copy(lb_redis_error *to, const lb_redis_error *from)
{
    if (to != from)
        memcpy(to, from, sizeof *to);
    return to->status;
}

const char *lb_redis_show(const char *k, size_t n, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; i < n && o + 8 < cap; i++) {
        unsigned char c = (unsigned char)k[i];
        if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'')
            buf[o++] = (char)c;
        else
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
    }
    if (o + 8 >= cap && n)
        o += (size_t)snprintf(buf + o, cap - o, "...");
    buf[o < cap ? o : cap - 1] = '\0';
    return buf;
}
