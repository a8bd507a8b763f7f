/*
 * The YAML loader. libyaml's document API builds the node tree with marks;
 * the loader then walks it once, key by key, with a fixed schema per mapping
 * (schema.c, pools.c): every mapping is checked for unknown keys (with the
 * nearest known key suggested) and duplicate keys, every value for its type
 * and range (node.c). Errors go to a list with their position and the walk
 * goes on, so one run reports as many mistakes as it can; at the end they are
 * sorted into file order and handed to the caller's struct dm_conf_errors
 * (errors.c), and any error means no config. This file reads the file,
 * parses the YAML, runs one load and frees a config.
 */
#include "conf/conf.h"
#include "conf/tls.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <yaml.h>

#include "conf/internal.h"

/* A config file larger than this is surely a mistake (a log file passed by -c?). */
#define CONF_MAX_BYTES (16u << 20)

/* Deeper nesting is surely a mistake, and libyaml's parser takes time that
 * grows with the depth for every token (100,000 levels: half a minute). */
#define CONF_MAX_DEPTH 64

/* What aliases may expand the node tree to (the loader walks an aliased node
 * once for every alias of it): this many nodes, or twice the file's own. */
#define CONF_MAX_EXPANDED 200000

/* libyaml's loader looks each anchor up among every one before it (a new
 * anchor, and each alias): 80,000 anchors took 10 s, a 16 MiB file of them
 * hours, on a reload the control thread's. No config needs as many. */
#define CONF_MAX_ANCHORS 1000
#define CONF_MAX_ALIASES 20000

/* A node's anchor (`&a`) and explicit tag (`!!str`, `!x`), each NULL when none. */
static void
event_props(const yaml_event_t *e, const char **anchor, const char **tag)
{
    const yaml_char_t *a = NULL, *t = NULL;
    switch (e->type) {
    case YAML_SCALAR_EVENT:
        a = e->data.scalar.anchor, t = e->data.scalar.tag;
        break;
    case YAML_SEQUENCE_START_EVENT:
        a = e->data.sequence_start.anchor, t = e->data.sequence_start.tag;
        break;
    case YAML_MAPPING_START_EVENT:
        a = e->data.mapping_start.anchor, t = e->data.mapping_start.tag;
        break;
    default:
        break;
    }
    *anchor = (const char *)a;
    *tag = (const char *)t;
}

/*
 * Refuses nesting deeper than CONF_MAX_DEPTH, and more anchors or aliases
 * than CONF_MAX_ANCHORS and CONF_MAX_ALIASES, before the document is built:
 * a pass over libyaml's events, which stops there; a tag, which the loader
 * would silently pass over (every value is read as its key says); and a NUL
 * in a key or value, which every reader after this one would cut it at
 * ("5\0junk" read as 5). A syntax error stops it too, and is reported by
 * the load that follows (which reaches it as cheaply).
 */
