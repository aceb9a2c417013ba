/*
 * A byte buffer the C test drivers build frames in (test code only, never built into the
 * extension): big-endian puts, each checked against the buffer's room.
 */
#ifndef RT_TEST_BUFFER_H
#define RT_TEST_BUFFER_H

#include <stdint.h>
#include <string.h>

#include "test_support.h"

typedef struct {
    uint8_t data[1 << 16];
    size_t len;
} buffer;

static inline void put(buffer *b, const void *p, size_t n)
{
    CHECK(b->len + n <= sizeof b->data);
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static inline void put_u8(buffer *b, unsigned v)
{
    uint8_t x = (uint8_t)v;
    put(b, &x, 1);
}

static inline void put_u16(buffer *b, unsigned v)
{
    put_u8(b, v >> 8);
    put_u8(b, v & 0xFF);
}

static inline void put_u32(buffer *b, uint32_t v)
{
    put_u16(b, v >> 16);
    put_u16(b, v & 0xFFFF);
}

#endif
