/*
 * Tests of parsers/html_scan.c: the URL resolver on its own, then the
 * scanner on the corpus in tests/parsers/html/ (NAME.html with NAME.expected:
 * directives, then one "kind url" line per object, url being the path, or
 * "//host" + path when the host is not the page's), on pages generated like
 * the demo backend's (bench/backend_site.c) with their decoys, and on
 * pathological input.
 *
 * Every page goes through scan_all(), which feeds it the way the proxy does:
 * from exactly sized heap copies (so ASan sees any read past their end),
 * whole, then split in two at every offset, then one byte per call. It fails
 * unless every way of feeding gives what the whole scan gave: the same
 * objects in the same order, and the same counters.
 *
 * .expected directives (default page: http://example.com/dir/page.html):
 *   page HOST PATH       the page's host and request target
 *   limit-after TEXT     limit = the offset just past the first TEXT
 *   limit-all            limit = the page's size
 *   stopped              the limit must cut the page (else it must not)
 *   dropped N            N URLs dropped as too long (else 0)
 */
#include "dm_test.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "parsers/html_scan.h"

#define CORPUS_DIR DM_TEST_DATA_DIR "/parsers/html"
#define PAGE_HOST  "example.com"
#define PAGE_PATH  "/dir/page.html"

/* A growing string of "kind url\n" lines. */
struct text {
    char *s;
    size_t len, cap;
};

static void
text_add(struct text *t, const char *p, size_t n)
{
    if (t->cap - t->len < n + 1) {
        size_t cap = t->cap ? t->cap : 256;
        while (cap - t->len < n + 1) {
            cap *= 2;
        }
        t->s = realloc(t->s, cap);
        assert_non_null(t->s);
        t->cap = cap;
    }
    memcpy(t->s + t->len, p, n);
    t->len += n;
    t->s[t->len] = '\0';
}

static void
text_adds(struct text *t, const char *s)
{
    text_add(t, s, strlen(s));
}

static void
text_fini(struct text *t)
{
    free(t->s);
    t->s = NULL;
    t->len = t->cap = 0;
}

static const char *
text_str(const struct text *t)
{
    return t->s ? t->s : "";
}

struct page_conf {
    const char *host;
    const char *path;
    uint64_t limit;
};

struct result {
    struct text objs;
    uint64_t scanned;
    unsigned objects, dropped, calls;
    bool stopped, complete;
};

static void
collect_cb(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
           enum dm_html_kind kind)
{
    struct result *r = arg;
    assert_true(path_len > 0);
    assert_int_equal(path[0], '/');
    assert_true(host_len < DM_HTML_SCAN_HOST_MAX);
    assert_true(memchr(path, '#', path_len) == NULL);
    r->calls++;
    text_adds(&r->objs, dm_html_kind_name(kind));
    text_adds(&r->objs, " ");
    if (host_len) {
        text_adds(&r->objs, "//");
        text_add(&r->objs, host, host_len);
    }
    text_add(&r->objs, path, path_len);
    text_adds(&r->objs, "\n");
}

/* Scans page[0, n) fed as the pieces between cuts[0] = 0 < ... < cuts[k] = n,
 * each from its own exactly sized heap copy. */
static void
scan_pieces(const struct page_conf *pc, const char *page, const size_t *cuts, size_t ncuts,
            struct result *r)
{
    struct dm_html_scan s;
    memset(r, 0, sizeof *r);
    dm_html_scan_init(&s, pc->host, pc->path, pc->limit);
    for (size_t i = 0; i + 1 < ncuts; i++) {
        size_t len = cuts[i + 1] - cuts[i];
        char *copy = malloc(len ? len : 1);
        assert_non_null(copy);
        memcpy(copy, page + cuts[i], len);
        dm_html_scan_feed(&s, copy, len, collect_cb, r);
        free(copy);
    }
    r->complete = dm_html_scan_finish(&s);
    /* Nothing happens after finish. */
    dm_html_scan_feed(&s, "<img src=late.png>", 18, collect_cb, r);
    r->scanned = s.scanned;
    r->objects = s.objects;
    r->dropped = s.dropped;
    r->stopped = s.stopped;
    assert_int_equal(r->objects, r->calls);
    assert_true(r->complete == !r->stopped);
}

static void
scan_whole(const struct page_conf *pc, const char *page, size_t n, struct result *r)
{
    size_t cuts[2] = { 0, n };
    scan_pieces(pc, page, cuts, 2, r);
}

