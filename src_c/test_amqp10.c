/* Tests of amqp10.c: a chunk's entries, a message's common fields and the general cases;
 * every prefix of a message and random mutations never read out of bounds (run under
 * valgrind and the sanitizers too). The Python differential tests
 * (tests/core/test_amqp10_scan.py) check the answers against the full decoder. */
#include "amqp10.h"
#include "test_buffer.h"
#include "test_support.h"

#include <string.h>

static unsigned tests_run;
static int quick;

static void put_str8(buffer *b, unsigned code, const char *s)
{
    put_u8(b, code);
    put_u8(b, (unsigned)strlen(s));
    put(b, s, strlen(s));
}

/* A stored message as RabbitMQ 4.x writes an AMQP 0-9-1 publish: header, annotations, data. */
static void put_message(buffer *b, const char *key, const char *body)
{
    buffer map = {{0}, 0};
    put_str8(&map, 0xA3, "x-routing-key");
    put_str8(&map, 0xA1, key);
    put_str8(&map, 0xA3, "x-exchange");
    put_str8(&map, 0xA1, "ex");
    put(b, "\x00\x53\x70\xc0\x06\x05\x42\x50\x07\x70\x00\x00\x01\x00\x41\x43", 16);
    put(b, "\x00\x53\x72\xc1", 4);
    put_u8(b, (unsigned)map.len + 1);
    put_u8(b, 4);
    put(b, map.data, map.len);
    put(b, "\x00\x53\x75\xa0", 4);
    put_u8(b, (unsigned)strlen(body));
    put(b, body, strlen(body));
}

static void test_the_common_shape(void)
{
    buffer b = {{0}, 0};
    rt_amqp10_common m;
    put_message(&b, "a.b", "hello");
    CHECK(rt_amqp10_scan(b.data, b.len, &m) == RT_AMQP10_COMMON);
    CHECK(m.has_routing_key && m.routing_key.len == 3);
    CHECK(memcmp(b.data + m.routing_key.at, "a.b", 3) == 0);
    CHECK(m.has_exchange && m.exchange.len == 2);
    CHECK(m.body.len == 5 && memcmp(b.data + m.body.at, "hello", 5) == 0);
    CHECK(m.durable == 0 && m.priority == 7 && m.ttl == 256);
    /* a message of annotations only: no body, no header */
    b.len = 0;
    put(&b, "\x00\x53\x72\xc1\x01\x00", 6);
    CHECK(rt_amqp10_scan(b.data, b.len, &m) == RT_AMQP10_COMMON);
    CHECK(!m.has_routing_key && !m.has_exchange && m.body.len == 0);
    CHECK(m.durable == RT_AMQP10_ABSENT && m.ttl == RT_AMQP10_ABSENT);
    CHECK(rt_amqp10_scan(b.data, 0, &m) == RT_AMQP10_COMMON);  /* the empty message */
    tests_run++;
}

