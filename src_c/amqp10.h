/*
 * AMQP 1.0 messages as a RabbitMQ stream stores them, for the stream reader: a chunk's
 * entries, and the fields of a message in its common shape, found without decoding the rest.
 *
 * Pure C99, no Python, no allocation, no state. Every result points into the caller's bytes.
 *
 * A chunk's data (the osiris chunk after its header) is a sequence of entries: a simple entry
 * is a u32 size (top bit clear) and that many bytes, one message; a sub-batch is a byte of
 * flags (top bit set, compression in bits 4-6), u16 records, u32 uncompressed and u32 data
 * sizes, then (uncompressed) simple entries filling the data size.
 *
 * A message is a sequence of sections, each a described value. rt_amqp10_scan reads one in
 * the COMMON SHAPE: every section's descriptor a smallulong 0x70-0x78; a header (list) whose
 * first five fields are null or their plain types (durable and first-acquirer bool, priority
 * ubyte, ttl and delivery-count uint); message annotations (map) holding only x-routing-key
 * and x-exchange, each a string or symbol, keys symbols or strings; at most one data section
 * (binary); delivery annotations and footer anywhere (skipped, well formed); no properties,
 * application properties, amqp-value or amqp-sequence. Anything else is GENERAL: the caller
 * decodes that message with its full decoder (which also reports malformed ones).
 */
#ifndef RT_AMQP10_H
#define RT_AMQP10_H

#include <stddef.h>
#include <stdint.h>

#define RT_AMQP10_ABSENT (-1)

/* bytes data[at..at+len) */
typedef struct {
    size_t at;
    size_t len;
} rt_bytes;

/* A message in the common shape. A field the message does not carry is RT_AMQP10_ABSENT
 * (the numbers) or has has_* == 0 (the strings); a message without a data section has an
 * empty body (at 0, len 0). When a section or entry is given twice, the last one counts. */
typedef struct {
    int has_routing_key, has_exchange;
    rt_bytes routing_key;  /* UTF-8 as stored (not checked) */
    rt_bytes exchange;
    rt_bytes body;
    int durable;           /* 0 or 1 */
    int priority;          /* 0-255 */
    int64_t ttl;           /* milliseconds, 0 to 2^32-1 */
} rt_amqp10_common;

enum {
    RT_AMQP10_COMMON = 1,  /* *out holds the message's fields */
    RT_AMQP10_GENERAL = 0  /* not the common shape (or malformed): *out is undefined */
};

/* Reads the message data[0..len); see the module comment. */
int rt_amqp10_scan(const uint8_t *data, size_t len, rt_amqp10_common *out);

/* Walking a chunk's entries: set at = 0, end = the data's length, sub_end = 0, then call
 * rt_chunk_next until it returns anything but RT_CHUNK_ENTRY. */
typedef struct {
    size_t at;
    size_t end;
    size_t sub_end;  /* where the sub-batch being read ends; 0 outside one */
} rt_chunk_iter;

enum {
    RT_CHUNK_ENTRY = 1,        /* *entry is the next message */
    RT_CHUNK_END = 0,          /* no more entries */
    RT_CHUNK_COMPRESSED = -1,  /* a compressed sub-batch: not read here */
    RT_CHUNK_TRUNCATED = -2    /* an entry runs past the data (or its sub-batch) */
};

int rt_chunk_next(const uint8_t *data, rt_chunk_iter *it, rt_bytes *entry);

#endif
