/*
 * TLS connections over a BIO of our own (proxy/tls.h): its read takes from
 * the ciphertext the owner fed, its write appends to a chain of the
 * worker's buffers, so that no connection keeps a BIO buffer of its own.
 */
#include "proxy/tls.h"

#include <arpa/inet.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "conf/tls.h"
#include "proxy/buf.h"
#include "proxy/internal.h"

static BIO_METHOD *bio_method;
static pthread_once_t bio_once = PTHREAD_ONCE_INIT;

static int
bio_write(BIO *b, const char *p, int n)
{
    struct dm_tls *t = BIO_get_data(b);
    size_t left = n > 0 ? (size_t)n : 0;
    while (left > 0) {
        struct dm_buf *o = t->out_tail;
        if (o == NULL || o->len == o->cap) {
            /* A record is at most 16 KiB and a bit: small ones (a handshake
             * message, a small response) go to small buffers. */
            o = dm_buf_get(t->w, left <= DM_SMALL_CAP ? DM_SMALL_CAP : t->w->rt->buf_cap);
            if (o == NULL) {
                return -1;
            }
            if (t->out_tail != NULL) {
                t->out_tail->next = o;
            } else {
                t->out = o;
            }
            t->out_tail = o;
        }
        size_t k = o->cap - o->len < left ? o->cap - o->len : left;
        memcpy(o->data + o->len, p, k);
        o->len += (uint32_t)k;
        p += k;
        left -= k;
    }
    return n;
}

static int
bio_read(BIO *b, char *p, int n)
{
    struct dm_tls *t = BIO_get_data(b);
    BIO_clear_retry_flags(b);
    if (t->in_len == 0) {
        BIO_set_retry_read(b);
        return -1;
    }
    size_t k = n > 0 && (size_t)n < t->in_len ? (size_t)n : t->in_len;
    memcpy(p, t->in, k);
    t->in += k;
    t->in_len -= k;
    if (t->in_len == 0 && t->stash != NULL) {
        dm_buf_unref(t->w, t->stash);
        t->stash = NULL;
        t->in = NULL;
    }
    return (int)k;
}

static long
bio_ctrl(BIO *b, int cmd, long num, void *ptr)
{
    (void)b;
    (void)num;
    (void)ptr;
    return cmd == BIO_CTRL_FLUSH ? 1 : 0;
}

static int
bio_create(BIO *b)
{
    BIO_set_init(b, 1);
    return 1;
}

static void
bio_init_method(void)
{
    BIO_METHOD *m = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "dimmer");
    if (m != NULL && BIO_meth_set_write(m, bio_write) == 1 && BIO_meth_set_read(m, bio_read) == 1 &&
        BIO_meth_set_ctrl(m, bio_ctrl) == 1 && BIO_meth_set_create(m, bio_create) == 1) {
        bio_method = m;
        return;
    }
    BIO_meth_free(m);
}

#define DM_TLS_SCRATCH (64 * 1024)

void
dm_tls_scratch(struct dm_worker *w, uv_buf_t *out)
{
    if (w->tls_scratch == NULL) {
        w->tls_scratch = malloc(DM_TLS_SCRATCH);
    }
    *out = uv_buf_init(w->tls_scratch, w->tls_scratch != NULL ? DM_TLS_SCRATCH : 0);
}

/* t's SSL object and BIO, from ctx; -1 when out of memory. */
static int
tls_make_ssl(struct dm_tls *t, SSL_CTX *ctx)
{
    pthread_once(&bio_once, bio_init_method);
    if (bio_method == NULL) {
        return -1;
    }
    t->ssl = SSL_new(ctx);
    BIO *b = BIO_new(bio_method);
    if (t->ssl == NULL || b == NULL) {
        BIO_free(b);
        SSL_free(t->ssl);
        t->ssl = NULL;
        ERR_clear_error();
        return -1;
    }
    BIO_set_data(b, t);
    SSL_set_bio(t->ssl, b, b); /* one BIO both ways: one reference taken */
    SSL_set_app_data(t->ssl, t);
    return 0;
}

static struct dm_tls *
tls_new(struct dm_worker *w, SSL_CTX *ctx)
{
    struct dm_tls *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return NULL;
    }
    t->w = w;
    if (tls_make_ssl(t, ctx) < 0) {
        free(t);
        return NULL;
    }
    return t;
}

struct dm_tls *
dm_tls_new_server(struct dm_worker *w, const struct dm_conf_tls *cf)
{
    /* The SSL object (about 9 KiB) waits for the client's first bytes, as
     * nginx's does: a connection that never starts its handshake costs the
     * little a plain one does. */
    struct dm_tls *t = calloc(1, sizeof(*t));
    if (t != NULL) {
        t->w = w;
        t->ctx = cf->certs[0].ctx;
        t->subject_header = cf->subject_header;
        t->require_cert = cf->verify == DM_TLS_VERIFY_REQUIRED;
    }
    return t;
}

