/*
 * dimmer-scanbench: how fast parsers/html_scan.c finds the embedded objects
 * of pages, fed the way the proxy feeds it (reads of -r bytes, 16 KiB by
 * default, one scanner per page).
 *
 * Without a directory it builds two page sets: the demo backend's site
 * (bench/backend_site.c, -p pages), first checked page by page against the
 * site's own object lists (the run fails on any difference), and -b "heavy"
 * pages of -m MiB each, dense markup like today's sites (nested divs with
 * classes, links, srcset images, inline scripts and styles, comments). With
 * a directory, every regular file in it is one page. Each set is scanned -n
 * times; the figure is page bytes per second of wall time, next to a plain
 * memchr('<') over the same reads for scale.
 */
#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bench/backend_site.h"
#include "parsers/html_scan.h"

#define PAGE_HOST "127.0.0.1:8081"

struct page {
    char *html;
    size_t len;
    char path[300];
    bool owned;
};

struct set {
    const char *name;
    struct page *page;
    size_t n, cap;
    uint64_t bytes;
};

struct buf {
    char *p;
    size_t len, cap;
};

static void
die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "dimmer-scanbench: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
buf_printf(struct buf *b, const char *fmt, ...)
{
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            die("vsnprintf failed");
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 1 << 16;
        while (cap - b->len <= (size_t)n) {
            cap *= 2;
        }
        b->p = realloc(b->p, cap);
        if (!b->p) {
            die("out of memory");
        }
        b->cap = cap;
    }
}

static void
set_add(struct set *s, char *html, size_t len, const char *path, bool owned)
{
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 64;
        s->page = realloc(s->page, s->cap * sizeof *s->page);
        if (!s->page) {
            die("out of memory");
        }
    }
    struct page *p = &s->page[s->n++];
    p->html = html;
    p->len = len;
    p->owned = owned;
    snprintf(p->path, sizeof p->path, "%s", path);
    s->bytes += len;
}

static void
set_free(struct set *s)
{
    for (size_t i = 0; i < s->n; i++) {
        if (s->page[i].owned) {
            free(s->page[i].html);
        }
    }
    free(s->page);
}

static uint64_t
rng_next(uint64_t *s)
{
    uint64_t x = (*s += 0x9e3779b97f4a7c15u);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static unsigned
below(uint64_t *s, unsigned n)
{
    return (unsigned)(rng_next(s) % n);
}

static const char *const words[] = {
    "power", "server", "cluster", "load",  "request", "energy", "balance", "sleep", "wake",
    "proxy", "object", "page",    "trend", "growth",  "watt",   "idle",    "peak",  "latency",
};

static void
words_out(struct buf *b, uint64_t *r, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        buf_printf(b, "%s%s", i ? " " : "", words[below(r, sizeof words / sizeof words[0])]);
    }
}

