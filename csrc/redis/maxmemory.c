/* maxmemory.c: see maxmemory.h. */
#define _POSIX_C_SOURCE 200809L
#include "maxmemory.h"

#include <stdlib.h>
#include <string.h>

void lb_maxmemory_cmd(lb_redis_batch *b)
{
    lb_redis_batch_cmd(b, 2);
    lb_redis_batch_arg(b, "INFO", 4);
    lb_redis_batch_arg(b, "memory", 6);
}

/* The value of "name:<digits>" at the start of a line of text[0..len). */
static int field(const char *text, size_t len, const char *name, uint64_t *out)
{
    size_t n = strlen(name);
    for (size_t i = 0; i + n < len; i++) {
        if ((i == 0 || text[i - 1] == '\n') && memcmp(text + i, name, n) == 0 &&
            text[i + n] == ':') {
            uint64_t v = 0;
            size_t j = i + n + 1, digits = 0;
            for (; j < len && text[j] >= '0' && text[j] <= '9' && digits < 19; j++, digits++)
                v = v * 10 + (uint64_t)(text[j] - '0');
            if (digits == 0)
                return -1;
            *out = v;
            return 0;
        }
    }
    return -1;
}

int lb_maxmemory_parse(const lb_reply *x, uint64_t *maxmemory, uint64_t *used)
{
    if (!x || (x->type != LB_REPLY_STRING && x->type != LB_REPLY_STATUS && x->type != 14) ||
        !x->str) /* 14: a RESP3 verbatim string */
        return -1;
    if (field(x->str, x->len, "maxmemory", maxmemory) < 0 ||
        field(x->str, x->len, "used_memory", used) < 0)
        return -1;
    return 0;
}

lb_redis_status lb_maxmemory_check(lb_redis *conn, const lb_reply *info, uint64_t need,
                                      const char *what)
{
    uint64_t maxmemory, used;
    if (lb_maxmemory_parse(info, &maxmemory, &used) < 0 || maxmemory == 0)
        return LB_REDIS_OK;
    if (used <= maxmemory && need <= maxmemory - used)
        return LB_REDIS_OK;
    return lb_redis_set_error(conn, LB_REDIS_ERR_TOOLARGE,
                              "%s needs %llu bytes, but the server has maxmemory %llu with "
                              "%llu in use: nothing was written",
                              what, (unsigned long long)need, (unsigned long long)maxmemory,
                              (unsigned long long)used);
}

/* The text of "name:<text>" at the start of a line, up to the line's end. */
static int text_field(const char *text, size_t len, const char *name, char *buf, size_t cap)
{
    size_t n = strlen(name);
    for (size_t i = 0; i + n < len; i++) {
        if ((i == 0 || text[i - 1] == '\n') && memcmp(text + i, name, n) == 0 &&
            text[i + n] == ':') {
            size_t j = i + n + 1, o = 0;
            for (; j < len && text[j] != '\r' && text[j] != '\n' && o + 1 < cap; j++)
                buf[o++] = text[j];
            buf[o] = '\0';
            return o ? 0 : -1;
        }
    }
    return -1;
}

void lb_maxmemory_note_policy(lb_redis *conn, const lb_reply *info, int has_ttl)
{
    uint64_t maxmemory, used;
    char policy[sizeof conn->evicting];
    conn->evicting[0] = '\0';
    if (lb_maxmemory_parse(info, &maxmemory, &used) < 0 || maxmemory == 0 ||
        text_field(info->str, info->len, "maxmemory_policy", policy, sizeof policy) < 0)
        return;
    if (strncmp(policy, "allkeys-", 8) == 0 || (has_ttl && strncmp(policy, "volatile-", 9) == 0))
        memcpy(conn->evicting, policy, sizeof policy);
}
