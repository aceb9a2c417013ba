"""The source side of a shovel: consume, filter, and settle each message at the source.

As the plugin's source behaviour (``rabbit_amqp091_shovel``'s source half), a :class:`Source`
connects (see :class:`~rtroute.shovel.side.Side`), runs the source declarations, picks
the queue (``queue``, or a queue bound to ``src-exchange``), sets the prefetch window and
consumes. Deliveries arrive as frames (:mod:`rtroute.amqp.frames`), are filtered, and go to the
destination; the destination reports each outcome to :meth:`Source.on_outcome`, which settles
the message through :class:`rtroute.amqp.settle.Settler`.

Acknowledgements (``ack_mode``):

- ``on_confirm``: a source message is acknowledged only once the destination confirmed it.
  Acks go out with ``multiple`` once per ioloop turn.
- ``on_publish``: the source message is acknowledged once handed to the destination socket.
- ``no_ack``: the source delivers without acknowledgements.

Where the plugin loses or loops messages, the source side does not:

- a returned (unroutable) message is nacked to the source without requeue (its dead-letter
  exchange takes it) by default, see ``on_unroutable``;
- a destination nack is retried with exponential back-off ``nack_retries`` times; then the
  message is *refused*: requeued at the source, held longer each round while the destination
  keeps refusing (``on_refused = "requeue"``), or dead-lettered there (``"dead_letter"``);
- the shovel never drops a message by itself: it nacks without requeue only when the source
  queue has a dead-letter exchange (asked of the source's management API, see
  :meth:`Source._has_dlx`), and requeues otherwise;
- ``durable_queue`` consumes ``src-exchange`` through a durable named queue that keeps what
  arrives while the shovel is away.
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import pika.exceptions

from rtroute.amqp import ManagementClient, ManagementError, pika_internals
from rtroute.amqp.broker_identity import identity_from_server_properties
from rtroute.amqp.confirm_window import Outcome, PublishFuture
from rtroute.amqp.settle import Delivery, Settler
from rtroute.amqp.uri import AmqpUri
from rtroute.shovel.side import Side, short_reason
from rtroute.shovel.status import scrub

if TYPE_CHECKING:
    from rtroute.shovel.destination import Destination
    from rtroute.shovel.session import Session

__all__ = ["HOLD_DELAY", "PENDING_LIMIT", "Source", "SourceDelivery"]

LOGGER = logging.getLogger("rtroute.shovel")

#: Waiting deliveries after which an unbounded source (no prefetch) is no longer read.
PENDING_LIMIT = 2000
#: Seconds a message the shovel gives back (filter ``leave``, ``on_unroutable = "requeue"``)
#: is held before it is requeued, so that a lone consumer does not spin on it.
HOLD_DELAY = 1.0
#: Longest wait between two republishes of a nacked message, and longest hold of a refused
#: message before it is requeued.
RETRY_DELAY_MAX = 30.0
#: Seconds an answer of the source's management API (dead-letter exchange or not) is trusted.
DLX_CHECK_TTL = 60.0
#: Seconds between two warnings about refused messages (the counters keep the full count).
REFUSED_LOG_INTERVAL = 60.0


class SourceDelivery(Delivery):
    """One source delivery on its way: where it was published and its content frames as
    received (see :mod:`rtroute.amqp.frames`). ``parked`` (see
    :class:`~rtroute.amqp.settle.Settler`) while it waits for a retry or a requeue."""

    __slots__ = ("attempts", "exchange", "parts", "routing_key")

    def __init__(self, tag: int, exchange: bytes, routing_key: bytes, parts: list) -> None:
        # Delivery's fields set here: one call less per message
        self.tag = tag
        self.awaiting = 0
        self.failed = self.settled = self.parked = False
        self.exchange = exchange        # short strings, length octet included
        self.routing_key = routing_key
        self.parts = parts              # header frame, body frames
        self.attempts = 0


class Source(Side):
    """The source side of one session (see the module docstring)."""

    def __init__(self, session: Session, uris: list[AmqpUri]) -> None:
        super().__init__(session, "source", uris, session.cfg.sources.declarations)
        cfg, worker = self.cfg, self.worker
        self.queue: str | None = None
        self.consumer_tag: str | None = None
        self.draining = False
        self.reading = True
        self.read_pause_refused = False
        # acks to the source in delivery order (the source channel once open)
        self.settler = Settler(self.ioloop, on_error=self._settling_failed,
                               after_acks=self._after_acks)
        self.held: list[SourceDelivery] = []
        self.hold_timer: Any = None
        # refused messages (and ones to dead-letter without a dead-letter exchange) wait here
        # before they are requeued; the wait doubles each round the destination accepts nothing
        self.backoff_held: list[SourceDelivery] = []
        self.backoff_timer: Any = None
        self.backoff_delay = HOLD_DELAY
        # does the source queue have a dead-letter exchange: (answer, monotonic time) or None;
        # messages to dead-letter wait in dlx_waiting while the management API is asked
        self.dlx_answer: tuple[bool, float] | None = None
        self.dlx_asking = False
        self.dlx_waiting: list[SourceDelivery] = []
        self.ack_mode = cfg.ack_mode
        self.filter = worker.filter
        # no_ack with a delete-after limit still acks (at once), to take exactly N messages
        self.auto_ack = cfg.ack_mode == "no_ack" and worker.remaining is None \
            and not worker.measure_queue
        self.acked_mode = not self.auto_ack
        self.unbounded = self.auto_ack or cfg.prefetch_count == 0
        self.take_budget: int | None = None
        # the destination's, shared (see link): deliveries waiting for it, why it waits, and
        # the calls that hand it a delivery
        self.pending: Any = None
        self.pause_reasons: set[str] = set()
        self.publish: Any = None
        self.transform: Any = None

    def link(self, destination: Destination) -> None:
        """Hand deliveries to ``destination``: one bound call per message, no glue between."""
        self.pending = destination.pending
        self.pause_reasons = destination.pause_reasons
        self.publish = destination.publish
        self.transform = destination.transform if destination.transform_needed else None

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

    def on_delivery(self, tag: int, exchange: bytes, routing_key: bytes, parts: list) -> None:
        if not self.alive:
            return
        entry = SourceDelivery(tag, exchange, routing_key, parts)
        if self.acked_mode:
            if self.take_budget is not None:
                if self.take_budget <= 0 or self.draining:
                    # beyond src-delete-after: give it back untouched
                    self.settler.nack(entry, requeue=True)
                    return
                self.take_budget -= 1
            self.settler.track(entry)
            if self.filter is not None and not self.filter.matches(entry):
                self.counters["filtered"] += 1
                if self.filter.leave:
                    self._hold(entry)
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
        if self.pause_reasons or self.pending:
            self.pending.append(entry)
            if self.unbounded and self.reading and len(self.pending) >= PENDING_LIMIT:
                self.set_reading(False)
            return
        self.publish(entry)

    def on_outcome(self, future: PublishFuture) -> None:
        """The destination's outcome of one publish: settle its source message."""
        outcome = future.outcome
        if not self.alive or outcome is Outcome.FAILED:
            return  # the destination channel closed: the session ends, the source requeues
        entry: SourceDelivery = future.context
        if outcome is Outcome.ACKED:
            self.counters["moved"] += 1
            self.backoff_delay = HOLD_DELAY
            self.settler.ack(entry)
        elif outcome is Outcome.RETURNED:
            self.counters["returned"] += 1
            LOGGER.warning("shovel %r: the destination returned a message (%s %s)",
                           self.cfg.name, future.reply_code, future.reply_text)
            mode = self.cfg.on_unroutable
            if mode == "drop":
                self.settler.ack(entry)
            elif mode == "requeue":
                self._hold(entry)
            else:
                self._reject_to_dlx(entry)
        else:
            self.counters["nacked"] += 1
            if entry.attempts >= self.cfg.nack_retries:
                self._refused(entry)
                return
            delay = min(RETRY_DELAY_MAX, self.cfg.nack_retry_delay * 2 ** entry.attempts)
            entry.attempts += 1
            self.settler.park(entry)
            self.session.later(delay, lambda: self._retry(entry))

    def _retry(self, entry: SourceDelivery) -> None:
        if not self.alive or self.draining:
            return
        self.counters["retried"] += 1
        self.settler.unpark(entry)
        if self.pause_reasons or self.pending:
            self.pending.appendleft(entry)
            return
        self.publish(entry)

    # -- settling ------------------------------------------------------------------------------

    def _after_acks(self, count: int) -> None:
        """After the acks of an ioloop turn went to the source (``count`` messages)."""
        if not self.alive:
            return
        self.counters["acked"] += count
        if self.take_budget is not None:
            # what a new session would still have to take if this one died now
            self.worker.remaining = self.take_budget + self.settler.outstanding
        self.session.maybe_end()

    def _settling_failed(self, what: str, exc: Exception) -> None:
        self.session.fail(f"{what} failed: {short_reason(exc)}")

    def _nack_now(self, entry: SourceDelivery, requeue: bool) -> None:
        """Nack one message to the source (requeue or dead-letter) right away."""
        if not self.settler.nack(entry, requeue):
            return
        if requeue:
            self.counters["requeued"] += 1
            if self.take_budget is not None:
                self.take_budget += 1
        else:
            self.counters["dead_lettered"] += 1

    def _refused(self, entry: SourceDelivery) -> None:
        """The destination nacked every attempt: requeue or dead-letter (``on_refused``)."""
        self.counters["refused"] += 1
        dead_letter = self.cfg.on_refused == "dead_letter"
        now = time.monotonic()
        worker = self.worker
        if now - worker.refused_logged_at >= REFUSED_LOG_INTERVAL:
            worker.refused_logged_at = now
            LOGGER.warning("shovel %r: the destination refused a message %d times; %s at the "
                           "source (%d refused so far; warned once a minute)", self.cfg.name,
                           entry.attempts + 1,
                           "dead-lettering it" if dead_letter else "requeueing it",
                           self.counters["refused"])
        if dead_letter:
            self._reject_to_dlx(entry)
        else:
            self._requeue_later(entry)

    def _reject_to_dlx(self, entry: SourceDelivery) -> None:
        """Nack without requeue when the source queue has a dead-letter exchange; without one
        that would drop the message, so it is requeued (after a wait) instead."""
        has_dlx = self._has_dlx()
        if has_dlx is None:
            self.dlx_waiting.append(entry)
            self.settler.park(entry)
        elif has_dlx:
            self._nack_now(entry, requeue=False)
        else:
            self._requeue_later(entry)

    def _has_dlx(self) -> bool | None:
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
        waiting, self.dlx_waiting = self.dlx_waiting, []
        for entry in waiting:
            if not self.alive or self.draining:
                return  # still parked: the source requeues them when its channel closes
            self._reject_to_dlx(entry)

    def _requeue_later(self, entry: SourceDelivery) -> None:
        """Give the message back to the source queue after ``backoff_delay``, which doubles
        (up to :data:`RETRY_DELAY_MAX`) each round until the destination accepts one."""
        self.backoff_held.append(entry)
        self.settler.park(entry)
        if self.backoff_timer is None:
            self.backoff_timer = self.session.later(self.backoff_delay, self._release_backoff)

    def _release_backoff(self) -> None:
        self.backoff_timer = None
        if not self.alive:
            return
        self.backoff_delay = min(RETRY_DELAY_MAX, self.backoff_delay * 2)
        held, self.backoff_held = self.backoff_held, []
        self._requeue_all(held)

    def _hold(self, entry: SourceDelivery) -> None:
        """Give the message back to the source queue after :data:`HOLD_DELAY`."""
        self.held.append(entry)
        self.settler.park(entry)
        if self.hold_timer is None:
            self.hold_timer = self.session.later(HOLD_DELAY, self._release_held)

    def _release_held(self) -> None:
        self.hold_timer = None
        if not self.alive:
            return
        held, self.held = self.held, []
        self._requeue_all(held)

    def _requeue_all(self, held: list[SourceDelivery]) -> None:
        for entry in held:
            self._nack_now(entry, requeue=True)
            if not self.alive:
                return

    def timers_cancelled(self) -> None:
        """The session cancelled every timer: none of the hold timers runs any more."""
        self.hold_timer = None
        self.backoff_timer = None

    # -- flow control --------------------------------------------------------------------------

    def read_if_room(self) -> None:
        """Read the source socket again once half the waiting deliveries went out."""
        if not self.reading and len(self.pending) < PENDING_LIMIT // 2:
            self.set_reading(True)

    def set_reading(self, on: bool) -> None:
        """Stop or restart reading the source socket (plain TCP only: over TLS the waiting
        deliveries keep growing in memory, which is said once)."""
        if pika_internals.set_reading(self.connection, on):
            self.reading = on
        elif not on and not self.read_pause_refused:
            self.read_pause_refused = True
            LOGGER.warning("shovel %r: cannot stop reading the source (TLS, or the socket is "
                           "gone): deliveries keep arriving while %d wait", self.cfg.name,
                           len(self.pending))


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
