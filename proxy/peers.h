/*
 * Client connections per client address, for limits.max_conns_per_client:
 * one table for the whole process, shared by every worker under a mutex
 * (a connection to worker 0 and one to worker 1 from the same address
 * count together, as one HAProxy stick table tracks them). An address has
 * an entry only while it has a counted connection, so the table is bounded
 * by the open connections.
 */
#ifndef DM_PROXY_PEERS_H
#define DM_PROXY_PEERS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "balancers/hash.h"

/* A client address as a table key: a family byte, then 4 or 16 address bytes, zero padded. */
#define DM_PEER_KEY_LEN 17

/*
 * Fills key from sa's address (the port left out; an IPv4-mapped IPv6
 * address as the IPv4 one, so both ways in count together); false for a
 * family that is neither IPv4 nor IPv6. The per-client tables (this one,
 * proxy/rate.h's) key by it and hash it with dm_peer_hash().
 */
bool dm_peer_key(const struct sockaddr *sa, uint8_t key[DM_PEER_KEY_LEN]);

/*
 * The secret key of the tables whose keys clients choose (their addresses
 * here and in proxy/rate.h, session group ids): random for each process,
 * so that no client can aim its keys at one hash chain (with a known hash,
 * 65,536 addresses of one IPv6 /64 made one chain of the rate table, and
 * every lookup walked it). dm_hash_key_init() draws it, once, before any
 * table is used; until then it is zero (tests).
 */
extern struct dm_hash_secret dm_client_hash_key;
void dm_hash_key_init(void);

/* The hash of a table key under dm_client_hash_key. Any thread. */
uint64_t dm_peer_hash(const uint8_t key[DM_PEER_KEY_LEN]);

/*
 * Counts one more connection from sa's address (the port is ignored) and
 * returns true, unless it already has cap (> 0) connections: then false,
 * and nothing changes. On an allocation failure, or for a family other
 * than IPv4 and IPv6, it returns true counting nothing. *counted says
 * whether a dm_peers_release() is owed. Any thread.
 */
bool dm_peers_take(const struct sockaddr *sa, unsigned cap, bool *counted);

/* Counts one connection from sa's address less (one dm_peers_take counted). Any thread. */
void dm_peers_release(const struct sockaddr *sa);

/* Connections counted from sa's address now (tests, /stats). Any thread. */
unsigned dm_peers_count(const struct sockaddr *sa);

#endif
