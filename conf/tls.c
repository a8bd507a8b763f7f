/*
 * The tls: blocks of listeners and pools (conf/tls.h): their keys, the
 * files they name loaded into OpenSSL contexts and checked, and the
 * callbacks those contexts call during a handshake (SNI, ALPN, OCSP
 * stapling, session tickets). The callbacks run on the workers' threads:
 * they read the immutable config and the process's ticket keys, which a
 * lock guards.
 */
#include "conf/tls.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <openssl/core_names.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ocsp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509v3.h>

#include "conf/conf.h"
#include "conf/internal.h"

/* The default TLS 1.2 ciphers: forward secret AEAD only (Mozilla's "intermediate"). */
#define DM_TLS_CIPHERS                                                                             \
    "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:ECDHE-ECDSA-AES256-GCM-SHA384:"     \
    "ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:ECDHE-RSA-CHACHA20-POLY1305"
#define DM_TLS_GROUPS "X25519:P-256:P-384"

/* ---- session ticket keys: the process's, shared by workers and reloads ---- */

struct ticket_key {
    unsigned char name[16];
    unsigned char aes[32];
    unsigned char hmac[32];
    uint64_t born_ms;
};

/* keys[0] encrypts new tickets; the two before it still decrypt (renewed). */
static struct {
    pthread_mutex_t lock;
    struct ticket_key keys[3];
    unsigned n;
    uint64_t rotate_ms;
} tickets = { .lock = PTHREAD_MUTEX_INITIALIZER, .rotate_ms = 3600000 };

static uint64_t
mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* A fresh keys[0] when there is none or it is older than rotate_ms; under the lock. */
static int
tickets_rotate(uint64_t now)
{
    if (tickets.n > 0 && now - tickets.keys[0].born_ms < tickets.rotate_ms) {
        return 0;
    }
    struct ticket_key k = { .born_ms = now };
    if (RAND_bytes(k.name, sizeof(k.name)) != 1 || RAND_bytes(k.aes, sizeof(k.aes)) != 1 ||
        RAND_bytes(k.hmac, sizeof(k.hmac)) != 1) {
        return -1;
    }
    memmove(&tickets.keys[1], &tickets.keys[0], sizeof(tickets.keys[0]) * 2);
    tickets.keys[0] = k;
    tickets.n = tickets.n < 3 ? tickets.n + 1 : 3;
    return 0;
}

static int
ticket_mac_init(EVP_MAC_CTX *hctx, unsigned char *key)
{
    OSSL_PARAM p[] = {
        OSSL_PARAM_construct_octet_string(OSSL_MAC_PARAM_KEY, key, 32),
        OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, (char *)"SHA256", 0),
        OSSL_PARAM_construct_end(),
    };
    return EVP_MAC_CTX_set_params(hctx, p);
}

/* SSL_CTX_set_tlsext_ticket_key_evp_cb(3): 1 ok, 2 ok and renew, 0 unknown key, -1 error. */
static int
ticket_cb(SSL *s, unsigned char name[16], unsigned char *iv, EVP_CIPHER_CTX *ctx, EVP_MAC_CTX *hctx,
          int enc)
{
    /* A TLS 1.3 client uses a ticket once (RFC 8446, C.4): each resumption
     * gets a new one. A TLS 1.2 ticket is renewed once its key is not the
     * current one. */
    bool tls13 = SSL_version(s) >= TLS1_3_VERSION;
    int rc = -1;
    pthread_mutex_lock(&tickets.lock);
    if (enc) {
        if (tickets_rotate(mono_ms()) == 0 && RAND_bytes(iv, 16) == 1) {
            struct ticket_key *k = &tickets.keys[0];
            memcpy(name, k->name, 16);
            rc = EVP_EncryptInit_ex(ctx, EVP_aes_256_cbc(), NULL, k->aes, iv) == 1 &&
                         ticket_mac_init(hctx, k->hmac) == 1
                     ? 1
                     : -1;
        }
    } else {
        rc = 0;
        for (unsigned i = 0; i < tickets.n; i++) {
            struct ticket_key *k = &tickets.keys[i];
            if (memcmp(name, k->name, 16) == 0) {
                rc = EVP_DecryptInit_ex(ctx, EVP_aes_256_cbc(), NULL, k->aes, iv) == 1 &&
                             ticket_mac_init(hctx, k->hmac) == 1
                         ? (i == 0 && !tls13 ? 1 : 2)
                         : -1;
                break;
            }
        }
    }
    pthread_mutex_unlock(&tickets.lock);
    return rc;
}

/*
 * The keys as bytes, for the process that replaces this one (SIGUSR2): "DMTK",
 * a version byte, the count, then per key (newest first) its name, AES and
 * HMAC keys and its age in ms (8 bytes, big-endian).
 */
#define TICKETS_HEAD 6
#define TICKET_BYTES (16 + 32 + 32 + 8)

size_t
dm_tls_tickets_save(unsigned char *buf, size_t cap)
{
    uint64_t now = mono_ms();
    pthread_mutex_lock(&tickets.lock);
    size_t n = tickets.n, len = TICKETS_HEAD + n * TICKET_BYTES;
    if (n == 0 || cap < len) {
        pthread_mutex_unlock(&tickets.lock);
        return 0;
    }
    memcpy(buf, "DMTK\1", 5);
    buf[5] = (unsigned char)n;
    unsigned char *p = buf + TICKETS_HEAD;
    for (size_t i = 0; i < n; i++) {
        const struct ticket_key *k = &tickets.keys[i];
        memcpy(p, k->name, 16);
        memcpy(p + 16, k->aes, 32);
        memcpy(p + 48, k->hmac, 32);
        uint64_t age = now >= k->born_ms ? now - k->born_ms : 0;
        for (int b = 0; b < 8; b++) {
            p[80 + b] = (unsigned char)(age >> (56 - 8 * b));
        }
        p += TICKET_BYTES;
    }
    pthread_mutex_unlock(&tickets.lock);
    return len;
}