static void
assert_same(const struct result *a, const struct result *b, const char *how, size_t at)
{
    if (strcmp(text_str(&a->objs), text_str(&b->objs)) != 0 || a->scanned != b->scanned ||
        a->objects != b->objects || a->dropped != b->dropped || a->stopped != b->stopped) {
        print_error("fed %s (%zu) gave:\n%s(scanned %llu, dropped %u, stopped %d)\n"
                    "whole gave:\n%s(scanned %llu, dropped %u, stopped %d)\n",
                    how, at, text_str(&b->objs), (unsigned long long)b->scanned, b->dropped,
                    b->stopped, text_str(&a->objs), (unsigned long long)a->scanned, a->dropped,
                    a->stopped);
        fail();
    }
}

/* Whole, split in two at every offset, one byte per call: all the same. */
static void
scan_all(const struct page_conf *pc, const char *page, size_t n, struct result *whole)
{
    struct result r;
    scan_whole(pc, page, n, whole);
    for (size_t k = 0; k <= n; k++) {
        size_t cuts[3] = { 0, k, n };
        scan_pieces(pc, page, cuts, 3, &r);
        assert_same(whole, &r, "split at", k);
        text_fini(&r.objs);
    }
    size_t *cuts = malloc((n + 1) * sizeof *cuts);
    assert_non_null(cuts);
    for (size_t i = 0; i <= n; i++) {
        cuts[i] = i;
    }
    scan_pieces(pc, page, cuts, n + 1, &r);
    assert_same(whole, &r, "bytewise", n);
    text_fini(&r.objs);
    free(cuts);
}

static const struct page_conf default_page = { PAGE_HOST, PAGE_PATH, 0 };

/* ------------------------------------------------------------------------ */
/* dm_url_resolve                                                           */
/* ------------------------------------------------------------------------ */

struct url_case {
    const char *base_host, *base_path, *ref;
    int rc;
    const char *host, *path;
};

