/* test_config.c: URLs and options (csrc/redis/config.c), no server.
 * Run: make -C tests/c test   (or: tests/c/test_config [name-filter]) */
#include "redis_harness.h"

#include "config.h"

static void test_url_good(void)
{
    lb_redis_config c;
    char err[256];

    CHECK(lb_redis_config_from_url(&c, "redis://localhost", err, sizeof err) == LB_REDIS_OK);
    CHECK(c.host && strcmp(c.host, "localhost") == 0 && c.port == 0 && c.db == 0);
    CHECK(!c.username && !c.password && !c.unix_path);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "redis://h.example:6380/3", err, sizeof err) == 0);
    CHECK(strcmp(c.host, "h.example") == 0 && c.port == 6380 && c.db == 3);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "REDIS://:s%40cr%3At@127.0.0.1:7000/0", err, sizeof err) == 0);
    CHECK(!c.username && c.password && strcmp(c.password, "s@cr:t") == 0 && c.port == 7000);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "redis://al%20ice:p%2Fw@host/12", err, sizeof err) == 0);
    CHECK(c.username && strcmp(c.username, "al ice") == 0);
    CHECK(c.password && strcmp(c.password, "p/w") == 0 && c.db == 12);
    lb_redis_config_free(&c);

    /* username only, as redis-py; '@' inside the password (last '@' splits) */
    CHECK(lb_redis_config_from_url(&c, "redis://bob@host", err, sizeof err) == 0);
    CHECK(c.username && strcmp(c.username, "bob") == 0 && !c.password);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, "redis://u:p@ss@host:1", err, sizeof err) == 0);
    CHECK(strcmp(c.password, "p@ss") == 0 && strcmp(c.host, "host") == 0 && c.port == 1);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "redis://[::1]:6380/2", err, sizeof err) == 0);
    CHECK(strcmp(c.host, "::1") == 0 && c.port == 6380 && c.db == 2);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, "redis://[fe80::1%25eth0]", err, sizeof err) == 0);
    CHECK(c.host && strcmp(c.host, "fe80::1%eth0") == 0 && c.port == 0);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "redis://", err, sizeof err) == 0);
    CHECK(!c.host && c.port == 0);
    lb_redis_config_free(&c);

    /* query options win over the URL's fields */
    CHECK(lb_redis_config_from_url(&c,
                                   "redis://u:p@h/1?db=4&password=x%26y&socket_timeout=0.25"
                                   "&socket_connect_timeout=2",
                                   err, sizeof err) == 0);
    CHECK(c.db == 4 && strcmp(c.password, "x&y") == 0 && c.timeout_ms == 250 &&
          c.connect_timeout_ms == 2000);
    lb_redis_config_free(&c);

    /* TLS: rediss:// and redis-py's ssl_* query options; verification on by default */
    CHECK(lb_redis_config_from_url(&c, "rediss://h:6380", err, sizeof err) == 0);
    CHECK(c.tls == 1 && c.port == 6380 && c.tls_cert_reqs == LB_REDIS_CERT_REQUIRED &&
          c.tls_check_hostname == 0 && !c.tls_ca_certs);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c,
                                   "rediss://h?ssl_cert_reqs=none&ssl_check_hostname=false"
                                   "&ssl_ca_certs=/a%20b/ca.pem&ssl_certfile=/c.pem"
                                   "&ssl_keyfile=/k.pem&ssl_ca_path=/cas",
                                   err, sizeof err) == 0);
    CHECK(c.tls == 1 && c.tls_cert_reqs == LB_REDIS_CERT_NONE && c.tls_check_hostname == 2);
    CHECK(strcmp(c.tls_ca_certs, "/a b/ca.pem") == 0 && strcmp(c.tls_certfile, "/c.pem") == 0 &&
          strcmp(c.tls_keyfile, "/k.pem") == 0 && strcmp(c.tls_ca_path, "/cas") == 0);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, "redis://h", err, sizeof err) == 0 && c.tls == 0);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "unix:///tmp/r.sock?db=2&password=pw", err, sizeof err) == 0);
    CHECK(c.unix_path && strcmp(c.unix_path, "/tmp/r.sock") == 0 && c.db == 2);
    CHECK(strcmp(c.password, "pw") == 0 && !c.host);
    lb_redis_config_free(&c);

    CHECK(lb_redis_config_from_url(&c, "unix://user:pw@/var/run/my%20redis.sock", err, sizeof err) == 0);
    CHECK(strcmp(c.unix_path, "/var/run/my redis.sock") == 0);
    CHECK(strcmp(c.username, "user") == 0 && strcmp(c.password, "pw") == 0);
    lb_redis_config_free(&c);
}

