/* sharded.h: a sharded RedisFilter: one logical Bloom filter spread over
 * S Redis bitmaps ("shards") whose names carry distinct hash tags, so that on
 * a Redis Cluster their memory and their traffic spread over the primaries.
 * Pure C, on top of bitmap.h (each shard is an lb_bitmap, with its
 * own meta key, ownership checks and parts), or of redisbloom (each shard a
 * RedisBloom filter, see lb_sharded_new_bf).
 *
 * A key lives in one shard, chosen from its hash:
 *     shard = fastrange(mix64(h1 + h2 * 0x9E3779B97F4A7C15), S)
 * (a point of the index walk that no probe uses), and its k bits are set in
 * that shard as in any RedisFilter of the shard's geometry.  So a key costs one
 * node, and a batch one round trip per shard, the shards' round trips running
 * at the same time: each shard has its own connection (shard 0 the caller's,
 * the others made alike), and a batch spanning several shards runs their step
 * machines at once on the calling thread (lanes.h: one poll over
 * their sockets, lanes.h); no thread is started.
 *
 * Names, for a filter key K and shard i (0 <= i < S):
 *     shard i:  "{" T ":" i "}"      T = K when K holds no '{' or '}', else the
 *                                    16 hex digits of K's 64-bit xxh3
 *     record:   "{" T "}:shards"     "ling_bloom:v=1;shards=S;m=<m>;k=<k>;hash=<h>"
 * (m, k, hash: each shard's geometry; a blocked filter's record is version 2,
 * see lb_sharded_set_layout).  The record is claimed (SET NX) and
 * compared before the first command, like a bitmap's meta key: another
 * process that opens K with another shard count or geometry gets
 * LB_REDIS_ERR_MISMATCH, and RedisFilter.open(url, K) reads the geometry back
 * from it.
 *
 * Sizing (by the caller): S shards for n keys at rate p are each sized for
 * n/S + 3*sqrt(n/S) keys, so that the fullest shard (the keys spread
 * binomially) still keeps p.
 *
 * Errors: the status of the first shard (lowest index) that failed, its text
 * copied to the caller's connection.  A shard that fails ends alone: the
 * others' round trips run on, and shards that succeeded keep what they did
 * (as chunks of a RedisFilter batch do).  Not thread-safe (one caller at
 * a time, as any lb_redis). */
#ifndef LB_REDIS_SHARDED_H
#define LB_REDIS_SHARDED_H

#include "bitmap.h"
#include "op.h"
#include "redisbloom.h"

#define LB_SHARDED_MAX_SHARDS 1024

typedef struct lb_sharded lb_sharded;

/* S shards (2..LB_SHARDED_MAX_SHARDS) of geometry g at key (not empty) over conn
 * (not owned; shard 0 uses it, the others get connections like it, owned).
 * Nothing is sent.  ARG (message in conn), NOMEM. */
lb_redis_status lb_sharded_new(lb_redis *conn, const void *key, size_t keylen,
                                     const lb_geometry *g, uint32_t shards,
                                     lb_sharded **out);
/* The same over RedisBloom filters (RedisBloomFilter(shards=N)): S keys, each a
 * filter of shard_opt (its capacity the caller's share of the whole), the key's
 * shard picked from its xxh3-mix hash.  The record holds the shard count and
 * the options ("...;redisbloom;capacity=C;error_rate=P;expansion=X"), compared
 * to the letter.  lb_sharded_bitcount then sums BF.CARD. */
lb_redis_status lb_sharded_new_bf(lb_redis *conn, const void *key, size_t keylen,
                                        const lb_bf_options *shard_opt, uint32_t shards,
                                        lb_sharded **out);
void lb_sharded_free(lb_sharded *sh);
/* A forked child whose parent was in a call: close this process's copies of
 * the owned connections' sockets, free nothing (see lb_redis_abandon). */
void lb_sharded_abandon(lb_sharded *sh);

