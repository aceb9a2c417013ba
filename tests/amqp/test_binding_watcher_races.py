"""BindingWatcher callbacks that arrive late: after stop(), or after a restart with a new channel.

A stand-in connection plays the broker's answers in the order the test chooses, the way pika
delivers them: a reply to a request made before ``channel.close()`` still reaches its callback
while the channel is closing, methods on a channel that is not open raise, and a channel whose
open was requested before stop() still opens.
"""
from __future__ import annotations

import queue
from types import SimpleNamespace
from typing import Any, Callable

import pika
import pika.exceptions
import pytest

from rtroute.amqp import BindingWatcher, WatcherState
from rtroute.amqp.binding_watcher import EVENT_EXCHANGE, EVENT_KEYS


class PlayedChannel:
    """The part of pika's Channel the watcher uses; the test plays the broker's side."""

    def __init__(self, on_open: Callable[[Any], Any]) -> None:
        self.state = "opening"
        self._on_open = on_open
        self._on_close: list[Callable[[Any, Exception], Any]] = []
        self.sent: list[str] = []  # the methods, in the order they went to the broker
        self.awaiting: list[tuple[Any, Callable[[Any], Any]]] = []  # replies due, with callbacks
        self.binds: list[tuple[str, str, str]] = []
        self.consumers: list[Callable[..., Any]] = []
        self.on_cancel: list[Callable[[Any], Any]] = []

    @property
    def is_open(self) -> bool:
        return self.state == "open"

    @property
    def close_requested(self) -> bool:
        return "close" in self.sent

    def _send(self, name: str, reply: Any, callback: Callable[[Any], Any] | None) -> None:
        if self.state != "open":
            raise pika.exceptions.ChannelWrongStateError(f"Channel is {self.state}.")
        self.sent.append(name)
        if callback is not None:  # without one, pika sends the method with nowait
            self.awaiting.append((reply, callback))

    def add_on_close_callback(self, callback: Callable[[Any, Exception], Any]) -> None:
        self._on_close.append(callback)

    def add_on_cancel_callback(self, callback: Callable[[Any], Any]) -> None:
        self.on_cancel.append(callback)  # the broker's basic.cancel (a test may play one)

    def queue_declare(self, queue: str, exclusive: bool = False, auto_delete: bool = False,
                      callback: Callable[[Any], Any] | None = None) -> None:
        self._send("queue.declare", pika.spec.Queue.DeclareOk(queue or "amq.gen-played", 0, 0),
                   callback)

    def queue_bind(self, queue: str, exchange: str, routing_key: str,
                   callback: Callable[[Any], Any] | None = None) -> None:
        self._send("queue.bind", pika.spec.Queue.BindOk(), callback)
        self.binds.append((queue, exchange, routing_key))

    def basic_consume(self, queue: str, on_message_callback: Callable[..., Any],
                      auto_ack: bool = False,
                      callback: Callable[[Any], Any] | None = None) -> str:
        self._send("basic.consume", pika.spec.Basic.ConsumeOk("ctag"), callback)
        self.consumers.append(on_message_callback)
        return "ctag"

    def close(self) -> None:
        if self.state in ("closing", "closed"):
            raise pika.exceptions.ChannelWrongStateError(f"Channel is {self.state}.")
        self.consumers.clear()  # pika cancels them first
        self.sent.append("close")
        self.state = "closing"

    # -- the broker's side ---------------------------------------------------------------------

    def open_ok(self) -> None:
        assert self.state == "opening"
        self.state = "open"
        self._on_open(self)

    def reply(self) -> None:
        """Answers the oldest request that waits for a reply (also while closing, as pika does)."""
        method, callback = self.awaiting.pop(0)
        callback(SimpleNamespace(method=method))

    def reply_all(self) -> None:
        while self.awaiting:
            self.reply()

    def closed(self, reason: Exception | None = None) -> None:
        """Channel.CloseOk (after close()) or Channel.Close from the broker."""
        self.state = "closed"
        self.awaiting.clear()
        for callback in self._on_close:
            callback(self, reason or pika.exceptions.ChannelClosedByClient(200, "Normal"))

    def consumer_came_first(self) -> bool:
        """No queue is left without its consumer: if one was declared, it was consumed before
        the close was sent (the broker then deletes the auto-delete queue with the channel)."""
        if "queue.declare" not in self.sent or "close" not in self.sent:
            return True
        return "basic.consume" in self.sent[:self.sent.index("close")]


