#include "balancers/servers.h"

#include <stdlib.h>

bool
dm_server_is_usable(const struct dm_server *s, uint64_t now_us)
{
    return dm_host_is_usable(s->host, now_us);
}

struct dm_servers *
dm_servers_create(size_t n)
{
    struct dm_servers *sv = calloc(1, sizeof(*sv));
    if (sv == NULL) {
        return NULL;
    }
    sv->s = calloc(n > 0 ? n : 1, sizeof(*sv->s));
    if (sv->s == NULL) {
        free(sv);
        return NULL;
    }
    sv->_own = calloc(n > 0 ? n : 1, sizeof(*sv->_own));
    if (sv->_own == NULL) {
        free(sv->s);
        free(sv);
        return NULL;
    }
    sv->n = n;
    for (size_t i = 0; i < n; i++) {
        dm_host_init(&sv->_own[i]);
        sv->s[i].host = &sv->_own[i];
        sv->s[i].index = (unsigned)i;
        sv->s[i].weight = 1;
        sv->s[i].capacity = 1;
    }
    return sv;
}

void
dm_servers_destroy(struct dm_servers *sv)
{
    if (sv == NULL) {
        return;
    }
    free(sv->_own);
    free(sv->s);
    free(sv);
}
