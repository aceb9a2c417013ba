"""The session's pumps without a broker: what reaches each side does not depend on how the
other side's bytes were cut into reads. A message that arrives whole is handled at one stop of
the frame scanner (its rewrite cached), one cut anywhere is handled frame by frame: both give
the same bytes, with the native scanner and with its pure-Python twin."""
from __future__ import annotations

import asyncio
import random
import struct

import pytest

from rtroute.amqp.content_header import ContentHeader
from rtroute.amqp.field_table import encode_table
from rtroute.core import frames
from rtroute.proxy import session as session_module
from rtroute.proxy import wire
from rtroute.proxy.catalog import RTopic
from rtroute.proxy.confirm_meter import ConfirmMeter
from rtroute.proxy.session import Session

ACK = 60 << 16 | 80


class _Transport:
    def __init__(self) -> None:
        self.data = bytearray()
        self.reading = True

    def write(self, data: bytes) -> None:
        self.data += data

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def close(self) -> None:
        pass

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: object = None) -> object:
        return default  # no socket: a session not read cannot check it for a reset


class _Catalog:
    def __init__(self, *exchanges: RTopic) -> None:
        self.exchanges = {e.wire_name: e for e in exchanges}
        self.by_bindings = {e.wire_bindings: e for e in exchanges}


def frame(kind: int, channel: int, payload: bytes) -> bytes:
    return struct.pack(">BHI", kind, channel, len(payload)) + payload + b"\xce"


def publish(channel: int, exchange: bytes, key: bytes, bits: int = 0) -> bytes:
    return wire.publish(channel, exchange, key, bits)


def header(channel: int, size: int, headers: dict | None = None) -> bytes:
    if headers is None:
        return frame(2, channel, struct.pack(">HHQH", 60, 0, size, 0))
    table = encode_table(headers)
    return frame(2, channel, struct.pack(">HHQH", 60, 0, size, 1 << 13) + table)


def message(channel: int, exchange: bytes, key: bytes, body: bytes,
            headers: dict | None = None, split: int = 0) -> bytes:
    parts = [body[:split], body[split:]] if split else [body]
    return publish(channel, exchange, key) + header(channel, len(body), headers) + \
        b"".join(frame(3, channel, p) for p in parts if p)


def client_stream() -> bytes:
    """Publishes of every kind, on two channels, with heartbeats and acks in between."""
    return b"".join([
        message(1, b"logs", b"a.*", b"x" * 100),
        message(1, b"logs", b"a.*", b"x" * 100),  # the same again: from the cache
        # a run that repeats it (its body may differ, and be cut in frames otherwise)
        message(1, b"logs", b"a.*", b"u" * 100),
        message(1, b"logs", b"a.*", b"t" * 100, split=30),
        message(1, b"logs", b"a.*", b"s" * 100),
        message(1, b"logs", b"a.*", b"s" * 99),  # another body size: not the same header
        frame(8, 0, b""),
        message(2, b"logs", b"b.#", b"y" * 40, split=15),
        message(1, b"plain", b"a.b", b"z" * 10),  # not x-rtopic: as is
        message(1, b"", b"q", b""),  # the default exchange, an empty body
        message(2, b"logs", b"#.c", b"w" * 7, {"BCC": ["a.b"], "rtroute-bcc": ["x.c"]}),
        message(1, b"logs", b"nothing.matches", b"v"),
        message(2, b"logs", b"a.b", b""),  # x-rtopic, an empty body
        method_frame(1, ACK, b"\x00" * 9),  # not the client's to send, but passed on
        message(1, b"logs", b"a.*", b"x" * 100),
    ])


def method_frame(channel: int, method: int, fields: bytes) -> bytes:
    return wire.method_frame(channel, method, fields)


