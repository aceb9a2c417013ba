/* AMQP 0-9-1 frame scanning: see amqp_frames.h. */
#include "amqp_frames.h"

#include <string.h>

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static uint64_t get_u64(const uint8_t *p)
{
    return (uint64_t)get_u32(p) << 32 | get_u32(p + 4);
}

/* The frame at buf[pos..len): 1 and its end if it is complete and passes the rules' checks,
 * else 0 (incomplete, too large or not ending with 0xCE). */
static int whole_frame(const uint8_t *buf, size_t len, size_t pos, const rt_scan_rules *rules,
                       size_t *end)
{
    uint64_t size;
    if (len - pos < 7)
        return 0;
    size = (uint64_t)get_u32(buf + pos + 3) + 8;
    if ((rules->limit && size > rules->limit) || size > len - pos)
        return 0;
    if (rules->check_end && buf[pos + size - 1] != RT_FRAME_END)
        return 0;
    *end = pos + (size_t)size;
    return 1;
}

/* The end of the body frames of `channel` that follow at once from pos and carry exactly
 * `remaining` bytes, each whole and within the rules; 0 if they do not (pos if remaining is
 * 0). */
static size_t body_end(const uint8_t *buf, size_t len, size_t pos, uint16_t channel,
                       uint64_t remaining, const rt_scan_rules *rules)
{
    while (remaining) {
        size_t end;
        uint64_t payload;
        if (!whole_frame(buf, len, pos, rules, &end) || buf[pos] != RT_FRAME_BODY ||
            get_u16(buf + pos + 1) != channel)
            return 0;
        payload = end - pos - 8;
        if (payload > remaining)
            return 0;
        remaining -= payload;
        pos = end;
    }
    return pos;
}

/* A basic.publish at out->start..out->end: its exchange name, and its content if that
 * follows at once, complete. */
static void parse_publish(const uint8_t *buf, size_t len, const rt_scan_rules *rules,
                          rt_frame *out)
{
    size_t payload_end = out->end - 1, name_end, key_end, pos, header_end, end;
    if (out->start + 13 >= payload_end)
        return;
    name_end = out->start + 14 + buf[out->start + 13];
    if (name_end >= payload_end)
        return;
    key_end = name_end + 1 + buf[name_end];
    if (key_end >= payload_end) /* the bits octet lies within the payload too */
        return;
    out->name_start = out->start + 14;
    out->name_end = name_end;
    pos = out->end;
    if (!whole_frame(buf, len, pos, rules, &header_end) || buf[pos] != RT_FRAME_HEADER ||
        get_u16(buf + pos + 1) != out->channel || header_end - pos < 8 + 14)
        return;
    end = body_end(buf, len, header_end, out->channel, get_u64(buf + pos + 7 + 4), rules);
    if (!end)
        return;
    out->header_end = header_end;
    out->content_end = end;
}

static int stops(const rt_scan_rules *rules, uint8_t type, uint16_t channel, uint32_t method)
{
    size_t i;
    for (i = 0; i < rules->n_channels; i++)
        if (rules->channels[i] == channel)
            return 1;
    if (type != RT_FRAME_METHOD)
        return 0;
    for (i = 0; i < rules->n_methods; i++)
        if (rules->methods[i] == method)
            return 1;
    return 0;
}

int rt_frame_scan(const uint8_t *buf, size_t len, size_t pos, const rt_scan_rules *rules,
                  rt_frame *out)
{
    out->method = 0;
    out->channel = 0;
    out->type = 0;
    out->name_start = out->name_end = out->header_end = out->content_end = 0;
    while (pos <= len && len - pos >= 7) {
        uint64_t size = (uint64_t)get_u32(buf + pos + 3) + 8;
        size_t end;
        uint8_t type;
        uint16_t channel;
        uint32_t method = 0;
        if (rules->limit && size > rules->limit) {
            out->start = pos;
            out->end = size > (uint64_t)SIZE_MAX - pos ? SIZE_MAX : pos + (size_t)size;
            return RT_SCAN_TOO_LARGE;
        }
        if (size > len - pos)
            break;
        end = pos + (size_t)size;
        if (rules->check_end && buf[end - 1] != RT_FRAME_END) {
            out->start = pos;
            out->end = end;
            return RT_SCAN_BAD_END;
        }
        type = buf[pos];
        channel = get_u16(buf + pos + 1);
        if (type == RT_FRAME_METHOD && size >= 8 + 4)
            method = get_u32(buf + pos + 7);
        if (stops(rules, type, channel, method)) {
            out->start = pos;
            out->end = end;
            out->type = type;
            out->channel = channel;
            out->method = method;
            if (type == RT_FRAME_METHOD && method == RT_BASIC_PUBLISH)
                parse_publish(buf, len, rules, out);
            return RT_SCAN_STOP;
        }
        pos = end;
    }
    out->start = pos < len ? pos : len;
    out->end = out->start;
    return RT_SCAN_MORE;
}

