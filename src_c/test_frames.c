/*
 * Test driver of the AMQP frame scanner: each rule on hand-made frames, then random buffers
 * (well-formed frames, truncated ones and noise) whose every answer is checked against the
 * buffer, cut at every length (run it under `make sanitize`: no read beyond the buffer).
 * `--quick` runs fewer random cases.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "amqp_frames.h"
#include "test_buffer.h"
#include "test_support.h"

#define RUN(name)                                                                              \
    do {                                                                                       \
        name();                                                                                \
        tests_run++;                                                                           \
    } while (0)

#define MID(c, m) ((uint32_t)(c) << 16 | (uint32_t)(m))

static unsigned tests_run;
static int quick;

/* ------------------------------------------------------------------------ frame builder */

/* A frame of `type` on `channel` with `payload` (n bytes), ending with `end`. */
static size_t frame(buffer *b, unsigned type, unsigned channel, const void *payload, size_t n,
                    unsigned end)
{
    size_t start = b->len;
    put_u8(b, type);
    put_u16(b, channel);
    put_u32(b, (uint32_t)n);
    put(b, payload, n);
    put_u8(b, end);
    return start;
}

static size_t method(buffer *b, unsigned channel, uint32_t id, const char *fields, size_t n)
{
    uint8_t payload[512];
    CHECK(n + 4 <= sizeof payload);
    payload[0] = (uint8_t)(id >> 24);
    payload[1] = (uint8_t)(id >> 16);
    payload[2] = (uint8_t)(id >> 8);
    payload[3] = (uint8_t)id;
    memcpy(payload + 4, fields, n);
    return frame(b, RT_FRAME_METHOD, channel, payload, n + 4, RT_FRAME_END);
}

/* an exchange and a routing key as two short strings at fields + n; the new n */
static size_t names(char *fields, size_t n, const char *exchange, const char *key)
{
    size_t el = strlen(exchange), kl = strlen(key);
    fields[n++] = (char)el;
    memcpy(fields + n, exchange, el);
    n += el;
    fields[n++] = (char)kl;
    memcpy(fields + n, key, kl);
    return n + kl;
}

static size_t publish(buffer *b, unsigned channel, const char *exchange, const char *key)
{
    char fields[600];
    size_t n = 0;
    fields[n++] = 0;
    fields[n++] = 0;
    n = names(fields, n, exchange, key);
    fields[n++] = 0;
    return method(b, channel, RT_BASIC_PUBLISH, fields, n);
}

static size_t header(buffer *b, unsigned channel, uint64_t body_size)
{
    uint8_t p[14] = {0, 60, 0, 0};
    int i;
    for (i = 0; i < 8; i++)
        p[4 + i] = (uint8_t)(body_size >> (56 - 8 * i));
    return frame(b, RT_FRAME_HEADER, channel, p, sizeof p, RT_FRAME_END);
}

static size_t body(buffer *b, unsigned channel, size_t n)
{
    uint8_t p[4096];
    CHECK(n <= sizeof p);
    memset(p, 'x', n);
    return frame(b, RT_FRAME_BODY, channel, p, n, RT_FRAME_END);
}

static rt_scan_rules rules_of(const uint32_t *methods, size_t n_methods,
                              const uint16_t *channels, size_t n_channels, uint64_t limit,
                              int check_end)
{
    rt_scan_rules r;
    r.methods = methods;
    r.n_methods = n_methods;
    r.channels = channels;
    r.n_channels = n_channels;
    r.limit = limit;
    r.check_end = check_end;
    return r;
}

static const uint32_t PUBLISH_ONLY[] = {RT_BASIC_PUBLISH};

/* ----------------------------------------------------------------------------- the rules */

