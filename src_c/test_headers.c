/* Tests of amqp_headers.c: reading CC/BCC/alias arrays from content header frames and
 * rewriting their headers table; random and mutated frames never read or write out of
 * bounds (run under valgrind and the sanitizers too). The Python differential tests
 * (tests/proxy/test_header_rewrite.py) check the answers against the general path. */
#include "amqp_headers.h"
#include "test_buffer.h"
#include "test_support.h"

#include <string.h>

static unsigned tests_run;
static int quick;

static void put_short(buffer *b, const char *s)
{
    put_u8(b, (unsigned)strlen(s));
    put(b, s, strlen(s));
}

/* A table entry NAME = array of the long strings in `items` (NULL-terminated). */
static void put_array_entry(buffer *b, const char *name, const char *const *items)
{
    buffer v = {{0}, 0};
    size_t i;
    for (i = 0; items[i]; i++) {
        put_u8(&v, 'S');
        put_u32(&v, (uint32_t)strlen(items[i]));
        put(&v, items[i], strlen(items[i]));
    }
    put_short(b, name);
    put_u8(b, 'A');
    put_u32(b, (uint32_t)v.len);
    put(b, v.data, v.len);
}

static void put_int_entry(buffer *b, const char *name, uint32_t value)
{
    put_short(b, name);
    put_u8(b, 'I');
    put_u32(b, value);
}

/* A content header frame: content type "text/plain" if `typed`, the table `table` (NULL:
 * no headers property), then a delivery mode. */
static void header_frame(buffer *out, int typed, const buffer *table)
{
    buffer p = {{0}, 0};
    unsigned flags = 0x1000u; /* delivery mode */
    put_u16(&p, 60);
    put_u16(&p, 0);
    put_u32(&p, 0);
    put_u32(&p, 100);
    if (typed)
        flags |= 0x8000u;
    if (table)
        flags |= 0x2000u;
    put_u16(&p, flags);
    if (typed)
        put_short(&p, "text/plain");
    if (table) {
        put_u32(&p, (uint32_t)table->len);
        put(&p, table->data, table->len);
    }
    put_u8(&p, 2);
    out->len = 0;
    put_u8(out, 2);
    put_u16(out, 1);
    put_u32(out, (uint32_t)p.len);
    put(out, p.data, p.len);
    put_u8(out, 0xCE);
}

static int span_is(const uint8_t *f, rt_span s, const char *want)
{
    return s.len == strlen(want) && memcmp(f + s.at, want, s.len) == 0;
}

static void test_reads_cc_bcc_and_the_alias(void)
{
    static const char *const cc[] = {"a.b", "c", NULL};
    static const char *const bcc[] = {"x.*", NULL};
    static const char *const alias[] = {"#.z", NULL};
    buffer table = {{0}, 0}, f;
    rt_header_info info;
    rt_span spans[8];
    put_int_entry(&table, "n", 7);
    put_array_entry(&table, "CC", cc);
    put_array_entry(&table, "my-bcc", alias);
    put_array_entry(&table, "BCC", bcc);
    header_frame(&f, 1, &table);
    CHECK(rt_header_keys(f.data, f.len, (const uint8_t *)"my-bcc", 6, 65536, &info, spans,
                         8) == 4);
    CHECK(info.has_table && info.present[RT_HDR_CC] && info.present[RT_HDR_BCC] &&
          info.present[RT_HDR_ALIAS]);
    CHECK(info.first[RT_HDR_CC] == 0 && info.count[RT_HDR_CC] == 2);
    CHECK(span_is(f.data, spans[0], "a.b") && span_is(f.data, spans[1], "c"));
    /* spans in table order: CC, the alias, BCC */
    CHECK(info.first[RT_HDR_ALIAS] == 2 && span_is(f.data, spans[2], "#.z"));
    CHECK(info.first[RT_HDR_BCC] == 3 && span_is(f.data, spans[3], "x.*"));
    /* too little room: the count all the same */
    CHECK(rt_header_keys(f.data, f.len, (const uint8_t *)"my-bcc", 6, 65536, &info, spans,
                         1) == 4);
    tests_run++;
}

