/* tls.c: see tls.h. */
#define _POSIX_C_SOURCE 200809L
#include "tls.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LB_NO_TLS
/* Built without OpenSSL (setup.py found no openssl/ssl.h and said so): every TLS session
 * fails at once with the reason, which the connect error carries to Python. */
#define LB_NO_TLS_WHY "rediss:// is unavailable: this ling_bloom was built without OpenSSL " \
    "(its headers were missing when it was compiled); install them (Debian/Ubuntu: libssl-dev, " \
    "RHEL/Fedora: openssl-devel) and reinstall ling_bloom, or use a wheel, which has TLS"

struct lb_tls {
    int unused;
};

lb_tls *lb_tls_new(int fd, const lb_tls_options *o, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", LB_NO_TLS_WHY);
    return NULL;
}

int lb_tls_handshake(lb_tls *t, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", LB_NO_TLS_WHY);
    return LB_TLS_ERROR;
}

ssize_t lb_tls_write(lb_tls *t, const void *buf, size_t len, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", LB_NO_TLS_WHY);
    return LB_TLS_ERROR;
}

ssize_t lb_tls_read(lb_tls *t, void *buf, size_t cap, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s", LB_NO_TLS_WHY);
    return LB_TLS_ERROR;
}

size_t lb_tls_pending(const lb_tls *t)
{
    return 0;
}

void lb_tls_free(lb_tls *t)
{
    free(t);
}

#else /* OpenSSL */

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

struct lb_tls {
    SSL_CTX *ctx;
    SSL *ssl;
};

/* The first queued OpenSSL error as text (and empty the queue). */
static void ossl_err(char *err, size_t errlen, const char *what)
{
    unsigned long e = ERR_get_error();
    char buf[256] = "";
    if (e)
        ERR_error_string_n(e, buf, sizeof buf);
    ERR_clear_error();
    snprintf(err, errlen, "%s%s%s", what, buf[0] ? ": " : "", buf);
}

static int is_ip(const char *h)
{
    unsigned char a[16];
    return inet_pton(AF_INET, h, a) == 1 || inet_pton(AF_INET6, h, a) == 1;
}