int
dm_tls_tickets_load(const unsigned char *buf, size_t len)
{
    if (len < TICKETS_HEAD || memcmp(buf, "DMTK\1", 5) != 0 || buf[5] < 1 || buf[5] > 3 ||
        len != TICKETS_HEAD + (size_t)buf[5] * TICKET_BYTES) {
        return -1;
    }
    struct ticket_key keys[3];
    uint64_t now = mono_ms();
    const unsigned char *p = buf + TICKETS_HEAD;
    for (unsigned i = 0; i < buf[5]; i++, p += TICKET_BYTES) {
        memcpy(keys[i].name, p, 16);
        memcpy(keys[i].aes, p + 16, 32);
        memcpy(keys[i].hmac, p + 48, 32);
        uint64_t age = 0;
        for (int b = 0; b < 8; b++) {
            age = age << 8 | p[80 + b];
        }
        /* Born before this process's clock began: as old as it can be. */
        keys[i].born_ms = age < now ? now - age : 0;
    }
    pthread_mutex_lock(&tickets.lock);
    memcpy(tickets.keys, keys, sizeof(keys[0]) * buf[5]);
    tickets.n = buf[5];
    pthread_mutex_unlock(&tickets.lock);
    OPENSSL_cleanse(keys, sizeof(keys));
    return (int)buf[5];
}

/* ---- handshake callbacks ---- */

const struct dm_tls_cert *
dm_tls_cert_for(const struct dm_conf_tls *t, const char *name)
{
    size_t len = name != NULL ? strlen(name) : 0;
    /* A fully qualified name's final dot is no part of it (nginx drops it too). */
    if (len > 0 && name[len - 1] == '.') {
        len--;
    }
    if (len == 0) {
        return NULL;
    }
    for (size_t i = 0; i < t->ncerts; i++) {
        for (size_t j = 0; j < t->certs[i].nnames; j++) {
            const char *n = t->certs[i].names[j];
            if (strlen(n) == len && strncasecmp(n, name, len) == 0) {
                return &t->certs[i];
            }
        }
    }
    const char *dot = memchr(name, '.', len);
    if (dot == NULL || dot == name) {
        return NULL;
    }
    size_t rest = len - (size_t)(dot - name); /* ".example.com" */
    for (size_t i = 0; i < t->ncerts; i++) {
        for (size_t j = 0; j < t->certs[i].nnames; j++) {
            const char *n = t->certs[i].names[j];
            if (n[0] == '*' && n[1] == '.' && strlen(n + 1) == rest &&
                strncasecmp(n + 1, dot, rest) == 0) {
                return &t->certs[i];
            }
        }
    }
    return NULL;
}

/* The certificate for the client's SNI name; every context of a listener has it. */
static int
sni_cb(SSL *ssl, int *alert, void *arg)
{
    const struct dm_conf_tls *t = arg;
    const struct dm_tls_cert *c =
        dm_tls_cert_for(t, SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name));
    if (c == NULL) {
        if (t->strict_sni) {
            *alert = SSL_AD_UNRECOGNIZED_NAME;
            return SSL_TLSEXT_ERR_ALERT_FATAL;
        }
        c = &t->certs[0];
    }
    if (SSL_get_SSL_CTX(ssl) != c->ctx && SSL_set_SSL_CTX(ssl, c->ctx) == NULL) {
        *alert = SSL_AD_INTERNAL_ERROR;
        return SSL_TLSEXT_ERR_ALERT_FATAL;
    }
    return SSL_TLSEXT_ERR_OK;
}

/* ALPN: http/1.1 when the client offers it; none (not an alert) when it does not. */
static int
alpn_cb(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
        unsigned inlen, void *arg)
{
    (void)ssl;
    (void)arg;
    static const unsigned char ours[] = "\x08http/1.1";
    unsigned char *sel = NULL;
    if (SSL_select_next_proto(&sel, outlen, ours, sizeof(ours) - 1, in, inlen) !=
        OPENSSL_NPN_NEGOTIATED) {
        return SSL_TLSEXT_ERR_NOACK;
    }
    *out = sel;
    return SSL_TLSEXT_ERR_OK;
}

/* OCSP stapling: the certificate's response, when it has one and the client asks. */
static int
ocsp_cb(SSL *ssl, void *arg)
{
    const struct dm_tls_cert *c = arg;
    if (c->ocsp == NULL) {
        return SSL_TLSEXT_ERR_NOACK;
    }
    unsigned char *copy = OPENSSL_memdup(c->ocsp, c->ocsp_len);
    if (copy == NULL || SSL_set_tlsext_status_ocsp_resp(ssl, copy, (long)c->ocsp_len) != 1) {
        OPENSSL_free(copy);
        return SSL_TLSEXT_ERR_NOACK;
    }
    return SSL_TLSEXT_ERR_OK;
}

/* Encrypted keys are not supported: never prompt on the terminal for a passphrase. */
static int
no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf;
    (void)size;
    (void)rwflag;
    (void)u;
    return 0;
}

/* ---- reporting ---- */

/* The last OpenSSL error of this thread as text (the queue emptied), or `none`. */
static const char *
ssl_why(char *buf, size_t size, const char *none)
{
    unsigned long e, last = 0;
    while ((e = ERR_get_error()) != 0) {
        last = e;
    }
    if (last == 0) {
        return none;
    }
    const char *r = ERR_reason_error_string(last);
    if (r != NULL) {
        snprintf(buf, size, "%s", r);
    } else {
        ERR_error_string_n(last, buf, size);
    }
    return buf;
}

/* The key into ctx and checked against its certificate; false after
 * reporting. OpenSSL refuses a key of the certificate's own type that does
 * not match as it loads it; one of another type only at the pair check. */

/*
 * The system's CAs (OpenSSL's default file and directory), read on the
 * first call of a load and shared by every context the load makes: each
 * read parses the whole bundle (30 ms for Debian's), once per pool before.
 * A reload reads them again, so that it picks up a CA update. NULL when
 * they cannot be read.
 */
static X509_STORE *
system_cas(struct dm_conf_loader *ld)
{
    if (!ld->system_cas_read) {
        ld->system_cas_read = true;
        X509_STORE *s = X509_STORE_new();
        if (s != NULL && X509_STORE_set_default_paths(s) != 1) {
            X509_STORE_free(s);
            s = NULL; /* the error stays queued for the caller's message */
        } else {
            ERR_clear_error();
        }
        ld->system_cas = s;
    }
    return ld->system_cas;
}

void
dm_conf_tls_loader_fini(struct dm_conf_loader *ld)
{
    X509_STORE_free(ld->system_cas);
    ld->system_cas = NULL;
    ld->system_cas_read = false;
}

static bool
use_key(struct dm_conf_loader *ld, SSL_CTX *ctx, const yaml_node_t *key_n, const char *key,
        const char *cert)
{
    char why[256];
    if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1) {
        unsigned long e = ERR_peek_last_error();
        if (ERR_GET_LIB(e) != ERR_LIB_X509 || ERR_GET_REASON(e) != X509_R_KEY_VALUES_MISMATCH) {
            dm_conf_fail_at(ld, key_n, "key %s: %s (an unencrypted PEM key is needed)", key,
                            ssl_why(why, sizeof(why), "cannot read the key"));
            return false;
        }
    } else if (SSL_CTX_check_private_key(ctx) == 1) {
        return true;
    }
    ERR_clear_error();
    dm_conf_fail_at(ld, key_n, "key %s does not match the certificate in %s", key, cert);
    return false;
}