static void test_the_general_path_cases(void)
{
    static const char *const one[] = {"a", NULL};
    static const char *const wide[] = {"\xc3\xa9", NULL};
    buffer table = {{0}, 0}, f;
    rt_header_info info;
    rt_span spans[8];
    /* CC that is not an array */
    put_int_entry(&table, "CC", 1);
    header_frame(&f, 0, &table);
    CHECK(rt_header_keys(f.data, f.len, NULL, 0, 65536, &info, spans, 8) == RT_HDR_GENERAL);
    /* BCC twice */
    table.len = 0;
    put_array_entry(&table, "BCC", one);
    put_array_entry(&table, "BCC", one);
    header_frame(&f, 0, &table);
    CHECK(rt_header_keys(f.data, f.len, NULL, 0, 65536, &info, spans, 8) == RT_HDR_GENERAL);
    /* a non-ASCII key */
    table.len = 0;
    put_array_entry(&table, "CC", wide);
    header_frame(&f, 0, &table);
    CHECK(rt_header_keys(f.data, f.len, NULL, 0, 65536, &info, spans, 8) == RT_HDR_GENERAL);
    /* an entry longer than max_entry */
    table.len = 0;
    put_array_entry(&table, "CC", one);
    header_frame(&f, 0, &table);
    CHECK(rt_header_keys(f.data, f.len, NULL, 0, 0, &info, spans, 8) == RT_HDR_GENERAL);
    CHECK(rt_header_keys(f.data, f.len, NULL, 0, 1, &info, spans, 8) == 1);
    /* an unknown type elsewhere in the table */
    table.len = 0;
    put_short(&table, "odd");
    put_u8(&table, 'Q');
    header_frame(&f, 0, &table);
    CHECK(rt_header_keys(f.data, f.len, NULL, 0, 65536, &info, spans, 8) == RT_HDR_GENERAL);
    /* a continuation flag, a bad end octet, a size that is not the frame's */
    header_frame(&f, 0, NULL);
    f.data[20] |= 1;
    CHECK(rt_header_keys(f.data, f.len, NULL, 0, 65536, &info, spans, 8) == RT_HDR_GENERAL);
    header_frame(&f, 0, NULL);
    f.data[f.len - 1] = 0;
    CHECK(rt_header_keys(f.data, f.len, NULL, 0, 65536, &info, spans, 8) == RT_HDR_GENERAL);
    header_frame(&f, 0, NULL);
    CHECK(rt_header_keys(f.data, f.len - 1, NULL, 0, 65536, &info, spans, 8) ==
          RT_HDR_GENERAL);
    /* no headers at all: simple, nothing found */
    CHECK(rt_header_keys(f.data, f.len, NULL, 0, 65536, &info, spans, 8) == 0);
    CHECK(!info.has_table);
    tests_run++;
}

