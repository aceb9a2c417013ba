"""bind-ok means routable through every proxy of the deployment, at once.

Each proxy routes from its own copy of the bindings. A binding made through proxy A reaches
proxy B's copy through the event exchange, milliseconds later; a client that publishes through
B right after A's bind-ok would be confirmed and routed nowhere in between. So A answers
``bind-ok`` (and an x-rtopic ``declare-ok``) only once every live proxy has applied the change:

- every proxy's catalog of a vhost has an exclusive queue bound to the direct exchange
  :data:`SYNC_EXCHANGE` twice: with :data:`ALL` (announcements) and with its own name (replies);
- after the broker's own answer, A publishes the change there with key :data:`ALL`; each other
  proxy applies it to its copy (in the loop where its routers live) and only then replies to
  A's queue; A passes the broker's answer on when every member replied, or went away;
- the members are the queues bound with :data:`ALL`, followed with a
  :class:`~rtroute.amqp.binding_watcher.BindingWatcher` (listing, then events): a proxy that dies
  takes its exclusive queue with it, and nobody waits for it;
- a member that does not answer within :data:`SYNC_TIMEOUT` seconds (stuck, or partitioned from
  the broker) is not waited for longer: the client gets its answer, the proxy logs a warning and
  counts it (``rtroute_proxy_sync_timeouts_total``).

Announcements are believed only from the proxies' own user: RabbitMQ checks a message's
``user_id`` property against the publishing connection's user, so a client allowed to publish
to :data:`SYNC_EXCHANGE` cannot speak for a proxy. Proxies of one deployment use one user.

Only additions are announced. An unbinding needs no wait: the broker routes the keys a proxy
sends only to the bindings that exist, so a key a proxy still knows routes nowhere new.

Everything named ``_on_*`` runs in the catalog's pika thread; the rest in the asyncio loop.
"""
from __future__ import annotations

import asyncio
import json
import logging
import uuid
from typing import Any, Callable

import pika

from rtroute.amqp.binding_watcher import Binding, BindingWatcher
from rtroute.amqp.event_feed import EventFeed, RelayedFeed
from rtroute.amqp.management import ManagementClient

__all__ = ["ALL", "SYNC_EXCHANGE", "SYNC_TIMEOUT", "ProxySync"]

LOG = logging.getLogger(__name__)
SYNC_EXCHANGE = "rtroute.rtopic.sync"
ALL = "all"
SYNC_TIMEOUT = 5.0
_REPLY = "reply"


