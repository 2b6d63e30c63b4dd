/* bitmap.h: RedisFilter's commands: a Bloom filter kept as a Redis
 * bitmap, hashed on the client (hash.h), on top of the client (client.h).
 *
 * Bit order: bit i of the filter is Redis bit offset i (SETBIT/GETBIT/BITFIELD
 * order: offset 0 is the MSB of byte 0), i.e. byte i>>3, mask 0x80>>(i&7).
 * MemoryFilter uses the same order, so load/snapshot copy bytes unchanged.
 *
 * Parts: a Redis string holds at most 2^32 bits (512 MiB), so bit i lives in
 * part p = i >> 32 at offset i & 0xffffffff.  Part 0 is the user's key itself
 * (so a filter of m <= 2^32 is the plain bitmap a Go ling-base process reads
 * and writes with the same key).
 *
 * Key naming rule (all names land in the user key's Redis Cluster slot):
 *   base = key            when key has a hash tag by Redis Cluster's rule (the
 *                         first '{' followed later by a '}' with at least one
 *                         byte between them): every "key..." name shares it;
 *   base = "{" key "}"    otherwise, when key contains no '}': the tag is then
 *                         exactly the key, which is what the key's own slot
 *                         hashes;
 *   base = "{" T "}" key  otherwise (no tag and a '}' inside, "a}b", "a{}b":
 *                         no tag can be the key): T is the four bytes of
 *                         '@'..'O' whose slot is the key's (slots.h), so
 *                         every name shares it, e.g. "{@ACM}a}b:meta".
 *   part p >= 1   : base ":part:" p        e.g. "{bf:users}:part:1"
 *   meta          : base ":meta"           e.g. "{bf:users}:meta", "bf:{users}:meta"
 *   load temp key : base ":load:" unique   (lives only during lb_bitmap_load)
 *
 * Meta key (the geometry guard, and the mark of ownership): a string
 * "ling_bloom:v=1;m=<m>;k=<k>;hash=<name>" (the blocked layout's: see
 * lb_bitmap_layout; the layout is part of the geometry compared), with
 * ";canary=1" when the filter carries the canary (below).  Before its first command, and
 * again after every reconnect (a server restarted empty, a forked child), an
 * lb_bitmap first looks, writing nothing: EXISTS meta + GETRANGE meta 0 255
 * (ours are shorter; another program's value of any size is MISMATCH), TYPE
 * key, INFO memory, one round trip (its maxmemory-policy noted on the client,
 * maxmemory.h).
 *   - meta there: its geometry must be ours, else LB_REDIS_ERR_MISMATCH
 *     naming both (no bit is touched then; reset refuses too).
 *   - no meta, the key exists: the key holds data this library did not
 *     write (a user's string, another program's bitmap): LB_REDIS_ERR_NOTOWNED,
 *     nothing is read or written -- unless adopt is set (the caller gives the
 *     m, k and hash a Go ling-base service wrote it with), then it is claimed.
 *   - no meta, no key: the filter's size (lb_bitmap_bytes) must fit
 *     under the server's maxmemory (maxmemory.h), else
 *     LB_REDIS_ERR_TOOLARGE.
 * Claiming is a second round trip, SET meta <ours> NX [PX ttl], SETBIT of the
 * canary, and the meta read again: the first writer wins and the others compare.  A key created by another
 * program between the look and the claim is not noticed.
 * Every write round trip (add, load) also sends SET meta <ours> NX [PX ttl]
 * with its bits: a filter that expired or was deleted while this connection
 * stayed open comes back with its meta key, never as a bare bitmap that
 * other processes would refuse as not theirs.
 * A Go ling-base process ignores the meta key and keeps working.
 *
 * The canary (a filter with no ttl, whose last part is not a whole 2^32-bit
 * string): bit 8 * bytes(last part) of the last part, the first bit of the byte
 * after the filter's, set by the claim, reset and load (a load's own claim
 * leaves it out: it rides the last part's temporary key into the part with
 * the last bits, and is read after them; 0 there: the server lost some of
 * what the load sent, LB_REDIS_ERR_LOST).  Every add and test
 * round trip reads it after every bit it reads (a GET u1 field more in the
 * round trip's last command when that is a BITFIELD of a one-part filter, else
 * a GETBIT closing the pipeline: a flush between two commands is seen): 0 means the filter is gone (flushed, deleted, evicted,
 * a restart without its data) or was re-created by a write since (which does
 * not set it): LB_REDIS_ERR_LOST, after the write for adds, so every client
 * sees the loss.  A client that saw the filter (bm->known) and finds no meta
 * and no key after a reconnect gets LB_REDIS_ERR_LOST from the look, nothing
 * written, except for reset and load, which rebuild it.  A meta key without
 * the canary field (an earlier version's filter) is given the field and the
 * canary by the first check.  Snapshot and bitcount read the filter's bytes
 * only.
 *
 * TTL (ttl_ms > 0): every write round trip (add, load, reset) also sends
 * PEXPIRE ttl for every part and the meta key, in the same pipeline, after
 * the writes: the whole filter expires ttl after its last write (sliding,
 * like the Go driver, whose tests read nothing back).  Tests do not refresh.
 * Cost: nparts + 1 small commands per write round trip.
 *
 * Batches are split into chunks of at most chunk_keys keys (default 10000),
 * one round trip each, so memory stays flat.  Every command here is safe to
 * repeat, so every round trip is sent with LB_REDIS_IDEMPOTENT (a stale
 * connection after a server restart is retried once on a fresh one, after
 * the meta key was checked on it; in that
 * rare case add() may report a key as not new when the lost attempt had
 * already set its bits).  When a chunk fails, earlier chunks stay applied.
 *
 * Errors: an lb_redis_status; the message is in lb_redis_errstr(conn).
 * WRONGTYPE messages name the key: "WRONGTYPE ... (key 'bf')".
 * Not thread-safe: same rule as the lb_redis it uses. */
