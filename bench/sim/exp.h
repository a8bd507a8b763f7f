/*
 * dimmer-sim's experiments and what they share (the program, not dm_sim):
 * the run context from the command line, tables printed as text or CSV and
 * written under the output folder, plots through gnuplot, and a pool of
 * threads for independent runs. Each experiment is one file exporting one
 * const struct dm_sim_exp, listed in main.c.
 *
 * Determinism: a run is a function of the seed and its parameters. Runs
 * done in parallel write into their own slots and are printed in order
 * afterwards, so the output does not depend on --jobs.
 */
#ifndef DM_BENCH_SIM_EXP_H
#define DM_BENCH_SIM_EXP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "bench/sim/server.h"

struct dm_sim_ctx {
    uint64_t seed;
    const char *out_dir; /* CSV and plots go here; NULL: none */
    bool csv;            /* print tables as CSV, not aligned text */
    bool quick;          /* small sizes: the test suite's smoke runs */
    unsigned jobs;       /* threads for independent runs (>= 1) */
    bool plots;          /* run gnuplot when out_dir is set */
};

struct dm_sim_exp {
    const char *name;
    const char *summary;
    const char *usage; /* the experiment's own options, for --help */
    /* argv[0] is the experiment's name; returns 0, 2 on a usage error, 1 on failure. */
    int (*run)(const struct dm_sim_ctx *ctx, int argc, char **argv);
};

extern const struct dm_sim_exp dm_sim_exp_power, dm_sim_exp_age, dm_sim_exp_hetero,
    dm_sim_exp_alloc;

/* ---- tables ---- */

struct dm_sim_table;

/* A table of ncols columns; name is its file stem (NAME.csv), title its heading. */
struct dm_sim_table *dm_sim_table_create(const char *name, const char *title, size_t ncols,
                                         const char *const *headers);
/* Appends the next cell (rows fill left to right, then the next row starts). */
void dm_sim_table_cell(struct dm_sim_table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A note printed under the table (not in the CSV). */
void dm_sim_table_note(struct dm_sim_table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Prints t to stdout (text or CSV by ctx) and writes OUT/NAME.csv; returns 0 or -1. */
int dm_sim_table_emit(const struct dm_sim_ctx *ctx, struct dm_sim_table *t);
void dm_sim_table_destroy(struct dm_sim_table *t);

/* ---- files and plots ---- */

/* Opens OUT/NAME for writing (NULL when there is no out_dir, or on error, said on stderr). */
FILE *dm_sim_file(const struct dm_sim_ctx *ctx, const char *name);
/*
 * Writes OUT/NAME.gp (script, which names its own data files relative to OUT)
 * and runs gnuplot on it in OUT, making OUT/NAME.png. Returns 0, or -1 when
 * gnuplot is missing or fails (said once on stderr); nothing without out_dir.
 */
int dm_sim_plot(const struct dm_sim_ctx *ctx, const char *name, const char *script);

/* ---- parallel runs ---- */

/* Calls fn(i, arg) for i in 0..n-1 on up to jobs threads; returns when all are done. */
void dm_sim_parallel(unsigned jobs, size_t n, void (*fn)(size_t i, void *arg), void *arg);

/* ---- option parsing ---- */

/* Reads a number option's value; on error prints "dimmer-sim EXP: --OPT: ..." and returns false. */
bool dm_sim_opt_double(const char *exp, const char *opt, const char *val, double lo, double hi,
                       double *out);
bool dm_sim_opt_unsigned(const char *exp, const char *opt, const char *val, unsigned lo,
                         unsigned hi, unsigned *out);
/* --discipline: "ps" or "fifo" (server.h); on error prints as above and returns false. */
bool dm_sim_opt_disc(const char *exp, const char *opt, const char *val, enum dm_sim_disc *out);
/* A comma-separated list of numbers; returns how many (at most cap), or -1 after an error. */
int dm_sim_opt_list(const char *exp, const char *opt, const char *val, double *out, int cap);

#endif
