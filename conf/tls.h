/*
 * TLS in the configuration: a listener's `tls:` block (termination) and a
 * pool's (TLS to its servers), loaded into OpenSSL contexts when the config
 * loads, so that every file is read and checked then: a key that does not
 * match its certificate, a chain that does not reach a trusted root, a
 * cipher list OpenSSL does not know, an OCSP response that is not for the
 * certificate are errors at their place in the file, `dimmer -t` reports
 * them, and a reload with one keeps the running configuration. The
 * contexts are immutable once loaded and shared by every worker (OpenSSL
 * contexts are thread-safe for SSL_new); the session ticket keys are the
 * process's, so that every worker and every generation of the config
 * resumes the others' sessions. See conf/README.md, "TLS".
 */
#ifndef DM_CONF_TLS_H
#define DM_CONF_TLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/ssl.h>

enum dm_tls_verify {
    DM_TLS_VERIFY_OFF,      /* no client certificate asked for */
    DM_TLS_VERIFY_OPTIONAL, /* asked for; one that is sent must verify */
    DM_TLS_VERIFY_REQUIRED, /* a verified client certificate or no handshake */
};

/* One certificate of a listener, with the names it answers for. */
struct dm_tls_cert {
    SSL_CTX *ctx;
    char **names; /* lower case; "*.example.com" matches one label */
    size_t nnames;
    unsigned char *ocsp; /* a DER OCSP response to staple, or NULL */
    size_t ocsp_len;
};

/* A listener's tls: block. */
struct dm_conf_tls {
    struct dm_tls_cert *certs; /* certs[0] is the default (no SNI, an unknown name) */
    size_t ncerts;
    bool strict_sni; /* no certificate for the name: refuse the handshake */
    enum dm_tls_verify verify;
    char *subject_header;      /* where the client certificate's subject goes; NULL: nowhere */
    uint64_t ticket_rotate_ms; /* 0: tickets off */
};

/* A pool's tls: block: how its connections to the servers are made. */
struct dm_conf_tls_client {
    SSL_CTX *ctx;
    char *sni;   /* the name sent and verified; NULL: the server address's host when it is a name */
    bool verify; /* verify the server's certificate (default true) */
};

/*
 * The SNI name to verify and send for a server of address text addr
 * ("host:port"), into buf: t->sni, else the host when it is not a numeric
 * address. NULL when there is none (then only the chain is verified).
 */
const char *dm_tls_client_name(const struct dm_conf_tls_client *t, const char *addr, char *buf,
                               size_t size);

/* The certificate of t for SNI name (NULL: none): exact, then wildcard, then the default. */
const struct dm_tls_cert *dm_tls_cert_for(const struct dm_conf_tls *t, const char *name);

/*
 * Makes c's ticket rotation the process's (the shortest of its listeners'):
 * once c is the running configuration, not when it merely loads (a reload
 * that fails changes nothing).
 */
struct dm_conf;
void dm_conf_tls_apply(const struct dm_conf *c);

/*
 * The process's session ticket keys as bytes (at most DM_TLS_TICKETS_MAX),
 * for the process that replaces it (SIGUSR2), so that its clients' tickets
 * still resume there: their length, 0 when there are none (or cap is short).
 * dm_tls_tickets_load() makes such bytes the process's keys, with their ages:
 * how many, or -1 when they are not such bytes (the keys stay as they were).
 */
#define DM_TLS_TICKETS_MAX 512
size_t dm_tls_tickets_save(unsigned char *buf, size_t cap);
int dm_tls_tickets_load(const unsigned char *buf, size_t len);

void dm_conf_tls_free(struct dm_conf_tls *t);
void dm_conf_tls_client_free(struct dm_conf_tls_client *t);

#endif
