/* format.h: the file format of a saved filter (to_bytes / save).
 *
 * Little endian throughout.
 *   0  "LBLM"                 magic
 *   4  u16 version            1
 *   6  u8  kind               1 memory, 2 counting, 3 scalable, 4 blocked
 *   7  u8  hash scheme        0 xxh3 (the unmixed walk), 1 ling-base, 2 xxh3-mix
 *                             (blocked: always 2; its walk is blocked.h's)
 * memory, counting, blocked:
 *   8  u64 m                  bits or cells
 *  16  u32 k
 *  20  u32 flags              bit 0: capacity and error_rate are set
 *                             bit 1: live (memory only): a file that processes map
 *                             and add to (MemoryFilter.open); its trailer covers the
 *                             40 header bytes only, since the payload changes under it
 *  24  u64 capacity
 *  32  f64 error_rate
 *  40  payload                ceil(m/8) bytes of bits, or ceil(m/2) bytes of counters,
 *                             or (blocked) m/8 bytes: the 8 * m/512 lanes as u64
 * scalable:
 *   8  u64 initial_capacity
 *  16  f64 error_rate
 *  24  f64 growth_ratio
 *  32  f64 fpr_ratio
 *  40  u32 stages
 *  44  u32 0
 *  48  u64 count of each stage
 *      the bits of each stage, in order (each stage's m and k follow from the
 *      parameters, so a file cannot give a stage a geometry of its own)
 * last 8 bytes: u64 XXH3_64bits of everything before them (of the header alone for
 * a live file).  A reader older than the live flag refuses such a file
 * ("unknown flags") rather than misread it.
 *
 * Reading checks the length against the header before anything is allocated,
 * so a hostile header can never ask for more memory than the file holds, and
 * a chain's against the least its stages need before any stage is sized, so
 * that a short file cannot ask for the time thousands of stages take.  It
 * accepts exactly what the writer writes: parameters the constructors would
 * take (m and k derived from capacity and error_rate when those are set, both
 * zero when not; a chain whose stages' rates stay within its error_rate, with
 * a growth_ratio the constructor allows, so that growing later asks for a
 * bounded multiple of the memory the file holds: see LB_SCALABLE_MAX_GROWTH). */
#ifndef LB_FORMAT_H
#define LB_FORMAT_H

#include "common.h"
#include "hash.h"

#define LB_FORMAT_VERSION 1
/* As many stages as a chain can have (LB_SCALABLE_MAX_STAGES). */
#define LB_FORMAT_MAX_STAGES 4096

typedef enum {
    LB_KIND_MEMORY = 1,
    LB_KIND_COUNTING = 2,
    LB_KIND_SCALABLE = 3,
    LB_KIND_BLOCKED = 4
} lb_kind;
#define LB_KIND_LAST LB_KIND_BLOCKED

#define LB_FORMAT_FLAG_CAPACITY 1u
#define LB_FORMAT_FLAG_LIVE 2u

typedef struct {
    lb_kind kind;
    lb_hash_scheme scheme;
    /* memory, counting */
    uint64_t m;
    uint32_t k;
    int has_capacity;
    int live;                     /* memory: the live flag (see above) */
    uint64_t capacity;
    double error_rate;
    /* scalable */
    uint64_t initial_capacity;
    double growth, fpr_ratio;
    uint32_t nstages;
    const uint64_t *counts;       /* writing: the count of each stage */
    const uint8_t *counts_raw;    /* reading: where the counts are in the input */
    /* where the payload starts in the input, and its length */
    const uint8_t *payload;
    size_t payload_len;
} lb_format_header;

#define LB_FORMAT_FIXED_HEADER 40
#define LB_FORMAT_SCALABLE_HEADER 48
#define LB_FORMAT_TRAILER 8

/* Memory, counting and blocked: header, payload, trailer, written to out, which holds
 * exactly LB_FORMAT_FIXED_HEADER + payload_len + LB_FORMAT_TRAILER bytes. */
void lb_format_write_fixed(uint8_t *out, const lb_format_header *h, const uint8_t *payload,
                           size_t payload_len);

/* A live memory filter's file, all but its payload: the header (40 bytes,
 * the live flag set whatever h->live says) into header, and the trailer that
 * goes after the payload (the XXH3 of those 40 bytes) into trailer. */
void lb_format_write_live(uint8_t *header, uint8_t *trailer, const lb_format_header *h);

/* Scalable: out holds LB_FORMAT_SCALABLE_HEADER + 8 * nstages + sum of the
 * payloads + LB_FORMAT_TRAILER bytes. */
void lb_format_write_scalable(uint8_t *out, const lb_format_header *h,
                              const uint8_t *const *payloads, const size_t *payload_lens);

/* Parse and check everything: magic, version, kind, scheme, geometry limits,
 * exact length, checksum, padding bits.  On success h->payload points into
 * data.  Every failure is LB_ERR_FORMAT with a reason in why (static text). */
/* Reading: the count of stage i (i < nstages). */
uint64_t lb_format_stage_count(const lb_format_header *h, uint32_t i);

lb_status lb_format_read(const uint8_t *data, size_t len, lb_format_header *h, const char **why);

/* The header of the saved filter that starts with data (len bytes), read as
 * it is, checked no further than its prefix (magic, version, kind, hash
 * scheme): kind, scheme, and the fixed kinds' m, k, has_capacity, live,
 * capacity, error_rate, or a chain's initial_capacity, error_rate, growth,
 * fpr_ratio and nstages (no pointer is set).  For a look at a file (which
 * kind? live?) before it is read whole; lb_format_read checks it all.
 * LB_ERR_FORMAT with a reason in why (too short for its kind's header, bad
 * prefix). */
lb_status lb_format_peek(const uint8_t *data, size_t len, lb_format_header *h, const char **why);

/* The length of the whole saved filter whose first len bytes are data, from
 * its header alone (LB_FORMAT_SCALABLE_HEADER bytes are always enough), after
 * the same checks of the header as lb_format_read: for reading a file no
 * further than that.  have: how many bytes there are to read (the file's
 * length; UINT64_MAX when not known).  A chain's stages are sized only when
 * have holds what they need at the least (sizing thousands of small stages
 * takes seconds): when it does not, *total is that least, more than have, and
 * *whole = 0; otherwise *total is the length and *whole = 1.  A caller with
 * less than *total bytes has a truncated file; one reading a stream reads up
 * to *total and asks again.  LB_ERR_FORMAT with a reason in why otherwise. */
lb_status lb_format_length(const uint8_t *data, size_t len, uint64_t have, uint64_t *total,
                           int *whole, const char **why);

#endif
