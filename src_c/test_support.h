/*
 * What the C test drivers share (test code only, never built into the extension): a check
 * that aborts with its place, and a small deterministic generator for the random cases.
 */
#ifndef RT_TEST_SUPPORT_H
#define RT_TEST_SUPPORT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                                            \
    do {                                                                                       \
        if (!(cond)) {                                                                         \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                           \
        }                                                                                      \
    } while (0)

/* A number below n (n > 0) from *state, which it advances (xorshift64; each driver seeds its
 * own state, so its random cases are the same on every run). */
static inline uint32_t rt_test_rnd(uint64_t *state, uint32_t n)
{
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    return (uint32_t)(*state % n);
}

#ifdef RT_FAULT_INJECTION
/* Allocation fault injection (see alloc.h): a driver built with -DRT_FAULT_INJECTION sets
 * fi_countdown to make the allocation that many ahead fail. One driver per program. */

static long fi_countdown = -1; /* the allocation that fails: 0 = the next one; -1 = none */
static unsigned long fi_failures;

static int fi_fail(void)
{
    if (fi_countdown < 0)
        return 0;
    if (fi_countdown-- == 0) {
        fi_failures++;
        return 1;
    }
    return 0;
}

void *rt_fi_malloc(size_t size)
{
    return fi_fail() ? NULL : malloc(size);
}

void *rt_fi_calloc(size_t n, size_t size)
{
    return fi_fail() ? NULL : calloc(n, size);
}

void *rt_fi_realloc(void *p, size_t size)
{
    return fi_fail() ? NULL : realloc(p, size);
}
#endif

#endif
