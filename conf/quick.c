/*
 * The quick start: a config from the --listen and --backend flags, with no
 * file and the defaults for everything else.
 */
#include "conf/conf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conf/internal.h"

struct dm_conf *
dm_conf_from_args(const char *listen, const char *backends, struct dm_conf_errors *err)
{
    struct dm_conf_loader ld = { .name = "arguments" };
    struct dm_conf *c;
    struct dm_conf_pool *p;
    const char *why;
    char buf[DM_CONF_SHOW_BUF];
    size_t n = 1;
    int rc;

    c = calloc(1, sizeof(*c));
    ld.c = c;
    if (c == NULL || !dm_conf_defaults(c)) {
        ld.oom = true;
        goto out;
    }

    if (listen == NULL || *listen == '\0') {
        dm_conf_fail_plain(&ld, "--listen: missing address");
    } else if ((c->listeners = calloc(1, sizeof(*c->listeners))) == NULL) {
        ld.oom = true;
    } else if ((rc = dm_conf_parse_addr_why(listen, true, &c->listeners[0], &why)) == 0) {
        c->nlisteners = 1;
    } else if (rc == -ENOMEM) {
        ld.oom = true;
    } else {
        dm_conf_fail_plain(&ld, "--listen: bad address %s (%s)",
                           dm_conf_quote(listen, strlen(listen), buf, sizeof(buf)), why);
    }

    c->pools = calloc(1, sizeof(*c->pools));
    if (c->pools == NULL) {
        ld.oom = true;
        goto out;
    }
    c->npools = 1;
    p = &c->pools[0];
    if ((p->name = strdup("default")) == NULL || !dm_conf_pool_defaults(p)) {
        ld.oom = true;
        goto out;
    }
    if (backends == NULL || *backends == '\0') {
        dm_conf_fail_plain(&ld, "--backend: missing address");
        goto out;
    }
    for (const char *s = backends; *s != '\0'; s++) {
        n += *s == ',';
    }
    p->servers = calloc(n, sizeof(*p->servers));
    if (p->servers == NULL) {
        ld.oom = true;
        goto out;
    }
    for (const char *s = backends;; s++) {
        size_t len = strcspn(s, ",");
        struct dm_conf_server *sv = &p->servers[p->nservers];
        size_t skip = strspn(s, " \t");
        size_t trim = len;
        char *one;

        /* "a:80, b:80" is how people write lists: spaces around an address are dropped. */
        while (trim > skip && (s[trim - 1] == ' ' || s[trim - 1] == '\t')) {
            trim--;
        }
        skip = skip < trim ? skip : trim;
        one = strndup(s + skip, trim - skip);

        if (one == NULL) {
            ld.oom = true;
            goto out;
        }
        rc = dm_conf_parse_addr_why(one, false, &sv->addr, &why);
        if (rc == 0) {
            sv->weight = 1;
            sv->capacity = 100;
            sv->session_capacity = 40000;
            sv->name = dm_conf_format("s%zu", p->nservers + 1);
            p->nservers++;
            if (sv->name == NULL) {
                ld.oom = true;
            }
        } else if (rc == -ENOMEM) {
            ld.oom = true;
        } else {
            dm_conf_fail_plain(&ld, "--backend: bad address %s (%s)",
                               dm_conf_quote(one, strlen(one), buf, sizeof(buf)), why);
        }
        free(one);
        s += len;
        if (*s == '\0') {
            break;
        }
    }

out:
    if (ld.oom || ld.nmsgs > 0) {
        dm_conf_flush_msgs(&ld, err);
        dm_conf_destroy(c);
        return NULL;
    }
    return c;
}