static bool
check_events(struct dm_conf_loader *ld, const char *buf, size_t len)
{
    yaml_parser_t parser;
    yaml_event_t e;
    int depth = 0;
    unsigned anchors = 0, aliases = 0;
    bool ok = true;

    if (!yaml_parser_initialize(&parser)) {
        ld->oom = true;
        return false;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    for (;;) {
        if (!yaml_parser_parse(&parser, &e)) {
            ld->oom = parser.error == YAML_MEMORY_ERROR;
            ok = !ld->oom; /* a syntax error: the load reports it */
            break;
        }
        yaml_event_type_t t = e.type;
        const char *anchor, *tag;
        event_props(&e, &anchor, &tag);
        if (tag != NULL) {
            dm_conf_fail_mark(ld, e.start_mark,
                              "YAML tags are not supported (got \"%.60s\"): write the value "
                              "without it; each key says how its value is read",
                              tag);
            ok = false;
        } else if (anchor != NULL && ++anchors > CONF_MAX_ANCHORS) {
            dm_conf_fail_mark(ld, e.start_mark, "more than %d anchors (&name)", CONF_MAX_ANCHORS);
            ok = false;
        } else if (t == YAML_ALIAS_EVENT && ++aliases > CONF_MAX_ALIASES) {
            dm_conf_fail_mark(ld, e.start_mark, "more than %d aliases (*name)", CONF_MAX_ALIASES);
            ok = false;
        } else if (t == YAML_SCALAR_EVENT &&
                   strlen((const char *)e.data.scalar.value) != e.data.scalar.length) {
            dm_conf_fail_mark(ld, e.start_mark, "a NUL character in a key or value");
            ok = false;
        } else if (t == YAML_SEQUENCE_START_EVENT || t == YAML_MAPPING_START_EVENT) {
            if (++depth > CONF_MAX_DEPTH) {
                dm_conf_fail_mark(ld, e.start_mark, "nested more than %d lists or mappings deep",
                                  CONF_MAX_DEPTH);
                ok = false;
            }
        } else if (t == YAML_SEQUENCE_END_EVENT || t == YAML_MAPPING_END_EVENT) {
            depth--;
        }
        yaml_event_delete(&e);
        if (!ok || t == YAML_STREAM_END_EVENT) {
            break;
        }
    }
    yaml_parser_delete(&parser);
    return ok;
}

/*
 * The number of nodes the tree holds once every alias is expanded (each
 * aliased node counted for every alias of it), at most limit + 1; UINT64_MAX
 * when an alias is inside the node it names (*loop: that node); 0 when out
 * of memory. An iterative walk, each node's count kept once done: a few
 * aliases of aliases can stand for billions of nodes, which the loader must
 * not walk.
 */
static uint64_t
expanded_nodes(yaml_document_t *doc, uint64_t limit, int *loop)
{
    size_t n = (size_t)(doc->nodes.top - doc->nodes.start);
    uint64_t *count = calloc(n + 1, sizeof(*count));
    unsigned char *state = calloc(n + 1, 1); /* 0 not seen, 1 on the stack, 2 done */
    int *stack = calloc(n + 1, sizeof(*stack));
    size_t *next = calloc(n + 1, sizeof(*next));
    uint64_t total = 0;
    if (n == 0) {
        total = 1; /* no node, nothing to expand */
        goto out;
    }
    if (count == NULL || state == NULL || stack == NULL || next == NULL) {
        goto out;
    }
    size_t top = 0;
    stack[top++] = 1; /* the root */
    state[1] = 1;
    count[1] = 1;
    while (top > 0 && total != UINT64_MAX) {
        int i = stack[top - 1];
        yaml_node_t *node = yaml_document_get_node(doc, i);
        size_t nkids =
            node->type == YAML_SEQUENCE_NODE
                ? (size_t)(node->data.sequence.items.top - node->data.sequence.items.start)
            : node->type == YAML_MAPPING_NODE
                ? 2 * (size_t)(node->data.mapping.pairs.top - node->data.mapping.pairs.start)
                : 0;
        if (next[i] == nkids) {
            state[i] = 2;
            top--;
            if (top > 0) {
                int parent = stack[top - 1];
                count[parent] += count[i];
                count[parent] = count[parent] > limit ? limit + 1 : count[parent];
            }
            continue;
        }
        size_t k = next[i]++;
        int kid = node->type == YAML_SEQUENCE_NODE ? node->data.sequence.items.start[k]
                  : k % 2 == 0                     ? node->data.mapping.pairs.start[k / 2].key
                                                   : node->data.mapping.pairs.start[k / 2].value;
        if (kid < 1 || (size_t)kid > n) {
            continue;
        }
        if (state[kid] == 1) {
            total = UINT64_MAX; /* an alias of a node it is in */
            *loop = kid;
        } else if (state[kid] == 2) {
            count[i] += count[kid];
            count[i] = count[i] > limit ? limit + 1 : count[i];
        } else {
            state[kid] = 1;
            count[kid] = 1;
            stack[top++] = kid;
        }
    }
    if (total != UINT64_MAX) {
        total = count[1];
    }
out:
    free(count);
    free(state);
    free(stack);
    free(next);
    return total;
}

static void
fail_parser(struct dm_conf_loader *ld, const yaml_parser_t *p, const char *buf, size_t len)
{
    yaml_mark_t mark = p->problem_mark;
    const char *problem = p->problem != NULL ? p->problem : "syntax error";
    const char *hint = "";

    if (p->error == YAML_MEMORY_ERROR) {
        ld->oom = true;
        return;
    }
    if (p->error == YAML_READER_ERROR) {
        /* The reader reports a byte offset only: count lines up to it (LF,
         * CR LF or a lone CR ends one), and characters in the line (not a
         * UTF-8 character's continuation bytes), as libyaml's own marks do. */
        size_t end = p->problem_offset < len ? p->problem_offset : len;
        mark = (yaml_mark_t){ 0 };
        for (size_t i = 0; i < end; i++) {
            if (buf[i] == '\n' || (buf[i] == '\r' && (i + 1 >= len || buf[i + 1] != '\n'))) {
                mark.line++;
                mark.column = 0;
            } else if (((unsigned char)buf[i] & 0xC0) != 0x80) {
                mark.column++;
            }
        }
        if (p->problem_value != -1) {
            dm_conf_fail_mark(ld, mark, "%s (byte 0x%02X)", problem, (unsigned)p->problem_value);
        } else {
            dm_conf_fail_mark(ld, mark, "%s", problem);
        }
        return;
    }
    /* "listen: *:80" is an easy mistake: YAML reads the "*" as an alias. */
    if ((p->context != NULL && strcmp(p->context, "while scanning an alias") == 0) ||
        strcmp(problem, "found undefined alias") == 0) {
        hint = "; quote a value that starts with \"*\"";
    }
    if (p->context != NULL) {
        dm_conf_fail_mark(ld, mark, "%s (%s at line %zu)%s", problem, p->context,
                          p->context_mark.line + 1, hint);
    } else {
        dm_conf_fail_mark(ld, mark, "%s%s", problem, hint);
    }
}

/* Parses buf into ld->doc; false after reporting. Rejects a second document. */
static bool
parse_yaml(struct dm_conf_loader *ld, const char *buf, size_t len)
{
    yaml_parser_t parser;
    yaml_document_t extra;
    bool ok = false;

    if (!yaml_parser_initialize(&parser)) {
        ld->oom = true;
        return false;
    }
    if (!check_events(ld, buf, len)) {
        goto out_parser;
    }
    yaml_parser_set_input_string(&parser, (const unsigned char *)buf, len);
    if (!yaml_parser_load(&parser, &ld->doc)) {
        /* libyaml has freed the document already. */
        fail_parser(ld, &parser, buf, len);
        goto out_parser;
    }
    if (!yaml_parser_load(&parser, &extra)) {
        fail_parser(ld, &parser, buf, len);
        goto out_doc;
    }
    if (yaml_document_get_root_node(&extra) != NULL) {
        dm_conf_fail_at(ld, yaml_document_get_root_node(&extra),
                        "a second YAML document (a config file holds one)");
        yaml_document_delete(&extra);
        goto out_doc;
    }
    yaml_document_delete(&extra);
    size_t own = (size_t)(ld->doc.nodes.top - ld->doc.nodes.start);
    uint64_t limit = CONF_MAX_EXPANDED > 2 * (uint64_t)own ? CONF_MAX_EXPANDED : 2 * (uint64_t)own;
    int loop = 1;
    uint64_t all = expanded_nodes(&ld->doc, limit, &loop);
    if (all == 0) {
        ld->oom = true;
        goto out_doc;
    }
    if (all == UINT64_MAX) {
        dm_conf_fail_at(ld, yaml_document_get_node(&ld->doc, loop),
                        "an alias inside the node it names (a loop)");
        goto out_doc;
    }
    if (all > limit) {
        dm_conf_fail_at(ld, yaml_document_get_root_node(&ld->doc),
                        "its aliases expand it to more than %llu nodes (the file has %zu)",
                        (unsigned long long)limit, own);
        goto out_doc;
    }
    ok = true;
    goto out_parser;

out_doc:
    yaml_document_delete(&ld->doc);
out_parser:
    yaml_parser_delete(&parser);
    return ok;
}

static struct dm_conf *
load_buffer(const char *buf, size_t len, const char *name, struct dm_conf_errors *err)
{
    struct dm_conf_loader ld = { .name = name };
    const yaml_node_t *root;

    ld.c = calloc(1, sizeof(*ld.c));
    if (ld.c == NULL || !dm_conf_defaults(ld.c) || (ld.c->file = strdup(name)) == NULL) {
        ld.oom = true;
        goto out;
    }
    if (!parse_yaml(&ld, buf, len)) {
        goto out;
    }
    root = yaml_document_get_root_node(&ld.doc);
    if (root == NULL) {
        dm_conf_fail_mark(&ld, (yaml_mark_t){ 0 },
                          "empty configuration (\"listen\" and \"pools\" are "
                          "required)");
    } else {
        dm_conf_load_root(&ld, root);
    }
    dm_conf_loader_fini(&ld);
    yaml_document_delete(&ld.doc);

out:
    if (ld.oom || ld.nmsgs > 0) {
        dm_conf_flush_msgs(&ld, err);
        dm_conf_destroy(ld.c);
        return NULL;
    }
    return ld.c;
}

struct dm_conf *
dm_conf_load_string(const char *yaml, size_t len, const char *name, struct dm_conf_errors *err)
{
    /* libyaml asserts on a NULL input even when it is empty. */
    return load_buffer(yaml != NULL ? yaml : "", yaml != NULL ? len : 0,
                       name != NULL ? name : "<string>", err);
}

/*
 * Reads the whole file; 0 or -errno (-EFBIG past CONF_MAX_BYTES, -ENOTSUP for
 * what is not a regular file), with *stage naming the step that failed for
 * the message. Opened without blocking and refused unless regular: a FIFO
 * would hang the start, or a reload on the control thread (no SIGTERM heard
 * again), waiting for a writer; a device such as /dev/zero never ends.
 */
static int
read_file(const char *path, char **out, size_t *outlen, const char **stage)
{
    struct stat st;
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int fd;
    int rc = 0;

    *stage = "open";
    fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        return -errno;
    }
    *stage = "read";
    if (fstat(fd, &st) != 0) {
        rc = -errno;
    } else if (S_ISDIR(st.st_mode)) {
        rc = -EISDIR;
    } else if (!S_ISREG(st.st_mode)) {
        rc = -ENOTSUP;
    }
    while (rc == 0) {
        ssize_t got;
        if (len == cap) {
            char *b;
            if (cap >= CONF_MAX_BYTES) {
                rc = -EFBIG;
                break;
            }
            cap = cap == 0 ? 4096 : cap * 2;
            b = realloc(buf, cap);
            if (b == NULL) {
                rc = -ENOMEM;
                break;
            }
            buf = b;
        }
        got = read(fd, buf + len, cap - len);
        if (got < 0) {
            if (errno != EINTR) {
                rc = -errno;
            }
            continue;
        }
        if (got == 0) {
            break;
        }
        len += (size_t)got;
    }
    close(fd);
    if (rc != 0) {
        free(buf);
        return rc;
    }
    *out = buf;
    *outlen = len;
    return 0;
}

