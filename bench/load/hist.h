/*
 * Latency histograms of dimmer-load, in microseconds: log-linear buckets as
 * in HdrHistogram, with a fixed size and no allocation, so each thread can
 * fill one per second of the run and hand it over to be merged.
 *
 * Buckets: values 0..255 each have their own bucket (exact). Above, each
 * range [2^k, 2^(k+1)), k = 8..40, is split into DM_HIST_SUB = 128 buckets of
 * width 2^(k-7), so a bucket is never wider than 1/128 of the values in it.
 * Values above DM_HIST_TOP (2^41 - 1 us, 25 days) are counted in the last
 * bucket (and in count, sum, max). A quantile is read as the middle of its
 * bucket, so it is within half a bucket of the exact one: relative error
 * <= 1/256 (0.4%), 0 below 256 us, and min and max are exact.
 *
 * Size: sizeof(struct dm_hist) = 35,872 bytes (4,480 uint64_t buckets and
 * four counters). Not thread-safe: one thread writes a histogram at a time.
 * Pure code (no clock, no I/O, no globals); an all-zero struct is empty.
 */
#ifndef DM_BENCH_LOAD_HIST_H
#define DM_BENCH_LOAD_HIST_H

#include <stdint.h>

#define DM_HIST_SUB_BITS 7
#define DM_HIST_SUB      (1u << DM_HIST_SUB_BITS)                /* buckets per power of two */
#define DM_HIST_TOP_BITS 41                                      /* values of up to 41 bits */
#define DM_HIST_TOP      ((UINT64_C(1) << DM_HIST_TOP_BITS) - 1) /* above: all in the last bucket */
#define DM_HIST_BUCKETS  ((DM_HIST_TOP_BITS - DM_HIST_SUB_BITS + 1) * DM_HIST_SUB) /* 4480 */

/* Caller-owned (embed it, or one per second in an array). */
struct dm_hist {
    uint64_t count; /* values added */
    uint64_t min;   /* smallest value added, 0 when empty */
    uint64_t max;   /* largest value added, 0 when empty */
    uint64_t sum;   /* of the values added; stays at UINT64_MAX once it would overflow */
    uint64_t _b[DM_HIST_BUCKETS];
};

/* Empties h (the same as zeroing it). */
void dm_hist_init(struct dm_hist *h);

/* Counts one value of us microseconds: a few instructions, no branch on the bucket. */
void dm_hist_add(struct dm_hist *h, uint64_t us);

/*
 * Adds every value counted in from to into, as if each had been added to
 * into: buckets, count, sum, min and max. from is not changed; the thread
 * calling this must own into and see from's writes (hand it over first).
 */
void dm_hist_merge(struct dm_hist *into, const struct dm_hist *from);

/*
 * The value at quantile q (0.99 = p99): with n values, the one of rank
 * ceil(q * n) (1-based; rank 1 when that is 0) in sorted order, read as the
 * middle of its bucket clamped to [min, max], so within 1/256 of it (see the
 * top of this file). q <= 0 (and NaN) gives min, q >= 1 gives max, both
 * exact; 0 when h is empty. Walks the buckets: a few microseconds.
 */
uint64_t dm_hist_quantile(const struct dm_hist *h, double q);

/* sum / count, 0 when empty (wrong only once sum has saturated). */
double dm_hist_mean(const struct dm_hist *h);

#endif
