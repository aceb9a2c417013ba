"""One client's share of the broker through the proxy (issue #42, isolation): its publishes to
x-rtopic exchanges in flight are metered by the broker's confirms, asked for by the proxy when
the client did not (rtroute.proxy.confirm_meter). What a client sees must not change: every
message arrives, confirms it asks for later carry its own numbering, transactions work where
RabbitMQ allows them, and where the proxy cannot allow one it says why."""
from __future__ import annotations

import contextlib
import socket
import struct

import pika
import pytest

from ..conftest import wait_for
from .conftest import drain
from .raw_client import HEAD, RawClient, longstr, method, shortstr

pytestmark = pytest.mark.broker

KEYS = [f"k{i}.a.b" for i in range(40)]


def _layout(ch, exchange: str, queues: int = 4) -> list[str]:
    """``exchange`` x-rtopic with ``queues`` exclusive queues, each bound with every 4th of
    :data:`KEYS`."""
    ch.exchange_declare(exchange, "x-rtopic")
    names = []
    for q in range(queues):
        queue = ch.queue_declare("", exclusive=True).method.queue
        for key in KEYS[q::queues]:
            ch.queue_bind(queue, exchange, key)
        names.append(queue)
    return names


def _count(ch, queues: list[str]) -> int:
    return sum(ch.queue_declare(q, passive=True).method.message_count for q in queues)


@pytest.mark.every_broker
def test_a_flood_without_confirms_through_a_small_budget_loses_nothing(proxies, exchange_name):
    """A budget of 10 routing keys: a client publishing 2,000 messages of 5 keys each without
    confirms is held, and read again as the broker confirms; every copy arrives."""
    proxy = proxies("--client-in-flight", "10")
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        queues = _layout(ch, exchange_name)
        for n in range(2000):
            # "#.a.b" matches all 40 keys: one per queue (4 BCC entries + the key: cost 5)
            ch.basic_publish(exchange_name, "#.a.b", str(n).encode(),
                             pika.BasicProperties(headers={"n": n}))
        check = conn.channel()
        check.confirm_delivery()  # a round trip on another channel after the publishes
        deadline = 200
        while _count(check, queues) < 8000 and deadline:
            conn.sleep(0.05)
            deadline -= 1
        assert _count(check, queues) == 8000
        for queue in queues:
            assert [body for _ex, body in drain(check, queue)] == [str(n) for n in range(2000)]
    finally:
        conn.close()


@pytest.mark.every_broker
def test_confirms_asked_for_after_unconfirmed_publishes_carry_the_clients_numbering(
        proxies, exchange_name):
    """The proxy put the channel in confirm mode at its first publish to NAME; the client asks
    for confirms after 30 publishes: pika checks every tag it gets against its own count (a
    tag of the broker's numbering would be one it never sent), and mandatory returns still
    come before their confirm."""
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        queues = _layout(ch, exchange_name, queues=1)
        for n in range(30):
            ch.basic_publish(exchange_name, KEYS[n % len(KEYS)], b"before")
        ch.confirm_delivery()
        for n in range(20):
            ch.basic_publish(exchange_name, KEYS[n], b"after", mandatory=True)
        with pytest.raises(pika.exceptions.UnroutableError):
            ch.basic_publish(exchange_name, "no.such.key", b"nowhere", mandatory=True)
        ch.basic_publish(exchange_name, "*.a.b", b"after")  # confirmed in order after it
        assert _count(ch, queues) == 51
    finally:
        conn.close()


@pytest.mark.every_broker
def test_transactions_where_rabbitmq_allows_them_and_a_reason_where_the_proxy_cannot(
        proxies, exchange_name, until):
    """tx.select before a channel's first publish: a transaction channel (never put in confirm
    mode by the proxy), committed messages arrive. tx.select after unconfirmed publishes to an
    x-rtopic exchange on the same channel: refused (406) with the reason, the connection and its
    other channels go on."""
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        queues = _layout(ch, exchange_name, queues=1)
        tx = conn.channel()
        tx.tx_select()
        tx.basic_publish(exchange_name, "k0.a.b", b"in a transaction")
        assert _count(ch, queues) == 0
        tx.tx_commit()
        assert _count(ch, queues) == 1
        late = conn.channel()
        late.basic_publish(exchange_name, "k0.a.b", b"unconfirmed")
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            late.tx_select()
        assert refused.value.reply_code == 406
        assert "transaction mode" in refused.value.reply_text
        assert "x-rtopic" in refused.value.reply_text
        # the publish before the refusal arrives (on another broker channel than the count's:
        # no order between the two at the broker)
        until(lambda: _count(ch, queues) == 2)
    finally:
        conn.close()


