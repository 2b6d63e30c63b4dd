/* format.c: see format.h. */
#include "format.h"

#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "blocked.h"
#include "params.h"
#include "scalable.h"

static const uint8_t magic[4] = {'L', 'B', 'L', 'M'};

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_f64(uint8_t *p, double d)
{
    uint64_t v;
    memcpy(&v, &d, 8);
    put_u64(p, v);
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static double get_f64(const uint8_t *p)
{
    uint64_t v = get_u64(p);
    double d;
    memcpy(&d, &v, 8);
    return d;
}

static void put_prefix(uint8_t *out, const lb_format_header *h)
{
    memcpy(out, magic, 4);
    put_u16(out + 4, LB_FORMAT_VERSION);
    out[6] = (uint8_t)h->kind;
    out[7] = (uint8_t)h->scheme;
}

static void put_fixed_header(uint8_t *out, const lb_format_header *h, uint32_t flags)
{
    put_prefix(out, h);
    put_u64(out + 8, h->m);
    put_u32(out + 16, h->k);
    put_u32(out + 20, flags | (h->has_capacity ? LB_FORMAT_FLAG_CAPACITY : 0u));
    put_u64(out + 24, h->has_capacity ? h->capacity : 0);
    put_f64(out + 32, h->has_capacity ? h->error_rate : 0.0);
}

void lb_format_write_live(uint8_t *header, uint8_t *trailer, const lb_format_header *h)
{
    put_fixed_header(header, h, LB_FORMAT_FLAG_LIVE);
    put_u64(trailer, XXH3_64bits(header, LB_FORMAT_FIXED_HEADER));
}

void lb_format_write_fixed(uint8_t *out, const lb_format_header *h, const uint8_t *payload,
                           size_t payload_len)
{
    put_fixed_header(out, h, 0);
    memcpy(out + LB_FORMAT_FIXED_HEADER, payload, payload_len);
    size_t body = LB_FORMAT_FIXED_HEADER + payload_len;
    put_u64(out + body, XXH3_64bits(out, body));
}

void lb_format_write_scalable(uint8_t *out, const lb_format_header *h,
                              const uint8_t *const *payloads, const size_t *payload_lens)
{
    put_prefix(out, h);
    put_u64(out + 8, h->initial_capacity);
    put_f64(out + 16, h->error_rate);
    put_f64(out + 24, h->growth);
    put_f64(out + 32, h->fpr_ratio);
    put_u32(out + 40, h->nstages);
    put_u32(out + 44, 0);
    size_t pos = LB_FORMAT_SCALABLE_HEADER;
    for (uint32_t i = 0; i < h->nstages; i++, pos += 8)
        put_u64(out + pos, h->counts[i]);
    for (uint32_t i = 0; i < h->nstages; i++) {
        memcpy(out + pos, payloads[i], payload_lens[i]);
        pos += payload_lens[i];
    }
    put_u64(out + pos, XXH3_64bits(out, pos));
}

#define FAIL(reason)       \
    do {                   \
        *why = (reason);   \
        return LB_ERR_FORMAT; \
    } while (0)

/* The header of a memory or counting filter (avail >= LB_FORMAT_FIXED_HEADER
 * bytes of data): its fields in h, checked as the constructor checks its
 * arguments and as the writer writes them; *payload_len = the bytes of cells. */
static lb_status parse_fixed(const uint8_t *data, lb_format_header *h, uint64_t *payload_len,
                             const char **why)
{
    h->m = get_u64(data + 8);
    h->k = get_u32(data + 16);
    uint32_t flags = get_u32(data + 20);
    if (flags & ~(LB_FORMAT_FLAG_CAPACITY | LB_FORMAT_FLAG_LIVE))
        FAIL("unknown flags");
    if ((flags & LB_FORMAT_FLAG_LIVE) && h->kind != LB_KIND_MEMORY)
        FAIL("the live flag on a filter other than a MemoryFilter");
    h->has_capacity = (int)(flags & LB_FORMAT_FLAG_CAPACITY);
    h->live = (flags & LB_FORMAT_FLAG_LIVE) != 0;
    h->capacity = get_u64(data + 24);
    h->error_rate = get_f64(data + 32);
    const int blocked = h->kind == LB_KIND_BLOCKED;
    if (blocked && h->scheme != LB_HASH_XXH3_MIX)
        FAIL("a blocked filter's hash byte must be 2");
    if ((blocked ? lb_blocked_check_geometry(h->m, h->k) : lb_check_geometry(h->m, h->k)) !=
        LB_OK)
        FAIL("m or k out of range");
    if (!h->has_capacity) {
        /* The writer leaves both fields zero when there is no capacity. */
        if (h->capacity != 0 || get_u64(data + 32) != 0)
            FAIL("capacity or error rate set, but the flags say there is none");
    } else {
        if (h->capacity == 0 || !(h->error_rate > 0 && h->error_rate < 1))
            FAIL("bad capacity or error rate");
        /* ... and m, k are what the constructor derives from them. */
        uint64_t m, k;
        lb_status sized = blocked ? lb_blocked_size(h->capacity, h->error_rate, &m, &k)
                                  : lb_size(h->capacity, h->error_rate, h->scheme,
                                            LB_FIXED_SLACK, &m, &k);
        if (sized != LB_OK || m != h->m || k != h->k)
            FAIL("m and k do not follow from capacity and error rate");
    }
    *payload_len = h->kind == LB_KIND_COUNTING ? (h->m + 1) / 2 : (h->m + 7) / 8;
    return LB_OK;
}

static lb_status read_fixed(const uint8_t *data, size_t body, lb_format_header *h,
                            const char **why)
{
    if (body < LB_FORMAT_FIXED_HEADER)
        FAIL("truncated header");
    uint64_t expect;
    lb_status st = parse_fixed(data, h, &expect, why);
    if (st != LB_OK)
        return st;
    if (body - LB_FORMAT_FIXED_HEADER != expect)
        FAIL("length does not match m");
    h->payload = data + LB_FORMAT_FIXED_HEADER;
    h->payload_len = (size_t)expect;
    /* Bits past m (memory) or the unused high nibble (counting) must be 0. */
    if (expect) {
        uint8_t last = h->payload[expect - 1];
        if (h->kind == LB_KIND_MEMORY && (h->m & 7) && (last & (0xffu >> (h->m & 7))))
            FAIL("padding bits are set");
        if (h->kind == LB_KIND_COUNTING && (h->m & 1) && (last & 0xf0))
            FAIL("padding cell is set");
    }
    return LB_OK;
}

/* The parameters of a scalable filter's header (LB_FORMAT_SCALABLE_HEADER
 * bytes of data), checked as the constructor checks them, and its number of
 * stages: no stage is looked at. */
static lb_status scalable_params(const uint8_t *data, lb_format_header *h, const char **why)
{
    h->initial_capacity = get_u64(data + 8);
    h->error_rate = get_f64(data + 16);
    h->growth = get_f64(data + 24);
    h->fpr_ratio = get_f64(data + 32);
    h->nstages = get_u32(data + 40);
    if (get_u32(data + 44) != 0)
        FAIL("reserved field is set");
    if (lb_scalable_check(h->initial_capacity, h->error_rate, h->growth, h->fpr_ratio) != LB_OK)
        FAIL("bad scalable parameters");
    if (h->nstages == 0 || h->nstages > LB_FORMAT_MAX_STAGES)
        FAIL("bad number of stages");
    return LB_OK;
}

/* The stages' part of a chain's file before their bits: the header and a count
 * of each. */
static uint64_t scalable_table_end(const lb_format_header *h)
{
    return LB_FORMAT_SCALABLE_HEADER + 8 * (uint64_t)h->nstages;
}

/* The least a chain's file can be from its number of stages alone: the table,
 * a byte of bits for each stage, the trailer. */
static uint64_t scalable_floor(const lb_format_header *h)
{
    return scalable_table_end(h) + h->nstages + LB_FORMAT_TRAILER;
}

/* A chain with the header's parameters and no stages, for
 * lb_scalable_stage_params: each stage's geometry follows from them (and from
 * the scheme, whose sizing lb_size applies). */
static void scalable_probe(const lb_format_header *h, lb_scalable *probe)
{
    memset(probe, 0, sizeof(*probe));
    probe->initial_capacity = h->initial_capacity;
    probe->error_rate = h->error_rate;
    probe->growth = h->growth;
    probe->fpr_ratio = h->fpr_ratio;
    probe->scheme = h->scheme;
}

/* A chain never holds a stage that would take it past its bound
 * (lb_scalable_push_stage): a file with one was not written by it. */
#define RATES_WITHIN(rates, h) ((rates) <= (h)->error_rate * (1.0 + 1e-9))
/* Beyond any file: the sums below stop here, far from overflowing. */
#define LENGTH_CAP ((uint64_t)1 << 62)

/* The least length of a chain's file, from each stage's capacity and rate
 * and the least m they allow (lb_scalable_stage_least: no sizing search), the
 * stages' rates checked against the chain's bound on the way.  Every file
 * this refuses, the full check (scalable_stages) refuses too. */
static lb_status scalable_least(const lb_format_header *h, uint64_t *least, const char **why)
{
    lb_scalable probe;
    scalable_probe(h, &probe);
    uint64_t total = 0;
    double rates = 0;
    for (uint32_t i = 0; i < h->nstages; i++) {
        uint64_t cap, m;
        double rate;
        if (lb_scalable_stage_least(&probe, i, &cap, &rate, &m) != LB_OK)
            FAIL("stage geometry out of range");
        rates += rate;
        if (!RATES_WITHIN(rates, h))
            FAIL("the stages' rates add up to more than error_rate");
        total += (m + 7) / 8;
        if (total > LENGTH_CAP)
            FAIL("length does not match the stages");
    }
    *least = scalable_table_end(h) + total + LB_FORMAT_TRAILER;
    return LB_OK;
}

/* Every stage's geometry (lb_scalable_stage_params: for a small stage the
 * sizing is a search) and the stages' rates; *total = the length of the file.
 * With counts (the stage table), each count against its stage's capacity; with
 * payload (payload_len bytes of stage bits), each stage's bits inside it and
 * its padding bits (past m in its last byte) clear. */
static lb_status scalable_stages(const lb_format_header *h, const uint8_t *counts,
                                 const uint8_t *payload, uint64_t payload_len, uint64_t *total,
                                 const char **why)
{
    lb_scalable probe;
    scalable_probe(h, &probe);
    uint64_t pos = 0;
    double rates = 0;
    for (uint32_t i = 0; i < h->nstages; i++) {
        uint64_t cap, m, k;
        double rate;
        if (lb_scalable_stage_params(&probe, i, &cap, &rate, &m, &k) != LB_OK)
            FAIL("stage geometry out of range");
        rates += rate;
        if (!RATES_WITHIN(rates, h))
            FAIL("the stages' rates add up to more than error_rate");
        if (counts && get_u64(counts + 8 * (size_t)i) > cap)
            FAIL("stage count exceeds its capacity");
        uint64_t nbytes = (m + 7) / 8;
        pos += nbytes;
        if (pos > LENGTH_CAP)
            FAIL("length does not match the stages");
        if (payload) {
            if (pos > payload_len)
                FAIL("length does not match the stages");
            /* Bits past m (Redis bit order: the low bits of the last byte). */
            if ((m & 7) && (payload[pos - 1] & (0xffu >> (m & 7))))
                FAIL("padding bits are set");
        }
    }
    *total = scalable_table_end(h) + pos + LB_FORMAT_TRAILER;
    return LB_OK;
}

static lb_status read_scalable(const uint8_t *data, size_t len, lb_format_header *h,
                               const char **why)
{
    if (len - LB_FORMAT_TRAILER < LB_FORMAT_SCALABLE_HEADER)
        FAIL("truncated header");
    lb_status st = scalable_params(data, h, why);
    if (st != LB_OK)
        return st;
    /* What the stages need at the least, against the bytes there are, before
     * any stage is sized. */
    if (scalable_floor(h) > len)
        FAIL("shorter than its header says (truncated)");
    uint64_t least;
    st = scalable_least(h, &least, why);
    if (st != LB_OK)
        return st;
    if (least > len)
        FAIL("shorter than its header says (truncated)");
    size_t pos = (size_t)scalable_table_end(h);
    uint64_t total;
    st = scalable_stages(h, data + LB_FORMAT_SCALABLE_HEADER, data + pos,
                         len - LB_FORMAT_TRAILER - pos, &total, why);
    if (st != LB_OK)
        return st;
    if (total != len)
        FAIL("length does not match the stages");
    h->counts_raw = data + LB_FORMAT_SCALABLE_HEADER;
    h->payload = data + pos;
    h->payload_len = len - LB_FORMAT_TRAILER - pos;
    return LB_OK;
}

uint64_t lb_format_stage_count(const lb_format_header *h, uint32_t i)
{
    return get_u64(h->counts_raw + 8 * (size_t)i);
}

/* The prefix of every saved filter (magic, version, kind, hash scheme) into
 * h's kind and scheme. */
static lb_status read_prefix(const uint8_t *data, size_t len, lb_format_header *h,
                             const char **why)
{
    if (len < 8)
        FAIL("too short to be a saved filter");
    if (memcmp(data, magic, 4) != 0)
        FAIL("not a ling_bloom filter (bad magic)");
    if ((uint16_t)(data[4] | (data[5] << 8)) != LB_FORMAT_VERSION)
        FAIL("unsupported format version");
    if (data[6] < LB_KIND_MEMORY || data[6] > LB_KIND_LAST)
        FAIL("unknown filter kind");
    h->kind = (lb_kind)data[6];
    if (data[7] >= LB_HASH_SCHEME_COUNT)
        FAIL("unknown hash scheme (written by a newer ling_bloom?)");
    h->scheme = (lb_hash_scheme)data[7];
    return LB_OK;
}

lb_status lb_format_peek(const uint8_t *data, size_t len, lb_format_header *h, const char **why)
{
    memset(h, 0, sizeof(*h));
    lb_status st = read_prefix(data, len, h, why);
    if (st != LB_OK)
        return st;
    if (h->kind == LB_KIND_SCALABLE) {
        if (len < LB_FORMAT_SCALABLE_HEADER)
            FAIL("truncated header");
        h->initial_capacity = get_u64(data + 8);
        h->error_rate = get_f64(data + 16);
        h->growth = get_f64(data + 24);
        h->fpr_ratio = get_f64(data + 32);
        h->nstages = get_u32(data + 40);
        return LB_OK;
    }
    if (len < LB_FORMAT_FIXED_HEADER)
        FAIL("truncated header");
    uint32_t flags = get_u32(data + 20);
    h->m = get_u64(data + 8);
    h->k = get_u32(data + 16);
    h->has_capacity = (flags & LB_FORMAT_FLAG_CAPACITY) != 0;
    h->live = (flags & LB_FORMAT_FLAG_LIVE) != 0;
    h->capacity = get_u64(data + 24);
    h->error_rate = get_f64(data + 32);
    return LB_OK;
}

lb_status lb_format_length(const uint8_t *data, size_t len, uint64_t have, uint64_t *total,
                           int *whole, const char **why)
{
    lb_format_header h;
    memset(&h, 0, sizeof(h));
    *total = 0;
    *whole = 0;
    lb_status prefix = read_prefix(data, len, &h, why);
    if (prefix != LB_OK)
        return prefix;
    lb_status st;
    if (h.kind == LB_KIND_SCALABLE) {
        if (len < LB_FORMAT_SCALABLE_HEADER)
            FAIL("truncated header");
        st = scalable_params(data, &h, why);
        if (st != LB_OK)
            return st;
        /* The stages are sized only when have holds what they need at the
         * least. */
        *total = scalable_floor(&h);
        if (*total > have)
            return LB_OK;
        st = scalable_least(&h, total, why);
        if (st != LB_OK || *total > have)
            return st;
        st = scalable_stages(&h, NULL, NULL, 0, total, why);
    } else {
        if (len < LB_FORMAT_FIXED_HEADER)
            FAIL("truncated header");
        uint64_t payload = 0;
        st = parse_fixed(data, &h, &payload, why);
        *total = LB_FORMAT_FIXED_HEADER + payload + LB_FORMAT_TRAILER;
    }
    *whole = st == LB_OK;
    return st;
}

lb_status lb_format_read(const uint8_t *data, size_t len, lb_format_header *h, const char **why)
{
    memset(h, 0, sizeof(*h));
    if (len < 8 + LB_FORMAT_TRAILER)
        FAIL("too short to be a saved filter");
    if (memcmp(data, magic, 4) != 0)
        FAIL("not a ling_bloom filter (bad magic)");
    if ((uint16_t)(data[4] | (data[5] << 8)) != LB_FORMAT_VERSION)
        FAIL("unsupported format version");
    size_t body = len - LB_FORMAT_TRAILER;
    /* A live file's trailer covers its header only (the flag is checked
     * again, with the rest of the header, by parse_fixed). */
    int live = body >= LB_FORMAT_FIXED_HEADER && data[6] == LB_KIND_MEMORY &&
               (get_u32(data + 20) & LB_FORMAT_FLAG_LIVE);
    if (XXH3_64bits(data, live ? LB_FORMAT_FIXED_HEADER : body) != get_u64(data + body))
        FAIL("checksum mismatch (corrupted data)");
    if (data[6] < LB_KIND_MEMORY || data[6] > LB_KIND_LAST)
        FAIL("unknown filter kind");
    if (data[7] >= LB_HASH_SCHEME_COUNT)
        FAIL("unknown hash scheme (written by a newer ling_bloom?)");
    h->kind = (lb_kind)data[6];
    h->scheme = (lb_hash_scheme)data[7];
    return h->kind == LB_KIND_SCALABLE ? read_scalable(data, len, h, why)
                                       : read_fixed(data, body, h, why);
}
