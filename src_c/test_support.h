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

#endif
