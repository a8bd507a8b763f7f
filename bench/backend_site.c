/*
 * The generated site. Each page embeds 5..20 distinct objects chosen from a pool shared by
 * all pages (so objects repeat across pages, as on a real site), referenced in the forms an
 * HTML scanner has to cope with:
 *
 *   - <img src>, <img src srcset="a 1x, b 2x">, <script src>, <link rel="stylesheet" href>
 *     (sometimes with href before rel);
 *   - absolute paths ("/obj/7.png") and paths relative to /page/ ("../obj/7.png");
 *   - double-quoted, single-quoted and unquoted attribute values, lower- and upper-case
 *     tag and attribute names;
 *   - decoys that are not embedded objects: a comment holding <img src="/nope">, an inline
 *     <script> whose text holds "<img src=...>", <link rel="canonical"> and <a href> links
 *     to other pages.
 *
 * The list of real objects is kept next to each page (dm_site_page_objects) so tests can
 * compare a scanner's output with it.
 */
#include "bench/backend_site.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sbuf {
    char *p;
    size_t len, cap;
    bool failed;
};

struct site_page {
    char *html;
    size_t html_len;
    char *objs;
    size_t objs_len;
    unsigned nobjs;
};

struct dm_site {
    unsigned pages;
    struct site_page *page;
    char *index;
    size_t index_len;
    unsigned char *pattern;
};

/* splitmix64 (Steele, Lea, Flood 2014): a stateless mix for hashing ids and the step of
 * the generator below. */
static uint64_t
mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15u;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9u;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebu;
    return x ^ (x >> 31);
}

struct prng {
    uint64_t s;
};

static uint64_t
prng_next(struct prng *r)
{
    r->s += 0x9e3779b97f4a7c15u;
    return mix64(r->s);
}

/* Uniform enough in [0, n) for n far below 2^32. */
static unsigned
prng_below(struct prng *r, unsigned n)
{
    return (unsigned)(prng_next(r) % n);
}

