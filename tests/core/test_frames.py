"""The AMQP frame scanner: its rules on hand-made frames, for both implementations, and the
native scanner against its pure-Python twin on random buffers (src_c/test_frames.c checks the C
side on its own, under the sanitizers too)."""
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rtroute.core import frames
from rtroute.core.frames import (
    SCAN_BAD_END,
    SCAN_MORE,
    SCAN_STOP,
    SCAN_TOO_LARGE,
    PyFrameScanner,
)

from ..hypothesis_profiles import examples
from .conftest import NATIVE

PUBLISH = 60 << 16 | 40
DELIVER = 60 << 16 | 60
ACK = 60 << 16 | 80
CHANNEL_CLOSE = 20 << 16 | 40
SCANNERS = [pytest.param(PyFrameScanner, id="twin")]
SCANNERS.append(pytest.param(getattr(NATIVE, "FrameScanner", None), id="native",
                             marks=() if NATIVE else pytest.mark.skip("extension not built")))


def frame(kind: int, channel: int, payload: bytes, end: int = 0xCE) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + bytes((end,))


def method(channel: int, method_id: int, fields: bytes = b"") -> bytes:
    return frame(1, channel, struct.pack(">I", method_id) + fields)


def publish(channel: int, exchange: bytes, key: bytes) -> bytes:
    return method(channel, PUBLISH, b"\x00\x00" + bytes((len(exchange),)) + exchange +
                  bytes((len(key),)) + key + b"\x00")


def header(channel: int, body_size: int, flags: int = 0) -> bytes:
    return frame(2, channel, struct.pack(">HHQH", 60, 0, body_size, flags))


def body(channel: int, data: bytes) -> bytes:
    return frame(3, channel, data)


def deliver(channel: int, tag: int, exchange: bytes, key: bytes, ctag: bytes = b"c1",
            redelivered: int = 0) -> bytes:
    return method(channel, DELIVER, bytes((len(ctag),)) + ctag + struct.pack(">QB", tag,
                  redelivered) + bytes((len(exchange),)) + exchange + bytes((len(key),)) + key)


@pytest.fixture(params=SCANNERS)
def scanner_class(request):
    return request.param


def test_the_implementation_in_use_follows_the_core():
    from rtroute.core import IMPLEMENTATION

    assert (frames.FrameScanner is PyFrameScanner) == (IMPLEMENTATION == "reference")


def test_frames_that_do_not_stop_pass(scanner_class):
    data = method(1, ACK, b"\x00" * 9) + header(1, 0) + frame(8, 0, b"")
    scanner = scanner_class([PUBLISH], True)
    assert scanner.scan(data, 0, 0, ()) == (SCAN_MORE, len(data), len(data), 0, 0, 0, None, 0,
                                              0, None)
    assert scanner.scan(bytearray(data[:-3]), 0, 0, ())[:2] == (SCAN_MORE, len(data) - 8)


def test_stop_methods_and_channels(scanner_class):
    close = method(3, CHANNEL_CLOSE, b"\x00\xc8\x00\x00\x00\x00\x00")
    data = method(3, ACK, b"\x00" * 9) + close + body(7, b"hello")
    scanner = scanner_class([CHANNEL_CLOSE], False)
    first = scanner.scan(data, 0, 0, (9, 7))
    assert first[:6] == (SCAN_STOP, 21, 21 + len(close), 1, 3, CHANNEL_CLOSE)
    second = scanner.scan(memoryview(data), first[2], 0, (9, 7))
    assert second[:6] == (SCAN_STOP, first[2], len(data), 3, 7, 0)
    assert scanner.scan(data, second[2], 0, (9, 7))[:2] == (SCAN_MORE, len(data))


def test_publish_is_found_with_its_content(scanner_class):
    message = publish(5, b"logs", b"a.*") + header(5, 150) + body(5, b"x" * 100) + \
        body(5, b"y" * 50)
    data = message + body(5, b"zzz")
    got = scanner_class([PUBLISH], True).scan(data, 0, 131072, ())
    method_end = len(publish(5, b"logs", b"a.*"))
    assert got == (SCAN_STOP, 0, method_end, 1, 5, PUBLISH, b"logs", method_end + 22,
                   len(message), data[:method_end + 22])
    # cut before the content ends: the name, no content
    for cut in range(method_end, len(message)):
        assert scanner_class([PUBLISH], True).scan(data[:cut], 0, 0, ())[6:] == (b"logs", 0, 0,
                                                                                 None)
    # an empty body: the content ends with the header; the default exchange's name is b""
    data = publish(5, b"", b"k") + header(5, 0)
    got = scanner_class([PUBLISH], True).scan(bytearray(data), 0, 0, ())
    assert got[6:] == (b"", len(data), len(data), data)