static void test_the_general_cases(void)
{
    static const char *const general[] = {
        "\x00\x53\x73\x45",                          /* properties */
        "\x00\x53\x74\xc1\x01\x00",                  /* application properties */
        "\x00\x53\x77\x40",                          /* amqp-value */
        "\x00\x53\x75\xa0\x01x\x00\x53\x75\xa0\x01y", /* two data sections */
        "\x00\x53\x75\xa1\x01x",                     /* data that is not binary */
        "\x00\x53\x72\xc1\x05\x02\xa3\x01y\xa1\x00",  /* another annotation */
        "\x00\x53\x70\xc0\x02\x01\x50\x01",          /* durable that is a ubyte */
        "\x00\x80\x00\x00\x00\x00\x00\x00\x00\x75\xa0\x00", /* a ulong descriptor */
        "\x01\x53\x75\xa0\x00",                      /* not described */
    };
    static const size_t sizes[] = {4, 6, 4, 12, 6, 11, 8, 12, 5};
    size_t i;
    rt_amqp10_common m;
    for (i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        CHECK(rt_amqp10_scan((const uint8_t *)general[i], sizes[i], &m) == RT_AMQP10_GENERAL);
    tests_run++;
}

static void test_every_prefix_is_general_or_a_whole_section(void)
{
    buffer b = {{0}, 0};
    rt_amqp10_common m;
    size_t n;
    put_message(&b, "k", "body");
    for (n = 0; n < b.len; n++) {
        int got = rt_amqp10_scan(b.data, n, &m);
        /* only the section boundaries (after the header, after the annotations) read whole */
        CHECK(got == RT_AMQP10_GENERAL || n == 0 || n == 16 || n == 16 + 40);
    }
    tests_run++;
}

static void test_chunk_entries(void)
{
    buffer b = {{0}, 0};
    rt_chunk_iter it = {0, 0, 0};
    rt_bytes e;
    put_u32(&b, 1);
    put(&b, "a", 1);
    put_u8(&b, 0x80);  /* an uncompressed sub-batch of two */
    put_u16(&b, 2);
    put_u32(&b, 11);
    put_u32(&b, 11);
    put_u32(&b, 2);
    put(&b, "bb", 2);
    put_u32(&b, 1);
    put(&b, "c", 1);
    put_u8(&b, 0x80);  /* an empty one */
    put_u16(&b, 0);
    put_u32(&b, 0);
    put_u32(&b, 0);
    put_u32(&b, 0);    /* an empty message */
    it.end = b.len;
    CHECK(rt_chunk_next(b.data, &it, &e) == RT_CHUNK_ENTRY && e.len == 1 && b.data[e.at] == 'a');
    CHECK(rt_chunk_next(b.data, &it, &e) == RT_CHUNK_ENTRY && e.len == 2 && b.data[e.at] == 'b');
    CHECK(rt_chunk_next(b.data, &it, &e) == RT_CHUNK_ENTRY && e.len == 1 && b.data[e.at] == 'c');
    CHECK(rt_chunk_next(b.data, &it, &e) == RT_CHUNK_ENTRY && e.len == 0);
    CHECK(rt_chunk_next(b.data, &it, &e) == RT_CHUNK_END);
    /* truncated, then compressed */
    it.at = 0;
    it.sub_end = 0;
    it.end = 4;
    CHECK(rt_chunk_next(b.data, &it, &e) == RT_CHUNK_TRUNCATED);
    b.data[5] = 0x90;
    it.at = 5;
    it.end = b.len;
    CHECK(rt_chunk_next(b.data, &it, &e) == RT_CHUNK_COMPRESSED);
    tests_run++;
}

static void test_random_and_mutated_messages(void)
{
    uint64_t state = 46;
    unsigned round, rounds = quick ? 2000 : 200000;
    for (round = 0; round < rounds; round++) {
        buffer b = {{0}, 0};
        rt_amqp10_common m;
        rt_chunk_iter it = {0, 0, 0};
        rt_bytes e;
        unsigned i, flips = rt_test_rnd(&state, 4);
        put_message(&b, "w1.w2", "0123456789");
        for (i = 0; i < flips; i++)
            b.data[rt_test_rnd(&state, (uint32_t)b.len)] = (uint8_t)rt_test_rnd(&state, 256);
        if (rt_amqp10_scan(b.data, b.len, &m) == RT_AMQP10_COMMON) {
            CHECK(m.body.at + m.body.len <= b.len);
            CHECK(!m.has_routing_key || m.routing_key.at + m.routing_key.len <= b.len);
            CHECK(!m.has_exchange || m.exchange.at + m.exchange.len <= b.len);
        }
        it.end = b.len;
        while (rt_chunk_next(b.data, &it, &e) == RT_CHUNK_ENTRY)
            CHECK(e.at + e.len <= b.len);
    }
    tests_run++;
}

int main(int argc, char **argv)
{
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    test_the_common_shape();
    test_the_general_cases();
    test_every_prefix_is_general_or_a_whole_section();
    test_chunk_entries();
    test_random_and_mutated_messages();
    printf("test_amqp10: %u tests passed\n", tests_run);
    return 0;
}