static void
test_url_resolve_table(void **state)
{
    (void)state;
    static const struct url_case cases[] = {
        { "h", "/dir/page.html", "img.png", 0, "h", "/dir/img.png" },
        { "h", "/dir/page.html", "./a/../b.png", 0, "h", "/dir/b.png" },
        { "h", "/dir/page.html", "../x.png", 0, "h", "/x.png" },
        { "h", "/dir/page.html", "../../../x.png", 0, "h", "/x.png" },
        { "h", "/dir/page.html", "/abs.png", 0, "h", "/abs.png" },
        { "h", "/dir/page.html", "//other.host/p.png", 0, "other.host", "/p.png" },
        { "h", "/dir/page.html", "http://Host.Example/p.png", 0, "host.example", "/p.png" },
        { "h", "/dir/page.html", "https://s.example:443/p", 0, "s.example", "/p" },
        { "h", "/dir/page.html", "http://s.example:443/p", 0, "s.example:443", "/p" },
        { "h", "/dir/page.html", "http://s.example:0080/p", 0, "s.example", "/p" },
        { "h", "/dir/page.html", "http://s.example:/p", 0, "s.example", "/p" },
        { "h", "/dir/page.html", "//s.example:80/p", 0, "s.example", "/p" },
        { "h", "/dir/page.html", "//s.example:8080/p", 0, "s.example:8080", "/p" },
        { "h", "/dir/page.html", "http://[::1]:8080/p", 0, "[::1]:8080", "/p" },
        { "h", "/dir/page.html", "http://[::1/p", -EINVAL, NULL, NULL },
        { "h", "/dir/page.html", "http://u:p@s.example/p", 0, "s.example", "/p" },
        { "h", "/dir/page.html", "http://s.example", 0, "s.example", "/" },
        { "h", "/dir/page.html", "http://s.example?q", 0, "s.example", "/?q" },
        { "h", "/dir/page.html", "http:\\\\s.example\\a\\b", 0, "s.example", "/a/b" },
        { "h", "/dir/page.html", "q.png?a=1&b=2#frag", 0, "h", "/dir/q.png?a=1&b=2" },
        { "h", "/dir/page.html?x=1", "?y=2", 0, "h", "/dir/page.html?y=2" },
        { "h", "/dir/page.html?x=1", "#f", 0, "h", "/dir/page.html?x=1" },
        { "h", "/dir/page.html?x=1", "", 0, "h", "/dir/page.html?x=1" },
        { "h", "/dir/page.html?x=/y/z", "a.png", 0, "h", "/dir/a.png" },
        { "h", "/", "a.png", 0, "h", "/a.png" },
        { "h", "/a/b/", "c", 0, "h", "/a/b/c" },
        { "h", "/a/b/", "..", 0, "h", "/a/" },
        { "h", "/a/b/", "../", 0, "h", "/a/" },
        { "h", "/a/b/", ".", 0, "h", "/a/b/" },
        { "h", "/a/b/", "./", 0, "h", "/a/b/" },
        { "h", "/a/b/", "c/.", 0, "h", "/a/b/c/" },
        { "h", "/a/b/", "c/%2E%2e", 0, "h", "/a/b/" },
        { "h", "/a/b/", "c/.%2e/d", 0, "h", "/a/b/d" },
        { "h", "/a/b/", "c/...", 0, "h", "/a/b/c/..." },
        { "h", "/a/b/", "c/.x/..y", 0, "h", "/a/b/c/.x/..y" },
        { "h", "/a/b/", "/x//y/../z", 0, "h", "/x//z" },
        { "h", "/a", "a b\"<>`{}.png?q=a b\"'<>`", 0, "h",
          "/a%20b%22%3C%3E%60%7B%7D.png?q=a%20b%22%27%3C%3E`" },
        { "h", "/a", "x%20y.png", 0, "h", "/x%20y.png" },
        { "h", "/a", "\xc3\xa9.png", 0, "h", "/%C3%A9.png" },
        { "h", "/a", "  \x01 x.png \x1f ", 0, "h", "/x.png" },
        { "h", "/a", "x\t\n\ry.png", 0, "h", "/xy.png" },
        { "h", "/a", "ja\nvascript:alert(1)", -EINVAL, NULL, NULL },
        { "h", "/a", "data:image/png;base64,AAAA", -EINVAL, NULL, NULL },
        { "h", "/a", "javascript:void(0)", -EINVAL, NULL, NULL },
        { "h", "/a", "JavaScript:void(0)", -EINVAL, NULL, NULL },
        { "h", "/a", "about:blank", -EINVAL, NULL, NULL },
        { "h", "/a", "blob:http://h/uuid", -EINVAL, NULL, NULL },
        { "h", "/a", "mailto:x@y", -EINVAL, NULL, NULL },
        { "h", "/a", "http://", -EINVAL, NULL, NULL },
        { "h", "/a", "http:///x.example/p", 0, "x.example", "/p" },
        { "h", "/a", "//", -EINVAL, NULL, NULL },
        { "h", "/a", "http://a b/p", -EINVAL, NULL, NULL },
        { "h", "/a", "http://a:b/p", -EINVAL, NULL, NULL },
        { "h", "/a", "http://a:65536/p", -EINVAL, NULL, NULL },
        { "h", "/a", "http://a:65535/p", 0, "a:65535", "/p" },
        { "h", "/a", "1http://x/p", 0, "h", "/1http://x/p" },
        { "h", "/a", "c:\\x.png", -EINVAL, NULL, NULL },
        { "h", "/a", "x:y/z", -EINVAL, NULL, NULL },
        { "h", "/a", "./x:y", 0, "h", "/x:y" },
        { "", "/a/b", "c", 0, "", "/a/c" },
        { "h", NULL, "c", -ENOENT, NULL, NULL },
        { "h", NULL, "?q", -ENOENT, NULL, NULL },
        { "h", NULL, "/c", 0, "h", "/c" },
        { "h", NULL, "//o/c", 0, "o", "/c" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct url_case *c = &cases[i];
        char out[256];
        size_t hl = 999, pl = 999;
        int rc = dm_url_resolve(c->base_host, strlen(c->base_host), c->base_path,
                                c->base_path ? strlen(c->base_path) : 0, c->ref, strlen(c->ref),
                                out, sizeof out, &hl, &pl);
        if (rc != c->rc) {
            print_error("case %zu (%s): rc %d, want %d\n", i, c->ref, rc, c->rc);
            fail();
        }
        if (rc == 0) {
            if (hl != strlen(c->host) || memcmp(out, c->host, hl) != 0 || pl != strlen(c->path) ||
                memcmp(out + hl, c->path, pl) != 0) {
                print_error("case %zu (%s): got %.*s %.*s, want %s %s\n", i, c->ref, (int)hl, out,
                            (int)pl, out + hl, c->host, c->path);
                fail();
            }
        }
    }
}

static void
test_url_resolve_reports_no_space(void **state)
{
    (void)state;
    const char *ref = "http://host.example/a/b/c.png?q=1";
    char out[64];
    size_t hl, pl;
    /* The exact size fits; any smaller one is refused without a partial result. */
    assert_int_equal(dm_url_resolve("h", 1, "/", 1, ref, strlen(ref), out, 26, &hl, &pl), 0);
    assert_int_equal(hl + pl, 26);
    for (size_t cap = 0; cap < 26; cap++) {
        char *exact = malloc(cap ? cap : 1);
        assert_non_null(exact);
        assert_int_equal(dm_url_resolve("h", 1, "/", 1, ref, strlen(ref), exact, cap, &hl, &pl),
                         -ENOSPC);
        free(exact);
    }
    /* A reference with tabs longer than DM_URL_MAX cannot be cleaned. */
    size_t n = DM_URL_MAX + 10;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, 'a', n);
    big[5] = '\t';
    char *res = malloc(2 * n);
    assert_non_null(res);
    assert_int_equal(dm_url_resolve("h", 1, "/", 1, big, n, res, 2 * n, &hl, &pl), -ENOSPC);
    big[5] = 'a';
    assert_int_equal(dm_url_resolve("h", 1, "/", 1, big, n, res, 2 * n, &hl, &pl), 0);
    assert_int_equal(pl, n + 1);
    free(res);
    free(big);
}