@pytest.mark.every_broker
def test_a_channel_closed_with_publishes_in_flight_gives_their_share_back(proxies,
                                                                          exchange_name):
    """A budget of one publish: a channel that published and closed before its confirm came
    does not hold the client's next publishes on another channel."""
    proxy = proxies("--client-in-flight", "1")
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        ch = conn.channel()
        queues = _layout(ch, exchange_name, queues=1)
        for _ in range(20):
            short = conn.channel()
            short.basic_publish(exchange_name, "k0.a.b", b"then closed")
            short.close()
        ch.confirm_delivery()
        ch.basic_publish(exchange_name, "k0.a.b", b"confirmed")
        assert _count(ch, queues) == 21
    finally:
        conn.close()


def test_sigterm_while_a_client_is_held_stops_cleanly(proxies, exchange_name, broker_uri):
    """A client held by its budget has a wait pending when the proxy stops: SIGTERM ends it
    with the proxy's own stop line, not asyncio's 'Task was destroyed but it is pending!'."""
    proxy = proxies("--client-in-flight", "1")  # one message in flight at a time
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    direct = pika.BlockingConnection(pika.URLParameters(broker_uri))
    queue = f"{exchange_name}-held"
    try:
        ch = conn.channel()
        ch.exchange_declare(exchange_name, "x-rtopic")
        look = direct.channel()
        look.queue_declare(queue)
        ch.queue_bind(queue, exchange_name, "k.a.b")
        for n in range(10_000):
            ch.basic_publish(exchange_name, "#.a.b", str(n).encode(),
                             pika.BasicProperties(headers={"n": n}))
        conn.process_data_events(0)
        # the flood is under way (the broker has some of it), held by the budget
        wait_for(lambda: look.queue_declare(queue, passive=True).method.message_count > 0, 20)
        assert look.queue_declare(queue, passive=True).method.message_count < 10_000
        assert proxy.terminate() == 0
    finally:
        with contextlib.suppress(pika.exceptions.AMQPError):
            conn.close()
        direct.channel().queue_delete(queue)
        direct.close()
    log = proxy.log_path.read_text()
    assert "proxy stopped" in log
    assert "Task was destroyed" not in log and "ERROR" not in log, log[-3000:]
    assert "WARNING rtroute.proxy.sync" not in log, log[-3000:]  # its channel closed by us


def test_a_held_client_that_resets_its_connection_is_let_go(proxies, exchange_name, broker_uri):
    """A client held by its budget, that resets its connection (a killed process, an RST):
    the proxy sees it within a second or so, though it is not reading it, closes its session
    and drops what it had read of it and not sent, as the kernel drops what a broker had not
    read of a reset connection. Before, the proxy went on sending that read-ahead to the
    broker, metered, for minutes."""
    proxy = proxies("--client-in-flight", "1")
    setup = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    setup.channel().exchange_declare(exchange_name, "x-rtopic")
    setup.close()
    user = pika.URLParameters(broker_uri).credentials
    client = RawClient(proxy.port)
    assert client.handshake(user.username, user.password,
                            pika.URLParameters(broker_uri).virtual_host)[:2] == (10, 41)
    client.send(method(1, 20, 10, shortstr("")))
    assert client.method_ids()[:2] == (20, 11)  # channel.open-ok
    publish = method(1, 60, 40, b"\x00\x00" + shortstr(exchange_name) + shortstr("#") + b"\x00")
    body = HEAD.pack(3, 1, 1) + b"x\xce"
    client.sock.settimeout(0.5)
    sent = 0
    with contextlib.suppress(TimeoutError):  # until the proxy stops reading it: held
        while sent < 1_000_000:
            batch = []
            for _ in range(100):
                sent += 1
                props = struct.pack(">HHQH", 60, 0, 1, 0x2000) + \
                    longstr(b"\x01nl" + struct.pack(">q", sent))
                batch += (publish, HEAD.pack(2, 1, len(props)), props, b"\xce", body)
            client.sock.sendall(b"".join(batch))
    client.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    client.sock.close()  # an RST
    wait_for(lambda: "reset its connection" in proxy.log_path.read_text(), 10)
