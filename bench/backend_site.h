#ifndef DM_BENCH_BACKEND_SITE_H
#define DM_BENCH_BACKEND_SITE_H

#include <stddef.h>
#include <stdint.h>

/*
 * The demo backend's content: a generated web site and the byte pattern behind every
 * synthetic body. Everything here is pure (no I/O, no clock, no globals), so the same
 * --seed and --pages give the same bytes on every run and on every backend. A site is
 * read-only once created: any thread may read it until dm_site_destroy().
 */

/* Byte i of every /bytes, /chunked, /close body and of every object body is
 * pattern[i % DM_PATTERN_PERIOD], where pattern[j] = ((j * 2654435761) >> 13) & 0xff.
 * The buffer holds DM_PATTERN_SPAN bytes past one period, so any slice of up to
 * DM_PATTERN_SPAN bytes starting at an offset below the period is contiguous. */
#define DM_PATTERN_PERIOD 65521u
#define DM_PATTERN_SPAN   65536u

struct dm_site;

/* Builds the site for `seed` with `pages` pages (1..DM_SITE_MAX_PAGES) and the pattern
 * buffer. Returns NULL when out of memory or when `pages` is out of range. Main thread. */
#define DM_SITE_MAX_PAGES 100000u
struct dm_site *dm_site_create(uint64_t seed, unsigned pages);

/* Frees everything dm_site_create() built; NULL is a no-op. */
void dm_site_destroy(struct dm_site *s);

/* Number of pages, /page/0.html .. /page/(n-1).html. */
unsigned dm_site_pages(const struct dm_site *s);

/* The index page: HTML linking every page. Owned by the site, valid until destroy. */
const char *dm_site_index(const struct dm_site *s, size_t *len);

/* Page `n` (< dm_site_pages()) as HTML. Owned by the site, valid until destroy. */
const char *dm_site_page(const struct dm_site *s, unsigned n, size_t *len);

/* The embedded objects of page `n`: one absolute path per line ("/obj/12.png\n"),
 * distinct, in order of first appearance in the HTML; `*count` gets the number of lines.
 * Owned by the site, valid until destroy. */
const char *dm_site_page_objects(const struct dm_site *s, unsigned n, size_t *len, unsigned *count);

/* The pattern buffer, DM_PATTERN_PERIOD + DM_PATTERN_SPAN bytes (see above). */
const unsigned char *dm_site_pattern(const struct dm_site *s);

/* Body size in bytes of object `id`, independent of seed and extension: a SPECweb99-like
 * class (35% 102..921 B, 50% 1..9 KiB, 14% 10..90 KiB, 1% 100..900 KiB) and one of nine
 * sizes in it, both from a hash of `id`. */
uint64_t dm_site_obj_size(uint64_t id);
#define DM_SITE_OBJ_MAX (9 * 1024 * 100) /* the largest dm_site_obj_size() */

#endif
