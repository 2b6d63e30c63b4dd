/* resp_encode.c: the request side of resp.h (lb_redis_batch). */
#include "resp.h"

#include <stdlib.h>
#include <string.h>

#include "slots.h"

void lb_redis_batch_init(lb_redis_batch *b)
{
    memset(b, 0, sizeof *b);
}

void lb_redis_batch_free(lb_redis_batch *b)
{
    free(b->buf);
    lb_redis_batch_init(b);
}

void lb_redis_batch_clear(lb_redis_batch *b)
{
    char *buf = b->buf;
    size_t cap = b->cap;
    if (cap > ((size_t)4 << 20)) {
        free(buf);
        buf = NULL;
        cap = 0;
    }
    memset(b, 0, sizeof *b);
    b->buf = buf;
    b->cap = cap;
}

void lb_redis_batch_expect_bytes(lb_redis_batch *b, size_t n)
{
    b->max_bytes = b->max_bytes + n < b->max_bytes ? SIZE_MAX : b->max_bytes + n;
    b->bytes_set = 1;
}

void lb_redis_batch_expect_elements(lb_redis_batch *b, size_t n)
{
    if (!b->max_set || n > b->max_elements)
        b->max_elements = n;
    b->max_set = 1;
}

lb_redis_status lb_redis_batch_check(const lb_redis_batch *b, lb_redis_error *e)
{
    if (b->failed == LB_REDIS_ERR_NOMEM)
        return lb_error_set(e, LB_REDIS_ERR_NOMEM, "out of memory building a Redis batch");
    if (b->failed || b->args_left != 0)
        return lb_error_set(e, LB_REDIS_ERR_ARG,
                            "malformed Redis batch (argument count does not match)");
    return LB_REDIS_OK;
}

int lb_redis_batch_reserve(lb_redis_batch *b, size_t more)
{
    if (b->failed)
        return -1;
    if (b->cap - b->len >= more)
        return 0;
    size_t need = b->len + more;
    if (need < b->len) {
        b->failed = LB_REDIS_ERR_NOMEM;
        return -1;
    }
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < need)
        cap = cap * 2 > cap ? cap * 2 : need;
    char *nb = realloc(b->buf, cap);
    if (!nb) {
        b->failed = LB_REDIS_ERR_NOMEM;
        return -1;
    }
    b->buf = nb;
    b->cap = cap;
    return 0;
}

