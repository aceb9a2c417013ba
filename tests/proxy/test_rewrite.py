"""The proxy's rewriters (rtroute.proxy.rewrite) on the fake transports of the pump tests: what
a client's exchange.declare/delete, queue.bind and publish to an x-rtopic exchange become on
the broker side, and what the client is answered, without a broker. (The broker tier checks
the same against RabbitMQ, and against the plugin.)"""
from __future__ import annotations

import asyncio
import struct

import pika.frame
import pika.spec
import pytest

from rtroute.proxy import wire
from rtroute.proxy.catalog import BINDINGS_SUFFIX, REGISTRY_EXCHANGE, RTopic
from rtroute.proxy.confirm_meter import ConfirmMeter
from rtroute.proxy.rewrite import Expected, Rewriter
from rtroute.routing import rtopic_layout

from .test_session_pumps import message, new_session


class _Catalog:
    """A vhost catalog's part the rewriters use: what is x-rtopic, what they learn of it, and
    every other proxy's agreement given at once."""

    plugin = False
    bindings_type = "topic"

    def __init__(self, *exchanges: RTopic) -> None:
        self.exchanges = {e.wire_name: e for e in exchanges}
        self.by_bindings = {e.wire_bindings: e for e in exchanges}
        self.learnt: list[str] = []
        self.forgotten: list[str] = []
        self.bound: list[tuple] = []
        self.announced: list[dict] = []

    def rtopic(self, name: bytes) -> RTopic | None:
        return self.exchanges.get(name)

    def learn(self, name: str) -> None:
        self.learnt.append(name)

    def forget(self, name: str) -> None:
        self.forgotten.append(name)

    def bind(self, name: bytes, destination: tuple[str, str], key: str, added: bool) -> None:
        self.bound.append((name, destination, key, added))

    def discard_unused(self, exchange: str) -> None:
        pass

    def announce(self, change: dict) -> asyncio.Future:
        self.announced.append(change)
        done = asyncio.get_event_loop().create_future()
        done.set_result(None)
        return done


def _method(channel: int, method: pika.spec.amqp_object.Method) -> bytes:
    return pika.frame.Method(channel, method).marshal()


def _methods(data: bytes) -> list[tuple[int, object]]:
    """The method frames in ``data``: (channel, pika's method object), but the proxy's own
    ``confirm.select`` before a channel's first publish (see rtroute.proxy.confirm_meter)."""
    out, pos = [], 0
    while pos < len(data):
        consumed, frame = pika.frame.decode_frame(data[pos:])
        assert consumed, "a cut frame"
        pos += consumed
        if isinstance(frame, pika.frame.Method) and \
                not isinstance(frame.method, pika.spec.Confirm.Select):
            out.append((frame.channel_number, frame.method))
    return out


@pytest.fixture
def rig():
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    session, client, broker = new_session()
    logs = next(iter(session.catalog.exchanges.values()))  # type: ignore[union-attr]
    catalog = _Catalog(logs)
    session.catalog = catalog  # type: ignore[assignment]

    def answer(*methods: pika.spec.amqp_object.Method, channel: int = 1) -> None:
        session.broker_data(b"".join(_method(channel, m) for m in methods))
        loop.run_until_complete(asyncio.sleep(0))  # answers held for the other proxies

    yield session, client, broker, catalog, answer
    loop.close()


def test_an_x_rtopic_declare_becomes_the_layout_and_one_declare_ok(rig):
    session, client, broker, catalog, answer = rig
    session.client_data(_method(1, pika.spec.Exchange.Declare(exchange="orders", type="x-rtopic",
                                                              durable=True)))
    sent = _methods(bytes(broker.data))
    assert [(type(m).__name__, getattr(m, "exchange", None), getattr(m, "type", None))
            for _, m in sent] == [("Declare", "orders" + BINDINGS_SUFFIX, "topic"),
                                  ("Declare", "orders", "fanout"), ("Bind", None, None)]
    assert sent[0][1].durable and sent[1][1].durable  # the client's flags on both
    # the layout's mark (who may register: configure permission on NAME)
    assert sent[1][1].arguments == {rtopic_layout.LAYOUT_ARGUMENT: rtopic_layout.LAYOUT_VALUE}
    assert (sent[2][1].destination, sent[2][1].source, sent[2][1].routing_key) == \
        ("orders" + BINDINGS_SUFFIX, REGISTRY_EXCHANGE, "orders")
    answer(pika.spec.Exchange.DeclareOk(), pika.spec.Exchange.DeclareOk())
    assert not client.data  # the broker's answers are swallowed but the last
    answer(pika.spec.Exchange.BindOk())
    assert [type(m).__name__ for _, m in _methods(bytes(client.data))] == ["DeclareOk"]
    assert catalog.learnt == ["orders"] and catalog.announced == [{"learn": "orders"}]