def test_limit_and_end_octet(scanner_class):
    data = body(1, b"x" * 12) + body(1, b"x" * 13)
    scanner = scanner_class([], True)
    assert scanner.scan(data[:27], 0, 20, ())[:3] == (SCAN_TOO_LARGE, 20, 41)
    assert scanner.scan(data[:26], 0, 20, ())[:2] == (SCAN_MORE, 20)
    bad = data[:19] + b"\xcd" + data[20:]
    assert scanner.scan(bad, 0, 0, ())[:3] == (SCAN_BAD_END, 0, 20)
    assert scanner_class([], False).scan(bad, 0, 0, ())[:2] == (SCAN_MORE, len(data))


def test_malformed_publish_has_no_name(scanner_class):
    for fields in (b"\x00\x00\x09logs\x01k\x00", b"\x00\x00\x04logs\x09k\x00",
                   b"\x00\x00\x04logs\x01k", b"\x00\x00", b""):
        data = method(1, PUBLISH, fields) + header(1, 0)
        got = scanner_class([PUBLISH], True).scan(data, 0, 0, ())
        assert got[0] == SCAN_STOP and got[5] == PUBLISH and got[6:] == (None, 0, 0, None)


def test_bad_arguments(scanner_class):
    scanner = scanner_class([PUBLISH])
    with pytest.raises(ValueError):
        scanner.scan(b"", -1, 0, ())
    with pytest.raises(ValueError):
        scanner.scan(b"", 0, -1, ())
    with pytest.raises(ValueError):
        scanner.repeats(b"", -1, 0, b"", b"")
    with pytest.raises(ValueError):
        scanner.renames(b"", 0, 0, 1, b"logs", b"\x01x", -1)


def test_repeats_of_a_message_are_rewritten_at_once(scanner_class):
    head = publish(5, b"logs", b"a.*") + header(5, 10)
    run = head + body(5, b"0123456789") + head + body(5, b"0123") + body(5, b"456789")
    data = run + publish(5, b"logs", b"a.*") + header(5, 11) + body(5, b"x" * 11)
    scanner = scanner_class([PUBLISH], True)
    assert scanner.repeats(bytearray(data), 0, 0, head, b"NEW") == (
        len(run), 2, b"NEW" + body(5, b"0123456789") + b"NEW" + body(5, b"0123") +
        body(5, b"456789"))
    assert scanner.repeats(data, len(run), 0, head, b"NEW") == (len(run), 0, b"")
    # cut short, beyond the limit, not a publish and a header: the run ends before
    assert scanner.repeats(data[:len(run) - 1], 0, 0, head, b"NEW")[:2] == (len(head) + 18, 1)
    assert scanner.repeats(data, 0, 17, head, b"NEW") == (0, 0, b"")
    assert scanner.repeats(data, 0, 0, head[:-1], b"NEW") == (0, 0, b"")
    assert scanner.repeats(data, 0, 0, head[:10], b"NEW") == (0, 0, b"")


def test_renames_send_literal_publishes_on_as_published(scanner_class):
    from rtroute.proxy import wire

    new = bytes((len(b"logs.bindings"),)) + b"logs.bindings"

    def message(key: bytes, data: bytes, flags: int = 0, exchange: bytes = b"logs",
                channel: int = 5) -> bytes:
        return publish(channel, exchange, key) + header(channel, len(data), flags) + \
            (body(channel, data) if data else b"")

    def renamed(key: bytes, data: bytes, flags: int = 0) -> bytes:
        return wire.renamed_publish(publish(5, b"logs", key), new) + header(5, len(data), flags) \
            + (body(5, data) if data else b"")

    # literal keys, other properties than headers (content type: bit 15) and an empty body
    # are taken; a wildcard key, a headers table, another exchange or channel end the run
    run = [(b"a.b", b"0123"), (b"k.1", b""), (b"", b"xy")]
    data = b"".join(message(k, d) for k, d in run) + message(b"c.d", b"z", 0x8000)
    expected = b"".join(renamed(k, d) for k, d in run) + renamed(b"c.d", b"z", 0x8000)
    scanner = scanner_class([PUBLISH], True)
    assert scanner.renames(bytearray(data), 0, 0, 5, b"logs", new, 100) == (
        len(data), 4, expected)
    for stop in (message(b"a.*", b"x"), message(b"#", b"x"), message(b"a", b"x", 0x2000),
                 message(b"a", b"x", exchange=b"other"), message(b"a", b"x", channel=6),
                 method(5, ACK, b"\x00" * 9)):
        assert scanner.renames(data + stop + data, 0, 0, 5, b"logs", new, 100) == (
            len(data), 4, expected)
    # at most `most`; cut short; beyond the limit; a body split over two frames
    first = len(message(*run[0]))
    assert scanner.renames(data, 0, 0, 5, b"logs", new, 1) == (first, 1, renamed(*run[0]))
    assert scanner.renames(data[:first - 1], 0, 0, 5, b"logs", new, 9) == (0, 0, b"")
    assert scanner.renames(data, 0, 12, 5, b"logs", new, 9) == (0, 0, b"")
    split = publish(5, b"logs", b"s") + header(5, 6) + body(5, b"abc") + body(5, b"def")
    assert scanner.renames(split, 0, 0, 5, b"logs", new, 9) == (
        len(split), 1, wire.renamed_publish(publish(5, b"logs", b"s"), new) + split[
            len(publish(5, b"logs", b"s")):])
    assert scanner.renames(data, 0, 0, 5, b"logs", b"\x05ab", 9) == (0, 0, b"")  # bad name