/* ------------------------------------------------------------------------ */
/* The corpus                                                               */
/* ------------------------------------------------------------------------ */

static char *
read_file(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        return NULL;
    }
    assert_int_equal(fseek(f, 0, SEEK_END), 0);
    long n = ftell(f);
    assert_true(n >= 0);
    rewind(f);
    char *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    p[n] = '\0';
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* Only the page's own bytes, in a buffer of exactly that size. */
static char *
exact_copy(const char *p, size_t n)
{
    char *c = malloc(n ? n : 1);
    assert_non_null(c);
    memcpy(c, p, n);
    return c;
}

static int
name_cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void
run_corpus_page(const char *name)
{
    char path[512];
    size_t html_len, exp_len;
    snprintf(path, sizeof path, "%s/%s.html", CORPUS_DIR, name);
    char *file = read_file(path, &html_len);
    assert_non_null(file);
    char *html = exact_copy(file, html_len);
    free(file);
    snprintf(path, sizeof path, "%s/%s.expected", CORPUS_DIR, name);
    char *exp = read_file(path, &exp_len);
    if (!exp) {
        print_error("%s: no .expected\n", name);
        fail();
    }

    struct page_conf pc = default_page;
    char host[256] = PAGE_HOST, target[512] = PAGE_PATH;
    bool want_stopped = false;
    unsigned want_dropped = 0;
    struct text want = { 0 };
    for (char *line = strtok(exp, "\n"); line; line = strtok(NULL, "\n")) {
        if (line[0] == '#' || line[0] == '\0') {
            continue;
        }
        if (strncmp(line, "page ", 5) == 0) {
            assert_int_equal(sscanf(line + 5, "%255s %511s", host, target), 2);
        } else if (strncmp(line, "limit-after ", 12) == 0) {
            const char *needle = line + 12;
            char *z = malloc(html_len + 1);
            assert_non_null(z);
            memcpy(z, html, html_len);
            z[html_len] = '\0';
            const char *hit = strstr(z, needle);
            assert_non_null(hit);
            pc.limit = (uint64_t)(hit - z) + strlen(needle);
            free(z);
        } else if (strcmp(line, "limit-all") == 0) {
            pc.limit = html_len;
        } else if (strcmp(line, "stopped") == 0) {
            want_stopped = true;
        } else if (strncmp(line, "dropped ", 8) == 0) {
            want_dropped = (unsigned)atoi(line + 8);
        } else {
            text_adds(&want, line);
            text_adds(&want, "\n");
        }
    }
    pc.host = host;
    pc.path = target;

    struct result r;
    scan_all(&pc, html, html_len, &r);
    if (strcmp(text_str(&r.objs), text_str(&want)) != 0) {
        print_error("%s.html gave:\n%swant:\n%s", name, text_str(&r.objs), text_str(&want));
        fail();
    }
    if (r.stopped != want_stopped || r.dropped != want_dropped) {
        print_error("%s.html: stopped %d dropped %u, want %d %u\n", name, r.stopped, r.dropped,
                    want_stopped, want_dropped);
        fail();
    }
    if (pc.limit) {
        assert_int_equal(r.scanned, pc.limit);
    } else {
        assert_int_equal(r.scanned, html_len);
    }
    text_fini(&r.objs);
    text_fini(&want);
    free(exp);
    free(html);
}

static void
test_corpus_whole_and_split_everywhere(void **state)
{
    (void)state;
    DIR *d = opendir(CORPUS_DIR);
    assert_non_null(d);
    char *names[256];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len > 5 && strcmp(e->d_name + len - 5, ".html") == 0) {
            assert_true(n < sizeof names / sizeof names[0]);
            names[n] = strndup(e->d_name, len - 5);
            assert_non_null(names[n]);
            n++;
        }
    }
    closedir(d);
    assert_true(n >= 20);
    qsort(names, n, sizeof names[0], name_cmp);
    for (size_t i = 0; i < n; i++) {
        run_corpus_page(names[i]);
        free(names[i]);
    }
}

/* ------------------------------------------------------------------------ */
/* Pages like the demo backend's                                            */
/* ------------------------------------------------------------------------ */

