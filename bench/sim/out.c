#include "bench/sim/exp.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct dm_sim_table {
    char *name, *title;
    size_t ncols;
    char **headers;
    char **cells;
    size_t ncells, cap;
    char *notes;
    size_t notes_len;
};

static char *
dup_str(const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = malloc(n);
    if (p != NULL) {
        memcpy(p, s, n);
    }
    return p;
}

struct dm_sim_table *
dm_sim_table_create(const char *name, const char *title, size_t ncols, const char *const *headers)
{
    struct dm_sim_table *t = calloc(1, sizeof(*t));
    if (t == NULL) {
        return NULL;
    }
    t->name = dup_str(name);
    t->title = dup_str(title);
    t->ncols = ncols;
    t->headers = calloc(ncols, sizeof(char *));
    if (t->name == NULL || t->title == NULL || t->headers == NULL) {
        dm_sim_table_destroy(t);
        return NULL;
    }
    for (size_t i = 0; i < ncols; i++) {
        t->headers[i] = dup_str(headers[i]);
    }
    return t;
}

static char *
vformat(const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) {
        return NULL;
    }
    char *p = malloc((size_t)n + 1);
    if (p != NULL) {
        vsnprintf(p, (size_t)n + 1, fmt, ap);
    }
    return p;
}

void
dm_sim_table_cell(struct dm_sim_table *t, const char *fmt, ...)
{
    if (t == NULL) {
        return;
    }
    if (t->ncells == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 64;
        char **c = realloc(t->cells, cap * sizeof(char *));
        if (c == NULL) {
            return;
        }
        t->cells = c;
        t->cap = cap;
    }
    va_list ap;
    va_start(ap, fmt);
    t->cells[t->ncells++] = vformat(fmt, ap);
    va_end(ap);
}

void
dm_sim_table_note(struct dm_sim_table *t, const char *fmt, ...)
{
    if (t == NULL) {
        return;
    }
    va_list ap;
    va_start(ap, fmt);
    char *s = vformat(fmt, ap);
    va_end(ap);
    if (s == NULL) {
        return;
    }
    size_t n = strlen(s);
    char *p = realloc(t->notes, t->notes_len + n + 2);
    if (p != NULL) {
        memcpy(p + t->notes_len, s, n);
        p[t->notes_len + n] = '\n';
        p[t->notes_len + n + 1] = '\0';
        t->notes = p;
        t->notes_len += n + 1;
    }
    free(s);
}

static const char *
cell(const struct dm_sim_table *t, size_t i)
{
    return i < t->ncells && t->cells[i] != NULL ? t->cells[i] : "";
}

/* CSV quoting: only when a cell has a comma, a quote or a newline. */
static void
csv_cell(FILE *f, const char *s)
{
    if (strpbrk(s, ",\"\n") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') {
            fputc('"', f);
        }
        fputc(*s, f);
    }
    fputc('"', f);
}

static void
write_csv(FILE *f, const struct dm_sim_table *t)
{
    for (size_t c = 0; c < t->ncols; c++) {
        fputs(c ? "," : "", f);
        csv_cell(f, t->headers[c] != NULL ? t->headers[c] : "");
    }
    fputc('\n', f);
    size_t rows = (t->ncells + t->ncols - 1) / t->ncols;
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            fputs(c ? "," : "", f);
            csv_cell(f, cell(t, r * t->ncols + c));
        }
        fputc('\n', f);
    }
}

static void
write_text(FILE *f, const struct dm_sim_table *t)
{
    size_t rows = (t->ncells + t->ncols - 1) / t->ncols;
    size_t *w = calloc(t->ncols, sizeof(size_t));
    if (w == NULL) {
        return;
    }
    for (size_t c = 0; c < t->ncols; c++) {
        w[c] = t->headers[c] != NULL ? strlen(t->headers[c]) : 0;
        for (size_t r = 0; r < rows; r++) {
            size_t n = strlen(cell(t, r * t->ncols + c));
            w[c] = n > w[c] ? n : w[c];
        }
    }
    fprintf(f, "\n%s\n\n", t->title);
    for (size_t c = 0; c < t->ncols; c++) {
        fprintf(f, c == 0 ? "%-*s" : "  %*s", (int)w[c], t->headers[c] ? t->headers[c] : "");
    }
    fputc('\n', f);
    for (size_t r = 0; r < rows; r++) {
        for (size_t c = 0; c < t->ncols; c++) {
            fprintf(f, c == 0 ? "%-*s" : "  %*s", (int)w[c], cell(t, r * t->ncols + c));
        }
        fputc('\n', f);
    }
    if (t->notes != NULL) {
        fprintf(f, "\n%s", t->notes);
    }
    free(w);
}

FILE *
dm_sim_file(const struct dm_sim_ctx *ctx, const char *name)
{
    if (ctx->out_dir == NULL) {
        return NULL;
    }
    size_t n = strlen(ctx->out_dir) + strlen(name) + 2;
    char *path = malloc(n);
    if (path == NULL) {
        return NULL;
    }
    snprintf(path, n, "%s/%s", ctx->out_dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL) {
        fprintf(stderr, "dimmer-sim: %s: %s\n", path, strerror(errno));
    }
    free(path);
    return f;
}

