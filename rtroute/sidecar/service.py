"""The sidecar process: serves managed exchanges over a real RabbitMQ with end-to-end confirms.

Per managed exchange ``NAME`` (DESIGN.md's broker layout): publishers publish to ``NAME``
(fanout, bound to the durable single-active-consumer queue ``rtroute.ingress.NAME``);
applications bind to ``NAME.bindings``. The sidecar consumes the ingress queue with manual acks
and a prefetch window, routes each batch with the core, republishes through a
:class:`~rtroute.amqp.ConfirmWindow`, and acks an ingress message only once every republish of
it is confirmed. A nack or a lost connection leaves it unacked (requeued): at-least-once.

Everything here runs in the ioloop thread of one :class:`~rtroute.amqp.ReconnectingConnection`
except :meth:`Sidecar.stop` and :meth:`Sidecar.status`, which any thread may call.
"""
from __future__ import annotations

import collections
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import pika

from rtroute.amqp import (
    BindingWatcher,
    ConfirmWindow,
    ManagementClient,
    Outcome,
    ReconnectingConnection,
    mask_uri,
    parse_uri,
)
from rtroute.sidecar.delivery import Publish
from rtroute.sidecar.router import ERROR_HEADER, Decision, ExchangeRouter

LOG = logging.getLogger("rtroute.sidecar")

DEAD_LETTER_EXCHANGE = "rtroute.dead"
DEAD_LETTER_QUEUE = "rtroute.dead"
INGRESS_PREFIX = "rtroute.ingress."
SOURCE_HEADER = "x-rtroute-exchange"


@dataclass
class ExchangeSpec:
    """What the sidecar needs to serve one managed exchange (see ``[[exchange]]`` in DESIGN.md)."""

    name: str
    kind: str = "rtopic"
    alternate_exchange: str | None = None
    prefetch: int = 1000
    ingress_queue_type: str = "classic"
    bcc_alias_header: str = "x-rtroute-bcc"
    static_bindings: list[tuple[str, str, str]] = field(default_factory=list)  # type, dest, key

    @property
    def ingress_queue(self) -> str:
        return INGRESS_PREFIX + self.name

    @property
    def bindings_exchange(self) -> str:
        return f"{self.name}.bindings"

    @classmethod
    def from_config(cls, config: Any) -> ExchangeSpec:
        """From a :class:`rtroute.config.ExchangeConfig`."""
        return cls(
            name=config.name,
            kind=config.kind,
            alternate_exchange=config.alternate_exchange,
            prefetch=config.prefetch,
            ingress_queue_type=config.ingress_queue_type,
            bcc_alias_header=config.bcc_alias_header,
            static_bindings=[(b.destination_type, b.destination, b.key) for b in config.bindings],
        )


def declarations_for(spec: ExchangeSpec) -> list[dict]:
    """The idempotent declarations one managed exchange needs (run on every connect)."""
    bindings_args = {"alternate-exchange": spec.alternate_exchange} if spec.alternate_exchange \
        else {}
    # topic, not direct: see rtroute.sidecar.delivery for the measurement behind this
    bindings_type = "topic" if spec.kind == "rtopic" else spec.kind
    decls: list[dict] = [
        {"method": "exchange.declare", "exchange": spec.name, "type": "fanout",
         "durable": True},
        {"method": "exchange.declare", "exchange": spec.bindings_exchange,
         "type": bindings_type, "durable": True, "arguments": bindings_args},
    ]
    if spec.alternate_exchange:
        decls.append({"method": "exchange.declare", "exchange": spec.alternate_exchange,
                      "type": "fanout", "durable": True})
    decls += [
        {"method": "queue.declare", "queue": spec.ingress_queue, "durable": True,
         "arguments": {"x-single-active-consumer": True,
                       "x-queue-type": spec.ingress_queue_type}},
        {"method": "queue.bind", "queue": spec.ingress_queue, "exchange": spec.name,
         "routing_key": ""},
    ]
    for dest_type, dest, key in spec.static_bindings:
        if dest_type == "queue":
            decls.append({"method": "queue.bind", "queue": dest,
                          "exchange": spec.bindings_exchange, "routing_key": key})
        else:
            decls.append({"method": "exchange.bind", "destination": dest,
                          "source": spec.bindings_exchange, "routing_key": key})
    return decls


