/*
 * A SURGE-style web site for dimmer-sim (pure, part of dm_sim): pages with
 * embedded objects, SPECweb99 file sizes, Zipf popularity of the pages.
 *
 * File sizes: the SPECweb96/99 file mix. Four classes of nine files each,
 * class c file i (i = 1..9) of i * 102.4 * 10^c bytes, rounded down (102,
 * 204, ... 921; 1024 ... 9216; 10240 ... 92160; 102400 ... 921600). A class
 * is drawn with the benchmark's shares (35%, 50%, 14%, 1%), then a file in it
 * with SPECweb99's within-class shares, a Zipf-like peak on the fifth file
 * (3.9, 5.9, 8.8, 17.7, 35.3, 11.8, 7.1, 5.0, 4.4 %, normalised). The mean
 * is about 14.7 KB (dm_surge_size_mean()).
 *
 * Embedded objects per page: heavy-tailed as SURGE's (Barford and Crovella
 * 1998: Pareto with tail index 2.43), as a rounded Lomax (Pareto II) of that
 * tail index and a chosen mean, capped. SURGE's own mean (about 1.7, pages of
 * 1997) is a parameter here: dimmer-sim's age experiment uses 12.5, which
 * with SPECweb99 sizes gives page visits of about 200 KB, the AGE paper's
 * mean job.
 *
 * The site: every page and every object gets its size once, when the site is
 * built from a seed; a page's objects are its own (obj_bytes[first .. first +
 * n)). Page i is the i-th most popular (Zipf over the pages, exponent zipf).
 * A site is read-only once built: runs on several threads may share it.
 */
#ifndef DM_BENCH_SIM_SURGE_H
#define DM_BENCH_SIM_SURGE_H

#include <stddef.h>
#include <stdint.h>

#include "balancers/rng.h"
#include "bench/sim/sim.h"

#define DM_SURGE_CLASSES 4
#define DM_SURGE_FILES   9 /* per class */

/* Size in bytes of class cls (0..3), file file (0..8: the benchmark's 1..9). */
uint64_t dm_surge_file_bytes(unsigned cls, unsigned file);

/* Share of requests of class cls (the SPECweb mix), and of file file within its class. */
double dm_surge_class_share(unsigned cls);
double dm_surge_file_share(unsigned file);

/* A file size drawn from the SPECweb99 mix. */
uint64_t dm_surge_size(struct dm_rng *r);
/* Its exact mean, in bytes. */
double dm_surge_size_mean(void);

/*
 * Number of embedded objects of a page: round(Lomax(alpha, scale)) with the
 * scale mean * (alpha - 1), so that the uncapped mean is about mean (alpha >
 * 1, mean >= 0), at most max.
 */
unsigned dm_surge_objects(struct dm_rng *r, double mean, double alpha, unsigned max);

struct dm_surge_conf {
    size_t pages;         /* pages of the site (>= 1) */
    double zipf;          /* popularity exponent of the pages */
    double objects_mean;  /* embedded objects per page, before the cap */
    double objects_alpha; /* their tail index (> 1) */
    unsigned objects_max; /* the cap */
};

struct dm_surge_page {
    uint64_t bytes; /* the page itself */
    size_t first;   /* its objects are obj_bytes[first .. first + n) */
    unsigned n;
};

struct dm_surge_site {
    struct dm_surge_page *pages;
    size_t npages;
    uint64_t *obj_bytes;
    size_t nobjects;
    struct dm_sim_zipf popularity; /* rank i is page i */
};

/* Builds the site for seed; 0 or -ENOMEM (then nothing to fini). */
int dm_surge_site_init(struct dm_surge_site *s, const struct dm_surge_conf *cf, uint64_t seed);
void dm_surge_site_fini(struct dm_surge_site *s);

/* The page of the next visit, by popularity. */
static inline size_t
dm_surge_site_draw(const struct dm_surge_site *s, struct dm_rng *r)
{
    return dm_sim_zipf_draw(&s->popularity, r);
}

/*
 * Popularity-weighted means of one visit (a page and all its objects):
 * requests and bytes. The mean work of a visit at a per-request cost c is
 * bytes + c * requests.
 */
void dm_surge_site_visit_mean(const struct dm_surge_site *s, double *requests, double *bytes);

#endif
