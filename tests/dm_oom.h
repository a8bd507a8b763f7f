#ifndef DM_TESTS_DM_OOM_H
#define DM_TESTS_DM_OOM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/*
 * Allocation failure injection. tests/CMakeLists.txt links this executable
 * with -Wl,--wrap=malloc,... (also calloc, realloc, aligned_alloc, free,
 * strdup and strndup): every call to those functions from our own
 * objects (this file and the static dimmer libraries) comes here instead.
 * Calls made inside shared libraries are not redirected: libyaml allocates
 * through its yaml_malloc() -> malloc() and glibc's getline(), fopen() and
 * getaddrinfo() allocate internally, and none of those can be made to fail
 * here. Only the oom_fail_at-th wrapped allocation fails (1-based, 0 = none).
 *
 * Every block handed out by a wrapper is remembered in a pointer set, so
 * oom_live counts our allocations minus their frees; a free() of a block
 * that libc allocated (a getline() buffer) is passed on without counting.
 */
void *__real_malloc(size_t size);
void *__real_calloc(size_t nmemb, size_t size);
void *__real_realloc(void *ptr, size_t size);
void *__real_aligned_alloc(size_t alignment, size_t size);
void __real_free(void *ptr);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t nmemb, size_t size);
void *__wrap_realloc(void *ptr, size_t size);
void *__wrap_aligned_alloc(size_t alignment, size_t size);
void __wrap_free(void *ptr);
char *__wrap_strdup(const char *s);
char *__wrap_strndup(const char *s, size_t n);

#define OOM_SLOTS (1u << 16)  /* pointer set: open addressing, power of two */
#define OOM_GONE  ((void *)1) /* tombstone */

static void *oom_set[OOM_SLOTS];
static unsigned long oom_calls;   /* wrapped allocations since oom_arm() */
static unsigned long oom_fail_at; /* the one to fail, 0 = none */
static bool oom_failed;           /* the failure was injected */
static long oom_live;             /* wrapped blocks not freed yet */

static size_t
oom_slot(const void *p)
{
    uintptr_t h = (uintptr_t)p;
    h ^= h >> 17;
    h *= 0x9e3779b97f4a7c15u;
    return (size_t)(h >> 7) & (OOM_SLOTS - 1);
}

static void
oom_track(void *p)
{
    size_t i = oom_slot(p);
    while (oom_set[i] != NULL && oom_set[i] != OOM_GONE) {
        i = (i + 1) & (OOM_SLOTS - 1);
    }
    oom_set[i] = p;
    oom_live++;
}

/* Forgets p; false when it was not ours. */
static bool
oom_untrack(void *p)
{
    for (size_t i = oom_slot(p); oom_set[i] != NULL; i = (i + 1) & (OOM_SLOTS - 1)) {
        if (oom_set[i] == p) {
            oom_set[i] = OOM_GONE;
            oom_live--;
            return true;
        }
    }
    return false;
}

static bool
oom_inject(void)
{
    oom_calls++;
    if (oom_fail_at != 0 && oom_calls == oom_fail_at) {
        oom_failed = true;
        return true;
    }
    return false;
}

/* Fails the n-th allocation from now on (0: none) and counts from zero. */
static void
oom_arm(unsigned long n)
{
    oom_calls = 0;
    oom_fail_at = n;
    oom_failed = false;
}

static void
oom_disarm(void)
{
    oom_fail_at = 0;
}

void *
__wrap_malloc(size_t size)
{
    if (oom_inject()) {
        return NULL;
    }
    void *p = __real_malloc(size);
    if (p != NULL) {
        oom_track(p);
    }
    return p;
}

void *
__wrap_calloc(size_t nmemb, size_t size)
{
    if (oom_inject()) {
        return NULL;
    }
    void *p = __real_calloc(nmemb, size);
    if (p != NULL) {
        oom_track(p);
    }
    return p;
}

void *
__wrap_realloc(void *ptr, size_t size)
{
    if (oom_inject()) {
        return NULL;
    }
    bool ours = ptr == NULL || oom_untrack(ptr);
    void *p = __real_realloc(ptr, size);
    if (p == NULL && ptr != NULL && ours) {
        oom_track(ptr); /* a real failure leaves the block where it was */
    } else if (p != NULL && ours) {
        oom_track(p);
    }
    return p;
}

void *
__wrap_aligned_alloc(size_t alignment, size_t size)
{
    if (oom_inject()) {
        return NULL;
    }
    void *p = __real_aligned_alloc(alignment, size);
    if (p != NULL) {
        oom_track(p);
    }
    return p;
}

void
__wrap_free(void *ptr)
{
    if (ptr != NULL) {
        oom_untrack(ptr);
    }
    __real_free(ptr);
}

char *
__wrap_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = __wrap_malloc(n);
    if (d != NULL) {
        memcpy(d, s, n);
    }
    return d;
}

char *
__wrap_strndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *d = __wrap_malloc(len + 1);
    if (d != NULL) {
        memcpy(d, s, len);
        d[len] = '\0';
    }
    return d;
}

#endif