static void test_frames_that_do_not_stop_pass(void)
{
    static buffer b;
    rt_frame f;
    rt_scan_rules r = rules_of(PUBLISH_ONLY, 1, NULL, 0, 0, 1);
    b.len = 0;
    method(&b, 1, MID(60, 80), "\0\0\0\0\0\0\0\1\0", 9); /* basic.ack */
    header(&b, 1, 0);
    frame(&b, 8, 0, "", 0, RT_FRAME_END); /* heartbeat */
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_MORE);
    CHECK(f.start == b.len && f.end == b.len);
    /* an incomplete frame: the scan stops where it begins */
    CHECK(rt_frame_scan(b.data, b.len - 3, 0, &r, &f) == RT_SCAN_MORE);
    CHECK(f.start == b.len - 8);
    CHECK(rt_frame_scan(b.data, 6, 0, &r, &f) == RT_SCAN_MORE && f.start == 0);
    /* a position past the end */
    CHECK(rt_frame_scan(b.data, 3, 9, &r, &f) == RT_SCAN_MORE && f.start == 3);
}

static void test_stop_methods_and_channels(void)
{
    static buffer b;
    rt_frame f;
    const uint32_t close_ok[] = {MID(20, 41), MID(20, 40)};
    const uint16_t watched[] = {9, 7};
    rt_scan_rules r = rules_of(close_ok, 2, watched, 2, 0, 0);
    size_t at_close, at_body;
    b.len = 0;
    method(&b, 3, MID(60, 80), "\0\0\0\0\0\0\0\1\0", 9);
    at_close = method(&b, 3, MID(20, 40), "\0\xc8\0\0\0\0\0", 7);
    at_body = body(&b, 7, 5);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP);
    CHECK(f.start == at_close && f.end == at_body && f.type == RT_FRAME_METHOD);
    CHECK(f.channel == 3 && f.method == MID(20, 40) && f.name_start == 0);
    CHECK(rt_frame_scan(b.data, b.len, f.end, &r, &f) == RT_SCAN_STOP);
    CHECK(f.start == at_body && f.end == b.len && f.type == RT_FRAME_BODY && f.channel == 7);
    CHECK(f.method == 0);
    CHECK(rt_frame_scan(b.data, b.len, f.end, &r, &f) == RT_SCAN_MORE && f.start == b.len);
}

static void test_short_method_frame_has_no_method(void)
{
    static buffer b;
    rt_frame f;
    const uint32_t zero[] = {0};
    const uint16_t watched[] = {4};
    rt_scan_rules r = rules_of(zero, 1, NULL, 0, 0, 1);
    b.len = 0;
    frame(&b, RT_FRAME_METHOD, 4, "\0\x3c\0", 3, RT_FRAME_END);
    /* the method id 0 is not read from beyond the frame; here 0 is a stop method */
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP && f.method == 0);
    r = rules_of(NULL, 0, watched, 1, 0, 1);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP);
    CHECK(f.method == 0 && f.channel == 4 && f.end == b.len);
}

static void test_limit_and_end_octet(void)
{
    static buffer b;
    rt_frame f;
    rt_scan_rules r = rules_of(NULL, 0, NULL, 0, 20, 1);
    size_t big;
    b.len = 0;
    body(&b, 1, 12); /* 20 bytes: at the limit */
    big = body(&b, 1, 13);
    /* refused as soon as its size is known: 7 bytes of it are enough */
    CHECK(rt_frame_scan(b.data, big + 7, 0, &r, &f) == RT_SCAN_TOO_LARGE);
    CHECK(f.start == big && f.end == big + 21);
    CHECK(rt_frame_scan(b.data, big + 6, 0, &r, &f) == RT_SCAN_MORE && f.start == big);
    b.data[19] = 0xCD;
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_BAD_END);
    CHECK(f.start == 0 && f.end == 20);
    r.check_end = 0;
    r.limit = 0;
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_MORE && f.start == b.len);
    /* a size near 2^32 */
    b.len = 0;
    put_u8(&b, 3);
    put_u16(&b, 1);
    put_u32(&b, 0xFFFFFFFFu);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_MORE && f.start == 0);
    r.limit = 131072;
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_TOO_LARGE);
    CHECK(f.end == (size_t)0xFFFFFFFFu + 8);
}