/* A dense page: the markup-to-text ratio of a news or shop front page. */
static void
heavy_page(struct buf *b, uint64_t *r, size_t size)
{
    buf_printf(b, "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<title>heavy</title>\n");
    for (unsigned i = 0; i < 12; i++) {
        buf_printf(b, "<link rel=\"stylesheet\" href=\"/assets/css/c%u.css?v=%u\">\n", i,
                   below(r, 100000));
        buf_printf(b, "<script src=\"https://cdn.example.net/js/m%u.js\" defer></script>\n", i);
    }
    buf_printf(b, "</head><body class=\"home page-template\">\n");
    unsigned depth = 0;
    while (b->len < size) {
        switch (below(r, 12)) {
        case 0:
        case 1:
        case 2:
            buf_printf(b, "<div class=\"c-%u row col-md-%u\" id=\"n%u\" data-track=\"%u\">",
                       below(r, 500), below(r, 12), below(r, 1u << 20), below(r, 1000));
            depth++;
            break;
        case 3:
            if (depth) {
                buf_printf(b, "</div>\n");
                depth--;
            }
            break;
        case 4:
            buf_printf(b, "<a href=\"/p/%u.html\" class=\"link link--%u\" title=\"",
                       below(r, 90000), below(r, 9));
            words_out(b, r, 3);
            buf_printf(b, "\">");
            words_out(b, r, 2 + below(r, 4));
            buf_printf(b, "</a>\n");
            break;
        case 5: {
            unsigned id = below(r, 200000);
            buf_printf(
                b,
                "<img src=\"/media/%u/%u.jpg\" srcset=\"/media/%u/%u-480.jpg 480w, "
                "/media/%u/%u-960.jpg 960w, /media/%u/%u-1440.jpg 1440w\" sizes=\"(max-width:"
                " 600px) 480px, 960px\" alt=\"",
                id % 97, id, id % 97, id, id % 97, id, id % 97, id);
            words_out(b, r, 4);
            buf_printf(b, "\" loading=\"lazy\" width=\"%u\" height=\"%u\">\n", 100 + below(r, 900),
                       100 + below(r, 900));
            break;
        }
        case 6:
            buf_printf(b, "<span class=\"t t-%u\">", below(r, 40));
            words_out(b, r, 3 + below(r, 10));
            buf_printf(b, "</span>");
            break;
        case 7:
            buf_printf(b, "<p>");
            words_out(b, r, 20 + below(r, 60));
            buf_printf(b, ".</p>\n");
            break;
        case 8:
            if (below(r, 6) == 0) {
                buf_printf(b,
                           "<script>\n(function(w,d){var a=[],i;for(i=0;i<%u;i++){if(a.length<i)"
                           "{a.push('<div class=\"x\">'+i+'</div>');}}w.q=a;"
                           "d.addEventListener('load',function(){return i>2&&i<9;});})"
                           "(window,document);\n</script>\n",
                           below(r, 100));
            }
            break;
        case 9:
            if (below(r, 8) == 0) {
                buf_printf(b,
                           "<style>.c-%u{margin:0 auto;background:url(/bg/%u.png)}"
                           ".c-%u>a:hover{color:#%06x}</style>\n",
                           below(r, 500), below(r, 50), below(r, 500), below(r, 1u << 24));
            }
            break;
        case 10:
            buf_printf(b, "<ul class=\"menu\">");
            for (unsigned i = 0, n = 2 + below(r, 6); i < n; i++) {
                buf_printf(b, "<li class=\"menu-item\"><a href=\"/c/%u\">", below(r, 300));
                words_out(b, r, 1 + below(r, 2));
                buf_printf(b, "</a></li>");
            }
            buf_printf(b, "</ul>\n");
            break;
        default:
            buf_printf(b,
                       "<!-- block %u --><button type=\"button\" class=\"btn\" "
                       "aria-label=\"close\" onclick=\"f(this)\">x</button>\n",
                       below(r, 1000));
            break;
        }
    }
    while (depth--) {
        buf_printf(b, "</div>");
    }
    buf_printf(b, "\n</body></html>\n");
}

/* --- Checking the site against its own object lists --------------------- */

struct seen {
    char url[64][128];
    unsigned n;
    unsigned objects;
    bool overflow;
};

static void
seen_cb(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
        enum dm_html_kind kind)
{
    struct seen *s = arg;
    (void)kind;
    s->objects++;
    char u[128];
    int n = snprintf(u, sizeof u, "%.*s%.*s", (int)host_len, host, (int)path_len, path);
    if (n < 0 || (size_t)n >= sizeof u) {
        s->overflow = true;
        return;
    }
    for (unsigned i = 0; i < s->n; i++) {
        if (strcmp(s->url[i], u) == 0) {
            return;
        }
    }
    if (s->n == sizeof s->url / sizeof s->url[0]) {
        s->overflow = true;
        return;
    }
    memcpy(s->url[s->n++], u, (size_t)n + 1);
}

