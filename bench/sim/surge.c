#include "bench/sim/surge.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The SPECweb96/99 class mix. */
static const double class_share[DM_SURGE_CLASSES] = { 0.35, 0.50, 0.14, 0.01 };
/* SPECweb99's shares of the nine files within a class (sum 0.999: normalised when drawn). */
static const double file_share[DM_SURGE_FILES] = { 0.039, 0.059, 0.088, 0.177, 0.353,
                                                   0.118, 0.071, 0.050, 0.044 };

static double
file_share_sum(void)
{
    double s = 0;
    for (unsigned i = 0; i < DM_SURGE_FILES; i++) {
        s += file_share[i];
    }
    return s;
}

uint64_t
dm_surge_file_bytes(unsigned cls, unsigned file)
{
    if (cls >= DM_SURGE_CLASSES || file >= DM_SURGE_FILES) {
        return 0;
    }
    /* (file + 1) * 102.4 * 10^cls, in integers: (file + 1) * 1024 * 10^cls / 10. */
    uint64_t b = (uint64_t)(file + 1) * 1024;
    for (unsigned c = 0; c < cls; c++) {
        b *= 10;
    }
    return b / 10;
}

double
dm_surge_class_share(unsigned cls)
{
    return cls < DM_SURGE_CLASSES ? class_share[cls] : 0;
}

double
dm_surge_file_share(unsigned file)
{
    return file < DM_SURGE_FILES ? file_share[file] / file_share_sum() : 0;
}

uint64_t
dm_surge_size(struct dm_rng *r)
{
    double u = dm_sim_uniform(r);
    unsigned cls = 0;
    while (cls + 1 < DM_SURGE_CLASSES && u >= class_share[cls]) {
        u -= class_share[cls];
        cls++;
    }
    double v = dm_sim_uniform(r) * file_share_sum();
    unsigned file = 0;
    while (file + 1 < DM_SURGE_FILES && v >= file_share[file]) {
        v -= file_share[file];
        file++;
    }
    return dm_surge_file_bytes(cls, file);
}

double
dm_surge_size_mean(void)
{
    double m = 0;
    for (unsigned c = 0; c < DM_SURGE_CLASSES; c++) {
        for (unsigned f = 0; f < DM_SURGE_FILES; f++) {
            m += dm_surge_class_share(c) * dm_surge_file_share(f) *
                 (double)dm_surge_file_bytes(c, f);
        }
    }
    return m;
}

unsigned
dm_surge_objects(struct dm_rng *r, double mean, double alpha, unsigned max)
{
    if (!(mean > 0) || !(alpha > 1)) {
        return 0;
    }
    double scale = mean * (alpha - 1);
    double u = 1.0 - dm_sim_uniform(r); /* (0, 1] */
    double x = scale * (pow(u, -1.0 / alpha) - 1.0);
    double n = floor(x + 0.5);
    return n >= (double)max ? max : (unsigned)n;
}

int
dm_surge_site_init(struct dm_surge_site *s, const struct dm_surge_conf *cf, uint64_t seed)
{
    memset(s, 0, sizeof(*s));
    size_t np = cf->pages > 0 ? cf->pages : 1;
    struct dm_rng r;
    dm_rng_init(&r, seed);
    s->pages = calloc(np, sizeof(*s->pages));
    if (s->pages == NULL) {
        return -ENOMEM;
    }
    s->npages = np;
    size_t total = 0;
    for (size_t i = 0; i < np; i++) {
        s->pages[i].bytes = dm_surge_size(&r);
        s->pages[i].first = total;
        s->pages[i].n = dm_surge_objects(&r, cf->objects_mean, cf->objects_alpha, cf->objects_max);
        total += s->pages[i].n;
    }
    s->obj_bytes = malloc((total > 0 ? total : 1) * sizeof(*s->obj_bytes));
    if (s->obj_bytes == NULL) {
        goto fail;
    }
    s->nobjects = total;
    for (size_t k = 0; k < total; k++) {
        s->obj_bytes[k] = dm_surge_size(&r);
    }
    if (dm_sim_zipf_init(&s->popularity, np, cf->zipf) != 0) {
        goto fail;
    }
    return 0;

fail:
    free(s->obj_bytes);
    free(s->pages);
    memset(s, 0, sizeof(*s));
    return -ENOMEM;
}

void
dm_surge_site_fini(struct dm_surge_site *s)
{
    dm_sim_zipf_fini(&s->popularity);
    free(s->obj_bytes);
    free(s->pages);
    memset(s, 0, sizeof(*s));
}

void
dm_surge_site_visit_mean(const struct dm_surge_site *s, double *requests, double *bytes)
{
    double req = 0, b = 0, prev = 0;
    for (size_t i = 0; i < s->npages; i++) {
        double p = s->popularity.cdf[i] - prev;
        prev = s->popularity.cdf[i];
        const struct dm_surge_page *pg = &s->pages[i];
        double vb = (double)pg->bytes;
        for (unsigned k = 0; k < pg->n; k++) {
            vb += (double)s->obj_bytes[pg->first + k];
        }
        req += p * (1.0 + pg->n);
        b += p * vb;
    }
    *requests = req;
    *bytes = b;
}
