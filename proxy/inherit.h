/*
 * The sockets a dimmer hands to the one that replaces it (SIGUSR2, as
 * nginx's binary upgrade): the old process starts the new one with its
 * listening sockets open, named in the environment variable DIMMER_INHERIT,
 * so that the kernel never closes a listen queue in between and no
 * connection is refused or reset. The new process takes the sockets whose
 * listener its configuration still has, binds the others afresh, closes the
 * ones it has no listener for, and says it is ready on a pipe; the old one
 * then drains and stops.
 *
 * DIMMER_INHERIT is a list of words separated by blanks:
 *   ready=FD               the pipe to write "R" to once ready
 *   tickets=FD             a pipe holding the TLS session ticket keys
 *                          (dm_tls_tickets_save), so that tickets issued by
 *                          the process replaced still resume
 *   listen=FD:TEXT         a listening socket of the listener configured as TEXT
 *   admin=FD:TEXT          the admin listener's
 *   metrics=FD:TEXT        the power manager's UDP metrics socket
 *   from=PID               the process that handed them over
 *   host=ADDR,down=0|1     what it knew of a host (its health checks' verdict)
 *   power=ADDR,state=N,held=0|1,wh=X
 *                          and of a power-managed server: its state (enum
 *                          dm_pm_state), whether the operator holds it, the
 *                          energy counted so far
 * TEXT and ADDR (a host's resolved address) are written with their bytes
 * outside [A-Za-z0-9.:*[]_-] as %XX. The old process's view of its servers
 * (as HAProxy's server-state-file keeps it over a reload) lets the new one
 * send nothing to a server down or asleep, and go on with its power states.
 */
#ifndef DM_PROXY_INHERIT_H
#define DM_PROXY_INHERIT_H

#include <stdbool.h>
#include <stddef.h>

#define DM_INHERIT_ENV "DIMMER_INHERIT"

enum dm_inherit_kind {
    DM_INHERIT_LISTEN,
    DM_INHERIT_ADMIN,
    DM_INHERIT_METRICS,
};

struct dm_inherited {
    enum dm_inherit_kind kind;
    int fd;
    char *text; /* decoded */
    bool taken;
};

/* What the process replaced knew of one host. */
struct dm_inherited_host {
    char *addr;   /* dm_addr_text() of its resolved address */
    int down;     /* 1 or 0, -1: not said */
    int pm_state; /* enum dm_pm_state, -1: not power-managed */
    bool held;    /* by the operator */
    double wh;    /* energy so far */
};

struct dm_inherit {
    int ready_fd;   /* -1: none */
    int tickets_fd; /* -1: none */
    long from;      /* the pid of the process that handed them over, 0: not said */
    struct dm_inherited *v;
    size_t n;
    struct dm_inherited_host *hosts;
    size_t nhosts;
};

/* What the process replaced knew of the host at addr, or NULL. */
const struct dm_inherited_host *dm_inherit_host(const struct dm_inherit *in, const char *addr);

/*
 * Parses the value of DIMMER_INHERIT into in (zeroed first). 0, or -1 with
 * what is wrong in err (nothing kept). Pure: the descriptors are numbers
 * here, dm_inherit_check() looks at them.
 */
int dm_inherit_parse(const char *value, struct dm_inherit *in, char *err, size_t errlen);

/*
 * Checks every descriptor of in: a listening TCP socket for listen and admin,
 * a UDP socket for metrics, a pipe or socket for ready, a pipe for tickets; each is made
 * close-on-exec. 0, or -1 with what is wrong in err.
 */
int dm_inherit_check(struct dm_inherit *in, char *err, size_t errlen);

/*
 * The descriptors of kind for the listener configured as text, not taken
 * before: up to max of them into fds, marked taken. Returns how many.
 */
size_t dm_inherit_take(struct dm_inherit *in, enum dm_inherit_kind kind, const char *text, int *fds,
                       size_t max);

/*
 * The name a listener's sockets go by: its address as written, and for the
 * second and later listeners written the same (port 0 twice, say) a newline
 * and how many came before (before). Into buf (cap bytes); buf.
 */
const char *dm_inherit_listen_key(char *buf, size_t cap, const char *text, size_t before);

/* Closes the descriptors nobody took (their listeners are gone); the hosts stay. */
void dm_inherit_close_rest(struct dm_inherit *in);
/* Frees what is left of in (the hosts). */
void dm_inherit_free(struct dm_inherit *in);

/* Appends "host=ADDR,down=D" or "power=ADDR,state=S,held=H,wh=X" to *s. 0 or -1. */
int dm_inherit_append_host(char **s, const char *addr, int down);
int dm_inherit_append_power(char **s, const char *addr, int state, bool held, double wh);

/* Appends "word=FD:TEXT" (or "ready=FD" with text NULL) to *s (NUL-ended,
 * grown with realloc; *s NULL at first). 0 or -1 (out of memory). */
int dm_inherit_append(char **s, const char *word, int fd, const char *text);

/*
 * What the process inherited, for the start only (set by main before the
 * listeners are made, NULL when nothing was handed over).
 */
extern struct dm_inherit *dm_inherited;

#endif