static void expect_bad(const char *url, lb_redis_status want, const char *needle)
{
    lb_redis_config c;
    char err[256] = "";
    lb_redis_status st = lb_redis_config_from_url(&c, url, err, sizeof err);
    CHECK_MSG(st == want, "%s -> %s (%s)", url, lb_redis_status_name(st), err);
    CHECK_MSG(strstr(err, needle) != NULL, "%s: message '%s' lacks '%s'", url, err, needle);
    CHECK(c.host == NULL && c.password == NULL && c.unix_path == NULL);
    lb_redis_config_free(&c);
}

static void test_url_bad(void)
{
    expect_bad("rediss://h:6380?ssl_cert_reqs=maybe", LB_REDIS_ERR_URL, "ssl_cert_reqs");
    expect_bad("rediss://h:6380?ssl_check_hostname=perhaps", LB_REDIS_ERR_URL,
               "ssl_check_hostname");
    expect_bad("localhost:6379", LB_REDIS_ERR_URL, "expected redis://");
    expect_bad("http://h", LB_REDIS_ERR_URL, "unsupported URL scheme 'http://'");
    expect_bad("redis://h:0", LB_REDIS_ERR_URL, "invalid port '0'");
    expect_bad("redis://h:65536", LB_REDIS_ERR_URL, "invalid port");
    expect_bad("redis://h:abc", LB_REDIS_ERR_URL, "invalid port 'abc'");
    expect_bad("redis://h:", LB_REDIS_ERR_URL, "invalid port ''");
    expect_bad("redis://h/abc", LB_REDIS_ERR_URL, "invalid database 'abc'");
    expect_bad("redis://h/-1", LB_REDIS_ERR_URL, "invalid database");
    expect_bad("redis://h/99999999999", LB_REDIS_ERR_URL, "invalid database");
    expect_bad("redis://::1:6379", LB_REDIS_ERR_URL, "brackets");
    expect_bad("redis://[::1:6379", LB_REDIS_ERR_URL, "without its ']'");
    expect_bad("redis://[::1]x", LB_REDIS_ERR_URL, "after ']'");
    expect_bad("redis://[]:1", LB_REDIS_ERR_URL, "empty IPv6");
    expect_bad("redis://u:p%zz@h", LB_REDIS_ERR_URL, "password");
    expect_bad("redis://u%2@h", LB_REDIS_ERR_URL, "user name");
    expect_bad("redis://u:p%00@h", LB_REDIS_ERR_URL, "password");
    expect_bad("redis://h?db=x", LB_REDIS_ERR_URL, "db='x'");
    expect_bad("redis://h?db", LB_REDIS_ERR_URL, "has no value");
    expect_bad("redis://h?frobnicate=1", LB_REDIS_ERR_URL, "unknown URL option 'frobnicate'");
    expect_bad("redis://h?socket_timeout=-1", LB_REDIS_ERR_URL, "socket_timeout");
    expect_bad("redis://h?socket_timeout=nan", LB_REDIS_ERR_URL, "socket_timeout");
    expect_bad("redis://h/0#frag", LB_REDIS_ERR_URL, "'#'");
    expect_bad("redis://h st", LB_REDIS_ERR_URL, "space");
    expect_bad("unix://host/tmp/s", LB_REDIS_ERR_URL, "must not name a host");
    expect_bad("unix://", LB_REDIS_ERR_URL, "needs a socket path");
    expect_bad("unix:///", LB_REDIS_ERR_URL, "needs a socket path");
    expect_bad("unix:///tmp/s%4", LB_REDIS_ERR_URL, "socket path");
    /* the password never appears in an error message */
    lb_redis_config c;
    char err[256];
    lb_redis_config_from_url(&c, "redis://u:hunter2@h:99999", err, sizeof err);
    CHECK(strstr(err, "hunter2") == NULL);
    lb_redis_config_free(&c);
    CHECK(lb_redis_config_from_url(&c, NULL, err, sizeof err) == LB_REDIS_ERR_URL);
}

/* ------------------------------------------------------------ connection */

static const t_case cases[] = {
    {"url_good", test_url_good},
    {"url_bad", test_url_bad},
};

T_MAIN(cases, 0)
