/* slots.h: Redis Cluster key slots and hash tags, and the names this client
 * derives from a user's key so that they share its slot.  Pure C, no I/O.
 *
 * The hash-tag rule is written here once: the tag of a key is the bytes
 * between its first '{' and the first '}' after it, if there is at least one
 * byte between them; a key without a tag hashes whole. */
#ifndef LB_REDIS_SLOTS_H
#define LB_REDIS_SLOTS_H

#include <stddef.h>
#include <stdint.h>

#define LB_CLUSTER_SLOTS 16384

/* The hash tag of key[0..len): 1 with its offset and length, else 0. */
int lb_hash_tag(const void *key, size_t len, size_t *off, size_t *taglen);

/* CRC16 (XMODEM), as the Redis Cluster specification gives it. */
uint16_t lb_cluster_crc16(const void *data, size_t len);
/* The hash slot of a key: CRC16 of its hash tag when it has one, else of the
 * whole key, modulo 16384. */
unsigned lb_cluster_key_slot(const void *key, size_t len);

/* Which argument of a command is its first key (name: the command name):
 * 1 for most, 2 for BITOP (BITOP op destkey key...), OBJECT and MEMORY
 * (OBJECT ENCODING key), 0 for the keyless ones (INFO, PING, ROLE, WAIT,
 * CLUSTER, ...). */
int lb_command_key_index(const char *name, size_t len);

/* Copy key (binary-safe, keylen >= 1) into *key_out, and build into *base_out
 * the prefix of the names that must land in key's Redis Cluster slot: key
 * when it has a hash tag; else "{" key "}" when it holds no '}'; else (a '}'
 * and no tag: no tag can be the key) "{" T "}" key, T the four bytes of
 * '@'..'O' whose slot is the key's (see bitmap.h).
 * Both malloc'd.  0, or -1 when out of memory (then both are NULL). */
int lb_redis_slot_names(const void *key, size_t keylen, char **key_out, char **base_out,
                        size_t *baselen);

/* A temporary key name unique to this call: base ":" what ":" pid ":" seq
 * ":" time, in base's slot.  malloc'd (its length in *len), or NULL when out
 * of memory. */
char *lb_redis_temp_name(const char *base, size_t baselen, const char *what, unsigned long seq,
                         size_t *len);

#endif