def new_session() -> tuple[Session, _Transport, _Transport]:
    logs = RTopic("logs")
    for destination, key in [("q1", "a.b"), ("q2", "b.c.d"), ("q3", "x.c"), ("q4", "a.c")]:
        logs.bind(("queue", destination), key, True)
    logs.ready.set()
    client, broker = _Transport(), _Transport()
    session = Session(None, client, "rtroute-bcc")  # type: ignore[arg-type]
    session._broker = broker  # type: ignore[assignment]
    session._protocol_header = True
    session._tuned = True
    session._broker_started = True
    session.frame_max = 131072
    session.catalog = _Catalog(logs)  # type: ignore[assignment]
    # the client's user may publish to logs (the probe of tests/proxy/test_permission_probe.py)
    session._may_publish = {1: {b"logs"}, 2: {b"logs"}}
    return session, client, broker


def feed(pieces: list[bytes], scanner: type, turns: list[int] | None = None
         ) -> tuple[bytes, int]:
    """The bytes the broker got from a client that sent ``pieces``, and the rewrites (the loop
    runs while the session lets the others have their turn; ``turns`` counts them)."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    session, _client, broker = new_session()
    for piece in pieces:
        session.client_data(piece)
        while session._held:
            if turns is not None:
                turns.append(1)
            loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    assert not session._from_client and not session._publishing
    return bytes(broker.data), session.rewritten


def cuts(data: bytes, seed: int) -> list[bytes]:
    rng = random.Random(seed)
    pieces, pos = [], 0
    while pos < len(data):
        size = rng.choice([1, 2, 7, 8, 13, 50, 200])
        pieces.append(data[pos:pos + size])
        pos += size
    return pieces


@pytest.fixture(params=["native", "twin"])
def scanner(request, monkeypatch):
    """Each implementation of the frame scanner in the session's pumps."""
    if request.param == "twin":
        cls = frames.PyFrameScanner
        monkeypatch.setattr(session_module, "_CLIENT_SCANNERS", tuple(
            cls(sorted(m), check_end=True) for m in (
                session_module._CLIENT_METHODS,
                session_module._CLIENT_METHODS | {wire.BASIC_PUBLISH})))
        monkeypatch.setattr(session_module, "_BROKER_SCANNERS", tuple(
            cls(sorted({wire.CHANNEL_CLOSE, wire.CONNECTION_TUNE} | renamed | confirms))
            for confirms in (frozenset(), session_module._CONFIRMS)
            for renamed in (frozenset(), session_module._RENAMED)))
    elif frames.FrameScanner is frames.PyFrameScanner:
        pytest.skip("extension not built")
    return request.param


def test_client_bytes_reach_the_broker_alike_however_they_are_cut(scanner):
    data = client_stream()
    whole, rewritten = feed([data], scanner)
    assert rewritten == 11  # the publishes to logs
    assert feed([bytes((b,)) for b in data], scanner) == (whole, rewritten)
    for seed in range(20):
        assert feed(cuts(data, seed), scanner) == (whole, rewritten), seed


def test_a_client_with_routing_work_lets_the_others_have_turns_and_its_bytes_stay_alike(
        scanner, monkeypatch):
    data = client_stream()
    whole = feed([data], scanner)
    monkeypatch.setattr(session_module, "PUMP_TURN", 0.0)  # a turn after each routed message
    turns: list[int] = []
    assert feed([data], scanner, turns) == whole
    assert len(turns) >= 3  # after messages routed rather than taken from the cache
    for seed in range(5):
        assert feed(cuts(data, seed), scanner) == whole, seed