/*
 * A certificate out of its dates still loads, as in nginx and HAProxy (a
 * restart must not take a site down), but clients refuse it: a warning says
 * so, at start, on reload and with -t.
 */
static void
warn_dates(struct dm_conf_loader *ld, const yaml_node_t *n, const char *path, const X509 *x)
{
    const ASN1_TIME *after = X509_get0_notAfter(x), *before = X509_get0_notBefore(x);
    bool expired = X509_cmp_current_time(after) < 0;
    if (!expired && X509_cmp_current_time(before) <= 0) {
        return;
    }
    struct tm tm;
    char when[32] = "?";
    if (ASN1_TIME_to_tm(expired ? after : before, &tm) == 1) {
        strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
    }
    dm_conf_warn_at(ld, n, "cert %s %s %s: clients will refuse it", path,
                    expired ? "expired on" : "is not valid before", when);
}

static const char *
subject_of(X509 *x, char *buf, size_t size)
{
    buf[0] = 0;
    X509_NAME_oneline(X509_get_subject_name(x), buf, (int)size);
    return buf;
}

/* ---- the files ---- */

/* Whether path is a regular file that opens for reading (never blocking: a FIFO is
 * refused); reports "<key> <path>: <the system's reason>" at n if not. */
static bool
readable(struct dm_conf_loader *ld, const yaml_node_t *n, const char *key, const char *path)
{
    char ebuf[128];
    const char *why = NULL;
    int fd = dm_conf_open_regular(path, ebuf, sizeof(ebuf), &why);
    if (fd < 0) {
        dm_conf_fail_at(ld, n, "%s %s: %s", key, path, why);
        return false;
    }
    close(fd);
    return true;
}

/* Every certificate of a PEM file, leaf first; NULL after reporting at n. */
static STACK_OF(X509) *
    read_chain(struct dm_conf_loader *ld, const yaml_node_t *n, const char *path)
{
    char why[256];
    BIO *b = readable(ld, n, "cert", path) ? BIO_new_file(path, "r") : NULL;
    if (b == NULL) {
        if (ERR_peek_error() != 0) {
            dm_conf_fail_at(ld, n, "cert %s: %s", path, ssl_why(why, sizeof(why), "cannot open"));
        }
        return NULL;
    }
    STACK_OF(X509) *chain = sk_X509_new_null();
    X509 *x;
    while (chain != NULL && (x = PEM_read_bio_X509(b, NULL, no_passphrase, NULL)) != NULL) {
        if (!sk_X509_push(chain, x)) {
            X509_free(x);
            break;
        }
    }
    BIO_free(b);
    ERR_clear_error(); /* the end of the file reads as an error */
    if (chain == NULL || sk_X509_num(chain) == 0) {
        dm_conf_fail_at(ld, n, "cert %s: no PEM certificate in the file", path);
        sk_X509_pop_free(chain, X509_free);
        return NULL;
    }
    return chain;
}

/*
 * A chain is complete when each certificate is issued by the next one in
 * the file and the last is a root (self-issued) or is issued by a
 * certificate the system trusts. False after reporting at n.
 */
static bool
check_chain(struct dm_conf_loader *ld, const yaml_node_t *n, const char *path,
            STACK_OF(X509) * chain, X509_STORE *trusted, X509 **issuer)
{
    char a[256], b[256];
    int k = sk_X509_num(chain);
    *issuer = NULL;
    for (int i = 0; i + 1 < k; i++) {
        X509 *x = sk_X509_value(chain, i), *up = sk_X509_value(chain, i + 1);
        if (X509_check_issued(up, x) != X509_V_OK) {
            dm_conf_fail_at(ld, n,
                            "cert %s: certificate %d (%s) is not issued by the next one in the "
                            "file (%s): put the chain in order, leaf first",
                            path, i + 1, subject_of(x, a, sizeof(a)), subject_of(up, b, sizeof(b)));
            return false;
        }
    }
    X509 *last = sk_X509_value(chain, k - 1);
    if (k > 1) {
        *issuer = sk_X509_value(chain, 1);
        X509_up_ref(*issuer);
    }
    if (X509_check_issued(last, last) == X509_V_OK) {
        if (*issuer == NULL) {
            *issuer = last; /* self-signed: it is its own issuer */
            X509_up_ref(last);
        }
        return true;
    }
    X509_STORE_CTX *sc = X509_STORE_CTX_new();
    X509 *found = NULL;
    if (sc != NULL && trusted != NULL && X509_STORE_CTX_init(sc, trusted, last, NULL) == 1) {
        if (X509_STORE_CTX_get1_issuer(&found, sc, last) != 1) {
            found = NULL;
        }
    }
    X509_STORE_CTX_free(sc);
    ERR_clear_error();
    if (found == NULL) {
        X509_NAME_oneline(X509_get_issuer_name(last), b, sizeof(b));
        dm_conf_fail_at(ld, n,
                        "cert %s: the chain is incomplete: %s is issued by %s, which is neither "
                        "in the file nor trusted by the system",
                        path, subject_of(last, a, sizeof(a)), b);
        X509_free(*issuer);
        *issuer = NULL;
        return false;
    }
    if (*issuer == NULL) {
        *issuer = found;
    } else {
        X509_free(found);
    }
    return true;
}

/* The DNS names of the leaf (its subjectAltName, else its CN), lower case. */
static bool
names_of(struct dm_conf_loader *ld, X509 *leaf, struct dm_tls_cert *c)
{
    GENERAL_NAMES *gens = X509_get_ext_d2i(leaf, NID_subject_alt_name, NULL, NULL);
    int k = gens != NULL ? sk_GENERAL_NAME_num(gens) : 0;
    c->names = calloc((size_t)k + 1, sizeof(*c->names));
    if (c->names == NULL) {
        GENERAL_NAMES_free(gens);
        ld->oom = true;
        return false;
    }
    for (int i = 0; i < k; i++) {
        const GENERAL_NAME *g = sk_GENERAL_NAME_value(gens, i);
        if (g->type != GEN_DNS) {
            continue;
        }
        const unsigned char *d = ASN1_STRING_get0_data(g->d.dNSName);
        int len = ASN1_STRING_length(g->d.dNSName);
        char *s = malloc((size_t)len + 1);
        if (s == NULL) {
            ld->oom = true;
            break;
        }
        for (int j = 0; j < len; j++) {
            s[j] = (char)tolower(d[j]);
        }
        s[len] = 0;
        c->names[c->nnames++] = s;
    }
    GENERAL_NAMES_free(gens);
    if (c->nnames == 0) {
        char cn[256];
        if (X509_NAME_get_text_by_NID(X509_get_subject_name(leaf), NID_commonName, cn, sizeof(cn)) >
            0) {
            for (char *p = cn; *p != 0; p++) {
                *p = (char)tolower((unsigned char)*p);
            }
            c->names[0] = dm_conf_dup_str(ld, cn);
            c->nnames = c->names[0] != NULL;
        }
    }
    return !ld->oom;
}

