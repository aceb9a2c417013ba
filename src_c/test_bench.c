/*
 * Quick benchmark of the native core (not a test; `make bench`, BENCH_ARGS="-n 100000" etc).
 * Builds N random bindings of 4-6 words, each word one of 30 per level, then times the query
 * shapes of the project's benchmark: exact, a.*.c.d, a.b.c.#, a.#, a.b.# and its mirror #.c.d,
 * infix a.#.d, and #; then churn (remove + re-add). Layout: as inserted, then after rt_compact.
 *   -n N          bindings (default 1000000)
 *   --per-level   words of each level are distinct from other levels' (default: shared)
 *   --forward     also time an RT_FORWARD matcher with wildcard bindings
 */
#define _POSIX_C_SOURCE 199309L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rtroute.h"

#define VOCAB 30

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static int per_level;

static uint32_t rnd(uint32_t n)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng % n);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

typedef struct {
    int n;
    uint8_t w[6];
} key;

static int word_str(char *buf, int level, int w)
{
    return per_level ? sprintf(buf, "l%d_%s%d", level, "word", w) : sprintf(buf, "word%d", w);
}

static size_t key_str(const key *k, char *buf)
{
    size_t len = 0;
    int i;
    for (i = 0; i < k->n; i++) {
        if (i)
            buf[len++] = '.';
        len += (size_t)word_str(buf + len, i, k->w[i]);
    }
    buf[len] = 0;
    return len;
}

/* A query from a random key: tokens are 'L' (its word at that level), '*', '#', or 'E'
 * (its last words, right-aligned) so that #.c.d takes a real suffix. */
static size_t make_query(const key *keys, size_t nkeys, const char *shape, char *buf)
{
    const key *k;
    size_t len = 0;
    int ntok = (int)strlen(shape), i, minlen = 0;
    for (i = 0; i < ntok; i++)
        minlen += shape[i] != '#';
    do
        k = &keys[rnd((uint32_t)nkeys)];
    while (k->n < minlen || (strchr(shape, '#') == NULL && k->n != ntok));
    for (i = 0; i < ntok; i++) {
        if (i)
            buf[len++] = '.';
        if (shape[i] == '*' || shape[i] == '#') {
            buf[len++] = shape[i];
        } else if (shape[i] == 'L') {
            len += (size_t)word_str(buf + len, i, k->w[i]);
        } else { /* 'E': counted from the end */
            int from_end = ntok - i, lvl = k->n - from_end;
            len += (size_t)word_str(buf + len, lvl, k->w[lvl]);
        }
    }
    buf[len] = 0;
    return len;
}

static void time_shape(rt_matcher *m, const key *keys, size_t nkeys, const char *label,
                       const char *shape, int nq, rt_direction dir)
{
    char *buf = malloc((size_t)nq * 64);
    size_t *offs = malloc(((size_t)nq + 1) * sizeof *offs), *res = malloc(((size_t)nq + 1) * sizeof *res);
    rt_ids out;
    double t0, dt;
    int i, rounds = 0;
    size_t results = 0;
    offs[0] = 0;
    for (i = 0; i < nq; i++)
        offs[i + 1] = offs[i] + make_query(keys, nkeys, shape, buf + offs[i]);
    rt_ids_init(&out);
    t0 = now();
    do {
        out.len = 0;
        if (dir == RT_AUTO) {
            if (rt_match_batch(m, buf, offs, (size_t)nq, &out, res) != RT_OK)
                abort();
            results += out.len;
        } else {
            for (i = 0; i < nq; i++) {
                long r = rt_match_dir(m, buf + offs[i], offs[i + 1] - offs[i], dir, &out);
                if (r < 0)
                    abort();
            }
            results += out.len;
        }
        rounds++;
        dt = now() - t0;
    } while (dt < 0.3);
    printf("  %-22s %10.3f us/query %10.1f results/query %8.1f ns/result\n", label,
           dt * 1e6 / ((double)nq * rounds), (double)results / ((double)nq * rounds),
           results ? dt * 1e9 / (double)results : 0.0);
    rt_ids_free(&out);
    free(buf);
    free(offs);
    free(res);
}

static void time_queries(rt_matcher *m, const key *keys, size_t nkeys)
{
    time_shape(m, keys, nkeys, "exact", "LLLL", 100000, RT_AUTO);
    time_shape(m, keys, nkeys, "exact (5 words)", "LLLLL", 100000, RT_AUTO);
    time_shape(m, keys, nkeys, "a.*.c.d", "L*LL", 20000, RT_AUTO);
    time_shape(m, keys, nkeys, "a.b.c.#", "LLL#", 20000, RT_AUTO);
    time_shape(m, keys, nkeys, "a.b.#", "LL#", 2000, RT_AUTO);
    time_shape(m, keys, nkeys, "#.c.d (suffix)", "#EE", 2000, RT_AUTO);
    time_shape(m, keys, nkeys, "#.c.d forced forward", "#EE", 5, RT_DIR_FORWARD);
    time_shape(m, keys, nkeys, "a.#", "L#", 100, RT_AUTO);
    time_shape(m, keys, nkeys, "#.d", "#E", 100, RT_AUTO);
    time_shape(m, keys, nkeys, "a.#.d (infix)", "L#E", 200, RT_AUTO);
    time_shape(m, keys, nkeys, "a.#.d forced reversed", "L#E", 200, RT_DIR_REVERSED);
    time_shape(m, keys, nkeys, "*.b.#", "*L#", 200, RT_AUTO);
    time_shape(m, keys, nkeys, "#", "#", 3, RT_AUTO);
}

