"""IngressMessage: a delivery as frames, decoded only as far as routing needs, republished as
frames with only the headers table edited."""
from __future__ import annotations

import pika
import pika.spec
from pika import frame as pika_frame

from rtroute.amqp import frames
from rtroute.sidecar.ingress import IngressMessage

DROP = ("x-rtroute-bcc", "BCC")


def delivery(body: bytes, props: pika.BasicProperties, channel: int = 1,
             frame_max: int = 131072) -> list[bytes]:
    parts = [pika_frame.Header(channel, len(body), props).marshal()]
    step = frame_max - 8
    parts += [pika_frame.Body(channel, body[i:i + step]).marshal()
              for i in range(0, len(body), step)]
    return parts


def decoded(data: bytes) -> list:
    out, pos = [], 0
    while pos < len(data):
        consumed, value = pika_frame.decode_frame(data[pos:])
        out.append(value)
        pos += consumed
    return out


def republish(message: IngressMessage, bcc, channel: int = 7) -> list:
    method = frames.publish_frame(channel, frames.shortstr("x.bindings"),
                                  frames.shortstr("a.*"), True)
    data, count = message.republish_frames(channel, method, DROP, bcc)
    values = decoded(data)
    assert len(values) == count
    assert {v.channel_number for v in values} == {channel}
    return values


def test_routing_key_and_headers_are_decoded_and_nothing_else_until_asked():
    props = pika.BasicProperties(headers={"CC": ["c.d"]}, message_id="m1")
    m = IngressMessage("ex", 5, True, frames.shortstr("a.*"), delivery(b"hello", props))
    assert (m.tag, m.redelivered, m.routing_key, m.headers) == (5, True, "a.*", {"CC": ["c.d"]})
    assert m._props is None and m._body is None
    assert m.props.message_id == "m1" and m.body == b"hello" and m.body_size == 5


def test_a_routing_key_that_is_not_utf8_stays_bytes_as_pika_gives_it():
    m = IngressMessage("ex", 1, False, b"\x02\xff\xfe", delivery(b"", pika.BasicProperties()))
    assert m.routing_key == b"\xff\xfe"


def test_republish_adds_bcc_drops_the_alias_and_keeps_the_rest():
    props = pika.BasicProperties(content_type="text/plain", delivery_mode=2, priority=3,
                                 headers={"x-rtroute-bcc": ["k.1"], "keep": "yes"})
    m = IngressMessage("ex", 1, False, frames.shortstr("a.*"), delivery(b"body", props))
    method, header, body = republish(m, ("k.1", "k.2"))
    assert method.method.NAME == "Basic.Publish"
    assert (method.method.exchange, method.method.routing_key) == ("x.bindings", "a.*")
    assert method.method.mandatory
    assert header.properties.headers == {"keep": "yes", "BCC": ["k.1", "k.2"]}
    assert (header.properties.content_type, header.properties.delivery_mode,
            header.properties.priority) == ("text/plain", 2, 3)
    assert header.body_size == 4 and body.fragment == b"body"


def test_republish_without_bcc_or_headers_moves_the_frames_unchanged():
    props = pika.BasicProperties(message_id="m")
    parts = delivery(b"", props)
    m = IngressMessage("ex", 1, False, frames.shortstr("a.b"), parts)
    _method, header = republish(m, ())
    assert header.properties.headers is None and header.properties.message_id == "m"
    assert header.body_size == 0


def test_a_body_of_several_frames_is_republished_frame_for_frame():
    body = bytes(range(256)) * 100
    m = IngressMessage("ex", 1, False, frames.shortstr("a"),
                       delivery(body, pika.BasicProperties(), frame_max=4096))
    values = republish(m, ("k",))
    assert len(values) == 2 + len(m.parts) - 1
    assert b"".join(v.fragment for v in values[2:]) == body
    assert m.body == body


def test_a_headers_table_that_cannot_be_decoded_is_an_error_not_an_exception():
    parts = delivery(b"x", pika.BasicProperties(headers={"a": "b"}))
    header = parts[0]
    broken = header.replace(b"\x01aS", b"\x01aZ")  # an unknown field type
    m = IngressMessage("ex", 1, False, frames.shortstr("k"), [broken, parts[1]])
    assert m.error is not None and "cannot decode the message's headers" in m.error
    assert m.headers is None and m.routing_key == "k"
