"""Diverted copies on their way out: each fired divert's copy of a message becomes one
republish per forwarding address (or its dead letter), made by the divert's transformer on a
thread of its own when it has one, and parked while its forwarding address is looked up again.
"""
from __future__ import annotations

import dataclasses
import logging
import queue
import threading
from typing import TYPE_CHECKING, Any, Callable, Protocol

from rtroute.amqp import ReconnectingConnection
from rtroute.divert import Divert, Message, Verdict, make_copy, publish_fields, resolve_target
from rtroute.sidecar.address_probe import ForwardingAddresses
from rtroute.sidecar.dead_letters import reason_headers
from rtroute.sidecar.layout import DEAD_LETTER_EXCHANGE
from rtroute.sidecar.republish import COPY, DEAD, PendingMessage, Republish

if TYPE_CHECKING:
    from rtroute.sidecar.exchange import ManagedExchange
    from rtroute.sidecar.ingress import IngressMessage

LOG = logging.getLogger("rtroute.sidecar")

TRANSFORMER_BUDGET = 5.0  # seconds a divert transformer may take for one copy


class CopyPipeline(Protocol):
    """What the diverts' copies need of the pipeline that publishes them (the sidecar's
    :class:`~rtroute.sidecar.pipeline.Pipeline`): the publish channel's frames and
    ``frame_max``, and a way to queue republishes from another thread."""

    publish_frames: Any
    frame_max: int

    def enqueue(self, outs: list[Republish]) -> None: ...


