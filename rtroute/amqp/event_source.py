"""RabbitMQ's event exchange for watchers of any vhost, on a connection of its own.

RabbitMQ's event plugin publishes the events of every vhost to ``amq.rabbitmq.event`` in one
vhost (``/`` unless ``rabbitmq_event_exchange.vhost`` says otherwise). A watcher whose
connection is to another vhost finds no event exchange there and would re-list every binding
every few seconds: at 100,000 bindings that costs the broker a third of a core and a change
is seen 5-19 s late. An :class:`EventSource` keeps one connection to the event vhost (in a
thread of its own) with one :class:`~rtroute.amqp.event_feed.EventFeed`; watchers of any
connection follow it through :meth:`EventSource.relayed` (a
:class:`~rtroute.amqp.event_feed.RelayedFeed`, which keeps each watcher's own vhost's events).

When the event vhost cannot be used (the user has no permission on it, the event plugin is
off, the connection is down), the feed is *unavailable*: its watchers poll (list every
``poll_interval`` seconds) until it subscribes again, and :attr:`EventSource.unavailable`
says why (the sidecar shows it in ``/status``). The gap-free rule holds across the two
connections: a watcher lists only after the feed's consumer is attached, and the broker
queues an event for every change made after that, whichever connection made it.

One source per broker and event vhost is shared in a process (:meth:`EventSource.acquire`,
:meth:`EventSource.release`): a sidecar and the library's publishers of one process make one
connection.
"""
from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any, Callable

from rtroute.amqp.connection import ReconnectingConnection
from rtroute.amqp.event_feed import EventFeed, RelayedFeed
from rtroute.amqp.uri import parse_uri

__all__ = ["EVENT_VHOST", "EventSource", "running"]

LOGGER = logging.getLogger(__name__)
EVENT_VHOST = "/"  # where RabbitMQ's event plugin publishes by default

_SHARED: dict[tuple[tuple[str, ...], str], EventSource] = {}
_SHARED_LOCK = threading.Lock()


class EventSource:
    """A connection to the event vhost and its event feed, run in a daemon thread.

    Args:
        uris: the broker's URIs (their vhost is replaced by ``vhost``; their user must be
            allowed to read ``amq.rabbitmq.event`` there).
        vhost: the vhost the event plugin publishes to.
    """

    def __init__(self, uris: str | Sequence[str], vhost: str = EVENT_VHOST) -> None:
        uri_list = [uris] if isinstance(uris, str) else list(uris)
        self.vhost = vhost
        self.feed = EventFeed(f"events of vhost {vhost!r}")
        # why the events are not followed right now (None: subscribed); watchers poll then
        self.unavailable: str | None = "not connected yet"
        self._users = 0
        self._key = (tuple(uri_list), vhost)
        user = parse_uri(uri_list[0], strict=False).username
        self._connection = ReconnectingConnection(
            uri_list, on_ready=self._on_ready, on_lost=self._on_lost,
            connection_name=f"rtroute events ({user})", parameters={"virtual_host": vhost})
        self.feed.on_state = self._on_feed_state
        self._thread = threading.Thread(target=self._connection.run, daemon=True,
                                        name="rtroute-events")

    @classmethod
    def acquire(cls, uris: str | Sequence[str], vhost: str = EVENT_VHOST) -> EventSource:
        """The process's source for this broker and vhost (:meth:`start` connects it); give
        it back with :meth:`release`."""
        key = (tuple([uris] if isinstance(uris, str) else uris), vhost)
        with _SHARED_LOCK:
            source = _SHARED.get(key)
            if source is None:
                source = _SHARED[key] = cls(uris, vhost)
            source._users += 1
            return source

    def start(self) -> None:
        """Connects (in its thread), unless started already."""
        with _SHARED_LOCK:
            if not self._thread.is_alive() and self._connection.state == "idle":
                self._thread.start()

    def release(self) -> None:
        """One user less; the last one stops the connection (any thread)."""
        with _SHARED_LOCK:
            self._users -= 1
            if self._users > 0:
                return
            if _SHARED.get(self._key) is self:
                del _SHARED[self._key]
        self._connection.stop()

    def relayed(self) -> RelayedFeed:
        """A feed for the watchers of another connection (call its ``start(connection)`` on
        each connect of that connection, before the watchers' ``start``)."""
        return RelayedFeed(self.feed, self.run_in_thread)

    def run_in_thread(self, callback: Callable[[], Any]) -> None:
        """Runs ``callback`` in the source's ioloop thread."""
        self._connection.add_callback_threadsafe(callback)

    # -- the source's ioloop thread --------------------------------------------------------------

    def _on_ready(self, connection: Any, channel: Any, _last_queue: Any) -> None:
        channel.close()  # the declarations' channel: the feed opens its own
        self.feed.start(connection)

    def _on_lost(self, reason: str) -> None:
        self.feed.unavailable(f"connection to vhost {self.vhost!r}: {reason}")

    def _on_feed_state(self) -> None:
        feed = self.feed
        self.unavailable = None if feed.subscribed else (feed.absent_reason or "subscribing")


@contextlib.contextmanager
def running(source: EventSource | None) -> Iterator[None]:
    """Starts ``source`` (None: nothing) for the block and gives it back after it: around
    the run of the connection whose watchers follow it."""
    if source is None:
        yield
        return
    source.start()
    try:
        yield
    finally:
        source.release()
