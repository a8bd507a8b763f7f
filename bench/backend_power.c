/*
 * The power states of dimmer-backend (backend_power.h).
 *
 * A sleeping or booting machine serves nothing: the serving listener stays open, but
 * every connection it accepts is reset at once, unread (backend_conn.c counts them as
 * refused). A real suspended machine would not even answer the SYN; a reset is what a
 * test on one machine can see without waiting for a connect timeout. The control
 * listener, the Wake-on-LAN socket and the meter stay up in every state, as a BMC or a
 * NIC would.
 *
 * The agent reports as dimmer-agent does (power/report.h), with the model's power as
 * est_w and the serving connections open now as tcp, while awake or booting.
 */
#include "bench/backend_power.h"

#include <string.h>
#include <time.h>

#include "bench/backend_conn.h"

static uint64_t
now_us(void)
{
    return uv_hrtime() / 1000;
}

bool
dm_backend_power_is_awake(const struct dm_backend *be)
{
    return be->power.state == DM_BACKEND_AWAKE;
}

static double
watts(const struct dm_backend *be)
{
    const struct dm_backend_power *p = &be->power;
    if (p->state == DM_BACKEND_ASLEEP) {
        return p->asleep_w;
    }
    if (p->state == DM_BACKEND_BOOTING) {
        return p->booting_w;
    }
    /* --capacity 0 has no full load: 100 requests in service stand in for one. */
    double cap = be->queue.capacity ? (double)be->queue.capacity : 100.0;
    double load = (double)be->queue.in_service / cap;
    return p->idle_w + (p->full_w - p->idle_w) * (load < 1 ? load : 1);
}

static void
account_at(struct dm_backend *be, uint64_t t)
{
    struct dm_backend_power *p = &be->power;
    if (t > p->energy_us) {
        /* W x us -> Wh: / 1e6 s, / 3600 s per h. */
        p->energy_wh += watts(be) * (double)(t - p->energy_us) / 3.6e9;
        p->energy_us = t;
    }
}

void
dm_backend_power_account(struct dm_backend *be)
{
    account_at(be, now_us());
}

static const char *
state_name(enum dm_backend_power_state s)
{
    switch (s) {
    case DM_BACKEND_AWAKE:
        return "awake";
    case DM_BACKEND_ASLEEP:
        return "asleep";
    case DM_BACKEND_BOOTING:
        return "booting";
    }
    return "?";
}

struct dm_backend_power_reading
dm_backend_power_read(struct dm_backend *be)
{
    uint64_t t = now_us();
    account_at(be, t);
    struct dm_backend_power *p = &be->power;
    return (struct dm_backend_power_reading){
        .state = state_name(p->state),
        .for_ms = (t - p->since_us) / 1000,
        .watts = watts(be),
        .energy_wh = p->energy_wh,
    };
}

static void
enter(struct dm_backend *be, enum dm_backend_power_state s)
{
    uint64_t t = now_us();
    account_at(be, t);
    be->power.state = s;
    be->power.since_us = t;
}

/* ---- the agent ---- */

static uint64_t
unix_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void
on_agent_tick(uv_timer_t *t)
{
    struct dm_backend *be = t->data;
    struct dm_backend_power *p = &be->power;
    struct dm_report *r = &p->report;
    r->est_w = dm_backend_power_read(be).watts;
    r->has_measured = false;
    r->tcp = be->open;
    r->seq++;
    r->ts_ms = unix_ms();
    char dgram[DM_REPORT_MAX];
    size_t len = dm_report_encode(r, p->key, p->key_len, dgram, sizeof dgram);
    if (len > 0) {
        /* A datagram that does not go at once is dropped, as UDP may drop it anyway: the
         * proxy takes the next sequence number as well. */
        uv_buf_t b = uv_buf_init(dgram, (unsigned)len);
        uv_udp_try_send(&p->agent, &b, 1, (const struct sockaddr *)&p->agent_to);
    }
}

static void
agent_start(struct dm_backend *be)
{
    if (be->power.agent_on) {
        /* The first report at once, as dimmer-agent: the proxy hears of a wake early. */
        uv_timer_start(&be->power.agent_timer, on_agent_tick, 0, be->power.agent_interval_ms);
    }
}

/* ---- sleeping and waking ---- */

