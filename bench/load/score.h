/*
 * SPECweb-style scoring of dimmer-load's requests: each request is GOOD,
 * TOLERABLE or FAIL by its status and its response time, and the counters
 * keep why each failure failed. Pure code (no clock, no I/O, no globals).
 */
#ifndef DM_BENCH_LOAD_SCORE_H
#define DM_BENCH_LOAD_SCORE_H

#include <stdint.h>

enum dm_score {
    DM_SCORE_GOOD = 0,  /* a response, in less than good_us */
    DM_SCORE_TOLERABLE, /* a response, in less than tolerable_us */
    DM_SCORE_FAIL,      /* no response, a 5xx, or tolerable_us or more */
};

/* Response-time bounds in microseconds; good_us <= tolerable_us. */
struct dm_score_bounds {
    uint64_t good_us;
    uint64_t tolerable_us;
};

#define DM_SCORE_GOOD_US      2000000 /* SPECweb's TIME_GOOD, 2 s */
#define DM_SCORE_TOLERABLE_US 4000000 /* SPECweb's TIME_TOLERABLE, 4 s */
/* An initializer: struct dm_score_bounds b = DM_SCORE_DEFAULT_BOUNDS; */
#define DM_SCORE_DEFAULT_BOUNDS                                                                    \
    {                                                                                              \
        .good_us = DM_SCORE_GOOD_US, .tolerable_us = DM_SCORE_TOLERABLE_US                         \
    }

/*
 * The score of a request that ended after us microseconds with HTTP status
 * status, 0 when there was no valid response (connect error, reset, timeout,
 * unparsable response). A status of 1..499 (4xx too: a valid response) is
 * GOOD when us < good_us, TOLERABLE when us < tolerable_us, else FAIL; status
 * 0 and 500 or more are FAIL whatever the time. So with the defaults 2 s
 * exactly is TOLERABLE and 4 s exactly is FAIL. b NULL: the default bounds.
 */
enum dm_score dm_score(const struct dm_score_bounds *b, unsigned status, uint64_t us);

/* Why a request failed. */
enum dm_fail_kind {
    DM_FAIL_SLOW = 0, /* a response, but tolerable_us or later */
    DM_FAIL_CONNECT,  /* the connection could not be made */
    DM_FAIL_RESET,    /* the connection closed or reset before a whole response */
    DM_FAIL_TIMEOUT,  /* the client gave up waiting */
    DM_FAIL_5XX,      /* a status of 500 or more, however fast */
    DM_FAIL_PARSE,    /* the response was not valid HTTP */
    DM_FAIL_KINDS     /* the number of kinds */
};

/* "slow", "connect", "reset", "timeout", "5xx", "parse"; "?" for others. */
const char *dm_fail_kind_name(enum dm_fail_kind k);

/* Counts of scores; an all-zero struct is empty. One writer at a time. */
struct dm_score_counts {
    uint64_t good, tolerable, fail;
    uint64_t by_kind[DM_FAIL_KINDS]; /* fail split by kind: they sum to fail */
};

/*
 * Counts one request scored s; kind_if_fail says why when s is
 * DM_SCORE_FAIL and is ignored otherwise (a kind out of range is asserted).
 */
void dm_score_counts_add(struct dm_score_counts *c, enum dm_score s,
                         enum dm_fail_kind kind_if_fail);

/*
 * Scores a request as dm_score() does, counts it and returns its score; a
 * failure's kind is DM_FAIL_5XX for status >= 500, no_response for status 0
 * (the caller knows whether it was a connect error, a reset, a timeout or a
 * bad response), else DM_FAIL_SLOW.
 */
enum dm_score dm_score_counts_record(struct dm_score_counts *c, const struct dm_score_bounds *b,
                                     unsigned status, uint64_t us, enum dm_fail_kind no_response);

/* Adds every counter of from to into; from is not changed. */
void dm_score_counts_merge(struct dm_score_counts *into, const struct dm_score_counts *from);

#endif
