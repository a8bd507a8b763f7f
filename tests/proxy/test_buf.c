/*
 * Tests for the worker's buffer pools (proxy/buf.c): a decay pass frees
 * exactly the pooled buffers that sat unused since the pass before (the
 * fewest the pool held meanwhile), of each size class, and no more, so that
 * what a peak pooled goes back once the peak is over.
 */
#include "dm_test.h"

#include <stdlib.h>
#include <string.h>

#include "proxy/buf.h"
#include "proxy/internal.h"

#define BIG 32768u

struct pools {
    struct dm_worker w;
    struct dm_runtime rt;
};

static int
setup(void **state)
{
    struct pools *p = calloc(1, sizeof(*p));
    assert_non_null(p);
    p->rt.buf_cap = BIG;
    p->w.rt = &p->rt;
    *state = p;
    return 0;
}

static int
teardown(void **state)
{
    struct pools *p = *state;
    dm_buf_trim(&p->w);
    free(p);
    return 0;
}

/* Takes n buffers of cap at once, then gives them all back. */
static void
use(struct dm_worker *w, uint32_t cap, unsigned n)
{
    struct dm_buf *b[64];
    assert_true(n <= 64);
    for (unsigned i = 0; i < n; i++) {
        b[i] = dm_buf_get(w, cap);
        assert_non_null(b[i]);
    }
    for (unsigned i = 0; i < n; i++) {
        dm_buf_unref(w, b[i]);
    }
}

static void
test_decay_frees_what_sat_unused(void **state)
{
    struct pools *p = *state;
    struct dm_worker *w = &p->w;

    use(w, BIG, 6); /* a peak of six read buffers */
    assert_int_equal(w->nfree_bufs, 6);
    /* The peak itself is in the interval: the fewest pooled was 0. */
    assert_int_equal(dm_buf_decay(w), 0);
    assert_int_equal(w->nfree_bufs, 6);

    use(w, BIG, 2); /* the load after the peak needs two at once */
    size_t freed = dm_buf_decay(w);
    assert_int_equal(w->nfree_bufs, 2);
    assert_true(freed >= 4 * (size_t)BIG);
    assert_true(freed < 5 * (size_t)BIG);

    use(w, BIG, 2); /* the same load: nothing more to give back */
    assert_int_equal(dm_buf_decay(w), 0);
    assert_int_equal(w->nfree_bufs, 2);

    /* No load for a whole period: the rest goes. */
    assert_true(dm_buf_decay(w) >= 2 * (size_t)BIG);
    assert_int_equal(w->nfree_bufs, 0);
    assert_null(w->free_bufs);
}

static void
test_each_size_class_decays_on_its_own(void **state)
{
    struct pools *p = *state;
    struct dm_worker *w = &p->w;

    use(w, 10, 5); /* small */
    use(w, BIG, 3);
    assert_int_equal(dm_buf_decay(w), 0);
    use(w, 10, 5); /* the small ones all used again, the big ones not */
    assert_true(dm_buf_decay(w) >= 3 * (size_t)BIG);
    assert_int_equal(w->nfree_small, 5);
    assert_int_equal(w->nfree_bufs, 0);

    /* An odd size is never pooled, so never counted. */
    struct dm_buf *odd = dm_buf_get(w, BIG + 1);
    assert_non_null(odd);
    assert_int_equal(odd->cap, BIG + 1);
    dm_buf_unref(w, odd);
    assert_int_equal(w->nfree_bufs, 0);
    assert_int_equal(w->nfree_small, 5);
}

static void
test_trim_empties_the_pools_and_the_marks(void **state)
{
    struct pools *p = *state;
    struct dm_worker *w = &p->w;

    use(w, BIG, 4);
    use(w, 10, 4);
    assert_int_equal(dm_buf_decay(w), 0);
    dm_buf_trim(w);
    assert_int_equal(w->nfree_bufs, 0);
    assert_int_equal(w->nfree_small, 0);
    /* Buffers pooled after a trim are the new peak: kept one period. */
    use(w, BIG, 3);
    assert_int_equal(dm_buf_decay(w), 0);
    assert_int_equal(w->nfree_bufs, 3);
}

/* Appending makes the buffer, then grows it, the bytes kept in order. */
static void
test_append_makes_and_grows(void **state)
{
    struct pools *p = *state;
    struct dm_worker *w = &p->w;
    struct dm_buf *b = NULL;
    char chunk[1000];
    for (unsigned i = 0; i < 10; i++) {
        memset(chunk, 'a' + (int)i, sizeof(chunk));
        assert_int_equal(dm_buf_append(w, &b, chunk, sizeof(chunk)), 0);
        assert_non_null(b);
        assert_int_equal(b->len, (i + 1) * sizeof(chunk));
        assert_true(b->cap >= b->len);
    }
    for (unsigned i = 0; i < 10; i++) {
        assert_int_equal(b->data[i * sizeof(chunk)], 'a' + (int)i);
        assert_int_equal(b->data[i * sizeof(chunk) + sizeof(chunk) - 1], 'a' + (int)i);
    }
    assert_int_equal(dm_buf_append(w, &b, chunk, 0), 0);
    assert_int_equal(b->len, 10 * sizeof(chunk));
    dm_buf_unref(w, b);
}

int
main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_decay_frees_what_sat_unused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_each_size_class_decays_on_its_own, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trim_empties_the_pools_and_the_marks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_append_makes_and_grows, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
