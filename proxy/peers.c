#include "proxy/peers.h"

#include <assert.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include <uv.h>

#include "balancers/hash.h"

/*
 * A chained hash table of addresses with their connection counts. 4096
 * chains: a proxy with 10^6 connections from 10^6 addresses walks chains of
 * ~250, which is still far cheaper than the accept itself.
 */
#define NCHAINS 4096

struct peer {
    struct peer *next;
    uint8_t key[DM_PEER_KEY_LEN]; /* family byte, then 4 or 16 address bytes, zero padded */
    unsigned conns;
};

static struct peer *chains[NCHAINS];
static uv_mutex_t lock;
static uv_once_t lock_once = UV_ONCE_INIT;

static void
lock_init(void)
{
    if (uv_mutex_init(&lock) != 0) {
        abort(); /* at start-up: no limit can be kept without it */
    }
}

bool
dm_peer_key(const struct sockaddr *sa, uint8_t key[DM_PEER_KEY_LEN])
{
    static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
    memset(key, 0, DM_PEER_KEY_LEN);
    if (sa->sa_family == AF_INET) {
        key[0] = 4;
        memcpy(key + 1, &((const struct sockaddr_in *)sa)->sin_addr, 4);
        return true;
    }
    if (sa->sa_family == AF_INET6) {
        const uint8_t *a = ((const struct sockaddr_in6 *)sa)->sin6_addr.s6_addr;
        if (memcmp(a, mapped, sizeof(mapped)) == 0) {
            key[0] = 4;
            memcpy(key + 1, a + 12, 4);
            return true;
        }
        key[0] = 6;
        memcpy(key + 1, a, 16);
        return true;
    }
    return false;
}

struct dm_hash_secret dm_client_hash_key;

void
dm_hash_key_init(void)
{
    struct dm_hash_secret k;
    if (getrandom(&k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k)) {
        /* No entropy yet (early boot): what varies from run to run. */
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        k.k0 = dm_hash_mix((uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32));
        k.k1 = dm_hash_mix((uint64_t)ts.tv_sec ^ (uint64_t)(uintptr_t)&k);
    }
    dm_client_hash_key = k;
}

uint64_t
dm_peer_hash(const uint8_t key[DM_PEER_KEY_LEN])
{
    return dm_hash_keyed(&dm_client_hash_key, key, DM_PEER_KEY_LEN);
}

static size_t
peer_chain(const uint8_t key[DM_PEER_KEY_LEN])
{
    return (size_t)(dm_peer_hash(key) % NCHAINS);
}

/* The link that points at key's entry, or at the chain's end. Under lock. */
static struct peer **
peer_find(const uint8_t key[DM_PEER_KEY_LEN])
{
    struct peer **pp = &chains[peer_chain(key)];
    while (*pp != NULL && memcmp((*pp)->key, key, DM_PEER_KEY_LEN) != 0) {
        pp = &(*pp)->next;
    }
    return pp;
}

bool
dm_peers_take(const struct sockaddr *sa, unsigned cap, bool *counted)
{
    uint8_t key[DM_PEER_KEY_LEN];
    assert(cap > 0);
    *counted = false;
    if (!dm_peer_key(sa, key)) {
        return true;
    }
    uv_once(&lock_once, lock_init);
    uv_mutex_lock(&lock);
    struct peer **pp = peer_find(key);
    bool ok = true;
    if (*pp == NULL) {
        struct peer *p = calloc(1, sizeof(*p));
        if (p == NULL) {
            uv_mutex_unlock(&lock);
            return true; /* an allocation failure is no reason to refuse */
        }
        memcpy(p->key, key, sizeof(p->key));
        *pp = p;
    }
    if ((*pp)->conns >= cap) {
        ok = false;
    } else {
        (*pp)->conns++;
        *counted = true;
    }
    uv_mutex_unlock(&lock);
    return ok;
}

void
dm_peers_release(const struct sockaddr *sa)
{
    uint8_t key[DM_PEER_KEY_LEN];
    if (!dm_peer_key(sa, key)) {
        return;
    }
    uv_once(&lock_once, lock_init);
    uv_mutex_lock(&lock);
    struct peer **pp = peer_find(key);
    struct peer *p = *pp;
    if (p != NULL && --p->conns == 0) {
        *pp = p->next;
        free(p);
    }
    uv_mutex_unlock(&lock);
}

unsigned
dm_peers_count(const struct sockaddr *sa)
{
    uint8_t key[DM_PEER_KEY_LEN];
    if (!dm_peer_key(sa, key)) {
        return 0;
    }
    uv_once(&lock_once, lock_init);
    uv_mutex_lock(&lock);
    struct peer *p = *peer_find(key);
    unsigned n = p != NULL ? p->conns : 0;
    uv_mutex_unlock(&lock);
    return n;
}