#ifndef LB_REDIS_BITMAP_H
#define LB_REDIS_BITMAP_H

#include "common.h"
#include "hash.h"
#include "client.h"
#include "op.h"

#define LB_BITMAP_FORMAT_VERSION 1
/* The meta of a blocked filter: version 2 (a reader older than the layout
 * refuses it as written by a newer ling_bloom, rather than read its bits with
 * the standard walk), hash=xxh3-block, layout=blocked. */
#define LB_BITMAP_FORMAT_VERSION_BLOCKED 2
#define LB_BITMAP_BLOCKED_HASH "xxh3-block"
#define LB_BITMAP_PART_BITS (UINT64_C(1) << 32)
#define LB_BITMAP_DEFAULT_CHUNK_KEYS 10000

/* How bits are set and read: one BITFIELD per key and part (default; its
 * reply gives the old bits), or one SETBIT/GETBIT per bit (the Go driver's
 * way).  The bitmap in Redis is bit for bit the same either way. */
typedef enum {
    LB_BITMAP_BITFIELD = 0,
    LB_BITMAP_SETBIT = 1
} lb_bitmap_mode;

/* How a key's bits lie in the bitmap: the standard walk (hash.h: k bits
 * anywhere in m), or blocked.h's split-block layout: every key's k bits in one
 * 64-byte block, the Redis string holding exactly the bytes of a
 * BlockedFilter of the same m and k (so load/snapshot copy bytes unchanged).
 * A blocked filter tests a key with one GETRANGE of its block (64 bytes back,
 * probed here) and adds with one BITFIELD of k SET u1 inside the block (an
 * atomic OR whose reply gives the old bits).  Its meta key reads
 * "ling_bloom:v=2;m=<m>;k=<k>;hash=xxh3-block;layout=blocked"; an open of
 * either layout over the other is a geometry mismatch naming both.  Mode
 * (always BITFIELD for its adds) and adopt (a Go bitmap is never blocked) do
 * not apply to it. */
typedef enum {
    LB_BITMAP_STANDARD = 0,
    LB_BITMAP_BLOCKED = 1
} lb_bitmap_layout;

typedef struct lb_bitmap lb_bitmap;

/* A filter at `key` (binary-safe, not empty) with geometry g (m in
 * [1, LB_MAX_BITS], k in [1, LB_MAX_K]).  ttl_ms = 0: no expiry.  conn is not
 * owned and must outlive the bitmap.  Nothing is sent yet.
 * Errors: ARG (bad key, geometry or ttl; message in conn), NOMEM. */
lb_redis_status lb_bitmap_new(lb_redis *conn, const void *key, size_t keylen,
                                    const lb_geometry *g, int64_t ttl_ms,
                                    lb_bitmap **out);
void lb_bitmap_free(lb_bitmap *bm);

/* Settings (take effect from the next call). */
void lb_bitmap_set_mode(lb_bitmap *bm, lb_bitmap_mode mode);
void lb_bitmap_set_adopt(lb_bitmap *bm, int adopt); /* see the meta key */

/* The layout, set before the first call (default standard).  Blocked needs
 * m a multiple of 512, k a multiple of 8 (lb_blocked_check_geometry) and
 * the scheme LB_HASH_XXH3_MIX (the key hash is lb_hash_xxh3): ERR_ARG
 * otherwise.  It sets the mode to BITFIELD and adopt off; later set_mode and
 * set_adopt calls are ignored while it is blocked. */
lb_redis_status lb_bitmap_set_layout(lb_bitmap *bm, lb_bitmap_layout layout);

/* Bytes of server memory the bitmap of g takes when full: ceil(m / 8). */
uint64_t lb_bitmap_bytes(const lb_geometry *g);
void lb_bitmap_set_chunk_keys(lb_bitmap *bm, size_t chunk_keys); /* 0 -> default */
void lb_bitmap_set_ttl(lb_bitmap *bm, int64_t ttl_ms);          /* 0 -> none */