def test_what_the_broker_gets_for_each_publish(scanner):
    broker_bytes, _ = feed([client_stream()], scanner)
    methods, headers = [], []
    pos = 0
    while pos < len(broker_bytes):
        size = struct.unpack_from(">I", broker_bytes, pos + 3)[0]
        end = pos + size + 8
        if broker_bytes[pos] == 1 and struct.unpack_from(">I", broker_bytes, pos + 7)[0] == \
                wire.BASIC_PUBLISH:
            key_at = pos + 14 + broker_bytes[pos + 13]
            methods.append((broker_bytes[pos + 14:key_at],
                            broker_bytes[key_at + 1:key_at + 1 + broker_bytes[key_at]]))
        elif broker_bytes[pos] == 2:
            headers.append(ContentHeader(broker_bytes[pos:end]).get("headers"))
        pos = end
    assert methods == [(b"logs.bindings", b"a.*")] * 6 + [
                       (b"logs.bindings", b"b.#"), (b"plain", b"a.b"), (b"", b"q"),
                       (b"logs.bindings", b"#.c"), (b"logs.bindings", b"nothing.matches"),
                       (b"logs.bindings", b"a.b"), (b"logs.bindings", b"a.*")]
    assert [sorted(h["BCC"]) if h else h for h in headers] == [["a.b", "a.c"]] * 6 + [
        ["b.c.d"], None, None, ["a.b", "a.c", "x.c"], None, None,
        ["a.b", "a.c"]]


def broker_stream() -> bytes:
    deliver = wire.method_frame(1, wire.BASIC_DELIVER, b"\x03ctg" + struct.pack(">QB", 7, 0) +
                                wire.shortstr(b"logs.bindings") + wire.shortstr(b"a.b"))
    other = wire.method_frame(1, wire.BASIC_DELIVER, b"\x03ctg" + struct.pack(">QB", 8, 0) +
                              wire.shortstr(b"plain") + wire.shortstr(b"a.b"))
    ack = method_frame(1, ACK, struct.pack(">QB", 5, 1))
    return b"".join([ack, deliver, header(1, 3), frame(3, 1, b"abc"), ack, other,
                     header(1, 0), frame(8, 0, b""), ack])


def deliver_to_client(pieces: list[bytes]) -> bytes:
    asyncio.set_event_loop(asyncio.new_event_loop())
    session, client, _broker = new_session()
    for piece in pieces:
        session.broker_data(piece)
    assert not session._from_broker
    return bytes(client.data)


def test_broker_bytes_reach_the_client_alike_however_they_are_cut(scanner):
    data = broker_stream()
    whole = deliver_to_client([data])
    renamed = wire.method_frame(1, wire.BASIC_DELIVER, b"\x03ctg" + struct.pack(">QB", 7, 0) +
                                wire.shortstr(b"logs") + wire.shortstr(b"a.b"))
    assert whole == data.replace(wire.method_frame(
        1, wire.BASIC_DELIVER, b"\x03ctg" + struct.pack(">QB", 7, 0) +
        wire.shortstr(b"logs.bindings") + wire.shortstr(b"a.b")), renamed)
    assert deliver_to_client([bytes((b,)) for b in data]) == whole
    for seed in range(20):
        assert deliver_to_client(cuts(data, seed)) == whole, seed


def test_a_client_held_by_its_budget_is_not_read_on_when_the_broker_takes_writes_again():
    """A client at its in-flight budget is held (not read) until confirms come; the broker's
    write buffer draining (resume_writing) must not resume it: it read on before, and its
    stream piled up in the proxy without bound. The confirm frees it, and what it sent
    meanwhile goes on."""
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        session, client, _broker = new_session()
        session.meter = ConfirmMeter(budget=1)
        one = message(1, b"logs", b"a.*", b"x" * 100)
        session.client_data(one * 3)
        assert session._held and not client.reading  # one publish in flight: at its budget
        assert session.rewritten == 1
        session.broker_writable(False)
        session.broker_writable(True)
        assert not client.reading
        ack = method_frame(1, ACK, struct.pack(">QB", 1, 0))
        session.broker_data(ack)  # the broker's confirm of the proxy's own confirm mode
        while session.rewritten < 2:
            loop.run_until_complete(asyncio.sleep(0))
        assert session._held and not client.reading  # the next one is in flight
        assert b"\x00\x3c\x00\x50" not in client.data  # not the client's confirm: swallowed
        session.close()
        for _ in range(3):  # the hold's wait ends (cancelled)
            loop.run_until_complete(asyncio.sleep(0))
    finally:
        loop.close()