DEAD_LETTER_DECLARATIONS = [
    {"method": "exchange.declare", "exchange": DEAD_LETTER_EXCHANGE, "type": "fanout",
     "durable": True},
    {"method": "queue.declare", "queue": DEAD_LETTER_QUEUE, "durable": True},
    {"method": "queue.bind", "queue": DEAD_LETTER_QUEUE, "exchange": DEAD_LETTER_EXCHANGE,
     "routing_key": ""},
]


@dataclass
class Counters:
    """Per-exchange counters since start (plain ints: readable from the HTTP thread)."""

    received: int = 0
    routed: int = 0
    unroutable: int = 0
    dead_lettered: int = 0
    republished: int = 0
    requeued: int = 0
    redelivered: int = 0
    returned: int = 0


class _Pending:
    """One ingress message waiting for the confirms of its republishes."""

    __slots__ = ("exchange", "failed", "remaining", "tag")

    def __init__(self, exchange: ManagedExchange, tag: int, remaining: int) -> None:
        self.exchange = exchange
        self.tag = tag
        self.remaining = remaining
        self.failed = False


class ManagedExchange:
    """One managed exchange: its router, binding watcher, counters and ingress consumer."""

    def __init__(self, spec: ExchangeSpec, management: ManagementClient | None,
                 vhost: str, frame_max: int) -> None:
        if spec.kind != "rtopic":
            raise ValueError(f"exchange {spec.name!r}: kind {spec.kind!r} is served only with "
                             "diverts, which this version does not run yet; use kind 'rtopic'")
        self.spec = spec
        self.router = ExchangeRouter(spec.name, "rtopic", spec.bcc_alias_header,
                                     spec.alternate_exchange, frame_max)
        self.on_bindings_ready: Callable[[], Any] = lambda: None
        self.counters = Counters()
        self.state = "starting"
        self.since = time.time()
        self.batch: list[tuple[Any, Any, bytes]] = []
        self.consumer_tag: str | None = None
        self.watcher: BindingWatcher | None = None
        if management is not None:
            self.watcher = BindingWatcher(
                spec.bindings_exchange, management, vhost=vhost,
                on_add=lambda b: self.router.bind((b.destination_type, b.destination),
                                                  b.binding_key),
                on_remove=lambda b: self.router.unbind((b.destination_type, b.destination),
                                                       b.binding_key),
                on_ready=lambda: self.on_bindings_ready(),
                relist_interval=30.0)
        else:
            for dest_type, dest, key in spec.static_bindings:
                self.router.bind((dest_type, dest), key)

    def set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.since = time.time()

    def status(self, in_flight: int) -> dict:
        c = self.counters
        return {
            "name": self.spec.name,
            "kind": self.spec.kind,
            "state": self.state,
            "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.since)),
            "bindings_known": len(self.router.bindings()),
            "in_flight": in_flight,
            "received": c.received,
            "routed": c.routed,
            "unroutable": c.unroutable,
            "dead_lettered": c.dead_lettered,
            "republished": c.republished,
            "requeued": c.requeued,
            "redelivered": c.redelivered,
        }


