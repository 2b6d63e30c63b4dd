/* fuzz_format.c: the saved-filter format (csrc/core/format.c) on hostile bytes.
 *
 * What from_bytes() / load() do with a file, minus Python: lb_format_length on
 * the head (load() reads no further than it says), lb_format_read, then the
 * filter built from the header as the bindings build it (bits, counters, blocks, or a
 * scalable chain grown stage by stage) with the payload copied in, and a key
 * added and tested.  Each input is tried twice: as it is, and with its last 8
 * bytes replaced by the right checksum, so that the fuzzer gets past the
 * checksum to the header checks behind it (and once more with a live file's
 * checksum, of the header alone).
 *
 * Oracles beyond the sanitizers (each a __builtin_trap, so a finding):
 *   - an accepted file is exactly what the writer writes: writing the parsed
 *     filter again gives the same bytes (the format accepts nothing else);
 *   - lb_format_length of an accepted file is its length;
 *   - the payload length the reader checked is the memory the filter takes
 *     (a mismatch would be an over-read in the binding's memcpy);
 *   - a chain the reader accepted can be rebuilt stage by stage
 *     (lb_scalable_push_stage agrees with the reader's stage checks). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "bitarray.h"
#include "blocked.h"
#include "counters.h"
#include "format.h"
#include "scalable.h"

#define CHECK(c)                  \
    do {                          \
        if (!(c))                 \
            __builtin_trap();     \
    } while (0)

static void fixed_filter(const uint8_t *data, size_t len, const lb_format_header *h)
{
    lb_geometry g;
    lb_geometry_init(&g, h->m, h->k, h->scheme);
    lb_hash_pair hp = lb_hash(h->scheme, "fuzz", 4);
    uint8_t *out = malloc(len);
    CHECK(out);
    if (h->kind == LB_KIND_MEMORY) {
        lb_bits b;
        CHECK(lb_bits_init(&b, h->m) == LB_OK);
        CHECK(b.nbytes == h->payload_len);
        memcpy(b.data, h->payload, h->payload_len);
        b.bits_set = lb_bits_popcount(&b);
        CHECK(b.bits_set <= b.m);
        if (h->live) {
            /* A live file (MemoryFilter.open): header and trailer as the
             * mapping writes them, the payload as it is. */
            CHECK(len == LB_FORMAT_FIXED_HEADER + b.nbytes + LB_FORMAT_TRAILER);
            lb_format_write_live(out, out + len - LB_FORMAT_TRAILER, h);
            memcpy(out + LB_FORMAT_FIXED_HEADER, b.data, (size_t)b.nbytes);
        } else {
            lb_format_write_fixed(out, h, b.data, (size_t)b.nbytes);
        }
        CHECK(memcmp(out, data, len) == 0);
        (void)lb_bits_test(&b, &g, hp);
        lb_bits_add(&b, &g, hp);
        CHECK(lb_bits_test(&b, &g, hp));
        lb_bits_free(&b);
    } else if (h->kind == LB_KIND_BLOCKED) {
        lb_blocked b;
        CHECK(lb_blocked_init(&b, h->m, h->k) == LB_OK);
        CHECK(b.nblocks * 64 == h->payload_len);
        lb_blocked_import(&b, h->payload);
        CHECK(b.bits_set <= h->m);
        uint8_t *tmp = NULL;
        const uint8_t *bytes = lb_blocked_bytes(&b, &tmp);
        CHECK(bytes);
        lb_format_write_fixed(out, h, bytes, h->payload_len);
        free(tmp);
        CHECK(memcmp(out, data, len) == 0);
        (void)lb_blocked_test(&b, hp);
        lb_blocked_add(&b, hp);
        CHECK(lb_blocked_test(&b, hp));
        (void)lb_blocked_current_fpr(&b);
        lb_blocked_free(&b);
    } else {
        lb_counters c;
        CHECK(lb_counters_init(&c, h->m) == LB_OK);
        CHECK(c.nbytes == h->payload_len);
        memcpy(c.data, h->payload, h->payload_len);
        lb_counters_recount(&c);
        CHECK(c.nonzero <= c.m);
        lb_format_write_fixed(out, h, c.data, (size_t)c.nbytes);
        CHECK(memcmp(out, data, len) == 0);
        lb_counters_add(&c, &g, hp);
        CHECK(lb_counters_test(&c, &g, hp));
        (void)lb_counters_remove(&c, &g, hp);
        lb_counters_free(&c);
    }
    free(out);
}

