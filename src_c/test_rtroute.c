/*
 * Test driver of the native core: the matching rules one by one, bad input, churn, and a
 * randomized differential test against a brute-force matcher, for both kinds, all directions,
 * with and without injected allocation failures. `--quick` runs fewer random cases (valgrind).
 */
#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rtroute.h"
#include "ids.h"
#include "test_support.h"

static int quick;
static unsigned tests_run;

/* ------------------------------------------------------------------------ random numbers */

static uint64_t rng_state = 0x243f6a8885a308d3ull;

static uint32_t rnd(uint32_t n)
{
    return rt_test_rnd(&rng_state, n);
}

/* -------------------------------------------------------------------- the brute force */

#define MAXW 80

typedef struct {
    int n;
    const char *w[MAXW];
    size_t len[MAXW];
} words;

static void split(const char *s, words *out)
{
    size_t n = strlen(s), start = 0, i;
    out->n = 0;
    if (n == 0)
        return;
    for (i = 0; i <= n; i++)
        if (i == n || s[i] == '.') {
            CHECK(out->n < MAXW);
            out->w[out->n] = s + start;
            out->len[out->n] = i - start;
            out->n++;
            start = i + 1;
        }
}

static int word_eq(const words *a, int i, const char *lit)
{
    return a->len[i] == strlen(lit) && memcmp(a->w[i], lit, a->len[i]) == 0;
}

/* Does the pattern (with '*' and '#') match the concrete text? Plain recursive glob. */
static int glob(const words *p, int pi, const words *t, int ti)
{
    if (pi == p->n)
        return ti == t->n;
    if (word_eq(p, pi, "#")) {
        int k;
        for (k = ti; k <= t->n; k++)
            if (glob(p, pi + 1, t, k))
                return 1;
        return 0;
    }
    if (ti == t->n)
        return 0;
    if (!word_eq(p, pi, "*") &&
        (p->len[pi] != t->len[ti] || memcmp(p->w[pi], t->w[ti], p->len[pi]) != 0))
        return 0;
    return glob(p, pi + 1, t, ti + 1);
}

/* RT_REVERSE: the query is the pattern; RT_FORWARD: the binding is. */
static int brute_match(rt_kind kind, const char *binding, const char *query)
{
    words b, q;
    split(binding, &b);
    split(query, &q);
    return kind == RT_REVERSE ? glob(&q, 0, &b, 0) : glob(&b, 0, &q, 0);
}

/* ------------------------------------------------------------------------------ helpers */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint32_t add(rt_matcher *m, const char *key)
{
    uint32_t id = 12345;
    CHECK(rt_add(m, key, strlen(key), &id) == 1);
    return id;
}

static uint32_t id_of(rt_matcher *m, const char *key)
{
    uint32_t id;
    CHECK(rt_find(m, key, strlen(key), &id) == 1);
    return id;
}

/* The sorted result of a query; checks that no id repeats. */
static size_t query(rt_matcher *m, const char *q, rt_direction dir, uint32_t *res, size_t max)
{
    rt_ids out;
    long n;
    size_t i;
    rt_ids_init(&out);
    n = rt_match_dir(m, q, strlen(q), dir, &out);
    CHECK(n >= 0 && (size_t)n == out.len && out.len <= max);
    if (out.len)
        memcpy(res, out.ids, out.len * sizeof *res);
    qsort(res, out.len, sizeof *res, cmp_u32);
    for (i = 1; i < out.len; i++)
        CHECK(res[i] != res[i - 1]);
    rt_ids_free(&out);
    return (size_t)n;
}

/* Checks that q matches exactly the given keys (NULL-terminated), in every direction. */
static void expect(rt_matcher *m, const char *q, const char *const *keys)
{
    uint32_t want[64], got[64];
    size_t nw = 0, ng, i;
    rt_direction dirs[3] = {RT_AUTO, RT_DIR_FORWARD, RT_DIR_REVERSED};
    int d;
    for (; keys[nw]; nw++)
        want[nw] = id_of(m, keys[nw]);
    qsort(want, nw, sizeof *want, cmp_u32);
    for (d = 0; d < 3; d++) {
        ng = query(m, q, dirs[d], got, 64);
        if (ng != nw) {
            fprintf(stderr, "query '%s' dir %d: %zu results, want %zu\n", q, d, ng, nw);
            CHECK(0);
        }
        for (i = 0; i < nw; i++)
            CHECK(got[i] == want[i]);
    }
}

#define EXPECT(m, q, ...)                                                                      \
    do {                                                                                       \
        static const char *const keys_[] = {__VA_ARGS__, NULL};                                \
        expect(m, q, keys_);                                                                   \
    } while (0)
#define EXPECT_NONE(m, q)                                                                      \
    do {                                                                                       \
        static const char *const keys_[] = {NULL};                                             \
        expect(m, q, keys_);                                                                   \
    } while (0)