static void test_rewrite(void)
{
    static const char *const cc[] = {"a.b", NULL};
    static const char *const bcc[] = {"x.*", "y", NULL};
    static const char *const planned[] = {"k1", "k2", NULL};
    buffer table = {{0}, 0}, f, want_table = {{0}, 0}, want, entry = {{0}, 0};
    rt_header_info info;
    rt_span spans[8];
    uint8_t out[8192];
    size_t n;
    put_array_entry(&entry, "BCC", planned);
    /* BCC and the alias dropped, the planned BCC added at the end */
    put_array_entry(&table, "BCC", bcc);
    put_int_entry(&table, "n", 1);
    put_array_entry(&table, "al", bcc);
    put_array_entry(&table, "CC", cc);
    header_frame(&f, 1, &table);
    CHECK(rt_header_keys(f.data, f.len, (const uint8_t *)"al", 2, 65536, &info, spans, 8) == 5);
    n = rt_header_rewrite(f.data, f.len, &info, entry.data, entry.len, out, 10);
    put_int_entry(&want_table, "n", 1);
    put_array_entry(&want_table, "CC", cc);
    put(&want_table, entry.data, entry.len);
    header_frame(&want, 1, &want_table);
    CHECK(n == want.len);  /* too small a buffer: the size needed */
    CHECK(rt_header_rewrite(f.data, f.len, &info, entry.data, entry.len, out, sizeof out) ==
          want.len);
    CHECK(memcmp(out, want.data, want.len) == 0);
    /* nothing planned: the table stays, without BCC and the alias */
    want_table.len = 0;
    put_int_entry(&want_table, "n", 1);
    put_array_entry(&want_table, "CC", cc);
    header_frame(&want, 1, &want_table);
    CHECK(rt_header_rewrite(f.data, f.len, &info, NULL, 0, out, sizeof out) == want.len);
    CHECK(memcmp(out, want.data, want.len) == 0);
    /* a frame without headers gets a table with the planned BCC */
    header_frame(&f, 1, NULL);
    CHECK(rt_header_keys(f.data, f.len, NULL, 0, 65536, &info, spans, 8) == 0);
    header_frame(&want, 1, &entry);
    CHECK(rt_header_rewrite(f.data, f.len, &info, entry.data, entry.len, out, sizeof out) ==
          want.len);
    CHECK(memcmp(out, want.data, want.len) == 0);
    /* and stays as it is without one */
    CHECK(rt_header_rewrite(f.data, f.len, &info, NULL, 0, out, sizeof out) == f.len);
    CHECK(memcmp(out, f.data, f.len) == 0);
    tests_run++;
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

/* Random tables, then random mutations of their frames: every answer stays within the frame
 * and every rewrite of a simple frame is a frame whose keys read back the same. */
static void test_random_and_mutated_frames(void)
{
    static const char *const names[] = {"CC", "BCC", "al", "n", "x"};
    static const char *const keys[] = {"a", "a.b", "#", "*.c", "", NULL};
    unsigned round, rounds = quick ? 2000 : 50000;
    for (round = 0; round < rounds; round++) {
        buffer table = {{0}, 0}, f, entry = {{0}, 0};
        rt_header_info info, again;
        rt_span spans[64], spans2[64];
        uint8_t out[8192];
        unsigned i, entries = rt_test_rnd(&rng_state, 5);
        long found;
        size_t n;
        for (i = 0; i < entries; i++) {
            const char *name = names[rt_test_rnd(&rng_state, 5)];
            const char *items[4] = {NULL, NULL, NULL, NULL};
            unsigned j, count = rt_test_rnd(&rng_state, 4);
            if (rt_test_rnd(&rng_state, 4) == 0) {
                put_int_entry(&table, name, round);
                continue;
            }
            for (j = 0; j < count; j++)
                items[j] = keys[rt_test_rnd(&rng_state, 5)];
            put_array_entry(&table, name, items);
        }
        header_frame(&f, (int)rt_test_rnd(&rng_state, 2),
                     rt_test_rnd(&rng_state, 5) ? &table : NULL);
        if (rt_test_rnd(&rng_state, 2)) { /* mutate a few bytes */
            unsigned m, mutations = 1 + rt_test_rnd(&rng_state, 3);
            for (m = 0; m < mutations; m++)
                f.data[rt_test_rnd(&rng_state, (uint32_t)f.len)] =
                    (uint8_t)rt_test_rnd(&rng_state, 256);
        }
        found = rt_header_keys(f.data, f.len, (const uint8_t *)"al", 2, 65536, &info, spans,
                               64);
        if (found == RT_HDR_GENERAL)
            continue;
        CHECK(found >= 0 && found <= 64);
        for (i = 0; i < (unsigned)found; i++)
            CHECK(spans[i].at + spans[i].len <= f.len);
        put_array_entry(&entry, "BCC", keys);
        n = rt_header_rewrite(f.data, f.len, &info, entry.data, entry.len, out, sizeof out);
        CHECK(n > 0 && n <= sizeof out);
        /* the rewrite reads back: the CC strings as they were, BCC = the planned keys */
        CHECK(rt_header_keys(out, n, (const uint8_t *)"al", 2, 65536, &again, spans2, 64) ==
              (long)(info.count[RT_HDR_CC] + 5));
        CHECK(!again.present[RT_HDR_ALIAS] && again.present[RT_HDR_BCC]);
        CHECK(again.count[RT_HDR_CC] == info.count[RT_HDR_CC]);
        for (i = 0; i < info.count[RT_HDR_CC]; i++) {
            rt_span a = spans[info.first[RT_HDR_CC] + i], b = spans2[again.first[RT_HDR_CC] + i];
            CHECK(a.len == b.len && memcmp(f.data + a.at, out + b.at, a.len) == 0);
        }
    }
    tests_run++;
}

int main(int argc, char **argv)
{
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    test_reads_cc_bcc_and_the_alias();
    test_the_general_path_cases();
    test_rewrite();
    test_random_and_mutated_frames();
    printf("test_headers: %u tests passed\n", tests_run);
    return 0;
}
