/*
 * dimmer-backend as a power-managed machine: its power states (awake, asleep, booting)
 * and their changes, the power model and the energy it integrates, the Wake-on-LAN
 * receiver and the built-in agent. Loop thread only.
 *
 * Power model: asleep_w while asleep, booting_w while booting, and while awake
 *   idle_w + (full_w - idle_w) * min(1, in_service / capacity),
 * with capacity 100 standing in for --capacity 0 (unlimited). Only requests holding a
 * slot (in their service time) count, so a backend without service times draws idle_w.
 * Energy is integrated exactly: W x dt is added at every change of in_service or of
 * the state, and whenever it is read.
 */
#ifndef DM_BENCH_BACKEND_POWER_H
#define DM_BENCH_BACKEND_POWER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <uv.h>

#include "power/report.h"
#include "power/wol.h"

struct dm_backend;

enum dm_backend_power_state {
    DM_BACKEND_AWAKE,
    DM_BACKEND_ASLEEP,
    DM_BACKEND_BOOTING,
};

/* Embedded in struct dm_backend: main() sets the configuration, the rest starts zeroed. */
struct dm_backend_power {
    /* configuration */
    double idle_w, full_w, asleep_w, booting_w;
    uint64_t boot_ms;
    bool start_asleep;
    bool wol_on; /* a Wake-on-LAN receiver on wol_addr for mac */
    struct sockaddr_storage wol_addr;
    uint8_t mac[6];
    bool agent_on; /* reports to agent_to, signed with key, every agent_interval_ms */
    struct sockaddr_storage agent_to;
    uint8_t key[DM_REPORT_KEY_MAX];
    size_t key_len;
    uint64_t agent_interval_ms;
    struct dm_report report; /* name set by main(); the rest is the last report */

    /* state */
    enum dm_backend_power_state state;
    uint64_t since_us;  /* when the state began (uv_hrtime) */
    uint64_t energy_us; /* energy_wh is integrated up to here */
    double energy_wh;
    uint64_t refused;            /* serving connections reset while not awake */
    uint64_t lost_at_sleep;      /* requests queued or under way when it went to sleep */
    uint64_t requests_not_awake; /* request heads parsed while not awake */
    uint64_t sleeps, wakes;
    uint64_t wol_ignored; /* datagrams on the WOL port that were not our magic packet */
    bool started;
    uv_timer_t boot;
    uv_udp_t wol, agent;
    uv_timer_t agent_timer;
    uint8_t magic[DM_WOL_PACKET];
    char wol_buf[DM_WOL_PACKET + 1]; /* one more: a longer datagram is not a match */
};

/* A consistent reading of the meter, taken at one instant. */
struct dm_backend_power_reading {
    const char *state; /* "awake", "asleep", "booting" */
    uint64_t for_ms;   /* in that state for */
    double watts, energy_wh;
};

/*
 * Opens the power handles of be (timers; the WOL socket, bound; the agent's socket)
 * and enters the --start state: awake, with the agent reporting, or asleep. 0, or a
 * libuv error (the WOL address cannot be bound) after which dm_backend_power_stop()
 * still closes what was opened.
 */
int dm_backend_power_start(struct dm_backend *be);

/* Closes every handle dm_backend_power_start() opened. Idempotent. */
void dm_backend_power_stop(struct dm_backend *be);

/* Whether the node serves: awake, neither asleep nor booting. */
bool dm_backend_power_is_awake(const struct dm_backend *be);

/* Integrates energy up to now; call before anything the power depends on changes. */
void dm_backend_power_account(struct dm_backend *be);

/* The meter now (energy integrated up to this instant). */
struct dm_backend_power_reading dm_backend_power_read(struct dm_backend *be);

/*
 * To sleep as a suspended machine: every serving connection is reset at once (the
 * requests queued or under way on them count as lost_at_sleep), the listener refuses
 * from now on and the agent falls silent. A no-op when asleep already.
 */
void dm_backend_power_sleep(struct dm_backend *be);

/* Wakes an asleep node: booting for boot_ms, then awake. A no-op unless asleep. */
void dm_backend_power_wake(struct dm_backend *be);

/* The address of the WOL socket (after a successful start). 0 or a libuv error. */
int dm_backend_power_wol_name(struct dm_backend *be, struct sockaddr_storage *ss);

#endif