static void scalable_filter(const uint8_t *data, size_t len, const lb_format_header *h)
{
    lb_scalable s;
    CHECK(lb_scalable_init(&s, h->initial_capacity, h->error_rate, h->growth, h->fpr_ratio,
                           h->scheme) == LB_OK);
    for (uint32_t i = 1; i < h->nstages; i++)
        CHECK(lb_scalable_push_stage(&s) == LB_OK);
    CHECK(s.nstages == h->nstages);
    uint64_t total = 0;
    for (uint32_t i = 0; i < s.nstages; i++)
        total += s.stages[i].bits.nbytes;
    CHECK(total == h->payload_len);
    const uint8_t *p = h->payload;
    const uint8_t **payloads = malloc(sizeof(*payloads) * s.nstages);
    size_t *lens = malloc(sizeof(*lens) * s.nstages);
    uint64_t *counts = malloc(sizeof(*counts) * s.nstages);
    uint8_t *out = malloc(len);
    CHECK(payloads && lens && counts && out);
    for (uint32_t i = 0; i < s.nstages; i++) {
        lb_stage *st = &s.stages[i];
        memcpy(st->bits.data, p, (size_t)st->bits.nbytes);
        p += st->bits.nbytes;
        st->bits.bits_set = lb_bits_popcount(&st->bits);
        st->count = lb_format_stage_count(h, i);
        CHECK(st->count <= st->capacity);
        payloads[i] = st->bits.data;
        lens[i] = (size_t)st->bits.nbytes;
        counts[i] = st->count;
    }
    lb_format_header w = *h;
    w.counts = counts;
    lb_format_write_scalable(out, &w, payloads, lens);
    CHECK(memcmp(out, data, len) == 0);
    /* The filter works: a key added tests present (adding may grow the chain
     * by a stage, or refuse with RANGE at its bound: both fine). */
    int added = 0;
    lb_status st = lb_scalable_add(&s, "fuzz", 4, &added);
    CHECK(st == LB_OK || st == LB_ERR_RANGE || st == LB_ERR_NOMEM);
    if (st == LB_OK)
        CHECK(lb_scalable_test(&s, "fuzz", 4));
    (void)lb_scalable_current_fpr(&s);
    free(out);
    free(counts);
    free(lens);
    free(payloads);
    lb_scalable_free(&s);
}

static void one(const uint8_t *data, size_t len)
{
    lb_format_header h;
    const char *why = NULL;
    uint64_t total = 0;
    const char *lwhy = NULL;
    int whole = 0;
    lb_status ls = lb_format_length(data, len, len, &total, &whole, &lwhy);
    if (ls != LB_OK)
        CHECK(lwhy && lwhy[0]);
    else
        CHECK(whole ? total >= 8 : total > len);
    lb_status st = lb_format_read(data, len, &h, &why);
    if (st != LB_OK) {
        CHECK(st == LB_ERR_FORMAT && why && why[0]);
        return;
    }
    /* The header check of load() agrees with the full read. */
    CHECK(ls == LB_OK && whole && total == len);
    CHECK(h.payload >= data && h.payload + h.payload_len <= data + len);
    if (h.kind == LB_KIND_SCALABLE)
        scalable_filter(data, len, &h);
    else
        fixed_filter(data, len, &h);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    one(data, len);
    if (len >= 8 + LB_FORMAT_TRAILER) {
        uint8_t *copy = malloc(len);
        if (!copy)
            return 0;
        memcpy(copy, data, len);
        uint64_t sum = XXH3_64bits(copy, len - LB_FORMAT_TRAILER);
        for (int i = 0; i < 8; i++)
            copy[len - LB_FORMAT_TRAILER + i] = (uint8_t)(sum >> (8 * i));
        one(copy, len);
        if (len >= LB_FORMAT_FIXED_HEADER + LB_FORMAT_TRAILER) {
            /* ... and the live file's checksum, of the header alone. */
            sum = XXH3_64bits(copy, LB_FORMAT_FIXED_HEADER);
            for (int i = 0; i < 8; i++)
                copy[len - LB_FORMAT_TRAILER + i] = (uint8_t)(sum >> (8 * i));
            one(copy, len);
        }
        free(copy);
    }
    return 0;
}
