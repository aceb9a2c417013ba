"""The routing pipeline: ingress deliveries in, republishes out, acks once confirmed.

Deliveries (read as frames, :meth:`Pipeline.on_delivery`) gather into a batch that one ioloop
turn routes at once (:meth:`Pipeline.route_batch`): the divert stage, then the router, decide
each message; each becomes its republishes (the original to ``NAME.bindings``, the diverted
copies of :class:`~rtroute.sidecar.divert_copies.DivertCopies`, or a dead letter of
:mod:`rtroute.sidecar.dead_letters`), queued for room in the confirm window. An ingress message
is acked, in delivery order (:class:`~rtroute.amqp.settle.Settler`), once every republish of it
is confirmed; a nack requeues it.

Everything here runs in the ioloop thread of one :class:`~rtroute.amqp.ReconnectingConnection`.
"""
from __future__ import annotations

import collections
import logging
import time
from typing import Any, Callable

import pika
import pika.exceptions

from rtroute.amqp import (
    ConfirmWindow,
    Outcome,
    ReconnectingConnection,
    Settler,
    WindowClosed,
    WindowFull,
    frames,
)
from rtroute.divert import DivertTable, Verdict
from rtroute.relay.flow import Pauses
from rtroute.routing.exchange_router import ERROR_HEADER, Decision
from rtroute.selector import MessageFacts
from rtroute.sidecar.address_probe import ForwardingAddresses
from rtroute.sidecar.dead_letters import (
    SOURCE_HEADER,
    dead_letter_of_copy,
    dead_letter_of_ingress,
    too_large,
    undeliverable,
    unencodable,
)
from rtroute.sidecar.divert_copies import DivertCopies
from rtroute.sidecar.exchange import ManagedExchange
from rtroute.sidecar.ingress import IngressMessage
from rtroute.sidecar.layout import DEAD_LETTER_EXCHANGE
from rtroute.sidecar.republish import COPY, DEAD, ORIGINAL, PendingMessage, Republish
from rtroute.sidecar.shards import Shard, ShardState

LOG = logging.getLogger("rtroute.sidecar")

METHOD_FRAME_CACHE = 10_000  # basic.publish frames kept, by (exchange, routing key)


