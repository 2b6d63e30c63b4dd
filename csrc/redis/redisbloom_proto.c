/* redisbloom_proto.c: see redisbloom_proto.h. */
#include "redisbloom_proto.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Case-insensitive substring test. */
int lb_ci_contains(const char *s, const char *needle)
{
    size_t n = strlen(needle);
    for (; *s; s++) {
        size_t i = 0;
        while (i < n && s[i] &&
               tolower((unsigned char)s[i]) == tolower((unsigned char)needle[i]))
            i++;
        if (i == n)
            return 1;
    }
    return n == 0;
}

int lb_ci_prefix(const char *s, const char *prefix)
{
    for (; *prefix; s++, prefix++)
        if (tolower((unsigned char)*s) != tolower((unsigned char)*prefix))
            return 0;
    return 1;
}

int lb_ci_equal(const char *a, size_t alen, const char *b)
{
    size_t blen = strlen(b);
    if (alen != blen)
        return 0;
    for (size_t i = 0; i < alen; i++)
        if (tolower((unsigned char)a[i]) != tolower((unsigned char)b[i]))
            return 0;
    return 1;
}

int lb_bf_reply_bool(const lb_reply *x)
{
    if (!x || (x->type != LB_REPLY_INTEGER && x->type != LB_REPLY_BOOL))
        return -1;
    if (x->integer == 0 || x->integer == 1)
        return (int)x->integer;
    return -1;
}

/* An integer value of an INFO field: -1 for nil, -2 for a shape we do not read. */
static long long info_value(const lb_reply *v)
{
    if (!v)
        return -2;
    if (v->type == LB_REPLY_NIL)
        return -1;
    if (v->type == LB_REPLY_INTEGER)
        return v->integer >= 0 ? v->integer : -2;
    if ((v->type == LB_REPLY_STRING || v->type == LB_REPLY_STATUS || v->type == LB_REPLY_DOUBLE) &&
        v->str && v->len > 0 && v->len < 40) {
        char *end;
        double d = strtod(v->str, &end);
        if (end == v->str + v->len && d >= 0 && d < 9.2e18 && d == floor(d))
            return (long long)d;
    }
    return -2;
}

int lb_bf_parse_info(const lb_reply *x, lb_bf_info *out)
{
    static const char *const names[5] = {"Capacity", "Size", "Number of filters",
                                         "Number of items inserted", "Expansion rate"};
    long long *fields[5] = {&out->capacity, &out->size, &out->filters, &out->items,
                            &out->expansion};
    for (int i = 0; i < 5; i++)
        *fields[i] = -1;
    out->present = 0;
    if (!x || (x->type != LB_REPLY_ARRAY && x->type != LB_REPLY_MAP) || x->len % 2 != 0)
        return -1;
    int known = 0;
    for (size_t i = 0; i + 1 < x->len; i += 2) {
        const lb_reply *name = x->element[i];
        if (!name || (name->type != LB_REPLY_STRING && name->type != LB_REPLY_STATUS) || !name->str)
            return -1;
        for (int f = 0; f < 5; f++) {
            if (!lb_ci_equal(name->str, name->len, names[f]))
                continue;
            if (out->present & (1u << f))
                return -1; /* a field given twice: neither value can be trusted */
            long long v = info_value(x->element[i + 1]);
            if (v == -2)
                return -1;
            *fields[f] = v;
            out->present |= 1u << f;
            known++;
        }
        /* unknown fields: ignored (newer module versions and valkey-bloom add some) */
    }
    return known > 0 ? 0 : -2;
}


/* ---------------------------------------------------------------- options */

void lb_bf_options_init(lb_bf_options *o)
{
    memset(o, 0, sizeof *o);
    o->error_rate = LB_BF_DEFAULT_ERROR_RATE;
    o->capacity = LB_BF_DEFAULT_CAPACITY;
    o->expansion = LB_BF_DEFAULT_EXPANSION;
}

uint64_t lb_bf_bytes_needed(const lb_bf_options *o)
{
    /* The module sizes a sub-filter as n * -ln(p) / ln(2)^2 bits, not rounded
     * to a power of two; a scaling filter's first one gets half the error
     * rate (each later one tightens it again). */
    double p = o->non_scaling ? o->error_rate : o->error_rate / 2;
    double bits = (double)o->capacity * -log(p) / (0.693147180559945309 * 0.693147180559945309);
    double bytes = ceil(bits / 8.0);
    return bytes >= 1.8e19 ? UINT64_MAX : (uint64_t)bytes;
}