/* The certificate's OCSP response (DER) from path: it must be a good one, for this certificate. */
static bool
load_ocsp(struct dm_conf_loader *ld, const yaml_node_t *n, const char *path, X509 *leaf,
          X509 *issuer, struct dm_tls_cert *c)
{
    char why[256];
    BIO *b = readable(ld, n, "ocsp", path) ? BIO_new_file(path, "rb") : NULL;
    if (b == NULL) {
        if (ERR_peek_error() != 0) {
            dm_conf_fail_at(ld, n, "ocsp %s: %s", path, ssl_why(why, sizeof(why), "cannot open"));
        }
        return false;
    }
    OCSP_RESPONSE *r = d2i_OCSP_RESPONSE_bio(b, NULL);
    BIO_free(b);
    const char *bad = NULL;
    OCSP_BASICRESP *basic = NULL;
    OCSP_CERTID *id = NULL;
    int status = 0, reason = 0;
    ASN1_GENERALIZEDTIME *rev = NULL, *thisupd = NULL, *nextupd = NULL;
    if (r == NULL) {
        bad = "not a DER OCSP response";
    } else if (OCSP_response_status(r) != OCSP_RESPONSE_STATUS_SUCCESSFUL) {
        bad = OCSP_response_status_str(OCSP_response_status(r));
    } else if ((basic = OCSP_response_get1_basic(r)) == NULL) {
        bad = "no basic response in it";
    } else if (issuer == NULL || (id = OCSP_cert_to_id(NULL, leaf, issuer)) == NULL) {
        bad = "the certificate's issuer is unknown, so the response cannot be matched to it";
    } else if (OCSP_resp_find_status(basic, id, &status, &reason, &rev, &thisupd, &nextupd) != 1) {
        bad = "it is not about this certificate";
    } else if (status != V_OCSP_CERTSTATUS_GOOD) {
        bad = status == V_OCSP_CERTSTATUS_REVOKED ? "it says the certificate is revoked"
                                                  : "it says the certificate's status is unknown";
    } else if (OCSP_check_validity(thisupd, nextupd, 300, -1) != 1) {
        bad = "it is out of date (or not yet valid)";
    }
    if (bad == NULL) {
        unsigned char *der = NULL;
        int len = i2d_OCSP_RESPONSE(r, &der);
        if (len <= 0) {
            bad = "cannot encode it again";
        } else {
            c->ocsp = malloc((size_t)len);
            if (c->ocsp == NULL) {
                ld->oom = true;
            } else {
                memcpy(c->ocsp, der, (size_t)len);
                c->ocsp_len = (size_t)len;
            }
            OPENSSL_free(der);
        }
    }
    OCSP_CERTID_free(id);
    OCSP_BASICRESP_free(basic);
    OCSP_RESPONSE_free(r);
    ERR_clear_error();
    if (bad != NULL) {
        dm_conf_fail_at(ld, n, "ocsp %s: %s", path, bad);
        return false;
    }
    return true;
}

/* ---- listener tls: ---- */

enum {
    TL_CERT,
    TL_KEY,
    TL_OCSP,
    TL_CERTIFICATES,
    TL_MIN_VERSION,
    TL_MAX_VERSION,
    TL_CIPHERS,
    TL_CIPHERSUITES,
    TL_CURVES,
    TL_STRICT_SNI,
    TL_TICKETS,
    TL_TICKET_ROTATE,
    TL_CLIENT_CA,
    TL_VERIFY_CLIENT,
    TL_SUBJECT_HEADER,
    TL_N
};
static const char *const tls_keys[TL_N] = {
    [TL_CERT] = "cert",
    [TL_KEY] = "key",
    [TL_OCSP] = "ocsp",
    [TL_CERTIFICATES] = "certificates",
    [TL_MIN_VERSION] = "min_version",
    [TL_MAX_VERSION] = "max_version",
    [TL_CIPHERS] = "ciphers",
    [TL_CIPHERSUITES] = "ciphersuites",
    [TL_CURVES] = "curves",
    [TL_STRICT_SNI] = "strict_sni",
    [TL_TICKETS] = "tickets",
    [TL_TICKET_ROTATE] = "ticket_rotate",
    [TL_CLIENT_CA] = "client_ca",
    [TL_VERIFY_CLIENT] = "verify_client",
    [TL_SUBJECT_HEADER] = "client_subject_header",
};

enum { CE_CERT, CE_KEY, CE_OCSP, CE_NAMES, CE_N };
static const char *const cert_keys[CE_N] = {
    [CE_CERT] = "cert",
    [CE_KEY] = "key",
    [CE_OCSP] = "ocsp",
    [CE_NAMES] = "names",
};

/* What every context of a listener shares: versions, ciphers, tickets, client certificates. */
struct tls_common {
    int min_version, max_version;
    const char *ciphers, *ciphersuites, *curves;
    const yaml_node_t *ciphers_at, *ciphersuites_at, *curves_at;
    bool tickets;
    uint64_t rotate_ms;
    const char *client_ca;
    const yaml_node_t *client_ca_at;
    STACK_OF(X509_NAME) * ca_names;
    /* The session id context: a session resumes only where it was made with
     * the same client certificate rules (sid_of). */
    unsigned char sid[32];
};

static const char *const version_names[] = { "1.2", "1.3" };
static const int version_codes[] = { TLS1_2_VERSION, TLS1_3_VERSION };

/*
 * The session id context of a listener: a digest of its address and of
 * what its client certificates must be (the verify mode, the CA file's
 * bytes, the header), so that a ticket made where no certificate was asked
 * for, or under other CAs, never resumes here (OpenSSL refuses a session
 * of another context). A reload that changes none of them keeps resuming.
 */
