"""The routing pipeline: ingress deliveries in, republishes out, acks once confirmed.

Deliveries (read as frames, :meth:`Pipeline.on_delivery`) gather into a batch that one ioloop
turn routes at once (:meth:`Pipeline.route_batch`): the divert stage, then the router, decide
each message; each becomes its republishes (the original to ``NAME.bindings``, the diverted
copies of :class:`~rtroute.sidecar.divert_copies.DivertCopies`, or a dead letter of
:mod:`rtroute.sidecar.dead_letters`), handed to the :class:`~rtroute.relay.Relay`: the engine
the shovel runs on publishes them through the confirm window, maps each confirm back to its
ingress message and acks that, in delivery order on its channel, once every republish of it
is answered; what an answer means is :class:`~rtroute.sidecar.policy.SidecarPolicy`'s (a nack
requeues the message, a returned copy is dead-lettered). The pipeline keeps only the deciding.

Everything here runs in the ioloop thread of one :class:`~rtroute.amqp.ReconnectingConnection`.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable

import pika

from rtroute.amqp import ConfirmWindow, ReconnectingConnection, Settler, frames
from rtroute.amqp.frame_codec import frame_size_limit, shortstr
from rtroute.core.frames import publish_message
from rtroute.divert import DivertTable, Verdict
from rtroute.relay.broker_upstream import BrokerUpstream
from rtroute.relay.engine import Relay
from rtroute.relay.timers import Timers
from rtroute.routing.exchange_router import ERROR_HEADER, Decision
from rtroute.selector import MessageFacts
from rtroute.sidecar.address_probe import ForwardingAddresses
from rtroute.sidecar.dead_letters import SOURCE_HEADER, dead_letter_of_ingress
from rtroute.sidecar.divert_copies import DivertCopies
from rtroute.sidecar.exchange import ManagedExchange
from rtroute.sidecar.ingress import IngressMessage
from rtroute.sidecar.layout import DEAD_LETTER_EXCHANGE
from rtroute.sidecar.policy import SidecarPolicy
from rtroute.sidecar.republish import DEAD, PendingMessage, Republish
from rtroute.sidecar.shards import Shard, ShardState

LOG = logging.getLogger("rtroute.sidecar")

METHOD_FRAME_CACHE = 10_000  # basic.publish frames kept, by (exchange, routing key)


class Pipeline:
    """Routes the deliveries of every managed exchange (``exchanges``, through the divert
    table ``diverts``) and republishes them through the relay.

    Args:
        connection: whose ioloop everything runs in.
        exchanges: the managed exchanges by name.
        diverts: the divert table (the stage before routing).
        addresses: what forwarding addresses are on the broker (for the copies).
        on_broken: called when the ingress channel is in a state only a reconnect mends.
        on_error: called with a line about an unexpected exception (the last error).
        window: the most republishes awaiting their confirms.
        on_window_closed: ``on_window_closed(reason)`` when the publish channel closes.
        on_flow: ``on_flow(blocked, reason)`` on ``connection.blocked``/``unblocked``.
    """

    def __init__(self, connection: ReconnectingConnection, exchanges: dict[str, ManagedExchange],
                 diverts: DivertTable, addresses: ForwardingAddresses,
                 on_broken: Callable[[], Any], on_error: Callable[[str], Any], *,
                 window: int = 1000,
                 on_window_closed: Callable[[str], Any] | None = None,
                 on_flow: Callable[[bool, str | None], Any] | None = None) -> None:
        self._connection = connection
        self._diverts = diverts
        self._on_broken = on_broken
        self._on_error = on_error
        self._copies = DivertCopies(self, exchanges, addresses, connection)
        self.reader: frames.FrameReader | None = None
        self.consumers: dict[str, ManagedExchange] = {}  # consumer tag -> exchange
        # consumer tag -> shard, for a sharded ingress (a channel and settler per shard)
        self.shards: dict[str, Shard] = {}
        # the basic.publish frames of the confirm window's channel
        self.publish_frames: frames.PublishFrames | None = None
        self.frame_max = 131072  # the connection's, once negotiated
        self._shorts: dict[str, bytes] = {}  # exchange names as short strings
        timers = Timers(connection.ioloop)
        # the ingress channel's acks, in delivery order, once every republish is answered
        # (each shard of a sharded ingress has a channel and a settler of its own)
        self.upstream = BrokerUpstream(timers, on_nacked=self._requeued)
        self.settler = self.upstream.open()
        # republishes go out, and come back to their ingress message, through the relay
        self.relay = Relay(timers, SidecarPolicy(lambda: (self.publish_frames, self.frame_max)),
                           self.upstream, window=window, label="sidecar",
                           on_broken=on_window_closed, on_flow=on_flow)
        self._submit = self.relay.submit  # a bound lane: no call more per message
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
        self.relay.clear()  # republishes of a lost connection's deliveries (redelivered)
        self.settler.reset(channel)
        self.consumers.clear()
        self.shards.clear()
        self.relay.watch(connection)  # connection.blocked: republishes wait, in order

    @property
    def window(self) -> ConfirmWindow | None:
        """The confirm window of the publish channel (None: not open, or lost)."""
        return self.relay.window

    def settler_for(self, channel: Any) -> Settler:
        """A settler for a shard's consume channel (acks in tag order on that channel)."""
        return self.upstream.open(channel)

    def forget_settler(self, settler: Settler) -> None:
        """A shard's channel is gone: its deliveries go back to the queue."""
        self.upstream.close(settler)

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
        return sum(len(settler) for settler in self.upstream.settlers)

    def open_window(self, publish_channel: Any, on_ready: Callable[[], Any]) -> None:
        """Republishes go through ``publish_channel`` (open, not in confirm mode yet);
        ``on_ready()`` once it is in confirm mode."""
        self.publish_frames = frames.PublishFrames(publish_channel.channel_number,
                                                   METHOD_FRAME_CACHE)
        self.relay.attach(publish_channel, self.reader, on_ready=on_ready)

    def detach(self) -> None:
        """The connection is lost: what was in flight is forgotten (the broker redelivers
        every unacked ingress message); the next connection starts unpaused."""
        self.relay.detach()
        self.shards.clear()
        self._copies.forget_parked()
        # deliveries read before the loss and not routed yet: the broker redelivers them, and
        # an ack of their tags would name another channel's deliveries
        self._batch = []

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
                settler = shard.settler  # type: ignore[assignment]  # set while it reads
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
                outcomes = [None] * len(batch)  # type: ignore[list-item]  # filled below
                for indices in by_exchange.values():
                    decided = self._guarded_decide(batch[indices[0]].exchange,
                                                   [batch[i] for i in indices])
                    for i, outcome in zip(indices, decided):
                        outcomes[i] = outcome
            dispatch = self._dispatch
            for m, (decision, verdict) in zip(batch, outcomes):
                dispatch(m, decision, verdict)

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
        routed = iter(ex.router.decide_many(
            [(m.routing_key, m.routing_headers) for m, v in zip(batch, verdicts)
             if v is not None and v.original]))
        return [(Decision(error=m.error), None) if v is None else
                (next(routed) if v.original else None, v)
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
        self._submit(pending, outs, pending.deferred)  # tracked by its settler there

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
        channel = publish_frames.channel
        # no headers table: a republish without BCC sends the content as it came, its
        # publish frame made with it in one native call (10,000 keys in turn would miss
        # publish_frames' cache); a content header frame that fits this connection's
        # frame_max is marked checked, so the outbox does not measure it again
        plain = m.span[0] == m.span[1]
        limit = frame_size_limit(self.frame_max)
        checked = plain and (not limit or len(m.parts[0]) <= limit)
        direct = False
        for p in decision.publishes:
            bcc = p.bcc
            if bcc is None and not p.exchange:
                direct = True
            if plain and not bcc:
                name = self._shorts.get(p.exchange)
                if name is None:
                    name = self._shorts[p.exchange] = shortstr(p.exchange)
                data = publish_message(
                    channel, name, m.key_short if p.routing_key == m.routing_key
                    else shortstr(p.routing_key), publish_frames.mandatory, m.parts)
                count = 1 + len(m.parts)
                out = Republish(p.exchange, p.routing_key, None, m.body, pending,
                                frames=data, frame_count=count)
                out.checked = checked
            else:
                data, count = m.republish_frames(channel,
                                                 publish_frames.get(p.exchange, p.routing_key),
                                                 drop, bcc)
                out = Republish(p.exchange, p.routing_key, None, m.body, pending,
                                frames=data, frame_count=count)
            outs.append(out)
        if direct:
            c.direct_to_queue += 1
        return outs

    def enqueue(self, outs: list[Republish]) -> None:
        """Publishes republishes made outside a batch (a divert's copies made by its
        transformer, or whose target became known), after those waiting; they were counted
        in their message's ``deferred``."""
        add = self.relay.add
        for out in outs:
            add(out.item, out)

    @staticmethod
    def _requeued(pending: PendingMessage, requeue: bool) -> None:
        """A republish failed (nacked, or its channel closed first): the ingress message went
        back to its queue (at-least-once: it may come twice)."""
        if requeue:
            pending.exchange.counters.requeued += 1
