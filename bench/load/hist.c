/*
 * Log-linear latency histograms (the bucket layout is at the top of hist.h).
 *
 * A value v has bucket ((k - 7) << 7) + (v >> (k - 7)), where k is the index
 * of v's highest set bit, taken from v | 128 so that every v < 256 has k = 7
 * and is its own bucket. For k >= 8, v >> (k - 7) is in [128, 256): its low 7
 * bits pick one of the range's 128 buckets, and the range starts at bucket
 * (k - 6) << 7, just past the one before it.
 */
#include "bench/load/hist.h"

#include <stddef.h>
#include <string.h>

_Static_assert(sizeof(struct dm_hist) == 35872, "hist.h states the size of struct dm_hist");
_Static_assert(DM_HIST_BUCKETS == 4480, "hist.h states the number of buckets");

static size_t
hist_index(uint64_t v)
{
    if (v > DM_HIST_TOP) {
        v = DM_HIST_TOP;
    }
    unsigned shift = (unsigned)(63 - __builtin_clzll(v | DM_HIST_SUB)) - DM_HIST_SUB_BITS;
    return ((size_t)shift << DM_HIST_SUB_BITS) + (size_t)(v >> shift);
}

/* The smallest value of bucket i, and its width in *width. */
static uint64_t
hist_bucket_low(size_t i, uint64_t *width)
{
    if (i < 2 * DM_HIST_SUB) {
        *width = 1;
        return i;
    }
    unsigned shift = (unsigned)(i >> DM_HIST_SUB_BITS) - 1;
    *width = UINT64_C(1) << shift;
    return (uint64_t)((i & (DM_HIST_SUB - 1)) + DM_HIST_SUB) << shift;
}

static uint64_t
add_saturating(uint64_t a, uint64_t b)
{
    uint64_t s;
    return __builtin_add_overflow(a, b, &s) ? UINT64_MAX : s;
}

void
dm_hist_init(struct dm_hist *h)
{
    memset(h, 0, sizeof(*h));
}

void
dm_hist_add(struct dm_hist *h, uint64_t us)
{
    if (h->count == 0 || us < h->min) {
        h->min = us;
    }
    if (us > h->max) {
        h->max = us;
    }
    h->count++;
    h->sum = add_saturating(h->sum, us);
    h->_b[hist_index(us)]++;
}

void
dm_hist_merge(struct dm_hist *into, const struct dm_hist *from)
{
    if (from->count == 0) {
        return;
    }
    if (into->count == 0 || from->min < into->min) {
        into->min = from->min;
    }
    if (from->max > into->max) {
        into->max = from->max;
    }
    into->count += from->count;
    into->sum = add_saturating(into->sum, from->sum);
    for (size_t i = 0; i < DM_HIST_BUCKETS; i++) {
        into->_b[i] += from->_b[i];
    }
}

uint64_t
dm_hist_quantile(const struct dm_hist *h, double q)
{
    if (h->count == 0) {
        return 0;
    }
    if (!(q > 0)) {
        return h->min;
    }
    if (q >= 1) {
        return h->max;
    }
    /* rank = ceil(q * count), without libm; q < 1 keeps x below count. */
    double x = q * (double)h->count;
    uint64_t rank = (uint64_t)x;
    if ((double)rank < x) {
        rank++;
    }
    if (rank < 1) {
        rank = 1;
    }
    if (rank > h->count) {
        rank = h->count;
    }
    uint64_t seen = 0;
    size_t i = 0;
    for (; i < DM_HIST_BUCKETS - 1; i++) {
        seen += h->_b[i];
        if (seen >= rank) {
            break;
        }
    }
    /* The middle of the bucket: at most half its width, 1/256 of its values, from any of them. */
    uint64_t width, low = hist_bucket_low(i, &width);
    uint64_t v = low + (width - 1) / 2;
    if (v < h->min) {
        v = h->min;
    }
    if (v > h->max) {
        v = h->max;
    }
    return v;
}

double
dm_hist_mean(const struct dm_hist *h)
{
    return h->count > 0 ? (double)h->sum / (double)h->count : 0;
}