/* Read-only facts. */
const lb_geometry *lb_bitmap_geometry(const lb_bitmap *bm);
uint64_t lb_bitmap_nparts(const lb_bitmap *bm);      /* ceil(m / 2^32) */
/* Use another client from now on (the binding's asyncio transport takes
 * over the connection; its connect count goes on from the old one's). */
void lb_bitmap_set_conn(lb_bitmap *bm, lb_redis *conn);
/* The Redis name of part p (p < nparts) or of the meta key (p == UINT64_MAX).
 * Writes up to cap bytes into buf and returns the full length. */
size_t lb_bitmap_key_name(const lb_bitmap *bm, uint64_t p, char *buf, size_t cap);

/* Check (and claim, if absent) the meta key now; done automatically before
 * the first command.  OK, MISMATCH, NOTOWNED, TOOLARGE, WRONGTYPE (meta key
 * of another type), or a connection error. */
lb_redis_status lb_bitmap_check_meta(lb_bitmap *bm);

/* Add n keys (none empty; n may be 0: nothing is sent).  was_new (may be
 * NULL) receives, per key, 1 when at least one of its bits was 0 before (the
 * key tested absent), else 0.  Keys later in the batch see the bits set by
 * earlier ones (adding the same key twice gives 1 then 0). */
lb_redis_status lb_bitmap_add(lb_bitmap *bm, const lb_key *keys, size_t n,
                                    uint8_t *was_new);

/* Test n keys: present[i] = 1 when all k bits of key i are set. */
lb_redis_status lb_bitmap_test(lb_bitmap *bm, const lb_key *keys, size_t n,
                                     uint8_t *present);

/* Empty the filter, keep its geometry: DEL every part and the meta key, then
 * write the meta key again (ours), in one round trip. */
lb_redis_status lb_bitmap_reset(lb_bitmap *bm);

/* OR a local bit array (nbytes == (m+7)/8, Redis bit order; bits >= m are
 * ignored) into the Redis bitmap, not overwriting other writers' bits.
 * Per part: the non-zero 8 MiB chunks go into a temporary key (SETRANGE, one
 * round trip each, the temp key given a 10-minute expiry in case this process
 * dies), then BITOP OR part part tmp + DEL tmp.  All-zero chunks are skipped.
 * The server allocates the temporary key (up to 512 MiB per part). */
lb_redis_status lb_bitmap_load(lb_bitmap *bm, const uint8_t *bits, size_t nbytes);

/* Copy the Redis bitmap into out (nbytes == (m+7)/8): GETRANGE of every
 * part in chunks of at most 16 MiB per round trip; missing parts and strings
 * shorter than their part read as zeros; bits >= m are cleared. */
lb_redis_status lb_bitmap_snapshot(lb_bitmap *bm, uint8_t *out, size_t nbytes);

/* Sum of BITCOUNT over the parts (set bits, for cardinality estimates). */
lb_redis_status lb_bitmap_bitcount(lb_bitmap *bm, uint64_t *count);
/* The same as a step machine (op.h), *count filled when it ends. */
lb_op *lb_bitmap_bitcount_begin(lb_bitmap *bm, uint64_t *count);

/* The operations as step machines (op.h), for the wire transport (the
 * binding's asyncio one drives them with lb_op_wire_step and what it reports
 * back, op.h, over a wire client, wire.h) and for the blocking calls above (which run
 * them with lb_op_run): add or test of n keys, or reset.  Each one is the
 * same machine either way: the meta look (and claim) that every new
 * connection gets before its first command, then the operation's round
 * trips, built and checked by the same functions.
 *
 * The first round trip is built (the keys hashed) by begin: with at most
 * chunk_keys keys, the keys need not live longer; out (n bytes, as
 * lb_bitmap_add / _test) must live until the operation ends.  A transport
 * that gives up in the middle (cancelled, timed out) drops its connection
 * (lb_wire_closed) and begins the operation again, or another one: begin
 * starts afresh.  lb_bitmap_wire_begin takes 1..chunk_keys keys. */
#define LB_BITMAP_OP_ADD 1
#define LB_BITMAP_OP_TEST 2
#define LB_BITMAP_OP_RESET 3
lb_redis_status lb_bitmap_begin(lb_bitmap *bm, int kind, const lb_key *keys, size_t n,
                                uint8_t *out, lb_op **op);
lb_redis_status lb_bitmap_wire_begin(lb_bitmap *bm, int kind, const lb_key *keys, size_t n,
                                     uint8_t *out, lb_op **op);

/* Read the geometry stored next to `key` (for RedisFilter.open(url, key)):
 * OK and *out filled (lb_geometry_init), NOTFOUND when there is no meta key,
 * MISMATCH when it holds something that is not a geometry this version
 * understands, WRONGTYPE, or a connection error. */
lb_redis_status lb_bitmap_read_meta(lb_redis *conn, const void *key, size_t keylen,
                                          lb_geometry *out);
/* The same, with the layout the meta key names (layout may be NULL). */
lb_redis_status lb_bitmap_read_meta_layout(lb_redis *conn, const void *key, size_t keylen,
                                                 lb_geometry *out, lb_bitmap_layout *layout);

#endif
