"""The users' stub broker: :class:`StubRabbit`, a RabbitMQ for the sidecar, the shovel and the
publisher to run their own code on, from the connect on (tests/sidecar, tests/shovel,
tests/publisher). No RabbitMQ, no sockets, no threads of its own: time is the virtual time of
:class:`~tests.stub_broker.StubIOLoop`.

Its connections stand in for ``pika.SelectConnection`` (``monkeypatch.setattr(pika,
"SelectConnection", rabbit.connect)``; a ``ReconnectingConnection`` made with
``ioloop=rabbit.ioloop`` runs on it). The broker has exchanges (declared, not routed through),
queues, consumers with prefetch, acks, requeues and dead letters:

- deliveries reach a connection as frame bytes through its read callback (the frame reader
  its user installed, or pika's own path, which hands them to the consumer's callback), and
  so do the confirms of what it publishes (:meth:`StubRabbit.ack`, :meth:`StubRabbit.nack`,
  or every publish with ``confirm=True``);
- what a connection writes is parsed back into :class:`~tests.stub_broker.Published` records
  (numbered on a confirming channel); a publish to the default exchange naming a queue lands
  in that queue, and a ``mandatory`` one naming no queue is returned;
- each message keeps its place (:attr:`Message.state`): ready in its queue, unacked on a
  channel, acked, dead (nacked or rejected without requeue) or dropped (``auto_ack``); a
  channel or connection that goes puts its unacked deliveries back at the head of their
  queues, in order, marked redelivered, as RabbitMQ does.

It asserts what :class:`~tests.stub_broker.StubBroker` asserts of what is written (no content
header above ``frame_max``, at most one write per turn per connection, nothing while blocked)
and answers the rest as RabbitMQ does: a declaration that finds nothing (``passive``) or a
consume of a missing queue closes the channel with 404, and an ack or nack of a delivery tag
its channel does not have (the #33 bug: a tag of an old channel) closes it with
``406 PRECONDITION_FAILED``; :attr:`StubRabbit.errors` lists them.
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, Callable

import pika
import pika.exceptions
import pika.frame
import pika.spec

from tests.stub_broker import (
    Published,
    Settled,
    StubChannel,
    StubConnection,
    StubIOLoop,
    StubTransport,
    parse_publishes,
)

__all__ = ["Message", "RabbitChannel", "RabbitConnection", "StubQueue", "StubRabbit"]

@dataclass
class Message:
    """A message in a :class:`StubRabbit` queue (or taken from one): where it is now is
    ``state`` -- ``ready``, ``unacked`` (on ``channel`` as ``tag``), ``acked``, ``dead``
    (nacked or rejected without requeue) or ``dropped`` (delivered with ``auto_ack``)."""

    body: bytes
    routing_key: str = ""
    exchange: str = ""
    properties: Any = None
    redelivered: bool = False
    state: str = "ready"
    queue: str = ""
    deliveries: int = 0
    channel: Any = None
    tag: int = 0


class StubQueue:
    """A queue: its ``ready`` messages in order, and its consumers as ``(channel, tag)``."""

    def __init__(self, name: str, arguments: dict | None = None) -> None:
        self.name = name
        self.arguments = dict(arguments or {})
        self.ready: list[Message] = []
        self.consumers: list[tuple[RabbitChannel, str]] = []


class _Transport(StubTransport):
    """What :func:`rtroute.amqp.pika_internals.coalesce_io` patches on a transport."""

    def __init__(self) -> None:
        super().__init__()
        self._tx_buffers: Any = deque()

    def _produce(self) -> None:
        pass


class RabbitChannel(StubChannel):
    """A pika ``Channel`` of a :class:`RabbitConnection`: declarations, qos, consume,
    cancel, acks and close, answered as RabbitMQ answers them (on the next ioloop turn)."""

    connection: RabbitConnection

    def __init__(self, connection: RabbitConnection, number: int) -> None:
        super().__init__(connection, number)
        self.prefetch = 0
        self.unacked: dict[int, Message] = {}
        self.next_tag = 1
        self.consumers: dict[str, tuple[str, bool, Callable]] = {}
        self.closing = False
        self._on_cancel: list[Callable] = []

    @property
    def rabbit(self) -> StubRabbit:
        return self.connection.rabbit

    @property
    def is_closed(self) -> bool:
        return not self.is_open

    @property
    def is_closing(self) -> bool:
        return self.closing and self.is_open

    def add_on_cancel_callback(self, callback: Callable) -> None:
        self._on_cancel.append(callback)

    def _answer(self, callback: Callable | None, method: Any) -> None:
        if not self.is_open or not self.connection.is_open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        if callback is not None:
            frame = pika.frame.Method(self.channel_number, method)
            self.rabbit.ioloop.call_later(
                0, lambda: callback(frame) if self.is_open else None)

    def _refuse(self, code: int, text: str) -> None:
        """The broker closes the channel (after this turn), as for a refused method."""
        self.rabbit.errors.append(f"channel {self.channel_number}: {code} {text}")
        self.rabbit.ioloop.call_later(0, lambda: self.close_by_broker(code, text)
                                      if self.is_open else None)

    # -- declarations ------------------------------------------------------------------------

    def exchange_declare(self, exchange: str, exchange_type: Any = "direct",
                         passive: bool = False, durable: bool = False,
                         auto_delete: bool = False, internal: bool = False,
                         arguments: dict | None = None, callback: Callable | None = None
                         ) -> None:
        rabbit = self.rabbit
        rabbit.declared.append(("exchange", exchange, passive))
        if passive and exchange not in rabbit.exchanges:
            self._refuse(404, f"NOT_FOUND - no exchange '{exchange}' in vhost '/'")
            return
        rabbit.exchanges.setdefault(exchange, str(getattr(exchange_type, "value",
                                                          exchange_type)))
        self._answer(callback, pika.spec.Exchange.DeclareOk())

    def exchange_delete(self, exchange: str | None = None, if_unused: bool = False,
                        callback: Callable | None = None) -> None:
        self.rabbit.exchanges.pop(exchange or "", None)
        self._answer(callback, pika.spec.Exchange.DeleteOk())

    def exchange_bind(self, destination: str, source: str, routing_key: str = "",
                      arguments: dict | None = None, callback: Callable | None = None) -> None:
        self.rabbit.bindings.append((source, destination, routing_key))
        self._answer(callback, pika.spec.Exchange.BindOk())

    def exchange_unbind(self, destination: str | None = None, source: str | None = None,
                        routing_key: str = "", arguments: dict | None = None,
                        callback: Callable | None = None) -> None:
        self._answer(callback, pika.spec.Exchange.UnbindOk())

    def queue_declare(self, queue: str, passive: bool = False, durable: bool = False,
                      exclusive: bool = False, auto_delete: bool = False,
                      arguments: dict | None = None, callback: Callable | None = None) -> None:
        rabbit = self.rabbit
        rabbit.declared.append(("queue", queue, passive))
        if passive and queue not in rabbit.queues:
            self._refuse(404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")
            return
        if not queue:
            rabbit.named += 1
            queue = f"amq.gen-{rabbit.named}"
        found = rabbit.queues.get(queue) or rabbit.declare_queue(queue, arguments)
        self._answer(callback, pika.spec.Queue.DeclareOk(
            queue, len(found.ready), len(found.consumers)))

    def queue_bind(self, queue: str, exchange: str, routing_key: str | None = None,
                   arguments: dict | None = None, callback: Callable | None = None) -> None:
        if exchange not in self.rabbit.exchanges:
            self._refuse(404, f"NOT_FOUND - no exchange '{exchange}' in vhost '/'")
            return
        self.rabbit.bindings.append((exchange, queue, routing_key or ""))
        self._answer(callback, pika.spec.Queue.BindOk())

    def queue_unbind(self, queue: str, exchange: str | None = None,
                     routing_key: str | None = None, arguments: dict | None = None,
                     callback: Callable | None = None) -> None:
        self._answer(callback, pika.spec.Queue.UnbindOk())

    def queue_delete(self, queue: str, if_unused: bool = False, if_empty: bool = False,
                     callback: Callable | None = None) -> None:
        found = self.rabbit.queues.pop(queue, None)
        self._answer(callback, pika.spec.Queue.DeleteOk(len(found.ready) if found else 0))

    def queue_purge(self, queue: str, callback: Callable | None = None) -> None:
        found = self.rabbit.queues[queue]
        count, found.ready = len(found.ready), []
        self._answer(callback, pika.spec.Queue.PurgeOk(count))

    # -- consuming ---------------------------------------------------------------------------

    def basic_qos(self, prefetch_size: int = 0, prefetch_count: int = 0,
                  global_qos: bool = False, callback: Callable | None = None) -> None:
        self.prefetch = prefetch_count
        self._answer(callback, pika.spec.Basic.QosOk())
        self.rabbit.dispatch_soon()

    def basic_consume(self, queue: str, on_message_callback: Callable, auto_ack: bool = False,
                      exclusive: bool = False, consumer_tag: str | None = None,
                      arguments: dict | None = None, callback: Callable | None = None) -> str:
        if not self.is_open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        rabbit = self.rabbit
        if consumer_tag is None:
            rabbit.named += 1
            consumer_tag = f"ctag{self.channel_number}.{rabbit.named}"
        found = rabbit.queues.get(queue)
        if found is None:
            self._refuse(404, f"NOT_FOUND - no queue '{queue}' in vhost '/'")
            return consumer_tag
        self.consumers[consumer_tag] = (queue, auto_ack, on_message_callback)
        found.consumers.append((self, consumer_tag))
        self._answer(callback, pika.spec.Basic.ConsumeOk(consumer_tag))
        rabbit.dispatch_soon()
        return consumer_tag

    def basic_cancel(self, consumer_tag: str = "", callback: Callable | None = None) -> None:
        self._stop_consumer(consumer_tag)
        self._answer(callback, pika.spec.Basic.CancelOk(consumer_tag))

    def _stop_consumer(self, consumer_tag: str) -> None:
        consumer = self.consumers.pop(consumer_tag, None)
        if consumer is not None:
            found = self.rabbit.queues.get(consumer[0])
            if found is not None and (self, consumer_tag) in found.consumers:
                found.consumers.remove((self, consumer_tag))

    def cancel_by_broker(self, consumer_tag: str) -> None:
        """``basic.cancel`` from the broker (the queue was deleted)."""
        self._stop_consumer(consumer_tag)
        frame = pika.frame.Method(self.channel_number, pika.spec.Basic.Cancel(consumer_tag))
        for callback in list(self._on_cancel):
            callback(frame)

    def _settle(self, kind: str, tag: int, multiple: bool, requeue: bool) -> None:
        if self.refuse or not self.is_open:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        if self.connection.is_closed:
            raise pika.exceptions.ConnectionWrongStateError(
                "Attempted to send a frame on closed connection.")
        self.settled.append(Settled(kind, tag, multiple, requeue))
        tags = sorted(t for t in self.unacked if t <= tag) if multiple else \
            [tag] if tag in self.unacked else []
        if not tags:
            self._refuse(406, f"PRECONDITION_FAILED - unknown delivery tag {tag}")
            return
        rabbit = self.rabbit
        messages = [self.unacked.pop(t) for t in tags]
        if kind == "ack":
            for message in messages:
                message.state, message.channel = "acked", None
                rabbit.acked.append(message)
        elif requeue:
            rabbit.requeue(messages)
        else:
            for message in messages:
                message.state, message.channel = "dead", None
                rabbit.dead.append(message)
        rabbit.dispatch_soon()

    # -- closing -----------------------------------------------------------------------------

    def close(self, reply_code: int = 0, reply_text: str = "Normal shutdown") -> None:
        if not self.is_open or self.closing:
            raise pika.exceptions.ChannelWrongStateError("Channel is closed.")
        self.closing = True

        def closed() -> None:
            if self.is_open:
                self._gone(pika.exceptions.ChannelClosedByClient(reply_code, reply_text))

        self.rabbit.ioloop.call_later(0, closed)

    def close_by_broker(self, code: int, text: str) -> None:
        self._gone(pika.exceptions.ChannelClosedByBroker(code, text))

    def _gone(self, reason: Exception) -> None:
        """The channel is closed: its consumers go, its unacked deliveries are requeued, then
        its close callbacks run."""
        self.is_open = False
        for tag in list(self.consumers):
            self._stop_consumer(tag)
        unacked, self.unacked = self.unacked, {}
        self.rabbit.requeue([unacked[t] for t in sorted(unacked)])
        self.rabbit.dispatch_soon()
        for callback in list(self._on_close):
            callback(self, reason)


class RabbitConnection(StubConnection):
    """A ``pika.SelectConnection`` on a :class:`StubRabbit` (see :meth:`StubRabbit.connect`)."""

    channels: list[RabbitChannel]  # type: ignore[assignment]

    def __init__(self, rabbit: StubRabbit, on_open: Callable | None,
                 on_open_error: Callable | None, on_close: Callable | None) -> None:
        super().__init__(rabbit, rabbit.ioloop, rabbit.frame_max)  # type: ignore[arg-type]
        self.rabbit = rabbit
        self._transport = _Transport()
        self.is_open = False
        self.server_properties = {"cluster_name": b"rabbit@stub", "version": b"4.3.6",
                                  "product": b"RabbitMQ"}
        self._on_open = on_open
        self._on_open_error = on_open_error
        self._on_close = on_close
        self._delivery: list[Any] = []  # a delivery read by pika's path: method, header, body
        self.writes_this_turn = 0

    def _opened(self) -> None:
        if self.rabbit.refuse_connections is not None:
            self.is_closed = True
            if self._on_open_error is not None:
                self._on_open_error(self, pika.exceptions.AMQPConnectionError(
                    self.rabbit.refuse_connections))
            return
        self.is_open = True
        if self._on_open is not None:
            self._on_open(self)

    def channel(self, channel_number: int | None = None,  # type: ignore[override]
                on_open_callback: Callable | None = None) -> RabbitChannel:
        if not self.is_open:
            raise pika.exceptions.ConnectionWrongStateError("Connection is closed.")
        channel = RabbitChannel(self, len(self.channels) + 1)
        self.channels.append(channel)
        if on_open_callback is not None:
            self.ioloop.call_later(0, lambda: on_open_callback(channel)
                                   if channel.is_open and self.is_open else None)
        return channel

    def close(self, reply_code: int = 200, reply_text: str = "Normal shutdown") -> None:
        if not self.is_open:
            raise pika.exceptions.ConnectionWrongStateError("Connection is closed.")
        self.is_closing = True
        self.ioloop.call_later(0, lambda: self.rabbit.lose(
            self, pika.exceptions.ConnectionClosedByClient(reply_code, reply_text)))

    # -- what the broker sends ---------------------------------------------------------------

    def _on_data_available(self, data: bytes) -> None:
        """pika's own read path (until a frame reader takes reading over)."""
        offset = 0
        while offset < len(data):
            consumed, frame = pika.frame.decode_frame(data[offset:])
            offset += consumed
            self._process_frame(frame)

    def _process_frame(self, frame: Any) -> None:
        """pika's dispatch, as far as the users need it: confirms to the channel's
        ``confirm_delivery`` callback, deliveries to the consumer's callback."""
        self.to_pika.append(frame)
        channel = self.channels[frame.channel_number - 1]
        method = getattr(frame, "method", None)
        if isinstance(method, (pika.spec.Basic.Ack, pika.spec.Basic.Nack)):
            if channel._on_ack_nack is not None:
                channel._on_ack_nack(frame)
            return
        if isinstance(method, pika.spec.Basic.Deliver):
            self._delivery = [frame]
        elif isinstance(frame, pika.frame.Header) and self._delivery:
            self._delivery.append(frame)
            if frame.body_size == 0:
                self._delivered(channel, b"")
        elif isinstance(frame, pika.frame.Body) and self._delivery:
            self._delivery.append(frame)
            body = b"".join(f.fragment for f in self._delivery[2:])
            if len(body) >= self._delivery[1].body_size:
                self._delivered(channel, body)

    def _delivered(self, channel: RabbitChannel, body: bytes) -> None:
        method, header = self._delivery[0].method, self._delivery[1]
        self._delivery = []
        consumer = channel.consumers.get(method.consumer_tag)
        if consumer is not None:
            consumer[2](channel, method, header.properties, body)

    def _adapter_emit_data(self, data: bytes) -> None:
        self.rabbit.written(self, data)


