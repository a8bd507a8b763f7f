/*
 * Session mode of dimmer-load (bench/load/load.h): each session is a user.
 * It loads a page on its first connection, then the page's embedded objects
 * (found by the HTML scanner while the page streams in, each distinct one
 * fetched once) over up to --conns-per-user keep-alive connections, scores
 * the page whole, thinks for an exponential time and loads the next page.
 * The pattern sets how many sessions there are: every DM_LOAD_SCHED_MS a
 * thread starts sessions to reach its share, or ends some; a session told
 * to end ends at its next think time, never in the middle of a page.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/load/load.h"

static void page_begin(struct dm_load_session *s);

/* A uniform double in [0, 1). */
static double
uniform(struct dm_load_thread *t)
{
    return (double)(dm_rng_next(&t->rng) >> 11) * (1.0 / 9007199254740992.0);
}

unsigned
dm_load_pick_page(struct dm_load_thread *t)
{
    const struct dm_load_opts *o = t->o;
    unsigned n = o->urls != NULL ? o->nurls : o->site_pages;
    double u = uniform(t);
    unsigned lo = 0, hi = n - 1;
    while (lo < hi) {
        unsigned mid = lo + (hi - lo) / 2;
        if (o->zipf_cdf[mid] > u) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

int
dm_load_sessions_init(struct dm_load_thread *t)
{
    t->sessions = calloc(t->max_sessions > 0 ? t->max_sessions : 1, sizeof(*t->sessions));
    if (t->sessions == NULL) {
        return -1;
    }
    for (unsigned i = t->max_sessions; i-- > 0;) {
        t->sessions[i].t = t;
        t->sessions[i].next_free = t->free_sessions;
        t->free_sessions = &t->sessions[i];
    }
    return 0;
}

static void
page_free(struct dm_load_thread *t, struct dm_load_page *pg)
{
    pg->next_free = t->free_pages;
    t->free_pages = pg;
}

void
dm_load_sessions_fini(struct dm_load_thread *t)
{
    free(t->sessions);
    t->sessions = NULL;
    while (t->free_pages != NULL) {
        struct dm_load_page *pg = t->free_pages;
        t->free_pages = pg->next_free;
        free(pg);
    }
}

static void
close_conns(struct dm_load_session *s)
{
    for (unsigned i = 0; i < DM_LOAD_MAX_CPU; i++) {
        if (s->conns[i] != NULL) {
            dm_load_conn_close(s->conns[i]); /* clears s->conns[i] */
        }
    }
}

static void
session_end(struct dm_load_session *s)
{
    struct dm_load_thread *t = s->t;
    close_conns(s);
    if (s->timer_open) {
        uv_timer_stop(&s->timer);
    }
    if (s->page != NULL) {
        page_free(t, s->page);
        s->page = NULL;
    }
    if (s->state == DM_LS_THINKING) {
        t->thinking--;
    }
    if (s->ending) {
        t->ending--;
    }
    s->state = DM_LS_FREE;
    s->ending = false;
    t->active--;
    t->cur.sessions_ended++;
    s->next_free = t->free_sessions;
    t->free_sessions = s;
}

static void
think_cb(uv_timer_t *timer)
{
    struct dm_load_session *s = timer->data;
    if (s->state == DM_LS_THINKING) {
        s->state = DM_LS_LOADING;
        s->t->thinking--;
    }
    page_begin(s);
}

static void
think(struct dm_load_session *s, double ms)
{
    struct dm_load_thread *t = s->t;
    if (!s->timer_open) {
        if (uv_timer_init(&t->loop, &s->timer) < 0) {
            session_end(s);
            return;
        }
        s->timer.data = s;
        s->timer_open = true;
    }
    if (s->state != DM_LS_THINKING) {
        s->state = DM_LS_THINKING;
        t->thinking++;
    }
    uv_timer_start(&s->timer, think_cb, (uint64_t)ms, 0);
}

/* The page and its objects are done: score it whole, then think or end. */
static void
page_finish(struct dm_load_session *s)
{
    struct dm_load_thread *t = s->t;
    struct dm_load_page *pg = s->page;
    uint64_t now = dm_load_now_ns();
    uint64_t us = now > pg->due_ns ? (now - pg->due_ns) / 1000 : 0;
    /* A page fails whole when one of its responses failed (with that one's
     * kind) or when it was too slow. */
    dm_score_counts_record(&t->cur.pages, &t->o->bounds, pg->failed ? 0 : 200, us, pg->fail_kind);
    page_free(t, pg);
    s->page = NULL;
    s->pages_done++;
    const struct dm_load_opts *o = t->o;
    bool over = (o->session_pages > 0 && s->pages_done >= o->session_pages) ||
                (o->session_s > 0 && (double)(now - s->start_ns) / 1e9 >= o->session_s);
    if (s->ending || over || t->stopping) {
        session_end(s);
        return;
    }
    if (o->keepalive_ms == 0) {
        close_conns(s);
    }
    double u = uniform(t);
    think(s, -o->think_ms * log(1.0 - u));
}

static void obj_done(struct dm_load_conn *lc, const struct dm_load_result *r);

/* Sends the next object of the page on slot i; false when there is none left. */
static bool
obj_next(struct dm_load_session *s, unsigned i)
{
    struct dm_load_page *pg = s->page;
    while (pg->next_obj < pg->nobj) {
        unsigned k = pg->next_obj++;
        struct dm_load_conn *lc = s->conns[i];
        if (lc == NULL) {
            lc = dm_load_conn_get(s->t, &s->conns[i], s);
        }
        if (lc == NULL) {
            pg->failed = true; /* out of memory: the object is not fetched */
            pg->fail_kind = DM_FAIL_CONNECT;
            continue;
        }
        lc->index = i;
        pg->running++;
        dm_load_conn_request(lc, pg->obj + pg->obj_off[k], pg->obj_len[k], dm_load_now_ns(), NULL,
                             obj_done);
        return true;
    }
    return false;
}

/* Every object is fetched (or failed) and none is running: the page is done. */
static void
objects_check(struct dm_load_session *s)
{
    struct dm_load_page *pg = s->page;
    if (pg != NULL && pg->running == 0 && pg->next_obj >= pg->nobj) {
        page_finish(s);
    }
}

static void
obj_done(struct dm_load_conn *lc, const struct dm_load_result *r)
{
    /* Read lc first: taking another connection may reuse its memory. */
    struct dm_load_session *s = lc->owner;
    unsigned slot = lc->index;
    struct dm_load_page *pg = s->page;
    pg->running--;
    if (r->status == 0 || r->status >= 500) {
        pg->failed = true;
        pg->fail_kind = r->status == 0 ? r->kind : DM_FAIL_5XX;
    }
    obj_next(s, slot);
    objects_check(s);
}

static void
page_done(struct dm_load_conn *lc, const struct dm_load_result *r)
{
    struct dm_load_session *s = lc->owner;
    struct dm_load_page *pg = s->page;
    struct dm_load_thread *t = s->t;
    if (r->status == 0 || r->status >= 400) {
        pg->failed = r->status == 0 || r->status >= 500;
        pg->fail_kind = r->status == 0 ? r->kind : DM_FAIL_5XX;
        pg->nobj = 0; /* no page, no objects */
    }
    unsigned cpu = t->o->conns_per_user;
    for (unsigned i = 0; i < cpu && i < DM_LOAD_MAX_CPU; i++) {
        if (!obj_next(s, i) || s->page != pg) {
            /* None left, or the page is over already: every object failed
             * before it left (no connection), and the page, maybe the
             * session, ended inside obj_next. */
            break;
        }
    }
    objects_check(s);
}

/* The scanner found an object: keep it once (same host only). */
static void
page_object(void *arg, const char *host, size_t host_len, const char *path, size_t path_len,
            enum dm_html_kind kind)
{
    (void)kind;
    (void)host;
    struct dm_load_page *pg = arg;
    if (host_len > 0 || path_len == 0 || path_len > UINT16_MAX) {
        return; /* another site's: a browser would fetch it elsewhere */
    }
    for (unsigned i = 0; i < pg->nobj; i++) {
        if (pg->obj_len[i] == path_len && memcmp(pg->obj + pg->obj_off[i], path, path_len) == 0) {
            return;
        }
    }
    if (pg->nobj >= DM_LOAD_MAX_OBJECTS || pg->obj_used + path_len > sizeof(pg->obj)) {
        return; /* more than a page load keeps */
    }
    memcpy(pg->obj + pg->obj_used, path, path_len);
    pg->obj_off[pg->nobj] = pg->obj_used;
    pg->obj_len[pg->nobj] = (uint16_t)path_len;
    pg->obj_used += (uint32_t)path_len;
    pg->nobj++;
}

void
dm_load_page_body(struct dm_load_page *pg, const char *p, size_t len)
{
    dm_html_scan_feed(&pg->scan, p, len, page_object, pg);
}

static void
page_begin(struct dm_load_session *s)
{
    struct dm_load_thread *t = s->t;
    const struct dm_load_opts *o = t->o;
    struct dm_load_page *pg = t->free_pages;
    if (pg != NULL) {
        t->free_pages = pg->next_free;
    } else if ((pg = malloc(sizeof(*pg))) == NULL) {
        session_end(s);
        return;
    }
    pg->nobj = pg->next_obj = pg->running = 0;
    pg->obj_used = 0;
    pg->failed = false;
    unsigned n = dm_load_pick_page(t);
    if (o->urls != NULL) {
        size_t len = strlen(o->urls[n]);
        if (len >= sizeof(pg->path)) {
            len = sizeof(pg->path) - 1;
        }
        memcpy(pg->path, o->urls[n], len);
        pg->path[len] = 0;
        pg->path_len = len;
    } else {
        pg->path_len = (size_t)snprintf(pg->path, sizeof(pg->path), "/page/%u.html", n);
    }
    bool scan = o->scan && o->objects == NULL;
    if (scan) {
        dm_html_scan_init(&pg->scan, o->host, pg->path, o->scan_limit);
    } else if (o->objects != NULL && o->scan) {
        /* The manifest's list: the page's objects without reading it. */
        const struct dm_load_objects *ob = &o->objects[n];
        const char *p = ob->paths;
        for (unsigned i = 0; i < ob->n; i++) {
            size_t len = strlen(p);
            page_object(pg, "", 0, p, len, DM_HTML_IMAGE);
            p += len + 1;
        }
    }
    pg->due_ns = dm_load_now_ns();
    s->page = pg;
    struct dm_load_conn *lc = s->conns[0];
    if (lc == NULL && (lc = dm_load_conn_get(t, &s->conns[0], s)) == NULL) {
        pg->failed = true;
        pg->fail_kind = DM_FAIL_CONNECT;
        page_finish(s);
        return;
    }
    lc->index = 0;
    dm_load_conn_request(lc, pg->path, pg->path_len, pg->due_ns, scan ? pg : NULL, page_done);
}

static void
session_start(struct dm_load_session *s)
{
    struct dm_load_thread *t = s->t;
    t->active++;
    t->cur.sessions_started++;
    s->start_ns = dm_load_now_ns();
    s->pages_done = 0;
    s->ending = false;
    s->page = NULL;
    s->state = DM_LS_LOADING;
    /* Arrivals within the scheduling period are spread over it. */
    think(s, uniform(t) * DM_LOAD_SCHED_MS);
}

void
dm_load_sessions_sched(struct dm_load_thread *t, double elapsed_s)
{
    const struct dm_load_opts *o = t->o;
    double total = dm_load_pattern_at(&o->pattern, elapsed_s);
    /* This thread's share of the whole number of sessions: thread i of T
     * takes the i-th of every T, so the shares add up exactly. */
    unsigned whole = total > 0 ? (unsigned)llround(total) : 0;
    t->target = total / o->threads;
    unsigned want = whole / o->threads + (t->id < whole % o->threads ? 1 : 0);
    if (want > t->max_sessions) {
        want = t->max_sessions;
    }
    unsigned staying = t->active - t->ending;
    for (unsigned i = 0; i < t->max_sessions && staying < want && t->ending > 0; i++) {
        struct dm_load_session *s = &t->sessions[i];
        if (s->state != DM_LS_FREE && s->ending) {
            s->ending = false; /* wanted again after all */
            t->ending--;
            staying++;
        }
    }
    while (staying < want && t->free_sessions != NULL) {
        struct dm_load_session *s = t->free_sessions;
        t->free_sessions = s->next_free;
        session_start(s);
        staying++;
    }
    /* Fewer: thinking sessions end now (they are at a think time), the
     * others at the end of their page. */
    for (unsigned i = 0; i < t->max_sessions && staying > want; i++) {
        struct dm_load_session *s = &t->sessions[i];
        if (s->state == DM_LS_THINKING && !s->ending && s->page == NULL) {
            session_end(s);
            staying--;
        }
    }
    for (unsigned i = 0; i < t->max_sessions && staying > want; i++) {
        struct dm_load_session *s = &t->sessions[i];
        if (s->state == DM_LS_LOADING && !s->ending) {
            s->ending = true;
            t->ending++;
            staying--;
        }
    }
}

void
dm_load_sessions_unanswered(struct dm_load_thread *t, uint64_t now_ns)
{
    for (unsigned i = 0; i < t->max_sessions; i++) {
        struct dm_load_session *s = &t->sessions[i];
        for (unsigned j = 0; s->state != DM_LS_FREE && j < DM_LOAD_MAX_CPU; j++) {
            if (s->conns[j] != NULL) {
                dm_load_conn_unanswered(s->conns[j], now_ns);
            }
        }
    }
}

void
dm_load_sessions_stop(struct dm_load_thread *t)
{
    for (unsigned i = 0; i < t->max_sessions; i++) {
        struct dm_load_session *s = &t->sessions[i];
        if (s->state != DM_LS_FREE) {
            session_end(s);
        }
        if (s->timer_open) {
            uv_close((uv_handle_t *)&s->timer, NULL);
            s->timer_open = false;
        }
    }
}
