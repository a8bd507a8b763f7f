/*
 * Replays inputs through a libFuzzer driver without libFuzzer, so that every
 * kept input (fuzz/corpus/<driver>/: seeds, and each input that once broke
 * an invariant) is a regression test of every build, gcc's and the
 * sanitizers' included. Arguments: files, or directories whose files are
 * replayed in name order. A broken invariant aborts, as under libFuzzer.
 */
#include <dirent.h>
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { REPLAY_MAX = 1 << 24 }; /* largest input replayed: 16 MiB */

/* Replays the file at path; 0, or -1 with a message. */
static int
replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    uint8_t *buf = malloc(REPLAY_MAX);
    if (buf == NULL) {
        fclose(f);
        fprintf(stderr, "replay: out of memory\n");
        return -1;
    }
    size_t n = fread(buf, 1, REPLAY_MAX, f);
    int bad = ferror(f) || (n == REPLAY_MAX && fgetc(f) != EOF);
    fclose(f);
    if (bad) {
        free(buf);
        fprintf(stderr, "replay: %s: unreadable or over %d bytes\n", path, REPLAY_MAX);
        return -1;
    }
    /* A copy of exactly the input's size, so ASan sees a read past its end. */
    uint8_t *in = malloc(n > 0 ? n : 1);
    if (in == NULL) {
        free(buf);
        fprintf(stderr, "replay: out of memory\n");
        return -1;
    }
    memcpy(in, buf, n);
    free(buf);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    return 0;
}

static int
by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Replays every regular file of the directory, in name order; how many, or -1. */
static long
replay_dir(const char *dir)
{
    DIR *d = opendir(dir);
    if (d == NULL) {
        fprintf(stderr, "replay: %s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0, cap = 0;
    long done = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.') {
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            char **grown = realloc(names, cap * sizeof(*names));
            if (grown == NULL) {
                fprintf(stderr, "replay: out of memory\n");
                goto out;
            }
            names = grown;
        }
        size_t len = strlen(dir) + strlen(e->d_name) + 2;
        if ((names[n] = malloc(len)) == NULL) {
            fprintf(stderr, "replay: out of memory\n");
            goto out;
        }
        snprintf(names[n++], len, "%s/%s", dir, e->d_name);
    }
    qsort(names, n, sizeof(*names), by_name);
    done = 0;
    for (size_t i = 0; i < n; i++) {
        struct stat st;
        if (stat(names[i], &st) == 0 && S_ISREG(st.st_mode)) {
            if (replay_file(names[i]) < 0) {
                done = -1;
                break;
            }
            done++;
        }
    }
out:
    for (size_t i = 0; i < n; i++) {
        free(names[i]);
    }
    free(names);
    closedir(d);
    return done;
}

int
main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    long total = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) != 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        long k = S_ISDIR(st.st_mode) ? replay_dir(argv[i]) : replay_file(argv[i]) == 0 ? 1 : -1;
        if (k < 0) {
            return 1;
        }
        total += k;
    }
    if (total == 0) {
        fprintf(stderr, "replay: no input found\n");
        return 1;
    }
    printf("replayed %ld inputs\n", total);
    return 0;
}