#define TEST(name) static void name(void)
#define RUN(name)                                                                              \
    do {                                                                                       \
        name();                                                                                \
        tests_run++;                                                                           \
        printf("ok  %s\n", #name);                                                             \
    } while (0)

/* ------------------------------------------------------------------- the matching rules */

#define S1M1I "server1.app1.mod1.info"
#define S1M1E "server1.app1.mod1.error"
#define S1M2I "server1.app1.mod2.info"
#define S2M1I "server2.app2.mod1.info"
#define S2M1W "server2.app2.mod1.warning"

/* The rtopic plugin's README: queues A..F; F uses A's key, so it is the same binding. */
TEST(test_rtopic_plugin_readme_examples)
{
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    uint32_t a, f;
    a = add(m, S1M1I);
    add(m, S1M1E);
    add(m, S1M2I);
    add(m, S2M1I);
    add(m, S2M1W);
    CHECK(rt_add(m, S1M1I, strlen(S1M1I), &f) == 0 && f == a);
    CHECK(rt_count(m) == 5);

    EXPECT(m, "*.app1.mod1.info", S1M1I);
    EXPECT(m, "#.info", S1M1I, S1M2I, S2M1I);
    EXPECT(m, "server1.#", S1M1I, S1M1E, S1M2I);
    EXPECT(m, "#.app1.#", S1M1I, S1M1E, S1M2I);
    EXPECT(m, "server1.*.*.info", S1M1I, S1M2I);
    EXPECT(m, "#.mod1.info", S1M1I, S2M1I);
    EXPECT(m, "#.mod1.#", S1M1I, S1M1E, S2M1I, S2M1W);
    EXPECT(m, "#", S1M1I, S1M1E, S1M2I, S2M1I, S2M1W);
    EXPECT(m, "#.#", S1M1I, S1M1E, S1M2I, S2M1I, S2M1W);
    EXPECT(m, "#.#.#.#.#.#", S1M1I, S1M1E, S1M2I, S2M1I, S2M1W);
    EXPECT(m, "*.*.*.*", S1M1I, S1M1E, S1M2I, S2M1I, S2M1W);
    EXPECT(m, "*.#.*.*.*", S1M1I, S1M1E, S1M2I, S2M1I, S2M1W);
    EXPECT_NONE(m, "*.*.*");
    EXPECT_NONE(m, "*.*.*.*.*");
    EXPECT(m, "server2.app2.mod1.warning", S2M1W);
    EXPECT(m, "server2.#.warning", S2M1W);
    EXPECT(m, "#.server2.#.warning.#", S2M1W);
    EXPECT(m, "server1.app1.mod1.info.#", S1M1I);
    EXPECT(m, "#.server1.app1.mod1.info", S1M1I);
    EXPECT(m, "*.*.mod2.*", S1M2I);
    EXPECT(m, "*.#.info", S1M1I, S1M2I, S2M1I);
    EXPECT(m, "#.*.info", S1M1I, S1M2I, S2M1I);
    EXPECT(m, "#.app2.*.#", S2M1I, S2M1W);
    EXPECT_NONE(m, "server1.app1.mod1.info.*");
    EXPECT_NONE(m, "server3.#");
    EXPECT_NONE(m, "#.nothing.#");
    EXPECT_NONE(m, "server1.app1.mod1");
    EXPECT_NONE(m, "");
    rt_matcher_free(m);
}

TEST(test_hash_matches_zero_words)
{
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    add(m, "a");
    add(m, "a.b");
    add(m, "b.a");
    add(m, "a.b.a");
    EXPECT(m, "a.#", "a", "a.b", "a.b.a");
    EXPECT(m, "#.a", "a", "b.a", "a.b.a");
    EXPECT(m, "#.a.#", "a", "a.b", "b.a", "a.b.a");
    EXPECT(m, "a.#.a", "a.b.a");
    EXPECT(m, "#.b.#", "a.b", "b.a", "a.b.a");
    EXPECT(m, "a.#.b.#", "a.b", "a.b.a");
    EXPECT(m, "#.#.a.#.#", "a", "a.b", "b.a", "a.b.a");
    EXPECT(m, "*.#", "a", "a.b", "b.a", "a.b.a");
    EXPECT(m, "#.*", "a", "a.b", "b.a", "a.b.a");
    EXPECT(m, "*.#.*", "a.b", "b.a", "a.b.a");
    EXPECT(m, "#.*.*.#", "a.b", "b.a", "a.b.a");
    EXPECT(m, "*", "a");
    EXPECT(m, "*.a", "b.a");
    EXPECT(m, "a.*", "a.b");
    rt_matcher_free(m);
}

TEST(test_empty_key_and_empty_words)
{
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    add(m, "");
    add(m, "a..b");
    add(m, "a.");
    add(m, ".");
    add(m, ".a");
    add(m, "a");
    EXPECT(m, "", "");
    EXPECT(m, "#", "", "a..b", "a.", ".", ".a", "a");
    EXPECT(m, "#.#", "", "a..b", "a.", ".", ".a", "a");
    EXPECT(m, "*", "a");
    EXPECT(m, "a.*.b", "a..b");
    EXPECT(m, "a.#.b", "a..b");
    EXPECT(m, "a..b", "a..b");
    EXPECT(m, "a.", "a.");
    EXPECT(m, "a.*", "a.");
    EXPECT(m, "a.#", "a..b", "a.", "a");
    EXPECT(m, "*.*", "a.", ".", ".a");
    EXPECT(m, ".", ".");
    EXPECT(m, ".#", ".", ".a");
    EXPECT(m, "#.", "a.", ".");
    EXPECT(m, "*.", "a.", ".");
    EXPECT_NONE(m, "..");
    EXPECT_NONE(m, "a.b");
    rt_matcher_free(m);
}

TEST(test_wildcards_in_a_binding_are_literal_words)
{
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    add(m, "*");
    add(m, "#");
    add(m, "a");
    add(m, "a.*.b");
    add(m, "a.#.b");
    add(m, "a.x.b");
    EXPECT(m, "*", "*", "#", "a");
    EXPECT(m, "#", "*", "#", "a", "a.*.b", "a.#.b", "a.x.b");
    EXPECT(m, "a.*.b", "a.*.b", "a.#.b", "a.x.b");
    EXPECT(m, "a.#", "a", "a.*.b", "a.#.b", "a.x.b");
    EXPECT(m, "a.x.#", "a.x.b");
    EXPECT_NONE(m, "b");
    rt_matcher_free(m);
}

TEST(test_key_length_limits)
{
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    char key[400], q[400];
    uint32_t id;
    int i;
    rt_ids out;
    rt_ids_init(&out);
    /* 128 one-byte words: 255 bytes, the longest key and the most words. */
    for (i = 0; i < 255; i++)
        key[i] = i % 2 ? '.' : (char)('a' + (i / 2) % 3);
    key[255] = 0;
    CHECK(rt_add(m, key, 255, &id) == 1);
    memset(key + 255, 'x', 1);
    CHECK(rt_add(m, key, 256, &id) == RT_ETOOLONG);
    CHECK(rt_find(m, key, 256, &id) == RT_ETOOLONG);
    CHECK(rt_remove(m, key, 256, &id) == RT_ETOOLONG);
    key[255] = 0;
    CHECK(rt_find(m, key, 255, &id) == 1);
    CHECK(rt_match(m, key, 255, &out) == 1);
    CHECK(rt_match(m, "#", 1, &out) == 1);
    CHECK(rt_match(m, "a.#", 3, &out) == 1);
    CHECK(rt_match(m, "#.b", 3, &out) == 1); /* word 127 is 'a' + 127 % 3 = 'b' */
    for (i = 0; i < 255; i++)
        q[i] = i % 2 ? '.' : '*';
    CHECK(rt_match(m, q, 255, &out) == 1);          /* 128 '*' */
    CHECK(rt_match(m, q, 253, &out) == 0);          /* 127 '*' */
    CHECK(rt_match(m, "*.*", 3, &out) == 0);
    q[255] = '.';
    q[256] = '*';
    CHECK(rt_match(m, q, 257, &out) == 0); /* 129 '*' */
    q[256] = '#';
    CHECK(rt_match(m, q, 257, &out) == 1); /* 128 '*' then '#' */
    /* A binding key of one 255-byte word. */
    memset(key, 'w', 255);
    CHECK(rt_add(m, key, 255, &id) == 1);
    CHECK(rt_match(m, "*", 1, &out) == 1);
    CHECK(out.len == 7);
    rt_ids_free(&out);
    rt_matcher_free(m);
}

TEST(test_hostile_queries)
{
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    rt_matcher *f = rt_matcher_new(RT_FORWARD);
    size_t big = RT_MAX_QUERY_BYTES, i;
    char *q = malloc(big + 2);
    rt_ids out;
    char key[64];
    long n;
    clock_t t0;
    int b;
    rt_ids_init(&out);
    for (b = 0; b < (quick ? 2000 : 100000); b++) {
        snprintf(key, sizeof key, "w%d.x%d.y%d.z%d", b % 7, b % 11, b % 13, b);
        add(m, key);
    }
    CHECK(rt_match(m, q, big + 1, &out) == RT_ETOOLONG);
    CHECK(rt_match_dir(m, "#", 1, (rt_direction)7, &out) == RT_EINVAL);
    CHECK(rt_match(m, NULL, 1, &out) == RT_EINVAL);
    CHECK(rt_match(NULL, "#", 1, &out) == RT_EINVAL);
    CHECK(out.len == 0);
    t0 = clock();
    n = rt_match(m, "#.#.#.#.#.#", 11, &out);
    CHECK((size_t)n == rt_count(m));
    out.len = 0;
    n = rt_match(m, "#.*.#.*.#.*.#.*.#.*.#", 21, &out);
    CHECK(n == 0); /* every key has four words */
    n = rt_match(m, "#.x1.#.y1.#.z1.#", 16, &out);
    CHECK(n == 1);
    out.len = 0;
    /* 32768 '*' (65535 bytes) and 32768 '#' (65535 bytes). */
    for (i = 0; i < big - 1; i++)
        q[i] = i % 2 ? '.' : '*';
    CHECK(rt_match(m, q, big - 1, &out) == 0);
    for (i = 0; i < big - 1; i++)
        q[i] = i % 2 ? '.' : '#';
    CHECK((size_t)rt_match(m, q, big - 1, &out) == rt_count(m));
    out.len = 0;
    memset(q, '.', big); /* 65537 empty words */
    CHECK(rt_match(m, q, big, &out) == 0);
    CHECK(((double)(clock() - t0)) / CLOCKS_PER_SEC < 5.0);

    /* Forward: many '#' in one binding, long concrete queries. */
    add(f, "#.#.#.#.#.#.#.#");
    add(f, "#.a.#.a.#.a.#");
    add(f, "#.*.#.*");
    t0 = clock();
    for (i = 0; i < big - 1; i++)
        q[i] = i % 2 ? '.' : 'a';
    n = rt_match(f, q, big - 1, &out);
    CHECK(n == 3);
    out.len = 0;
    memset(q, '.', big);
    n = rt_match(f, q, big, &out);
    CHECK(n == 2);
    CHECK(((double)(clock() - t0)) / CLOCKS_PER_SEC < 5.0);
    rt_ids_free(&out);
    free(q);
    rt_matcher_free(m);
    rt_matcher_free(f);
}

TEST(test_bad_arguments)
{
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    uint32_t id;
    rt_ids out;
    size_t offs[2] = {0, 1}, res[2];
    rt_ids_init(&out);
    CHECK(rt_matcher_new((rt_kind)5) == NULL);
    CHECK(rt_add(NULL, "a", 1, &id) == RT_EINVAL);
    CHECK(rt_add(m, NULL, 1, &id) == RT_EINVAL);
    CHECK(rt_add(m, NULL, 0, NULL) == 1); /* the empty key */
    CHECK(rt_remove(m, NULL, 0, NULL) == 1);
    CHECK(rt_find(m, "a", 1, NULL) == 0);
    CHECK(rt_remove(m, "a", 1, NULL) == 0);
    CHECK(rt_match_batch(NULL, "a", offs, 1, &out, res) == RT_EINVAL);
    CHECK(rt_match_union(m, "a", NULL, 1, &out) == RT_EINVAL);
    CHECK(rt_count(NULL) == 0 && rt_memory(NULL) == 0 && rt_id_limit(NULL) == 0);
    CHECK(rt_compact(NULL) == RT_EINVAL);
    CHECK(rt_matcher_kind(m) == RT_REVERSE);
    rt_matcher_free(NULL);
    rt_ids_free(&out);
    rt_matcher_free(m);
}

TEST(test_duplicates_and_removal_churn)
{
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    char key[64];
    uint32_t id, id2, ids[2000];
    size_t empty_mem = rt_memory(m), full_mem;
    int i, round;
    for (round = 0; round < 3; round++) {
        for (i = 0; i < 2000; i++) {
            snprintf(key, sizeof key, "k%d.%d.x", i % 37, i);
            CHECK(rt_add(m, key, strlen(key), &ids[i]) == 1);
            CHECK(ids[i] < 2000); /* dense: removed ids come back */
            CHECK(rt_add(m, key, strlen(key), &id) == 0 && id == ids[i]);
        }
        CHECK(rt_count(m) == 2000 && rt_id_limit(m) == 2000);
        full_mem = rt_memory(m);
        CHECK(full_mem > empty_mem);
        for (i = 0; i < 2000; i += 2) {
            snprintf(key, sizeof key, "k%d.%d.x", i % 37, i);
            CHECK(rt_remove(m, key, strlen(key), &id) == 1 && id == ids[i]);
            CHECK(rt_remove(m, key, strlen(key), &id) == 0);
            CHECK(rt_find(m, key, strlen(key), &id) == 0);
        }
        CHECK(rt_count(m) == 1000);
        /* A new key takes a freed id. */
        CHECK(rt_add(m, "fresh", 5, &id) == 1 && id < 2000 && id % 2 == 0);
        CHECK(rt_remove(m, "fresh", 5, &id2) == 1 && id2 == id);
        for (i = 1; i < 2000; i += 2) {
            snprintf(key, sizeof key, "k%d.%d.x", i % 37, i);
            CHECK(rt_find(m, key, strlen(key), &id) == 1 && id == ids[i]);
            CHECK(rt_remove(m, key, strlen(key), &id) == 1 && id == ids[i]);
        }
        CHECK(rt_count(m) == 0);
        /* Everything freed: tries, words and tables give their memory back. */
        CHECK(rt_memory(m) < full_mem / 4);
        CHECK(rt_memory(m) <= empty_mem + 64 * 1024);
        EXPECT_NONE(m, "#");
    }
    rt_matcher_free(m);
}

TEST(test_prefix_removal_keeps_longer_keys)
{
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    uint32_t id;
    add(m, "a");
    add(m, "a.b");
    add(m, "a.b.c");
    CHECK(rt_remove(m, "a.b", 3, &id) == 1);
    EXPECT(m, "a.#", "a", "a.b.c");
    CHECK(rt_remove(m, "a.b.c", 5, &id) == 1);
    EXPECT(m, "#", "a");
    add(m, "a.b.c");
    CHECK(rt_remove(m, "a", 1, &id) == 1);
    EXPECT(m, "#", "a.b.c");
    EXPECT(m, "#.c", "a.b.c");
    add(m, "a.b");
    CHECK(rt_remove(m, "a.b.c", 5, &id) == 1);
    EXPECT(m, "#", "a.b");
    EXPECT(m, "*.b", "a.b");
    rt_matcher_free(m);
}

TEST(test_union_and_batch)
{
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    const char buf[] = "a.#" "#.b" "a.b" "zzz" "#";
    size_t offs[] = {0, 3, 6, 9, 12, 13}, res[6], i, j;
    rt_ids out;
    uint32_t ab, ac, cb;
    rt_ids_init(&out);
    ab = add(m, "a.b");
    ac = add(m, "a.c");
    cb = add(m, "c.b");
    add(m, "d");
    CHECK(rt_match_union(m, buf, offs, 3, &out) == 3);
    for (i = 0; i < out.len; i++)
        for (j = i + 1; j < out.len; j++)
            CHECK(out.ids[i] != out.ids[j]);
    CHECK((out.ids[0] == ab || out.ids[0] == ac) && (out.ids[2] == cb));
    out.len = 0;
    CHECK(rt_match_union(m, buf, offs, 5, &out) == 4);
    CHECK(rt_match_union(m, buf, offs, 5, &out) == 4); /* the seen-set was cleared */
    CHECK(rt_match_union(m, buf, offs, 0, &out) == 0);
    out.len = 0;
    CHECK(rt_match_batch(m, buf, offs, 5, &out, res) == RT_OK);
    CHECK(res[0] == 0 && res[1] == 2 && res[2] == 4 && res[3] == 5 && res[4] == 5);
    CHECK(res[5] == 9 && out.len == 9);
    CHECK(out.ids[4] == ab);
    /* A failing query fails the batch and leaves out as it was. */
    {
        size_t bad[] = {0, 3, 2};
        CHECK(rt_match_batch(m, buf, bad, 2, &out, res) == RT_EINVAL);
        CHECK(out.len == 9);
    }
    rt_ids_free(&out);
    rt_matcher_free(m);
}

TEST(test_forward_topic_semantics)
{
    rt_matcher *m = rt_matcher_new(RT_FORWARD);
    rt_ids out;
    uint32_t id;
    const char *bindings[] = {"#",     "a.#",   "#.a",   "a.*",   "*.*",   "a.#.b", "#.#",
                              "#.a.#", "*.#",   "#.*",   "a.b",   "",      "*",     "a..b",
                              "a.*.#", "#.#.a", "*.*.*", "a.#.#", "#.b.#.a"};
    const char *queries[] = {"", "a", "a.b", "b.a", "a.a.b", "a..b", "*", "#", "a.*", "x.y.z",
                             "b.x.a", "a.b.b.a"};
    size_t i, j, k, nb = sizeof bindings / sizeof *bindings;
    rt_ids_init(&out);
    CHECK(rt_matcher_kind(m) == RT_FORWARD);
    for (i = 0; i < nb; i++)
        add(m, bindings[i]);
    /* The classics. */
    CHECK(rt_match(m, "", 0, &out) == 3); /* "", "#", "#.#" */
    out.len = 0;
    for (j = 0; j < sizeof queries / sizeof *queries; j++) {
        size_t want = 0;
        out.len = 0;
        CHECK(rt_match(m, queries[j], strlen(queries[j]), &out) >= 0);
        for (i = 0; i < nb; i++) {
            int hit = 0;
            CHECK(rt_find(m, bindings[i], strlen(bindings[i]), &id) == 1);
            for (k = 0; k < out.len; k++)
                hit += out.ids[k] == id;
            CHECK(hit <= 1);
            if (hit != brute_match(RT_FORWARD, bindings[i], queries[j])) {
                fprintf(stderr, "forward: binding '%s' query '%s'\n", bindings[i], queries[j]);
                CHECK(0);
            }
            want += hit;
        }
        CHECK(want == out.len);
    }
    /* "a" is matched by "#", "a.#", "#.a", "#.#", "#.a.#", "*.#", "#.*", "*", "#.#.a",
     * "a.#.#": ten. */
    out.len = 0;
    CHECK(rt_match(m, "a", 1, &out) == 10);
    rt_ids_free(&out);
    rt_matcher_free(m);
}

/* ------------------------------------------------------------- randomized differential */

static const char *const vocab[] = {"a", "b", "c", "", "*", "#", "ab", "\xc3\xa9t\xc3\xa9"};
#define NVOCAB 8

static void random_key(char *buf, int maxw, int query, rt_kind kind)
{
    int n = (int)rnd((uint32_t)maxw + 1), i;
    buf[0] = 0;
    for (i = 0; i < n; i++) {
        const char *w;
        uint32_t r = rnd(NVOCAB + 1);
        if (r == NVOCAB)
            w = query ? "zz" : "b";
        else
            w = vocab[r];
        /* Wildcards are likelier where they mean something. */
        if ((kind == RT_REVERSE) == (query != 0) && rnd(3) == 0)
            w = rnd(2) ? "*" : "#";
        if (i)
            strcat(buf, ".");
        strcat(buf, w);
    }
}

#define POOL 400

/* A pool of random keys; equal keys share the entry of their first occurrence (rep). */
typedef struct {
    char key[64];
    int rep;
    int live;
    uint32_t id;
} entry;

static void check_query(rt_matcher *m, rt_kind kind, const entry *pool, const char *q)
{
    static uint32_t got[POOL + 1];
    uint32_t want[POOL];
    size_t nw = 0, ng, i;
    int d;
    for (i = 0; i < POOL; i++)
        if (pool[i].live && brute_match(kind, pool[i].key, q))
            want[nw++] = pool[i].id;
    qsort(want, nw, sizeof *want, cmp_u32);
    for (d = 0; d < (kind == RT_REVERSE ? 3 : 1); d++) {
        ng = query(m, q, (rt_direction)d, got, POOL + 1);
        if (ng != nw || memcmp(got, want, nw * sizeof *got) != 0) {
            fprintf(stderr, "kind %d dir %d query '%s': %zu results, brute force %zu\n", kind,
                    d, q, ng, nw);
            CHECK(0);
        }
    }
}

static void check_union(rt_matcher *m, rt_kind kind, const entry *pool, int maxw)
{
    char buf[1024], one[256];
    size_t offs[5], n = 0, k, x;
    rt_ids out;
    int i;
    offs[0] = 0;
    for (k = 0; k < 4; k++) {
        random_key(one, maxw, 1, kind);
        memcpy(buf + offs[k], one, strlen(one));
        offs[k + 1] = offs[k] + strlen(one);
    }
    rt_ids_init(&out);
    CHECK(rt_match_union(m, buf, offs, 4, &out) >= 0);
    for (i = 0; i < POOL; i++) {
        int any = 0, hits = 0;
        if (!pool[i].live)
            continue;
        for (k = 0; k < 4; k++) {
            memcpy(one, buf + offs[k], offs[k + 1] - offs[k]);
            one[offs[k + 1] - offs[k]] = 0;
            any |= brute_match(kind, pool[i].key, one);
        }
        for (x = 0; x < out.len; x++)
            hits += out.ids[x] == pool[i].id;
        CHECK(hits == any);
        n += (size_t)any;
    }
    CHECK(n == out.len);
    rt_ids_free(&out);
}

/* Adds and removes random keys, checking every answer against the brute force. With
 * fail_every, every so often an allocation fails: the call must report RT_ENOMEM and the
 * matcher must stay as if the call had not happened (removal cannot fail). */
static void differential(rt_kind kind, int steps, int maxw, int fail_every)
{
    rt_matcher *m = rt_matcher_new(kind);
    static entry pool[POOL];
    char q[256];
    int step, i, j;
    size_t live = 0;
    memset(pool, 0, sizeof pool);
    for (i = 0; i < POOL; i++) {
        random_key(pool[i].key, maxw, 0, kind);
        for (j = 0; j < i && strcmp(pool[j].key, pool[i].key) != 0; j++)
            ;
        pool[i].rep = j;
    }
    for (step = 0; step < steps; step++) {
        entry *e = &pool[pool[rnd(POOL)].rep];
        uint32_t id;
        int rc;
        if (fail_every && rnd((uint32_t)fail_every) == 0)
            fi_countdown = (long)rnd(4);
        if (rnd(3) != 0) {
            rc = rt_add(m, e->key, strlen(e->key), &id);
            fi_countdown = -1;
            if (rc == RT_ENOMEM) {
                CHECK(!e->live && rt_find(m, e->key, strlen(e->key), &id) == 0);
            } else {
                CHECK(rc == (e->live ? 0 : 1));
                CHECK(!e->live || id == e->id);
                CHECK(id < rt_id_limit(m));
                live += !e->live;
                e->live = 1;
                e->id = id;
            }
        } else {
            rc = rt_remove(m, e->key, strlen(e->key), &id);
            fi_countdown = -1;
            CHECK(rc == (e->live ? 1 : 0));
            CHECK(!e->live || id == e->id);
            live -= (size_t)e->live;
            e->live = 0;
        }
        CHECK(rt_count(m) == live);
        for (i = 0; i < 3; i++) {
            random_key(q, maxw + 2, 1, kind);
            if (fail_every && rnd((uint32_t)fail_every) == 0) {
                rt_ids out;
                long n;
                rt_ids_init(&out);
                fi_countdown = (long)rnd(3);
                n = rt_match(m, q, strlen(q), &out);
                fi_countdown = -1;
                CHECK(n >= 0 || (n == RT_ENOMEM && out.len == 0));
                rt_ids_free(&out);
            }
            check_query(m, kind, pool, q);
        }
        if (step % 97 == 0 && rnd(2) == 0) {
            fi_countdown = fail_every ? (long)rnd(6) : -1;
            rc = rt_compact(m);
            fi_countdown = -1;
            CHECK(rc == RT_OK || rc == RT_ENOMEM);
        }
        if (step % 53 == 0)
            check_union(m, kind, pool, maxw + 1);
    }
    for (i = 0; i < POOL; i++)
        if (pool[i].live) {
            uint32_t id;
            CHECK(rt_remove(m, pool[i].key, strlen(pool[i].key), &id) == 1);
            CHECK(id == pool[i].id);
            pool[i].live = 0;
        }
    CHECK(rt_count(m) == 0);
    check_query(m, kind, pool, "#");
    rt_matcher_free(m);
}

TEST(test_differential_reverse)
{
    differential(RT_REVERSE, quick ? 1500 : 20000, 5, 0);
}

TEST(test_differential_forward)
{
    differential(RT_FORWARD, quick ? 1500 : 20000, 5, 0);
}

TEST(test_differential_long_keys)
{
    differential(RT_REVERSE, quick ? 500 : 5000, 9, 0);
    differential(RT_FORWARD, quick ? 500 : 5000, 9, 0);
}

TEST(test_allocation_failures_leave_matcher_consistent)
{
    unsigned long before = fi_failures;
    differential(RT_REVERSE, quick ? 1500 : 10000, 5, 4);
    differential(RT_FORWARD, quick ? 1500 : 10000, 5, 4);
    CHECK(fi_failures > before);
}

TEST(test_large_fanout_and_compaction)
{
    /* More than 128 kids per node: large kid blocks, growth and shrink through all sizes. */
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    char key[64];
    uint32_t id;
    rt_ids out;
    int i, n = quick ? 3000 : 20000;
    rt_ids_init(&out);
    for (i = 0; i < n; i++) {
        snprintf(key, sizeof key, "%d.x.%d", i, i % 300);
        add(m, key);
    }
    /* The NFA walk first, then a wide breadth-first walk through the same scratch queue. */
    CHECK(rt_match_dir(m, "#.x.7", 5, RT_DIR_FORWARD, &out) == n / 300 + (n % 300 > 7));
    out.len = 0;
    CHECK(rt_match(m, "#", 1, &out) == n);
    qsort(out.ids, out.len, sizeof *out.ids, cmp_u32);
    for (i = 0; i < n; i++)
        CHECK(out.ids[i] == (uint32_t)i);
    out.len = 0;
    CHECK(rt_match(m, "*.x.7", 5, &out) == n / 300 + (n % 300 > 7));
    out.len = 0;
    CHECK(rt_compact(m) == RT_OK);
    CHECK(rt_match(m, "#.7", 3, &out) == n / 300 + (n % 300 > 7));
    out.len = 0;
    for (i = 0; i < n; i += 3) {
        snprintf(key, sizeof key, "%d.x.%d", i, i % 300);
        CHECK(rt_remove(m, key, strlen(key), &id) == 1);
    }
    CHECK(rt_match(m, "#", 1, &out) == (long)rt_count(m));
    out.len = 0;
    CHECK(rt_match(m, "1.x.1", 5, &out) == 1);
    rt_ids_free(&out);
    rt_matcher_free(m);
}

/* Thousands of bindings: the breadth-first queues wrap around and grow, mid-walk. */
TEST(test_differential_many_bindings)
{
    static const char *const small[] = {"a", "b", "c", "d"};
    rt_kind kinds[2] = {RT_REVERSE, RT_FORWARD};
    int nkeys = quick ? 1500 : 6000, nq = quick ? 60 : 300, kk;
    char(*keys)[40] = malloc((size_t)nkeys * 40);
    uint32_t *ids = malloc((size_t)nkeys * sizeof *ids), *want = malloc((size_t)nkeys * 4);
    uint32_t *got = malloc(((size_t)nkeys + 1) * sizeof *got);
    for (kk = 0; kk < 2; kk++) {
        rt_kind kind = kinds[kk];
        rt_matcher *m = rt_matcher_new(kind);
        int i, j, n = 0, d;
        for (i = 0; i < nkeys; i++) {
            int w, nw = (int)rnd(8);
            keys[n][0] = 0;
            for (w = 0; w < nw; w++) {
                const char *word = small[rnd(4)];
                if (kind == RT_FORWARD && rnd(6) == 0)
                    word = rnd(2) ? "*" : "#";
                if (w)
                    strcat(keys[n], ".");
                strcat(keys[n], word);
            }
            if (rt_add(m, keys[n], strlen(keys[n]), &ids[n]) == 1)
                n++;
        }
        for (j = 0; j < nq; j++) {
            char q[64];
            size_t nw = 0, ng;
            int w, qn = (int)rnd(7);
            q[0] = 0;
            for (w = 0; w < qn; w++) {
                const char *word = small[rnd(4)];
                if (kind == RT_REVERSE && rnd(3) == 0)
                    word = rnd(2) ? "*" : "#";
                if (w)
                    strcat(q, ".");
                strcat(q, word);
            }
            for (i = 0; i < n; i++)
                if (brute_match(kind, keys[i], q))
                    want[nw++] = ids[i];
            qsort(want, nw, sizeof *want, cmp_u32);
            for (d = 0; d < (kind == RT_REVERSE ? 3 : 1); d++) {
                ng = query(m, q, (rt_direction)d, got, (size_t)nkeys + 1);
                CHECK(ng == nw && memcmp(got, want, nw * sizeof *got) == 0);
            }
        }
        rt_matcher_free(m);
    }
    free(keys);
    free(ids);
    free(want);
    free(got);
}

TEST(test_ids_sort)
{
    size_t sizes[] = {0, 1, 2, 63, 64, 65, 1000, 70000};
    size_t k, i;
    unsigned seed = 12345;
    for (k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        rt_ids ids;
        uint64_t sum = 0, sorted_sum = 0;
        rt_ids_init(&ids);
        CHECK(rt_ids_reserve(&ids, sizes[k] + 3) == RT_OK);
        ids.ids[0] = 7; /* outside the sorted range: must stay put */
        for (i = 1; i <= sizes[k]; i++) {
            seed = seed * 1103515245u + 12345u;
            ids.ids[i] = (k % 2) ? seed : seed % 5000u; /* wide and narrow id ranges */
            sum += ids.ids[i];
        }
        ids.ids[sizes[k] + 1] = 3;
        ids.len = sizes[k] + 2;
        CHECK(rt_ids_sort(&ids, 1, sizes[k] + 1) == RT_OK);
        CHECK(ids.ids[0] == 7 && ids.ids[sizes[k] + 1] == 3);
        for (i = 1; i <= sizes[k]; i++) {
            sorted_sum += ids.ids[i];
            if (i > 1)
                CHECK(ids.ids[i - 1] <= ids.ids[i]);
        }
        CHECK(sum == sorted_sum);
        CHECK(rt_ids_sort(&ids, 2, 1) == RT_EINVAL);
        rt_ids_free(&ids);
    }
}

int main(int argc, char **argv)
{
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    RUN(test_rtopic_plugin_readme_examples);
    RUN(test_hash_matches_zero_words);
    RUN(test_empty_key_and_empty_words);
    RUN(test_wildcards_in_a_binding_are_literal_words);
    RUN(test_key_length_limits);
    RUN(test_hostile_queries);
    RUN(test_bad_arguments);
    RUN(test_duplicates_and_removal_churn);
    RUN(test_prefix_removal_keeps_longer_keys);
    RUN(test_union_and_batch);
    RUN(test_forward_topic_semantics);
    RUN(test_differential_reverse);
    RUN(test_differential_forward);
    RUN(test_differential_long_keys);
    RUN(test_differential_many_bindings);
    RUN(test_allocation_failures_leave_matcher_consistent);
    RUN(test_large_fanout_and_compaction);
    RUN(test_ids_sort);
    printf("all %u tests passed (%s)\n", tests_run, quick ? "quick" : "full");
    return 0;
}