/* A new session from the server (TLS 1.3 sends them after the handshake): kept in the slot. */
static int
new_session_cb(SSL *ssl, SSL_SESSION *sess)
{
    struct dm_tls *t = SSL_get_app_data(ssl); /* NULL: a health check's, kept by nobody */
    if (t == NULL || t->slot == NULL) {
        return 0;
    }
    SSL_SESSION_free(*t->slot);
    *t->slot = sess;
    return 1; /* the reference is the slot's now */
}

void
dm_tls_client_ctx_init(SSL_CTX *ctx)
{
    SSL_CTX_sess_set_new_cb(ctx, new_session_cb);
}

struct dm_tls *
dm_tls_new_client(struct dm_worker *w, const struct dm_conf_tls_client *cf, const char *addr,
                  const struct sockaddr *sa, SSL_SESSION **slot)
{
    struct dm_tls *t = tls_new(w, cf->ctx);
    if (t == NULL) {
        return NULL;
    }
    SSL_set_connect_state(t->ssl);
    dm_tls_set_target(t->ssl, cf, addr, sa);
    t->slot = slot;
    if (slot != NULL && *slot != NULL) {
        SSL_set_session(t->ssl, *slot);
    }
    ERR_clear_error();
    return t;
}

/* Takes t off list *l, if it is there. */
static void
unlink_pump(struct dm_tls **l, struct dm_tls *t)
{
    for (; *l != NULL; l = &(*l)->pump_next) {
        if (*l == t) {
            *l = t->pump_next;
            return;
        }
    }
}

static void
pumps_cb(uv_idle_t *h)
{
    struct dm_worker *w = h->data;
    /* Those asked for during this pass wait for the next one. */
    w->tls_pumping = w->tls_pumps;
    w->tls_pumps = NULL;
    struct dm_tls *t;
    while ((t = w->tls_pumping) != NULL) {
        w->tls_pumping = t->pump_next;
        t->pump_next = NULL;
        t->on_pump = false;
        t->pump(t->owner); /* may free t, or others on the list (they unlink) */
    }
    if (w->tls_pumps == NULL) {
        uv_idle_stop(h);
    }
}

void
dm_tls_schedule(struct dm_tls *t, void (*pump)(void *owner), void *owner)
{
    struct dm_worker *w = t->w;
    t->pump = pump;
    t->owner = owner;
    if (t->on_pump) {
        return;
    }
    if (!w->tls_idle_ready) {
        if (uv_idle_init(&w->loop, &w->tls_idle) < 0) {
            return;
        }
        w->tls_idle.data = w;
        w->tls_idle_ready = true;
    }
    t->on_pump = true;
    t->pump_next = w->tls_pumps;
    w->tls_pumps = t;
    uv_idle_start(&w->tls_idle, pumps_cb);
}

void
dm_tls_free(struct dm_tls *t)
{
    if (t == NULL) {
        return;
    }
    if (t->on_pump) {
        unlink_pump(&t->w->tls_pumps, t);
        unlink_pump(&t->w->tls_pumping, t);
    }
    if (t->done && !t->failed) {
        /* A connection that ends in order: without this, SSL_free takes its
         * session for a bad one, and the session slot would never resume. */
        SSL_set_shutdown(t->ssl, SSL_SENT_SHUTDOWN | SSL_RECEIVED_SHUTDOWN);
    }
    SSL_free(t->ssl);
    struct dm_buf *b;
    while ((b = dm_tls_take_output(t)) != NULL) {
        dm_buf_unref(t->w, b);
    }
    dm_buf_unref(t->w, t->stash);
    free(t->subject);
    free(t);
}

int
dm_tls_feed(struct dm_tls *t, const char *p, size_t n)
{
    if (t->ssl == NULL) {
        /* A server connection's first bytes: its SSL object now. */
        if (tls_make_ssl(t, t->ctx) < 0) {
            return -1;
        }
        SSL_set_accept_state(t->ssl);
    }
    if (t->stash == NULL) {
        t->in = p;
        t->in_len = n;
        return 0;
    }
    /* Stashed bytes come first: the new ones go after them. */
    struct dm_buf *s = dm_buf_get(t->w, (uint32_t)(t->in_len + n));
    if (s == NULL) {
        return -1;
    }
    memcpy(s->data, t->in, t->in_len);
    memcpy(s->data + t->in_len, p, n);
    s->len = (uint32_t)(t->in_len + n);
    dm_buf_unref(t->w, t->stash);
    t->stash = s;
    t->in = s->data;
    t->in_len = s->len;
    return 0;
}