static void
sid_of(struct tls_common *cm, const char *addr, const struct dm_conf_tls *t)
{
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    unsigned len = 0;
    if (md == NULL || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        EVP_MD_CTX_free(md);
        memset(cm->sid, 0, sizeof(cm->sid));
        return;
    }
    int verify = (int)t->verify;
    EVP_DigestUpdate(md, addr, strlen(addr) + 1);
    EVP_DigestUpdate(md, &verify, sizeof(verify));
    if (t->subject_header != NULL) {
        EVP_DigestUpdate(md, t->subject_header, strlen(t->subject_header));
    }
    FILE *f = cm->client_ca != NULL ? fopen(cm->client_ca, "rb") : NULL;
    if (f != NULL) {
        char buf[4096];
        size_t k;
        while ((k = fread(buf, 1, sizeof(buf), f)) > 0) {
            EVP_DigestUpdate(md, buf, k);
        }
        fclose(f);
    }
    EVP_DigestFinal_ex(md, cm->sid, &len);
    EVP_MD_CTX_free(md);
}

/*
 * The cipher, cipher suite and group lists, tried once on a scratch context:
 * each bad one is reported at its key and replaced by the default, so that
 * the certificates are still checked.
 */
static void
check_lists(struct dm_conf_loader *ld, struct tls_common *cm)
{
    char why[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        ld->oom = true;
        return;
    }
    if (SSL_CTX_set_cipher_list(ctx, cm->ciphers) != 1) {
        dm_conf_fail_at(ld, cm->ciphers_at, "ciphers \"%s\": %s", cm->ciphers,
                        ssl_why(why, sizeof(why), "no usable cipher"));
        cm->ciphers = DM_TLS_CIPHERS;
    }
    if (cm->ciphersuites != NULL && SSL_CTX_set_ciphersuites(ctx, cm->ciphersuites) != 1) {
        dm_conf_fail_at(ld, cm->ciphersuites_at, "ciphersuites \"%s\": %s", cm->ciphersuites,
                        ssl_why(why, sizeof(why), "no usable TLS 1.3 cipher suite"));
        cm->ciphersuites = NULL;
    }
    if (SSL_CTX_set1_groups_list(ctx, cm->curves) != 1) {
        dm_conf_fail_at(ld, cm->curves_at, "curves \"%s\": %s", cm->curves,
                        ssl_why(why, sizeof(why), "unknown group"));
        cm->curves = DM_TLS_GROUPS;
    }
    /* Known is not enough: one of them must be usable with the versions
     * allowed, at OpenSSL's security level (aNULL:eNULL up to TLS 1.2 passed,
     * and every handshake failed with "no shared cipher"). */
    SSL_CTX_set_min_proto_version(ctx, cm->min_version);
    SSL_CTX_set_max_proto_version(ctx, cm->max_version);
    SSL *ssl = SSL_new(ctx);
    STACK_OF(SSL_CIPHER) *usable = ssl != NULL ? SSL_get1_supported_ciphers(ssl) : NULL;
    if (cm->min_version > cm->max_version) {
        /* Reported as such already: no versions, no ciphers to speak of. */
    } else if (ssl == NULL) {
        ld->oom = true;
    } else if (usable == NULL || sk_SSL_CIPHER_num(usable) == 0) {
        const yaml_node_t *at = cm->max_version >= TLS1_3_VERSION && cm->ciphersuites_at != NULL
                                    ? cm->ciphersuites_at
                                : cm->ciphers_at != NULL ? cm->ciphers_at
                                                         : cm->ciphersuites_at;
        if (at != NULL) {
            dm_conf_fail_at(ld, at,
                            "tls: no cipher of ciphers \"%s\"%s%s%s can be used with "
                            "the versions allowed (min_version to max_version)",
                            cm->ciphers, cm->ciphersuites != NULL ? " and ciphersuites \"" : "",
                            cm->ciphersuites != NULL ? cm->ciphersuites : "",
                            cm->ciphersuites != NULL ? "\"" : "");
        }
    }
    sk_SSL_CIPHER_free(usable);
    SSL_free(ssl);
    SSL_CTX_free(ctx);
    ERR_clear_error();
}

/* A context with the shared settings; NULL after reporting. */
static SSL_CTX *
server_ctx(struct dm_conf_loader *ld, const yaml_node_t *at, const struct tls_common *cm,
           struct dm_conf_tls *t)
{
    char why[256];
    SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
    if (ctx == NULL) {
        dm_conf_fail_at(ld, at, "tls: %s", ssl_why(why, sizeof(why), "cannot make a context"));
        return NULL;
    }
    SSL_CTX_set_min_proto_version(ctx, cm->min_version);
    SSL_CTX_set_max_proto_version(ctx, cm->max_version);
    /* Client-initiated renegotiation is a known DoS and HTTP/1.1 has no use for it. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                 SSL_OP_NO_COMPRESSION);
    /* An idle connection keeps no record buffers (issue 13: idle TLS costs little). */
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    /* The lists were checked once for the block (check_lists): a bad one is left at the default. */
    if (SSL_CTX_set_cipher_list(ctx, cm->ciphers) != 1 ||
        (cm->ciphersuites != NULL && SSL_CTX_set_ciphersuites(ctx, cm->ciphersuites) != 1) ||
        SSL_CTX_set1_groups_list(ctx, cm->curves) != 1) {
        dm_conf_fail_at(ld, at, "tls: %s", ssl_why(why, sizeof(why), "cannot set the ciphers"));
        goto fail;
    }
    /* Resumption by tickets only (no per-process session cache to share). */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    SSL_CTX_set_session_id_context(ctx, cm->sid, sizeof(cm->sid));
    if (cm->tickets) {
        SSL_CTX_set_tlsext_ticket_key_evp_cb(ctx, ticket_cb);
        /* A session lives two rotations: a ticket made just before a rotation
         * is then still under one of the three keys kept. */
        SSL_CTX_set_timeout(ctx, (long)(2 * cm->rotate_ms / 1000));
    } else {
        SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
        SSL_CTX_set_num_tickets(ctx, 0);
    }
    SSL_CTX_set_tlsext_servername_callback(ctx, sni_cb);
    SSL_CTX_set_tlsext_servername_arg(ctx, t);
    SSL_CTX_set_alpn_select_cb(ctx, alpn_cb, t);
    if (cm->client_ca != NULL) {
        if (SSL_CTX_load_verify_locations(ctx, cm->client_ca, NULL) != 1) {
            dm_conf_fail_at(ld, cm->client_ca_at, "client_ca %s: %s", cm->client_ca,
                            ssl_why(why, sizeof(why), "no certificate in it"));
            goto fail;
        }
        STACK_OF(X509_NAME) *names = SSL_dup_CA_list(cm->ca_names);
        if (names == NULL) {
            ld->oom = true;
            goto fail;
        }
        SSL_CTX_set_client_CA_list(ctx, names);
        int mode = SSL_VERIFY_PEER | SSL_VERIFY_CLIENT_ONCE;
        if (t->verify == DM_TLS_VERIFY_REQUIRED) {
            mode |= SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
        }
        SSL_CTX_set_verify(ctx, t->verify == DM_TLS_VERIFY_OFF ? SSL_VERIFY_NONE : mode, NULL);
    }
    return ctx;
fail:
    SSL_CTX_free(ctx);
    return NULL;
}