static void
scan_page(const struct page *pg, size_t rd, dm_html_object_cb cb, void *arg)
{
    struct dm_html_scan s;
    dm_html_scan_init(&s, PAGE_HOST, pg->path, 0);
    for (size_t off = 0; off < pg->len; off += rd) {
        size_t n = pg->len - off < rd ? pg->len - off : rd;
        dm_html_scan_feed(&s, pg->html + off, n, cb, arg);
    }
    dm_html_scan_finish(&s);
}

/* The scanner must find exactly each page's objects (in order of first
 * appearance) and none of its decoys. Returns the number of wrong pages. */
static unsigned
check_site(const struct dm_site *site, const struct set *set, size_t rd)
{
    unsigned bad = 0;
    for (size_t i = 0; i < set->n; i++) {
        struct seen seen = { .n = 0 };
        scan_page(&set->page[i], rd, seen_cb, &seen);
        size_t len;
        unsigned count;
        const char *list = dm_site_page_objects(site, (unsigned)i, &len, &count);
        struct buf got = { 0 };
        for (unsigned k = 0; k < seen.n; k++) {
            buf_printf(&got, "%s\n", seen.url[k]);
        }
        if (seen.overflow || got.len != len || (len && memcmp(got.p, list, len) != 0)) {
            if (bad < 3) {
                fprintf(stderr, "page %zu: found\n%.*swant\n%.*s", i, (int)got.len,
                        got.p ? got.p : "", (int)len, list);
            }
            bad++;
        }
        free(got.p);
    }
    return bad;
}

/* --- Timing -------------------------------------------------------------- */

static void
count_cb(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
         enum dm_html_kind kind)
{
    (void)host;
    (void)path;
    (void)kind;
    *(uint64_t *)arg += 1 + host_len + path_len; /* touch what a catalog would read */
}

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct timing {
    double scan_mbs, memchr_mbs;
    uint64_t objects; /* per pass */
};

static struct timing
time_set(const struct set *set, size_t rd, unsigned passes)
{
    struct timing t = { 0 };
    uint64_t sink = 0;
    for (size_t i = 0; i < set->n; i++) { /* warm the caches, count objects */
        struct dm_html_scan s;
        dm_html_scan_init(&s, PAGE_HOST, set->page[i].path, 0);
        for (size_t off = 0; off < set->page[i].len; off += rd) {
            size_t n = set->page[i].len - off < rd ? set->page[i].len - off : rd;
            dm_html_scan_feed(&s, set->page[i].html + off, n, count_cb, &sink);
        }
        dm_html_scan_finish(&s);
        t.objects += s.objects;
    }

    double t0 = now_s();
    for (unsigned k = 0; k < passes; k++) {
        for (size_t i = 0; i < set->n; i++) {
            scan_page(&set->page[i], rd, count_cb, &sink);
        }
    }
    double dt = now_s() - t0;
    t.scan_mbs = (double)set->bytes * passes / dt / 1e6;

    uint64_t lts = 0;
    t0 = now_s();
    for (unsigned k = 0; k < passes; k++) {
        for (size_t i = 0; i < set->n; i++) {
            const struct page *pg = &set->page[i];
            for (size_t off = 0; off < pg->len; off += rd) {
                const char *p = pg->html + off;
                const char *e = p + (pg->len - off < rd ? pg->len - off : rd);
                while ((p = memchr(p, '<', (size_t)(e - p))) != NULL) {
                    lts++;
                    p++;
                }
            }
        }
    }
    dt = now_s() - t0;
    t.memchr_mbs = (double)set->bytes * passes / dt / 1e6;
    if (sink == 42 && lts == 42) {
        printf(" "); /* keeps the work from being optimised away */
    }
    return t;
}