int
dm_sim_table_emit(const struct dm_sim_ctx *ctx, struct dm_sim_table *t)
{
    if (t == NULL) {
        fprintf(stderr, "dimmer-sim: out of memory\n");
        return -1;
    }
    if (ctx->csv) {
        printf("# %s\n", t->title);
        write_csv(stdout, t);
        printf("\n");
    } else {
        write_text(stdout, t);
    }
    fflush(stdout);
    if (ctx->out_dir != NULL) {
        char name[512];
        snprintf(name, sizeof(name), "%s.csv", t->name);
        FILE *f = dm_sim_file(ctx, name);
        if (f == NULL) {
            return -1;
        }
        write_csv(f, t);
        if (fclose(f) != 0) {
            return -1;
        }
    }
    return 0;
}

void
dm_sim_table_destroy(struct dm_sim_table *t)
{
    if (t == NULL) {
        return;
    }
    for (size_t i = 0; i < t->ncells; i++) {
        free(t->cells[i]);
    }
    for (size_t i = 0; t->headers != NULL && i < t->ncols; i++) {
        free(t->headers[i]);
    }
    free(t->cells);
    free(t->headers);
    free(t->name);
    free(t->title);
    free(t->notes);
    free(t);
}

int
dm_sim_plot(const struct dm_sim_ctx *ctx, const char *name, const char *script)
{
    static atomic_bool warned;
    if (ctx->out_dir == NULL || !ctx->plots) {
        return 0;
    }
    char gp[512];
    snprintf(gp, sizeof(gp), "%s.gp", name);
    FILE *f = dm_sim_file(ctx, gp);
    if (f == NULL) {
        return -1;
    }
    fprintf(f, "set terminal png size 1200,900\nset output '%s.png'\n%s", name, script);
    if (fclose(f) != 0) {
        return -1;
    }
    pid_t pid = fork();
    if (pid < 0) {
        return -1;
    }
    if (pid == 0) {
        if (chdir(ctx->out_dir) != 0) {
            _exit(127);
        }
        execlp("gnuplot", "gnuplot", gp, (char *)NULL);
        _exit(127);
    }
    int st;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            return -1;
        }
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        if (!atomic_exchange(&warned, true)) {
            fprintf(stderr,
                    WIFEXITED(st) && WEXITSTATUS(st) == 127
                        ? "dimmer-sim: no gnuplot (apt-get install gnuplot-nox): no plots\n"
                        : "dimmer-sim: gnuplot failed on %s/%s\n",
                    ctx->out_dir, gp);
        }
        return -1;
    }
    return 0;
}

struct par {
    void (*fn)(size_t i, void *arg);
    void *arg;
    size_t n;
    atomic_size_t next;
};

static void *
par_main(void *p)
{
    struct par *pa = p;
    for (;;) {
        size_t i = atomic_fetch_add(&pa->next, 1);
        if (i >= pa->n) {
            return NULL;
        }
        pa->fn(i, pa->arg);
    }
}

void
dm_sim_parallel(unsigned jobs, size_t n, void (*fn)(size_t i, void *arg), void *arg)
{
    struct par pa = { .fn = fn, .arg = arg, .n = n };
    atomic_init(&pa.next, 0);
    pthread_t th[64];
    unsigned k = jobs < 1 ? 1 : jobs > 64 ? 64 : jobs;
    unsigned started = 0;
    for (unsigned i = 1; i < k; i++) {
        if (pthread_create(&th[started], NULL, par_main, &pa) == 0) {
            started++;
        }
    }
    par_main(&pa);
    for (unsigned i = 0; i < started; i++) {
        pthread_join(th[i], NULL);
    }
}

bool
dm_sim_opt_double(const char *exp, const char *opt, const char *val, double lo, double hi,
                  double *out)
{
    char *end;
    errno = 0;
    double v = val != NULL ? strtod(val, &end) : 0;
    if (val == NULL || end == val || *end != '\0' || errno != 0 || !(v >= lo && v <= hi)) {
        fprintf(stderr, "dimmer-sim%s%s: %s: want a number in [%g, %g], not '%s'\n",
                *exp ? " " : "", exp, opt, lo, hi, val != NULL ? val : "(nothing)");
        return false;
    }
    *out = v;
    return true;
}

bool
dm_sim_opt_unsigned(const char *exp, const char *opt, const char *val, unsigned lo, unsigned hi,
                    unsigned *out)
{
    double v;
    if (!dm_sim_opt_double(exp, opt, val, lo, hi, &v)) {
        return false;
    }
    if (v != (double)(unsigned)v) {
        fprintf(stderr, "dimmer-sim %s: %s: want a whole number, not '%s'\n", exp, opt, val);
        return false;
    }
    *out = (unsigned)v;
    return true;
}

bool
dm_sim_opt_disc(const char *exp, const char *opt, const char *val, enum dm_sim_disc *out)
{
    if (val != NULL && strcmp(val, "ps") == 0) {
        *out = DM_SIM_PS;
    } else if (val != NULL && strcmp(val, "fifo") == 0) {
        *out = DM_SIM_FIFO;
    } else {
        fprintf(stderr, "dimmer-sim %s: %s: ps or fifo, not '%s'\n", exp, opt,
                val != NULL ? val : "");
        return false;
    }
    return true;
}

int
dm_sim_opt_list(const char *exp, const char *opt, const char *val, double *out, int cap)
{
    int n = 0;
    const char *p = val != NULL ? val : "";
    while (*p != '\0') {
        char *end;
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno != 0 || (*end != ',' && *end != '\0') || n == cap) {
            fprintf(stderr,
                    "dimmer-sim %s: %s: want up to %d numbers separated by commas, not '%s'\n", exp,
                    opt, cap, val);
            return -1;
        }
        out[n++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    if (n == 0) {
        fprintf(stderr, "dimmer-sim %s: %s: empty list\n", exp, opt);
        return -1;
    }
    return n;
}
