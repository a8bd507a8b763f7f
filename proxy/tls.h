/*
 * One TLS connection of the data path over OpenSSL, with no socket of its
 * own: the connection that owns it (proxy/client.c, proxy/upstream.c)
 * reads ciphertext from libuv into the worker's scratch buffer and feeds
 * it here, takes the plain text out into its own read buffer, and writes
 * the ciphertext that encryption leaves in a chain of the worker's
 * buffers. Nothing here blocks, and nothing is kept between reads but what
 * OpenSSL holds (with SSL_MODE_RELEASE_BUFFERS, nothing on an idle
 * connection) and, rarely, ciphertext the owner could not take yet. Worker
 * thread only.
 */
#ifndef DM_PROXY_TLS_H
#define DM_PROXY_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>
#include <uv.h>

#include "proxy/buf.h" /* dm_write_cb */

struct dm_buf;
struct dm_conf_tls;
struct dm_conf_tls_client;
struct sockaddr;
struct dm_worker;

/* Results of dm_tls_handshake() and dm_tls_read(). */
enum {
    DM_TLS_WANT = 0,   /* nothing more until more ciphertext comes */
    DM_TLS_EOF = -1,   /* the peer's close_notify: the end of its data */
    DM_TLS_ERROR = -2, /* fatal: dm_tls_error() says why; close the connection */
};

struct dm_tls {
    SSL *ssl;     /* a server connection's: NULL until its first bytes (dm_tls_feed);
                   * dm_tls_read and dm_tls_write come after a done handshake */
    SSL_CTX *ctx; /* a server connection's listener context, for that */
    struct dm_worker *w;
    const char *in; /* ciphertext being fed (the worker's scratch, or stash) */
    size_t in_len;
    struct dm_buf *stash;      /* ciphertext left over while the owner stopped reading */
    struct dm_buf *out;        /* ciphertext to write, oldest first (linked by next) */
    struct dm_buf *out_tail;   /* the last of them, being filled */
    char *subject;             /* the verified client certificate's subject, or NULL */
    bool done;                 /* handshake complete */
    bool require_cert;         /* a listener's verify_client: required */
    bool failed;               /* a fatal error: no close_notify */
    bool own_out;              /* dm_tls_read wrote records of TLS's own (a key update's answer) */
    void (*pump)(void *owner); /* what the worker's idle pass calls (dm_tls_schedule) */
    void *owner;
    struct dm_tls *pump_next;
    bool on_pump;
    SSL_SESSION **slot;         /* a client connection's session slot, or NULL */
    const char *subject_header; /* the listener's client_subject_header (its config's), or NULL */
    char why[120];              /* why it failed */
};

/*
 * For a libuv alloc callback: the worker's scratch buffer (made on first
 * use), which the read callback feeds at once; empty when out of memory.
 */
void dm_tls_scratch(struct dm_worker *w, uv_buf_t *out);

/* A server-side connection of listener config t; NULL when out of memory. */
struct dm_tls *dm_tls_new_server(struct dm_worker *w, const struct dm_conf_tls *t);

/*
 * A client-side connection of a pool's tls: block cf to the server at addr
 * (as written; sa resolved), sending SNI and checking the certificate as
 * dm_tls_set_target() says. It resumes the session in *slot, and keeps
 * there the sessions the server gives (the slot is its worker's). NULL when
 * out of memory.
 */
struct dm_tls *dm_tls_new_client(struct dm_worker *w, const struct dm_conf_tls_client *cf,
                                 const char *addr, const struct sockaddr *sa, SSL_SESSION **slot);

/*
 * What ssl sends as SNI and checks the server's certificate for: the pool's
 * sni, else the host of addr when it is a name, else the numeric address sa
 * against the certificate's IP addresses.
 */
void dm_tls_set_target(SSL *ssl, const struct dm_conf_tls_client *t, const char *addr,
                       const struct sockaddr *sa);

/*
 * Writes t's output chain to s, four buffers to a write, each queued one
 * counted in *writes with done(arg) to come; after a failed write the rest
 * is dropped. 1 all went out, 0 some is queued (or held), <0 a write failed.
 * While s has bytes queued, the last buffer, not full, is held for the
 * output to come; the caller flushes again when a write is done.
 */
int dm_tls_flush(struct dm_tls *t, uv_stream_t *s, dm_write_cb done, void *arg, uint32_t *writes);

/* Has ctx (a pool's client context) hand new sessions to the connections' slots. */
void dm_tls_client_ctx_init(SSL_CTX *ctx);

/* Frees t and what it holds; NULL is a no-op. */
void dm_tls_free(struct dm_tls *t);

/*
 * The ciphertext at p (n bytes, valid until the owner returns to libuv) is
 * what the next calls read, after what is stashed. -1 out of memory.
 */
int dm_tls_feed(struct dm_tls *t, const char *p, size_t n);

/*
 * Keeps what the last feed left unread (the owner stops reading for a
 * while): copied into t's stash, read by the next calls. -1 out of memory.
 */
int dm_tls_keep_input(struct dm_tls *t);

/* Whether t holds input not yet read: plain text OpenSSL decrypted, or stashed ciphertext. */
bool dm_tls_buffered(const struct dm_tls *t);

/* Goes on with the handshake: 1 done, DM_TLS_WANT, or DM_TLS_ERROR. */
int dm_tls_handshake(struct dm_tls *t);

/* Up to cap bytes of plain text into p: bytes read (> 0), DM_TLS_WANT, DM_TLS_EOF or DM_TLS_ERROR.
 */
int dm_tls_read(struct dm_tls *t, char *p, size_t cap);

/* Encrypts n bytes at p into t's output chain: 0, or DM_TLS_ERROR. */
int dm_tls_write(struct dm_tls *t, const void *p, size_t n);

/* dm_tls_write() of n buffers, the small ones gathered into one record. */
int dm_tls_writev(struct dm_tls *t, const uv_buf_t *bufs, unsigned n);

/* Adds a close_notify to the output (once the handshake is done and nothing failed). */
void dm_tls_shutdown(struct dm_tls *t);

/* Takes the first buffer of the output chain (the caller's reference), or NULL. */
struct dm_buf *dm_tls_take_output(struct dm_tls *t);

/*
 * Has pump(owner) called from the worker's next loop pass, before it polls
 * (the owner starts reading again while t holds input: no read would come
 * for it). Once per pass however often it is asked; dm_tls_free() cancels.
 */
void dm_tls_schedule(struct dm_tls *t, void (*pump)(void *owner), void *owner);

/*
 * Why an OpenSSL call on ssl failed with SSL_get_error() err, into buf: the
 * certificate's verify result when it was refused, else OpenSSL's reason
 * (this thread's error queue, emptied). Returns buf.
 */
const char *dm_tls_reason(SSL *ssl, int err, char *buf, size_t size);

/* Why the connection failed, for the log. */
const char *dm_tls_error(const struct dm_tls *t);

/* The negotiated protocol version ("TLSv1.3"), or "-". */
const char *dm_tls_version(const struct dm_tls *t);

#endif