class PlayedIoloop:
    def __init__(self) -> None:
        self.timers: list[SimpleNamespace] = []
        self.callbacks: queue.Queue[Callable[[], Any]] = queue.Queue()

    def call_later(self, delay: float, callback: Callable[[], Any]) -> SimpleNamespace:
        timer = SimpleNamespace(delay=delay, callback=callback)
        self.timers.append(timer)
        return timer

    def remove_timeout(self, timer: SimpleNamespace) -> None:
        if timer in self.timers:
            self.timers.remove(timer)

    def add_callback_threadsafe(self, callback: Callable[[], Any]) -> None:
        self.callbacks.put(callback)

    def fire_timers(self) -> None:
        due, self.timers = self.timers, []
        for timer in due:
            timer.callback()

    def run_one_callback(self, timeout: float = 5.0) -> None:
        self.callbacks.get(timeout=timeout)()


class PlayedConnection:
    def __init__(self) -> None:
        self.ioloop = PlayedIoloop()
        self.channels: list[PlayedChannel] = []
        self.is_open = True

    def channel(self, on_open_callback: Callable[[Any], Any]) -> PlayedChannel:
        if not self.is_open:
            raise pika.exceptions.ConnectionWrongStateError("Connection is closed.")
        channel = PlayedChannel(on_open_callback)
        self.channels.append(channel)
        return channel


class NoBindings:
    """A management API that lists nothing (the listing runs in a thread of the watcher)."""

    def exchange(self, name: str, vhost: str = "/") -> dict:
        return {"name": name}

    def iter_exchange_bindings(self, name: str, vhost: str = "/", progress=None,
                               export: bool = True) -> list:
        return []


def started() -> tuple[BindingWatcher, PlayedConnection]:
    watcher = BindingWatcher("logs.bindings", NoBindings(), relist_interval=60.0)
    connection = PlayedConnection()
    watcher.start(connection)
    return watcher, connection


def subscribe(channel: PlayedChannel) -> None:
    """Open the channel (if it is not yet) and answer every request of the subscription."""
    if channel.state == "opening":
        channel.open_ok()
    channel.reply_all()


def event(kind: str, **headers: Any) -> tuple[Any, Any, bytes]:
    return (pika.spec.Basic.Deliver(routing_key=kind),
            pika.BasicProperties(headers={"vhost": "/", **headers}), b"")


def test_a_channel_that_opens_after_stop_is_closed():
    watcher, connection = started()
    watcher.stop()
    channel = connection.channels[0]
    channel.open_ok()
    assert channel.sent == ["close"]
    channel.closed()
    assert watcher.state is WatcherState.STOPPED and connection.ioloop.timers == []


def test_replies_to_the_subscription_after_stop_do_nothing():
    watcher, connection = started()
    channel = connection.channels[0]
    channel.open_ok()
    watcher.stop()  # the queue.declare (and what follows) awaits its reply
    channel.reply_all()  # the replies arrive while the channel is closing
    channel.closed()
    assert channel.consumer_came_first()
    assert watcher.state is WatcherState.STOPPED and connection.ioloop.timers == []
    assert connection.ioloop.callbacks.empty()  # no listing either


def test_a_channel_close_from_the_broker_after_stop_changes_nothing():
    watcher, connection = started()
    channel = connection.channels[0]
    subscribe(channel)
    watcher.stop()
    # the broker's Channel.Close crossed ours
    channel.closed(pika.exceptions.ChannelClosedByBroker(406, "PRECONDITION_FAILED"))
    assert watcher.state is WatcherState.STOPPED
    assert connection.ioloop.timers == [] and len(connection.channels) == 1