static void test_publish_with_its_content(void)
{
    static buffer b;
    rt_frame f;
    rt_scan_rules r = rules_of(PUBLISH_ONLY, 1, NULL, 0, 131072, 1);
    size_t at, h, end;
    b.len = 0;
    at = publish(&b, 5, "logs", "a.*.c");
    h = header(&b, 5, 150);
    body(&b, 5, 100);
    body(&b, 5, 50);
    end = b.len;
    body(&b, 5, 3); /* not this message's */
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP);
    CHECK(f.start == at && f.end == h && f.method == RT_BASIC_PUBLISH && f.channel == 5);
    CHECK(f.name_end - f.name_start == 4 && memcmp(b.data + f.name_start, "logs", 4) == 0);
    CHECK(f.header_end == h + 22 && f.content_end == end);
    /* each cut of the buffer before the content ends: no content, the name still */
    for (size_t cut = h; cut < end; cut++) {
        CHECK(rt_frame_scan(b.data, cut, 0, &r, &f) == RT_SCAN_STOP);
        CHECK(f.name_end == f.name_start + 4 && f.header_end == 0 && f.content_end == 0);
    }
    /* an empty body: the content ends with the header */
    b.len = 0;
    publish(&b, 5, "", "k");
    h = header(&b, 5, 0);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP);
    CHECK(f.name_start == f.name_end && f.header_end == b.len && f.content_end == b.len);
}

static void test_publish_content_must_follow_on_its_channel(void)
{
    static buffer b;
    rt_frame f;
    rt_scan_rules r = rules_of(PUBLISH_ONLY, 1, NULL, 0, 131072, 1);
    size_t h;
    /* another channel's frame in between */
    b.len = 0;
    publish(&b, 5, "logs", "k");
    frame(&b, 8, 0, "", 0, RT_FRAME_END);
    header(&b, 5, 1);
    body(&b, 5, 1);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP);
    CHECK(f.name_end > f.name_start && f.header_end == 0 && f.content_end == 0);
    /* body frames beyond the body size */
    b.len = 0;
    publish(&b, 5, "logs", "k");
    header(&b, 5, 10);
    body(&b, 5, 11);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP && f.content_end == 0);
    /* a header of another channel; a body frame of another channel */
    b.len = 0;
    publish(&b, 5, "logs", "k");
    header(&b, 6, 1);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP && f.header_end == 0);
    b.len = 0;
    publish(&b, 5, "logs", "k");
    h = header(&b, 5, 1);
    body(&b, 6, 1);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP && f.content_end == 0);
    /* a body frame without its end octet, or beyond the limit */
    b.len = 0;
    publish(&b, 5, "logs", "k");
    h = header(&b, 5, 1);
    frame(&b, RT_FRAME_BODY, 5, "x", 1, 0);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP && f.content_end == 0);
    CHECK(rt_frame_scan(b.data, b.len, f.end, &r, &f) == RT_SCAN_BAD_END);
    CHECK(f.start == h + 22);
    r.limit = 22;
    b.len = 0;
    publish(&b, 5, "", "");
    header(&b, 5, 20);
    body(&b, 5, 20);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP && f.content_end == 0);
    /* a header frame too short to hold the body size */
    r.limit = 0;
    b.len = 0;
    publish(&b, 5, "logs", "k");
    frame(&b, RT_FRAME_HEADER, 5, "\0\x3c\0\0\0\0\0\0\0\0\0\0\0", 13, RT_FRAME_END);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP && f.header_end == 0);
}

static void test_malformed_publish_has_no_name(void)
{
    static buffer b;
    rt_frame f;
    rt_scan_rules r = rules_of(PUBLISH_ONLY, 1, NULL, 0, 0, 1);
    /* the exchange's length runs beyond the frame; then the key's; then no bits octet */
    const char *cases[] = {"\0\0\x09logs\x01k\0", "\0\0\x04logs\x09k\0", "\0\0\x04logs\x01k",
                           "\0\0", ""};
    const size_t sizes[] = {10, 10, 9, 2, 0};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        b.len = 0;
        method(&b, 1, RT_BASIC_PUBLISH, cases[i], sizes[i]);
        header(&b, 1, 0);
        CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP);
        CHECK(f.method == RT_BASIC_PUBLISH && f.name_start == 0 && f.name_end == 0);
        CHECK(f.header_end == 0 && f.content_end == 0);
    }
}

