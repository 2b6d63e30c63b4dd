/* redisbloom.h: RedisBloomFilter's commands: a Bloom filter kept by the
 * RedisBloom module on the server (BF.*), on top of the client (client.h).  Pure C.
 *
 * The server hashes; this side sends items and reads the replies by their
 * shape:
 *   - INSERT/EXISTS/MEXISTS answer integers (RESP2, and RESP3 with module
 *     v2.4) or booleans (RESP3 with v2.6+); both are read.  A reply of the
 *     wrong length is a protocol error, never padded with false.
 *   - BF.INFO is read by field NAME, from a flat array of name/value pairs
 *     (RESP2) or a map (RESP3); unknown fields are ignored (valkey-bloom adds
 *     some), missing or nil fields (Expansion rate on a non-scaling filter) are
 *     reported absent, and a field the server does not report at all is not
 *     compared by the check below.  A reply with none of the fields read is
 *     LB_REDIS_ERR_NOMODULE (a module that names them otherwise), as is a
 *     card() without BF.CARD whose BF.INFO has no item count, and a dump()
 *     whose BF.INFO has neither Capacity nor Size (no bound for its walk).
 *
 Writes: every add, one key or many, is
 *     BF.INSERT key CAPACITY c ERROR e EXPANSION x ITEMS k...   (scaling)
 *     BF.INSERT key CAPACITY c ERROR e NONSCALING ITEMS k...    (non-scaling)
 *     BF.INSERT key NOCREATE ITEMS k...                         (no_create)
 * The module uses the parameters only when the command creates the filter,
 * so a filter that expired or was deleted is recreated as configured, in the
 * same command, never with the module's defaults (capacity 100, 1%).
 * EXPANSION is never sent with NONSCALING (the module rejects the pair).
 * no_create never creates: a missing key answers "ERR not found", which is
 * LB_REDIS_ERR_NOTFOUND.
 * A filter with no ttl that this client saw there (the check found it, an add
 * or reserve made it, a restore wrote it) is never made again by a write: its
 * adds send NOCREATE too ("not found" is then LB_REDIS_ERR_LOST) and its tests
 * carry TYPE key ("none": LB_REDIS_ERR_LOST; another type: WRONGTYPE).  Its
 * reset is DEL + BF.RESERVE in one round trip (others never find it missing).
 *
 * The check before the first write (again after every reconnect and after
 * reset; skipped with no_create): BF.INFO key + INFO memory, one round trip,
 * nothing written.  An existing filter must match: non-scaling or the same
 * expansion, and the capacity BF.INFO reports (summed over the sub-filters,
 * each expansion times the one before) that of c; else
 * LB_REDIS_ERR_MISMATCH.  BF.INFO does not report the error rate, so it is
 * not compared.  A missing key: the new filter's size (lb_bf_bytes_needed)
 * must fit under the server's maxmemory (maxmemory.h), else
 * LB_REDIS_ERR_TOOLARGE.  A filter created by another client with other
 * parameters between the check and the write is not noticed.
 *
 * TTL (ttl_ms > 0): every write round trip (reserve, add, restore) also
 * sends PEXPIRE key ttl after its commands, in the same pipeline: the filter
 * expires ttl after its last write.
 *
 * Batches: at most chunk_keys items per BF.INSERT / BF.MEXISTS, one round
 * trip each.  A single item to test uses BF.EXISTS.  Reads are retried once on
 * a fresh connection when a connection opened earlier turns out dead (server
 * restart).  Writes are retried once too, after the key check, when they fail
 * with a lost connection that had been open before the call: if the lost
 * attempt had in fact reached the server, the retry reports its keys as not
 * new (they are in the filter either way).  Timeouts are never retried.
 * When a chunk fails, earlier chunks stay applied.
 *
 * Errors (an lb_redis_status; the message in lb_redis_errstr(conn), the
 * server's own text in lb_bf_reply_text):
 *   LB_REDIS_ERR_FULL        a non-scaling filter is full: the module cuts
 *                            BF.INSERT's reply short at the first key that
 *                            did not fit, with the error as its last element;
 *                            lb_bf_full_processed tells how many keys of the
 *                            call were processed before it (-1: the server
 *                            rejected the command as a whole without saying),
 *                            lb_bf_last_new how many of those were new.
 *   LB_REDIS_ERR_MISMATCH    the filter at key has other parameters.
 *   LB_REDIS_ERR_TOOLARGE    a new filter would not fit under maxmemory.
 *   LB_REDIS_ERR_NOMODULE    "unknown command 'BF.…'": no RedisBloom module, or
 *                            a BF.* implementation without that command
 *                            (valkey-bloom: BF.SCANDUMP, BF.LOADCHUNK); a
 *                            BF.INSERT that refuses NOCREATE; a BF.INFO
 *                            without what the call reads (above).  The
 *                            message names the command and the server.
 *   LB_REDIS_ERR_WRONGTYPE   the key holds another type; the message names it.
 *   LB_REDIS_ERR_NOTFOUND    info/dump of a key that does not exist; an add
 *                            with no_create to a key that does not exist.
 *   anything of the client (client.h).
 *
 * The key of another type and the tests: the module answers 0 (not
 * WRONGTYPE) to BF.EXISTS / BF.MEXISTS on a key of another type, which would
 * make every test silently false.  So when a test answers all-false and the
 * key's type has not been confirmed on this connection yet, one more round
 * trip asks TYPE key: another type -> LB_REDIS_ERR_WRONGTYPE; none or a Bloom
 * filter -> the answer stands and the type counts as confirmed (as it does
 * after any successful add, any test with a true answer, reserve, info).
 * Confirmation is forgotten on reconnect and on reset.  A key replaced by
 * another type while this connection stays open is not noticed by tests.
 *
 * Not thread-safe: the same rule as the lb_redis it uses. */
