"""The frame-level fast path and the pure helpers, without a broker."""
from __future__ import annotations

import random

import pika.spec
from pika import frame as pika_frame

from rtroute.amqp import frames
from rtroute.shovel.commands import format_table
from rtroute.shovel.destination import forward_header_table
from rtroute.shovel.status import ShovelState, StatusRegistry, scrub, uri_without_credentials

from .conftest import shovel_config, toml_shovel


class FakeConnection:
    """What FrameReader needs of a pika connection."""

    def __init__(self) -> None:
        self._frame_buffer = b""
        self.bytes_received = 0
        self.processed: list = []

    def _process_frame(self, value) -> None:
        self.processed.append(value)


def deliver_frames(channel: int, tag: int, exchange: str, key: str, body: bytes,
                   frame_max: int = 131072, headers: dict | None = None) -> bytes:
    method = pika.spec.Basic.Deliver(consumer_tag="ctag-1", delivery_tag=tag,
                                     redelivered=bool(tag % 2), exchange=exchange,
                                     routing_key=key)
    props = pika.spec.BasicProperties(headers=headers, message_id=f"m{tag}")
    out = [pika_frame.Method(channel, method).marshal(),
           pika_frame.Header(channel, len(body), props).marshal()]
    step = frame_max - 8
    out += [pika_frame.Body(channel, body[i:i + step]).marshal()
            for i in range(0, len(body), step)]
    return b"".join(out)


def test_the_frame_reader_intercepts_deliveries_across_any_read_boundaries():
    rng = random.Random(7)
    stream = b"".join([
        pika_frame.Method(1, pika.spec.Basic.ConsumeOk("ctag-1")).marshal(),
        deliver_frames(1, 1, "ex", "a.b", b"hello"),
        deliver_frames(1, 2, "", "queue", b""),                       # empty body
        pika_frame.Heartbeat().marshal(),
        deliver_frames(1, 3, "ex2", "k" * 255, b"x" * 10_000, frame_max=4096),
        deliver_frames(2, 9, "other", "channel", b"not ours"),       # another channel
        deliver_frames(1, 4, "ü-exchange", "ü.key", b"z", headers={"h": [1, "a"]}),
    ])
    for _attempt in range(20):
        connection = FakeConnection()
        reader = frames.FrameReader(connection)
        got: list = []
        reader.intercept(1, lambda tag, ex, key, parts, got=got: got.append(
            (tag, ex, key, parts)))
        pos = 0
        while pos < len(stream):
            size = rng.choice([1, 2, 7, 100, 4096, 70000])
            reader(stream[pos:pos + size])
            pos += size
        assert [g[0] for g in got] == [1, 2, 3, 4]
        assert got[0][1:3] == (frames.shortstr("ex"), frames.shortstr("a.b"))
        assert got[2][2] == frames.shortstr("k" * 255)
        assert got[3][1:3] == (frames.shortstr("ü-exchange"), frames.shortstr("ü.key"))
        assert [frames.body_of(g[3]) for g in got] == [b"hello", b"", b"x" * 10_000, b"z"]
        assert len(got[2][3]) == 1 + 3                               # header + 3 body frames
        assert frames.decode_properties(got[3][3][0]).headers == {"h": [1, "a"]}
        kinds = [type(v).__name__ for v in connection.processed]
        assert kinds == ["Method", "Heartbeat", "Method", "Header", "Body"]  # to pika
        assert connection._frame_buffer == b""
        assert connection.bytes_received == len(stream)


def test_detailed_interception_adds_the_consumer_tag_and_the_redelivered_flag():
    stream = deliver_frames(1, 1, "ex", "a", b"one") + deliver_frames(1, 2, "ex", "b", b"")
    connection = FakeConnection()
    reader = frames.FrameReader(connection)
    got: list = []
    reader.intercept(1, lambda *args: got.append(args), detailed=True)
    reader(stream)
    assert [(g[0], g[4], g[5]) for g in got] == [(1, "ctag-1", True), (2, "ctag-1", False)]
    assert [frames.body_of(g[3]) for g in got] == [b"one", b""]


def test_publish_frame_decodes_as_basic_publish():
    data = frames.publish_frame(3, frames.shortstr("ex"), frames.shortstr("rk"), True)
    consumed, value = pika_frame.decode_frame(data)
    assert consumed == len(data)
    assert value.channel_number == 3
    method = value.method
    assert isinstance(method, pika.spec.Basic.Publish)
    assert (method.exchange, method.routing_key, method.mandatory, method.immediate) == (
        "ex", "rk", True, False)


def test_rechannel_moves_frames_to_another_channel_and_a_smaller_frame_size():
    raw = deliver_frames(1, 1, "ex", "k", bytes(range(256)) * 100)
    connection = FakeConnection()
    reader = frames.FrameReader(connection)
    got = []
    reader.intercept(1, lambda *args: got.append(args[3]))
    reader(raw)
    (parts,) = got
    moved = frames.rechannel(parts, 5, 4096)
    assert all(len(p) <= 4096 for p in moved)
    decoded = [pika_frame.decode_frame(p)[1] for p in moved]
    assert {f.channel_number for f in decoded} == {5}
    assert b"".join(f.fragment for f in decoded[1:]) == bytes(range(256)) * 100
    header = frames.header_frame(5, moved[0], pika.spec.BasicProperties(app_id="new"))
    assert pika_frame.decode_frame(header)[1].properties.app_id == "new"
    assert frames.body_size(header) == 25600