class ProxySync:
    """The proxies' agreement on changes, for one vhost's catalog.

    Args:
        management: the management API (the members' listing).
        vhost: the vhost.
        loop: the asyncio loop of the routers.
        user: the proxy's own user: announcements from any other are ignored.
        apply: ``apply(change)`` (loop thread) applies another proxy's change to this copy.
        to_pika: ``to_pika(callable)`` runs a callable in the catalog's pika thread.
        on_queue: ``on_queue()`` (loop thread) when this proxy's queue is bound, or gone.
        feed: the catalog's shared event subscription (for the members' watcher).
    """

    def __init__(self, management: ManagementClient, vhost: str,
                 loop: asyncio.AbstractEventLoop, user: str,
                 apply: Callable[[dict[str, Any]], Any],
                 to_pika: Callable[[Callable[[], Any]], Any],
                 on_queue: Callable[[], Any] | None = None,
                 feed: EventFeed | RelayedFeed | None = None) -> None:
        self._loop = loop
        self._user = user
        self._apply = apply
        self._to_pika = to_pika
        self._on_queue = on_queue
        self.queue: str | None = None  # this proxy's (loop thread copy)
        self._members: set[str] = set()  # loop thread
        self._pending: dict[str, tuple[asyncio.Future[None], set[str]]] = {}
        self.timeouts = 0
        self._channel: Any = None  # pika thread
        self._own_queue: str | None = None  # pika thread
        self._watcher = BindingWatcher(
            SYNC_EXCHANGE, management, vhost=vhost,
            on_add=lambda b: self._on_member(b, True),
            on_remove=lambda b: self._on_member(b, False), relist_interval=30.0, feed=feed,
            small=True)

    # -- loop thread ------------------------------------------------------------------------------

    async def announce(self, change: dict[str, Any], timeout: float = SYNC_TIMEOUT) -> None:
        """Until every other live proxy applied ``change`` (at most ``timeout`` s)."""
        members = self._members - {self.queue}
        if not members or self.queue is None:
            return
        ident = uuid.uuid4().hex
        done: asyncio.Future[None] = self._loop.create_future()
        self._pending[ident] = (done, members)
        body = json.dumps(change).encode("utf-8")
        own = self.queue
        self._to_pika(lambda: self._on_publish(ALL, body, own, ident))
        try:
            await asyncio.wait_for(asyncio.shield(done), timeout)
        except asyncio.TimeoutError:
            self.timeouts += 1
            LOG.warning("%d other proxies did not apply a change within %g s (%s): answered "
                        "the client anyway", len(members), timeout, change)
        finally:
            self._pending.pop(ident, None)

    def _replied(self, ident: str, member: str) -> None:
        entry = self._pending.get(ident)
        if entry is not None:
            entry[1].discard(member)
            if not entry[1] and not entry[0].done():
                entry[0].set_result(None)

    def _membership(self, queue: str, added: bool) -> None:
        if added:
            self._members.add(queue)
            return
        self._members.discard(queue)
        for ident in list(self._pending):
            self._replied(ident, queue)

    def _applied(self, change: dict[str, Any], reply_to: str, ident: str) -> None:
        try:
            self._apply(change)
        finally:
            own = self.queue
            self._to_pika(lambda: self._on_publish(reply_to, json.dumps({"from": own}).encode(),
                                                   own, ident, _REPLY))

    @property
    def members(self) -> int:
        """The other proxies of the vhost that changes wait for."""
        return len(self._members - {self.queue})

    def _own(self, queue: str | None) -> None:
        self.queue = queue
        if self._on_queue is not None:
            self._on_queue()

    # -- pika thread ------------------------------------------------------------------------------

    def _to_loop(self, callback: Callable[..., Any], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass  # the loop is closed: the proxy is stopping

    def start(self, connection: Any) -> None:
        """On each (re)connect of the catalog's connection: this proxy's queue, then the
        members' watcher."""
        self._own_queue = None
        self._to_loop(self._own, None)
        channel = connection.channel(on_open_callback=self._on_channel_open)
        channel.add_on_close_callback(self._on_channel_closed)
        self._channel = channel
        self._watcher.start(connection)

    def stop(self) -> None:
        self._watcher.stop()
        channel, self._channel = self._channel, None
        if channel is not None and channel.is_open:
            channel.close()

    def _on_channel_open(self, channel: Any) -> None:
        if channel is not self._channel:
            channel.close()
            return

        def declared(frame: Any) -> None:
            queue = frame.method.queue
            channel.queue_bind(queue, SYNC_EXCHANGE, queue)
            channel.queue_bind(queue, SYNC_EXCHANGE, ALL,
                               callback=lambda _frame: self._on_bound(queue))
            channel.basic_consume(queue, self._on_message, auto_ack=True)

        channel.queue_declare("", exclusive=True, auto_delete=True, callback=declared)

    def _on_bound(self, queue: str) -> None:
        self._own_queue = queue
        self._to_loop(self._own, queue)

    def _on_channel_closed(self, channel: Any, reason: Exception) -> None:
        if channel is self._channel:
            self._channel = None
            self._to_loop(self._own, None)
            # 200: closed by this side, at the proxy's stop (a warning at every stop before)
            LOG.log(logging.INFO if getattr(reason, "reply_code", None) == 200
                    else logging.WARNING,
                    "proxy sync channel closed: %s (other proxies are not waited for "
                    "until the catalog reconnects)", reason)

    def _on_member(self, binding: Binding, added: bool) -> None:
        if binding.destination_type == "queue" and binding.binding_key == ALL:
            self._to_loop(self._membership, binding.destination, added)

    def _on_publish(self, key: str, body: bytes, own: str | None, ident: str,
                    kind: str = "change") -> None:
        channel = self._channel
        if channel is None or not channel.is_open or own is None:
            return  # the waiter times out, or its member goes away
        channel.basic_publish(SYNC_EXCHANGE, key, body, pika.BasicProperties(
            reply_to=own, correlation_id=ident, type=kind, user_id=self._user))

    def _on_message(self, _channel: Any, _method: Any, properties: Any, body: bytes) -> None:
        if properties.user_id != self._user or properties.reply_to is None or \
                properties.correlation_id is None:
            return  # not from a proxy of this deployment
        try:
            message = json.loads(body)
        except ValueError:
            return
        if properties.type == _REPLY:
            self._to_loop(self._replied, properties.correlation_id, message.get("from"))
        elif properties.reply_to != self._own_queue and isinstance(message, dict):
            self._to_loop(self._applied, message, properties.reply_to,
                          properties.correlation_id)
