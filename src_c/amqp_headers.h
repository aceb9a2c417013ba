/*
 * AMQP 0-9-1 content header frames, for the proxy's publish path: read the CC, BCC (and
 * the BCC alias header's) arrays of a message without decoding the rest of its headers
 * table, and rewrite the table (drop BCC and the alias, add the planned BCC entry), so that
 * a message whose headers change on every publish costs no field-table decoding in Python.
 *
 * Pure C99, no Python, no allocation, no state. Anything this module does not take as the
 * simple case (a property flags continuation or the unused flag bit, properties that do not
 * fill the frame exactly, a malformed table, a CC/BCC/alias
 * that is not an array of ASCII long strings, a name given twice) is answered
 * RT_HDR_GENERAL: the caller then takes its general path, which knows every rule.
 *
 * Content header frame: type 2 | channel (2) | size (4) | class (2) | weight (2) |
 * body size (8) | property flags (2) | properties in flag order | 0xCE. The properties
 * before `headers` are content-type and content-encoding (short strings); `headers` is a
 * field table (a u32 byte length, then entries: short string name, type octet, value).
 */
#ifndef RT_AMQP_HEADERS_H
#define RT_AMQP_HEADERS_H

#include <stddef.h>
#include <stdint.h>

#define RT_HDR_GENERAL (-1L)

enum { RT_HDR_CC = 0, RT_HDR_BCC = 1, RT_HDR_ALIAS = 2, RT_HDR_NAMES = 3 };

/* A span of the frame: frame[at .. at + len). */
typedef struct {
    size_t at;
    size_t len;
} rt_span;

/* What rt_header_keys read of a frame. */
typedef struct {
    size_t table_at;        /* where the headers table's u32 length is, or where the table
                               would go if the frame has none (then has_table is 0) */
    size_t table_end;       /* the end of the table (== table_at without one) */
    int has_table;
    int present[RT_HDR_NAMES];   /* CC, BCC, the alias: the entry is in the table */
    rt_span entry[RT_HDR_NAMES]; /* that whole entry (name included) */
    size_t first[RT_HDR_NAMES];  /* its strings are spans[first .. first + count) */
    size_t count[RT_HDR_NAMES];
} rt_header_info;

/* Reads the whole content header frame f[0 .. len) (ending with 0xCE). `alias` (alias_len
 * bytes, may be 0 long: none) names the BCC alias header. On the simple case, returns how many
 * strings the CC, BCC and alias arrays hold in all and writes up to `cap` of their spans to
 * `spans` (CC's first, then BCC's, then the alias's; call again with room for all if the
 * answer is larger than cap); each string is ASCII and at most `max_entry` bytes. Otherwise
 * RT_HDR_GENERAL. */
long rt_header_keys(const uint8_t *f, size_t len, const uint8_t *alias, size_t alias_len,
                    size_t max_entry, rt_header_info *info, rt_span *spans, size_t cap);

/* The frame f as read into `info`, with the BCC and alias entries left out and `entry`
 * (entry_len bytes: one encoded table entry, or nothing) added at the end of the table; a
 * frame without a headers table gets one (which stays, empty, if the frame had one with only
 * BCC or the alias). Writes it to out when it fits in `cap` bytes; returns its length either
 * way (call again with that much room), or 0 if it would not be a frame (over 4 GiB). */
size_t rt_header_rewrite(const uint8_t *f, size_t len, const rt_header_info *info,
                         const uint8_t *entry, size_t entry_len, uint8_t *out, size_t cap);

#endif