@pytest.mark.parametrize("stop_after", ["start", "open", "subscribed", "listed"])
def test_stop_at_any_step_closes_the_channel_and_leaves_no_queue_behind(stop_after):
    watcher, connection = started()
    channel = connection.channels[0]
    if stop_after != "start":
        channel.open_ok()
    if stop_after in ("subscribed", "listed"):
        channel.reply_all()
    if stop_after == "listed":
        connection.ioloop.run_one_callback()
        assert watcher.state is WatcherState.FOLLOWING
    watcher.stop()
    if stop_after == "start":
        channel.open_ok()
    channel.reply_all()
    assert channel.close_requested and channel.consumer_came_first()
    channel.closed()
    assert watcher.state is WatcherState.STOPPED and connection.ioloop.timers == []


def test_a_channel_of_an_earlier_start_is_closed_when_it_opens():
    watcher, connection = started()
    watcher.stop()
    watcher.start(connection)
    old, new = connection.channels
    old.open_ok()
    new.open_ok()
    assert old.sent == ["close"]
    assert not new.close_requested and new.sent[0] == "queue.declare"


def test_replies_to_an_earlier_start_leave_the_new_subscription_alone():
    watcher, connection = started()
    old = connection.channels[0]
    old.open_ok()
    watcher.stop()
    watcher.start(connection)
    new = connection.channels[1]
    new.open_ok()
    old.reply_all()  # after the new channel opened
    old.closed()
    assert old.consumer_came_first()
    assert new.sent == ["queue.declare", *["queue.bind"] * len(EVENT_KEYS), "basic.consume"]
    assert connection.ioloop.callbacks.empty()  # the old consume-ok started no listing
    new.reply_all()
    assert [key for _queue, _exchange, key in new.binds] == list(EVENT_KEYS)
    assert {exchange for _queue, exchange, _key in new.binds} == {EVENT_EXCHANGE}
    connection.ioloop.run_one_callback()
    assert watcher.state is WatcherState.FOLLOWING


def test_events_delivered_on_a_replaced_channel_are_ignored():
    watcher, connection = started()
    old = connection.channels[0]
    subscribe(old)
    on_event = old.consumers[0]
    connection.ioloop.run_one_callback()  # the first listing
    assert watcher.ready
    watcher.stop()
    watcher.start(connection)
    on_event(old, *event("binding.created", source_name="logs.bindings",
                         destination_name="q", destination_kind="queue", routing_key="k"))
    assert watcher.bindings == frozenset() and watcher.events_received == 0


def test_a_restart_on_the_same_connection_closes_the_running_channel():
    watcher, connection = started()
    old = connection.channels[0]
    subscribe(old)
    watcher.start(connection)
    assert old.close_requested
    old.closed()
    assert watcher.state is WatcherState.STARTING and len(connection.channels) == 2


def test_a_resubscription_due_after_the_connection_closed_does_nothing():
    watcher, connection = started()
    channel = connection.channels[0]
    subscribe(channel)
    connection.ioloop.run_one_callback()
    channel.closed(pika.exceptions.ChannelClosedByBroker(541, "INTERNAL_ERROR"))
    assert [timer.delay for timer in connection.ioloop.timers] == [watcher.retry_delay]
    connection.is_open = False  # lost before the retry is due; the reconnect will start() it
    connection.ioloop.fire_timers()
    assert watcher.state is WatcherState.DETACHED and len(connection.channels) == 1


def test_a_listing_in_flight_when_the_channel_fails_does_not_cancel_the_resubscription():
    watcher, connection = started()
    channel = connection.channels[0]
    subscribe(channel)
    channel.closed(pika.exceptions.ChannelClosedByBroker(541, "INTERNAL_ERROR"))
    connection.ioloop.run_one_callback()  # the listing asked for before the channel failed
    connection.ioloop.fire_timers()
    assert len(connection.channels) == 2 and watcher.state is WatcherState.STARTING


def test_stop_leaves_no_timer_behind():
    watcher, connection = started()
    channel = connection.channels[0]
    channel.open_ok()
    watcher.relist_soon()  # while subscribing: a timer the subscription's own listing outruns
    channel.reply_all()
    connection.ioloop.run_one_callback()
    watcher.stop()
    assert connection.ioloop.timers == []