lb_tls *lb_tls_new(int fd, const lb_tls_options *o, char *err, size_t errlen)
{
    lb_tls *t = calloc(1, sizeof *t);
    if (!t) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    ERR_clear_error();
    t->ctx = SSL_CTX_new(TLS_client_method());
    if (!t->ctx) {
        ossl_err(err, errlen, "cannot create a TLS context");
        goto fail;
    }
    SSL_CTX_set_min_proto_version(t->ctx, TLS1_2_VERSION);
    SSL_CTX_set_mode(t->ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    int verify = o->cert_reqs != LB_TLS_CERT_NONE;
    SSL_CTX_set_verify(t->ctx, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if (verify) {
        if (o->ca_certs || o->ca_path) {
            if (SSL_CTX_load_verify_locations(t->ctx, o->ca_certs, o->ca_path) != 1) {
                char what[300];
                snprintf(what, sizeof what, "cannot load the CA certificates from %s",
                         o->ca_certs ? o->ca_certs : o->ca_path);
                ossl_err(err, errlen, what);
                goto fail;
            }
        } else if (SSL_CTX_set_default_verify_paths(t->ctx) != 1) {
            ossl_err(err, errlen, "cannot load the system's CA certificates");
            goto fail;
        }
    }
    if (o->certfile) {
        const char *key = o->keyfile ? o->keyfile : o->certfile;
        char what[300];
        if (SSL_CTX_use_certificate_chain_file(t->ctx, o->certfile) != 1) {
            snprintf(what, sizeof what, "cannot load the client certificate %s", o->certfile);
            ossl_err(err, errlen, what);
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(t->ctx, key, SSL_FILETYPE_PEM) != 1) {
            snprintf(what, sizeof what, "cannot load the private key %s", key);
            ossl_err(err, errlen, what);
            goto fail;
        }
        if (SSL_CTX_check_private_key(t->ctx) != 1) {
            snprintf(what, sizeof what, "the private key %s does not match the certificate %s",
                     key, o->certfile);
            ossl_err(err, errlen, what);
            goto fail;
        }
    }
    t->ssl = SSL_new(t->ctx);
    if (!t->ssl || SSL_set_fd(t->ssl, fd) != 1) {
        ossl_err(err, errlen, "cannot create a TLS session");
        goto fail;
    }
    const char *host = o->host ? o->host : "localhost";
    int ip = is_ip(host);
    if (!ip)
        SSL_set_tlsext_host_name(t->ssl, host); /* SNI: names only, never addresses */
    if (verify && o->check_hostname) {
        X509_VERIFY_PARAM *vp = SSL_get0_param(t->ssl);
        int ok = ip ? X509_VERIFY_PARAM_set1_ip_asc(vp, host) : SSL_set1_host(t->ssl, host);
        if (ok != 1) {
            ossl_err(err, errlen, "cannot set up host name verification");
            goto fail;
        }
        if (!ip)
            X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
    }
    SSL_set_connect_state(t->ssl);
    return t;
fail:
    lb_tls_free(t);
    return NULL;
}

/* Map an SSL_* call's result. */
static int io_result(lb_tls *t, int rc, char *err, size_t errlen, const char *what)
{
    int e = SSL_get_error(t->ssl, rc);
    switch (e) {
    case SSL_ERROR_WANT_READ:
        return LB_TLS_WANT_READ;
    case SSL_ERROR_WANT_WRITE:
        return LB_TLS_WANT_WRITE;
    case SSL_ERROR_ZERO_RETURN:
        return 0;
    case SSL_ERROR_SYSCALL:
        if (ERR_peek_error() == 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
                return LB_TLS_WANT_READ;
            if (errno == 0)
                return 0; /* EOF without close_notify: the peer closed */
            snprintf(err, errlen, "%s: %s", what, strerror(errno));
            return LB_TLS_ERROR;
        }
        /* fall through */
    default:
        ossl_err(err, errlen, what);
        return LB_TLS_ERROR;
    }
}

int lb_tls_handshake(lb_tls *t, char *err, size_t errlen)
{
    ERR_clear_error();
    errno = 0;
    int rc = SSL_do_handshake(t->ssl);
    if (rc == 1)
        return 0;
    long vr = SSL_get_verify_result(t->ssl);
    int st = io_result(t, rc, err, errlen, "TLS handshake failed");
    if (st == LB_TLS_WANT_READ || st == LB_TLS_WANT_WRITE)
        return st;
    if (vr != X509_V_OK) {
        ERR_clear_error();
        snprintf(err, errlen, "TLS handshake failed: certificate verify failed: %s",
                 X509_verify_cert_error_string(vr));
    } else if (st == 0) {
        snprintf(err, errlen, "TLS handshake failed: the server closed the connection "
                              "(does it speak TLS on this port? does it want a client "
                              "certificate?)");
    } else if (strstr(err, "wrong version number") || strstr(err, "packet length too long") ||
               strstr(err, "record layer failure")) {
        size_t n = strlen(err);
        snprintf(err + n, errlen > n ? errlen - n : 0,
                 " (the server does not speak TLS on this port?)");
    }
    return LB_TLS_ERROR;
}

ssize_t lb_tls_write(lb_tls *t, const void *buf, size_t len, char *err, size_t errlen)
{
    size_t n = 0;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_write_ex(t->ssl, buf, len, &n);
    if (rc == 1)
        return (ssize_t)n;
    int st = io_result(t, rc, err, errlen, "TLS write failed");
    if (st == 0) {
        snprintf(err, errlen, "TLS write failed: the connection was closed");
        return LB_TLS_ERROR;
    }
    return st;
}

ssize_t lb_tls_read(lb_tls *t, void *buf, size_t cap, char *err, size_t errlen)
{
    size_t n = 0;
    ERR_clear_error();
    errno = 0;
    int rc = SSL_read_ex(t->ssl, buf, cap, &n);
    if (rc == 1)
        return (ssize_t)n;
    return io_result(t, rc, err, errlen, "TLS read failed");
}

size_t lb_tls_pending(const lb_tls *t)
{
    return (size_t)SSL_pending(t->ssl);
}

void lb_tls_free(lb_tls *t)
{
    if (!t)
        return;
    if (t->ssl) {
        /* no SSL_shutdown: nothing is written (a forked child must not) */
        SSL_set_quiet_shutdown(t->ssl, 1);
        SSL_free(t->ssl); /* SSL_set_fd's BIO does not close the fd */
    }
    SSL_CTX_free(t->ctx);
    free(t);
}

#endif /* LB_NO_TLS */