def test_a_passive_or_another_type_declare_passes_as_it_is(rig):
    session, _client, broker, catalog, _answer = rig
    frames = _method(1, pika.spec.Exchange.Declare(exchange="orders", type="x-rtopic",
                                                     passive=True)) + \
        _method(1, pika.spec.Exchange.Declare(exchange="plain", type="topic"))
    session.client_data(frames)
    assert bytes(broker.data) == frames and not catalog.learnt


def test_a_delete_of_an_x_rtopic_exchange_deletes_both_and_answers_once(rig):
    session, client, broker, catalog, answer = rig
    session.client_data(_method(1, pika.spec.Exchange.Delete(exchange="logs")))
    assert [(type(m).__name__, m.exchange) for _, m in _methods(bytes(broker.data))] == [
        ("Delete", "logs" + BINDINGS_SUFFIX), ("Delete", "logs")]
    answer(pika.spec.Exchange.DeleteOk())
    assert not client.data
    answer(pika.spec.Exchange.DeleteOk())
    assert [type(m).__name__ for _, m in _methods(bytes(client.data))] == ["DeleteOk"]
    assert catalog.forgotten == ["logs"]


def test_a_bind_from_an_x_rtopic_exchange_is_probed_then_made_from_its_bindings(rig):
    session, client, broker, catalog, answer = rig
    session.client_data(_method(1, pika.spec.Queue.Bind(queue="q9", exchange="logs",
                                                        routing_key="a.#")))
    sent = [(type(m).__name__, m.exchange, m.queue, m.routing_key)
            for _, m in _methods(bytes(broker.data))]
    assert sent[0][:3] == ("Unbind", "logs", "q9")          # the plugin's permission check
    assert sent[1] == ("Bind", "logs" + BINDINGS_SUFFIX, "q9", "a.#")
    answer(pika.spec.Queue.UnbindOk(), pika.spec.Queue.BindOk())
    assert [type(m).__name__ for _, m in _methods(bytes(client.data))] == ["BindOk"]
    assert catalog.bound == [(b"logs", ("queue", "q9"), "a.#", True)]
    assert catalog.announced == [{"bind": "logs", "destination": ["queue", "q9"],
                                  "key": "a.#"}]


def test_a_publish_is_sent_to_the_bindings_with_one_bcc_per_destination(rig):
    session, _client, broker, _catalog, _answer = rig
    session.client_data(message(1, b"logs", b"a.*", b"x"))
    sent = _methods(bytes(broker.data))
    assert [(type(m).__name__, m.exchange, m.routing_key) for _, m in sent] == \
        [("Publish", "logs" + BINDINGS_SUFFIX, "a.*")]
    assert session.rewritten == 1 and session.rewriter is not None


def test_a_match_set_over_one_header_frame_refuses_the_channel_not_the_connection(rig):
    session, client, broker, _catalog, _answer = rig
    session.frame_max = 120  # a BCC of two keys does not fit
    session.client_data(message(1, b"logs", b"#", b"x"))
    closes = [m for _, m in _methods(bytes(client.data))]
    assert [type(m).__name__ for m in closes] == ["Close"] and closes[0].reply_code == 406
    assert "header frame of 120 bytes" in closes[0].reply_text
    assert [type(m).__name__ for _, m in _methods(bytes(broker.data))] == ["Close"]
    assert session.rewritten == 0


class _Pumps:
    """The seam alone (rtroute.proxy.rewrite.Pumps): no session behind it."""

    def __init__(self) -> None:
        self.frame_max = 131072
        self.rewritten = 0
        self.meter = ConfirmMeter(256)
        self.expected: list[tuple[int, Expected]] = []
        self.refused: list[tuple[int, str]] = []

    def expect(self, channel: int, *expected: Expected) -> None:
        self.expected += [(channel, e) for e in expected]

    def answer_after(self, channel: int, answer: bytes | None, agreed: object) -> None:
        raise AssertionError("not asked here")

    def refuse_channel(self, channel: int, text: str, out: list[bytes], code: int = 406,
                       kind: str = "publish", failing: int = wire.BASIC_PUBLISH) -> None:
        self.refused.append((channel, text))


def test_the_rewriters_reach_the_pumps_only_through_their_seam():
    logs = RTopic("logs")
    logs.bind(("queue", "q1"), "a.b", True)
    logs.ready.set()
    pumps = _Pumps()
    publishing = {3: (logs, wire.publish(3, b"logs", b"a.b", 0))}
    rewriter = Rewriter(pumps, publishing, "rtroute-bcc")
    out: list[bytes] = []
    header = struct.pack(">BHI", 2, 3, 14) + struct.pack(">HHQH", 60, 0, 1, 0) + b"\xce"
    rewriter.route(3, header, out)
    assert not publishing and pumps.rewritten == 1 and not pumps.refused
    assert [type(m).__name__ for _, m in _methods(b"".join(out))] == ["Publish"]
    out.clear()
    payload = _method(3, pika.spec.Exchange.Delete(exchange="logs"))[7:-1]
    assert rewriter.delete(3, payload, b"", out, _Catalog(logs))  # type: ignore[arg-type]
    assert [e.method for _, e in pumps.expected] == [wire.EXCHANGE_DELETE_OK] * 2