def test_uri_without_credentials_is_the_plugins_remove_credentials():
    assert uri_without_credentials("amqp://u:p@host:5673/v?heartbeat=5") == "amqp://host:5673/v"
    assert uri_without_credentials("amqps://u:p@host/%2F") == "amqps://host/%2F"
    assert uri_without_credentials("amqp://") == "amqp://"


def test_forward_header_table_static_keys_in_the_plugins_order():
    config = shovel_config(toml_shovel("s", "amqp://a:b@h1/v", "amqp://h2", 'queue = "q"'))
    table = forward_header_table(config, "rabbit@c", "amqp://a:b@h1/v", "amqp://h2")
    assert list(table.items()) == [
        ("shovelled-by", "rabbit@c"), ("shovel-type", "static"), ("shovel-name", "s"),
        ("src-uri", "amqp://h1/v"), ("dest-uri", "amqp://h2")]


def test_status_registry_snapshot_metrics_and_table():
    registry = StatusRegistry()
    config = shovel_config(toml_shovel("s1", "amqp://u:hunter22@h1/v", "amqp://h2",
                                       'queue = "q"'))
    status = registry.register(config)
    status.counters["moved"] = 12
    status.set_state(ShovelState.TERMINATED, "failed: amqp://u:hunter22@h1/v said hunter22")
    (row,) = registry.snapshot()
    assert row["state"] == "terminated" and "hunter22" not in row["reason"]
    # as the plugin shows it: without credentials
    assert row["source"] == row["source_uri"] == "amqp://h1/v"
    assert (row["type"], row["termination_reason"]) == ("static", row["reason"])
    assert not registry.healthy
    metrics = registry.metrics()
    assert metrics["rtroute_shovel_moved_total"]["samples"] == [({"shovel": "s1"}, 12)]
    table = format_table([row])
    assert table.splitlines()[1].split()[:4] == ["s1", "-", "static", "terminated"]
    assert scrub("x amqps://a:b@c/d y") == "x amqps://a:***@c/d y"


class TerminableConnection(FakeConnection):
    def __init__(self) -> None:
        super().__init__()
        self.terminated: list[Exception] = []

    def _terminate_stream(self, error: Exception) -> None:
        self.terminated.append(error)


def test_a_frame_without_its_end_octet_tears_the_connection_down(caplog):
    good = deliver_frames(1, 1, "ex", "a.b", b"hello")
    bad = bytearray(deliver_frames(1, 2, "ex", "a.b", b"world"))
    bad[-1] = 0x00  # the body frame's end octet
    connection = TerminableConnection()
    reader = frames.FrameReader(connection)
    got: list = []
    reader.intercept(1, lambda tag, *rest: got.append(tag))
    reader(good + bytes(bad) + good)
    assert got == [1]  # the bad delivery and everything after it are not delivered
    assert len(connection.terminated) == 1
    assert "FRAME_ERROR" in str(connection.terminated[0])
    assert connection._frame_buffer == b""
    reader(good)  # later reads of the dying stream are ignored
    assert got == [1]
    assert any("FRAME_ERROR" in r.getMessage() for r in caplog.records)


def test_a_run_of_whole_deliveries_is_read_in_one_native_call(monkeypatch):
    """The sidecar's ingress: deliveries that came whole in one read are parsed at once
    (rtroute.core.frames' ``deliveries``), not frame by frame in Python; each callback sees
    the reader past its delivery, and a delivery cut by the read waits for the rest."""
    calls = []
    native = frames._DELIVERIES

    def spy(*args):
        calls.append(args[1])
        return native(*args)

    monkeypatch.setattr(frames, "_DELIVERIES", spy)
    stream = b"".join(deliver_frames(1, tag, "ex", f"k{tag}", b"x" * tag) for tag in range(1, 101))
    connection = FakeConnection()
    reader = frames.FrameReader(connection)
    got: list = []
    reader.intercept(1, lambda *args: got.append((args, connection.bytes_received)),
                     detailed=True)
    reader(stream[:-3])
    # the run, then the delivery cut short: read again from there, its frames in Python
    assert calls == [0, got[-1][1]] and len(got) == 99
    reader(stream[-3:])
    assert len(calls) == 2
    assert [g[0][0] for g in got] == list(range(1, 101))
    assert [frames.body_of(g[0][3]) for g in got] == [b"x" * tag for tag in range(1, 101)]
    assert [g[1] for g in got[:99]] == [len(b"".join(deliver_frames(
        1, tag, "ex", f"k{tag}", b"x" * tag) for tag in range(1, n + 1))) for n in range(1, 100)]
    assert connection.bytes_received == len(stream) and connection._frame_buffer == b""