static void test_repeats_of_a_message(void)
{
    static buffer b;
    static uint8_t out[4096];
    rt_frame f;
    rt_scan_rules r = rules_of(PUBLISH_ONLY, 1, NULL, 0, 131072, 1);
    const uint8_t rep[] = "REWRITTEN";
    size_t count, out_len, end, run_end;
    b.len = 0;
    publish(&b, 5, "logs", "a.*");
    header(&b, 5, 10);
    body(&b, 5, 10);
    publish(&b, 5, "logs", "a.*"); /* the same, its body in two frames */
    header(&b, 5, 10);
    body(&b, 5, 4);
    body(&b, 5, 6);
    run_end = b.len;
    publish(&b, 5, "logs", "a.*"); /* another body size */
    header(&b, 5, 11);
    body(&b, 5, 11);
    CHECK(rt_frame_scan(b.data, b.len, 0, &r, &f) == RT_SCAN_STOP && f.content_end);
    end = rt_frame_repeats(b.data, b.len, 0, b.data, f.header_end, rep, 9, &r, NULL, &count,
                           &out_len);
    CHECK(end == run_end && count == 2 && out_len == 2 * 9 + 18 + 12 + 14);
    memset(out, 0, sizeof out);
    CHECK(rt_frame_repeats(b.data, b.len, 0, b.data, f.header_end, rep, 9, &r, out, &count,
                           &out_len) == run_end);
    CHECK(memcmp(out, "REWRITTEN", 9) == 0 && out[9] == RT_FRAME_BODY);
    CHECK(memcmp(out + 9 + 18, "REWRITTEN", 9) == 0 && out[out_len] == 0);
    CHECK(memcmp(out + out_len - 14, b.data + run_end - 14, 14) == 0);
    /* the run stops before a message cut short, or at the end */
    CHECK(rt_frame_repeats(b.data, run_end - 1, 0, b.data, f.header_end, rep, 9, &r, NULL,
                           &count, &out_len) == f.content_end && count == 1);
    CHECK(rt_frame_repeats(b.data, b.len, run_end, b.data, f.header_end, rep, 9, &r, NULL,
                           &count, &out_len) == run_end && count == 0 && out_len == 0);
    /* a head that is not a publish frame then a whole header frame: no run */
    CHECK(rt_frame_repeats(b.data, b.len, 0, b.data, f.header_end - 1, rep, 9, &r, NULL,
                           &count, &out_len) == 0 && count == 0);
    CHECK(rt_frame_repeats(b.data, b.len, 0, b.data, f.end, rep, 9, &r, NULL, &count,
                           &out_len) == 0 && count == 0);
    CHECK(rt_frame_repeats(b.data, b.len, 0, b.data, 3, rep, 9, &r, NULL, &count,
                           &out_len) == 0 && count == 0);
}

static size_t deliver(buffer *b, unsigned channel, uint64_t tag, const char *exchange,
                      const char *key)
{
    char fields[600];
    size_t n = 0;
    int i;
    fields[n++] = 2; /* consumer tag "c1" */
    fields[n++] = 'c';
    fields[n++] = '1';
    for (i = 0; i < 8; i++)
        fields[n++] = (char)(tag >> (56 - 8 * i));
    fields[n++] = 1; /* redelivered */
    n = names(fields, n, exchange, key);
    return method(b, channel, MID(60, 60), fields, n);
}

