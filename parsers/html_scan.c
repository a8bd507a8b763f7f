/*
 * The HTML embedded-object scanner: a resumable tokenizer after the HTML
 * standard's (WHATWG §13.2.5), reduced to what finds URLs.
 *
 * State lives in struct dm_html_scan between calls, so a tag, an attribute
 * name or a value may be split anywhere. Text, comments, raw text and quoted
 * values are skipped with memchr(); only tag and attribute names go byte by
 * byte. Names are lowercased into _name (12 bytes; no name we look for is
 * longer, so longer ones are only marked too long). The values of the attributes a tag needs (src,
 * srcset, href, rel, data, poster, type) are copied into _buf as they pass, one slot each, and read
 * when the tag's '>' arrives: so the first of duplicate attributes wins and "rel" may come after
 * "href". A value that would overflow _buf is dropped (its slot stays empty, so a duplicate does
 * not replace it).
 *
 * Deviations from the standard, all rare in pages and harmless to the
 * catalog: the tree builder is not run, so foreign content (svg, math) is
 * tokenized like HTML and CDATA sections end at "]]>" everywhere, <template>
 * contents count, "<image>" is not read as "<img>"; the character reference
 * table is a handful of names; "http:foo" (scheme, no slashes) is read as
 * host foo even on an http page.
 */
#include "parsers/html_scan.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Tokenizer states; "reconsume" in the standard is "do not advance p" here. */
enum {
    S_DATA,
    S_TAG_OPEN,
    S_END_TAG_OPEN,
    S_TAG_NAME,
    S_BEFORE_ATTR_NAME,
    S_ATTR_NAME,
    S_AFTER_ATTR_NAME,
    S_BEFORE_VALUE,
    S_VALUE_DQ,
    S_VALUE_SQ,
    S_VALUE_UNQ,
    S_AFTER_VALUE_Q,
    S_SELF_CLOSING,
    S_MARKUP_DECL,   /* after "<!" */
    S_MARKUP_DASH,   /* after "<!-" */
    S_MARKUP_CDATA,  /* inside "<![CDATA[", _match bytes matched */
    S_COMMENT_START, /* after "<!--" */
    S_COMMENT_START_DASH,
    S_COMMENT,
    S_COMMENT_END_DASH,
    S_COMMENT_END,
    S_COMMENT_END_BANG,
    S_BOGUS_COMMENT,
    S_CDATA,
    S_CDATA_BRACKET,
    S_CDATA_END,
    S_RAW, /* RCDATA and RAWTEXT: only "</name" matters */
    S_RAW_LT,
    S_END_NAME, /* matching "</name" of _raw; back to _ret on a mismatch */
    S_SD,       /* script data and its escapes */
    S_SD_LT,
    S_SD_ESC_START,
    S_SD_ESC_START_DASH,
    S_SD_ESC,
    S_SD_ESC_DASH,
    S_SD_ESC_DASH_DASH,
    S_SD_ESC_LT,
    S_SD_DESC_START,
    S_SD_DESC,
    S_SD_DESC_DASH,
    S_SD_DESC_DASH_DASH,
    S_SD_DESC_LT,
    S_SD_DESC_END,
    S_DONE, /* after <plaintext>: no more tags */
};

/* Attribute slots: index into _off/_len, bit in _have. */
enum { A_SRC, A_SRCSET, A_HREF, A_REL, A_DATA, A_POSTER, A_TYPE, A_NONE = 0xff };

#define BIT(a) (1u << (a))

enum { RAW_NO, RAW_TEXT, RAW_SCRIPT, RAW_PLAIN };

enum {
    T_NONE,
    T_IMG,
    T_SOURCE,
    T_SCRIPT,
    T_LINK,
    T_IFRAME,
    T_FRAME,
    T_EMBED,
    T_OBJECT,
    T_VIDEO,
    T_AUDIO,
    T_INPUT,
    T_BASE,
    T_STYLE,
    T_TEXTAREA,
    T_TITLE,
    T_XMP,
    T_NOEMBED,
    T_NOFRAMES,
    T_NOSCRIPT,
    T_PLAINTEXT,
    T_COUNT,
};

struct tag_info {
    const char *name;
    uint8_t len;
    uint8_t attrs; /* slots to keep */
    uint8_t raw;   /* what its text is */
};

static const struct tag_info tags[T_COUNT] = {
    [T_NONE] = { "", 0, 0, RAW_NO },
    [T_IMG] = { "img", 3, BIT(A_SRC) | BIT(A_SRCSET), RAW_NO },
    [T_SOURCE] = { "source", 6, BIT(A_SRC) | BIT(A_SRCSET), RAW_NO },
    [T_SCRIPT] = { "script", 6, BIT(A_SRC), RAW_SCRIPT },
    [T_LINK] = { "link", 4, BIT(A_HREF) | BIT(A_REL), RAW_NO },
    [T_IFRAME] = { "iframe", 6, BIT(A_SRC), RAW_TEXT },
    [T_FRAME] = { "frame", 5, BIT(A_SRC), RAW_NO },
    [T_EMBED] = { "embed", 5, BIT(A_SRC), RAW_NO },
    [T_OBJECT] = { "object", 6, BIT(A_DATA), RAW_NO },
    [T_VIDEO] = { "video", 5, BIT(A_SRC) | BIT(A_POSTER), RAW_NO },
    [T_AUDIO] = { "audio", 5, BIT(A_SRC), RAW_NO },
    [T_INPUT] = { "input", 5, BIT(A_SRC) | BIT(A_TYPE), RAW_NO },
    [T_BASE] = { "base", 4, BIT(A_HREF), RAW_NO },
    [T_STYLE] = { "style", 5, 0, RAW_TEXT },
    [T_TEXTAREA] = { "textarea", 8, 0, RAW_TEXT },
    [T_TITLE] = { "title", 5, 0, RAW_TEXT },
    [T_XMP] = { "xmp", 3, 0, RAW_TEXT },
    [T_NOEMBED] = { "noembed", 7, 0, RAW_TEXT },
    [T_NOFRAMES] = { "noframes", 8, 0, RAW_TEXT },
    [T_NOSCRIPT] = { "noscript", 8, 0, RAW_TEXT },
    [T_PLAINTEXT] = { "plaintext", 9, 0, RAW_PLAIN },
};

