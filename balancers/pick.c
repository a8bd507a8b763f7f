/*
 * A pick past slow-start ramps and the rule of connection affinity
 * (balancer.h): the proxy's request path and the simulator both use them.
 */
#include "balancers/balancer.h"

#include <stddef.h>

enum { PASS_MAX = 16 }; /* ramps passed over at most; then the first one is taken */

static bool
ramp_full(const struct dm_server *s, uint64_t now_us)
{
    return dm_host_ramp_full(s->host, s->capacity, now_us);
}

int
dm_balancer_pick_past_ramps(struct dm_balancer *b, const struct dm_pick *in, uint8_t *tried)
{
    int passed[PASS_MAX];
    size_t npassed = 0;
    int idx = dm_balancer_pick(b, in);
    while (idx != DM_NO_SERVER && npassed < PASS_MAX && ramp_full(&b->sv->s[idx], in->now_us)) {
        passed[npassed++] = idx;
        tried[idx / 8] |= (uint8_t)(1u << (idx % 8));
        idx = dm_balancer_pick(b, in);
    }
    if (npassed > 0 && (idx == DM_NO_SERVER || npassed == PASS_MAX)) {
        idx = passed[0]; /* nobody else can: the ramp does not refuse */
    }
    /* The passed-over servers were not tried: a retry may still choose them. */
    for (size_t i = 0; i < npassed; i++) {
        tried[passed[i] / 8] &= (uint8_t) ~(1u << (passed[i] % 8));
    }
    return idx;
}

bool
dm_server_keeps_affinity(const struct dm_server *s, uint64_t now_us, bool spill_when_full)
{
    if (!dm_server_is_usable(s, now_us) || ramp_full(s, now_us)) {
        return false;
    }
    return !spill_when_full || dm_counter_get(&s->host->inflight) < s->capacity;
}

unsigned
dm_queue_class(uint64_t expected_bytes)
{
    if (expected_bytes < 128) {
        return 0;
    }
    unsigned top = 63 - (unsigned)__builtin_clzll(expected_bytes); /* 7 or more */
    unsigned half = (unsigned)(expected_bytes >> (top - 1)) & 1;
    unsigned cls = 2 * (top - 7) + half + 1;
    return cls < DM_QUEUE_CLASSES ? cls : DM_QUEUE_CLASSES - 1;
}

uint64_t
dm_queue_class_offset_us(unsigned cls, uint64_t queue_timeout_us)
{
    uint64_t smallest = 0;
    if (cls > 0) {
        cls = cls < DM_QUEUE_CLASSES ? cls : DM_QUEUE_CLASSES - 1;
        unsigned top = 7 + (cls - 1) / 2;
        smallest = (1ull << top) + ((cls - 1) % 2) * (1ull << (top - 1));
    }
    uint64_t cap = queue_timeout_us / 2;
    return smallest < cap ? smallest : cap;
}