void
dm_backend_power_sleep(struct dm_backend *be)
{
    struct dm_backend_power *p = &be->power;
    if (p->state == DM_BACKEND_ASLEEP) {
        return;
    }
    enter(be, DM_BACKEND_ASLEEP);
    p->sleeps++;
    uv_timer_stop(&p->boot);
    uv_timer_stop(&p->agent_timer);
    for (struct dm_backend_conn *c = be->conns; c; c = c->next) {
        if (c->slot != DM_SLOT_NONE || c->r.started) {
            p->lost_at_sleep++;
        }
    }
    while (be->conns) {
        dm_backend_conn_reset(be->conns);
    }
}

static void
on_booted(uv_timer_t *t)
{
    enter(t->data, DM_BACKEND_AWAKE);
}

void
dm_backend_power_wake(struct dm_backend *be)
{
    struct dm_backend_power *p = &be->power;
    if (p->state != DM_BACKEND_ASLEEP) {
        return;
    }
    p->wakes++;
    if (p->boot_ms == 0) {
        enter(be, DM_BACKEND_AWAKE);
    } else {
        enter(be, DM_BACKEND_BOOTING);
        uv_timer_start(&p->boot, on_booted, p->boot_ms, 0);
    }
    agent_start(be);
}

/* ---- Wake-on-LAN ---- */

static void
on_wol_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    struct dm_backend *be = h->data;
    (void)suggested;
    *buf = uv_buf_init(be->power.wol_buf, sizeof be->power.wol_buf);
}

static void
on_wol_recv(uv_udp_t *u, ssize_t nread, const uv_buf_t *buf, const struct sockaddr *addr,
            unsigned flags)
{
    struct dm_backend *be = u->data;
    struct dm_backend_power *p = &be->power;
    if (nread < 0 || (nread == 0 && addr == NULL)) {
        return; /* an error, or nothing more to read: no datagram */
    }
    /* Exactly the magic packet of our MAC, as a NIC in WOL mode matches it. */
    if (nread == DM_WOL_PACKET && !(flags & UV_UDP_PARTIAL) &&
        memcmp(buf->base, p->magic, DM_WOL_PACKET) == 0) {
        dm_backend_power_wake(be);
    } else {
        p->wol_ignored++;
    }
}

int
dm_backend_power_wol_name(struct dm_backend *be, struct sockaddr_storage *ss)
{
    int len = sizeof *ss;
    return uv_udp_getsockname(&be->power.wol, (struct sockaddr *)ss, &len);
}

/* ---- starting and stopping ---- */

int
dm_backend_power_start(struct dm_backend *be)
{
    struct dm_backend_power *p = &be->power;
    uv_timer_init(be->loop, &p->boot);
    uv_timer_init(be->loop, &p->agent_timer);
    uv_udp_init(be->loop, &p->wol);
    uv_udp_init(be->loop, &p->agent);
    p->boot.data = p->agent_timer.data = p->wol.data = p->agent.data = be;
    p->started = true;
    p->state = p->start_asleep ? DM_BACKEND_ASLEEP : DM_BACKEND_AWAKE;
    p->since_us = p->energy_us = now_us();
    if (p->wol_on) {
        dm_wol_packet(p->mac, p->magic);
        int err = uv_udp_bind(&p->wol, (const struct sockaddr *)&p->wol_addr, 0);
        if (err == 0) {
            err = uv_udp_recv_start(&p->wol, on_wol_alloc, on_wol_recv);
        }
        if (err < 0) {
            return err;
        }
    }
    /* As dimmer-agent: sequence numbers start at the start time in
     * microseconds, so a restarted node goes on above the run before it
     * (dimmer drops a number not above the last it took: from 1, a node that
     * ran an hour was a replay for an hour after a restart). */
    p->report.seq = unix_ms() * 1000;
    if (!p->start_asleep) {
        agent_start(be);
    }
    return 0;
}

void
dm_backend_power_stop(struct dm_backend *be)
{
    struct dm_backend_power *p = &be->power;
    if (!p->started) {
        return;
    }
    p->started = false;
    uv_close((uv_handle_t *)&p->boot, NULL);
    uv_close((uv_handle_t *)&p->agent_timer, NULL);
    uv_close((uv_handle_t *)&p->wol, NULL);
    uv_close((uv_handle_t *)&p->agent, NULL);
}