int
dm_tls_keep_input(struct dm_tls *t)
{
    if (t->in_len == 0 || t->stash != NULL) {
        return 0;
    }
    struct dm_buf *s = dm_buf_get(t->w, (uint32_t)t->in_len);
    if (s == NULL) {
        return -1;
    }
    memcpy(s->data, t->in, t->in_len);
    s->len = (uint32_t)t->in_len;
    t->stash = s;
    t->in = s->data;
    return 0;
}

bool
dm_tls_buffered(const struct dm_tls *t)
{
    return t->in_len > 0 ||
           (t->ssl != NULL && (SSL_pending(t->ssl) > 0 || SSL_has_pending(t->ssl)));
}

const char *
dm_tls_reason(SSL *ssl, int err, char *buf, size_t size)
{
    unsigned long e = ERR_peek_last_error();
    long v = SSL_get_verify_mode(ssl) & SSL_VERIFY_PEER ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (v != X509_V_OK) {
        snprintf(buf, size, "certificate verify failed: %s", X509_verify_cert_error_string(v));
    } else if (ERR_GET_REASON(e) == SSL_R_CALLBACK_FAILED && SSL_is_server(ssl)) {
        /* The SNI callback refused it (strict_sni). */
        const char *name = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name);
        if (name != NULL) {
            snprintf(buf, size, "no certificate for the name \"%.60s\" (strict_sni)", name);
        } else {
            snprintf(buf, size, "no SNI name sent (strict_sni)");
        }
    } else if (e != 0) {
        const char *r = ERR_reason_error_string(e);
        snprintf(buf, size, "%s", r != NULL ? r : "TLS error");
    } else if (err == SSL_ERROR_SYSCALL) {
        snprintf(buf, size, "the connection ended in the handshake");
    } else {
        snprintf(buf, size, "TLS error %d", err);
    }
    ERR_clear_error();
    return buf;
}

/* Records why t failed. */
static int
tls_fail(struct dm_tls *t, int err)
{
    t->failed = true;
    dm_tls_reason(t->ssl, err, t->why, sizeof(t->why));
    return DM_TLS_ERROR;
}

/* The verified client certificate's subject (RFC 2253, control bytes escaped) into t->subject. */
static void
tls_subject(struct dm_tls *t)
{
    X509 *peer = SSL_get0_peer_certificate(t->ssl);
    if (peer == NULL || SSL_get_verify_result(t->ssl) != X509_V_OK) {
        return;
    }
    BIO *m = BIO_new(BIO_s_mem());
    if (m == NULL) {
        return;
    }
    if (X509_NAME_print_ex(m, X509_get_subject_name(peer), 0, XN_FLAG_RFC2253) >= 0) {
        char *p;
        long n = BIO_get_mem_data(m, &p);
        t->subject = malloc((size_t)n + 1);
        if (t->subject != NULL) {
            for (long i = 0; i < n; i++) {
                /* A field value: no control bytes (RFC 2253 escapes them already). */
                unsigned char ch = (unsigned char)p[i];
                t->subject[i] = ch < 0x20 || ch == 0x7f ? '?' : (char)ch;
            }
            t->subject[n] = 0;
        }
    }
    BIO_free(m);
}

int
dm_tls_handshake(struct dm_tls *t)
{
    if (t->done) {
        return 1;
    }
    if (t->ssl == NULL) {
        return DM_TLS_WANT; /* nothing came yet */
    }
    ERR_clear_error();
    int r = SSL_do_handshake(t->ssl);
    if (r == 1 && t->require_cert &&
        (SSL_get0_peer_certificate(t->ssl) == NULL || SSL_get_verify_result(t->ssl) != X509_V_OK)) {
        t->failed = true;
        snprintf(t->why, sizeof(t->why), "no verified client certificate (verify_client required)");
        return DM_TLS_ERROR;
    }
    if (r == 1) {
        t->done = true;
        if (t->subject_header != NULL) {
            tls_subject(t);
        }
        return 1;
    }
    int e = SSL_get_error(t->ssl, r);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        return DM_TLS_WANT;
    }
    return tls_fail(t, e);
}

int
dm_tls_read(struct dm_tls *t, char *p, size_t cap)
{
    ERR_clear_error();
    const struct dm_buf *tail = t->out_tail;
    uint32_t tail_len = tail != NULL ? tail->len : 0;
    int n = SSL_read(t->ssl, p, cap > INT32_MAX ? INT32_MAX : (int)cap);
    if (t->out_tail != tail || (tail != NULL && tail->len != tail_len)) {
        t->own_out = true; /* reading made output: post-handshake messages */
    }
    if (n > 0) {
        return n;
    }
    int e = SSL_get_error(t->ssl, n);
    if (e == SSL_ERROR_WANT_READ || e == SSL_ERROR_WANT_WRITE) {
        return DM_TLS_WANT;
    }
    if (e == SSL_ERROR_ZERO_RETURN) {
        return DM_TLS_EOF;
    }
    return tls_fail(t, e);
}