/* Character classes of the tokenizer. */
#define C_WS    0x01 /* HTML whitespace: tab, LF, FF, CR, space */
#define C_ALPHA 0x02
#define C_TAGX  0x04 /* ends a tag name: whitespace, '/', '>' */
#define C_ATTRX 0x08 /* ends an attribute name: whitespace, '/', '>', '=' */
#define C_UNQX  0x10 /* ends an unquoted value: whitespace, '>' */
#define C_DIGIT 0x20

/* clang-format off */
static const uint8_t cls[256] = {
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1d, 0x1d, 0x00, 0x1d, 0x1d, 0x00, 0x00,
    0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x1d, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x0c,
    0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x20, 0x00, 0x00, 0x00, 0x08, 0x1c, 0x00,
    0x00, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02,
    0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
    0x00, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02,
    0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00,
    /* 0x80-0xff: none */
};
/* clang-format on */

static inline bool
is_ws(unsigned c)
{
    return cls[c] & C_WS;
}

static inline bool
is_alpha(unsigned c)
{
    return cls[c] & C_ALPHA;
}

static inline bool
is_alnum(unsigned c)
{
    return cls[c] & (C_ALPHA | C_DIGIT);
}

static inline unsigned
to_lower(unsigned c)
{
    return (c - 'A' < 26u) ? c | 0x20 : c;
}

static bool
ieq(const char *a, size_t alen, const char *lower)
{
    size_t n = strlen(lower);
    if (alen != n) {
        return false;
    }
    for (size_t i = 0; i < n; i++) {
        if (to_lower((unsigned char)a[i]) != (unsigned char)lower[i]) {
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------------------------ */
/* URL resolution                                                           */
/* ------------------------------------------------------------------------ */

/* Which bytes a browser percent-encodes (WHATWG URL: path percent-encode set,
 * special-query percent-encode set). */
#define ENC_PATH  0x01
#define ENC_QUERY 0x02

static const uint8_t url_enc[256] = {
    [' '] = ENC_PATH | ENC_QUERY,
    ['"'] = ENC_PATH | ENC_QUERY,
    ['#'] = ENC_PATH | ENC_QUERY,
    ['<'] = ENC_PATH | ENC_QUERY,
    ['>'] = ENC_PATH | ENC_QUERY,
    ['\''] = ENC_QUERY,
    ['?'] = ENC_PATH,
    ['`'] = ENC_PATH,
    ['{'] = ENC_PATH,
    ['}'] = ENC_PATH,
};

static inline bool
must_encode(unsigned c, unsigned set)
{
    return c < 0x20 || c >= 0x7f || (url_enc[c] & set);
}

struct wbuf {
    char *p;
    size_t cap, len;
    bool failed;
};

static void
put(struct wbuf *w, const void *p, size_t n)
{
    if (w->cap - w->len < n) {
        w->failed = true;
        return;
    }
    memcpy(w->p + w->len, p, n);
    w->len += n;
}

static void
put_c(struct wbuf *w, char c)
{
    put(w, &c, 1);
}

static void
put_encoded(struct wbuf *w, const unsigned char *p, size_t n, unsigned set)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && !must_encode(p[j], set)) {
            j++;
        }
        put(w, p + i, j - i);
        if (j == n) {
            break;
        }
        char e[3] = { '%', hex[p[j] >> 4], hex[p[j] & 15] };
        put(w, e, 3);
        i = j + 1;
    }
}

static inline bool
is_slash(unsigned c)
{
    return c == '/' || c == '\\';
}

/* "." and ".." as path segments, "%2e" included (WHATWG URL). */
static bool
is_dot_seg(const unsigned char *s, size_t n, unsigned dots)
{
    unsigned seen = 0;
    size_t i = 0;
    while (i < n) {
        if (s[i] == '.') {
            i++;
        } else if (n - i >= 3 && s[i] == '%' && s[i + 1] == '2' && (s[i + 2] | 0x20) == 'e') {
            i += 3;
        } else {
            return false;
        }
        seen++;
    }
    return seen == dots;
}

/* Removes the last segment of the path written since `start`. */
static void
pop_segment(struct wbuf *w, size_t start)
{
    while (w->len > start) {
        w->len--;
        if (w->p[w->len] == '/') {
            return;
        }
    }
}

/* Appends the segments of s (after its leading slash) to the path written
 * since `start`, resolving "." and ".." as they come. */
static void
put_segments(struct wbuf *w, const unsigned char *s, size_t n, size_t start)
{
    size_t k = 0;
    for (;;) {
        size_t e = k;
        while (e < n && !is_slash(s[e])) {
            e++;
        }
        bool last = e == n;
        if (is_dot_seg(s + k, e - k, 1)) {
            if (last) {
                put_c(w, '/');
            }
        } else if (is_dot_seg(s + k, e - k, 2)) {
            pop_segment(w, start);
            if (last) {
                put_c(w, '/');
            }
        } else {
            put_c(w, '/');
            put_encoded(w, s + k, e - k, ENC_PATH);
        }
        if (last) {
            return;
        }
        k = e + 1;
    }
}

/* Writes the host of an authority: userinfo dropped, lowercased, port kept
 * unless it is the scheme's default (80 and 443 both when default_port is 0). */