static void test_renames_of_literal_publishes(void)
{
    static buffer b;
    static uint8_t out[4096];
    rt_scan_rules r = rules_of(NULL, 0, NULL, 0, 131072, 1);
    const uint8_t rep[] = "\x0dlogs.bindings";
    size_t count, out_len, run_end, first_end, end, at;
    b.len = 0;
    publish(&b, 5, "logs", "a.b");
    header(&b, 5, 10);
    body(&b, 5, 4);
    body(&b, 5, 6);
    first_end = b.len;
    publish(&b, 5, "logs", ""); /* an empty key, an empty body */
    header(&b, 5, 0);
    run_end = b.len;
    publish(&b, 5, "logs", "a.*"); /* a wildcard: the run ends */
    header(&b, 5, 0);
    end = rt_frame_renames(b.data, b.len, 0, 5, (const uint8_t *)"logs", 4, rep, 14, 100, &r,
                           NULL, &count, &out_len);
    CHECK(end == run_end && count == 2 && out_len == run_end + 2 * 9);
    memset(out, 0, sizeof out);
    CHECK(rt_frame_renames(b.data, b.len, 0, 5, (const uint8_t *)"logs", 4, rep, 14, 100, &r,
                           out, &count, &out_len) == run_end);
    /* the publish frame rebuilt: head, class and method, ticket, new name, key, bits, end */
    CHECK(out[0] == RT_FRAME_METHOD && out[1] == 0 && out[2] == 5 && out[6] == 6 + 14 + 4 + 1);
    CHECK(memcmp(out + 13, rep, 14) == 0 && memcmp(out + 27, "\x03" "a.b", 4) == 0);
    CHECK(out[31] == 0 && out[32] == RT_FRAME_END);
    at = 33 + (first_end - (8 + 4 + 2 + 5 + 4 + 1));
    CHECK(memcmp(out + 33, b.data + 8 + 4 + 2 + 5 + 4 + 1, at - 33) == 0);
    CHECK(out[at] == RT_FRAME_METHOD && out[at + 27] == 0 && out[at + 29] == RT_FRAME_END);
    CHECK(at + 30 + 22 == out_len && out[out_len] == 0);
    /* at most `max`; another exchange or channel; a headers flag; a bad replacement */
    CHECK(rt_frame_renames(b.data, b.len, 0, 5, (const uint8_t *)"logs", 4, rep, 14, 1, &r,
                           NULL, &count, &out_len) == first_end && count == 1);
    CHECK(rt_frame_renames(b.data, b.len, 0, 5, (const uint8_t *)"logz", 4, rep, 14, 9, &r,
                           NULL, &count, &out_len) == 0 && count == 0 && out_len == 0);
    CHECK(rt_frame_renames(b.data, b.len, 0, 6, (const uint8_t *)"logs", 4, rep, 14, 9, &r,
                           NULL, &count, &out_len) == 0 && count == 0);
    CHECK(rt_frame_renames(b.data, b.len, 0, 5, (const uint8_t *)"logs", 4, rep, 13, 9, &r,
                           NULL, &count, &out_len) == 0 && count == 0);
    b.data[first_end + 21 + 19] |= 0x20; /* the second message's header: headers flag on */
    CHECK(rt_frame_renames(b.data, b.len, 0, 5, (const uint8_t *)"logs", 4, rep, 14, 9, &r,
                           NULL, &count, &out_len) == first_end && count == 1);
}

static void test_deliveries(void)
{
    static buffer b;
    rt_scan_rules r = rules_of(NULL, 0, NULL, 0, 131072, 1);
    size_t at[8], count, first_end, run_end;
    b.len = 0;
    deliver(&b, 1, 7, "ex", "a.b");
    header(&b, 1, 10);
    body(&b, 1, 3);
    body(&b, 1, 7);
    first_end = b.len;
    deliver(&b, 1, 8, "", "q"); /* an empty body */
    header(&b, 1, 0);
    run_end = b.len;
    deliver(&b, 2, 9, "", "q"); /* another channel: the run ends */
    header(&b, 2, 0);
    CHECK(rt_frame_deliveries(b.data, b.len, 0, 1, &r, at, 4, &count) == run_end);
    CHECK(count == 2 && at[0] == 0 && at[1] == first_end && at[2] == first_end &&
          at[3] == run_end);
    CHECK(rt_frame_deliveries(b.data, b.len, 0, 1, &r, at, 1, &count) == first_end &&
          count == 1);
    CHECK(rt_frame_deliveries(b.data, run_end - 1, 0, 1, &r, at, 4, &count) == first_end);
    CHECK(rt_frame_deliveries(b.data, b.len, run_end, 2, &r, at, 4, &count) == b.len);
    r.limit = 20;
    CHECK(rt_frame_deliveries(b.data, b.len, 0, 1, &r, at, 4, &count) == 0 && count == 0);
    b.len = 0;
    method(&b, 1, MID(60, 60), "\x05" "c1", 3); /* the consumer tag past the frame */
    header(&b, 1, 0);
    r.limit = 0;
    CHECK(rt_frame_deliveries(b.data, b.len, 0, 1, &r, at, 4, &count) == 0 && count == 0);
}

/* ------------------------------------------------------------------------------ random */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint32_t rnd(uint32_t n)
{
    return rt_test_rnd(&rng_state, n);
}

