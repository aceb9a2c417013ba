/* AMQP 1.0 messages of a stream chunk in their common shape: see amqp10.h. */
#include "amqp10.h"

#include <string.h>

#define SMALLULONG 0x53u
#define SECTION_HEADER 0x70u
#define SECTION_ANNOTATIONS 0x72u
#define SECTION_DATA 0x75u
#define HEADER_FIELDS 5u

static uint32_t u32_at(const uint8_t *d)
{
    return (uint32_t)d[0] << 24 | (uint32_t)d[1] << 16 | (uint32_t)d[2] << 8 | (uint32_t)d[3];
}

/* A compound's (list or map) item count and where its first item starts: the constructor at
 * d[at] must be `code8` (one-byte size and count) or `code32` (four-byte ones); an empty
 * list constructor (0x45) is accepted when `empty` is set. Returns 0 when it is none of them
 * or runs past len. The declared size is not used: the items say where the compound ends,
 * as for the full decoder. */
static int compound(const uint8_t *d, size_t len, size_t at, uint8_t code8, uint8_t code32,
                    int empty, size_t *count, size_t *first)
{
    if (at >= len)
        return 0;
    if (d[at] == code8) {
        if (len - at < 3)
            return 0;
        *count = d[at + 2];
        *first = at + 3;
        return 1;
    }
    if (d[at] == code32) {
        if (len - at < 9)
            return 0;
        *count = u32_at(d + at + 5);
        *first = at + 9;
        return 1;
    }
    if (empty && d[at] == 0x45u) {
        *count = 0;
        *first = at + 1;
        return 1;
    }
    return 0;
}

/* A string or symbol (str8, sym8, str32, sym32) at d[at]: its bytes, and where it ends
 * (0 when it is not one or runs past len). */
static size_t text(const uint8_t *d, size_t len, size_t at, rt_bytes *out)
{
    size_t n;
    if (at >= len)
        return 0;
    if (d[at] == 0xA1u || d[at] == 0xA3u) {
        if (len - at < 2)
            return 0;
        n = d[at + 1];
        at += 2;
    } else if (d[at] == 0xB1u || d[at] == 0xB3u) {
        if (len - at < 5)
            return 0;
        n = u32_at(d + at + 1);
        at += 5;
    } else {
        return 0;
    }
    if (n > len - at)
        return 0;
    out->at = at;
    out->len = n;
    return at + n;
}

static int same(const uint8_t *d, const rt_bytes *b, const char *word)
{
    size_t n = strlen(word);
    return b->len == n && memcmp(d + b->at, word, n) == 0;
}

/* The header list at d[at]: its first five fields, each null or its plain type. Returns
 * where it ends, or 0. */
static size_t header(const uint8_t *d, size_t len, size_t at, rt_amqp10_common *out)
{
    size_t count, i, first;
    if (!compound(d, len, at, 0xC0u, 0xD0u, 1, &count, &first) || count > HEADER_FIELDS)
        return 0;
    out->durable = RT_AMQP10_ABSENT;
    out->priority = RT_AMQP10_ABSENT;
    out->ttl = RT_AMQP10_ABSENT;
    at = first;
    for (i = 0; i < count; i++) {
        uint8_t code;
        int64_t number = RT_AMQP10_ABSENT;
        if (at >= len)
            return 0;
        code = d[at++];
        if (code != 0x40u) {
            if (i == 0 || i == 3) {  /* durable, first-acquirer: bool */
                if (code == 0x41u || code == 0x42u) {
                    number = code == 0x41u;
                } else if (code == 0x56u && at < len) {
                    number = d[at++] != 0;
                } else {
                    return 0;
                }
            } else if (i == 1) {     /* priority: ubyte */
                if (code != 0x50u || at >= len)
                    return 0;
                number = d[at++];
            } else {                 /* ttl, delivery-count: uint */
                if (code == 0x43u) {
                    number = 0;
                } else if (code == 0x52u && at < len) {
                    number = d[at++];
                } else if (code == 0x70u && len - at >= 4) {
                    number = u32_at(d + at);
                    at += 4;
                } else {
                    return 0;
                }
            }
        }
        if (i == 0)
            out->durable = (int)number;
        else if (i == 1)
            out->priority = (int)number;
        else if (i == 2)
            out->ttl = number;
    }
    return at;
}

