/* AMQP 0-9-1 content header frames: see amqp_headers.h. */
#include "amqp_headers.h"

#include <string.h>

#define FLAGS_AT 19u               /* type, channel, size, class, weight, body size */
#define FLAG_CONTENT_TYPE 0x8000u
#define FLAG_CONTENT_ENCODING 0x4000u
#define FLAG_HEADERS 0x2000u
#define FLAG_CONTINUATION 0x0001u
#define FLAG_UNUSED 0x0002u

/* The properties after `headers`, in flag order: 1 an octet, 8 a timestamp, 0 a short string
 * (delivery mode, priority, correlation id, reply to, expiration, message id, timestamp,
 * type, user id, app id, cluster id). */
static const struct {
    unsigned flag;
    unsigned size;
} LATER[] = {{0x1000u, 1}, {0x0800u, 1}, {0x0400u, 0}, {0x0200u, 0}, {0x0100u, 0},
             {0x0080u, 0}, {0x0040u, 8}, {0x0020u, 0}, {0x0010u, 0}, {0x0008u, 0},
             {0x0004u, 0}};

/* 1 if the properties after `headers` that `flags` announce fill f[pos .. end) exactly. */
static int later_properties_fill(const uint8_t *f, size_t pos, size_t end, unsigned flags)
{
    size_t i;
    for (i = 0; i < sizeof LATER / sizeof LATER[0]; i++) {
        size_t size;
        if (!(flags & LATER[i].flag))
            continue;
        if (pos >= end)
            return 0;
        size = LATER[i].size ? LATER[i].size : 1u + f[pos];
        if (size > end - pos)
            return 0;
        pos += size;
    }
    return pos == end;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void put_u32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* The size of a fixed-size value of type `tag`; -1: a u32 length then that many bytes; -2:
 * no such type (RabbitMQ's dialect, as rtroute/amqp/field_table.py reads it). */
static int value_size(uint8_t tag)
{
    switch (tag) {
    case 'V': return 0;
    case 't': case 'b': case 'B': return 1;
    case 's': case 'u': return 2;
    case 'I': case 'i': case 'f': return 4;
    case 'D': return 5;
    case 'l': case 'L': case 'd': case 'T': return 8;
    case 'S': case 'x': case 'A': case 'F': return -1;
    default: return -2;
    }
}

#define MAX_DEPTH 64

/* Checks the values (entries if `table`) filling t[pos .. end), nested ones included, as the
 * general path's decoder would: 1 if well formed. */
static int well_formed(const uint8_t *t, size_t pos, size_t end, int table)
{
    size_t limits[MAX_DEPTH];
    int tables[MAX_DEPTH];
    int depth = 0;
    for (;;) {
        uint8_t tag;
        int size;
        if (pos == end) {
            if (depth == 0)
                return 1;
            depth--;
            end = limits[depth];
            table = tables[depth];
            continue;
        }
        if (table) {
            pos += 1u + t[pos];
            if (pos >= end)
                return 0;
        }
        tag = t[pos++];
        size = value_size(tag);
        if (size >= 0) {
            if ((size_t)size > end - pos)
                return 0;
            pos += (size_t)size;
            continue;
        }
        if (size == -2 || end - pos < 4 || get_u32(t + pos) > end - pos - 4)
            return 0;
        if (tag == 'A' || tag == 'F') {
            if (depth == MAX_DEPTH)
                return 0;   /* deeper than anything a client needs: the general path */
            limits[depth] = end;
            tables[depth] = table;
            depth++;
            end = pos + 4 + get_u32(t + pos);
            table = tag == 'F';
            pos += 4;
        } else {
            pos += 4 + (size_t)get_u32(t + pos);
        }
    }
}

/* The strings of the array value a[pos .. end) (its 4-byte length already read): each an
 * 'S' of ASCII at most max_entry bytes, else RT_HDR_GENERAL; their number otherwise (spans
 * written from spans[n] while under cap). */
static long array_strings(const uint8_t *f, size_t pos, size_t end, size_t max_entry,
                          rt_span *spans, size_t n, size_t cap)
{
    long found = 0;
    while (pos < end) {
        size_t size, i;
        if (f[pos] != 'S' || end - pos - 1 < 4)
            return RT_HDR_GENERAL;
        size = get_u32(f + pos + 1);
        pos += 5;
        if (size > end - pos || size > max_entry)
            return RT_HDR_GENERAL;
        for (i = 0; i < size; i++)
            if (f[pos + i] & 0x80u)
                return RT_HDR_GENERAL;
        if (n + (size_t)found < cap) {
            spans[n + (size_t)found].at = pos;
            spans[n + (size_t)found].len = size;
        }
        found++;
        pos += size;
    }
    return found;
}

static int name_is(const uint8_t *name, size_t len, const char *want, size_t want_len)
{
    return len == want_len && memcmp(name, want, len) == 0;
}

long rt_header_keys(const uint8_t *f, size_t len, const uint8_t *alias, size_t alias_len,
                    size_t max_entry, rt_header_info *info, rt_span *spans, size_t cap)
{
    unsigned flags;
    size_t pos, end, payload;
    long total = 0;
    int k;
    if (f == NULL || info == NULL || len < FLAGS_AT + 3 || f[0] != 2 || f[len - 1] != 0xCE)
        return RT_HDR_GENERAL;
    payload = get_u32(f + 3);
    if (payload != len - 8)
        return RT_HDR_GENERAL;
    memset(info, 0, sizeof *info);
    flags = (unsigned)f[FLAGS_AT] << 8 | f[FLAGS_AT + 1];
    if (flags & (FLAG_CONTINUATION | FLAG_UNUSED))
        return RT_HDR_GENERAL;
    end = len - 1;
    pos = FLAGS_AT + 2;
    if (flags & FLAG_CONTENT_TYPE) {
        if (pos >= end || (size_t)f[pos] + 1 > end - pos)
            return RT_HDR_GENERAL;
        pos += 1u + f[pos];
    }
    if (flags & FLAG_CONTENT_ENCODING) {
        if (pos >= end || (size_t)f[pos] + 1 > end - pos)
            return RT_HDR_GENERAL;
        pos += 1u + f[pos];
    }
    info->table_at = info->table_end = pos;
    if (!(flags & FLAG_HEADERS))
        return later_properties_fill(f, pos, end, flags) ? 0 : RT_HDR_GENERAL;
    if (end - pos < 4 || get_u32(f + pos) > end - pos - 4)
        return RT_HDR_GENERAL;
    info->has_table = 1;
    info->table_end = pos + 4 + get_u32(f + pos);
    if (!later_properties_fill(f, info->table_end, end, flags) ||
        !well_formed(f, pos + 4, info->table_end, 1))
        return RT_HDR_GENERAL;
    /* the entries: well formed, so every length below stays within the table */
    pos += 4;
    while (pos < info->table_end) {
        size_t start = pos, name_len = f[pos], stop;
        const uint8_t *name = f + pos + 1;
        uint8_t tag;
        int which = -1;
        pos += 1 + name_len;
        tag = f[pos++];
        if (name_is(name, name_len, "CC", 2))
            which = RT_HDR_CC;
        else if (name_is(name, name_len, "BCC", 3))
            which = RT_HDR_BCC;
        else if (alias_len && name_len == alias_len && memcmp(name, alias, alias_len) == 0)
            which = RT_HDR_ALIAS;
        if (value_size(tag) >= 0) {
            stop = pos + (size_t)value_size(tag);
        } else {
            stop = pos + 4 + get_u32(f + pos);
        }
        if (which >= 0) {
            long found;
            if (info->present[which] || tag != 'A')
                return RT_HDR_GENERAL;   /* twice, or not an array: the general path's rules */
            found = array_strings(f, pos + 4, stop, max_entry, spans, (size_t)total, cap);
            if (found < 0)
                return RT_HDR_GENERAL;
            info->present[which] = 1;
            info->entry[which].at = start;
            info->entry[which].len = stop - start;
            info->first[which] = (size_t)total;
            info->count[which] = (size_t)found;
            total += found;
        }
        pos = stop;
    }
    for (k = 0; k < RT_HDR_NAMES; k++)
        if (!info->present[k])
            info->first[k] = (size_t)total;
    return total;
}

size_t rt_header_rewrite(const uint8_t *f, size_t len, const rt_header_info *info,
                         const uint8_t *entry, size_t entry_len, uint8_t *out, size_t cap)
{
    /* the entries kept: the table's, minus the BCC and alias entries (in table order) */
    rt_span drop[2];
    size_t n_drop = 0, kept, table_len, total, pos, w, i;
    int add_table = info->has_table || entry_len > 0;
    if (info->present[RT_HDR_BCC])
        drop[n_drop++] = info->entry[RT_HDR_BCC];
    if (info->present[RT_HDR_ALIAS])
        drop[n_drop++] = info->entry[RT_HDR_ALIAS];
    if (n_drop == 2 && drop[1].at < drop[0].at) {
        rt_span t = drop[0];
        drop[0] = drop[1];
        drop[1] = t;
    }
    kept = info->has_table ? info->table_end - info->table_at - 4 : 0;
    for (i = 0; i < n_drop; i++)
        kept -= drop[i].len;
    table_len = kept + entry_len;
    total = len - (info->table_end - info->table_at) + (add_table ? 4 + table_len : 0);
    if (table_len > 0xFFFFFFFFu || total - 8 > 0xFFFFFFFFu)
        return 0;
    if (total > cap)
        return total;
    /* the frame up to the table, flags with the headers bit */
    memcpy(out, f, info->table_at);
    put_u32(out + 3, (uint32_t)(total - 8));
    if (add_table) {
        out[FLAGS_AT] |= (uint8_t)(FLAG_HEADERS >> 8);
        put_u32(out + info->table_at, (uint32_t)table_len);
        w = info->table_at + 4;
        pos = info->has_table ? info->table_at + 4 : info->table_at;
        for (i = 0; i < n_drop; i++) {
            memcpy(out + w, f + pos, drop[i].at - pos);
            w += drop[i].at - pos;
            pos = drop[i].at + drop[i].len;
        }
        memcpy(out + w, f + pos, info->table_end - pos);
        w += info->table_end - pos;
        if (entry_len)
            memcpy(out + w, entry, entry_len);
        w += entry_len;
    } else {
        w = info->table_at;
    }
    /* the properties after the table, and the end octet */
    memcpy(out + w, f + info->table_end, len - info->table_end);
    return total;
}
