/* tls.h: the TLS byte mover of a Redis connection, on OpenSSL.
 *
 * Pure C, no Python.  transport.c opens the TCP socket (hiredis), makes it
 * non-blocking and, for rediss://, wraps it here; the Redis protocol (request
 * building, reply parsing and checks) stays in the session (session.c) and is the same
 * for plain TCP and TLS: this file only moves bytes.
 *
 * Nothing here blocks: every call returns LB_TLS_WANT_READ / LB_TLS_WANT_WRITE
 * when the socket must become readable / writable first, and the caller polls
 * (honouring its own timeouts).
 *
 * Fork: lb_tls_free never writes on the socket (no close_notify, no
 * SSL_shutdown) and never closes the fd (the caller does), so a child may
 * free a session inherited from its parent without touching the parent's
 * connection. */
#ifndef LB_REDIS_TLS_H
#define LB_REDIS_TLS_H

#include <stddef.h>
#include <sys/types.h>

#define LB_TLS_CERT_NONE 0
#define LB_TLS_CERT_OPTIONAL 1
#define LB_TLS_CERT_REQUIRED 2

typedef struct {
    const char *host;       /* the name or address connected to (verification, SNI) */
    const char *ca_certs;   /* PEM file of trusted CAs; NULL (with ca_path NULL): system CAs */
    const char *ca_path;    /* directory of hashed CA certificates */
    const char *certfile;   /* client certificate chain (PEM) */
    const char *keyfile;    /* its private key (PEM); NULL: in certfile */
    int cert_reqs;          /* LB_TLS_CERT_*; OPTIONAL verifies as REQUIRED (a client's view) */
    int check_hostname;     /* 1: the certificate must name host (ignored with CERT_NONE) */
} lb_tls_options;

typedef struct lb_tls lb_tls;

/* Results of the calls below besides a byte count. */
#define LB_TLS_WANT_READ (-1)
#define LB_TLS_WANT_WRITE (-2)
#define LB_TLS_ERROR (-3)   /* message in err */

/* Make a client session on the connected non-blocking socket fd (the fd stays
 * the caller's).  NULL with a message in err on failure (bad files, out of
 * memory). */
lb_tls *lb_tls_new(int fd, const lb_tls_options *o, char *err, size_t errlen);
/* Advance the handshake: 0 done, LB_TLS_WANT_*, or LB_TLS_ERROR with why in
 * err ("certificate verify failed: ...", the server spoke no TLS, ...). */
int lb_tls_handshake(lb_tls *t, char *err, size_t errlen);
/* Write / read: > 0 bytes moved; read: 0 = the peer closed; else LB_TLS_*. */
ssize_t lb_tls_write(lb_tls *t, const void *buf, size_t len, char *err, size_t errlen);
ssize_t lb_tls_read(lb_tls *t, void *buf, size_t cap, char *err, size_t errlen);
/* Decrypted bytes already buffered (readable without polling). */
size_t lb_tls_pending(const lb_tls *t);
/* Free the session: sends nothing, does not close the fd.  NULL is fine. */
void lb_tls_free(lb_tls *t);

#endif