#ifndef LB_REDISBLOOM_H
#define LB_REDISBLOOM_H

#include "common.h"
#include "client.h"
#include "op.h"
#include "redisbloom_proto.h"

typedef struct lb_redisbloom lb_redisbloom;

/* A filter at `key` (binary-safe, not empty).  conn is not owned and must
 * outlive the filter.  Nothing is sent yet.
 * Errors: ARG (empty key, error rate, capacity, expansion, ttl), NOMEM. */
lb_redis_status lb_bf_new(lb_redis *conn, const void *key, size_t keylen,
                          const lb_bf_options *opt, lb_redisbloom **out);
void lb_bf_free(lb_redisbloom *bf);

void lb_bf_set_chunk_keys(lb_redisbloom *bf, size_t n); /* 0 -> default; at most 1000000 */
/* Use another client from now on (the binding's asyncio transport takes
 * over the connection; its connect count goes on from the old one's). */
void lb_bf_set_conn(lb_redisbloom *bf, lb_redis *conn);

/* 1 once the check found a matching filter or a missing key (the next
 * write creates it as configured), a reserve created it, or a restore()
 * wrote it; 0 again after reset. */
int lb_bf_is_reserved(const lb_redisbloom *bf);

/* 1 once this client saw the filter at its key (found, created or restored
 * it): from then on a filter made without a ttl that is gone is lost
 * (LB_REDIS_ERR_LOST), never made again by a write nor counted 0.
 * lb_bf_mark_seen: another client of the same filter saw it (an asyncio
 * filter's blocking twin, told what the asyncio one saw). */
int lb_bf_seen(const lb_redisbloom *bf);
void lb_bf_mark_seen(lb_redisbloom *bf);

/* After LB_REDIS_ERR_FULL: keys of the failed call (add) processed before
 * the first one the filter rejected (each of them is in the filter now), or
 * -1 when the server did not say. */
long long lb_bf_full_processed(const lb_redisbloom *bf);
/* Keys the last add reported new (up to the failure, when it failed). */
long long lb_bf_last_new(const lb_redisbloom *bf);

/* The server's error text of the last failed call ("" when the failure was
 * not a server reply).  Valid until the next call on bf. */
const char *lb_bf_reply_text(const lb_redisbloom *bf);

/* The operations as step machines (op.h), as bitmap.h's: add or test of n
 * items, or reset, with the BF.INFO check before the first write on a
 * connection and the TYPE round trip after an all-false test of a key of
 * unknown type; the blocking calls below run the same machines with
 * lb_op_run.  After FULL, lb_bf_full_processed and lb_bf_last_new are those
 * of the operation.  lb_bf_wire_begin takes 1..chunk_keys items. */
#define LB_BF_OP_ADD 1
#define LB_BF_OP_TEST 2
#define LB_BF_OP_RESET 3
lb_redis_status lb_bf_begin(lb_redisbloom *bf, int kind, const lb_key *keys, size_t n,
                            uint8_t *out, lb_op **op);
lb_redis_status lb_bf_wire_begin(lb_redisbloom *bf, int kind, const lb_key *keys, size_t n,
                                 uint8_t *out, lb_op **op);

/* Create the filter now (even with no_create): the check above, then
 * BF.RESERVE key e c (EXPANSION x | NONSCALING) when the key is missing.
 * *created (may be NULL) = 1 when this call created the filter, 0 when a
 * matching one was there (MISMATCH when it does not match). */