uint32_t lb_sharded_count(const lb_sharded *sh);
/* A RedisBloom shard (NULL for a bitmap filter's, or i out of range). */
lb_redisbloom *lb_sharded_bf(const lb_sharded *sh, uint32_t i);
lb_bitmap *lb_sharded_shard(const lb_sharded *sh, uint32_t i);
/* The shard of a hashed key. */
uint32_t lb_sharded_pick(lb_hash_pair h, uint32_t shards);
/* The record's name (as lb_bitmap_key_name: up to cap bytes, returns the length). */
size_t lb_sharded_record_name(const lb_sharded *sh, char *buf, size_t cap);

/* The shards' layout (lb_bitmap_set_layout on each), before the first
 * call; bitmap shards only.  A blocked filter's record is
 *     "ling_bloom:v=2;shards=S;m=<m>;k=<k>;hash=xxh3-block;layout=blocked"
 * and its keys are spread by lb_sharded_pick of their lb_hash_blocked
 * pair (the pair its shard places them with).  ARG (message in conn[0]). */
lb_redis_status lb_sharded_set_layout(lb_sharded *sh, lb_bitmap_layout layout);

void lb_sharded_set_mode(lb_sharded *sh, lb_bitmap_mode mode);
void lb_sharded_set_chunk_keys(lb_sharded *sh, size_t chunk_keys);

/* As lb_bitmap_add / _test / _reset / _bitcount, over the shards. */
lb_redis_status lb_sharded_add(lb_sharded *sh, const lb_key *keys, size_t n,
                                     uint8_t *was_new);
lb_redis_status lb_sharded_test(lb_sharded *sh, const lb_key *keys, size_t n,
                                      uint8_t *present);
lb_redis_status lb_sharded_reset(lb_sharded *sh);
lb_redis_status lb_sharded_bitcount(lb_sharded *sh, uint64_t *count);

/* The asyncio transport's form of add, test (n keys) and reset (keys NULL):
 * the same machines, run in stages, each stage's step machines (op.h) at
 * once, each on its shard's client (op->conn, a wire client or a cluster
 * client whose nodes are):
 *
 *     lb_sharded_wire_begin(sh, kind, keys, n, out)    LB_BITMAP_OP_* kinds
 *     while ((k = lb_sharded_wire_stage(sh, ops, shard_of)) > 0)
 *         run ops[0..k) to their end (op.h's lb_op_wire_*; ops[j] is on
 *         shard shard_of[j]'s client, lb_sharded_conn)
 *     st = lb_sharded_wire_end(sh)
 *
 * The first stage claims or checks the record when conn[0] has not (as the
 * blocking calls do first); the next runs every shard concerned.  End: the
 * status of the first shard (lowest index) that failed, its text on
 * conn[0]; out filled in the keys' order.  keys and out live until the end.
 * ops and shard_of hold LB_SHARDED_MAX_SHARDS entries. */
lb_redis_status lb_sharded_wire_begin(lb_sharded *sh, int kind, const lb_key *keys, size_t n,
                                      uint8_t *out);
size_t lb_sharded_wire_stage(lb_sharded *sh, lb_op **ops, uint32_t *shard_of);
lb_redis_status lb_sharded_wire_end(lb_sharded *sh);
/* Shard i's client; replace it (the shard's bitmap or RedisBloom filter
 * follows; the old one is freed, but conn[0], the caller's). */
lb_redis *lb_sharded_conn(const lb_sharded *sh, uint32_t i);
void lb_sharded_set_conn(lb_sharded *sh, uint32_t i, lb_redis *conn);

/* The record at key: OK with *shards, *g and *layout (layout may be NULL),
 * NOTFOUND when there is none, MISMATCH when it is not a record this version
 * reads, or a connection error. */
lb_redis_status lb_sharded_read_record(lb_redis *conn, const void *key, size_t keylen,
                                             uint32_t *shards, lb_geometry *g,
                                             lb_bitmap_layout *layout);

#endif