static void
load_dir(struct set *set, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        die("%s: %s", dir, strerror(errno));
    }
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat st;
        if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) {
            continue;
        }
        FILE *f = fopen(path, "rb");
        if (!f) {
            die("%s: %s", path, strerror(errno));
        }
        char *html = malloc(st.st_size ? (size_t)st.st_size : 1);
        if (!html || fread(html, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
            die("%s: cannot read", path);
        }
        fclose(f);
        char target[sizeof e->d_name + 1] = "/";
        memcpy(target + 1, e->d_name, strlen(e->d_name) + 1);
        set_add(set, html, (size_t)st.st_size, target, true);
    }
    closedir(d);
    if (set->n == 0) {
        die("%s: no files", dir);
    }
}

static void
report(const struct set *set, size_t rd, unsigned passes)
{
    struct timing t = time_set(set, rd, passes);
    printf("%-8s %9.1f %9zu %12llu %12.0f %14.0f\n", set->name, (double)set->bytes / 1e6, set->n,
           (unsigned long long)t.objects, t.scan_mbs, t.memchr_mbs);
}

static void
usage(void)
{
    fprintf(stderr, "usage: dimmer-scanbench [-n passes] [-r read_bytes] [-p site_pages]\n"
                    "                        [-b heavy_pages] [-m heavy_MiB] [-s seed] [dir]\n");
    exit(2);
}

int
main(int argc, char **argv)
{
    unsigned passes = 5, site_pages = 5000, heavy_pages = 4, heavy_mib = 4;
    size_t rd = 16384;
    uint64_t seed = 1;
    int opt;
    while ((opt = getopt(argc, argv, "n:r:p:b:m:s:h")) != -1) {
        switch (opt) {
        case 'n':
            passes = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'r':
            rd = (size_t)strtoul(optarg, NULL, 10);
            break;
        case 'p':
            site_pages = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'b':
            heavy_pages = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 'm':
            heavy_mib = (unsigned)strtoul(optarg, NULL, 10);
            break;
        case 's':
            seed = strtoull(optarg, NULL, 10);
            break;
        default:
            usage();
        }
    }
    if (passes == 0 || rd == 0 || argc - optind > 1) {
        usage();
    }

    printf("%-8s %9s %9s %12s %12s %14s\n", "set", "MB", "pages", "objects", "scan MB/s",
           "memchr MB/s");
    if (optind < argc) {
        struct set files = { .name = "files" };
        load_dir(&files, argv[optind]);
        report(&files, rd, passes);
        set_free(&files);
        return 0;
    }

    struct dm_site *site = site_pages ? dm_site_create(seed, site_pages) : NULL;
    if (site_pages && !site) {
        die("cannot build a site of %u pages", site_pages);
    }
    struct set sset = { .name = "site" };
    for (unsigned i = 0; i < site_pages; i++) {
        size_t len;
        const char *html = dm_site_page(site, i, &len);
        char target[64];
        snprintf(target, sizeof target, "/page/%u.html", i);
        set_add(&sset, (char *)html, len, target, false);
    }
    if (site) {
        unsigned bad = check_site(site, &sset, rd);
        if (bad) {
            fprintf(stderr, "dimmer-scanbench: %u of %u site pages gave the wrong objects\n", bad,
                    site_pages);
            return 1;
        }
        bad = check_site(site, &sset, 7); /* and in odd small reads */
        if (bad) {
            fprintf(stderr, "dimmer-scanbench: %u pages wrong in 7-byte reads\n", bad);
            return 1;
        }
    }

    struct set hset = { .name = "heavy" };
    uint64_t r = seed;
    for (unsigned i = 0; i < heavy_pages; i++) {
        struct buf b = { 0 };
        heavy_page(&b, &r, (size_t)heavy_mib << 20);
        char target[64];
        snprintf(target, sizeof target, "/heavy/%u.html", i);
        set_add(&hset, b.p, b.len, target, true);
    }

    if (sset.n) {
        report(&sset, rd, passes);
    }
    if (hset.n) {
        report(&hset, rd, passes);
    }
    printf("(reads of %zu bytes, %u passes; site pages checked against their object lists)\n", rd,
           passes);
    set_free(&hset);
    set_free(&sset);
    dm_site_destroy(site);
    return 0;
}
