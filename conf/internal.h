/* Helpers shared by the files of conf/; not part of the public API. */
#ifndef DM_CONF_INTERNAL_H
#define DM_CONF_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>

struct dm_conf_addr;

/*
 * dm_conf_parse_addr(), and on -EINVAL *why is set to a short static reason
 * ("missing port", "port must be between 1 and 65535", ...) for the message.
 * listener: an address to listen on, where port 0 is allowed too (the kernel
 * then picks a free port); otherwise the port is 1..65535. On success
 * out->text is a copy of text that the caller frees.
 */
int dm_conf_parse_addr_why(const char *text, bool listener, struct dm_conf_addr *out,
                           const char **why);

/*
 * Edit distance between a and b (insertions, deletions, substitutions and
 * swaps of two adjacent characters), ignoring ASCII case; strings longer than
 * 64 bytes are "far" (returns (size_t)-1 / 2).
 */
size_t dm_conf_edit_distance(const char *a, const char *b);

/*
 * The candidate nearest to word when it is close enough to be a likely typo
 * (at most a third of the longer string differs), else NULL. n candidates;
 * NULL entries are skipped. Ties go to the earliest candidate.
 */
const char *dm_conf_suggest(const char *word, const char *const *cands, size_t n);

#endif
