/*
 * dimmer-sim: the command line (bench/sim/README.md).
 *
 *   dimmer-sim [common options] all
 *   dimmer-sim [common options] EXPERIMENT [its options]
 *   dimmer-sim --help | EXPERIMENT --help
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench/sim/exp.h"

static const struct dm_sim_exp *const experiments[] = {
    &dm_sim_exp_power, &dm_sim_exp_age, &dm_sim_exp_hetero, &dm_sim_exp_alloc, NULL,
};

static void
usage(FILE *f)
{
    fprintf(f, "usage: dimmer-sim [options] all | EXPERIMENT [experiment options]\n"
               "\n"
               "A deterministic discrete-event simulator of clients -> dimmer -> servers that\n"
               "runs dimmer's own balancers and power policies in virtual time.\n"
               "\n"
               "options (before the experiment):\n"
               "  --seed N      the run's seed (default 1): same seed, same output\n"
               "  --out DIR     write every table as DIR/NAME.csv and plots as DIR/NAME.png\n"
               "                (DIR is made if missing)\n"
               "  --csv         print tables as CSV instead of aligned text\n"
               "  --quick       small sizes (the test suite's smoke runs)\n"
               "  --jobs N      threads for independent runs (default 2)\n"
               "  --no-plots    no gnuplot, CSV only\n"
               "  --help        this text; EXPERIMENT --help lists its options\n"
               "\n"
               "experiments:\n"
               "  all           every experiment below with its defaults\n");
    for (size_t i = 0; experiments[i] != NULL; i++) {
        fprintf(f, "  %-13s %s\n", experiments[i]->name, experiments[i]->summary);
    }
}

static const struct dm_sim_exp *
find(const char *name)
{
    for (size_t i = 0; experiments[i] != NULL; i++) {
        if (strcmp(experiments[i]->name, name) == 0) {
            return experiments[i];
        }
    }
    return NULL;
}

static int
make_dir(const char *dir)
{
    char path[4096];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof(path)) {
        fprintf(stderr, "dimmer-sim: --out: bad folder name\n");
        return -1;
    }
    memcpy(path, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (path[i] == '/' || path[i] == '\0') {
            char c = path[i];
            path[i] = '\0';
            if (mkdir(path, 0777) != 0 && errno != EEXIST) {
                fprintf(stderr, "dimmer-sim: %s: %s\n", path, strerror(errno));
                return -1;
            }
            path[i] = c;
        }
    }
    /* Said now, not after the runs: a file of that name, or a folder not ours. */
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode) || access(dir, W_OK | X_OK) != 0) {
        fprintf(stderr, "dimmer-sim: --out %s: %s\n", dir,
                stat(dir, &st) == 0 && !S_ISDIR(st.st_mode) ? "not a folder" : strerror(errno));
        return -1;
    }
    return 0;
}

int
main(int argc, char **argv)
{
    struct dm_sim_ctx ctx = { .seed = 1, .jobs = 2, .plots = true };
    int i = 1;
    for (; i < argc && argv[i][0] == '-'; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage(stdout);
            return 0;
        } else if (strcmp(a, "--csv") == 0) {
            ctx.csv = true;
        } else if (strcmp(a, "--quick") == 0) {
            ctx.quick = true;
        } else if (strcmp(a, "--no-plots") == 0) {
            ctx.plots = false;
        } else if (strcmp(a, "--seed") == 0 && i + 1 < argc) {
            double v;
            if (!dm_sim_opt_double("", "--seed", argv[++i], 0, 9007199254740992.0, &v)) {
                return 2;
            }
            ctx.seed = (uint64_t)v;
        } else if (strcmp(a, "--jobs") == 0 && i + 1 < argc) {
            if (!dm_sim_opt_unsigned("", "--jobs", argv[++i], 1, 64, &ctx.jobs)) {
                return 2;
            }
        } else if (strcmp(a, "--out") == 0 && i + 1 < argc) {
            ctx.out_dir = argv[++i];
        } else {
            fprintf(stderr, "dimmer-sim: unknown option %s (dimmer-sim --help)\n", a);
            return 2;
        }
    }
    if (i == argc) {
        usage(stderr);
        return 2;
    }
    if (ctx.out_dir != NULL && make_dir(ctx.out_dir) != 0) {
        return 1;
    }
    if (strcmp(argv[i], "all") == 0) {
        if (i + 1 < argc) {
            fprintf(stderr,
                    "dimmer-sim: all takes no options (run an experiment alone for that)\n");
            return 2;
        }
        int rc = 0;
        for (size_t k = 0; experiments[k] != NULL; k++) {
            char *args[] = { (char *)experiments[k]->name, NULL };
            int r = experiments[k]->run(&ctx, 1, args);
            rc = r != 0 ? r : rc;
            if (experiments[k] == &dm_sim_exp_age) {
                /* And the heavy-load goal's setting (bench/sim/README.md): the
                 * per-request columns with max_conns 1 and the pool's queue in
                 * size order, in tables of their own (age_queue). */
                char *q[] = { "age",     "--policies", "wlc,wlc/request,p2c-shadow/request",
                              "--queue", "0.25",       "--queue-order",
                              "size",    NULL };
                r = dm_sim_exp_age.run(&ctx, 7, q);
                rc = r != 0 ? r : rc;
            }
        }
        return rc;
    }
    const struct dm_sim_exp *e = find(argv[i]);
    if (e == NULL) {
        fprintf(stderr, "dimmer-sim: unknown experiment %s (dimmer-sim --help)\n", argv[i]);
        return 2;
    }
    for (int k = i + 1; k < argc; k++) {
        if (strcmp(argv[k], "--help") == 0 || strcmp(argv[k], "-h") == 0) {
            printf("usage: dimmer-sim [options] %s [options]\n\n%s\n\n%s", e->name, e->summary,
                   e->usage);
            return 0;
        }
    }
    return e->run(&ctx, argc - i, argv + i);
}