lb_redis_status lb_bf_reserve(lb_redisbloom *bf, int *created);

/* Add n items (none empty; n = 0 sends nothing), at most chunk_keys per
 * BF.INSERT.  was_new (may be NULL) receives 1 per item the module reported
 * new.  On FULL, was_new holds the answers of the items before the failing
 * one. */
lb_redis_status lb_bf_add(lb_redisbloom *bf, const lb_key *keys, size_t n, uint8_t *was_new);

/* Test n items: present[i] = 1 when the module says item i may be there. */
lb_redis_status lb_bf_test(lb_redisbloom *bf, const lb_key *keys, size_t n, uint8_t *present);

/* DEL the key; the next add checks and creates it again (no ttl, not no_create:
 * BF.RESERVE in the same round trip, see above). */
lb_redis_status lb_bf_reset(lb_redisbloom *bf);

/* NOTFOUND when the key does not exist, WRONGTYPE for another type. */
lb_redis_status lb_bf_info_get(lb_redisbloom *bf, lb_bf_info *out);

/* BF.CARD (0 for a missing key).  A module without BF.CARD (before v2.4.4):
 * BF.INFO's "Number of items inserted" instead. */
lb_redis_status lb_bf_card(lb_redisbloom *bf, uint64_t *out);
/* The same as a step machine (op.h), *out filled when it ends. */
lb_op *lb_bf_card_begin(lb_redisbloom *bf, uint64_t *out);

/* One step of BF.SCANDUMP: iter 0 starts.  *next = 0 when the dump is
 * complete (then *data is NULL); otherwise the chunk to replay with
 * BF.LOADCHUNK key *next data.  *data is valid until the next call on bf.
 * iter 0 of a missing key: NOTFOUND. */
lb_redis_status lb_bf_scandump(lb_redisbloom *bf, long long iter, long long *next,
                               const char **data, size_t *len);

/* A whole dump, step by step, bounded so that no server can make it run
 * forever or grow without end (a server whose iterator keeps changing:
 * iter+1, or a 1,2,1,2 cycle, or empty chunks):
 *   - the first step asks BF.INFO (NOTFOUND / WRONGTYPE as lb_bf_info_get)
 *     and fixes the bounds from what it says: at most
 *       max_bytes = 1 MiB + 4 * Size + 16 * the items all its sub-filters
 *                   can hold (Capacity * (1 + e + ... + e^(filters-1)),
 *                   e = Expansion rate, 1 when non-scaling)
 *     bytes in all (the module's Size is bytes, fakeredis's is items: the
 *     bound covers both), and at most 64 + 4 * filters + max_bytes / 4096
 *     chunks;
 *   - an iterator that was seen before (a cycle, or the one just sent) is a
 *     protocol error, as is going over a bound.
 * A filter that more than doubles while being dumped may hit the bound. */
typedef struct {
    uint64_t bytes, max_bytes;
    size_t chunks, max_chunks;
    long long iter;        /* the iterator to send next; 0 before the first step */
    long long *seen;       /* open-addressing set of the iterators seen */
    size_t seen_n, seen_cap;
    int started, done;
} lb_bf_dump;

void lb_bf_dump_init(lb_bf_dump *d);
void lb_bf_dump_free(lb_bf_dump *d);
/* One step.  OK with *done = 1 at the end (no chunk then), or OK
 * with the next chunk: iter its iterator, data and len its bytes (valid until
 * the next call on bf).  After an error, the walk is over. */
lb_redis_status lb_bf_dump_step(lb_redisbloom *bf, lb_bf_dump *d, int *done, long long *iter,
                                const char **data, size_t *len);

typedef struct {
    long long iter;
    const void *data;
    size_t len;
} lb_bf_chunk;

/* Replace the filter at key by the one the chunks describe (the steps of a
 * scandump, in order): they are loaded into a temporary key in the key's
 * Redis Cluster slot (given a 10-minute expiry in case this process dies),
 * then RENAMEd over key in one step, so readers see the old filter or the
 * new one, never half of it.  Round trips of at most 8 MiB of chunks.  On
 * failure the temporary key is deleted (best effort) and key is unchanged.
 * Unless replace, a key of another type is refused first (one TYPE round
 * trip; WRONGTYPE, nothing written).  The restored filter keeps the dump's
 * parameters, and later writes are not compared against them. */
lb_redis_status lb_bf_restore(lb_redisbloom *bf, const lb_bf_chunk *chunks, size_t n,
                              int replace);

#endif
