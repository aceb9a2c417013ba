"""The source side of a shovel: consume, filter, and hand each message to the relay.

As the plugin's source behaviour (``rabbit_amqp091_shovel``'s source half), a :class:`Source`
connects (see :class:`~rtroute.shovel.side.Side`), runs the source declarations, picks
the queue (``queue``, or a queue bound to ``src-exchange``), sets the prefetch window and
consumes. Deliveries arrive as frames (:mod:`rtroute.amqp.frames`), are filtered, and each
becomes a :class:`SourceDelivery`, which is both the relay's item (settled at the source) and
its one publish to the destination: the session's :class:`~rtroute.relay.Relay` publishes it,
maps the destination's answer back to it and settles it through the source's
:class:`~rtroute.amqp.settle.Settler` as :class:`~rtroute.shovel.policy.ShovelPolicy` says.

Acknowledgements (``ack_mode``):

- ``on_confirm``: a source message is acknowledged only once the destination confirmed it.
  Acks go out with ``multiple`` once per ioloop turn.
- ``on_publish``: the source message is acknowledged once handed to the destination socket.
- ``no_ack``: the source delivers without acknowledgements.

What the source itself decides: the filter (``drop`` acks a mismatch, ``leave`` holds it then
requeues it), the ``src-delete-after`` budget (deliveries beyond it go back untouched), and
whether the source queue has a dead-letter exchange (:meth:`Source.has_dlx`, asked of the
source's management API): the shovel nacks without requeue only then, and requeues otherwise;
``durable_queue`` consumes ``src-exchange`` through a durable named queue that keeps what
arrives while the shovel is away.
"""
from __future__ import annotations

import collections
import logging
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import pika.exceptions

from rtroute.amqp import ManagementClient, ManagementError, frames, pika_internals
from rtroute.amqp.broker_identity import identity_from_server_properties
from rtroute.amqp.settle import Settler
from rtroute.amqp.uri import AmqpUri
from rtroute.relay.outgoing import Item
from rtroute.relay.policy import Settlement
from rtroute.shovel.side import Side, short_reason
from rtroute.shovel.status import scrub

if TYPE_CHECKING:
    from rtroute.relay import BrokerUpstream, Relay
    from rtroute.shovel.destination import Destination
    from rtroute.shovel.session import Session

__all__ = ["DLX_CHECK_TTL", "PENDING_LIMIT", "Source", "SourceDelivery"]

LOGGER = logging.getLogger("rtroute.shovel")

#: Waiting deliveries after which an unbounded source (no prefetch) is no longer read.
PENDING_LIMIT = 2000
#: Seconds an answer of the source's management API (dead-letter exchange or not) is trusted.
DLX_CHECK_TTL = 60.0


class SourceDelivery(Item):
    """One source delivery on its way: the relay's item and its one publish (see
    :class:`~rtroute.relay.outgoing.Outgoing`, whose attributes it has).

    ``source_exchange`` and ``source_key``: where it was published, as short strings (length
    octet included); ``parts``: its content frames as received (header, bodies); ``frames``:
    the ``basic.publish`` for the destination followed by those frames (once addressed, see
    :meth:`Source.on_delivery`).
    """

    __slots__ = ("checked", "exchange", "frame_count", "frames", "parts", "routing_key",
                 "source_exchange", "source_key")
    # the slots set once it is addressed (Source.on_delivery), for the type checker
    checked: bool
    exchange: str
    frame_count: int
    frames: list[bytes]
    routing_key: str

    # the Outgoing attributes every shovel publish shares
    item = None            # its own item
    mandatory = True       # a return must be matched (and acted on)
    properties = None      # published as frames

    def __init__(self, tag: int, exchange: bytes, routing_key: bytes, parts: list,
                 settler: Settler) -> None:
        # Item's and Delivery's fields set here: one call less per message
        self.tag = tag
        self.awaiting = 1       # its one publish
        self.failed = self.settled = self.parked = False
        self.attempts = 0
        self.settlement = None
        self.settler = settler
        self.source_exchange = exchange
        self.source_key = routing_key
        self.parts = parts

    def body(self) -> bytes:
        """The message body (what a ``basic.return`` is matched against)."""
        return frames.body_of(self.parts)