/* One certificate entry: its files into c (ctx made, names, OCSP). */
static void
load_cert(struct dm_conf_loader *ld, const yaml_node_t *at, const yaml_node_t *cert_n,
          const yaml_node_t *key_n, const yaml_node_t *ocsp_n, const yaml_node_t *names_n,
          const struct tls_common *cm, X509_STORE *trusted, struct dm_conf_tls *t,
          struct dm_tls_cert *c)
{
    char why[256];
    const char *cert = cert_n != NULL ? dm_conf_get_text(ld, cert_n, "a path") : NULL;
    const char *key = key_n != NULL ? dm_conf_get_text(ld, key_n, "a path") : NULL;
    if (cert_n == NULL || key_n == NULL) {
        dm_conf_fail_at(ld, at, "tls: a certificate needs both cert and key");
        return;
    }
    if (cert == NULL || key == NULL) {
        return;
    }
    STACK_OF(X509) *chain = read_chain(ld, cert_n, cert);
    if (chain == NULL) {
        return;
    }
    X509 *leaf = sk_X509_value(chain, 0);
    X509 *issuer = NULL;
    if (!check_chain(ld, cert_n, cert, chain, trusted, &issuer)) {
        goto done;
    }
    warn_dates(ld, cert_n, cert, leaf);
    c->ctx = server_ctx(ld, at, cm, t);
    if (c->ctx == NULL) {
        goto done;
    }
    if (SSL_CTX_use_certificate_chain_file(c->ctx, cert) != 1) {
        dm_conf_fail_at(ld, cert_n, "cert %s: %s", cert,
                        ssl_why(why, sizeof(why), "cannot use the certificate"));
        goto done;
    }
    if (!readable(ld, key_n, "key", key)) {
        goto done;
    }
    if (!use_key(ld, c->ctx, key_n, key, cert)) {
        goto done;
    }
    if (names_n != NULL) {
        size_t k;
        yaml_node_item_t *items = dm_conf_list_items(ld, names_n, &k);
        c->names = calloc(k + 1, sizeof(*c->names));
        if (c->names == NULL) {
            ld->oom = true;
            goto done;
        }
        for (size_t i = 0; i < k; i++) {
            const yaml_node_t *item = dm_conf_node(ld, items[i]);
            const char *s = dm_conf_get_text(ld, item, "a host name");
            if (s == NULL) {
                continue;
            }
            bool ok = strcspn(s, " \t/:@") == strlen(s) && strchr(s + (s[0] == '*'), '*') == NULL &&
                      (s[0] != '*' || s[1] == '.');
            if (!ok) {
                dm_conf_fail_at(ld, item, "names: \"%s\" is not a host name or \"*.domain\"", s);
                continue;
            }
            char *d = dm_conf_dup_str(ld, s);
            for (char *p = d; p != NULL && *p != 0; p++) {
                *p = (char)tolower((unsigned char)*p);
            }
            c->names[c->nnames++] = d;
        }
    } else if (!names_of(ld, leaf, c)) {
        goto done;
    }
    if (ocsp_n != NULL) {
        const char *ocsp = dm_conf_get_text(ld, ocsp_n, "a path");
        if (ocsp != NULL && load_ocsp(ld, ocsp_n, ocsp, leaf, issuer, c)) {
            SSL_CTX_set_tlsext_status_cb(c->ctx, ocsp_cb);
            SSL_CTX_set_tlsext_status_arg(c->ctx, c);
        }
    }
done:
    X509_free(issuer);
    sk_X509_pop_free(chain, X509_free);
}