class Sidecar:
    """Serves managed exchanges until :meth:`stop`.

    Args:
        uri: the broker (RabbitMQ URI; the password never appears in logs or status).
        exchanges: what to serve.
        management_uri: the management API (default: derived from ``uri``); None disables
            the binding watcher (static bindings only).
        window: publishes in flight on the confirm window.
        use_management: False to rely on static bindings only.
    """

    def __init__(self, uri: str, exchanges: list[ExchangeSpec],
                 management_uri: str | None = None, window: int = 4000,
                 use_management: bool = True, connection_name: str = "rtroute-sidecar") -> None:
        if not exchanges:
            raise ValueError("nothing to serve: give at least one managed exchange")
        self.uri = uri
        self.masked_uri = mask_uri(uri)
        management = ManagementClient.from_amqp_uri(uri, management_uri) if use_management \
            else None
        vhost = parse_uri(uri, strict=False).vhost
        self.exchanges = {
            spec.name: ManagedExchange(spec, management, vhost, frame_max=131072)
            for spec in exchanges
        }
        declarations = list(DEAD_LETTER_DECLARATIONS)
        for spec in exchanges:
            declarations += declarations_for(spec)
        self._window_size = window
        self._connection = ReconnectingConnection(
            uri, on_ready=self._on_ready, on_lost=self._on_lost, declarations=declarations,
            connection_name=connection_name)
        self._window: ConfirmWindow | None = None
        self._consume_channel: Any = None
        self._queue: collections.deque[tuple[Publish, Any, bytes, _Pending]] = collections.deque()
        self._unsettled: collections.deque[_Pending] = collections.deque()
        self._flush_scheduled = False
        self._stopping = False
        self._stopped = threading.Event()
        self.connects = 0
        self.last_error: str | None = None

    # -- any thread ---------------------------------------------------------------------------
    def run(self) -> None:
        """Connects and serves until :meth:`stop` (blocks the calling thread)."""
        LOG.info("sidecar starting: broker %s, exchanges %s", self.masked_uri,
                 ", ".join(self.exchanges))
        try:
            self._connection.run()
        finally:
            self._stopped.set()

    def stop(self, drain_timeout: float = 10.0) -> None:
        """Graceful stop: stop consuming, wait for in-flight confirms and acks, close."""
        self._connection.add_callback_threadsafe(lambda: self._begin_stop(drain_timeout))

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def status(self) -> dict:
        """A snapshot for ``/status`` and ``/metrics``."""
        in_flight = len(self._unsettled)
        exchanges = [ex.status(in_flight) for ex in self.exchanges.values()]
        healthy = self._connection.state not in ("stopped",) and self._window is not None \
            and not self._window.closed
        metrics: dict[str, dict] = {}
        for key, help_text in (("received", "Ingress messages received"),
                               ("routed", "Messages routed to at least one binding"),
                               ("unroutable", "Messages that matched no binding"),
                               ("dead_lettered", "Malformed messages sent to rtroute.dead"),
                               ("republished", "Republishes confirmed by the broker"),
                               ("requeued", "Ingress messages requeued after a nack"),
                               ("redelivered", "Ingress messages seen again (at-least-once)")):
            metrics[f"rtroute_exchange_{key}_total"] = {
                "help": help_text, "type": "counter",
                "samples": [({"exchange": e["name"]}, e[key]) for e in exchanges]}
        metrics["rtroute_exchange_bindings"] = {
            "help": "Bindings known", "type": "gauge",
            "samples": [({"exchange": e["name"]}, e["bindings_known"]) for e in exchanges]}
        metrics["rtroute_in_flight"] = {"help": "Ingress messages awaiting confirms",
                                        "type": "gauge", "samples": [({}, in_flight)]}
        metrics["rtroute_connects_total"] = {"help": "Broker connections made", "type": "counter",
                                             "samples": [({}, self.connects)]}
        return {"healthy": bool(healthy), "broker": self.masked_uri,
                "connection": self._connection.state, "connects": self.connects,
                "last_error": self.last_error, "exchanges": exchanges, "metrics": metrics}

    # -- ioloop thread: connection life cycle ---------------------------------------------------
    def _on_ready(self, connection: Any, channel: Any, _last_queue: str | None) -> None:
        self.connects += 1
        self._queue.clear()
        self._unsettled.clear()
        self._consume_channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        for ex in self.exchanges.values():
            ex.batch.clear()
            ex.consumer_tag = None
            ex.set_state("starting")

        def with_publish_channel(publish_channel: Any) -> None:
            window = ConfirmWindow(publish_channel, window=self._window_size,
                                   low_watermark=self._window_size // 2,
                                   on_writable=self._drain_queue,
                                   on_closed=self._on_window_closed)
            self._window = window
            window.start(on_ready=lambda: self._start_exchanges(connection))

        connection.channel(on_open_callback=with_publish_channel)
        LOG.info("connected to %s", self.masked_uri)

    def _start_exchanges(self, connection: Any) -> None:
        """Consumes each ingress queue once its bindings are known (never route blind)."""
        for ex in self.exchanges.values():
            if ex.watcher is None:
                self._consume(ex)
                continue
            ex.on_bindings_ready = lambda ex=ex: self._consume(ex)
            ex.watcher.start(connection)  # keeps what it knew across reconnects
            if ex.watcher.ready:
                self._consume(ex)

    def _consume(self, ex: ManagedExchange) -> None:
        if self._stopping or ex.consumer_tag is not None or self._consume_channel is None:
            return
        ch = self._consume_channel
        if not ch.is_open:
            return
        ch.basic_qos(prefetch_count=ex.spec.prefetch)
        ex.consumer_tag = ch.basic_consume(
            ex.spec.ingress_queue,
            lambda _ch, method, props, body, ex=ex: self._on_message(ex, method, props, body))
        ex.set_state("running")
        LOG.info("exchange %s: consuming %s (%d bindings known)", ex.spec.name,
                 ex.spec.ingress_queue, len(ex.router.bindings()))

    def _on_lost(self, reason: str) -> None:
        self.last_error = reason
        self._window = None
        self._consume_channel = None
        self._queue.clear()
        self._unsettled.clear()
        for ex in self.exchanges.values():
            ex.consumer_tag = None
            ex.batch.clear()
            ex.set_state("stopped" if self._stopping else "reconnecting")
        if not self._stopping:
            LOG.warning("connection lost (%s); unacked ingress messages will be redelivered",
                        reason)

    def _on_channel_closed(self, _channel: Any, reason: Exception) -> None:
        if self._stopping:
            return
        LOG.warning("ingress channel closed (%s): reconnecting", reason)
        self._reconnect_now()

    def _on_window_closed(self, reason: str) -> None:
        if self._stopping:
            return
        LOG.warning("publish channel closed (%s): reconnecting", reason)
        self._reconnect_now()

    def _reconnect_now(self) -> None:
        conn = self._connection.connection
        if conn is not None and conn.is_open:
            conn.close(reply_code=320, reply_text="rtroute: channel lost, reconnecting")

    def _begin_stop(self, drain_timeout: float) -> None:
        self._stopping = True
        ch = self._consume_channel
        for ex in self.exchanges.values():
            if ex.consumer_tag and ch is not None and ch.is_open:
                ch.basic_cancel(ex.consumer_tag)
            ex.consumer_tag = None
            if ex.watcher is not None:
                ex.watcher.stop()
            ex.set_state("stopping")
        self._flush()
        deadline = time.monotonic() + drain_timeout

        def check() -> None:
            if self._unsettled and time.monotonic() < deadline and self._window is not None \
                    and not self._window.closed:
                self._connection.ioloop.call_later(0.05, check)
                return
            for ex in self.exchanges.values():
                ex.set_state("stopped")
            self._connection.stop()

        check()

    # -- ioloop thread: the message path --------------------------------------------------------
    def _on_message(self, ex: ManagedExchange, method: Any, props: Any, body: bytes) -> None:
        ex.batch.append((method, props, body))
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._connection.ioloop.call_later(0, self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        for ex in self.exchanges.values():
            if ex.batch:
                batch, ex.batch = ex.batch, []
                self._route_batch(ex, batch)
        self._drain_queue()

    def _route_batch(self, ex: ManagedExchange, batch: list[tuple[Any, Any, bytes]]) -> None:
        decisions = ex.router.decide_many(
            [(method.routing_key, props.headers) for method, props, _ in batch])
        c = ex.counters
        c.received += len(batch)
        for (method, props, body), decision in zip(batch, decisions):
            if method.redelivered:
                c.redelivered += 1
            self._dispatch(ex, method, props, body, decision)

    def _dispatch(self, ex: ManagedExchange, method: Any, props: Any, body: bytes,
                  decision: Decision) -> None:
        c = ex.counters
        if decision.error is not None:
            c.dead_lettered += 1
            LOG.warning("exchange %s: dead-lettering a message: %s", ex.spec.name,
                        decision.error)
            headers = dict(decision.headers)
            headers[ERROR_HEADER] = decision.error
            headers[SOURCE_HEADER] = ex.spec.name
            routing_key = method.routing_key if isinstance(method.routing_key, str) else ""
            publishes = [(Publish(DEAD_LETTER_EXCHANGE, routing_key, None), headers)]
        elif decision.unroutable:
            c.unroutable += 1
            publishes = [(p, decision.headers) for p in decision.publishes]
        else:
            c.routed += 1
            publishes = []
            for p in decision.publishes:
                headers = decision.headers
                if p.bcc:
                    headers = dict(headers)
                    headers["BCC"] = list(p.bcc)
                publishes.append((p, headers))
        pending = _Pending(ex, method.delivery_tag, len(publishes))
        self._unsettled.append(pending)
        for p, headers in publishes:
            self._queue.append((p, _with_headers(props, headers), body, pending))
        if not publishes:
            self._settle(pending)

    def _drain_queue(self) -> None:
        window = self._window
        if window is None:
            return
        queue = self._queue
        while queue and window.has_room:
            p, props, body, pending = queue.popleft()
            window.publish(p.exchange, p.routing_key, body, props, mandatory=True,
                           callback=self._on_confirm, context=pending)

    def _on_confirm(self, future: Any) -> None:
        pending: _Pending = future.context
        outcome = future.outcome
        counters = pending.exchange.counters
        if outcome in (Outcome.NACKED, Outcome.FAILED):
            pending.failed = True
        elif outcome is Outcome.RETURNED:
            # The bindings changed between the watcher's view and the publish: nothing took
            # it, as the plugin would have dropped it. Counted, then acked.
            counters.returned += 1
        else:
            counters.republished += 1
        pending.remaining -= 1
        if pending.remaining == 0:
            self._settle(pending)

    def _settle(self, pending: _Pending) -> None:
        """Acks, in delivery order with ``multiple``, every ingress message fully confirmed."""
        pending.remaining = 0
        ch = self._consume_channel
        if ch is None or not ch.is_open:
            return
        if pending.failed:
            # Nacked by the broker: requeue the ingress message (at-least-once, may duplicate).
            self._unsettled.remove(pending)
            ch.basic_nack(pending.tag, multiple=False, requeue=True)
            pending.exchange.counters.requeued += 1
            return
        last = None
        unsettled = self._unsettled
        while unsettled and unsettled[0].remaining == 0 and not unsettled[0].failed:
            last = unsettled.popleft()
        if last is not None:
            ch.basic_ack(last.tag, multiple=True)


def _with_headers(props: Any, headers: dict) -> pika.BasicProperties:
    """A copy of the ingress message's properties with ``headers`` replaced."""
    return pika.BasicProperties(
        content_type=props.content_type, content_encoding=props.content_encoding,
        headers=headers or None, delivery_mode=props.delivery_mode, priority=props.priority,
        correlation_id=props.correlation_id, reply_to=props.reply_to,
        expiration=props.expiration, message_id=props.message_id, timestamp=props.timestamp,
        type=props.type, user_id=props.user_id, app_id=props.app_id,
        cluster_id=props.cluster_id)


def serve(sidecar: Sidecar, http_listen: str | None, http_token: str | None = None,
          on_started: Callable[[Any], None] | None = None) -> None:
    """Runs ``sidecar`` with its HTTP endpoint until SIGTERM/SIGINT, then stops gracefully."""
    import signal

    from rtroute.ops_http import OpsServer

    http = OpsServer(http_listen, sidecar.status, token=http_token).start() \
        if http_listen else None
    if http is not None:
        LOG.info("http endpoint on %s (/healthz /status /metrics)", http_listen)

    def on_signal(signum: int, _frame: Any) -> None:
        LOG.info("signal %d: stopping (draining confirms)", signum)
        sidecar.stop()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if on_started is not None:
            on_started(http)
        sidecar.run()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if http is not None:
            http.stop()