/* The message annotations map at d[at], holding only x-routing-key and x-exchange with
 * string values. Returns where it ends, or 0. */
static size_t annotations(const uint8_t *d, size_t len, size_t at, rt_amqp10_common *out)
{
    size_t count, i, first;
    if (!compound(d, len, at, 0xC1u, 0xD1u, 0, &count, &first) || count % 2)
        return 0;
    out->has_routing_key = out->has_exchange = 0;
    at = first;
    for (i = 0; i < count; i += 2) {
        rt_bytes key, value;
        at = text(d, len, at, &key);
        if (!at)
            return 0;
        at = text(d, len, at, &value);
        if (!at)
            return 0;
        if (same(d, &key, "x-routing-key")) {
            out->routing_key = value;
            out->has_routing_key = 1;
        } else if (same(d, &key, "x-exchange")) {
            out->exchange = value;
            out->has_exchange = 1;
        } else {
            return 0;
        }
    }
    return at;
}

int rt_amqp10_scan(const uint8_t *data, size_t len, rt_amqp10_common *out)
{
    size_t at = 0;
    int bodies = 0;
    memset(out, 0, sizeof(*out));
    out->durable = RT_AMQP10_ABSENT;
    out->priority = RT_AMQP10_ABSENT;
    out->ttl = RT_AMQP10_ABSENT;
    while (at < len) {
        uint8_t code;
        if (len - at < 3 || data[at] != 0x00u || data[at + 1] != SMALLULONG)
            return RT_AMQP10_GENERAL;
        code = data[at + 2];
        at += 3;
        if (code == SECTION_HEADER) {
            at = header(data, len, at, out);
        } else if (code == SECTION_ANNOTATIONS) {
            at = annotations(data, len, at, out);
        } else if (code == SECTION_DATA) {
            size_t n;
            if (++bodies > 1 || at >= len)
                return RT_AMQP10_GENERAL;
            if (data[at] == 0xA0u && len - at >= 2) {
                n = data[at + 1];
                at += 2;
            } else if (data[at] == 0xB0u && len - at >= 5) {
                n = u32_at(data + at + 1);
                at += 5;
            } else {
                return RT_AMQP10_GENERAL;
            }
            if (n > len - at)
                return RT_AMQP10_GENERAL;
            out->body.at = at;
            out->body.len = n;
            at += n;
        } else {
            return RT_AMQP10_GENERAL;
        }
        if (!at)
            return RT_AMQP10_GENERAL;
    }
    return RT_AMQP10_COMMON;
}

int rt_chunk_next(const uint8_t *data, rt_chunk_iter *it, rt_bytes *entry)
{
    size_t stop;
    uint32_t size;
    if (it->sub_end && it->at >= it->sub_end)
        it->sub_end = 0;
    while (!it->sub_end) {
        uint32_t length;
        if (it->at >= it->end)
            return RT_CHUNK_END;
        if (it->end - it->at < 4)
            return RT_CHUNK_TRUNCATED;
        if (!(data[it->at] & 0x80u))
            break;
        /* a sub-batch: flags, records (u16), uncompressed and data sizes (u32), entries */
        if (it->end - it->at < 11)
            return RT_CHUNK_TRUNCATED;
        if ((data[it->at] >> 4) & 0x7u)
            return RT_CHUNK_COMPRESSED;
        length = u32_at(data + it->at + 7);
        it->at += 11;
        if (length > it->end - it->at)
            return RT_CHUNK_TRUNCATED;
        if (length)
            it->sub_end = it->at + length;
    }
    stop = it->sub_end ? it->sub_end : it->end;
    if (stop - it->at < 4)
        return RT_CHUNK_TRUNCATED;
    size = u32_at(data + it->at);
    if (size > stop - it->at - 4)
        return RT_CHUNK_TRUNCATED;
    entry->at = it->at + 4;
    entry->len = size;
    it->at += 4 + (size_t)size;
    return RT_CHUNK_ENTRY;
}