void
dm_conf_load_listener_tls(struct dm_conf_loader *ld, const yaml_node_t *n, const char *addr,
                          struct dm_conf_tls **out)
{
    yaml_node_t *v[TL_N];
    char why[256];
    if (!dm_conf_walk(ld, n, false, tls_keys, TL_N, v)) {
        return;
    }
    struct dm_conf_tls *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        ld->oom = true;
        return;
    }
    *out = t;
    struct tls_common cm = {
        .min_version = TLS1_2_VERSION,
        .max_version = TLS1_3_VERSION,
        .ciphers = DM_TLS_CIPHERS,
        .curves = DM_TLS_GROUPS,
        .tickets = true,
        .rotate_ms = 3600000,
    };
    int i;
    if (v[TL_MIN_VERSION] != NULL &&
        (i = dm_conf_get_choice(ld, v[TL_MIN_VERSION], "TLS version", version_names, 2)) >= 0) {
        cm.min_version = version_codes[i];
    }
    if (v[TL_MAX_VERSION] != NULL &&
        (i = dm_conf_get_choice(ld, v[TL_MAX_VERSION], "TLS version", version_names, 2)) >= 0) {
        cm.max_version = version_codes[i];
    }
    if (cm.min_version > cm.max_version) {
        dm_conf_fail_at(ld, v[TL_MIN_VERSION], "min_version is above max_version");
    }
    if (v[TL_CIPHERS] != NULL &&
        (cm.ciphers = dm_conf_get_text(ld, v[TL_CIPHERS], "a cipher list"))) {
        cm.ciphers_at = v[TL_CIPHERS];
    }
    if (cm.ciphers == NULL) {
        cm.ciphers = DM_TLS_CIPHERS;
    }
    if (v[TL_CIPHERSUITES] != NULL) {
        cm.ciphersuites = dm_conf_get_text(ld, v[TL_CIPHERSUITES], "a cipher suite list");
        cm.ciphersuites_at = v[TL_CIPHERSUITES];
    }
    if (v[TL_CURVES] != NULL && (cm.curves = dm_conf_get_text(ld, v[TL_CURVES], "a group list"))) {
        cm.curves_at = v[TL_CURVES];
    }
    if (cm.curves == NULL) {
        cm.curves = DM_TLS_GROUPS;
    }
    if (v[TL_STRICT_SNI] != NULL) {
        (void)dm_conf_get_bool(ld, v[TL_STRICT_SNI], &t->strict_sni);
    }
    if (v[TL_TICKETS] != NULL) {
        (void)dm_conf_get_bool(ld, v[TL_TICKETS], &cm.tickets);
    }
    if (v[TL_TICKET_ROTATE] != NULL) {
        (void)dm_conf_get_duration(ld, v[TL_TICKET_ROTATE], "ticket_rotate", false, &cm.rotate_ms);
        if (cm.rotate_ms < 1000) {
            dm_conf_fail_at(ld, v[TL_TICKET_ROTATE], "ticket_rotate must be at least 1s");
        }
    }
    if (v[TL_CLIENT_CA] != NULL) {
        cm.client_ca = dm_conf_get_text(ld, v[TL_CLIENT_CA], "a path");
        cm.client_ca_at = v[TL_CLIENT_CA];
        t->verify = DM_TLS_VERIFY_REQUIRED;
        if (cm.client_ca != NULL && !readable(ld, v[TL_CLIENT_CA], "client_ca", cm.client_ca)) {
            cm.client_ca = NULL;
        } else if (cm.client_ca != NULL) {
            cm.ca_names = SSL_load_client_CA_file(cm.client_ca);
            if (cm.ca_names == NULL) {
                dm_conf_fail_at(ld, v[TL_CLIENT_CA], "client_ca %s: %s", cm.client_ca,
                                ssl_why(why, sizeof(why), "no PEM certificate in it"));
                cm.client_ca = NULL;
            }
        }
    }
    if (v[TL_VERIFY_CLIENT] != NULL) {
        static const char *const modes[] = { "off", "optional", "required" };
        const yaml_node_t *m = v[TL_VERIFY_CLIENT];
        /* YAML reads a bare off as false: take it as the word. */
        i = m->type == YAML_SCALAR_NODE && dm_conf_is_off(m)
                ? 0
                : dm_conf_get_choice(ld, m, "verify_client", modes, 3);
        if (i > 0 && v[TL_CLIENT_CA] == NULL) {
            dm_conf_fail_at(ld, m, "verify_client %s needs client_ca (the CA file to verify with)",
                            modes[i]);
        }
        if (i >= 0) {
            t->verify = (enum dm_tls_verify)i;
        }
    }
    if (v[TL_SUBJECT_HEADER] != NULL) {
        const char *h = dm_conf_get_text(ld, v[TL_SUBJECT_HEADER], "a header name");
        if (h != NULL && !dm_conf_is_token(h)) {
            dm_conf_fail_at(ld, v[TL_SUBJECT_HEADER],
                            "client_subject_header \"%s\" is not a "
                            "header name",
                            h);
        } else if (h != NULL && dm_conf_header_is_ours(h)) {
            dm_conf_fail_at(ld, v[TL_SUBJECT_HEADER],
                            "client_subject_header \"%s\" is a field dimmer frames requests by "
                            "or writes itself (" DM_CONF_OURS_TEXT ")",
                            h);
        } else if (h != NULL) {
            t->subject_header = dm_conf_dup_str(ld, h);
        }
    }
    /* The certificates: one by cert/key/ocsp, or a list under certificates. */
    size_t k = 0;
    yaml_node_item_t *items = NULL;
    if (v[TL_CERTIFICATES] != NULL) {
        if (v[TL_CERT] != NULL || v[TL_KEY] != NULL || v[TL_OCSP] != NULL) {
            dm_conf_fail_at(ld, v[TL_CERTIFICATES],
                            "tls: give either cert and key, or certificates, not both");
        }
        items = dm_conf_list_items(ld, v[TL_CERTIFICATES], &k);
        if (k == 0) {
            dm_conf_fail_at(ld, v[TL_CERTIFICATES], "certificates: expected at least one");
        }
    } else if (v[TL_CERT] == NULL && v[TL_KEY] == NULL) {
        dm_conf_fail_at(ld, n, "tls: needs a certificate (cert and key, or certificates)");
    } else {
        k = 1;
    }
    check_lists(ld, &cm);
    sid_of(&cm, addr != NULL ? addr : "", t);
    if (k == 0) {
        sk_X509_NAME_pop_free(cm.ca_names, X509_NAME_free);
        return;
    }
    t->certs = calloc(k, sizeof(*t->certs));
    if (t->certs == NULL) {
        sk_X509_NAME_pop_free(cm.ca_names, X509_NAME_free);
        ld->oom = true;
        return;
    }
    X509_STORE *trusted = system_cas(ld); /* NULL: issuers only from the chains */
    for (size_t j = 0; j < k; j++) {
        struct dm_tls_cert *c = &t->certs[t->ncerts];
        if (items == NULL) {
            load_cert(ld, n, v[TL_CERT], v[TL_KEY], v[TL_OCSP], NULL, &cm, trusted, t, c);
        } else {
            const yaml_node_t *item = dm_conf_node(ld, items[j]);
            yaml_node_t *cv[CE_N];
            if (!dm_conf_walk(ld, item, false, cert_keys, CE_N, cv)) {
                continue;
            }
            load_cert(ld, item, cv[CE_CERT], cv[CE_KEY], cv[CE_OCSP], cv[CE_NAMES], &cm, trusted, t,
                      c);
        }
        if (c->ctx != NULL) {
            t->ncerts++;
        }
    }
    sk_X509_NAME_pop_free(cm.ca_names, X509_NAME_free);
    t->ticket_rotate_ms = cm.tickets ? cm.rotate_ms : 0;
    if (t->ncerts == 0 && !ld->oom) {
        /* Each failed certificate was reported; this is for a list with none at all. */
        dm_conf_fail_at(ld, n, "tls: no usable certificate");
    }
}

void
dm_conf_tls_apply(const struct dm_conf *c)
{
    /* The shortest ticket_rotate of the listeners: the keys are the process's. */
    uint64_t ms = 0;
    for (size_t i = 0; c->listener_tls != NULL && i < c->nlisteners; i++) {
        const struct dm_conf_tls *t = c->listener_tls[i];
        if (t != NULL && t->ticket_rotate_ms > 0 && (ms == 0 || t->ticket_rotate_ms < ms)) {
            ms = t->ticket_rotate_ms;
        }
    }
    if (ms > 0) {
        pthread_mutex_lock(&tickets.lock);
        tickets.rotate_ms = ms;
        pthread_mutex_unlock(&tickets.lock);
    }
}