static int
put_host(struct wbuf *w, const unsigned char *a, size_t n, unsigned default_port)
{
    for (size_t i = n; i > 0; i--) {
        if (a[i - 1] == '@') {
            a += i;
            n -= i;
            break;
        }
    }
    size_t h = 0;
    if (n && a[0] == '[') {
        const unsigned char *rb = memchr(a, ']', n);
        if (!rb) {
            return -EINVAL;
        }
        h = (size_t)(rb - a) + 1;
    } else {
        while (h < n && a[h] != ':') {
            h++;
        }
    }
    if (h == 0 || (h < n && a[h] != ':')) {
        return -EINVAL;
    }
    for (size_t i = 0; i < h; i++) {
        unsigned c = a[i];
        if (c <= 0x20 || c == 0x7f || c == '<' || c == '>' || c == '^' || c == '|' || c == '"') {
            return -EINVAL;
        }
        put_c(w, (char)to_lower(c));
    }
    if (h + 1 < n) {
        unsigned long port = 0;
        for (size_t i = h + 1; i < n; i++) {
            if (!(cls[a[i]] & C_DIGIT)) {
                return -EINVAL;
            }
            port = port * 10 + (a[i] - '0');
            if (port > 65535) {
                return -EINVAL;
            }
        }
        bool dflt = default_port ? port == default_port : (port == 80 || port == 443);
        if (!dflt) {
            char d[8];
            size_t k = sizeof d;
            do {
                d[--k] = (char)('0' + port % 10);
                port /= 10;
            } while (port);
            put_c(w, ':');
            put(w, d + k, sizeof d - k);
        }
    }
    return 0;
}