/* Write v in decimal at p; returns the number of characters. */
static size_t fmt_u64(char *p, uint64_t v)
{
    char t[24];
    size_t n = 0;
    do {
        t[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (size_t i = 0; i < n; i++)
        p[i] = t[n - 1 - i];
    return n;
}

void lb_redis_batch_cmd(lb_redis_batch *b, int argc)
{
    if (b->failed)
        return;
    if (argc < 1 || b->args_left != 0) {
        b->failed = LB_REDIS_ERR_ARG;
        return;
    }
    if (lb_redis_batch_reserve(b, 32))
        return;
    char *p = b->buf + b->len;
    *p++ = '*';
    p += fmt_u64(p, (uint64_t)argc);
    *p++ = '\r';
    *p++ = '\n';
    b->len = (size_t)(p - b->buf);
    b->args_left = argc;
    b->cmd_argc = argc;
    b->ncmds++;
}

/* The argument just written at buf[off..off+len) is argument i of its command. */
static void track_slot(lb_redis_batch *b, long i, size_t off, size_t len)
{
    if (i == 0) {
        b->cmd_key = lb_command_key_index(b->buf + off, len);
        return;
    }
    if (i != b->cmd_key)
        return;
    if (b->has_slot && len == b->key_len && memcmp(b->buf + b->key_off, b->buf + off, len) == 0)
        return; /* the same key as the last one */
    unsigned slot = lb_cluster_key_slot(b->buf + off, len);
    if (!b->has_slot) {
        b->has_slot = 1;
        b->slot = slot;
    } else if (slot != b->slot && !b->multi_slot) {
        b->multi_slot = 1;
        b->multi_cmd = b->ncmds - 1;
    }
    b->key_off = off;
    b->key_len = len;
}

void lb_redis_batch_arg(lb_redis_batch *b, const void *data, size_t len)
{
    if (b->failed)
        return;
    if (b->args_left <= 0) {
        b->failed = LB_REDIS_ERR_ARG;
        return;
    }
    if (lb_redis_batch_reserve(b, len + 32))
        return;
    char *p = b->buf + b->len;
    *p++ = '$';
    p += fmt_u64(p, len);
    *p++ = '\r';
    *p++ = '\n';
    if (len)
        memcpy(p, data, len);
    long i = b->cmd_argc - b->args_left;
    if (i <= 2)
        track_slot(b, i, (size_t)(p - b->buf), len);
    p += len;
    *p++ = '\r';
    *p++ = '\n';
    b->len = (size_t)(p - b->buf);
    b->args_left--;
}

/* Parse "<c>N\r\n" at buf[*pos..len): N, or -1. */
static long long resp_header(const char *buf, size_t len, size_t *pos, char c)
{
    size_t p = *pos;
    if (p >= len || buf[p] != c)
        return -1;
    long long v = 0;
    size_t digits = 0;
    for (p++; p < len && buf[p] >= '0' && buf[p] <= '9' && digits < 18; p++, digits++)
        v = v * 10 + (buf[p] - '0');
    if (!digits || p + 1 >= len || buf[p] != '\r' || buf[p + 1] != '\n')
        return -1;
    *pos = p + 2;
    return v;
}

/* Skip one command at buf[*pos..len); 0, or -1 when it is not well formed. */
static int skip_command(const char *buf, size_t len, size_t *pos)
{
    long long argc = resp_header(buf, len, pos, '*');
    if (argc < 1)
        return -1;
    for (long long a = 0; a < argc; a++) {
        long long n = resp_header(buf, len, pos, '$');
        if (n < 0 || (size_t)n > len - *pos || len - *pos - (size_t)n < 2)
            return -1;
        *pos += (size_t)n + 2;
    }
    return 0;
}

int lb_redis_batch_offsets(const lb_redis_batch *b, size_t *off)
{
    size_t pos = 0;
    for (size_t c = 0; c < b->ncmds; c++) {
        off[c] = pos;
        if (skip_command(b->buf, b->len, &pos))
            return -1;
    }
    off[b->ncmds] = pos;
    return pos == b->len ? 0 : -1;
}

void lb_redis_batch_raw(lb_redis_batch *b, const char *cmd, size_t len)
{
    if (b->failed)
        return;
    if (b->args_left != 0) {
        b->failed = LB_REDIS_ERR_ARG;
        return;
    }
    if (lb_redis_batch_reserve(b, len))
        return;
    memcpy(b->buf + b->len, cmd, len);
    b->len += len;
    b->ncmds++;
}

void lb_redis_batch_arg_str(lb_redis_batch *b, const char *s)
{
    lb_redis_batch_arg(b, s, strlen(s));
}

void lb_redis_batch_arg_u64(lb_redis_batch *b, uint64_t v)
{
    char t[24];
    lb_redis_batch_arg(b, t, fmt_u64(t, v));
}

void lb_redis_batch_arg_i64(lb_redis_batch *b, int64_t v)
{
    char t[24];
    if (v < 0) {
        t[0] = '-';
        lb_redis_batch_arg(b, t, 1 + fmt_u64(t + 1, (uint64_t)0 - (uint64_t)v));
    } else {
        lb_redis_batch_arg(b, t, fmt_u64(t, (uint64_t)v));
    }
}

void lb_redis_batch_argv(lb_redis_batch *b, int argc, const char *const *argv, const size_t *lens)
{
    lb_redis_batch_cmd(b, argc);
    for (int i = 0; i < argc; i++)
        lb_redis_batch_arg(b, argv[i], lens ? lens[i] : strlen(argv[i]));
}
