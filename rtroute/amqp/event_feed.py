"""One subscription to RabbitMQ's event exchange per connection, shared by binding watchers.

A :class:`~rtroute.amqp.binding_watcher.BindingWatcher` on its own opens a channel and an
event queue: with N watchers on one connection the broker delivers every binding event of the
vhost N times, and N channels count against ``channel_max``. Watchers given the same
:class:`EventFeed` share one channel and one queue (bound to ``amq.rabbitmq.event`` with the
same keys); the feed hands each event to the watchers it is about (a binding event to those of
its source exchange, a deleted queue or exchange to all), in the connection's ioloop thread.

The gap-free rule of the watcher holds per watcher: a watcher lists only once the feed's
consumer is attached (at once when it joins a feed that is subscribed already), and when the
feed's channel is lost every watcher is told, buffers nothing until the feed has subscribed
again, and lists then.
"""
from __future__ import annotations

import logging
from typing import Any, Protocol


class BindingWatcher(Protocol):
    """What the feed needs of a watcher (:class:`rtroute.amqp.binding_watcher.BindingWatcher`,
    which imports this module: the feed names no class of it)."""

    exchange: str

    def _feed_subscribed(self) -> None: ...

    def _feed_absent(self) -> None: ...

    def _feed_lost(self, reason: str) -> None: ...

    def _feed_event(self, kind: str, headers: dict[str, Any]) -> None: ...

__all__ = ["EventFeed", "RelayedFeed"]

LOGGER = logging.getLogger(__name__)

EVENT_EXCHANGE = "amq.rabbitmq.event"
EVENT_KEYS = ("binding.*", "queue.deleted", "exchange.deleted")


