"""The one framing module: pure (importable without pika, as on Spark executors), and the
frames it builds are the ones pika's own codec builds."""
from __future__ import annotations

import subprocess
import sys

import pika.frame
import pika.spec

from rtroute.amqp import frame_codec, frames
from rtroute.proxy import wire


def test_it_imports_no_pika():
    code = ("import sys, rtroute.amqp.frame_codec, rtroute.proxy.wire\n"
            "print([m for m in sys.modules if m.split('.')[0] == 'pika'])")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.strip() == "[]", done.stderr


def test_a_publish_frame_is_pikas():
    for mandatory in (False, True):
        ours = frame_codec.publish_frame(7, frame_codec.shortstr("ex"),
                                         frame_codec.shortstr("a.b"), mandatory)
        theirs = pika.frame.Method(7, pika.spec.Basic.Publish(
            exchange="ex", routing_key="a.b", mandatory=mandatory)).marshal()
        assert ours == theirs
    assert wire.publish(7, b"ex", b"a.b", 1) == frame_codec.publish_frame(
        7, b"\x02ex", b"\x03a.b", True)


def test_method_ids_are_pikas():
    assert frame_codec.BASIC_PUBLISH == pika.spec.Basic.Publish.INDEX
    assert wire.BASIC_DELIVER == pika.spec.Basic.Deliver.INDEX
    assert wire.CHANNEL_CLOSE == pika.spec.Channel.Close.INDEX


def test_one_implementation_behind_every_name():
    for name in ("shortstr", "publish_frame", "body_of", "body_size", "rechannel",
                 "PublishFrames", "content_after"):
        assert getattr(frames, name) is getattr(frame_codec, name)
    for name in ("shortstr", "short", "method_frame", "HEAD"):
        assert getattr(wire, name) is getattr(frame_codec, name)


def test_shortstr_takes_text_or_bytes_and_refuses_more_than_255():
    assert frame_codec.shortstr("é") == b"\x02\xc3\xa9" == frame_codec.shortstr("é".encode())
    try:
        frame_codec.shortstr(b"x" * 256)
    except ValueError as exc:
        assert "256 bytes" in str(exc)
    else:
        raise AssertionError("accepted 256 bytes")


def test_a_frame_is_taken_up_to_a_payload_of_frame_max_as_rabbitmq_takes_it():
    # RabbitMQ 3.10.8 and 4.3.6 take a payload of frame_max, close the connection at one more
    assert frame_codec.frame_fits(4096 + 8, 4096)
    assert not frame_codec.frame_fits(4096 + 9, 4096)
    assert frame_codec.frame_fits(1 << 40, 0)  # no limit
    assert frame_codec.frame_size_limit(4096) == 4104 and frame_codec.frame_size_limit(0) == 0
    # what rtroute cuts itself stays within the spec, as RabbitMQ and pika cut bodies
    bodies = frame_codec.body_frames(1, b"x" * 10000, 4096)
    assert [len(b) for b in bodies] == [4096, 4096, 10000 - 2 * 4088 + 8]


def test_body_frames_of_a_payload_of_frame_max_pass_on_as_they_are():
    body = b"y" * 4096
    parts = [pika.frame.Header(1, len(body), pika.spec.BasicProperties()).marshal(),
             frame_codec.HEAD.pack(3, 1, len(body)) + body + b"\xce"]
    moved = frame_codec.rechannel(parts, 2, 4096)
    assert len(moved) == 2 and moved[1][1:3] == b"\x00\x02"
    assert len(frame_codec.rechannel(parts, 2, 4095)) == 3  # cut again