static void sbuf_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void
sbuf_printf(struct sbuf *b, const char *fmt, ...)
{
    for (;;) {
        if (b->failed) {
            return;
        }
        size_t room = b->cap - b->len;
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(b->p ? b->p + b->len : NULL, room, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->failed = true;
            return;
        }
        if ((size_t)n < room) {
            b->len += (size_t)n;
            return;
        }
        size_t cap = b->cap ? b->cap * 2 : 4096;
        while (cap - b->len <= (size_t)n) {
            cap *= 2;
        }
        char *p = realloc(b->p, cap);
        if (!p) {
            b->failed = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
}

static void
sbuf_fini(struct sbuf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

uint64_t
dm_site_obj_size(uint64_t id)
{
    uint64_t h = mix64(id);
    unsigned pct = (unsigned)(h % 100);
    uint64_t step = 1024 * ((h >> 32) % 9 + 1); /* 1..9 KiB */
    if (pct < 35) {
        return step / 10;
    }
    if (pct < 85) {
        return step;
    }
    if (pct < 99) {
        return step * 10;
    }
    return step * 100;
}

enum obj_kind { OBJ_IMG, OBJ_SRCSET, OBJ_SCRIPT, OBJ_CSS };

struct page_obj {
    uint64_t id;
    const char *ext;
    enum obj_kind kind;
};

static const char *const words[] = {
    "power",  "server",   "cluster", "load",    "request", "energy",  "balance", "sleep",
    "wake",   "response", "latency", "traffic", "proxy",   "session", "object",  "page",
    "demand", "capacity", "watt",    "idle",    "peak",    "trend",   "growth",  "decline",
};

static void
emit_paragraph(struct sbuf *b, struct prng *r)
{
    unsigned n = 20 + prng_below(r, 100);
    sbuf_printf(b, "<p>");
    for (unsigned i = 0; i < n; i++) {
        const char *w = words[prng_below(r, sizeof words / sizeof words[0])];
        sbuf_printf(b, "%s%s", i ? " " : "", w);
        if (prng_below(r, 12) == 0) {
            sbuf_printf(b, ".");
        }
    }
    sbuf_printf(b, ".</p>\n");
}

/* One object URL as an attribute value, absolute or relative, in one of three quotings.
 * `quote` is 0 for unquoted, else the quote character. */
static void
emit_url_attr(struct sbuf *b, const char *name, const struct page_obj *o, bool relative, char quote)
{
    const char *prefix = relative ? "../obj/" : "/obj/";
    if (quote) {
        sbuf_printf(b, " %s=%c%s%llu.%s%c", name, quote, prefix, (unsigned long long)o->id, o->ext,
                    quote);
    } else {
        sbuf_printf(b, " %s=%s%llu.%s", name, prefix, (unsigned long long)o->id, o->ext);
    }
}

static char
pick_quote(struct prng *r)
{
    static const char q[] = { '"', '"', '"', '\'', 0, 0 };
    return q[prng_below(r, sizeof q)];
}

static void
emit_object(struct sbuf *b, struct prng *r, const struct page_obj *o, const struct page_obj *o2)
{
    bool upper = prng_below(r, 5) == 0;
    bool relative = prng_below(r, 3) == 0;
    char quote = pick_quote(r);
    switch (o->kind) {
    case OBJ_IMG:
        sbuf_printf(b, upper ? "<IMG" : "<img");
        emit_url_attr(b, upper ? "SRC" : "src", o, relative, quote);
        sbuf_printf(b, " alt=\"object %llu\" width=64 height=64>\n", (unsigned long long)o->id);
        break;
    case OBJ_SRCSET:
        sbuf_printf(b, upper ? "<IMG" : "<img");
        emit_url_attr(b, upper ? "SRC" : "src", o, relative, quote);
        /* A srcset value holds spaces and commas, so it is always quoted. */
        sbuf_printf(b, " %s=\"%s%llu.%s 1x, %s%llu.%s 2x\" alt=\"\">\n",
                    upper ? "SRCSET" : "srcset", relative ? "../obj/" : "/obj/",
                    (unsigned long long)o->id, o->ext, prng_below(r, 2) ? "../obj/" : "/obj/",
                    (unsigned long long)o2->id, o2->ext);
        break;
    case OBJ_SCRIPT:
        sbuf_printf(b, upper ? "<SCRIPT" : "<script");
        emit_url_attr(b, upper ? "SRC" : "src", o, relative, quote);
        sbuf_printf(b, upper ? "></SCRIPT>\n" : "></script>\n");
        break;
    case OBJ_CSS:
        if (upper) {
            sbuf_printf(b, "<LINK REL=stylesheet");
            emit_url_attr(b, "HREF", o, relative, quote);
            sbuf_printf(b, ">\n");
        } else if (prng_below(r, 3) == 0) {
            sbuf_printf(b, "<link");
            emit_url_attr(b, "href", o, relative, quote);
            sbuf_printf(b, " rel=\"stylesheet\" type=\"text/css\">\n");
        } else {
            sbuf_printf(b, "<link rel=\"stylesheet\"");
            emit_url_attr(b, "href", o, relative, quote);
            sbuf_printf(b, ">\n");
        }
        break;
    }
}

static void
list_object(struct sbuf *list, unsigned *count, const struct page_obj *o)
{
    sbuf_printf(list, "/obj/%llu.%s\n", (unsigned long long)o->id, o->ext);
    (*count)++;
}

static int
page_build(struct site_page *pg, uint64_t seed, unsigned n, unsigned pages)
{
    struct prng r = { mix64(seed) ^ mix64(0x70616765u + n) };
    unsigned pool = 8 * pages + 32;
    unsigned nobj = 5 + prng_below(&r, 16);
    struct page_obj obj[20];
    static const char *const img_ext[] = { "png", "jpg" };

    for (unsigned i = 0; i < nobj; i++) {
        uint64_t id;
        bool dup;
        do {
            id = prng_below(&r, pool);
            dup = false;
            for (unsigned j = 0; j < i; j++) {
                dup = dup || obj[j].id == id;
            }
        } while (dup);
        unsigned k = prng_below(&r, 100);
        obj[i].id = id;
        if (k < 15) {
            obj[i].kind = OBJ_CSS;
            obj[i].ext = "css";
        } else if (k < 30) {
            obj[i].kind = OBJ_SCRIPT;
            obj[i].ext = "js";
        } else {
            /* A srcset names this object and the next one, so it needs a next one. */
            obj[i].kind = (k < 45 && i + 1 < nobj) ? OBJ_SRCSET : OBJ_IMG;
            obj[i].ext = img_ext[prng_below(&r, 2)];
        }
    }

    struct sbuf b = { 0 };
    struct sbuf list = { 0 };
    unsigned count = 0;
    sbuf_printf(&b,
                "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                "<title>dimmer demo page %u</title>\n"
                "<link rel=\"canonical\" href=\"/page/%u.html\">\n",
                n, n);
    /* Stylesheets and scripts go in the head, in order, so the list stays in document
     * order; images in the body. The object after a srcset image belongs to it. */
    for (unsigned i = 0; i < nobj; i++) {
        if (obj[i].kind == OBJ_CSS || obj[i].kind == OBJ_SCRIPT) {
            emit_object(&b, &r, &obj[i], NULL);
            list_object(&list, &count, &obj[i]);
        }
    }
    sbuf_printf(&b, "</head>\n<body>\n<h1>Page %u</h1>\n", n);
    emit_paragraph(&b, &r);
    bool comment_done = false;
    bool script_done = false;
    for (unsigned i = 0; i < nobj; i++) {
        if (obj[i].kind == OBJ_CSS || obj[i].kind == OBJ_SCRIPT) {
            continue;
        }
        if (obj[i].kind == OBJ_SRCSET) {
            /* The next object is the 2x candidate, unless it already went in the head. */
            struct page_obj *o2 = &obj[i + 1];
            if (o2->kind == OBJ_CSS || o2->kind == OBJ_SCRIPT) {
                obj[i].kind = OBJ_IMG;
                emit_object(&b, &r, &obj[i], NULL);
                list_object(&list, &count, &obj[i]);
            } else {
                emit_object(&b, &r, &obj[i], o2);
                list_object(&list, &count, &obj[i]);
                list_object(&list, &count, o2);
                i++;
            }
        } else {
            emit_object(&b, &r, &obj[i], NULL);
            list_object(&list, &count, &obj[i]);
        }
        if (!comment_done && prng_below(&r, 3) == 0) {
            sbuf_printf(&b, "<!-- retired banner: <img src=\"/nope\"> -->\n");
            comment_done = true;
        }
        if (!script_done && prng_below(&r, 3) == 0) {
            sbuf_printf(&b, "<script>\nvar banner = '<img src=\"/nope-script.png\">';\n"
                            "if (banner.length < 2) { document.write(banner); }\n</script>\n");
            script_done = true;
        }
        if (prng_below(&r, 2) == 0) {
            emit_paragraph(&b, &r);
        }
    }
    if (!comment_done) {
        sbuf_printf(&b, "<!-- retired banner: <img src=\"/nope\"> -->\n");
    }
    if (!script_done) {
        sbuf_printf(&b, "<script>\nvar banner = '<img src=\"/nope-script.png\">';\n"
                        "if (banner.length < 2) { document.write(banner); }\n</script>\n");
    }
    emit_paragraph(&b, &r);
    sbuf_printf(&b,
                "<p><a href=\"/page/%u.html\">next page</a> | <a href=\"../page/%u.html\">"
                "previous page</a> | <a href=\"/\">index</a></p>\n</body>\n</html>\n",
                (n + 1) % pages, (n + pages - 1) % pages);

    if (b.failed || list.failed) {
        sbuf_fini(&b);
        sbuf_fini(&list);
        return -1;
    }
    pg->html = b.p;
    pg->html_len = b.len;
    pg->objs = list.p;
    pg->objs_len = list.len;
    pg->nobjs = count;
    return 0;
}

static int
index_build(struct dm_site *s)
{
    struct sbuf b = { 0 };
    sbuf_printf(&b, "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                    "<title>dimmer demo site</title>\n</head>\n<body>\n"
                    "<h1>dimmer demo site</h1>\n<ul>\n");
    for (unsigned i = 0; i < s->pages; i++) {
        sbuf_printf(&b, "<li><a href=\"/page/%u.html\">Page %u</a></li>\n", i, i);
    }
    sbuf_printf(&b, "</ul>\n</body>\n</html>\n");
    if (b.failed) {
        sbuf_fini(&b);
        return -1;
    }
    s->index = b.p;
    s->index_len = b.len;
    return 0;
}

struct dm_site *
dm_site_create(uint64_t seed, unsigned pages)
{
    if (pages == 0 || pages > DM_SITE_MAX_PAGES) {
        return NULL;
    }
    struct dm_site *s = calloc(1, sizeof *s);
    if (!s) {
        return NULL;
    }
    s->pages = pages;
    s->page = calloc(pages, sizeof *s->page);
    s->pattern = malloc(DM_PATTERN_PERIOD + DM_PATTERN_SPAN);
    if (!s->page || !s->pattern || index_build(s) < 0) {
        goto fail;
    }
    for (uint32_t j = 0; j < DM_PATTERN_PERIOD + DM_PATTERN_SPAN; j++) {
        uint64_t k = j % DM_PATTERN_PERIOD;
        s->pattern[j] = (unsigned char)((k * 2654435761u) >> 13);
    }
    for (unsigned i = 0; i < pages; i++) {
        if (page_build(&s->page[i], seed, i, pages) < 0) {
            goto fail;
        }
    }
    return s;

fail:
    dm_site_destroy(s);
    return NULL;
}

void
dm_site_destroy(struct dm_site *s)
{
    if (!s) {
        return;
    }
    for (unsigned i = 0; s->page && i < s->pages; i++) {
        free(s->page[i].html);
        free(s->page[i].objs);
    }
    free(s->page);
    free(s->index);
    free(s->pattern);
    free(s);
}

unsigned
dm_site_pages(const struct dm_site *s)
{
    return s->pages;
}

const char *
dm_site_index(const struct dm_site *s, size_t *len)
{
    *len = s->index_len;
    return s->index;
}

const char *
dm_site_page(const struct dm_site *s, unsigned n, size_t *len)
{
    *len = s->page[n].html_len;
    return s->page[n].html;
}

const char *
dm_site_page_objects(const struct dm_site *s, unsigned n, size_t *len, unsigned *count)
{
    *len = s->page[n].objs_len;
    *count = s->page[n].nobjs;
    return s->page[n].objs;
}

const unsigned char *
dm_site_pattern(const struct dm_site *s)
{
    return s->pattern;
}
