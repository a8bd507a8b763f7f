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
#include <sys/socket.h>

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