int main(int argc, char **argv)
{
    size_t n = 1000000, i, len, churn;
    int forward = 0, a;
    key *keys;
    char *kbuf;
    size_t *koff;
    rt_matcher *m;
    char buf[256];
    double t0, dt;
    uint32_t id;
    for (a = 1; a < argc; a++) {
        if (strcmp(argv[a], "-n") == 0 && a + 1 < argc)
            n = (size_t)strtoul(argv[++a], NULL, 10);
        else if (strcmp(argv[a], "--per-level") == 0)
            per_level = 1;
        else if (strcmp(argv[a], "--forward") == 0)
            forward = 1;
    }
    keys = malloc(n * sizeof *keys);
    kbuf = malloc(n * 48);
    koff = malloc((n + 1) * sizeof *koff);
    m = rt_matcher_new(RT_REVERSE);
    printf("RT_REVERSE, %zu random bindings of 4-6 words, %d words per level (%s)\n", n, VOCAB,
           per_level ? "distinct per level" : "shared by all levels");
    /* Distinct random keys, formatted before the clock starts. */
    koff[0] = 0;
    for (i = 0; i < n;) {
        key *k = &keys[i];
        int w;
        k->n = 4 + (int)rnd(3);
        for (w = 0; w < k->n; w++)
            k->w[w] = (uint8_t)rnd(VOCAB);
        len = key_str(k, buf);
        if (rt_add(m, buf, len, &id) == 1) {
            memcpy(kbuf + koff[i], buf, len);
            koff[i + 1] = koff[i] + len;
            i++;
        }
    }
    rt_matcher_free(m);
    m = rt_matcher_new(RT_REVERSE);
    t0 = now();
    for (i = 0; i < n; i++)
        if (rt_add(m, kbuf + koff[i], koff[i + 1] - koff[i], &id) != 1)
            abort();
    dt = now() - t0;
    printf("  build: %.2f s, %.0f adds/s\n", dt, (double)n / dt);
    printf("  memory as built: %.1f bytes/binding (%zu bytes, %zu bindings)\n",
           (double)rt_memory(m) / (double)rt_count(m), rt_memory(m), rt_count(m));
    printf(" queries, layout as inserted:\n");
    time_queries(m, keys, n);

    t0 = now();
    rt_compact(m);
    printf(" rt_compact: %.2f s; memory %.1f bytes/binding\n", now() - t0,
           (double)rt_memory(m) / (double)rt_count(m));
    printf(" queries, compacted layout:\n");
    time_queries(m, keys, n);

    /* Churn: remove then re-add a tenth of the bindings. */
    churn = n / 10;
    t0 = now();
    for (i = 0; i < churn; i++)
        if (rt_remove(m, kbuf + koff[i], koff[i + 1] - koff[i], &id) != 1)
            abort();
    dt = now() - t0;
    printf(" churn: %.0f removes/s", (double)churn / dt);
    t0 = now();
    for (i = 0; i < churn; i++)
        if (rt_add(m, kbuf + koff[i], koff[i + 1] - koff[i], &id) != 1)
            abort();
    dt = now() - t0;
    printf(", %.0f re-adds/s; memory %.1f bytes/binding, id limit %zu\n", (double)churn / dt,
           (double)rt_memory(m) / (double)rt_count(m), rt_id_limit(m));
    t0 = now();
    for (i = 0; i < n; i++)
        if (rt_remove(m, kbuf + koff[i], koff[i + 1] - koff[i], &id) != 1)
            abort();
    dt = now() - t0;
    printf(" remove all: %.0f removes/s; memory left %zu bytes\n", (double)n / dt, rt_memory(m));
    rt_matcher_free(m);

    if (forward) {
        rt_matcher *f = rt_matcher_new(RT_FORWARD);
        rt_ids out;
        size_t total = 0;
        int q;
        printf("RT_FORWARD, %zu bindings (a tenth of the words replaced by '*' or '#')\n", n);
        t0 = now();
        for (i = 0; i < n; i++) {
            size_t l = 0;
            int w;
            for (w = 0; w < keys[i].n; w++) {
                int r = (int)rnd(20);
                if (w)
                    buf[l++] = '.';
                if (r == 0)
                    buf[l++] = '*';
                else if (r == 1)
                    buf[l++] = '#';
                else
                    l += (size_t)word_str(buf + l, w, keys[i].w[w]);
            }
            (void)rt_add(f, buf, l, &id);
        }
        printf("  build: %.2f s; %zu bindings, %.1f bytes/binding\n", now() - t0, rt_count(f),
               (double)rt_memory(f) / (double)rt_count(f));
        rt_ids_init(&out);
        t0 = now();
        for (q = 0; q < 100000; q++) {
            len = key_str(&keys[rnd((uint32_t)n)], buf);
            out.len = 0;
            total += (size_t)rt_match(f, buf, len, &out);
        }
        dt = now() - t0;
        printf("  concrete key: %.3f us/query, %.1f results/query\n", dt * 1e6 / 100000,
               (double)total / 100000);
        rt_ids_free(&out);
        rt_matcher_free(f);
    }
    free(keys);
    free(kbuf);
    free(koff);
    return 0;
}
