/* fuzz_url.c: Redis URLs (lb_redis_config_from_url in csrc/redis/config.c; the
 * target links that file alone, with status.c).
 *
 * The input is the URL (cut at its first NUL, as a C string from Python is:
 * the binding refuses embedded NULs before).  Oracles beyond the sanitizers:
 *   - on success the settings are in range (port 0..65535, db >= 0, timeouts
 *     >= 0) and every string is a NUL-free C string; a unix:// URL gives a
 *     path that starts with '/'; parsing the same URL again gives the same
 *     settings; lb_redis_config_copy copies them;
 *   - on failure the status is URL, TLS or NOMEM, the message is not empty,
 *     and the config is left empty (as config.h says);
 *   - a tiny error buffer is cut, never overrun (ASan watches it). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"

#define CHECK(c)              \
    do {                      \
        if (!(c))             \
            __builtin_trap(); \
    } while (0)

static int same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static int empty(const lb_redis_config *c)
{
    return !c->host && !c->unix_path && !c->username && !c->password && c->port == 0 &&
           c->db == 0 && c->connect_timeout_ms == 0 && c->timeout_ms == 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t len)
{
    char *url = malloc(len + 1);
    if (!url)
        return 0;
    memcpy(url, data, len);
    url[len] = '\0';

    lb_redis_config cfg, again;
    char err[256];
    lb_redis_status st = lb_redis_config_from_url(&cfg, url, err, sizeof err);
    if (st == LB_REDIS_OK) {
        CHECK(cfg.port >= 0 && cfg.port <= 65535);
        CHECK(cfg.db >= 0 && cfg.timeout_ms >= 0 && cfg.connect_timeout_ms >= 0);
        if (cfg.unix_path)
            CHECK(cfg.unix_path[0] == '/' && !cfg.host && cfg.port == 0);
        CHECK(!cfg.host || cfg.host[0]);
        CHECK(!cfg.username || cfg.username[0]);
        CHECK(!cfg.password || cfg.password[0]);
        CHECK(lb_redis_config_from_url(&again, url, NULL, 0) == LB_REDIS_OK);
        CHECK(same_str(cfg.host, again.host) && same_str(cfg.unix_path, again.unix_path) &&
              same_str(cfg.username, again.username) && same_str(cfg.password, again.password) &&
              cfg.port == again.port && cfg.db == again.db &&
              cfg.timeout_ms == again.timeout_ms &&
              cfg.connect_timeout_ms == again.connect_timeout_ms);
        lb_redis_config_free(&again);
        lb_redis_config copy;
        CHECK(lb_redis_config_copy(&copy, &cfg) == LB_REDIS_OK); /* what a client keeps */
        CHECK(same_str(cfg.host, copy.host) && same_str(cfg.unix_path, copy.unix_path) &&
              same_str(cfg.sentinels, copy.sentinels) &&
              same_str(cfg.cluster_nodes, copy.cluster_nodes) && cfg.port == copy.port &&
              cfg.db == copy.db && (!copy.host || copy.host != cfg.host));
        lb_redis_config_free(&copy);
    } else {
        CHECK(st == LB_REDIS_ERR_URL || st == LB_REDIS_ERR_TLS || st == LB_REDIS_ERR_NOMEM);
        CHECK(err[0] != '\0' && memchr(err, '\0', sizeof err));
        CHECK(empty(&cfg));
        /* A one-byte and a short buffer: cut, NUL-terminated. */
        char tiny[8];
        memset(tiny, 'x', sizeof tiny);
        CHECK(lb_redis_config_from_url(&again, url, tiny, 1) == st && tiny[0] == '\0' &&
              tiny[1] == 'x');
        CHECK(lb_redis_config_from_url(&again, url, tiny, 5) == st && memchr(tiny, '\0', 5) &&
              tiny[5] == 'x');
        CHECK(empty(&again));
    }
    lb_redis_config_free(&cfg);
    CHECK(empty(&cfg));
    free(url);
    return 0;
}