class StubRabbit:
    """A broker for the users of the relay (see the module docstring).

    Script API: :meth:`enqueue` messages; :meth:`ack`, :meth:`nack`, :meth:`return_` a
    publish (or :attr:`confirm` every publish as it comes); :meth:`block`; :meth:`drop` a
    connection (lost) or :meth:`close_channel`; ``refuse_connections`` (a reason) fails every
    connect. Where things are: :meth:`bodies` of a queue (ready and unacked, in queue order),
    :attr:`acked` (and delivered with ``auto_ack``), :attr:`dead`, :attr:`published`,
    :meth:`confirmed`.
    """

    def __init__(self, frame_max: int = 131072, ioloop: StubIOLoop | None = None,
                 confirm: bool = False) -> None:
        self.frame_max = frame_max
        self.ioloop = ioloop or StubIOLoop()
        self.confirm = confirm  # ack each publish on the turn after it is written
        self.exchanges: dict[str, str] = {"": "direct", "amq.direct": "direct",
                                          "amq.topic": "topic", "amq.fanout": "fanout"}
        self.queues: dict[str, StubQueue] = {}
        self.bindings: list[tuple[str, str, str]] = []
        self.declared: list[tuple[str, str, bool]] = []
        self.connections: list[RabbitConnection] = []
        self.published: list[Published] = []
        self.acked: list[Message] = []
        self.dead: list[Message] = []
        self.errors: list[str] = []  # channels the broker closed, and why
        self.settled_publishes: dict[int, str] = {}  # id(published) -> "ack" | "nack"
        self.refuse_connections: str | None = None
        self.blocked = False
        self.named = 0
        self.writes = 0
        self._dispatching = False
        self.ioloop.after_turn.append(self._end_of_turn)

    # -- connections -------------------------------------------------------------------------

    def connect(self, parameters: Any = None, on_open_callback: Callable | None = None,
                on_open_error_callback: Callable | None = None,
                on_close_callback: Callable | None = None, custom_ioloop: Any = None,
                **_ignored: Any) -> RabbitConnection:
        """``pika.SelectConnection``'s signature: the connection opens on the next turn."""
        connection = RabbitConnection(self, on_open_callback, on_open_error_callback,
                                      on_close_callback)
        self.connections.append(connection)
        self.ioloop.call_later(0, connection._opened)
        return connection

    @property
    def connection(self) -> RabbitConnection:
        """The last connection opened."""
        return self.connections[-1]

    def open_connections(self) -> list[RabbitConnection]:
        return [c for c in self.connections if c.is_open]

    def drop(self, connection: RabbitConnection | None = None) -> None:
        """The connection is lost (the socket went): see :meth:`lose`."""
        self.lose(connection or self.connection,
                  pika.exceptions.StreamLostError("Transport indicated EOF"))

    def lose(self, connection: RabbitConnection, reason: Exception) -> None:
        """``connection`` is closed: its channels close first (each requeues its unacked
        deliveries), then its close callback runs, as pika does."""
        if connection.is_closed:
            return
        connection.is_open = False
        connection.is_closing = False
        connection.is_closed = True
        for channel in connection.channels:
            if channel.is_open:
                channel._gone(reason)
        if connection._on_close is not None:
            connection._on_close(connection, reason)

    def close_channel(self, channel: RabbitChannel, code: int = 406,
                      text: str = "PRECONDITION_FAILED") -> None:
        channel.close_by_broker(code, text)

    def block(self, reason: str = "low on memory") -> None:
        self.blocked = True
        for connection in self.open_connections():
            frame = SimpleNamespace(method=pika.spec.Connection.Blocked(reason))
            for callback in list(connection._on_blocked):
                callback(connection, frame)

    def unblock(self) -> None:
        self.blocked = False
        for connection in self.open_connections():
            frame = SimpleNamespace(method=pika.spec.Connection.Unblocked())
            for callback in list(connection._on_unblocked):
                callback(connection, frame)

    # -- queues ------------------------------------------------------------------------------

    def declare_queue(self, name: str, arguments: dict | None = None) -> StubQueue:
        queue = self.queues.get(name)
        if queue is None:
            queue = self.queues[name] = StubQueue(name, arguments)
        return queue

    def enqueue(self, queue: str, body: bytes, routing_key: str = "", *,
                headers: dict | None = None, properties: Any = None,
                exchange: str = "") -> Message:
        """A message published to ``queue`` (declared if need be)."""
        if properties is None and headers is not None:
            properties = pika.BasicProperties(headers=headers)
        message = Message(body, routing_key, exchange, properties, queue=queue)
        self.declare_queue(queue).ready.append(message)
        self.dispatch_soon()
        return message

    def bodies(self, queue: str) -> list[bytes]:
        """The bodies in ``queue``: ready, then unacked (each in delivery order)."""
        found = self.queues.get(queue)
        if found is None:
            return []
        unacked = sorted((m for c in self.connections for ch in c.channels
                          for m in ch.unacked.values() if m.queue == queue),
                         key=lambda m: (m.channel.channel_number, m.tag))
        return [m.body for m in found.ready] + [m.body for m in unacked]

    def unacked(self) -> list[Message]:
        return [m for c in self.connections for ch in c.channels for m in ch.unacked.values()]

    def requeue(self, messages: list[Message]) -> None:
        """Back to the head of their queues, in order, marked redelivered."""
        for message in reversed(messages):
            message.state, message.channel, message.tag = "ready", None, 0
            message.redelivered = True
            queue = self.queues.get(message.queue)
            if queue is not None:
                queue.ready.insert(0, message)

    def dispatch_soon(self) -> None:
        if not self._dispatching:
            self._dispatching = True
            self.ioloop.call_later(0, self._dispatch)

    def _dispatch(self) -> None:
        """Each consumer gets what its channel's prefetch leaves room for, as frame bytes on
        its connection (one chunk per connection)."""
        self._dispatching = False
        chunks: dict[int, list[bytes]] = {}
        for queue in list(self.queues.values()):
            for channel, consumer_tag in list(queue.consumers):
                _name, auto_ack, _callback = channel.consumers[consumer_tag]
                while queue.ready and (auto_ack or not channel.prefetch
                                       or len(channel.unacked) < channel.prefetch):
                    message = queue.ready.pop(0)
                    tag = channel.next_tag
                    channel.next_tag += 1
                    message.deliveries += 1
                    if auto_ack:
                        message.state = "dropped"
                        self.acked.append(message)
                    else:
                        message.state, message.channel, message.tag = "unacked", channel, tag
                        channel.unacked[tag] = message
                    chunks.setdefault(id(channel.connection), []).append(
                        self._deliver_frames(channel, consumer_tag, tag, message))
        for connection in self.connections:
            data = chunks.get(id(connection))
            if data and connection.is_open:
                connection._on_data_available(b"".join(data))

    def _deliver_frames(self, channel: RabbitChannel, consumer_tag: str, tag: int,
                        message: Message) -> bytes:
        number = channel.channel_number
        body = message.body
        frame_max = self.frame_max
        parts = [pika.frame.Method(number, pika.spec.Basic.Deliver(
            consumer_tag, tag, message.redelivered, message.exchange,
            message.routing_key)).marshal(),
            pika.frame.Header(number, len(body),
                              message.properties or pika.BasicProperties()).marshal()]
        step = frame_max - 8
        for start in range(0, len(body), step):
            parts.append(pika.frame.Body(number, body[start:start + step]).marshal())
        return b"".join(parts)

    # -- publishes ---------------------------------------------------------------------------

    def written(self, connection: RabbitConnection, data: bytes) -> None:
        assert not self.blocked, "written while the connection is blocked"
        self.writes += 1
        connection.writes_this_turn += 1
        assert connection.writes_this_turn <= 1, "two writes in one ioloop turn"
        new = parse_publishes(data, connection.channels, self.writes, self.frame_max)
        for published in new:
            published.connection = connection
            if published.exchange == "" and published.routing_key in self.queues:
                self.queues[published.routing_key].ready.append(Message(
                    published.body, published.routing_key, "", published.properties,
                    queue=published.routing_key))
                self.dispatch_soon()
            elif published.exchange == "" and published.mandatory:
                # no such queue: RabbitMQ returns it (its confirm, an ack, follows)
                self.ioloop.call_later(0, lambda p=published: self.return_(p)
                                       if p.connection.is_open else None)
        self.published += new
        if self.confirm:
            confirming = [p for p in new if p.seq]
            if confirming:
                self.ioloop.call_later(0, lambda: [self.ack(p) for p in confirming
                                                   if id(p) not in self.settled_publishes])

    def to(self, exchange: str, routing_key: str | None = None) -> list[Published]:
        """What was published to ``exchange`` (and ``routing_key``)."""
        return [p for p in self.published if p.exchange == exchange
                and (routing_key is None or p.routing_key == routing_key)]

    def confirmed(self, exchange: str | None = None) -> list[bytes]:
        """The bodies of the publishes the broker acked (to ``exchange``)."""
        return [p.body for p in self.published if self.settled_publishes.get(id(p)) == "ack"
                and (exchange is None or p.exchange == exchange)]

    def unconfirmed(self) -> list[Published]:
        return [p for p in self.published if p.seq and id(p) not in self.settled_publishes]

    def ack(self, published: Published, multiple: bool = False) -> None:
        self._confirm(published, pika.spec.Basic.Ack(delivery_tag=published.seq,
                                                     multiple=multiple), "ack", multiple)

    def nack(self, published: Published, multiple: bool = False) -> None:
        self._confirm(published, pika.spec.Basic.Nack(delivery_tag=published.seq,
                                                      multiple=multiple), "nack", multiple)

    def ack_all(self) -> None:
        for published in self.unconfirmed():
            if published.connection.is_open:
                self.ack(published)

    def _confirm(self, published: Published, method: Any, kind: str, multiple: bool) -> None:
        connection = published.connection
        assert published.seq, "a publish on a channel not in confirm mode"
        covered = [p for p in self.published if p.connection is connection
                   and p.channel == published.channel and p.seq
                   and (p.seq <= published.seq if multiple else p is published)]
        for one in covered:
            assert id(one) not in self.settled_publishes or multiple, \
                f"sequence number {one.seq} settled twice"
            self.settled_publishes.setdefault(id(one), kind)
        if connection.is_open:
            connection._on_data_available(
                pika.frame.Method(published.channel, method).marshal())

    def return_(self, published: Published, code: int = 312, text: str = "NO_ROUTE") -> None:
        """``basic.return`` of ``published`` (ack it afterwards, as RabbitMQ does)."""
        connection = published.connection
        channel = connection.channels[published.channel - 1]
        method = pika.spec.Basic.Return(code, text, published.exchange, published.routing_key)
        for callback in list(channel._on_return):
            callback(channel, method, published.properties or pika.BasicProperties(),
                     published.body)

    def _end_of_turn(self) -> None:
        for connection in self.connections:
            connection.writes_this_turn = 0