size_t rt_frame_repeats(const uint8_t *buf, size_t len, size_t pos, const uint8_t *head,
                        size_t head_len, const uint8_t *rep, size_t rep_len,
                        const rt_scan_rules *rules, uint8_t *out, size_t *count,
                        size_t *out_len)
{
    size_t header_at, written = 0, n = 0;
    uint16_t channel;
    uint64_t body_size;
    *count = 0;
    *out_len = 0;
    /* the head must be a whole frame, then a content header frame long enough for the body
     * size (as the scanner found it) */
    if (head_len < 8 + 8 + 14)
        return pos;
    header_at = 8 + (size_t)get_u32(head + 3);
    if (header_at > head_len - (8 + 14) || head[header_at] != RT_FRAME_HEADER ||
        head_len - header_at != 8 + (size_t)get_u32(head + header_at + 3))
        return pos;
    channel = get_u16(head + 1);
    body_size = get_u64(head + header_at + 7 + 4);
    while (pos <= len && len - pos >= head_len && memcmp(buf + pos, head, head_len) == 0) {
        size_t end = body_end(buf, len, pos + head_len, channel, body_size, rules);
        if (!end)
            break;
        if (out != NULL) {
            memcpy(out + written, rep, rep_len);
            memcpy(out + written + rep_len, buf + pos + head_len, end - pos - head_len);
        }
        written += rep_len + (end - pos - head_len);
        n++;
        pos = end;
    }
    *count = n;
    *out_len = written;
    return pos;
}

size_t rt_frame_renames(const uint8_t *buf, size_t len, size_t pos, uint16_t channel,
                        const uint8_t *name, size_t name_len, const uint8_t *rep,
                        size_t rep_len, size_t max, const rt_scan_rules *rules, uint8_t *out,
                        size_t *count, size_t *out_len)
{
    size_t written = 0, n = 0;
    *count = 0;
    *out_len = 0;
    if (rep_len < 1 || rep_len != 1 + (size_t)rep[0])
        return pos;
    while (n < max && pos <= len) {
        size_t publish_end, key_at, key_end, end, i, size;
        rt_frame publish;
        if (!whole_frame(buf, len, pos, rules, &publish_end) || buf[pos] != RT_FRAME_METHOD ||
            get_u16(buf + pos + 1) != channel || publish_end - pos < 8 + 4 ||
            get_u32(buf + pos + 7) != RT_BASIC_PUBLISH)
            break;
        /* its fields within the frame and its content complete, as the scanner finds them */
        publish.start = pos;
        publish.end = publish_end;
        publish.channel = channel;
        publish.name_start = publish.name_end = publish.header_end = publish.content_end = 0;
        parse_publish(buf, len, rules, &publish);
        if (!publish.content_end || publish.name_end - publish.name_start != name_len ||
            memcmp(buf + publish.name_start, name, name_len) != 0 ||
            (buf[publish_end + 19] & 0x20) != 0) /* the headers flag, bit 13 */
            break;
        key_at = publish.name_end;
        key_end = key_at + 1 + buf[key_at];
        for (i = key_at + 1; i < key_end; i++)
            if (buf[i] == '*' || buf[i] == '#')
                break;
        if (i < key_end)
            break;
        end = publish.content_end;
        /* class, method, reserved (6) + exchange + routing key + bits */
        size = 6 + rep_len + (key_end - key_at) + 1;
        if (out != NULL) {
            uint8_t *o = out + written;
            o[0] = RT_FRAME_METHOD;
            o[1] = (uint8_t)(channel >> 8);
            o[2] = (uint8_t)channel;
            o[3] = (uint8_t)(size >> 24);
            o[4] = (uint8_t)(size >> 16);
            o[5] = (uint8_t)(size >> 8);
            o[6] = (uint8_t)size;
            memcpy(o + 7, buf + pos + 7, 6);
            memcpy(o + 13, rep, rep_len);
            memcpy(o + 13 + rep_len, buf + key_at, key_end - key_at + 1);
            o[7 + size] = RT_FRAME_END;
            memcpy(o + 8 + size, buf + publish_end, end - publish_end);
        }
        written += 8 + size + (end - publish_end);
        n++;
        pos = end;
    }
    *count = n;
    *out_len = written;
    return pos;
}

size_t rt_frame_deliveries(const uint8_t *buf, size_t len, size_t pos, uint16_t channel,
                           const rt_scan_rules *rules, size_t *at, size_t max, size_t *count)
{
    size_t n = 0;
    *count = 0;
    while (n < max && pos <= len) {
        size_t deliver_end, field, header_end, end;
        if (!whole_frame(buf, len, pos, rules, &deliver_end) || buf[pos] != RT_FRAME_METHOD ||
            get_u16(buf + pos + 1) != channel || deliver_end - pos < 8 + 4 ||
            get_u32(buf + pos + 7) != RT_BASIC_DELIVER)
            break;
        /* consumer tag, delivery tag (8) and redelivered (1), exchange, routing key: all
         * before the end octet */
        field = pos + 11;
        if (field >= deliver_end - 1)
            break;
        field += 1 + (size_t)buf[field] + 9;
        if (field >= deliver_end - 1)
            break;
        field += 1 + (size_t)buf[field];
        if (field >= deliver_end - 1)
            break;
        field += 1 + (size_t)buf[field];
        if (field > deliver_end - 1)
            break;
        if (!whole_frame(buf, len, deliver_end, rules, &header_end) ||
            buf[deliver_end] != RT_FRAME_HEADER || get_u16(buf + deliver_end + 1) != channel ||
            header_end - deliver_end < 8 + 14)
            break;
        end = body_end(buf, len, header_end, channel, get_u64(buf + deliver_end + 7 + 4), rules);
        if (!end)
            break;
        at[2 * n] = pos;
        at[2 * n + 1] = end;
        n++;
        pos = end;
    }
    *count = n;
    return pos;
}
