/*
 * The embedded objects of an HTML page, found while its bytes stream through
 * the proxy, for the object catalog (DESIGN.md item 1, AGE). The proxy hands
 * each read of a response body to dm_html_scan_feed() as a read-only view of
 * bytes it forwards anyway; the scanner never changes or holds them.
 *
 * What counts as an embedded object (each one reported with its kind):
 *   img src, img srcset (every candidate), source src and srcset,
 *   script src, link href when rel holds stylesheet, icon (so "shortcut icon"),
 *   apple-touch-icon, apple-touch-icon-precomposed, mask-icon, preload or
 *   modulepreload, iframe and frame src, embed src, object data, video src and
 *   poster, audio src, input src when type is "image".
 * Not: a href, link rel=canonical, alternate, prefetch..., track, CSS url().
 *
 * The tokenizer follows the HTML standard's (WHATWG §13.2.5) closely enough
 * that tags split across reads, any case, any quoting, duplicate attributes
 * (the first wins) and `/` between attributes read as a browser reads them.
 * Comments (with the `--!>` and `<!-->` endings), `<!DOCTYPE>`, `<?...>`,
 * CDATA sections (up to "]]>"), and the text of script (with the standard's
 * `<!--<script>` escapes), style, textarea, title, xmp, iframe, noembed,
 * noframes and noscript (as a browser with scripting on sees it) hide the tags
 * they contain. After <plaintext> nothing is a tag. A tag still open at the
 * end of the page is dropped, as a browser drops it.
 *
 * URLs: attribute values get &amp; &lt; &gt; &quot; &apos; &nbsp; and numeric
 * references decoded (other named references stay as written), then are
 * resolved against the page URL or the first <base href> seen before them;
 * see dm_url_resolve(). A srcset value is split as the standard says: a URL
 * runs to the next whitespace, so a comma inside one is kept and commas at
 * its end separate it from the next candidate ("a.jpg 1x, b,c.jpg 2x" gives
 * a.jpg and b,c.jpg; "a.jpg,b.jpg" with no space is one URL).
 *
 * Bounds: no allocation and no globals. The interesting attribute values of
 * one tag are kept in a DM_HTML_SCAN_BUF buffer inside the struct; a value
 * that does not fit (a srcset too, whole) is dropped and counted, never cut
 * into a wrong URL. Work is linear in the bytes scanned, memchr() skips text.
 */
#ifndef DM_PARSERS_HTML_SCAN_H
#define DM_PARSERS_HTML_SCAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DM_HTML_SCAN_BUF      2048 /* interesting attribute values of one tag */
#define DM_HTML_SCAN_HOST_MAX 256  /* page host and <base> host, port included */
#define DM_HTML_SCAN_PATH_MAX 1024 /* page path and <base> path, query included */
#define DM_HTML_SCAN_ATTRS    7    /* attribute slots of a tag (private) */
#define DM_URL_MAX            8192 /* longest URL reported and longest reference resolved */

enum dm_html_kind {
    DM_HTML_IMAGE = 0,  /* img src/srcset, source srcset, video poster, input type=image */
    DM_HTML_SCRIPT,     /* script src, link rel=modulepreload */
    DM_HTML_STYLESHEET, /* link rel=stylesheet */
    DM_HTML_ICON,       /* link rel=icon, apple-touch-icon... */
    DM_HTML_PRELOAD,    /* link rel=preload */
    DM_HTML_FRAME,      /* iframe src, frame src */
    DM_HTML_EMBED,      /* embed src, object data */
    DM_HTML_MEDIA,      /* video src, audio src, source src */
};

/*
 * Called once per embedded object, in document order; within a tag src comes
 * before the srcset candidates, then data, href or poster. host is empty when
 * the object is on the page's host, else lowercase with a non-default port;
 * path starts with "/", has no dot segments and keeps its query (no fragment).
 * Neither is NUL-terminated; both are valid only during the call. The same
 * URL is reported each time it appears: the caller removes duplicates. The
 * callback must not feed the same scanner.
 */
typedef void (*dm_html_object_cb)(void *arg, const char *host, size_t host_len, const char *path,
                                  size_t path_len, enum dm_html_kind kind);

/* The scanner of one page. Caller-owned (embed it or put it on the stack);
 * read the public fields, never the private ones. About 3.6 KiB. */