def test_deliveries_are_read_in_runs(scanner_class):
    one = deliver(1, 7, b"ex", b"a.b", b"ct", 1) + header(1, 5, 0x2000) + body(1, b"hel") + \
        body(1, b"lo")
    two = deliver(1, 2 ** 64 - 1, b"", b"q", "ü".encode()) + header(1, 0)
    data = one + two
    scanner = scanner_class([], True)
    assert scanner.deliveries(bytearray(data), 0, 0, 1) == (len(data), [
        (7, b"\x02ex", b"\x03a.b", "ct", True,
         [header(1, 5, 0x2000), body(1, b"hel"), body(1, b"lo")], len(one)),
        (2 ** 64 - 1, b"\x00", b"\x01q", "ü", False, [header(1, 0)], len(data))])
    assert scanner.deliveries(data, len(one), 0, 1)[1][0][0] == 2 ** 64 - 1
    # the run ends before: another channel, an incomplete delivery, a bad end octet, a frame
    # beyond the limit, a body too long, fields past the frame, anything but a deliver
    for stop in (deliver(2, 1, b"", b"k") + header(2, 0), one[:-1],
                 one[:-1] + b"\x00", deliver(1, 3, b"", b"k") + header(1, 1) + body(1, b"xy"),
                 method(1, DELIVER, b"\x02c"), method(1, DELIVER, b"\x00" + b"\x00" * 9 + b"\x05ab"),
                 publish(1, b"ex", b"k") + header(1, 0), body(1, b"x")):
        assert scanner.deliveries(one + stop + two, 0, 0, 1)[0] == len(one)
    assert scanner.deliveries(data, 0, 20, 1) == (0, [])
    assert scanner.deliveries(data, 0, 0, 2) == (0, [])
    assert scanner.deliveries(data, len(data) + 5, 0, 1) == (len(data) + 5, [])
    many = two * 300
    assert scanner.deliveries(many, 0, 0, 1)[0] == 256 * len(two)  # at most 256 a call
    with pytest.raises(ValueError):
        scanner.deliveries(data, -1, 0, 1)


piece = st.one_of(
    st.builds(lambda c, t, k, data, ctag, r: deliver(c, t, b"ex", k, ctag, r) +
              header(c, len(data)) + (body(c, data) if data else b""),
              st.integers(0, 3), st.integers(0, 2 ** 64 - 1), st.sampled_from([b"a", b""]),
              st.sampled_from([b"", b"ab"]), st.sampled_from([b"", b"c", b"\xff"]),
              st.integers(0, 3)),
    st.builds(lambda c, n: method(c, DELIVER, b"\x01c" + b"\x00" * n), st.integers(0, 3),
              st.integers(0, 14)),
    st.builds(lambda c, k, data, flags: publish(c, b"logs", k) + header(c, len(data), flags) +
              body(c, data),
              st.integers(0, 3), st.sampled_from([b"a", b"a.*", b"#.b", b""]),
              st.sampled_from([b"", b"ab"]), st.sampled_from([0, 0x2000, 0x8000, 0xA000])),
    st.builds(lambda c, n, data: (publish(c, b"logs", b"a") + header(c, len(data)) +
                                  body(c, data)) * n,
              st.integers(0, 3), st.integers(1, 4), st.sampled_from([b"", b"ab", b"xyz"])),
    st.builds(lambda c, e, k, size, cuts, other: publish(c, e, k) + header(c, size) + b"".join(
        body(c if not other else c + 1, b"b" * n) for n in cuts),
        st.integers(0, 3), st.sampled_from([b"", b"logs", b"x"]), st.sampled_from([b"a", b""]),
        st.integers(0, 60), st.lists(st.integers(0, 30), max_size=3), st.booleans()),
    st.builds(lambda c, m, n: method(c, m, b"\x00" * n), st.integers(0, 3),
              st.sampled_from([ACK, CHANNEL_CLOSE, CHANNEL_CLOSE + 1, PUBLISH]),
              st.integers(0, 9)),
    st.builds(lambda c, n: body(c, b"x" * n), st.integers(0, 3), st.integers(0, 40)),
    st.builds(lambda c, n, e: frame(1, c, b"\x00\x3c\x00\x28\x00\x00"[:n], e),
              st.integers(0, 3), st.integers(0, 6), st.sampled_from([0xCE, 0])),
    st.binary(max_size=12),
)