struct dm_conf *
dm_conf_load(const char *path, struct dm_conf_errors *err)
{
    char *buf = NULL;
    size_t len = 0;
    const char *stage;
    struct dm_conf *c;
    int rc;

    rc = read_file(path, &buf, &len, &stage);
    if (rc != 0) {
        struct dm_conf_loader ld = { .name = path };
        char ebuf[128];
        const char *what = rc == -EFBIG     ? "file too large (over 16 MiB)"
                           : rc == -ENOTSUP ? "not a regular file"
                                            : strerror_r(-rc, ebuf, sizeof(ebuf));
        dm_conf_fail_plain(&ld, "%s: cannot %s: %s", path, stage, what);
        dm_conf_flush_msgs(&ld, err);
        return NULL;
    }
    c = load_buffer(buf != NULL ? buf : "", len, path, err);
    free(buf);
    return c;
}

/* ---- freeing ---- */

void
dm_conf_destroy(struct dm_conf *c)
{
    if (c == NULL) {
        return;
    }
    free(c->file);
    for (size_t i = 0; i < c->nwarnings; i++) {
        free(c->warnings[i]);
    }
    free(c->warnings);
    for (size_t i = 0; i < c->nlisteners; i++) {
        free(c->listeners[i].text);
        if (c->listener_tls != NULL) {
            dm_conf_tls_free(c->listener_tls[i]);
        }
    }
    free(c->listeners);
    free(c->listener_tls);
    free(c->admin.text);
    for (size_t i = 0; i < c->npools; i++) {
        struct dm_conf_pool *p = &c->pools[i];
        free(p->name);
        free(p->balance);
        for (size_t j = 0; j < p->nservers; j++) {
            struct dm_conf_server_power *sp = &p->servers[j].power;
            free(p->servers[j].name);
            free(p->servers[j].addr.text);
            free(sp->agent);
            free(sp->wol_to.text);
            free(sp->control.text);
            free(sp->wake_command);
            free(sp->control_token);
            free(sp->agent_key);
            free(sp->sleep_command);
        }
        free(p->servers);
        free(p->health.path);
        free(p->hash.name);
        free(p->power.policy);
        dm_conf_session_fini(&p->session);
        dm_conf_tls_client_free(p->tls);
    }
    free(c->pools);
    for (size_t i = 0; i < c->nroutes; i++) {
        free(c->routes[i].host);
        free(c->routes[i].path_prefix);
    }
    free(c->routes);
    free(c->catalog.docroot);
    free(c->catalog.manifest);
    free(c->catalog.host);
    free(c->access_log);
    free(c->access_log_format);
    free(c->error_log);
    free(c->user);
    free(c->group);
    free(c->metrics.text);
    free(c->metrics_key);
    free(c->admin_token);
    free(c);
}