class Pipeline:
    """Routes the deliveries of every managed exchange (``exchanges``, through the divert
    table ``diverts``) and republishes them on a confirm window.

    Args:
        connection: whose ioloop everything runs in.
        exchanges: the managed exchanges by name.
        diverts: the divert table (the stage before routing).
        addresses: what forwarding addresses are on the broker (for the copies).
        on_broken: called when the ingress channel is in a state only a reconnect mends.
        on_error: called with a line about an unexpected exception (the last error).
    """

    def __init__(self, connection: ReconnectingConnection, exchanges: dict[str, ManagedExchange],
                 diverts: DivertTable, addresses: ForwardingAddresses,
                 on_broken: Callable[[], Any], on_error: Callable[[str], Any]) -> None:
        self._connection = connection
        self._diverts = diverts
        self._on_broken = on_broken
        self._on_error = on_error
        self._copies = DivertCopies(self, exchanges, addresses, connection)
        self.window: ConfirmWindow | None = None
        self.reader: frames.FrameReader | None = None
        self.consumers: dict[str, ManagedExchange] = {}  # consumer tag -> exchange
        # consumer tag -> shard, for a sharded ingress (a channel and settler per shard)
        self.shards: dict[str, Shard] = {}
        # the basic.publish frames of the confirm window's channel
        self.publish_frames: frames.PublishFrames | None = None
        self.frame_max = 131072  # the connection's, once negotiated
        self.queue: collections.deque[Republish] = collections.deque()
        # why nothing is published now (connection.blocked: see rtroute.relay.flow)
        self.pauses = Pauses(self.publish_queued)
        # the ingress channel's acks, in delivery order, once every republish is confirmed
        # (each shard of a sharded ingress has a channel and a settler of its own)
        self.settler = Settler(connection.ioloop)
        # deliveries since the last route_batch, in delivery-tag order on each channel
        self._batch: list[IngressMessage] = []
        self._batch_scheduled = False
        self._batch_received_at = self._batch_at = 0.0  # when the batch's first delivery came
        self.internal_errors = 0
        self._internal_errors_seen: dict[str, float] = {}

    def attach(self, connection: Any, channel: Any) -> None:
        """Takes the deliveries of ``channel`` (the ingress channel of a new connection).

        Deliveries and confirms are read as frames, republishes written as frames, and the
        socket written once per ioloop turn: pika's per-frame objects cost more than routing.
        """
        self.reader = frames.install(connection)
        self.reader.intercept(channel.channel_number, self.on_delivery, detailed=True)
        self.queue.clear()
        self.settler.reset(channel)
        self.consumers.clear()
        self.shards.clear()

    def add_shard(self, consumer_tag: str, shard: Shard) -> None:
        """Takes the deliveries of a shard's consumer too (on the shard's own channel)."""
        assert self.reader is not None
        self.reader.intercept(shard.channel.channel_number, self.on_delivery, detailed=True)
        self.shards[consumer_tag] = shard
        self.consumers[consumer_tag] = shard.exchange

    def remove_shard(self, consumer_tag: str, channel: Any) -> None:
        """A shard's channel is gone: its deliveries are no longer taken."""
        self.shards.pop(consumer_tag, None)
        self.consumers.pop(consumer_tag, None)
        if self.reader is not None and channel is not None:
            self.reader.stop_intercepting(channel.channel_number)

    def batched(self, settler: Settler) -> bool:
        """True if a delivery settled by ``settler`` waits in the batch not yet routed."""
        return any(m.settler is settler for m in self._batch)

    @property
    def in_flight(self) -> int:
        """Ingress deliveries not settled yet, on every channel."""
        return len(self.settler) + sum(len(s.settler) for s in self.shards.values()
                                       if s.settler is not None)

    def open_window(self, publish_channel: Any, size: int,
                    on_closed: Callable[[str], Any]) -> ConfirmWindow:
        """The confirm window republishes go through, on ``publish_channel``."""
        window = ConfirmWindow(publish_channel, window=size, low_watermark=size // 2,
                               on_writable=self.publish_queued, on_closed=on_closed)
        window.read_confirms_from(self.reader)
        self.window = window
        self.publish_frames = frames.PublishFrames(publish_channel.channel_number,
                                                   METHOD_FRAME_CACHE)
        return window

    def detach(self) -> None:
        """The connection is lost: what was in flight is forgotten (the broker redelivers
        every unacked ingress message); the next connection starts unpaused."""
        self.window = None
        self.pauses.reasons.clear()
        self.queue.clear()
        self.settler.reset(None)
        self.shards.clear()
        self._copies.forget_parked()

    def on_delivery(self, tag: int, _exchange: bytes, routing_key: bytes, parts: list,
                    consumer_tag: str, redelivered: bool) -> None:
        """One ingress delivery, from the frame reader: joins the batch routed at the end of
        this ioloop turn."""
        ex = self.consumers.get(consumer_tag)
        if ex is None:  # cannot happen: every consume registers its tag first
            LOG.error("delivery %d for unknown consumer %r: reconnecting", tag, consumer_tag)
            self._on_broken()
            return
        settler = self.settler
        if self.shards:
            shard = self.shards.get(consumer_tag)
            if shard is not None:
                if shard.state is ShardState.RELEASING:
                    shard.held += 1  # back to the queue, in order, when its channel closes
                    return
                shard.received += 1
                shard.last_delivery = time.time()
                settler = shard.settler  # type: ignore[assignment]
        if not self._batch:
            self._batch_received_at = time.monotonic()
        m = IngressMessage(ex, tag, redelivered, routing_key, parts)
        m.settler = settler
        self._batch.append(m)
        if not self._batch_scheduled:
            self._batch_scheduled = True
            self._connection.ioloop.call_later(0, self.route_batch)

    def route_batch(self) -> None:
        """Decides each exchange's share of the batch at once, then dispatches in delivery order.

        Every ingress queue is consumed on one channel, whose delivery tags count across them;
        acks with ``multiple`` are right only if messages settle in delivery-tag order, so the
        dispatch keeps that order even when the deliveries of several exchanges interleave
        (as they do along a divert chain).
        """
        self._batch_scheduled = False
        batch, self._batch = self._batch, []
        self._batch_at = self._batch_received_at
        if batch:
            first = batch[0].exchange
            if all(m.exchange is first for m in batch):
                outcomes = self._guarded_decide(first, batch)
            else:
                by_exchange: dict[str, list[int]] = {}
                for i, m in enumerate(batch):
                    by_exchange.setdefault(m.exchange.spec.name, []).append(i)
                outcomes = [None] * len(batch)  # type: ignore[list-item]
                for indices in by_exchange.values():
                    decided = self._guarded_decide(batch[indices[0]].exchange,
                                                   [batch[i] for i in indices])
                    for i, outcome in zip(indices, decided):
                        outcomes[i] = outcome
            dispatch = self._dispatch
            for m, (decision, verdict) in zip(batch, outcomes):
                dispatch(m, decision, verdict)
        self.publish_queued()

    def _guarded_decide(self, ex: ManagedExchange, batch: list[IngressMessage]
                        ) -> list[tuple[Decision | None, Verdict | None]]:
        """:meth:`_decide`, guarded: if deciding the batch raises (a bug, or an input nobody
        foresaw), each message is decided on its own, and the ones that still fail are
        dead-lettered with the reason. The loop that serves every exchange goes on."""
        try:
            return self._decide(ex, batch)
        except Exception as exc:  # noqa: BLE001 - one bad message must not stop the others
            self._internal_error(f"exchange {ex.spec.name}: routing a batch of {len(batch)}",
                                 exc)
        ex.counters.received -= len(batch)  # counted again, one by one
        ex.counters.redelivered -= sum(1 for m in batch if m.redelivered)
        outcomes: list[tuple[Decision | None, Verdict | None]] = []
        for m in batch:
            try:
                outcomes += self._decide(ex, [m])
            except Exception as exc:  # noqa: BLE001 - as above, for this message alone
                reason = f"rtroute could not route this message: {type(exc).__name__}: {exc}"
                outcomes.append((Decision(error=reason), None))
                m.error = m.error or reason  # its properties may be what failed
        return outcomes

    def _internal_error(self, what: str, exc: Exception) -> None:
        """Logs an unexpected exception: with its traceback the first time it is seen, then
        one line at most every few seconds (a bug hit by every message must not flood)."""
        self.internal_errors += 1
        key = f"{type(exc).__name__}: {exc}"
        now = time.monotonic()
        if key not in self._internal_errors_seen:
            self._internal_errors_seen[key] = now
            LOG.error("%s failed (%s); dead-lettering what cannot be routed and going on", what,
                      key, exc_info=exc)
        elif now - self._internal_errors_seen[key] > 10:
            self._internal_errors_seen[key] = now
            LOG.error("%s failed again (%s; %d internal errors so far)", what, key,
                      self.internal_errors)
        self._on_error(f"{what}: {key}")

    def _decide(self, ex: ManagedExchange, batch: list[IngressMessage]
                ) -> list[tuple[Decision | None, Verdict | None]]:
        """The divert stage, then the routing of what goes on: per message ``(decision,
        verdict)``; ``decision`` is None for a message an exclusive divert took. A message
        whose headers cannot be decoded is dead-lettered, untouched by diverts."""
        name = ex.spec.name
        c = ex.counters
        c.received += len(batch)
        c.redelivered += sum(1 for m in batch if m.redelivered)
        c.empty_headers += sum(1 for m in batch if m.span[1] - m.span[0] == 4)
        if not self._diverts.watches(name):
            decisions = ex.router.decide_many([(m.routing_key, m.routing_headers)
                                               for m in batch])
            return [(d if m.error is None else Decision(error=m.error), None)
                    for m, d in zip(batch, decisions)]
        evaluate = self._diverts.evaluate
        if self._diverts.needs_body(name):  # an XPATH filter: the body, decoded only here
            verdicts = [None if m.error else
                        evaluate(name, m.headers, MessageFacts(m.props, m.body_size, name),
                                 m.body)
                        for m in batch]
        elif self._diverts.needs_message(name):
            verdicts = [None if m.error else
                        evaluate(name, m.headers, MessageFacts(m.props, m.body_size, name))
                        for m in batch]
        else:
            verdicts = [None if m.error else evaluate(name, m.headers) for m in batch]
        decisions = iter(ex.router.decide_many(
            [(m.routing_key, m.routing_headers) for m, v in zip(batch, verdicts)
             if v is not None and v.original]))
        return [(Decision(error=m.error), None) if v is None else
                (next(decisions) if v.original else None, v)
                for m, v in zip(batch, verdicts)]

    def _dispatch(self, m: IngressMessage, decision: Decision | None,
                  verdict: Verdict | None) -> None:
        ex = m.exchange
        settler = m.settler if m.settler is not None else self.settler  # empty is falsy
        pending = PendingMessage(ex, m.tag, self._batch_at, settler)
        outs: list[Republish] = []
        try:
            if decision is not None:
                outs += self._republishes_of_original(m, decision, pending)
            else:
                ex.counters.diverted += 1
            if verdict is not None and verdict.fired:
                outs += self._copies.republishes_of(m, verdict, pending)
        except Exception as exc:  # noqa: BLE001 - dead-letter it, keep serving the others
            self._internal_error(f"exchange {ex.spec.name}: preparing a republish", exc)
            ex.counters.dead_lettered += 1
            reason = f"rtroute could not republish this message: {type(exc).__name__}: {exc}"
            outs = [Republish(DEAD_LETTER_EXCHANGE, "", pika.BasicProperties(headers={
                ERROR_HEADER: reason, SOURCE_HEADER: ex.spec.name}), m.body, pending, DEAD)]
        settler.track(pending)
        settler.expect(pending, len(outs) + pending.deferred)
        self.queue.extend(outs)
        if not pending.awaiting:
            self._settle(pending)

    def _republishes_of_original(self, m: IngressMessage, decision: Decision,
                                 pending: PendingMessage) -> list[Republish]:
        ex = m.exchange
        c = ex.counters
        routing_key = m.routing_key if isinstance(m.routing_key, str) else ""
        if decision.error is not None:
            c.dead_lettered += 1
            LOG.warning("exchange %s: dead-lettering a message: %s", ex.spec.name,
                        decision.error)
            return [dead_letter_of_ingress(m, routing_key, decision.error, pending,
                                           self.publish_frames, self.frame_max)]
        if decision.unroutable:
            ex.note_unroutable(routing_key)
        elif not ex.broker_routed:
            c.routed += 1  # broker-routed exchanges count on the confirm (returned or not)
        outs = []
        drop = (ex.spec.bcc_alias_header, "BCC")
        publish_frames = self.publish_frames
        assert publish_frames is not None  # deliveries come once the window is open
        if any(p.bcc is None and not p.exchange for p in decision.publishes):
            c.direct_to_queue += 1
        for p in decision.publishes:
            data, count = m.republish_frames(publish_frames.channel,
                                             publish_frames.get(p.exchange, p.routing_key),
                                             drop, p.bcc)
            outs.append(Republish(p.exchange, p.routing_key, None, m.body, pending,
                                  frames=data, frame_count=count))
        return outs

    def enqueue(self, outs: list[Republish]) -> None:
        """Queues republishes made outside a batch (a divert's copies whose target became
        known), after those waiting, and publishes what the window takes."""
        self.queue.extend(outs)
        self.publish_queued()

    def publish_queued(self) -> None:
        """Publishes the queued republishes while the confirm window has room, then writes
        their frames to the socket at once."""
        window = self.window
        if window is None or self.pauses.reasons:
            return
        queue = self.queue
        try:
            self._publish_while_room(window, queue)
        finally:
            window.flush_frames()

    def _publish_while_room(self, window: ConfirmWindow, queue: collections.deque[Republish]
                            ) -> None:
        while queue and window.has_room:
            out = queue.popleft()
            oversized = too_large(out, self.frame_max)
            if oversized is not None:
                queue.appendleft(undeliverable(out, oversized))
                continue
            try:
                if out.frames is not None:
                    window.publish_frames(out.exchange, out.routing_key, out.frames,
                                          out.frame_count, out.body, mandatory=True,
                                          callback=self.on_confirm, context=out)
                    continue
                window.publish(out.exchange, out.routing_key, out.body, out.properties,
                               mandatory=True, callback=self.on_confirm, context=out)
            except (WindowFull, WindowClosed, pika.exceptions.ChannelWrongStateError):
                queue.appendleft(out)  # the window closes: reconnecting settles everything
                return
            except Exception as exc:  # noqa: BLE001 - e.g. a header value AMQP cannot encode
                queue.appendleft(unencodable(out, exc))

    def on_confirm(self, future: Any) -> None:
        """Accounts for the broker's answer to one republish, and settles its ingress message
        once every republish of it is answered."""
        out: Republish = future.context
        pending = out.pending
        outcome = future.outcome
        counters = pending.exchange.counters
        ok = True
        if outcome in (Outcome.NACKED, Outcome.FAILED):
            ok = False  # the ingress message is requeued (at-least-once, may duplicate)
        elif out.role == COPY:
            assert out.divert is not None
            if outcome is Outcome.RETURNED:
                # No queue took it (Artemis would let it go): dead-lettered, never dropped.
                out.divert.unrouted += 1
                out.divert.dead_lettered += 1
                where = f"queue {out.routing_key!r}" if not out.exchange \
                    else f"exchange {out.exchange!r} (routing key {out.routing_key!r})"
                reason = (f"divert {out.divert.name!r}: no queue took the copy sent to {where}"
                          f"{': no such queue' if not out.exchange else ''}")
                LOG.warning("exchange %s: dead-lettering a diverted copy: %s",
                            pending.exchange.spec.name, reason)
                pending.settler.expect(pending)
                self.queue.append(dead_letter_of_copy(out, reason, self.publish_frames,
                                                      self.frame_max))
                self._connection.ioloop.call_later(0, self.publish_queued)
            else:
                out.divert.forwarded += 1
        elif out.role == ORIGINAL:
            if outcome is Outcome.RETURNED:
                if pending.exchange.broker_routed:
                    # RabbitMQ routed it and found no binding
                    pending.exchange.note_unroutable(out.routing_key)
                else:
                    # The bindings changed between the watcher's view and the publish: nothing
                    # took it, as the plugin would have dropped it. Counted, then acked.
                    counters.returned += 1
            else:
                counters.republished += 1
                if pending.exchange.broker_routed:
                    counters.routed += 1
        self._note_settled(pending, pending.settler.confirmed(pending, ok))

    def _settle(self, pending: PendingMessage) -> None:
        """Settles an ingress message none of whose republishes awaits a confirm."""
        self._note_settled(pending, pending.settler.settle(pending))

    @staticmethod
    def _note_settled(pending: PendingMessage, acked: bool | None) -> None:
        """Counts how an ingress message was settled: acked (its latency), or requeued
        because the broker nacked a republish (at-least-once: it may come twice)."""
        if acked is None:
            return
        if not acked:
            pending.exchange.counters.requeued += 1
        elif pending.received_at:
            pending.exchange.latency.observe(time.monotonic() - pending.received_at)