struct rng {
    uint64_t s;
};

static uint64_t
rng_next(struct rng *r)
{
    /* splitmix64, as the backend uses */
    uint64_t x = (r->s += 0x9e3779b97f4a7c15u);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

static unsigned
rng_below(struct rng *r, unsigned n)
{
    return (unsigned)(rng_next(r) % n);
}

static void text_printf(struct text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
text_printf(struct text *t, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    assert_true(n >= 0 && (size_t)n < sizeof buf);
    text_add(t, buf, (size_t)n);
}

/* One URL attribute in the backend's forms: absolute or relative to /page/,
 * in double, single or no quotes, name in either case. */
static void
gen_url_attr(struct text *t, struct rng *r, const char *name, unsigned id, const char *ext)
{
    static const char quotes[] = { '"', '"', '"', '\'', 0, 0 };
    char q = quotes[rng_below(r, sizeof quotes)];
    const char *prefix = rng_below(r, 3) == 0 ? "../obj/" : "/obj/";
    if (q) {
        text_printf(t, " %s=%c%s%u.%s%c", name, q, prefix, id, ext, q);
    } else {
        text_printf(t, " %s=%s%u.%s", name, prefix, id, ext);
    }
}

/* A page with the structure of bench/backend_site.c's (head with stylesheets
 * and scripts, body with images, srcset, paragraphs) and its decoys: a
 * canonical link, a comment and an inline script holding img tags, and a
 * href links. *want gets every reference in the scanner's order. */
static void
gen_backend_page(struct rng *r, unsigned n, struct text *page, struct text *want)
{
    static const char *const exts[] = { "png", "jpg" };
    text_printf(page,
                "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                "<title>dimmer demo page %u</title>\n"
                "<link rel=\"canonical\" href=\"/page/%u.html\">\n",
                n, n);
    unsigned head = 1 + rng_below(r, 6);
    for (unsigned i = 0; i < head; i++) {
        unsigned id = rng_below(r, 1000);
        bool upper = rng_below(r, 5) == 0;
        if (rng_below(r, 2)) {
            text_adds(page, upper ? "<SCRIPT" : "<script");
            gen_url_attr(page, r, upper ? "SRC" : "src", id, "js");
            text_adds(page, upper ? "></SCRIPT>\n" : "></script>\n");
            text_printf(want, "script /obj/%u.js\n", id);
        } else {
            if (upper) {
                text_adds(page, "<LINK REL=stylesheet");
                gen_url_attr(page, r, "HREF", id, "css");
                text_adds(page, ">\n");
            } else if (rng_below(r, 3) == 0) {
                text_adds(page, "<link");
                gen_url_attr(page, r, "href", id, "css");
                text_adds(page, " rel=\"stylesheet\" type=\"text/css\">\n");
            } else {
                text_adds(page, "<link rel=\"stylesheet\"");
                gen_url_attr(page, r, "href", id, "css");
                text_adds(page, ">\n");
            }
            text_printf(want, "stylesheet /obj/%u.css\n", id);
        }
    }
    text_printf(page, "</head>\n<body>\n<h1>Page %u</h1>\n<p>power server cluster.</p>\n", n);
    unsigned body = 3 + rng_below(r, 14);
    for (unsigned i = 0; i < body; i++) {
        unsigned id = rng_below(r, 1000), id2 = rng_below(r, 1000);
        const char *ext = exts[rng_below(r, 2)], *ext2 = exts[rng_below(r, 2)];
        bool upper = rng_below(r, 5) == 0;
        text_adds(page, upper ? "<IMG" : "<img");
        gen_url_attr(page, r, upper ? "SRC" : "src", id, ext);
        text_printf(want, "image /obj/%u.%s\n", id, ext);
        if (rng_below(r, 3) == 0) {
            bool rel = rng_below(r, 2);
            text_printf(page, " %s=\"%s%u.%s 1x, %s%u.%s 2x\" alt=\"\">\n",
                        upper ? "SRCSET" : "srcset", rel ? "../obj/" : "/obj/", id, ext,
                        rel ? "/obj/" : "../obj/", id2, ext2);
            text_printf(want, "image /obj/%u.%s\nimage /obj/%u.%s\n", id, ext, id2, ext2);
        } else {
            text_printf(page, " alt=\"object %u\" width=64 height=64>\n", id);
        }
        switch (rng_below(r, 4)) {
        case 0:
            text_adds(page, "<!-- retired banner: <img src=\"/nope\"> -->\n");
            break;
        case 1:
            text_adds(page, "<script>\nvar banner = '<img src=\"/nope-script.png\">';\n"
                            "if (banner.length < 2) { document.write(banner); }\n</script>\n");
            break;
        case 2:
            text_adds(page, "<p>power <a href=\"/page/1.html\">server</a> cluster load"
                            " request energy balance sleep wake.</p>\n");
            break;
        default:
            break;
        }
    }
    text_printf(page,
                "<p><a href=\"/page/%u.html\">next page</a> | <a href=\"../page/%u.html\">"
                "previous page</a> | <a href=\"/\">index</a></p>\n</body>\n</html>\n",
                n + 1, n ? n - 1 : 0);
}

static void
test_backend_pages_give_exactly_their_objects(void **state)
{
    (void)state;
    struct rng r = { 42 };
    for (unsigned n = 0; n < 400; n++) {
        struct text page = { 0 }, want = { 0 };
        gen_backend_page(&r, n, &page, &want);
        char path[64];
        snprintf(path, sizeof path, "/page/%u.html", n);
        struct page_conf pc = { "127.0.0.1:8081", path, 0 };
        char *html = exact_copy(page.s, page.len);
        struct result res;
        if (n < 8) {
            scan_all(&pc, html, page.len, &res);
        } else {
            scan_whole(&pc, html, page.len, &res);
        }
        if (strcmp(text_str(&res.objs), text_str(&want)) != 0) {
            print_error("page %u:\n%s\ngave:\n%swant:\n%s", n, page.s, text_str(&res.objs),
                        text_str(&want));
            fail();
        }
        assert_false(strstr(text_str(&res.objs), "nope"));
        assert_false(res.stopped);
        assert_int_equal(res.dropped, 0);
        text_fini(&res.objs);
        text_fini(&want);
        text_fini(&page);
        free(html);
    }
}

/* ------------------------------------------------------------------------ */
/* Limits                                                                   */
/* ------------------------------------------------------------------------ */

static void
test_limit_stops_the_scan(void **state)
{
    (void)state;
    static const char page[] = "<img src=a.png><img src=b.png>";
    const size_t n = sizeof page - 1;
    /* limit 15 ends just after the first '>'; 14 just before. */
    struct page_conf pc = { PAGE_HOST, PAGE_PATH, 15 };
    struct result r;
    scan_all(&pc, page, n, &r);
    assert_string_equal(text_str(&r.objs), "image /dir/a.png\n");
    assert_true(r.stopped);
    assert_false(r.complete);
    assert_int_equal(r.scanned, 15);
    text_fini(&r.objs);

    pc.limit = 14;
    scan_all(&pc, page, n, &r);
    assert_string_equal(text_str(&r.objs), "");
    assert_true(r.stopped);
    text_fini(&r.objs);

    pc.limit = n;
    scan_all(&pc, page, n, &r);
    assert_string_equal(text_str(&r.objs), "image /dir/a.png\nimage /dir/b.png\n");
    assert_false(r.stopped);
    assert_true(r.complete);
    text_fini(&r.objs);

    /* Once stopped, later bytes are not looked at. */
    struct dm_html_scan s;
    dm_html_scan_init(&s, PAGE_HOST, PAGE_PATH, 4);
    memset(&r, 0, sizeof r);
    dm_html_scan_feed(&s, "<img", 4, collect_cb, &r);
    assert_false(s.stopped);
    dm_html_scan_feed(&s, " src=x.png>", 11, collect_cb, &r);
    assert_true(s.stopped);
    assert_int_equal(s.scanned, 4);
    dm_html_scan_feed(&s, "<img src=y.png>", 15, collect_cb, &r);
    assert_int_equal(s.scanned, 4);
    assert_int_equal(r.calls, 0);
    assert_false(dm_html_scan_finish(&s));
}

static void
test_long_attribute_value_is_dropped_not_cut(void **state)
{
    (void)state;
    for (size_t len = DM_HTML_SCAN_BUF - 2; len <= DM_HTML_SCAN_BUF + 2; len++) {
        struct text page = { 0 };
        text_adds(&page, "<img alt=\"");
        for (size_t i = 0; i < 3 * DM_HTML_SCAN_BUF; i++) {
            text_adds(&page, "x"); /* alt is not kept: its length does not matter */
        }
        text_adds(&page, "\" src=\"/");
        for (size_t i = 1; i < len; i++) {
            text_adds(&page, "a");
        }
        /* A second src never replaces a first one that was dropped. */
        text_adds(&page, "\" src=\"/second.png\"><img src=/after.png>");
        char *html = exact_copy(page.s, page.len);
        struct result r;
        if (len == DM_HTML_SCAN_BUF + 1) {
            scan_all(&default_page, html, page.len, &r);
        } else {
            scan_whole(&default_page, html, page.len, &r);
        }
        if (len <= DM_HTML_SCAN_BUF) {
            assert_int_equal(r.objects, 2);
            assert_int_equal(r.dropped, 0);
            assert_int_equal(strlen(text_str(&r.objs)), strlen("image \n") + len + 17);
        } else {
            assert_string_equal(text_str(&r.objs), "image /after.png\n");
            assert_int_equal(r.dropped, 1);
        }
        text_fini(&r.objs);
        text_fini(&page);
        free(html);
    }
}

static void
test_long_srcset_is_dropped_whole(void **state)
{
    (void)state;
    struct text page = { 0 };
    text_adds(&page, "<link href=\"keep.css\" rel=\"stylesheet\">"
                     "<img src=\"a.png\" srcset=\"");
    for (unsigned i = 0; i < 400; i++) {
        text_printf(&page, "c%u.png %ux, ", i, i + 1);
    }
    text_adds(&page, "\"><img src=b.png>");
    char *html = exact_copy(page.s, page.len);
    struct result r;
    scan_whole(&default_page, html, page.len, &r);
    assert_string_equal(text_str(&r.objs),
                        "stylesheet /dir/keep.css\nimage /dir/a.png\nimage /dir/b.png\n");
    assert_int_equal(r.dropped, 1);
    text_fini(&r.objs);
    text_fini(&page);
    free(html);
}

static void
test_long_page_path_keeps_absolute_urls(void **state)
{
    (void)state;
    char path[DM_HTML_SCAN_PATH_MAX + 16];
    memset(path, 'p', sizeof path - 1);
    path[0] = '/';
    path[sizeof path - 1] = '\0';
    static const char page[] = "<img src=rel.png><img src=/abs.png><img src=//o.example/x.png>"
                               "<base href=/b/><img src=rel2.png>";
    struct page_conf pc = { PAGE_HOST, path, 0 };
    struct result r;
    scan_whole(&pc, page, sizeof page - 1, &r);
    assert_string_equal(text_str(&r.objs),
                        "image /abs.png\nimage //o.example/x.png\nimage /b/rel2.png\n");
    assert_int_equal(r.dropped, 1);
    text_fini(&r.objs);

    /* A host too long to keep: relative URLs still read as the page's host. */
    char host[DM_HTML_SCAN_HOST_MAX + 8];
    memset(host, 'h', sizeof host - 1);
    host[sizeof host - 1] = '\0';
    pc.host = host;
    pc.path = "/d/p.html";
    scan_whole(&pc, page, sizeof page - 1, &r);
    assert_string_equal(text_str(&r.objs), "image /d/rel.png\nimage /abs.png\n"
                                           "image //o.example/x.png\nimage /b/rel2.png\n");
    text_fini(&r.objs);
}

/* ------------------------------------------------------------------------ */
/* Pathological input                                                       */
/* ------------------------------------------------------------------------ */

/* Feeds in chunks of random sizes (1..max) and checks the result matches. */
static void
check_random_chunks(const struct page_conf *pc, const char *page, size_t n,
                    const struct result *whole, struct rng *r, unsigned max)
{
    size_t *cuts = malloc((n + 2) * sizeof *cuts);
    assert_non_null(cuts);
    size_t k = 0, at = 0;
    cuts[k++] = 0;
    while (at < n) {
        at += 1 + rng_below(r, max);
        cuts[k++] = at < n ? at : n;
    }
    struct result res;
    scan_pieces(pc, page, cuts, k, &res);
    assert_same(whole, &res, "in random chunks up to", max);
    text_fini(&res.objs);
    free(cuts);
}

static void
test_random_bytes_do_not_crash(void **state)
{
    (void)state;
    const size_t n = 1u << 20;
    char *page = malloc(n);
    assert_non_null(page);
    struct rng r = { 7 };
    for (size_t i = 0; i < n; i += 8) {
        uint64_t x = rng_next(&r);
        memcpy(page + i, &x, 8);
    }
    struct result whole;
    scan_whole(&default_page, page, n, &whole);
    assert_int_equal(whole.scanned, n);
    check_random_chunks(&default_page, page, n, &whole, &r, 16384);
    check_random_chunks(&default_page, page, n, &whole, &r, 7);
    text_fini(&whole.objs);

    /* Mostly '<' and tag-like bytes: every state gets visited. */
    static const char alphabet[] = "<<<>>/!-?[]\"'= \nimgsrcIMGSRC";
    for (size_t i = 0; i < n; i++) {
        page[i] = alphabet[rng_below(&r, sizeof alphabet - 1)];
    }
    scan_whole(&default_page, page, n, &whole);
    check_random_chunks(&default_page, page, n, &whole, &r, 4096);
    check_random_chunks(&default_page, page, n, &whole, &r, 3);
    text_fini(&whole.objs);
    free(page);
}

/* Random concatenations of HTML fragments: the tokenizer goes through every
 * state with a value split at random places, and must agree with itself. */
static void
test_tag_soup_agrees_with_itself_split_anywhere(void **state)
{
    (void)state;
    static const char *const frags[] = {
        "<",          ">",           "/",           "img",        "IMG",       " src=",
        " srcset=",   " href=",      " rel=",       "stylesheet", "\"",        "'",
        "a.png",      "../b.png",    "//h/c.png",   " 1x, ",      ",",         " ",
        "\n",         "<!--",        "-->",         "--!>",       "-",         "<!",
        "<?",         "</",          "<script>",    "</script>",  "<style>",   "</style",
        "<![CDATA[",  "]]>",         "<base href=", "=",          "&amp;",     "&#x2F;",
        "<textarea>", "</textarea>", "<link",       "<video",     " poster=",  "<!--<script>",
        "\0",         "<title>",     "</title>",    "<iframe",    "</iframe>", "data:x",
    };
    struct rng r = { 1234 };
    for (unsigned round = 0; round < 60; round++) {
        struct text page = { 0 };
        while (page.len < 600) {
            const char *f = frags[rng_below(&r, sizeof frags / sizeof frags[0])];
            text_add(&page, f, f[0] ? strlen(f) : 1);
        }
        char *html = exact_copy(page.s, page.len);
        struct result whole;
        scan_all(&default_page, html, page.len, &whole);
        text_fini(&whole.objs);
        text_fini(&page);
        free(html);
    }
}

static void
test_edge_inputs(void **state)
{
    (void)state;
    static const char *const pages[] = {
        "",          "<",           "<!",          "<!-",       "<!--",
        "<!---",     "</",          "</x",         "<a",        "<img src",
        "<img src=", "<img src=\"", "<img src='x", "<![CDATA[", "<script><!--<script>",
        "<?",        "&",           "\0",
    };
    for (size_t i = 0; i < sizeof pages / sizeof pages[0]; i++) {
        size_t n = strlen(pages[i]) + (pages[i][0] == '\0' && i > 0);
        char *html = exact_copy(pages[i], n);
        struct result r;
        scan_all(&default_page, html, n, &r);
        assert_int_equal(r.objects, 0);
        text_fini(&r.objs);
        free(html);
    }
}

static void
test_feed_after_finish_is_a_noop(void **state)
{
    (void)state;
    struct dm_html_scan s;
    struct result r = { 0 };
    dm_html_scan_init(&s, PAGE_HOST, PAGE_PATH, 0);
    assert_int_equal(s.limit, UINT64_MAX);
    dm_html_scan_feed(&s, "<img src=a.png", 14, collect_cb, &r);
    assert_true(dm_html_scan_finish(&s));
    dm_html_scan_feed(&s, ">", 1, collect_cb, &r);
    assert_int_equal(r.calls, 0);
    assert_int_equal(s.scanned, 14);
    text_fini(&r.objs);
}

static void
test_kind_names(void **state)
{
    (void)state;
    assert_string_equal(dm_html_kind_name(DM_HTML_IMAGE), "image");
    assert_string_equal(dm_html_kind_name(DM_HTML_SCRIPT), "script");
    assert_string_equal(dm_html_kind_name(DM_HTML_STYLESHEET), "stylesheet");
    assert_string_equal(dm_html_kind_name(DM_HTML_ICON), "icon");
    assert_string_equal(dm_html_kind_name(DM_HTML_PRELOAD), "preload");
    assert_string_equal(dm_html_kind_name(DM_HTML_FRAME), "frame");
    assert_string_equal(dm_html_kind_name(DM_HTML_EMBED), "embed");
    assert_string_equal(dm_html_kind_name(DM_HTML_MEDIA), "media");
    assert_string_equal(dm_html_kind_name((enum dm_html_kind)99), "?");
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_url_resolve_table),
        cmocka_unit_test(test_url_resolve_reports_no_space),
        cmocka_unit_test(test_corpus_whole_and_split_everywhere),
        cmocka_unit_test(test_backend_pages_give_exactly_their_objects),
        cmocka_unit_test(test_limit_stops_the_scan),
        cmocka_unit_test(test_long_attribute_value_is_dropped_not_cut),
        cmocka_unit_test(test_long_srcset_is_dropped_whole),
        cmocka_unit_test(test_long_page_path_keeps_absolute_urls),
        cmocka_unit_test(test_random_bytes_do_not_crash),
        cmocka_unit_test(test_tag_soup_agrees_with_itself_split_anywhere),
        cmocka_unit_test(test_edge_inputs),
        cmocka_unit_test(test_feed_after_finish_is_a_noop),
        cmocka_unit_test(test_kind_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