int
dm_tls_write(struct dm_tls *t, const void *p, size_t n)
{
    if (n == 0) {
        return 0;
    }
    ERR_clear_error();
    /* The BIO takes everything, so a write is whole or fails. */
    int r = SSL_write(t->ssl, p, n > INT32_MAX ? INT32_MAX : (int)n);
    if (r > 0 && (size_t)r == n) {
        return 0;
    }
    return tls_fail(t, SSL_get_error(t->ssl, r));
}

int
dm_tls_writev(struct dm_tls *t, const uv_buf_t *bufs, unsigned n)
{
    /* Small pieces (a head and a small body) go out as one record, as a
     * peer that builds the whole response in one buffer sends it. */
    char gather[16384];
    size_t used = 0;
    for (unsigned i = 0; i < n; i++) {
        const uv_buf_t *b = &bufs[i];
        if (used + b->len <= sizeof(gather)) {
            memcpy(gather + used, b->base, b->len);
            used += b->len;
            continue;
        }
        if (dm_tls_write(t, gather, used) < 0) {
            return DM_TLS_ERROR;
        }
        used = 0;
        if (b->len <= sizeof(gather)) {
            memcpy(gather, b->base, b->len);
            used = b->len;
        } else if (dm_tls_write(t, b->base, b->len) < 0) {
            return DM_TLS_ERROR;
        }
    }
    return dm_tls_write(t, gather, used);
}

void
dm_tls_shutdown(struct dm_tls *t)
{
    if (t->done && !t->failed && !(SSL_get_shutdown(t->ssl) & SSL_SENT_SHUTDOWN)) {
        ERR_clear_error();
        (void)SSL_shutdown(t->ssl);
        ERR_clear_error();
    }
}

int
dm_tls_flush(struct dm_tls *t, uv_stream_t *s, dm_write_cb done, void *arg, uint32_t *writes)
{
    int rc = 1;
    /* While the socket has not taken what is queued, a buffer with room
     * stays for the records to come: a stream of small chunks to a slow
     * reader filled a 4 KiB buffer a record, sixteen times what the queue
     * counted. */
    bool busy = uv_stream_get_write_queue_size(s) > 0;
    while (t->out != NULL) {
        if (busy && rc >= 0 && t->out == t->out_tail && t->out->len < t->out->cap) {
            return 0;
        }
        struct dm_buf *hold[4];
        uv_buf_t b[4];
        unsigned k = 0;
        while (k < 4 && (hold[k] = dm_tls_take_output(t)) != NULL) {
            b[k] = uv_buf_init(hold[k]->data, hold[k]->len);
            k++;
        }
        /* After a failed write the rest is dropped: a hole would break the stream. */
        int r = rc < 0 ? rc : dm_buf_write(t->w, s, b, k, hold, k, done, arg);
        for (unsigned i = 0; i < k; i++) {
            dm_buf_unref(t->w, hold[i]); /* the write holds its own references */
        }
        *writes += r == 0;
        rc = rc < 0 || r < 0 ? (rc < 0 ? rc : r) : (r == 0 ? 0 : rc);
    }
    return rc;
}

void
dm_tls_set_target(SSL *ssl, const struct dm_conf_tls_client *t, const char *addr,
                  const struct sockaddr *sa)
{
    char name[256], ip[INET6_ADDRSTRLEN];
    const char *sni = dm_tls_client_name(t, addr, name, sizeof(name));
    if (sni != NULL) {
        SSL_set_tlsext_host_name(ssl, sni);
        SSL_set1_host(ssl, sni);
        return;
    }
    const void *a = sa->sa_family == AF_INET6
                        ? (const void *)&((const struct sockaddr_in6 *)sa)->sin6_addr
                        : (const void *)&((const struct sockaddr_in *)sa)->sin_addr;
    if (inet_ntop(sa->sa_family, a, ip, sizeof(ip)) != NULL) {
        X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), ip);
    }
}

struct dm_buf *
dm_tls_take_output(struct dm_tls *t)
{
    struct dm_buf *b = t->out;
    if (b != NULL) {
        t->out = b->next;
        b->next = NULL;
        if (t->out == NULL) {
            t->out_tail = NULL;
        }
    }
    return b;
}

const char *
dm_tls_error(const struct dm_tls *t)
{
    return t->why[0] != 0 ? t->why : "TLS error";
}

const char *
dm_tls_version(const struct dm_tls *t)
{
    return t->done ? SSL_get_version(t->ssl) : "-";
}
