/*
 * Tests of the delivery planner (reach.h) against a brute force: random binding tables over a
 * small vocabulary and few destinations, random queries with wildcards, churn, and allocation
 * failures. `./test_reach [--quick]`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ids.h"
#include "reach.h"
#include "rtroute.h"
#include "test_support.h"

#define NKEYS 48  /* distinct binding keys the random tables draw from */
#define NDESTS 12 /* destinations */

static int quick;
static unsigned tests_run;
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
    return rt_test_rnd(&rng_state, n);
}

#define TEST(name) static void name(void)
#define RUN(name)                                                                              \
    do {                                                                                       \
        name();                                                                                \
        tests_run++;                                                                           \
        printf("ok  %s\n", #name);                                                             \
    } while (0)

/* One table: the matcher, the planner's index, and the brute force's own matrix. */
typedef struct {
    rt_matcher *m;
    rt_reach *r;
    char keys[NKEYS][16];
    uint32_t id[NKEYS];            /* the matcher's id of keys[i], while bound */
    unsigned char bound[NKEYS][NDESTS];
} table;

static const char *const words[] = {"a", "b", "c", "d"};

static void random_key(char *out, size_t room, int max_words)
{
    int n = 1 + (int)rnd((uint32_t)max_words), i;
    out[0] = '\0';
    for (i = 0; i < n; i++) {
        if (i)
            strncat(out, ".", room - strlen(out) - 1);
        strncat(out, words[rnd(4)], room - strlen(out) - 1);
    }
}

static void table_init(table *t)
{
    int i;
    t->m = rt_matcher_new(RT_REVERSE);
    t->r = rt_reach_new();
    CHECK(t->m && t->r);
    memset(t->bound, 0, sizeof t->bound);
    for (i = 0; i < NKEYS; i++) {
        int j, fresh;
        do { /* distinct keys */
            random_key(t->keys[i], sizeof t->keys[i], 3);
            fresh = 1;
            for (j = 0; j < i; j++)
                fresh = fresh && strcmp(t->keys[i], t->keys[j]) != 0;
        } while (!fresh);
    }
}

static void table_free(table *t)
{
    rt_reach_free(t->r);
    rt_matcher_free(t->m);
}

static int key_bound(const table *t, int k)
{
    int d;
    for (d = 0; d < NDESTS; d++)
        if (t->bound[k][d])
            return 1;
    return 0;
}

/* rt_reach_dests of key k lists exactly its destinations in the matrix. */
static void check_dests(table *t, int k)
{
    rt_ids out;
    size_t i;
    int d, n = 0;
    if (!key_bound(t, k))
        return;
    rt_ids_init(&out);
    out.len = 0;
    CHECK(rt_ids_push(&out, 0xFFFFFFFFu) == RT_OK); /* what it held stays first */
    for (d = 0; d < NDESTS; d++)
        n += t->bound[k][d];
    CHECK(rt_reach_dests(t->r, t->id[k], &out) == n && out.len == (size_t)n + 1);
    CHECK(out.ids[0] == 0xFFFFFFFFu);
    for (i = 1; i < out.len; i++)
        CHECK(out.ids[i] < NDESTS && t->bound[k][out.ids[i]]);
    rt_ids_free(&out);
}

/* Binds or unbinds (key k, destination d) in both the native table and the matrix. */
static void toggle(table *t, int k, int d)
{
    uint32_t id;
    if (t->bound[k][d]) {
        t->bound[k][d] = 0;
        CHECK(rt_reach_remove(t->r, t->id[k], (uint32_t)d) == 1);
        if (!key_bound(t, k)) {
            CHECK(rt_remove(t->m, t->keys[k], strlen(t->keys[k]), &id) == 1);
            CHECK(id == t->id[k]);
        }
        check_dests(t, k);
        return;
    }
    if (!key_bound(t, k))
        CHECK(rt_add(t->m, t->keys[k], strlen(t->keys[k]), &t->id[k]) == 1);
    t->bound[k][d] = 1;
    CHECK(rt_reach_add(t->r, t->id[k], (uint32_t)d) == 1);
    CHECK(rt_reach_add(t->r, t->id[k], (uint32_t)d) == 0);
    check_dests(t, k);
}

static int key_of_id(const table *t, uint32_t id)
{
    int k;
    for (k = 0; k < NKEYS; k++)
        if (key_bound(t, k) && t->id[k] == id)
            return k;
    CHECK(!"an id of no bound key");
    return -1;
}

/* Plans the queries q[0..n) (the first n_literal literal) and checks the plan against the
 * brute force: every key chosen reaches only matched destinations; the chosen keys and the
 * literal ones reach every matched destination; no key is chosen that adds nothing. */
static void check_plan(table *t, const char *const *q, size_t n, size_t n_literal)
{
    char buf[512];
    size_t offs[8], i, pos = 0;
    unsigned char matched_dest[NDESTS] = {0}, covered[NDESTS] = {0};
    rt_ids out, matched;
    rt_plan_stats stats;
    long got;
    int d, n_dests = 0, n_skipped = 0;
    CHECK(n < 8);
    offs[0] = 0;
    for (i = 0; i < n; i++) {
        memcpy(buf + pos, q[i], strlen(q[i]));
        pos += strlen(q[i]);
        offs[i + 1] = pos;
    }
    rt_ids_init(&out);
    rt_ids_init(&matched);
    got = rt_plan(t->m, t->r, buf, offs, n, n_literal, &out, &matched, &stats);
    CHECK(got >= 0 && (size_t)got == out.len);
    CHECK(stats.matched == matched.len);
    for (i = 0; i < matched.len; i++)
        for (d = 0; d < NDESTS; d++)
            matched_dest[d] |= t->bound[key_of_id(t, matched.ids[i])][d];
    for (i = 0; i < n_literal; i++) {
        int k;
        for (k = 0; k < NKEYS; k++)
            if (key_bound(t, k) && strcmp(t->keys[k], q[i]) == 0)
                for (d = 0; d < NDESTS; d++)
                    covered[d] |= t->bound[k][d];
    }
    for (d = 0; d < NDESTS; d++) {
        n_dests += matched_dest[d];
        CHECK(!covered[d] || matched_dest[d]); /* a literal key is matched by itself */
        n_skipped += covered[d];
    }
    CHECK(stats.destinations == (size_t)n_dests && stats.skipped == (size_t)n_skipped);
    for (i = 0; i < out.len; i++) {
        int k = key_of_id(t, out.ids[i]), adds = 0;
        for (d = 0; d < NDESTS; d++) {
            if (!t->bound[k][d])
                continue;
            CHECK(matched_dest[d]); /* nothing outside the matched destinations */
            adds += !covered[d];
            covered[d] = 1;
        }
        CHECK(adds > 0);
    }
    for (d = 0; d < NDESTS; d++)
        CHECK(covered[d] == matched_dest[d]);
    CHECK(out.len <= (size_t)(n_dests - n_skipped));
    rt_ids_free(&out);
    rt_ids_free(&matched);
}

static void random_query(char *out, size_t room)
{
    int n = 1 + (int)rnd(3), i;
    static const char *const qwords[] = {"a", "b", "c", "d", "*", "#"};
    out[0] = '\0';
    for (i = 0; i < n; i++) {
        if (i)
            strncat(out, ".", room - strlen(out) - 1);
        strncat(out, qwords[rnd(6)], room - strlen(out) - 1);
    }
}

TEST(test_one_key_per_destination)
{
    /* q1 by "a.b" and "a.c" (its own keys); q2 and q3 by "a.d" only; q3 also by "b" */
    table t;
    const char *hash[] = {"#"}, *ab[] = {"a.*"}, *literal[] = {"a.b", "a.*"};
    rt_ids out;
    rt_plan_stats stats;
    size_t offs[2] = {0, 3};
    table_init(&t);
    strcpy(t.keys[0], "a.b");
    strcpy(t.keys[1], "a.c");
    strcpy(t.keys[2], "a.d");
    strcpy(t.keys[3], "b");
    toggle(&t, 0, 1);
    toggle(&t, 1, 1);
    toggle(&t, 2, 2);
    toggle(&t, 2, 3);
    toggle(&t, 3, 3);
    check_plan(&t, hash, 1, 0);
    check_plan(&t, ab, 1, 0);
    check_plan(&t, ab, 1, 1);
    check_plan(&t, literal, 2, 1);
    rt_ids_init(&out);
    /* "a.*": q1 by one of its own keys, q2 and q3 by the one key they share: two keys, not 3 */
    CHECK(rt_plan(t.m, t.r, "a.*", offs, 1, 0, &out, NULL, &stats) == 2);
    CHECK(stats.matched == 3 && stats.destinations == 3 && stats.skipped == 0);
    CHECK(out.ids[0] == t.id[2]);
    CHECK(out.ids[1] == t.id[0] || out.ids[1] == t.id[1]);
    rt_ids_free(&out);
    table_free(&t);
}

TEST(test_random_tables_and_churn)
{
    int round, rounds = quick ? 40 : 400;
    for (round = 0; round < rounds; round++) {
        table t;
        int step;
        table_init(&t);
        for (step = 0; step < 200; step++) {
            char q[3][32];
            const char *qs[3] = {q[0], q[1], q[2]};
            size_t n = 1 + rnd(3), i;
            toggle(&t, (int)rnd(NKEYS), (int)rnd(NDESTS));
            if (step % 4)
                continue;
            for (i = 0; i < n; i++) {
                if (rnd(3) == 0)
                    random_key(q[i], sizeof q[i], 3); /* a literal, maybe bound */
                else
                    random_query(q[i], sizeof q[i]);
            }
            check_plan(&t, qs, n, rnd((uint32_t)n + 1));
        }
        table_free(&t);
    }
}

TEST(test_allocation_failures_leave_the_index_consistent)
{
    int round, rounds = quick ? 30 : 300;
    for (round = 0; round < rounds; round++) {
        table t;
        int step;
        table_init(&t);
        for (step = 0; step < 60; step++) {
            int k = (int)rnd(NKEYS), d = (int)rnd(NDESTS + 40); /* some far destination ids */
            const char *hash[] = {"#"};
            long rc;
            char buf[8] = "#";
            size_t offs[2] = {0, 1};
            rt_ids out;
            rt_plan_stats stats;
            if (d < NDESTS) {
                toggle(&t, k, d);
            } else if (key_bound(&t, k)) {
                /* a destination the matrix does not follow: add and remove under failures */
                fi_countdown = (long)rnd(3);
                rc = rt_reach_add(t.r, t.id[k], (uint32_t)d);
                fi_countdown = -1;
                CHECK(rc == 1 || rc == RT_ENOMEM);
                if (rc == 1)
                    CHECK(rt_reach_remove(t.r, t.id[k], (uint32_t)d) == 1);
                CHECK(rt_reach_remove(t.r, t.id[k], (uint32_t)d) == 0);
            }
            rt_ids_init(&out);
            fi_countdown = (long)rnd(3);
            rc = rt_plan(t.m, t.r, buf, offs, 1, 0, &out, NULL, &stats);
            fi_countdown = -1;
            CHECK(rc >= 0 || (rc == RT_ENOMEM && out.len == 0));
            rt_ids_free(&out);
            check_plan(&t, hash, 1, 0); /* no failure: the same index plans right */
        }
        table_free(&t);
    }
}

TEST(test_bad_arguments)
{
    rt_ids out;
    rt_plan_stats stats;
    size_t offs[2] = {0, 1};
    rt_matcher *m = rt_matcher_new(RT_REVERSE);
    rt_reach *r = rt_reach_new();
    rt_ids_init(&out);
    CHECK(rt_plan(NULL, r, "#", offs, 1, 0, &out, NULL, &stats) == RT_EINVAL);
    CHECK(rt_plan(m, NULL, "#", offs, 1, 0, &out, NULL, &stats) == RT_EINVAL);
    CHECK(rt_plan(m, r, "#", offs, 1, 2, &out, NULL, &stats) == RT_EINVAL);
    CHECK(rt_plan(m, r, "#", offs, 1, 0, &out, NULL, &stats) == 0);
    CHECK(rt_reach_remove(r, 1000, 5) == 0 && rt_reach_count(r, 1000) == 0);
    CHECK(rt_reach_add(NULL, 0, 0) == RT_EINVAL);
    CHECK(rt_reach_memory(r) > 0 && rt_reach_memory(NULL) == 0);
    rt_reach_free(r);
    rt_reach_free(NULL);
    rt_matcher_free(m);
    rt_ids_free(&out);
}

int main(int argc, char **argv)
{
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    RUN(test_one_key_per_destination);
    RUN(test_random_tables_and_churn);
    RUN(test_allocation_failures_leave_the_index_consistent);
    RUN(test_bad_arguments);
    printf("all %u tests passed (%s)\n", tests_run, quick ? "quick" : "full");
    return 0;
}
