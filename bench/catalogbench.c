/*
 * dimmer-catalogbench: what the object catalog's shard locks cost on the
 * request path. The catalog is called once per client connection (a page
 * lookup, which also reads the size of each embedded object) and once per
 * response (a size, and for an HTML page the list the scanner found).
 *
 * A catalog holds the demo site's shape: 50 pages of 24 objects each, every
 * size known. Each thread then does, per "connection", one lookup of a
 * random page and 25 learn_size calls (the page and its objects coming back),
 * which is what one page visit costs the catalog live. This runs on 1 thread
 * and then on 2 threads at once, both hammering the same catalog with no
 * other work: far denser than live, where each call sits among a request's
 * tens of microseconds of parsing and socket work, so the slowdown of the
 * second line is an upper bound on contention. The locks' own price is
 * measured apart: an uncontended lock/unlock pair, times the most shard
 * locks one visit takes.
 *
 * Usage: dimmer-catalogbench [-t seconds]   (default 1 per measurement)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "balancers/balancer.h"
#include "parsers/catalog.h"

#define PAGES   50
#define OBJECTS 24

struct run {
    struct dm_catalog *cat;
    uint64_t pages[PAGES];
    uint64_t objs[PAGES][OBJECTS];
    double seconds;
};

struct worker {
    struct run *run;
    uint64_t seed;
    uint64_t visits;
    pthread_t thread;
};

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static uint64_t
next(uint64_t *s)
{
    /* xorshift64*: the benchmark's own randomness, outside the catalog. */
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545f4914f6cdd1dULL;
}

static void *
visit_loop(void *arg)
{
    struct worker *w = arg;
    struct run *r = w->run;
    struct dm_bal_object out[DM_CATALOG_PAGE_MAX];
    double end = now_s() + r->seconds;
    uint64_t n = 0;
    while (now_s() < end) {
        for (int k = 0; k < 64; k++) {
            unsigned p = (unsigned)(next(&w->seed) % PAGES);
            size_t got =
                dm_catalog_lookup(r->cat, r->pages[p], out, DM_CATALOG_PAGE_MAX, 8192, 10240, NULL);
            if (got != OBJECTS) {
                fprintf(stderr, "lookup found %zu objects, not %d\n", got, OBJECTS);
                exit(1);
            }
            dm_catalog_learn_size(r->cat, r->pages[p], 5000);
            for (int o = 0; o < OBJECTS; o++) {
                dm_catalog_learn_size(r->cat, r->objs[p][o], 1000 + (uint64_t)o);
            }
        }
        n += 64;
    }
    w->visits = n;
    return NULL;
}

/* ns per page visit with `threads` threads at once (each thread's own view). */
static double
measure(struct run *r, int threads)
{
    struct worker w[2];
    for (int i = 0; i < threads; i++) {
        w[i] = (struct worker){ .run = r, .seed = 0x9e3779b97f4a7c15ULL * (uint64_t)(i + 1) };
        if (pthread_create(&w[i].thread, NULL, visit_loop, &w[i]) != 0) {
            fprintf(stderr, "pthread_create failed\n");
            exit(1);
        }
    }
    uint64_t visits = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(w[i].thread, NULL);
        visits += w[i].visits;
    }
    return r->seconds * 1e9 * threads / (double)visits;
}

static double
lock_pair_ns(double seconds)
{
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    uint64_t n = 0;
    double start = now_s();
    double end = start + seconds;
    while (now_s() < end) {
        for (int k = 0; k < 4096; k++) {
            pthread_mutex_lock(&m);
            __asm__ volatile("" ::: "memory");
            pthread_mutex_unlock(&m);
        }
        n += 4096;
    }
    return (now_s() - start) * 1e9 / (double)n;
}

int
main(int argc, char **argv)
{
    double seconds = 1.0;
    if (argc == 3 && strcmp(argv[1], "-t") == 0) {
        seconds = atof(argv[2]);
    } else if (argc != 1) {
        fprintf(stderr, "usage: dimmer-catalogbench [-t seconds]\n");
        return 2;
    }
    static struct run r;
    r.seconds = seconds;
    r.cat = dm_catalog_create(16u << 20);
    if (r.cat == NULL) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    char path[64];
    for (int p = 0; p < PAGES; p++) {
        int n = snprintf(path, sizeof(path), "/page/%d.html", p);
        r.pages[p] = dm_catalog_key("demo", 4, path, (size_t)n);
        for (int o = 0; o < OBJECTS; o++) {
            n = snprintf(path, sizeof(path), "/obj/%d.png", p * OBJECTS + o);
            r.objs[p][o] = dm_catalog_key("demo", 4, path, (size_t)n);
            dm_catalog_learn_size(r.cat, r.objs[p][o], 1000 + (uint64_t)o);
        }
        dm_catalog_learn_page(r.cat, r.pages[p], r.objs[p], OBJECTS);
    }
    /* Locks per visit: the lookup locks the page's shard and each shard its
     * objects fall in, once (at most 1 + 24 of 64), then 25 learn_size calls
     * lock one shard each. */
    double one = measure(&r, 1);
    double two = measure(&r, 2);
    double pair = lock_pair_ns(seconds);
    printf("dimmer-catalogbench: one page visit = 1 lookup (%d objects) + %d sizes learnt\n",
           OBJECTS, OBJECTS + 1);
    printf("  1 thread:             %7.0f ns per visit\n", one);
    printf("  2 threads at once:    %7.0f ns per visit per thread (%.2fx)\n", two, two / one);
    printf("  uncontended lock+unlock pair: %.1f ns; at most %d pairs per visit = %.0f ns\n", pair,
           2 * OBJECTS + 2, pair * (2 * OBJECTS + 2));
    dm_catalog_destroy(r.cat);
    return 0;
}
