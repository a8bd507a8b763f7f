/*
 * SPECweb-style scoring (score.h).
 */
#include "bench/load/score.h"

#include <assert.h>
#include <stddef.h>

enum dm_score
dm_score(const struct dm_score_bounds *b, unsigned status, uint64_t us)
{
    static const struct dm_score_bounds defaults = DM_SCORE_DEFAULT_BOUNDS;
    if (b == NULL) {
        b = &defaults;
    }
    if (status == 0 || status >= 500) {
        return DM_SCORE_FAIL;
    }
    if (us < b->good_us) {
        return DM_SCORE_GOOD;
    }
    return us < b->tolerable_us ? DM_SCORE_TOLERABLE : DM_SCORE_FAIL;
}

const char *
dm_fail_kind_name(enum dm_fail_kind k)
{
    static const char *const names[DM_FAIL_KINDS] = {
        [DM_FAIL_SLOW] = "slow",       [DM_FAIL_CONNECT] = "connect", [DM_FAIL_RESET] = "reset",
        [DM_FAIL_TIMEOUT] = "timeout", [DM_FAIL_5XX] = "5xx",         [DM_FAIL_PARSE] = "parse",
    };
    return (unsigned)k < DM_FAIL_KINDS ? names[k] : "?";
}

void
dm_score_counts_add(struct dm_score_counts *c, enum dm_score s, enum dm_fail_kind kind_if_fail)
{
    switch (s) {
    case DM_SCORE_GOOD:
        c->good++;
        break;
    case DM_SCORE_TOLERABLE:
        c->tolerable++;
        break;
    case DM_SCORE_FAIL:
        assert((unsigned)kind_if_fail < DM_FAIL_KINDS);
        c->fail++;
        if ((unsigned)kind_if_fail < DM_FAIL_KINDS) { /* never out of bounds, even with NDEBUG */
            c->by_kind[kind_if_fail]++;
        }
        break;
    }
}

enum dm_score
dm_score_counts_record(struct dm_score_counts *c, const struct dm_score_bounds *b, unsigned status,
                       uint64_t us, enum dm_fail_kind no_response)
{
    enum dm_score s = dm_score(b, status, us);
    enum dm_fail_kind kind = DM_FAIL_SLOW;
    if (status == 0) {
        kind = no_response;
    } else if (status >= 500) {
        kind = DM_FAIL_5XX;
    }
    dm_score_counts_add(c, s, kind);
    return s;
}

void
dm_score_counts_merge(struct dm_score_counts *into, const struct dm_score_counts *from)
{
    into->good += from->good;
    into->tolerable += from->tolerable;
    into->fail += from->fail;
    for (size_t i = 0; i < DM_FAIL_KINDS; i++) {
        into->by_kind[i] += from->by_kind[i];
    }
}
