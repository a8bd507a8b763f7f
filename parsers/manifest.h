/*
 * The manifest format: which pages a site has, which objects each page
 * embeds, how large objects are, in a text file. The object catalog preloads
 * it (parsers/catalog.h) and dimmer-load takes its pages and objects from it
 * (bench/load/README.md). Format, one item a line, fields separated by blanks:
 *
 *   # a comment (the first non-blank character is #); blank lines are skipped
 *   page /index.html           a page, by its path (query allowed)
 *     /img/logo.png 12345      an object of the page above: an indented line,
 *     css/site.css             a URL then, optionally, its size in bytes.
 *     //cdn.example.com/a.js 9 The URL is resolved against the page as a
 *                              browser does (relative, //host, http(s)://)
 *   size /img/big.jpg 40000    a size alone, for an object of no page here
 *
 * URLs have no blanks (write %20). A line that is not indented ends the
 * page before it. A line is at most DM_MANIFEST_LINE_MAX bytes, and holds
 * no NUL byte.
 */
#ifndef DM_PARSERS_MANIFEST_H
#define DM_PARSERS_MANIFEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DM_MANIFEST_LINE_MAX 8192

/*
 * What the reader found, in file order. host and path are as
 * dm_url_resolve() gives them (parsers/html_scan.h): host lowercase (the
 * manifest's host for its pages and their relative objects), path from "/"
 * with its query; valid during the call only. A callback returning <0 stops the read with that
 * value (its message, if any, is the caller's). Any callback may be NULL.
 */
struct dm_manifest_cb {
    int (*page)(void *arg, const char *host, size_t host_len, const char *path, size_t len);
    int (*object)(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
                  bool sized, uint64_t bytes);
    int (*page_end)(void *arg); /* after the last object of a page */
    int (*size)(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
                uint64_t bytes);
};

/*
 * Reads the manifest at path, whose pages are on host (NULL or "": any
 * host, and the host of pages and relative objects is then empty), calling
 * cb with arg.
 * Returns 0 (err ""), or <0 with "path:line: what is wrong" (or "path:
 * cannot open: ...") in err: -EINVAL for a malformed line, -errno when the
 * file cannot be read, -ENOMEM. What was called before an error stays
 * called: read twice (check, then use) to change nothing on a bad file.
 */
int dm_manifest_read(const char *path, const char *host, const struct dm_manifest_cb *cb, void *arg,
                     char *err, size_t errlen);

#endif
