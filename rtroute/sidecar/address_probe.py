"""What divert forwarding addresses are on the broker: an exchange, a queue, or neither.

Where a diverted copy goes depends on the answer, so the sidecar asks with passive declares
(:class:`AddressProbe`) before consuming starts, when a divert is created or changed, and again
now and then for the addresses that did not exist (:class:`ForwardingAddresses`).
"""
from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any, Callable

import pika.exceptions

from rtroute.amqp import ReconnectingConnection
from rtroute.divert.copies import EXCHANGE, QUEUE

LOG = logging.getLogger("rtroute.sidecar")

REPROBE_INTERVAL = 10.0  # seconds between looks for forwarding addresses that did not exist
LOOK_AGAIN_INTERVAL = 1.0  # at most one look per second at an address a copy found missing


class AddressProbe:
    """Finds out what names are on the broker: an exchange, a queue, or neither.

    For each name in turn it declares an exchange of that name passively, then (if the broker
    answered 404 and closed the channel) a queue; on a channel of its own, reopened after each
    404. Runs in the ioloop; ``on_done({name: "exchange" | "queue" | None})`` once every name
    has an answer. A connection lost on the way ends it without an answer (the sidecar probes
    again on the next connection).
    """

    def __init__(self, connection: Any, names: Iterable[str],
                 on_done: Callable[[dict[str, str | None]], Any]) -> None:
        self._connection = connection
        self._names = list(dict.fromkeys(names))
        self._on_done = on_done
        self._results: dict[str, str | None] = {}
        self._channel: Any = None
        self._asking: tuple[str, str] | None = None
        self.cancelled = False

    def start(self) -> AddressProbe:
        self._next()
        return self

    def cancel(self) -> None:
        self.cancelled = True
        channel, self._channel = self._channel, None
        if channel is not None and channel.is_open:
            channel.close()

    def _next(self) -> None:
        if self.cancelled:
            return
        if not self._names:
            self.cancel()
            self._on_done(self._results)
            return
        self._ask(EXCHANGE, self._names[0])

    def _ask(self, kind: str, name: str) -> None:
        self._asking = (kind, name)

        def ask(channel: Any) -> None:
            if kind == EXCHANGE:
                channel.exchange_declare(name, passive=True,
                                         callback=lambda _frame: self._answer(EXCHANGE))
            else:
                channel.queue_declare(name, passive=True,
                                      callback=lambda _frame: self._answer(QUEUE))

        if self._channel is not None and self._channel.is_open:
            ask(self._channel)
            return

        def opened(channel: Any) -> None:
            if self.cancelled:
                channel.close()
                return
            self._channel = channel
            channel.add_on_close_callback(self._on_closed)
            ask(channel)

        try:
            self._connection.channel(on_open_callback=opened)
        except (pika.exceptions.AMQPError, AttributeError):
            self.cancelled = True  # the connection is going: the next one probes again

    def _answer(self, found: str | None) -> None:
        if self.cancelled:
            return
        self._results[self._names.pop(0)] = found
        self._asking = None
        self._next()

    def _on_closed(self, channel: Any, reason: Exception) -> None:
        if channel is not self._channel:
            return
        self._channel = None
        if self.cancelled or self._asking is None:
            return
        if not isinstance(reason, pika.exceptions.ChannelClosedByBroker):
            self.cancelled = True  # the connection closed under us
            return
        kind, name = self._asking
        if kind == EXCHANGE:
            self._ask(QUEUE, name)  # 404 (or 403): no exchange of that name; a queue?
        else:
            self._answer(None)


class ForwardingAddresses:
    """What the broker has under each forwarding address (``kinds``: ``"exchange"``,
    ``"queue"`` or None for nothing), learned by probes on ``connection``'s ioloop; the
    addresses found missing are looked at again every :data:`REPROBE_INTERVAL` seconds."""

    def __init__(self, connection: ReconnectingConnection) -> None:
        self._connection = connection
        # forwarding address -> what the broker has under that name (None: nothing)
        self.kinds: dict[str, str | None] = {}
        self.probe: AddressProbe | None = None  # the one the connection's start waits for
        self._looked_at: dict[str, float] = {}
        self._reprobe_timer: Any = None
        self._stopping = False

    def look_up(self, connection: Any, names: list[str], then: Callable[[], Any],
                track: bool = True) -> None:
        """Looks ``names`` up on the broker, records the answers, then calls ``then()``
        (``track``: the probe is the one :meth:`stop` and the timer look at)."""
        if not names:
            then()
            return

        def done(found: dict[str, str | None]) -> None:
            if track:
                self.probe = None
            for name, kind in found.items():
                if kind != self.kinds.get(name, "unknown"):
                    log = LOG.info if kind else LOG.warning
                    log("forwarding address %s: %s", name,
                        kind or "no exchange or queue of that name (copies to it are "
                        "dead-lettered until one exists)")
            self.kinds.update(found)
            self._schedule_reprobe()
            then()

        probe = AddressProbe(connection, names, done).start()
        if track:
            self.probe = probe

    def may_look_again(self, address: str) -> bool:
        """Whether ``address`` may be looked up again now (and notes that it is): not if it
        was a moment ago, so that a target that does not exist costs one probe per second,
        not one per message; nor without an open connection."""
        now = time.monotonic()
        connection = self._connection.connection
        if now - self._looked_at.get(address, -1e9) < LOOK_AGAIN_INTERVAL or connection is None \
                or not connection.is_open:
            return False
        self._looked_at[address] = now
        return True

    def cancel_probe(self) -> None:
        """The connection is lost: the tracked probe ends without an answer."""
        if self.probe is not None:
            self.probe.cancel()
            self.probe = None

    def stop(self) -> None:
        """No more probes: the sidecar stops."""
        self._stopping = True
        self.cancel_probe()
        if self._reprobe_timer is not None:
            self._connection.ioloop.remove_timeout(self._reprobe_timer)
            self._reprobe_timer = None

    def _schedule_reprobe(self) -> None:
        """Looks again, now and then, for forwarding addresses that did not exist."""
        if self._reprobe_timer is not None or self._stopping:
            return
        if not any(kind is None for kind in self.kinds.values()):
            return

        def reprobe() -> None:
            self._reprobe_timer = None
            connection = self._connection.connection
            if self._stopping or self.probe is not None or connection is None \
                    or not connection.is_open:
                self._schedule_reprobe()
                return
            missing = [n for n, kind in self.kinds.items() if kind is None]
            self.look_up(connection, missing, lambda: None)

        self._reprobe_timer = self._connection.ioloop.call_later(REPROBE_INTERVAL, reprobe)