@pytest.mark.skipif(NATIVE is None, reason="extension not built")
@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(piece, max_size=10).map(b"".join),
       st.lists(st.sampled_from([PUBLISH, DELIVER, CHANNEL_CLOSE, CHANNEL_CLOSE + 1]),
                max_size=3),
       st.lists(st.integers(0, 3), max_size=20).map(tuple),
       st.sampled_from([0, 30, 200]), st.booleans())
def test_native_scanner_agrees_with_twin(data, methods, channels, limit, check_end):
    native, twin = NATIVE.FrameScanner(methods, check_end), PyFrameScanner(methods, check_end)
    for cut in range(len(data) + 1):
        pos = 0
        while True:
            got = native.scan(bytearray(data[:cut]), pos, limit, channels)
            assert got == twin.scan(data[:cut], pos, limit, channels)
            if got[0] != SCAN_STOP:
                break
            if got[9] is not None:  # a publish with its content: the run that repeats it
                assert native.repeats(data[:cut], pos, limit, got[9], b"r") == \
                    twin.repeats(memoryview(data[:cut]), pos, limit, got[9], b"r")
            if got[5] == DELIVER:  # the run of whole deliveries from it
                assert native.deliveries(data[:cut], pos, limit, got[4]) == \
                    twin.deliveries(memoryview(data[:cut]), pos, limit, got[4])
            if got[6] is not None:  # a publish: the run of literal ones from it, renamed
                for most in (1, 3, 100):
                    assert native.renames(data[:cut], pos, limit, got[4], got[6], b"\x02nn",
                                          most) == \
                        twin.renames(memoryview(data[:cut]), pos, limit, got[4], got[6],
                                     b"\x02nn", most)
            pos = got[2]


PUBLISHERS = [pytest.param(frames.py_publish_message, id="twin")]
PUBLISHERS.append(pytest.param(getattr(NATIVE, "publish_message", None), id="native",
                               marks=() if NATIVE else pytest.mark.skip("extension not built")))


@pytest.mark.parametrize("publish_message", PUBLISHERS)
@settings(max_examples=examples(200), deadline=None)
@given(st.integers(0, 65535), st.binary(max_size=255), st.binary(max_size=255),
       st.integers(0, 3), st.lists(st.tuples(st.integers(1, 3), st.integers(0, 65535),
                                             st.binary(max_size=40)), max_size=4))
def test_a_message_is_published_on_another_channel(publish_message, channel, exchange, key,
                                                   bits, parts):
    """One publish of a message received on another channel: what the sidecar's ingress
    frames become (the method frame as frame_codec makes it, each part moved)."""
    from rtroute.amqp import frame_codec

    ex, rk = bytes((len(exchange),)) + exchange, bytes((len(key),)) + key
    made = [frame(kind, on, data) for kind, on, data in parts]
    assert publish_message(channel, ex, rk, bits, made) == \
        frame_codec.publish_frame(channel, ex, rk, bits) + \
        b"".join(frame_codec.on_channel(p, channel) for p in made)


@pytest.mark.parametrize("publish_message", PUBLISHERS)
def test_publish_message_refuses_what_is_no_frame(publish_message):
    good = frame(2, 1, b"x" * 14)
    for ex, rk, parts in ((b"\x02a", b"\x00", [good]), (b"", b"\x00", [good]),
                          (b"\x00", b"\x01", [good]), (b"\x00", b"\x00", [b"\x03\x00\x01"])):
        with pytest.raises(ValueError):
            publish_message(1, ex, rk, 1, parts)
    with pytest.raises(OverflowError):
        publish_message(1, b"\x00", b"\x00", 256, [good])