int
dm_url_resolve(const char *base_host, size_t base_host_len, const char *base_path,
               size_t base_path_len, const char *ref, size_t ref_len, char *out, size_t cap,
               size_t *host_len, size_t *path_len)
{
    const unsigned char *r = (const unsigned char *)ref;
    size_t n = ref_len;
    char clean[DM_URL_MAX];

    while (n && r[0] <= 0x20) {
        r++;
        n--;
    }
    while (n && r[n - 1] <= 0x20) {
        n--;
    }
    for (size_t i = 0; i < n; i++) {
        if (r[i] == '\t' || r[i] == '\n' || r[i] == '\r') {
            /* Browsers drop tabs and newlines anywhere in a URL. */
            if (n > sizeof clean) {
                return -ENOSPC;
            }
            size_t m = 0;
            for (size_t j = 0; j < n; j++) {
                if (r[j] != '\t' && r[j] != '\n' && r[j] != '\r') {
                    clean[m++] = (char)r[j];
                }
            }
            r = (const unsigned char *)clean;
            n = m;
            break;
        }
    }

    struct wbuf w = { out, cap, 0, false };
    size_t i = 0;
    unsigned default_port = 0;
    bool auth = false;
    if (n && is_alpha(r[0])) {
        size_t j = 1;
        while (j < n && (is_alnum(r[j]) || r[j] == '+' || r[j] == '-' || r[j] == '.')) {
            j++;
        }
        if (j < n && r[j] == ':') {
            if (ieq((const char *)r, j, "http")) {
                default_port = 80;
            } else if (ieq((const char *)r, j, "https")) {
                default_port = 443;
            } else {
                return -EINVAL; /* data:, javascript:, about:, blob:, mailto:... */
            }
            auth = true;
            i = j + 1;
        }
    }
    if (!auth && n >= 2 && is_slash(r[0]) && is_slash(r[1])) {
        auth = true;
    }
    if (auth) {
        /* http(s) ignores any number of slashes before the host. */
        while (i < n && is_slash(r[i])) {
            i++;
        }
        size_t a = i;
        while (i < n && !is_slash(r[i]) && r[i] != '?' && r[i] != '#') {
            i++;
        }
        int rc = put_host(&w, r + a, i - a, default_port);
        if (rc < 0) {
            return rc;
        }
    } else {
        put(&w, base_host, base_host_len);
    }
    if (w.failed) {
        return -ENOSPC;
    }
    size_t path_start = w.len;
    size_t q = i;
    while (q < n && r[q] != '?' && r[q] != '#') {
        q++;
    }
    size_t bq = 0;
    bool base_query = false;
    if (auth || (q > i && is_slash(r[i]))) {
        if (q > i) {
            i++; /* the leading slash */
        }
        put_segments(&w, r + i, q - i, path_start);
    } else if (!base_path) {
        return -ENOENT;
    } else {
        /* memchr, not byte loops: the base may be long and this runs for
         * every URL of the page. */
        const char *qm = memchr(base_path, '?', base_path_len);
        bq = qm ? (size_t)(qm - base_path) : base_path_len;
        const char *hash = memchr(base_path, '#', bq);
        bq = hash ? (size_t)(hash - base_path) : bq;
        if (q == i) {
            /* No path: the base's, and its query unless ref has one. */
            put(&w, base_path, bq);
            base_query = q == n || r[q] == '#';
        } else {
            const char *slash = bq ? memrchr(base_path, '/', bq) : NULL;
            put(&w, base_path, slash ? (size_t)(slash - base_path) : 0);
            put_segments(&w, r + i, q - i, path_start);
        }
    }
    if (w.len == path_start) {
        put_c(&w, '/');
    }
    if (q < n && r[q] == '?') {
        size_t h = q + 1;
        while (h < n && r[h] != '#') {
            h++;
        }
        put_c(&w, '?');
        put_encoded(&w, r + q + 1, h - q - 1, ENC_QUERY);
    } else if (base_query) {
        size_t e = bq;
        while (e < base_path_len && base_path[e] != '#') {
            e++;
        }
        put(&w, base_path + bq, e - bq);
    }
    if (w.failed) {
        return -ENOSPC;
    }
    *host_len = path_start;
    *path_len = w.len - path_start;
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Attribute values                                                         */
/* ------------------------------------------------------------------------ */

static size_t
put_utf8(char *o, uint32_t cp)
{
    if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) {
        cp = 0xfffd;
    }
    if (cp < 0x80) {
        o[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (char)(0xc0 | cp >> 6);
        o[1] = (char)(0x80 | (cp & 0x3f));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (char)(0xe0 | cp >> 12);
        o[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        o[2] = (char)(0x80 | (cp & 0x3f));
        return 3;
    }
    o[0] = (char)(0xf0 | cp >> 18);
    o[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    o[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

struct named_ref {
    const char *name;
    uint8_t len;
    bool legacy; /* also recognised without ';' */
    uint32_t cp;
};

static const struct named_ref named_refs[] = {
    { "amp", 3, true, '&' },     { "lt", 2, true, '<' },      { "gt", 2, true, '>' },
    { "quot", 4, true, '"' },    { "apos", 4, false, '\'' },  { "nbsp", 4, true, 0xa0 },
    { "sol", 3, false, '/' },    { "colon", 5, false, ':' },  { "quest", 5, false, '?' },
    { "num", 3, false, '#' },    { "equals", 6, false, '=' }, { "percnt", 6, false, '%' },
    { "period", 6, false, '.' },
};

/*
 * Decodes character references in place; the decoded text is never longer
 * (the shortest reference of each UTF-8 length is at least as long as it).
 * As in an attribute value: a legacy name without ';' stays as written when
 * '=' or an alphanumeric follows it, so "?a=1&amp=2" keeps "&amp=".
 */
static size_t
decode_refs(char *v, size_t n)
{
    char *amp = memchr(v, '&', n);
    if (!amp) {
        return n;
    }
    size_t o = (size_t)(amp - v), i = o;
    while (i < n) {
        if (v[i] != '&') {
            v[o++] = v[i++];
            continue;
        }
        size_t j = i + 1;
        if (j < n && v[j] == '#') {
            j++;
            bool hex = j < n && (v[j] | 0x20) == 'x';
            j += hex;
            uint32_t cp = 0;
            size_t d = j;
            for (; j < n; j++) {
                unsigned c = (unsigned char)v[j], x;
                if (cls[c] & C_DIGIT) {
                    x = c - '0';
                } else if (hex && (c | 0x20) - 'a' < 6u) {
                    x = (c | 0x20) - 'a' + 10;
                } else {
                    break;
                }
                cp = cp > 0x10ffff ? cp : cp * (hex ? 16 : 10) + x;
            }
            if (j == d) {
                v[o++] = v[i++]; /* "&#" with no digits is text */
                continue;
            }
            if (j < n && v[j] == ';') {
                j++;
            }
            o += put_utf8(v + o, cp);
            i = j;
            continue;
        }
        while (j < n && is_alnum((unsigned char)v[j])) {
            j++;
        }
        const struct named_ref *hit = NULL;
        for (size_t k = 0; k < sizeof named_refs / sizeof named_refs[0]; k++) {
            const struct named_ref *nr = &named_refs[k];
            if (j - i - 1 == nr->len && memcmp(v + i + 1, nr->name, nr->len) == 0) {
                hit = nr;
                break;
            }
        }
        if (hit && j < n && v[j] == ';') {
            o += put_utf8(v + o, hit->cp);
            i = j + 1;
        } else if (hit && hit->legacy && !(j < n && v[j] == '=')) {
            o += put_utf8(v + o, hit->cp);
            i = j;
        } else {
            v[o++] = v[i++];
        }
    }
    return o;
}

/* ------------------------------------------------------------------------ */
/* Reporting                                                                */
/* ------------------------------------------------------------------------ */

static void
emit_url(struct dm_html_scan *s, const char *v, size_t n, enum dm_html_kind kind,
         dm_html_object_cb cb, void *arg)
{
    while (n && (unsigned char)v[0] <= 0x20) {
        v++;
        n--;
    }
    while (n && (unsigned char)v[n - 1] <= 0x20) {
        n--;
    }
    if (n == 0 || v[0] == '#') {
        return; /* the page itself is not one of its objects */
    }
    char out[DM_URL_MAX];
    size_t hl, pl;
    int rc = dm_url_resolve(s->_base_host, s->_base_host_len, s->_base_ok ? s->_base_path : NULL,
                            s->_base_path_len, v, n, out, sizeof out, &hl, &pl);
    if (rc == -ENOSPC || rc == -ENOENT) {
        s->dropped++; /* too long to keep: the URL, or the base it needs */
    }
    if (rc < 0) {
        return;
    }
    const char *host = out;
    const char *path = out + hl;
    if (hl == s->_page_host_len && memcmp(out, s->_page_host, hl) == 0) {
        host = ""; /* same host as the page */
        hl = 0;
    }
    s->objects++;
    cb(arg, host, hl, path, pl, kind);
}

/* The value of slot a in this tag, decoded, or NULL when absent. */
static char *
attr_value(struct dm_html_scan *s, unsigned a, size_t *n)
{
    if (!(s->_have & BIT(a))) {
        return NULL;
    }
    char *v = s->_buf + s->_off[a];
    *n = decode_refs(v, s->_len[a]);
    s->_len[a] = (uint16_t)*n;
    return v;
}

static void
emit_attr(struct dm_html_scan *s, unsigned a, enum dm_html_kind kind, dm_html_object_cb cb,
          void *arg)
{
    size_t n;
    const char *v = attr_value(s, a, &n);
    if (v) {
        emit_url(s, v, n, kind, cb, arg);
    }
}

/* A srcset value (HTML "parse a srcset attribute"): candidates separated by
 * commas, each a URL up to whitespace, then descriptors up to the next comma
 * outside parentheses. Trailing commas of a URL separate it. */
static void
emit_srcset(struct dm_html_scan *s, unsigned a, dm_html_object_cb cb, void *arg)
{
    size_t n;
    const char *v = attr_value(s, a, &n);
    if (!v) {
        return;
    }
    size_t i = 0;
    for (;;) {
        while (i < n && (is_ws((unsigned char)v[i]) || v[i] == ',')) {
            i++;
        }
        if (i == n) {
            return;
        }
        size_t u = i;
        while (i < n && !is_ws((unsigned char)v[i])) {
            i++;
        }
        size_t e = i;
        if (v[e - 1] == ',') {
            while (e > u && v[e - 1] == ',') {
                e--;
            }
        } else {
            bool paren = false;
            while (i < n && (paren || v[i] != ',')) {
                if (v[i] == '(') {
                    paren = true;
                } else if (v[i] == ')') {
                    paren = false;
                }
                i++;
            }
        }
        emit_url(s, v + u, e - u, DM_HTML_IMAGE, cb, arg);
    }
}

/* The kind a link's rel gives its href, or -1 when it is not an object. */
static int
link_kind(struct dm_html_scan *s)
{
    size_t n;
    const char *v = attr_value(s, A_REL, &n);
    if (!v) {
        return -1;
    }
    static const struct {
        const char *token;
        int rank; /* lower wins: "stylesheet preload" is a stylesheet */
        enum dm_html_kind kind;
    } rels[] = {
        { "stylesheet", 0, DM_HTML_STYLESHEET },
        { "modulepreload", 1, DM_HTML_SCRIPT },
        { "icon", 2, DM_HTML_ICON },
        { "apple-touch-icon", 2, DM_HTML_ICON },
        { "apple-touch-icon-precomposed", 2, DM_HTML_ICON },
        { "mask-icon", 2, DM_HTML_ICON },
        { "preload", 3, DM_HTML_PRELOAD },
    };
    int best = -1, best_rank = 99;
    size_t i = 0;
    while (i < n) {
        while (i < n && is_ws((unsigned char)v[i])) {
            i++;
        }
        size_t t = i;
        while (i < n && !is_ws((unsigned char)v[i])) {
            i++;
        }
        for (size_t k = 0; k < sizeof rels / sizeof rels[0]; k++) {
            if (rels[k].rank < best_rank && ieq(v + t, i - t, rels[k].token)) {
                best = (int)rels[k].kind;
                best_rank = rels[k].rank;
            }
        }
    }
    return best;
}

/* The first <base href> sets the base of every later URL (its own resolved
 * against the page). One that does not resolve leaves the page's. */
static void
set_base(struct dm_html_scan *s)
{
    size_t n;
    const char *v = attr_value(s, A_HREF, &n);
    if (!v) {
        return; /* a base without href does not count */
    }
    s->_base_seen = true;
    char out[DM_URL_MAX];
    size_t hl, pl;
    int rc = dm_url_resolve(s->_base_host, s->_base_host_len, s->_base_ok ? s->_base_path : NULL,
                            s->_base_path_len, v, n, out, sizeof out, &hl, &pl);
    if (rc == -EINVAL) {
        return;
    }
    /* Past here the base is unknown unless it is kept whole. */
    if (rc < 0 || hl >= DM_HTML_SCAN_HOST_MAX || pl >= DM_HTML_SCAN_PATH_MAX) {
        s->_base_ok = false;
        return;
    }
    memcpy(s->_base_host, out, hl);
    s->_base_host_len = (uint16_t)hl;
    memcpy(s->_base_path, out + hl, pl);
    s->_base_path_len = (uint16_t)pl;
    s->_base_ok = true;
}

static void
emit_tag(struct dm_html_scan *s, dm_html_object_cb cb, void *arg)
{
    switch (s->_tag) {
    case T_IMG:
        emit_attr(s, A_SRC, DM_HTML_IMAGE, cb, arg);
        emit_srcset(s, A_SRCSET, cb, arg);
        break;
    case T_SOURCE:
        emit_attr(s, A_SRC, DM_HTML_MEDIA, cb, arg);
        emit_srcset(s, A_SRCSET, cb, arg);
        break;
    case T_SCRIPT:
        emit_attr(s, A_SRC, DM_HTML_SCRIPT, cb, arg);
        break;
    case T_LINK: {
        int kind = link_kind(s);
        if (kind >= 0) {
            emit_attr(s, A_HREF, (enum dm_html_kind)kind, cb, arg);
        }
        break;
    }
    case T_IFRAME:
    case T_FRAME:
        emit_attr(s, A_SRC, DM_HTML_FRAME, cb, arg);
        break;
    case T_EMBED:
        emit_attr(s, A_SRC, DM_HTML_EMBED, cb, arg);
        break;
    case T_OBJECT:
        emit_attr(s, A_DATA, DM_HTML_EMBED, cb, arg);
        break;
    case T_VIDEO:
        emit_attr(s, A_SRC, DM_HTML_MEDIA, cb, arg);
        emit_attr(s, A_POSTER, DM_HTML_IMAGE, cb, arg);
        break;
    case T_AUDIO:
        emit_attr(s, A_SRC, DM_HTML_MEDIA, cb, arg);
        break;
    case T_INPUT: {
        size_t n;
        const char *t = attr_value(s, A_TYPE, &n);
        if (t && ieq(t, n, "image")) {
            emit_attr(s, A_SRC, DM_HTML_IMAGE, cb, arg);
        }
        break;
    }
    case T_BASE:
        if (!s->_base_seen) {
            set_base(s);
        }
        break;
    default:
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Tokenizer                                                                */
/* ------------------------------------------------------------------------ */

static inline void
tag_start(struct dm_html_scan *s, bool end_tag)
{
    s->_end_tag = end_tag;
    s->_tag = T_NONE;
    s->_name_len = 0;
    s->_have = 0;
    s->_buf_len = 0;
    s->_attr = A_NONE;
}

static inline void
name_push(struct dm_html_scan *s, unsigned c)
{
    if (s->_name_len < sizeof s->_name) {
        s->_name[s->_name_len++] = (char)to_lower(c);
    } else {
        s->_name_len = sizeof s->_name + 1; /* too long to be one we know */
    }
}

static void
tag_named(struct dm_html_scan *s)
{
    /* a, p, li, td, br, h1... are most tags, and none of ours is that short. */
    if (s->_end_tag || s->_name_len < 3 || s->_name_len > 9) {
        return;
    }
    for (unsigned t = 1; t < T_COUNT; t++) {
        if (tags[t].len == s->_name_len && memcmp(tags[t].name, s->_name, s->_name_len) == 0) {
            s->_tag = (uint8_t)t;
            return;
        }
    }
}

/* The attribute name just ended: open its slot when the tag wants it and it
 * is the first of its name. Its value, if any, is appended from here. */
static void
attr_named(struct dm_html_scan *s)
{
    static const struct {
        const char *name;
        uint8_t len, slot;
    } attrs[] = {
        { "src", 3, A_SRC },   { "srcset", 6, A_SRCSET }, { "href", 4, A_HREF },
        { "rel", 3, A_REL },   { "data", 4, A_DATA },     { "poster", 6, A_POSTER },
        { "type", 4, A_TYPE },
    };
    s->_attr = A_NONE;
    unsigned want = tags[s->_tag].attrs & ~s->_have;
    if (!want) {
        return;
    }
    for (size_t k = 0; k < sizeof attrs / sizeof attrs[0]; k++) {
        if (attrs[k].len == s->_name_len && memcmp(attrs[k].name, s->_name, s->_name_len) == 0) {
            unsigned a = attrs[k].slot;
            if (want & BIT(a)) {
                s->_have |= (uint8_t)BIT(a);
                s->_off[a] = s->_buf_len;
                s->_len[a] = 0;
                s->_attr = (uint8_t)a;
            }
            return;
        }
    }
}

static inline void
value_append(struct dm_html_scan *s, const unsigned char *p, size_t n)
{
    unsigned a = s->_attr;
    if (n > sizeof s->_buf - s->_buf_len) {
        /* Too long to keep: drop it whole, never cut it into a wrong URL. */
        s->_buf_len = s->_off[a];
        s->_len[a] = 0;
        s->_attr = A_NONE;
        s->dropped++;
        return;
    }
    memcpy(s->_buf + s->_buf_len, p, n);
    s->_buf_len = (uint16_t)(s->_buf_len + n);
    s->_len[a] = (uint16_t)(s->_len[a] + n);
}

/* A tag ended at '>': report its objects; returns the state that follows. */
static unsigned
tag_done(struct dm_html_scan *s, dm_html_object_cb cb, void *arg)
{
    if (s->_end_tag || s->_tag == T_NONE) {
        return S_DATA;
    }
    if (s->_have) {
        emit_tag(s, cb, arg);
    }
    switch (tags[s->_tag].raw) {
    case RAW_TEXT:
        s->_raw = s->_tag;
        return S_RAW;
    case RAW_SCRIPT:
        s->_raw = T_SCRIPT;
        return S_SD;
    case RAW_PLAIN:
        return S_DONE;
    default:
        return S_DATA;
    }
}

/* The first byte in [p, end) that is a or b, or end. */
static inline const unsigned char *
find2(const unsigned char *p, const unsigned char *end, unsigned a, unsigned b)
{
    while (p < end && *p != a && *p != b) {
        p++;
    }
    return p;
}

static void
scan(struct dm_html_scan *s, const unsigned char *p, const unsigned char *end, dm_html_object_cb cb,
     void *arg)
{
    unsigned st = s->_state;
    unsigned c;
    while (p < end) {
        switch (st) {
        case S_DATA: {
            const unsigned char *lt = memchr(p, '<', (size_t)(end - p));
            if (!lt) {
                p = end;
                break;
            }
            p = lt + 1;
            st = S_TAG_OPEN;
            break;
        }
        case S_TAG_OPEN:
            c = *p;
            if (is_alpha(c)) {
                tag_start(s, false);
                st = S_TAG_NAME;
            } else if (c == '!') {
                p++;
                st = S_MARKUP_DECL;
            } else if (c == '/') {
                p++;
                st = S_END_TAG_OPEN;
            } else if (c == '?') {
                st = S_BOGUS_COMMENT;
            } else {
                st = S_DATA; /* a '<' in text; c may start a tag itself */
            }
            break;
        case S_END_TAG_OPEN:
            c = *p;
            if (is_alpha(c)) {
                tag_start(s, true);
                st = S_TAG_NAME;
            } else if (c == '>') {
                p++;
                st = S_DATA;
            } else {
                st = S_BOGUS_COMMENT;
            }
            break;
        case S_TAG_NAME:
            while (p < end && !(cls[*p] & C_TAGX)) {
                name_push(s, *p++);
            }
            if (p == end) {
                break;
            }
            tag_named(s);
            c = *p++;
            st = c == '>' ? tag_done(s, cb, arg) : c == '/' ? S_SELF_CLOSING : S_BEFORE_ATTR_NAME;
            break;
        case S_BEFORE_ATTR_NAME:
            while (p < end && is_ws(*p)) {
                p++;
            }
            if (p == end) {
                break;
            }
            c = *p;
            if (c == '/') {
                p++;
                st = S_SELF_CLOSING;
            } else if (c == '>') {
                p++;
                st = tag_done(s, cb, arg);
            } else {
                s->_name_len = 0;
                if (c == '=') {
                    name_push(s, c); /* an attribute may be named "=" */
                    p++;
                }
                st = S_ATTR_NAME;
            }
            break;
        case S_ATTR_NAME:
            if (tags[s->_tag].attrs) {
                while (p < end && !(cls[*p] & C_ATTRX)) {
                    name_push(s, *p++);
                }
            } else {
                while (p < end && !(cls[*p] & C_ATTRX)) {
                    p++;
                }
            }
            if (p == end) {
                break;
            }
            attr_named(s);
            c = *p++;
            st = c == '='   ? S_BEFORE_VALUE
                 : c == '>' ? tag_done(s, cb, arg)
                 : c == '/' ? S_SELF_CLOSING
                            : S_AFTER_ATTR_NAME;
            break;
        case S_AFTER_ATTR_NAME:
            while (p < end && is_ws(*p)) {
                p++;
            }
            if (p == end) {
                break;
            }
            c = *p;
            if (c == '=' || c == '/' || c == '>') {
                p++;
                st = c == '=' ? S_BEFORE_VALUE : c == '/' ? S_SELF_CLOSING : tag_done(s, cb, arg);
            } else {
                s->_name_len = 0;
                st = S_ATTR_NAME;
            }
            break;
        case S_BEFORE_VALUE:
            while (p < end && is_ws(*p)) {
                p++;
            }
            if (p == end) {
                break;
            }
            c = *p;
            if (c == '"' || c == '\'') {
                p++;
                st = c == '"' ? S_VALUE_DQ : S_VALUE_SQ;
            } else if (c == '>') {
                p++;
                st = tag_done(s, cb, arg);
            } else {
                st = S_VALUE_UNQ;
            }
            break;
        case S_VALUE_DQ:
        case S_VALUE_SQ: {
            const unsigned char *q = memchr(p, st == S_VALUE_DQ ? '"' : '\'', (size_t)(end - p));
            const unsigned char *e = q ? q : end;
            if (s->_attr != A_NONE) {
                value_append(s, p, (size_t)(e - p));
            }
            if (!q) {
                p = end;
                break;
            }
            p = q + 1;
            st = S_AFTER_VALUE_Q;
            break;
        }
        case S_VALUE_UNQ: {
            const unsigned char *v = p;
            while (p < end && !(cls[*p] & C_UNQX)) {
                p++;
            }
            if (s->_attr != A_NONE) {
                value_append(s, v, (size_t)(p - v));
            }
            if (p == end) {
                break;
            }
            c = *p++;
            st = c == '>' ? tag_done(s, cb, arg) : S_BEFORE_ATTR_NAME;
            break;
        }
        case S_AFTER_VALUE_Q:
            c = *p;
            if (c == '>') {
                p++;
                st = tag_done(s, cb, arg);
            } else if (c == '/') {
                p++;
                st = S_SELF_CLOSING;
            } else {
                st = S_BEFORE_ATTR_NAME;
            }
            break;
        case S_SELF_CLOSING:
            if (*p == '>') {
                p++;
                st = tag_done(s, cb, arg);
            } else {
                st = S_BEFORE_ATTR_NAME;
            }
            break;

        case S_MARKUP_DECL:
            c = *p;
            if (c == '-') {
                p++;
                st = S_MARKUP_DASH;
            } else if (c == '[') {
                p++;
                s->_match = 1;
                st = S_MARKUP_CDATA;
            } else {
                st = S_BOGUS_COMMENT; /* <!DOCTYPE ...> and the like */
            }
            break;
        case S_MARKUP_DASH:
            if (*p == '-') {
                p++;
                st = S_COMMENT_START;
            } else {
                st = S_BOGUS_COMMENT;
            }
            break;
        case S_MARKUP_CDATA:
            if (*p != (unsigned char)"[CDATA["[s->_match]) {
                st = S_BOGUS_COMMENT;
                break;
            }
            p++;
            if (++s->_match == 7) {
                st = S_CDATA;
            }
            break;
        case S_COMMENT_START:
        case S_COMMENT_START_DASH:
            c = *p;
            if (c == '-') {
                p++;
                st = st == S_COMMENT_START ? S_COMMENT_START_DASH : S_COMMENT_END;
            } else if (c == '>') {
                p++;
                st = S_DATA; /* <!--> and <!---> */
            } else {
                st = S_COMMENT;
            }
            break;
        case S_COMMENT: {
            const unsigned char *d = memchr(p, '-', (size_t)(end - p));
            if (!d) {
                p = end;
                break;
            }
            p = d + 1;
            st = S_COMMENT_END_DASH;
            break;
        }
        case S_COMMENT_END_DASH:
            if (*p == '-') {
                p++;
                st = S_COMMENT_END;
            } else {
                st = S_COMMENT;
            }
            break;
        case S_COMMENT_END:
            c = *p;
            if (c == '>') {
                p++;
                st = S_DATA;
            } else if (c == '!') {
                p++;
                st = S_COMMENT_END_BANG;
            } else if (c == '-') {
                p++;
            } else {
                st = S_COMMENT;
            }
            break;
        case S_COMMENT_END_BANG:
            c = *p;
            if (c == '-') {
                p++;
                st = S_COMMENT_END_DASH;
            } else if (c == '>') {
                p++;
                st = S_DATA; /* --!> */
            } else {
                st = S_COMMENT;
            }
            break;
        case S_BOGUS_COMMENT: {
            const unsigned char *gt = memchr(p, '>', (size_t)(end - p));
            if (!gt) {
                p = end;
                break;
            }
            p = gt + 1;
            st = S_DATA;
            break;
        }
        case S_CDATA: {
            const unsigned char *b = memchr(p, ']', (size_t)(end - p));
            if (!b) {
                p = end;
                break;
            }
            p = b + 1;
            st = S_CDATA_BRACKET;
            break;
        }
        case S_CDATA_BRACKET:
            if (*p == ']') {
                p++;
                st = S_CDATA_END;
            } else {
                st = S_CDATA;
            }
            break;
        case S_CDATA_END:
            c = *p;
            if (c == ']') {
                p++;
            } else if (c == '>') {
                p++;
                st = S_DATA;
            } else {
                st = S_CDATA;
            }
            break;

        case S_RAW:
        case S_SD: {
            const unsigned char *lt = memchr(p, '<', (size_t)(end - p));
            if (!lt) {
                p = end;
                break;
            }
            p = lt + 1;
            st = st == S_RAW ? S_RAW_LT : S_SD_LT;
            break;
        }
        case S_RAW_LT:
            if (*p == '/') {
                p++;
                s->_match = 0;
                s->_ret = S_RAW;
                st = S_END_NAME;
            } else {
                st = S_RAW;
            }
            break;
        case S_END_NAME: {
            /* "</" then the element's name and whitespace, '/' or '>' end
             * its text; anything else was text. */
            const struct tag_info *t = &tags[s->_raw];
            while (p < end && s->_match < t->len &&
                   to_lower(*p) == (unsigned char)t->name[s->_match]) {
                p++;
                s->_match++;
            }
            if (p == end) {
                break;
            }
            c = *p;
            if (s->_match < t->len || !(cls[c] & C_TAGX)) {
                st = s->_ret;
                break;
            }
            tag_start(s, true);
            p++;
            st = c == '>' ? S_DATA : c == '/' ? S_SELF_CLOSING : S_BEFORE_ATTR_NAME;
            break;
        }
        case S_SD_LT:
            c = *p;
            if (c == '/') {
                p++;
                s->_match = 0;
                s->_ret = S_SD;
                st = S_END_NAME;
            } else if (c == '!') {
                p++;
                st = S_SD_ESC_START;
            } else {
                st = S_SD;
            }
            break;
        case S_SD_ESC_START:
        case S_SD_ESC_START_DASH:
            if (*p == '-') {
                p++;
                st = st == S_SD_ESC_START ? S_SD_ESC_START_DASH : S_SD_ESC_DASH_DASH;
            } else {
                st = S_SD;
            }
            break;
        case S_SD_ESC:
        case S_SD_DESC:
            p = find2(p, end, '-', '<');
            if (p == end) {
                break;
            }
            c = *p++;
            if (st == S_SD_ESC) {
                st = c == '-' ? S_SD_ESC_DASH : S_SD_ESC_LT;
            } else {
                st = c == '-' ? S_SD_DESC_DASH : S_SD_DESC_LT;
            }
            break;
        case S_SD_ESC_DASH:
        case S_SD_ESC_DASH_DASH:
        case S_SD_DESC_DASH:
        case S_SD_DESC_DASH_DASH: {
            bool esc = st == S_SD_ESC_DASH || st == S_SD_ESC_DASH_DASH;
            bool dash_dash = st == S_SD_ESC_DASH_DASH || st == S_SD_DESC_DASH_DASH;
            c = *p++;
            if (c == '-') {
                st = esc ? S_SD_ESC_DASH_DASH : S_SD_DESC_DASH_DASH;
            } else if (c == '<') {
                st = esc ? S_SD_ESC_LT : S_SD_DESC_LT;
            } else if (c == '>' && dash_dash) {
                st = S_SD; /* "-->" ends the escape */
            } else {
                st = esc ? S_SD_ESC : S_SD_DESC;
            }
            break;
        }
        case S_SD_ESC_LT:
            c = *p;
            s->_match = 0;
            if (c == '/') {
                p++;
                s->_ret = S_SD_ESC;
                st = S_END_NAME;
            } else if (is_alpha(c)) {
                st = S_SD_DESC_START;
            } else {
                st = S_SD_ESC;
            }
            break;
        case S_SD_DESC_LT:
            if (*p == '/') {
                p++;
                s->_match = 0;
                st = S_SD_DESC_END;
            } else {
                st = S_SD_DESC;
            }
            break;
        case S_SD_DESC_START:
        case S_SD_DESC_END: {
            /* "<script" inside an escape starts a double escape, "</script"
             * inside that ends it; neither ends the script element. */
            bool start = st == S_SD_DESC_START;
            while (p < end && s->_match < 6 && to_lower(*p) == (unsigned char)"script"[s->_match]) {
                p++;
                s->_match++;
            }
            if (p == end) {
                break;
            }
            if (s->_match == 6 && (cls[*p] & C_TAGX)) {
                p++;
                st = start ? S_SD_DESC : S_SD_ESC;
            } else {
                st = start ? S_SD_ESC : S_SD_DESC;
            }
            break;
        }
        case S_DONE:
        default:
            p = end;
            break;
        }
    }
    s->_state = (uint8_t)st;
}

/* ------------------------------------------------------------------------ */
/* API                                                                      */
/* ------------------------------------------------------------------------ */

void
dm_html_scan_init(struct dm_html_scan *s, const char *page_host, const char *page_path,
                  uint64_t limit)
{
    page_host = page_host ? page_host : "";
    page_path = page_path ? page_path : "/";
    memset(s, 0, offsetof(struct dm_html_scan, _page_host));
    s->limit = limit ? limit : UINT64_MAX;
    s->_state = S_DATA;
    s->_tag = T_NONE;
    s->_attr = A_NONE;

    /* The page host, lowercased, without a default port; one too long for
     * the buffer is left empty, so relative URLs still read "same host". */
    size_t hl = strlen(page_host);
    if (hl >= 3 && page_host[hl - 3] == ':' && memcmp(page_host + hl - 2, "80", 2) == 0) {
        hl -= 3;
    } else if (hl >= 4 && page_host[hl - 4] == ':' && memcmp(page_host + hl - 3, "443", 3) == 0) {
        hl -= 4;
    } else if (hl >= 1 && page_host[hl - 1] == ':') {
        hl -= 1;
    }
    if (hl >= DM_HTML_SCAN_HOST_MAX) {
        hl = 0;
    }
    for (size_t i = 0; i < hl; i++) {
        s->_page_host[i] = (char)to_lower((unsigned char)page_host[i]);
    }
    s->_page_host_len = (uint16_t)hl;

    /* The page path, normalized as any URL (an absolute-form target sets
     * the host too); it is the base until a <base href>. */
    char out[DM_URL_MAX];
    size_t rh, rp;
    s->_base_ok = false;
    if (dm_url_resolve(s->_page_host, hl, "/", 1, page_path, strlen(page_path), out, sizeof out,
                       &rh, &rp) == 0 &&
        rh < DM_HTML_SCAN_HOST_MAX && rp < DM_HTML_SCAN_PATH_MAX) {
        memcpy(s->_page_host, out, rh);
        s->_page_host_len = (uint16_t)rh;
        memcpy(s->_base_path, out + rh, rp);
        s->_base_path_len = (uint16_t)rp;
        s->_base_ok = true;
    }
    memcpy(s->_base_host, s->_page_host, s->_page_host_len);
    s->_base_host_len = s->_page_host_len;
}

void
dm_html_scan_feed(struct dm_html_scan *s, const char *p, size_t len, dm_html_object_cb cb,
                  void *arg)
{
    if (s->_finished || len == 0) {
        return;
    }
    uint64_t room = s->limit - s->scanned;
    if (len > room) {
        len = (size_t)room;
        s->stopped = true;
    }
    s->scanned += len;
    const unsigned char *u = (const unsigned char *)p;
    scan(s, u, u + len, cb, arg);
}

bool
dm_html_scan_finish(struct dm_html_scan *s)
{
    s->_finished = true;
    s->_state = S_DONE;
    return !s->stopped;
}

const char *
dm_html_kind_name(enum dm_html_kind kind)
{
    static const char *const names[] = {
        [DM_HTML_IMAGE] = "image",           [DM_HTML_SCRIPT] = "script",
        [DM_HTML_STYLESHEET] = "stylesheet", [DM_HTML_ICON] = "icon",
        [DM_HTML_PRELOAD] = "preload",       [DM_HTML_FRAME] = "frame",
        [DM_HTML_EMBED] = "embed",           [DM_HTML_MEDIA] = "media",
    };
    if ((unsigned)kind >= sizeof names / sizeof names[0]) {
        return "?";
    }
    return names[kind];
}