/* Checks one answer against the buffer: offsets in range, and what they claim holds. */
static void check_answer(const uint8_t *buf, size_t len, size_t pos, const rt_scan_rules *r,
                         int result, const rt_frame *f)
{
    if (result == RT_SCAN_MORE) {
        CHECK(f->start >= (pos < len ? pos : len) && f->start <= len);
        CHECK(len - f->start < 7 || f->start + 8 + ((size_t)buf[f->start + 3] << 24 |
              (size_t)buf[f->start + 4] << 16 | (size_t)buf[f->start + 5] << 8 |
              buf[f->start + 6]) > len);
        return;
    }
    CHECK(f->start >= pos && f->start + 7 <= len && f->end > f->start);
    if (result == RT_SCAN_TOO_LARGE) {
        CHECK(r->limit && f->end - f->start > r->limit);
        return;
    }
    CHECK(f->end <= len);
    if (result == RT_SCAN_BAD_END) {
        CHECK(r->check_end && buf[f->end - 1] != RT_FRAME_END);
        return;
    }
    CHECK(result == RT_SCAN_STOP);
    CHECK(f->type == buf[f->start] && f->channel == (buf[f->start + 1] << 8 | buf[f->start + 2]));
    if (f->name_end) {
        CHECK(f->method == RT_BASIC_PUBLISH);
        CHECK(f->name_start == f->start + 14 && f->name_end == f->name_start +
              buf[f->start + 13] && f->name_end < f->end - 1);
    }
    if (f->content_end) {
        CHECK(f->name_end && f->header_end > f->end && f->header_end <= f->content_end);
        CHECK(f->content_end <= len && buf[f->end] == RT_FRAME_HEADER);
    }
}

/* The run of messages repeating the one at f: it starts with that one, each of its messages
 * has the same head, and the bytes written are the run with each head replaced. */
static void check_repeats(const uint8_t *buf, size_t len, const rt_frame *f,
                          const rt_scan_rules *r)
{
    static uint8_t out[1 << 17];
    const uint8_t rep[] = "rep";
    size_t head_len = f->header_end - f->start, count, out_len, count2, out_len2, end, pos;
    size_t written = 0, i;
    end = rt_frame_repeats(buf, len, f->start, buf + f->start, head_len, rep, 3, r, NULL,
                           &count, &out_len);
    CHECK(count >= 1 && end >= f->content_end && end <= len);
    CHECK(out_len <= sizeof out);
    CHECK(rt_frame_repeats(buf, len, f->start, buf + f->start, head_len, rep, 3, r, out,
                           &count2, &out_len2) == end && count2 == count && out_len2 == out_len);
    CHECK(out_len == end - f->start - count * (head_len - 3));
    for (pos = f->start, i = 0; i < count; i++) {
        rt_frame g;
        CHECK(memcmp(buf + pos, buf + f->start, head_len) == 0);
        CHECK(rt_frame_scan(buf, len, pos, r, &g) == RT_SCAN_STOP && g.start == pos);
        CHECK(g.content_end && memcmp(out + written, rep, 3) == 0);
        CHECK(memcmp(out + written + 3, buf + g.header_end, g.content_end - g.header_end) == 0);
        written += 3 + g.content_end - g.header_end;
        pos = g.content_end;
    }
    CHECK(pos == end && written == out_len);
}

static void random_frames(buffer *b)
{
    static const char *names[] = {"", "logs", "x"};
    unsigned count = 1 + rnd(12), i, channel;
    b->len = 0;
    for (i = 0; i < count && b->len < sizeof b->data - 2048; i++) {
        channel = rnd(4);
        switch (rnd(8)) {
        case 7: /* a run of the same message */
            for (unsigned k = 1 + rnd(4); k; k--) {
                publish(b, channel, "logs", "a.b");
                header(b, channel, 3);
                body(b, channel, 3);
            }
            break;
        case 0:
            publish(b, channel, names[rnd(3)], "a.b");
            if (rnd(4)) {
                size_t size = rnd(300), left = size;
                header(b, channel, size);
                while (left && rnd(10)) {
                    size_t n = 1 + rnd((uint32_t)left);
                    body(b, rnd(8) ? channel : channel + 1, n);
                    left -= n;
                }
            }
            break;
        case 1:
            method(b, channel, MID(20, 40 + rnd(2)), "\0\0\0\0\0\0\0", rnd(8));
            break;
        case 2:
            header(b, channel, rnd(50));
            break;
        case 3:
            body(b, channel, rnd(40));
            break;
        case 4: /* noise */
            for (unsigned k = rnd(20); k; k--)
                put_u8(b, rnd(256));
            break;
        case 5:
            frame(b, RT_FRAME_METHOD, channel, "\0\x3c\0\x28\0\0", rnd(7), rnd(2) ? 0xCE : 0);
            break;
        default:
            frame(b, 8, 0, "", 0, RT_FRAME_END);
        }
    }
}