class Source(Side):
    """The source side of one session (see the module docstring)."""

    def __init__(self, session: Session, uris: list[AmqpUri]) -> None:
        super().__init__(session, "source", uris, session.cfg.sources.declarations)
        cfg, worker = self.cfg, self.worker
        self.queue: str | None = None
        self.consumer_tag: str | None = None
        self.draining = False
        # does the source queue have a dead-letter exchange: (answer, monotonic time) or None
        self.dlx_answer: tuple[bool, float] | None = None
        self.dlx_asking = False
        self.ack_mode = cfg.ack_mode
        self.filter = worker.filter
        # no_ack with a delete-after limit still acks (at once), to take exactly N messages
        self.auto_ack = cfg.ack_mode == "no_ack" and worker.remaining is None \
            and not worker.measure_queue
        self.acked_mode = not self.auto_ack
        self.unbounded = self.auto_ack or cfg.prefetch_count == 0
        self.take_budget: int | None = None
        # deliveries beyond src-delete-after (a prefetch above it): kept unacknowledged and
        # parked (no multiple ack covers them, the broker delivers nothing more in their
        # place), taken when a requeue gives the budget room, else back to the queue when the
        # channel closes; (delivery, exchange, routing key), in delivery order
        self.beyond: collections.deque[tuple[SourceDelivery, bytes, bytes]] = \
            collections.deque()
        # the session's (see link): acks to the source in delivery order (once its channel is
        # open), the relay, and how each delivery is addressed to the destination
        self.settler: Settler = None  # type: ignore[assignment]  # set by link, before use
        self.relay: Relay = None  # type: ignore[assignment]  # set by link, before use
        self.upstream: BrokerUpstream = None  # type: ignore[assignment]  # set by link
        self.put: Any = None
        self.transform: Any = None
        self.method_frame: Any = None      # (exchange, key) -> basic.publish frame
        self.fixed_exchange: bytes | None = None
        self.fixed_key: bytes | None = None
        self.exchange_text = ""
        self.key_text = ""
        self.same_framing = True
        self.checked = True
        self.channel_number = 0
        self.frame_max = 0

    def link(self, relay: Relay, upstream: BrokerUpstream, destination: Destination) -> None:
        """Hand deliveries to ``relay``, settled through a settler of ``upstream`` (the
        relay's): one bound call per message, no glue between."""
        self.relay = relay
        self.upstream = upstream
        self.settler = upstream.open()
        self.put = relay.put
        self.transform = destination.transform if destination.transform_needed else None
        self.fixed_exchange = destination.fixed_exchange
        self.fixed_key = destination.fixed_key
        self.exchange_text = destination.fixed_exchange_text
        self.key_text = destination.fixed_key_text

    def address(self, destination: Destination) -> None:
        """Both sides are ready: the destination's channel and frame size (see
        :meth:`Destination.prepare`)."""
        # made by Destination.prepare, which runs first
        self.method_frame = destination.method_frames.get  # type: ignore[union-attr]
        self.same_framing = destination.same_framing
        self.channel_number = destination.channel_number
        self.frame_max = destination.frame_max
        # content frames passed through as received need no frame_max check
        self.checked = self.same_framing and self.transform is None

    @property
    def reading(self) -> bool:
        """False while the source socket is not read (an unbounded source, too much waiting)."""
        return self.relay.reading

    def set_reading(self, on: bool) -> bool:
        """Stop or restart reading the source socket; False where that cannot be done."""
        return pika_internals.set_reading(self.connection, on)

    # -- starting ------------------------------------------------------------------------------

    def connected_to(self, connection: Any, uri: AmqpUri) -> None:
        self.status.current_source = uri.masked()

    def channel_opened(self, connection: Any, channel: Any) -> None:
        self.settler.reset(channel)
        worker = self.worker
        if worker.shovelled_by is None:
            props = getattr(connection, "server_properties", None) or {}
            name = props.get("cluster_name")
            if isinstance(name, bytes):
                name = name.decode("utf-8", "replace")
            worker.shovelled_by = name or f"rtroute@{socket.gethostname()}"
        self.declare(connection, channel, self._declared)

    def _declared(self, last_queue: str | None) -> None:
        cfg, channel = self.cfg, self.channel
        if cfg.src_exchange is not None:
            def bind(frame: Any) -> None:
                queue = frame.method.queue
                channel.queue_bind(queue, cfg.src_exchange, routing_key=cfg.src_exchange_key,
                                   callback=self.guard(lambda _f: self._use_queue(queue)))

            if cfg.durable_queue is not None:
                channel.queue_declare(cfg.durable_queue, durable=True, callback=self.guard(bind))
            else:
                channel.queue_declare("", exclusive=True, callback=self.guard(bind))
        elif cfg.queue == "":
            if last_queue is None:
                self.session.fail('queue is "" (the most recently declared queue) but the '
                                  "source declarations declare no queue", fatal=True)
                return
            self._use_queue(last_queue)
        else:
            self._use_queue(cfg.queue or "")

    def _use_queue(self, queue: str) -> None:
        self.queue = queue
        if self.auto_ack:
            self._qos_done()
        else:
            self.channel.basic_qos(prefetch_count=self.cfg.prefetch_count,
                                   callback=self.guard(lambda _f: self._qos_done()))

    def _qos_done(self) -> None:
        worker = self.worker
        if worker.measure_queue and worker.remaining is None:
            def measured(frame: Any) -> None:
                worker.remaining = frame.method.message_count
                worker.measure_queue = False
                self._now_ready()

            self.channel.queue_declare(self.queue, passive=True, callback=self.guard(measured))
        else:
            self._now_ready()

    def _now_ready(self) -> None:
        self.take_budget = self.worker.remaining
        self.ready = True
        self.session.maybe_run()

    def consume(self) -> None:
        """Start consuming; deliveries go to :meth:`on_delivery` through the frame reader."""
        channel = self.channel
        channel.add_on_cancel_callback(lambda _frame: self.session.fail(
            "the source broker cancelled the consumer (queue deleted?)"))
        # installed when the connection opened, before any consume
        self.reader.intercept(channel.channel_number, self.on_delivery)  # type: ignore[union-attr]
        self.consumer_tag = channel.basic_consume(
            self.queue, self._on_unexpected_message, auto_ack=self.auto_ack,
            consumer_tag=self.cfg.consumer_name, arguments=self.cfg.consumer_args or None)

    def _on_unexpected_message(self, _channel: Any, method: Any, _props: Any, _body: Any) -> None:
        # deliveries go to on_delivery through the frame reader; pika never sees them
        self.session.fail(f"delivery {method.delivery_tag} bypassed the frame reader")

    def cancel_consumer(self) -> None:
        """Take no more deliveries (a no-op before consuming or on a closed channel)."""
        if self.ready and self.consumer_tag is not None and self.channel.is_open:
            try:
                self.channel.basic_cancel(self.consumer_tag)
            except pika.exceptions.AMQPError:
                pass
            self.consumer_tag = None

    # -- the hot path --------------------------------------------------------------------------

    def on_delivery(self, tag: int, exchange: bytes, routing_key: bytes, parts: list,
                    beyond: SourceDelivery | None = None) -> None:
        """One delivery of the source (``beyond``: one parked beyond src-delete-after, taken
        now)."""
        if not self.alive:
            return
        entry = beyond if beyond is not None else \
            SourceDelivery(tag, exchange, routing_key, parts, self.settler)
        if self.acked_mode:
            if self.take_budget is not None:
                if self.draining:  # the consumer is cancelled: back to the queue untouched
                    self.settler.nack(entry, requeue=True)
                    return
                if self.take_budget <= 0:
                    # beyond src-delete-after: not nacked (the broker would deliver it again
                    # at once, every turn, until the budget's last confirm): parked
                    self.settler.track(entry)
                    self.settler.park(entry)
                    self.beyond.append((entry, exchange, routing_key))
                    return
                self.take_budget -= 1
            if beyond is None:
                # tracked here, not by the relay: the 1:1 lane (relay.put) takes only what
                # the filter lets through, and a held or parked delivery holds acks back too
                self.settler.track(entry)
            else:
                self.settler.unpark(entry)
            if self.filter is not None and not self.filter.matches(entry):
                self.counters["filtered"] += 1
                if self.filter.leave:
                    self.upstream.settle_as(entry, Settlement.HOLD)
                else:
                    self.settler.ack(entry)
                return
            if self.ack_mode == "no_ack":
                self.settler.ack(entry)  # acknowledged on receipt: no_ack with a limit
        elif self.filter is not None and not self.filter.matches(entry):
            self.counters["filtered"] += 1
            return
        if self.transform is not None:
            self.transform(entry)
        # addressed here rather than in a call of its own: this runs once per message
        if self.fixed_exchange is not None:
            entry.exchange = self.exchange_text
        else:
            entry.exchange = exchange[1:].decode("utf-8", "replace")
        if self.fixed_key is not None:
            entry.routing_key = self.key_text
        else:
            entry.routing_key = routing_key[1:].decode("utf-8", "replace")
        if not self.same_framing:
            parts = frames.rechannel(entry.parts, self.channel_number, self.frame_max)
        else:
            parts = entry.parts
        entry.frames = [self.method_frame(self.fixed_exchange or exchange,
                                          self.fixed_key or routing_key), *parts]
        entry.frame_count = len(parts) + 1
        entry.checked = self.checked
        self.put(entry)

    # -- settling ------------------------------------------------------------------------------

    def after_acks(self, count: int) -> None:
        """After the acks of an ioloop turn went to the source (``count`` messages)."""
        if not self.alive:
            return
        self.counters["acked"] += count
        if self.take_budget is not None:
            # what a new session would still have to take if this one died now
            self.worker.remaining = self.take_budget + self.in_hand
        self.session.maybe_end()

    def settling_failed(self, what: str, exc: Exception) -> None:
        self.session.fail(f"{what} failed: {short_reason(exc)}")

    def nacked(self, _entry: SourceDelivery, requeue: bool) -> None:
        """A message went back to the source queue (``requeue``) or to its dead-letter
        exchange."""
        if requeue:
            self.counters["requeued"] += 1
            if self.take_budget is not None:
                self.take_budget += 1
                if self.beyond:  # room: the next parked one goes (after this settling)
                    self.session.later(0, self._take_beyond)
        else:
            self.counters["dead_lettered"] += 1

    def _take_beyond(self) -> None:
        if self.beyond and not self.draining and self.take_budget:
            entry, exchange, routing_key = self.beyond.popleft()
            self.on_delivery(entry.tag, exchange, routing_key, entry.parts, entry)

    @property
    def in_hand(self) -> int:
        """Deliveries taken and not yet acknowledged to the broker (those parked beyond
        src-delete-after are not taken)."""
        return self.settler.outstanding - len(self.beyond)

    def has_dlx(self) -> bool | None:
        """Whether the source queue has a dead-letter exchange (an argument or a policy naming
        an exchange that exists), as its broker's management API says; None while asking.
        When the API cannot be asked (unreachable, refused, another broker's): False."""
        answer = self.dlx_answer
        if answer is not None and time.monotonic() - answer[1] < DLX_CHECK_TTL:
            return answer[0]
        if self.dlx_asking:
            return None
        self.dlx_asking = True
        assert self.uri is not None and self.queue is not None
        worker = self.worker
        uri, queue, vhost = worker.uri_text(self.uri), self.queue, self.uri.vhost
        where = self.uri.masked()
        identity = identity_from_server_properties(
            getattr(self.connection, "server_properties", None))
        management_uri = self.cfg.src_management_uri

        def ask() -> None:
            problem = None
            try:
                client = ManagementClient.from_amqp_uri(uri, management_uri, timeout=5)
                client.expect_broker(identity, where, "src_management_uri")
                has_dlx = _has_dead_letter_exchange(client, queue, vhost)
            except (ManagementError, ValueError) as exc:
                has_dlx, problem = False, scrub(str(exc))
            worker.call_in_loop(lambda: self._dlx_answered(has_dlx, problem))

        threading.Thread(target=ask, name=f"shovel-{self.cfg.name}-dlx", daemon=True).start()
        return None

    def _dlx_answered(self, has_dlx: bool, problem: str | None) -> None:
        self.dlx_asking = False
        if not self.alive:
            return
        if problem is not None:
            LOGGER.warning("shovel %r: cannot tell whether source queue %r has a dead-letter "
                           "exchange (%s); requeueing instead of dead-lettering",
                           self.cfg.name, self.queue, problem)
        elif not has_dlx and (self.dlx_answer is None or self.dlx_answer[0]):
            LOGGER.warning("shovel %r: source queue %r has no dead-letter exchange; "
                           "requeueing instead of dead-lettering", self.cfg.name, self.queue)
        self.dlx_answer = (has_dlx, time.monotonic())
        self.upstream.dlx_answered()


def _has_dead_letter_exchange(client: ManagementClient, queue: str, vhost: str) -> bool:
    """Whether ``queue`` dead-letters to an existing exchange (``x-dead-letter-exchange`` or a
    policy's ``dead-letter-exchange``; the default exchange ``""`` always exists).

    Raises:
        ManagementError: the API could not answer (NotFound: no such queue).
    """
    info = client.queue(queue, vhost)
    arguments = info.get("arguments")
    policy = info.get("effective_policy_definition")
    exchange = arguments.get("x-dead-letter-exchange") if isinstance(arguments, dict) else None
    if exchange is None and isinstance(policy, dict):
        exchange = policy.get("dead-letter-exchange")
    if not isinstance(exchange, str):
        return False
    return exchange == "" or client.exchange_exists(exchange, vhost)
