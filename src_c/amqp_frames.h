/*
 * AMQP 0-9-1 frame scanning for the proxy: finds, in a buffer of frames, the next frame the
 * proxy has to look at, so that the frames it passes on as they are cost no Python.
 *
 * Pure C99, no Python, no allocation, no state: every call gets the whole rule set. The
 * caller keeps the bytes (a connection's receive buffer) and decides what a stop means.
 *
 * Frame layout: type (1) | channel (2) | payload size (4) | payload | 0xCE. A method frame's
 * payload starts with its class id and method id (two u16, taken here as one u32,
 * class << 16 | method); basic.publish then holds a reserved u16, the exchange and routing key
 * shortstrs and one octet of bits; a content header frame's payload holds class id, weight
 * (u16 each), the body size (u64) and the property flags; body frames carry the body.
 */
#ifndef RT_AMQP_FRAMES_H
#define RT_AMQP_FRAMES_H

#include <stddef.h>
#include <stdint.h>

#define RT_FRAME_METHOD 1u
#define RT_FRAME_HEADER 2u
#define RT_FRAME_BODY 3u
#define RT_FRAME_END 0xCEu
#define RT_BASIC_PUBLISH ((60u << 16) | 40u)
#define RT_BASIC_DELIVER ((60u << 16) | 60u)

/* What stops a scan: a method frame whose method id is one of `methods`, or any frame on
 * one of `channels` (both lists short: compared one by one). */
typedef struct {
    const uint32_t *methods;
    size_t n_methods;
    const uint16_t *channels;
    size_t n_channels;
    uint64_t limit;   /* the largest frame allowed, header and end octet included; 0: any */
    int check_end;    /* every frame must end with 0xCE */
} rt_scan_rules;

/* The frame a scan stopped at. */
typedef struct {
    size_t start;        /* the frame is buf[start..end); every byte before start passes */
    size_t end;
    uint32_t method;     /* a method frame's id; 0 for other frames and for a method frame
                            whose payload is shorter than the two ids */
    uint16_t channel;
    uint8_t type;
    /* basic.publish whose fields lie within its frame: its exchange name is
     * buf[name_start..name_end); 0 and 0 otherwise. */
    size_t name_start, name_end;
    /* that publish's content, when it follows at once and complete on the same channel (a
     * header frame, then body frames whose payloads add up to the header's body size, each
     * within the rules' limit and end octet check): where the header frame and the last body
     * frame end (content_end == header_end for an empty body); 0 and 0 otherwise. */
    size_t header_end, content_end;
} rt_frame;

enum {
    RT_SCAN_STOP = 1,       /* *out is the frame that stops the scan */
    RT_SCAN_MORE = 0,       /* no stop before the buffer ends: out->start is where the bytes
                               of an incomplete frame begin (len if none) */
    RT_SCAN_TOO_LARGE = -1, /* the frame at out->start announces more than the limit:
                               out->end is where it would end (it may lie beyond len) */
    RT_SCAN_BAD_END = -2    /* the frame buf[out->start..out->end) does not end with 0xCE */
};

/* Scans the frames of buf[pos..len) under `rules`; see the RT_SCAN_* results. Frames are
 * checked (limit first, as soon as their 7 header bytes are there; then the end octet, once
 * complete) in order, so an error is reported only where no stop comes before it. */
int rt_frame_scan(const uint8_t *buf, size_t len, size_t pos, const rt_scan_rules *rules,
                  rt_frame *out);

/* A run of messages that repeat one: from pos, each message whose publish and content
 * header frames are exactly head[0..head_len) (a basic.publish frame, then a content header
 * frame, as rt_frame_scan found them: so the same channel, exchange, routing key, bits,
 * properties and body size) and whose body frames follow at once and complete on that
 * channel, each within the rules' limit and end octet check. Returns where the run ends (pos
 * if there is none, or if head is not such a pair of frames; the rules' stop methods and
 * channels are not consulted: the run holds that channel's publishes, the caller's to judge
 * as it judged the one it took head from),
 * with *count its messages and *out_len the bytes of the run once each message's head is
 * replaced by rep[0..rep_len). With out != NULL those bytes are written there too (out_len
 * bytes: call once with NULL to know how many). */
size_t rt_frame_repeats(const uint8_t *buf, size_t len, size_t pos, const uint8_t *head,
                        size_t head_len, const uint8_t *rep, size_t rep_len,
                        const rt_scan_rules *rules, uint8_t *out, size_t *count,
                        size_t *out_len);

/* A run of publishes that go on as published, to another exchange: from pos, each message
 * that is a basic.publish frame on `channel` (whole, its fields within it) whose exchange is
 * name[0..name_len) and whose routing key holds neither '*' nor '#', followed at once by its
 * content on that channel: a content header frame whose property flags leave out headers
 * (bit 13), then body frames carrying exactly its body size, each frame within the rules'
 * limit and end octet check. At most `max` messages. Each is written with its publish frame
 * rebuilt as class, method and reserved field, the short string rep[0..rep_len) (length
 * octet included) as exchange, its routing key and bits octet, then 0xCE; its header and
 * body frames as they are. Returns where the run ends (pos if there is none), with *count
 * its messages and *out_len the bytes written; with out != NULL those bytes are written
 * there too (call once with NULL to know how many). The rules' stop methods and channels
 * are not consulted (the caller judged the channel and the exchange). */
size_t rt_frame_renames(const uint8_t *buf, size_t len, size_t pos, uint16_t channel,
                        const uint8_t *name, size_t name_len, const uint8_t *rep,
                        size_t rep_len, size_t max, const rt_scan_rules *rules, uint8_t *out,
                        size_t *count, size_t *out_len);

/* A run of whole deliveries on `channel`: from pos, each a basic.deliver method frame on
 * `channel` whose fields (consumer tag, delivery tag, redelivered, exchange, routing key) lie
 * within it, followed at once by its content on that channel: a content header frame long
 * enough for its body size, then body frames whose payloads add up to exactly that size,
 * each frame within the rules' limit and end octet check. At most `max`; delivery i is
 * buf[at[2 * i]..at[2 * i + 1]) (its header frame starts where its deliver frame ends).
 * Returns where the run ends (pos if there is none), with *count its deliveries. The rules'
 * stop methods and channels are not consulted. */
size_t rt_frame_deliveries(const uint8_t *buf, size_t len, size_t pos, uint16_t channel,
                           const rt_scan_rules *rules, size_t *at, size_t max, size_t *count);

#endif
