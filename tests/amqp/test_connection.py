"""Back-off, broker lists, and a SelectConnection that comes back after the broker drops it."""
from __future__ import annotations

import random
import threading

import pika
import pika.exceptions
import pytest
from pika.adapters.select_connection import IOLoop

from rtroute.amqp import Backoff, ConfirmWindow, Outcome, ReconnectingConnection, connect_blocking

DEAD_URI = "amqp://guest:secret@127.0.0.1:1/%2F"  # nothing listens on port 1


def test_backoff_doubles_up_to_the_cap_and_resets():
    backoff = Backoff(initial=0.5, maximum=3.0, factor=2.0, jitter=0)
    assert [backoff.next_delay() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next_delay() == 0.5


def test_backoff_jitter_stays_within_its_fraction_and_the_cap():
    backoff = Backoff(initial=1.0, maximum=4.0, jitter=0.25, rng=random.Random(7))
    delays = [backoff.next_delay() for _ in range(50)]
    assert all(0.75 <= d <= 4.0 for d in delays)
    assert len(set(delays)) > 1


def test_constant_delay_is_a_backoff_without_growth():
    backoff = Backoff(2.5, 2.5, jitter=0)
    assert {backoff.next_delay() for _ in range(4)} == {2.5}


@pytest.mark.parametrize("kwargs", [
    {"initial": -1}, {"initial": 2, "maximum": 1}, {"factor": 0.5}, {"jitter": 1.0},
])
def test_backoff_rejects_nonsense(kwargs):
    with pytest.raises(ValueError, match="need"):
        Backoff(**kwargs)


@pytest.mark.broker
def test_connect_blocking_tries_the_list_until_one_answers(broker_uri):
    connection = connect_blocking([DEAD_URI, broker_uri], attempts=20,
                                  backoff=Backoff(0.01, 0.01, jitter=0), rng=random.Random(1))
    assert connection.is_open
    connection.close()


@pytest.mark.broker
def test_connect_blocking_error_masks_the_password():
    with pytest.raises(pika.exceptions.AMQPConnectionError) as info:
        connect_blocking(DEAD_URI, attempts=2, backoff=Backoff(0.01, 0.01))
    assert "secret" not in str(info.value)
    assert "guest:***@127.0.0.1:1" in str(info.value)


class InTurn:
    """A stand-in for random.Random whose choice() walks the list in order."""

    def __init__(self) -> None:
        self.calls = 0

    def choice(self, items):
        self.calls += 1
        return items[(self.calls - 1) % len(items)]


@pytest.mark.broker
def test_first_broker_down_the_connection_comes_up_on_another(broker_uri):
    readies, lost = [], []
    connection = ReconnectingConnection(
        [DEAD_URI, broker_uri], lambda conn, ch, q: (readies.append(q), connection.stop()),
        on_lost=lost.append, backoff=Backoff(0.01, 0.05), rng=InTurn(),
    )
    thread = threading.Thread(target=connection.run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert readies == [None]
    assert connection.attempts == 2 and connection.state == "stopped"
    assert len(lost) == 1 and "127.0.0.1:1" in lost[0] and "secret" not in lost[0]


@pytest.mark.broker
def test_two_connections_share_one_ioloop_and_stop_apart(broker_uri):
    """With ``ioloop``, the caller runs the loop: both connections come up on it, and stopping
    them closes them without ending the loop (its owner does)."""
    loop = IOLoop()
    ready: list[str] = []
    connections: list[ReconnectingConnection] = []

    def on_ready(name):
        def ready_now(_conn, _channel, _queue):
            ready.append(name)
            if len(ready) == 2:
                for connection in connections:
                    connection.stop()
                stop_when_closed()
        return ready_now

    def stop_when_closed():
        if all(c.state == "stopped" for c in connections):
            loop.stop()
        else:
            loop.call_later(0.01, stop_when_closed)

    for name in ("a", "b"):
        connections.append(ReconnectingConnection(broker_uri, on_ready(name), ioloop=loop))
    with pytest.raises(RuntimeError):
        connections[0].run()
    for connection in connections:
        connection.start()
    thread = threading.Thread(target=loop.start, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    loop.close()
    assert sorted(ready) == ["a", "b"]
    assert [c.state for c in connections] == ["stopped", "stopped"]


@pytest.mark.broker
def test_without_reconnect_a_failed_declaration_ends_the_run(broker_uri, names):
    exchange = names.exchange()
    setup = connect_blocking(broker_uri)
    setup.channel().exchange_declare(exchange, "direct")
    setup.close()
    lost = []
    connection = ReconnectingConnection(
        broker_uri, lambda *_: pytest.fail("must not become ready"), on_lost=lost.append,
        declarations=[{"method": "exchange.declare", "exchange": exchange, "type": "topic"}],
        reconnect=False,
    )
    thread = threading.Thread(target=connection.run, daemon=True)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert len(lost) == 1
    assert "declarations failed" in lost[0] and "PRECONDITION_FAILED" in lost[0]


@pytest.mark.broker
def test_reconnects_after_the_broker_closes_it_and_in_flight_publishes_fail(
    ioloop, names, force_close, until
):
    queue = names.queue()
    windows: list[ConfirmWindow] = []
    futures: list[list] = []
    body, properties = b"m" * 100, pika.BasicProperties(delivery_mode=2)

    def on_ready(_connection, channel, last_queue):
        # what a sidecar does on every (re)connect: a fresh window, publishing non-stop
        published = []

        def pump():
            while window.has_room:
                published.append(window.publish("", last_queue, body, properties))

        window = ConfirmWindow(channel, window=500, on_writable=pump)
        windows.append(window)
        futures.append(published)
        window.start(on_ready=pump)

    declarations = [{"method": "queue.declare", "queue": queue, "durable": True,
                     "arguments": {"x-max-length": 1000}}]
    runner = ioloop(declarations=declarations, on_ready=on_ready)
    first = windows[0]
    until(lambda: first.acked > 1000)
    force_close(runner.connection_name)
    runner.wait_ready(2, timeout=15)
    assert runner.losses and "CONNECTION_FORCED" in runner.losses[0]
    assert runner.readies[1][2] == queue  # declarations ran again

    assert first.closed
    settled = futures[0]
    assert all(f.done() for f in settled)
    failed = sum(f.outcome is Outcome.FAILED for f in settled)
    assert failed > 0
    assert first.acked + first.nacked + failed == len(settled)
    assert all(f.reason for f in settled if f.outcome is Outcome.FAILED)
    until(lambda: windows[1].acked > 100)  # and the new connection goes on