class EventFeed:
    """The event subscription of one connection (call everything in its ioloop thread).

    Args:
        name: for log lines (e.g. ``"proxy catalog of vhost '/'"``).
        retry_delay: seconds before subscribing again after the channel was lost.
    """

    def __init__(self, name: str, retry_delay: float = 2.0) -> None:
        self.name = name
        self.retry_delay = retry_delay
        self._by_exchange: dict[str, set[BindingWatcher]] = {}
        self._connection: Any = None
        self._channel: Any = None
        self.subscribed = False
        self.absent = False  # no events to be had (see absent_reason): watchers poll
        self.absent_reason: str | None = None
        self.events_received = 0
        # called (ioloop thread) when subscribed or absent changes (its owner's status)
        self.on_state: Any = None

    def start(self, connection: Any) -> None:
        """Subscribes on ``connection`` (after each reconnect too, before the watchers'
        ``start``)."""
        self._connection = connection
        self.subscribed = False
        self._release_channel()
        channel = connection.channel(on_open_callback=self._on_channel_open)
        channel.add_on_close_callback(self._on_channel_closed)
        self._channel = channel

    def stop(self) -> None:
        self._connection = None
        self.subscribed = False
        self._release_channel()

    def unavailable(self, reason: str) -> None:
        """The feed's connection is down or could not open: its watchers poll until the feed
        has subscribed again (on the next :meth:`start`)."""
        self._channel = None
        self.subscribed = False
        self._set_absent(reason)

    def _set_absent(self, reason: str) -> None:
        was_absent, self.absent, self.absent_reason = self.absent, True, reason
        self._state_changed()
        if was_absent:
            return
        LOGGER.warning("%s: %s; binding watchers poll until the events are back", self.name,
                       reason)
        for watcher in self._all():
            watcher._feed_absent()

    def _state_changed(self) -> None:
        if self.on_state is not None:
            try:
                self.on_state()
            except Exception:
                LOGGER.exception("%s: state callback failed", self.name)

    def attach(self, watcher: BindingWatcher) -> None:
        """``watcher`` gets the events of its exchange from now on; it is told when the
        subscription is (or already was) in place."""
        self._by_exchange.setdefault(watcher.exchange, set()).add(watcher)
        if self.subscribed:
            watcher._feed_subscribed()
        elif self.absent:
            watcher._feed_absent()

    def detach(self, watcher: BindingWatcher) -> None:
        watchers = self._by_exchange.get(watcher.exchange)
        if watchers is not None:
            watchers.discard(watcher)
            if not watchers:
                del self._by_exchange[watcher.exchange]

    @property
    def watchers(self) -> int:
        return sum(len(w) for w in self._by_exchange.values())

    def _all(self) -> list[BindingWatcher]:
        return [w for watchers in self._by_exchange.values() for w in watchers]

    def _release_channel(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None and channel.is_open:
            channel.close()

    def _on_channel_open(self, channel: Any) -> None:
        if channel is not self._channel:
            channel.close()
            return

        def cancelled(_frame: Any) -> None:
            # the broker cancels the consumer when its queue goes (deleted by an operator, its
            # node restarted): the channel is closed, and the feed subscribes again
            if channel is self._channel and channel.is_open:
                LOGGER.warning("%s: the broker cancelled the event consumer (its queue was "
                               "deleted?); resubscribing", self.name)
                channel.close()

        channel.add_on_cancel_callback(cancelled)
        channel.queue_declare("", exclusive=True, auto_delete=True)
        for key in EVENT_KEYS:
            channel.queue_bind("", EVENT_EXCHANGE, key)
        channel.basic_consume("", self._on_event, auto_ack=True,
                              callback=lambda _frame: self._on_subscribed(channel))

    def _on_subscribed(self, channel: Any) -> None:
        if channel is not self._channel:
            return
        self.subscribed = True
        self.absent, self.absent_reason = False, None
        self._state_changed()
        for watcher in self._all():
            watcher._feed_subscribed()

    def _on_channel_closed(self, channel: Any, reason: Exception) -> None:
        if channel is not self._channel:
            return
        self._channel = None
        was_subscribed, self.subscribed = self.subscribed, False
        connection = self._connection
        if connection is None:
            return  # stopped
        code = getattr(reason, "reply_code", None)
        if code in (403, 404) and not was_subscribed:
            self._set_absent(f"{EVENT_EXCHANGE} is absent in the connection's vhost (the "
                             "event plugin is off?)" if code == 404 else
                             f"no permission to read {EVENT_EXCHANGE}: {reason!r}")
            return
        self._state_changed()
        for watcher in self._all():
            watcher._feed_lost(f"event channel closed: {reason!r}")
        if connection.is_open:
            LOGGER.warning("%s: event channel closed (%r); resubscribing", self.name, reason)
            connection.ioloop.call_later(self.retry_delay, lambda: self._resubscribe(connection))

    def _resubscribe(self, connection: Any) -> None:
        if connection is self._connection and connection.is_open and self._channel is None:
            self.start(connection)

    def _on_event(self, channel: Any, method: Any, properties: Any, _body: bytes) -> None:
        if channel is not self._channel:
            return
        self.events_received += 1
        kind = method.routing_key
        headers = properties.headers or {}
        if kind.startswith("binding."):
            targets = self._by_exchange.get(str(headers.get("source_name", "")), ())
        else:  # a deleted queue or exchange: any watcher may have bindings to it
            targets = self._all()
        for watcher in list(targets):
            watcher._feed_event(kind, headers)


class RelayedFeed:
    """Another connection's :class:`EventFeed`, for the watchers of this one: RabbitMQ's event
    plugin publishes the events of every vhost in one vhost (``/`` by default), so a connection
    to another vhost has no ``amq.rabbitmq.event`` and its watchers would poll. The watchers'
    calls are taken to the feed's ioloop and the feed's to the watchers' (each in order), and
    the watchers keep only the events of their own vhost (the events' ``vhost`` header).

    Args:
        feed: the feed of a connection to the vhost that has the event exchange.
        to_feed: ``to_feed(callable)`` runs a callable in the feed's ioloop thread.
    """

    def __init__(self, feed: EventFeed, to_feed: Any) -> None:
        self._feed = feed
        self._to_feed = to_feed
        self._ioloop: Any = None  # the watchers' connection's
        self._relays: dict[BindingWatcher, _Relay] = {}

    @property
    def name(self) -> str:
        return self._feed.name

    def start(self, connection: Any) -> None:
        """On each (re)connect of the watchers' connection, before the watchers start."""
        self._ioloop = connection.ioloop

    def stop(self) -> None:
        for relay in list(self._relays.values()):
            self.detach(relay.watcher)

    def attach(self, watcher: BindingWatcher) -> None:
        relay = self._relays.get(watcher)
        if relay is None:
            relay = self._relays[watcher] = _Relay(watcher, self)
        feed = self._feed
        self._to_feed(lambda: feed.attach(relay))  # tells it at once if subscribed

    def detach(self, watcher: BindingWatcher) -> None:
        relay = self._relays.pop(watcher, None)
        if relay is not None:
            feed = self._feed
            self._to_feed(lambda: feed.detach(relay))

    def to_watchers(self, callback: Any) -> None:
        ioloop = self._ioloop
        if ioloop is not None:
            try:
                ioloop.add_callback_threadsafe(callback)
            except Exception:  # noqa: BLE001 - the watchers' connection is gone: they relist
                LOGGER.debug("%s: an event for a closed connection", self.name)


class _Relay:
    """Stands for one watcher in another connection's feed (see :class:`RelayedFeed`)."""

    def __init__(self, watcher: BindingWatcher, relayed: RelayedFeed) -> None:
        self.watcher = watcher
        self.exchange = watcher.exchange
        self.vhost = getattr(watcher, "vhost", None)
        self._relayed = relayed

    def _feed_subscribed(self) -> None:
        self._relayed.to_watchers(self.watcher._feed_subscribed)

    def _feed_absent(self) -> None:
        self._relayed.to_watchers(self.watcher._feed_absent)

    def _feed_lost(self, reason: str) -> None:
        self._relayed.to_watchers(lambda: self.watcher._feed_lost(reason))

    def _feed_event(self, kind: str, headers: dict[str, Any]) -> None:
        if headers.get("vhost") != self.vhost:
            return  # another vhost's (the watcher would drop it): no trip to its thread
        self._relayed.to_watchers(lambda: self.watcher._feed_event(kind, headers))