/* The runs of renamed publishes and of deliveries from a stop: within the buffer, and the
 * renamed bytes as long as said. */
static void check_runs(const uint8_t *buf, size_t len, const rt_frame *f, const rt_scan_rules *r)
{
    static uint8_t out[1 << 17];
    static const uint8_t rep[] = "\x02nn";
    size_t at[2 * 16], count, count2, out_len, out_len2, end, i;
    end = rt_frame_renames(buf, len, f->start, f->channel, buf + f->name_start,
                           f->name_end - f->name_start, rep, 3, 1000, r, NULL, &count, &out_len);
    CHECK(end >= f->start && end <= len && out_len <= sizeof out);
    CHECK(rt_frame_renames(buf, len, f->start, f->channel, buf + f->name_start,
                           f->name_end - f->name_start, rep, 3, 1000, r, out, &count2,
                           &out_len2) == end && count2 == count && out_len2 == out_len);
    CHECK(count == 0 || (f->name_end && f->content_end));
    end = rt_frame_deliveries(buf, len, f->start, f->channel, r, at, 16, &count);
    CHECK(end >= f->start && end <= len && count <= 16);
    for (i = 0; i < count; i++)
        CHECK(at[2 * i] < at[2 * i + 1] && (i == 0 ? at[0] == f->start
                                                   : at[2 * i] == at[2 * i - 1]));
    CHECK(count == 0 ? end == f->start : end == at[2 * count - 1]);
}

static void test_random_buffers(void)
{
    static buffer b;
    static const uint32_t methods[] = {RT_BASIC_PUBLISH, MID(20, 40), MID(20, 41)};
    unsigned cases = quick ? 300 : 5000, c;
    for (c = 0; c < cases; c++) {
        uint16_t channels[2];
        rt_scan_rules r;
        size_t n_channels = rnd(3), len, i;
        rt_frame f;
        for (i = 0; i < n_channels; i++)
            channels[i] = (uint16_t)rnd(4);
        r = rules_of(methods, rnd(4), channels, n_channels, rnd(3) ? 0 : 30 + rnd(300),
                     (int)rnd(2));
        random_frames(&b);
        /* every prefix of the buffer, scanned from the start and stop after stop */
        for (len = 0; len <= b.len; len += 1 + (quick ? rnd(7) : 0)) {
            size_t pos = 0;
            int result;
            for (;;) {
                result = rt_frame_scan(b.data, len, pos, &r, &f);
                check_answer(b.data, len, pos, &r, result, &f);
                if (result != RT_SCAN_STOP)
                    break;
                if (f.content_end)
                    check_repeats(b.data, len, &f, &r);
                check_runs(b.data, len, &f, &r);
                pos = f.end;
            }
        }
    }
}

int main(int argc, char **argv)
{
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    RUN(test_frames_that_do_not_stop_pass);
    RUN(test_stop_methods_and_channels);
    RUN(test_short_method_frame_has_no_method);
    RUN(test_limit_and_end_octet);
    RUN(test_publish_with_its_content);
    RUN(test_publish_content_must_follow_on_its_channel);
    RUN(test_malformed_publish_has_no_name);
    RUN(test_repeats_of_a_message);
    RUN(test_renames_of_literal_publishes);
    RUN(test_deliveries);
    RUN(test_random_buffers);
    printf("all %u frame scanner tests passed (%s)\n", tests_run, quick ? "quick" : "full");
    return 0;
}
