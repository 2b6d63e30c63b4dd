/* slots.c: see slots.h. */
#define _POSIX_C_SOURCE 200809L
#include "slots.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

int lb_hash_tag(const void *key, size_t len, size_t *off, size_t *taglen)
{
    const char *k = key;
    const char *open = len ? memchr(k, '{', len) : NULL;
    if (!open)
        return 0;
    size_t rest = len - (size_t)(open - k) - 1;
    const char *close = rest ? memchr(open + 1, '}', rest) : NULL;
    if (!close || close == open + 1)
        return 0;
    *off = (size_t)(open + 1 - k);
    *taglen = (size_t)(close - open - 1);
    return 1;
}

uint16_t lb_cluster_crc16(const void *data, size_t len)
{
    /* CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0. */
    const unsigned char *p = data;
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned lb_cluster_key_slot(const void *key, size_t len)
{
    size_t off, tl;
    if (lb_hash_tag(key, len, &off, &tl))
        return lb_cluster_crc16((const char *)key + off, tl) & (LB_CLUSTER_SLOTS - 1);
    return lb_cluster_crc16(key, len) & (LB_CLUSTER_SLOTS - 1);
}

int lb_command_key_index(const char *name, size_t len)
{
    static const char *const keyless[] = {"INFO", "PING", "ROLE", "WAIT", "CLUSTER", "ECHO",
                                          "TIME", "DBSIZE", "ASKING", "READONLY", "SELECT",
                                          "AUTH", "HELLO", "COMMAND", "CONFIG", NULL};
    for (const char *const *n = keyless; *n; n++)
        if (strlen(*n) == len && strncasecmp(*n, name, len) == 0)
            return 0;
    if ((len == 5 && strncasecmp(name, "BITOP", 5) == 0) ||
        (len == 6 && strncasecmp(name, "OBJECT", 6) == 0) ||
        (len == 6 && strncasecmp(name, "MEMORY", 6) == 0))
        return 2;
    return 1;
}

/* A tag of 4 bytes '@'..'O' (16 free bits: 0x40 | a nibble each) whose slot is
 * slot, into tag[0..4): the smallest such, by the nibbles read as a number.
 * Every slot has one (tests/c: test_cluster_map checks all 16384). */
static int slot_tag(unsigned slot, char tag[4])
{
    for (unsigned v = 0; v < 65536; v++) {
        for (int i = 0; i < 4; i++)
            tag[i] = (char)(0x40 | ((v >> (12 - 4 * i)) & 15));
        if ((lb_cluster_crc16(tag, 4) & (LB_CLUSTER_SLOTS - 1)) == slot)
            return 0;
    }
    return -1;
}

int lb_redis_slot_names(const void *key, size_t keylen, char **key_out, char **base_out,
                        size_t *baselen)
{
    size_t off, tl;
    char tag[4];
    /* 0: key; 1: "{" key "}"; 2: "{" tag "}" key */
    int how = lb_hash_tag(key, keylen, &off, &tl) ? 0 : !memchr(key, '}', keylen) ? 1 : 2;
    if (how == 2 && slot_tag(lb_cluster_key_slot(key, keylen), tag) < 0)
        how = 0; /* not reached: every slot has a tag */
    size_t blen = keylen + (how == 1 ? 2 : how == 2 ? 6 : 0);
    char *k = malloc(keylen);
    char *base = malloc(blen);
    *key_out = *base_out = NULL;
    if (!k || !base) {
        free(k);
        free(base);
        return -1;
    }
    memcpy(k, key, keylen);
    if (how == 1) {
        base[0] = '{';
        memcpy(base + 1, key, keylen);
        base[keylen + 1] = '}';
    } else if (how == 2) {
        base[0] = '{';
        memcpy(base + 1, tag, 4);
        base[5] = '}';
        memcpy(base + 6, key, keylen);
    } else {
        memcpy(base, key, keylen);
    }
    *key_out = k;
    *base_out = base;
    *baselen = blen;
    return 0;
}

char *lb_redis_temp_name(const char *base, size_t baselen, const char *what, unsigned long seq,
                         size_t *len)
{
    char *tmp = malloc(baselen + strlen(what) + 96);
    if (!tmp)
        return NULL;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    memcpy(tmp, base, baselen);
    *len = baselen + (size_t)sprintf(tmp + baselen, ":%s:%ld:%lu:%lld%09ld", what, (long)getpid(),
                                     seq, (long long)ts.tv_sec, ts.tv_nsec);
    return tmp;
}