void
dm_conf_tls_free(struct dm_conf_tls *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->ncerts; i++) {
        SSL_CTX_free(t->certs[i].ctx);
        for (size_t j = 0; j < t->certs[i].nnames; j++) {
            free(t->certs[i].names[j]);
        }
        free(t->certs[i].names);
        free(t->certs[i].ocsp);
    }
    free(t->certs);
    free(t->subject_header);
    free(t);
}

/* ---- pool tls: ---- */

enum { TP_CA, TP_VERIFY, TP_SNI, TP_CERT, TP_KEY, TP_MIN_VERSION, TP_CIPHERS, TP_N };
static const char *const pool_tls_keys[TP_N] = {
    [TP_CA] = "ca",           [TP_VERIFY] = "verify", [TP_SNI] = "sni",
    [TP_CERT] = "cert",       [TP_KEY] = "key",       [TP_MIN_VERSION] = "min_version",
    [TP_CIPHERS] = "ciphers",
};

void
dm_conf_load_pool_tls(struct dm_conf_loader *ld, const yaml_node_t *n,
                      struct dm_conf_tls_client **out)
{
    char why[256];
    yaml_node_t *v[TP_N] = { 0 };
    bool on = true;
    /* tls: true (or yes) is every default: the system's CAs, verified. */
    if (n->type == YAML_SCALAR_NODE && !dm_conf_is_null(n)) {
        if (!dm_conf_get_bool(ld, n, &on) || !on) {
            return;
        }
    } else if (!dm_conf_walk(ld, n, true, pool_tls_keys, TP_N, v)) {
        return;
    }
    struct dm_conf_tls_client *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        ld->oom = true;
        return;
    }
    *out = t;
    t->verify = true;
    if (v[TP_VERIFY] != NULL) {
        (void)dm_conf_get_bool(ld, v[TP_VERIFY], &t->verify);
    }
    if (v[TP_SNI] != NULL) {
        const char *s = dm_conf_get_text(ld, v[TP_SNI], "a host name");
        if (s != NULL && strcspn(s, " \t/:@*") != strlen(s)) {
            dm_conf_fail_at(ld, v[TP_SNI], "sni \"%s\" is not a host name", s);
        } else if (s != NULL) {
            t->sni = dm_conf_dup_str(ld, s);
        }
    }
    int version = TLS1_2_VERSION, i;
    if (v[TP_MIN_VERSION] != NULL &&
        (i = dm_conf_get_choice(ld, v[TP_MIN_VERSION], "TLS version", version_names, 2)) >= 0) {
        version = version_codes[i];
    }
    if ((v[TP_CERT] == NULL) != (v[TP_KEY] == NULL)) {
        dm_conf_fail_at(ld, n, "tls: a client certificate needs both cert and key");
    }
    const char *ca =
        v[TP_CA] != NULL ? dm_conf_get_text(ld, v[TP_CA], "a path or \"system\"") : NULL;
    const char *cert = v[TP_CERT] != NULL ? dm_conf_get_text(ld, v[TP_CERT], "a path") : NULL;
    const char *key = v[TP_KEY] != NULL ? dm_conf_get_text(ld, v[TP_KEY], "a path") : NULL;
    const char *ciphers =
        v[TP_CIPHERS] != NULL ? dm_conf_get_text(ld, v[TP_CIPHERS], "a cipher list") : NULL;
    SSL_CTX *ctx = t->ctx = SSL_CTX_new(TLS_client_method());
    if (ctx == NULL) {
        dm_conf_fail_at(ld, n, "tls: %s", ssl_why(why, sizeof(why), "cannot make a context"));
        return;
    }
    SSL_CTX_set_min_proto_version(ctx, version);
    SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
    SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);
    /* Sessions are kept by the proxy, one per server and worker (proxy/tls.c). */
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_CLIENT | SSL_SESS_CACHE_NO_INTERNAL_STORE);
    static const unsigned char alpn[] = "\x08http/1.1";
    SSL_CTX_set_alpn_protos(ctx, alpn, sizeof(alpn) - 1);
    if (ciphers != NULL && SSL_CTX_set_cipher_list(ctx, ciphers) != 1) {
        dm_conf_fail_at(ld, v[TP_CIPHERS], "ciphers \"%s\": %s", ciphers,
                        ssl_why(why, sizeof(why), "no usable cipher"));
    }
    if (ca == NULL || strcmp(ca, "system") == 0) {
        X509_STORE *cas = system_cas(ld);
        if (cas == NULL) {
            dm_conf_fail_at(ld, v[TP_CA] != NULL ? v[TP_CA] : n, "ca: %s",
                            ssl_why(why, sizeof(why), "cannot load the system's CAs"));
            return;
        }
        SSL_CTX_set1_cert_store(ctx, cas);
    } else if (!readable(ld, v[TP_CA], "ca", ca)) {
        /* reported */
    } else if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
        dm_conf_fail_at(ld, v[TP_CA], "ca %s: %s", ca,
                        ssl_why(why, sizeof(why), "no PEM certificate in it"));
    }
    SSL_CTX_set_verify(ctx, t->verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
    if (cert != NULL && key != NULL && readable(ld, v[TP_CERT], "cert", cert) &&
        readable(ld, v[TP_KEY], "key", key)) {
        if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
            dm_conf_fail_at(ld, v[TP_CERT], "cert %s: %s", cert,
                            ssl_why(why, sizeof(why), "cannot use the certificate"));
        } else if (use_key(ld, ctx, v[TP_KEY], key, cert)) {
            warn_dates(ld, v[TP_CERT], cert, SSL_CTX_get0_certificate(ctx));
        }
    }
    ERR_clear_error();
}

const char *
dm_tls_client_name(const struct dm_conf_tls_client *t, const char *addr, char *buf, size_t size)
{
    if (t->sni != NULL) {
        return t->sni;
    }
    if (addr == NULL || addr[0] == '[') {
        return NULL; /* [v6]:port */
    }
    const char *colon = strrchr(addr, ':');
    size_t len = colon != NULL ? (size_t)(colon - addr) : strlen(addr);
    if (len == 0 || len >= size) {
        return NULL;
    }
    memcpy(buf, addr, len);
    buf[len] = 0;
    struct in_addr a4;
    if (inet_pton(AF_INET, buf, &a4) == 1 || strcmp(buf, "*") == 0) {
        return NULL;
    }
    return buf;
}

void
dm_conf_tls_client_free(struct dm_conf_tls_client *t)
{
    if (t == NULL) {
        return;
    }
    SSL_CTX_free(t->ctx);
    free(t->sni);
    free(t);
}