class DivertCopies:
    """Makes the republishes of the copies the divert stage decided, for ``pipeline`` (which
    hands them to its relay). Runs in the ioloop of ``connection``."""

    def __init__(self, pipeline: CopyPipeline, exchanges: dict[str, ManagedExchange],
                 addresses: ForwardingAddresses, connection: ReconnectingConnection) -> None:
        self._pipeline = pipeline
        self._exchanges = exchanges
        self._addresses = addresses
        self._connection = connection
        # copies parked while their forwarding address is looked up again
        self._awaiting_target: dict[str, list[tuple]] = {}
        # transformers run here, off the ioloop; diverts whose transformer overran its budget
        self._transformer_jobs: queue.SimpleQueue[Callable[[], Any]] = queue.SimpleQueue()
        self._transformer_thread: threading.Thread | None = None
        self._stuck_transformers: set[str] = set()

    def forget_parked(self) -> None:
        """The connection is lost: the parked copies' messages are redelivered."""
        self._awaiting_target.clear()

    def republishes_of(self, m: IngressMessage, verdict: Verdict, pending: PendingMessage
                       ) -> list[Republish]:
        """The republishes of the copies ``verdict`` fired for ``m``; the copies a transformer
        makes, or that wait for a look at their address, come later (``pending.deferred``)."""
        ex = m.exchange
        source = ex.spec.name
        routing_key = m.routing_key if isinstance(m.routing_key, str) else ""
        original = Message.from_amqp(source, routing_key, m.props, m.body)
        outs = []
        for divert in verdict.fired:
            for address in divert.forwarding_addresses:
                if divert.transformer is not None:
                    self._transform_later(ex, divert, address, original, pending)
                    continue
                copy = make_copy(original, divert, address, source, ex.spec.max_hops)
                out = self._republish(ex, divert, address, copy, pending)
                if out is not None:
                    outs.append(out)
        return outs

    def _transform_later(self, ex: ManagedExchange, divert: Divert, address: str,
                         original: Message, pending: PendingMessage) -> None:
        """Makes the copy with the divert's transformer on a worker thread, never on the
        ioloop: a transformer is user code, and one that hangs must not stall every exchange.
        The copy waits (``pending.deferred``) for its result, at most ``TRANSFORMER_BUDGET``
        seconds; then it is dead-lettered, and so are the divert's next copies while its
        transformer still runs (the worker is busy: a stuck transformer is said once)."""
        source = ex.spec.name
        pending.deferred += 1
        ioloop = self._connection.ioloop
        state = {"done": False}
        # the settings the message was diverted with, even if the divert is updated meanwhile
        settings, transformer = divert.config, divert.transformer

        def finish(copy: Any) -> None:
            if state["done"]:
                return
            state["done"] = True
            if pending not in pending.settler:  # the channel went: redelivered
                return
            pending.deferred -= 1
            out = self._republish(ex, divert, address, copy, pending)
            self._pipeline.enqueue([] if out is None else [out])

        def refused(reason: str) -> None:
            copy = make_copy(original, settings, address, source, ex.spec.max_hops)
            finish(dataclasses.replace(copy, error=f"divert {divert.name!r}: {reason}"))

        if divert.name in self._stuck_transformers:
            ioloop.call_later(0, lambda: refused(
                f"transformer {settings.transformer!r} is still running an earlier copy "
                f"(over {TRANSFORMER_BUDGET:g} s)"))
            return

        def work() -> None:
            copy = make_copy(original, settings, address, source, ex.spec.max_hops,
                             transformer)

            def done() -> None:
                self._stuck_transformers.discard(divert.name)
                finish(copy)

            self._call_in_ioloop(done)

        def overdue() -> None:
            if state["done"]:
                return
            if divert.name not in self._stuck_transformers:
                self._stuck_transformers.add(divert.name)
                LOG.error("divert %s: transformer %r has run for over %g s: its copies are "
                          "dead-lettered until it returns", divert.name,
                          settings.transformer, TRANSFORMER_BUDGET)
            refused(f"transformer {settings.transformer!r} took over "
                    f"{TRANSFORMER_BUDGET:g} s")

        if self._transformer_thread is None:
            self._transformer_thread = threading.Thread(
                target=self._run_transformers, name="rtroute-transformer", daemon=True)
            self._transformer_thread.start()
        self._transformer_jobs.put(work)
        ioloop.call_later(TRANSFORMER_BUDGET, overdue)

    def _run_transformers(self) -> None:
        """The transformer thread: one copy at a time, in order (a daemon: a transformer that
        never returns cannot hold the process at exit)."""
        while True:
            self._transformer_jobs.get()()

    def _call_in_ioloop(self, callback: Callable[[], Any]) -> None:
        try:
            self._connection.ioloop.add_callback_threadsafe(callback)
        except Exception:  # noqa: BLE001 - the ioloop is gone: its messages are redelivered
            LOG.debug("a transformer finished after the ioloop closed")

    def _republish(self, ex: ManagedExchange, divert: Divert, address: str, copy: Any,
                   pending: PendingMessage, looked: bool = False) -> Republish | None:
        """The republish of one diverted copy, or its dead letter; None when the copy waits
        for a fresh look at its forwarding address (``pending.deferred`` counts it): the
        broker had nothing of that name when last asked, and a target created since must be
        used at once, not after a timer."""
        message = copy.message
        error = copy.error
        if error is None:
            target_ex = self._exchanges.get(address)
            try:
                target = resolve_target(copy.delivery, address, target_ex is not None,
                                        self._addresses.kinds.get(address))
                exchange, key, headers = publish_fields(
                    message, target, ex.spec.bcc_alias_header,
                    target_ex.spec.bcc_alias_header if target_ex else None)
            except LookupError as exc:
                if not looked and self._look_again(address, (ex, divert, address, copy,
                                                             pending)):
                    pending.deferred += 1
                    return None
                error = f"divert {divert.name!r}: {exc}"
            except ValueError as exc:
                error = f"divert {divert.name!r}: {exc}"
        publish_frames = self._pipeline.publish_frames
        assert publish_frames is not None  # deliveries come once the window is open
        if error is None:
            try:
                data, count = message.publish_frames(
                    publish_frames.channel, publish_frames.get(exchange, key),
                    self._pipeline.frame_max, headers)
            except ValueError as exc:  # a value AMQP (or RabbitMQ) cannot take, too large
                error = f"divert {divert.name!r}: {exc}"
            else:
                return Republish(exchange, key, None, message.body, pending, COPY, divert,
                                 frames=data, frame_count=count)
        divert.dead_lettered += 1
        LOG.warning("exchange %s: dead-lettering a diverted copy: %s", ex.spec.name, error)
        data, count = message.dead_letter_frames(
            publish_frames.channel, publish_frames.get(DEAD_LETTER_EXCHANGE, message.routing_key),
            reason_headers(ex, error, divert), self._pipeline.frame_max)
        return Republish(DEAD_LETTER_EXCHANGE, message.routing_key, None, message.body,
                         pending, DEAD, divert, frames=data, frame_count=count)

    def _look_again(self, address: str, waiting: tuple) -> bool:
        """Asks the broker again what ``address`` is, and parks ``waiting`` (the arguments of
        :meth:`_republish`) until it answers; False if it was asked a moment ago (so a target
        that does not exist costs one probe per second, not one per message)."""
        parked = self._awaiting_target.get(address)
        if parked is not None:
            parked.append(waiting)
            return True
        if not self._addresses.may_look_again(address):
            return False
        self._awaiting_target[address] = [waiting]
        self._addresses.look_up(self._connection.connection, [address],
                                lambda: self._resolve_waiting(address), track=False)
        return True

    def _resolve_waiting(self, address: str) -> None:
        """The broker answered for ``address``: the parked copies go out (or dead letters)."""
        outs = []
        for ex, divert, name, copy, pending in self._awaiting_target.pop(address, []):
            pending.deferred -= 1
            out = self._republish(ex, divert, name, copy, pending, looked=True)
            assert out is not None
            outs.append(out)
        self._pipeline.enqueue(outs)