struct dm_html_scan {
    uint64_t limit;   /* bytes of the page to scan (UINT64_MAX: all) */
    uint64_t scanned; /* bytes scanned so far, at most limit */
    unsigned objects; /* objects reported */
    unsigned dropped; /* URLs not reported: too long to keep, or no base to resolve */
    bool stopped;     /* the page went on past limit: the rest was not scanned */
    uint8_t _state;
    uint8_t _ret; /* state to go back to when an end tag name does not match */
    uint8_t _tag;
    uint8_t _raw; /* the element whose text we are in */
    uint8_t _match;
    uint8_t _attr;
    uint8_t _name_len;
    uint8_t _have; /* attribute slots seen in this tag, one bit each */
    bool _end_tag;
    bool _finished;
    bool _base_seen;
    bool _base_ok; /* _base_path is known: relative paths can be resolved */
    char _name[12];
    uint16_t _buf_len;
    uint16_t _off[DM_HTML_SCAN_ATTRS];
    uint16_t _len[DM_HTML_SCAN_ATTRS];
    uint16_t _page_host_len;
    uint16_t _base_host_len;
    uint16_t _base_path_len;
    char _page_host[DM_HTML_SCAN_HOST_MAX];
    char _base_host[DM_HTML_SCAN_HOST_MAX];
    char _base_path[DM_HTML_SCAN_PATH_MAX];
    char _buf[DM_HTML_SCAN_BUF];
};

/*
 * Starts the scan of one page. page_host is the request's Host ("" or NULL
 * when unknown), page_path its target, origin-form ("/a/b.html?q") or
 * absolute-form (NULL reads as "/"). Both are copied: page_host lowercased,
 * a :80 or :443 port dropped; a path longer than DM_HTML_SCAN_PATH_MAX
 * leaves only absolute-path URLs resolvable (the others count as dropped).
 * limit is the number of page bytes to scan, 0 for all. Any thread; s is
 * then used by one thread at a time.
 */
void dm_html_scan_init(struct dm_html_scan *s, const char *page_host, const char *page_path,
                       uint64_t limit);

/*
 * Scans the next len bytes of the page, calling cb for each object whose tag
 * ends in them. p is only read, and only during the call; any split of the
 * page into calls gives the same objects. Bytes past limit set stopped and
 * are ignored, as is every call after dm_html_scan_finish(). Never
 * allocates; uses about 16 KiB of stack while it reports a URL.
 */
void dm_html_scan_feed(struct dm_html_scan *s, const char *p, size_t len, dm_html_object_cb cb,
                       void *arg);

/*
 * Ends the page: a tag still open is dropped (browsers drop it too) and later
 * feeds do nothing. Returns true when the whole page was scanned, false when
 * limit cut it (the object list is then a prefix of the page's).
 */
bool dm_html_scan_finish(struct dm_html_scan *s);

/* The kind's name for logs and tests: "image", "script", "stylesheet"... */
const char *dm_html_kind_name(enum dm_html_kind kind);

/*
 * Resolves the URL reference ref against a base (base_host, base_path: an
 * origin-form path as this function returns it, query allowed; base_path may
 * be NULL when unknown, and then only references with an absolute path
 * resolve), as the WHATWG URL parser does for http(s): spaces and C0 controls
 * trimmed, tabs and newlines removed, "\" read as "/", dot segments removed,
 * characters a browser percent-encodes encoded, query kept, fragment dropped.
 * Writes the host (lowercase, userinfo and default port removed; base_host
 * as given when ref has none) then the path into out. Returns 0 with
 * *host_len and *path_len set, -EINVAL when ref is not an http(s) URL
 * (data:, javascript:, about:, blob:, mailto:..., an empty host, a bad
 * port), -ENOENT when it needs base_path and that is NULL, -ENOSPC when it
 * does not fit in cap bytes (or ref holds tabs or newlines and is longer
 * than DM_URL_MAX). Uses about 8 KiB of stack. Pure: any thread.
 */
int dm_url_resolve(const char *base_host, size_t base_host_len, const char *base_path,
                   size_t base_path_len, const char *ref, size_t ref_len, char *out, size_t cap,
                   size_t *host_len, size_t *path_len);

#endif
