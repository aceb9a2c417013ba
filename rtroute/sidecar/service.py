"""The sidecar process: serves managed exchanges over a real RabbitMQ with end-to-end confirms.

Per managed exchange ``NAME`` (DESIGN.md's broker layout): publishers publish to ``NAME``
(fanout, bound to the durable single-active-consumer queue ``rtroute.ingress.NAME``);
applications bind to ``NAME.bindings``. The sidecar consumes the ingress queue with manual acks
and a prefetch window, routes each batch with the core, republishes through a
:class:`~rtroute.amqp.ConfirmWindow`, and acks an ingress message only once every republish of
it is confirmed. A nack or a lost connection leaves it unacked (requeued): at-least-once.

Diverts (:mod:`rtroute.divert`) are the stage before routing: each fired divert adds copies to
the message's republishes, so the ingress message is acked only once the original and every copy
are confirmed. For ``topic``/``direct``/``fanout``/``headers`` exchanges RabbitMQ routes: the
non-diverted flow is republished to ``NAME.bindings``, a real exchange of that type.

:class:`Sidecar` is the glue: the connection's life cycle (connect, verify the management API,
consume, reconnect, stop) around parts that each do one job: :mod:`~rtroute.sidecar.layout`
(what is declared), :mod:`~rtroute.sidecar.pipeline` (deliveries to confirmed republishes, with
:mod:`~rtroute.sidecar.divert_copies` and :mod:`~rtroute.sidecar.dead_letters`),
:mod:`~rtroute.sidecar.address_probe` (what forwarding addresses are),
:mod:`~rtroute.sidecar.divert_admin` (diverts changed at run time) and
:mod:`~rtroute.sidecar.status` (counters and metrics). Everything runs in the ioloop thread of
one :class:`~rtroute.amqp.ReconnectingConnection` except :meth:`Sidecar.stop` and
:meth:`Sidecar.status`, which any thread may call, and the divert changes, which any thread but
the ioloop's may call.
"""
from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Iterable, Sequence
from typing import Any, Callable

from rtroute.amqp import (
    ManagementClient,
    ManagementError,
    ReconnectingConnection,
    mask_uri,
    parse_uri,
)
from rtroute.amqp.broker_identity import identity_from_server_properties
from rtroute.amqp.event_feed import RelayedFeed
from rtroute.amqp.event_source import EVENT_VHOST, EventSource, running
from rtroute.amqp.management import WrongBroker
from rtroute.divert import DivertTable
from rtroute.ops import sd_notify
from rtroute.sidecar.address_probe import (
    LOOK_AGAIN_INTERVAL,
    REPROBE_INTERVAL,
    AddressProbe,
    ForwardingAddresses,
)
from rtroute.sidecar.dead_letters import DIVERT_HEADER, SOURCE_HEADER
from rtroute.sidecar.divert_admin import DIVERT_SYNC_INTERVAL, FILE_WINS, DivertAdmin
from rtroute.sidecar.divert_copies import TRANSFORMER_BUDGET
from rtroute.sidecar.divert_store import DivertStore
from rtroute.sidecar.exchange import UNROUTABLE_LOG_INTERVAL, ManagedExchange
from rtroute.sidecar.layout import (
    DEAD_LETTER_DECLARATIONS,
    DEAD_LETTER_EXCHANGE,
    DEAD_LETTER_QUEUE,
    BrokerLayout,
    ExchangeSpec,
    dead_letter_declarations,
    declarations_for,
    missing_plugin,
)
from rtroute.sidecar.pipeline import METHOD_FRAME_CACHE, Pipeline
from rtroute.sidecar.replica_role import ReplicaRoles
from rtroute.sidecar.republish import COPY, DEAD, ORIGINAL
from rtroute.sidecar.shards import ShardConsumers
from rtroute.sidecar.status import (
    BCC_HINT,
    EXCHANGE_COUNTERS,
    Counters,
    ExchangeState,
    sidecar_metrics,
)

# What other modules and tests import from here (most of it now lives in the modules above).
__all__ = [
    "BCC_HINT", "COPY", "DEAD", "DEAD_LETTER_DECLARATIONS", "DEAD_LETTER_EXCHANGE",
    "DEAD_LETTER_QUEUE", "DIVERT_HEADER", "DIVERT_SYNC_INTERVAL", "EXCHANGE_COUNTERS",
    "FILE_WINS", "LOOK_AGAIN_INTERVAL", "MANAGEMENT_OPTION", "METHOD_FRAME_CACHE", "ORIGINAL",
    "REPROBE_INTERVAL", "SOURCE_HEADER", "TRANSFORMER_BUDGET", "UNROUTABLE_LOG_INTERVAL",
    "VERIFY_RETRY", "AddressProbe", "Counters", "ExchangeSpec", "ExchangeState",
    "ManagedExchange", "Sidecar", "SidecarFatal", "dead_letter_declarations",
    "declarations_for", "serve",
]

LOG = logging.getLogger("rtroute.sidecar")

VERIFY_RETRY = 5.0  # seconds between attempts to reach the management API at connect
MANAGEMENT_OPTION = "--management-uri (RTROUTE_MANAGEMENT_URI, [broker] management_uri)"


class SidecarFatal(RuntimeError):
    """The sidecar stopped because it cannot serve correctly (the message says why and what
    to change); restarting it unchanged would fail the same way."""


class Sidecar:
    """Serves managed exchanges, and their diverts, until :meth:`stop`.

    Args:
        uri: the broker (RabbitMQ URI; the password never appears in logs or status), or a
            list of a cluster's nodes (one is picked per connect; a lost one fails over).
        exchanges: what to serve.
        management_uri: the management API, or a list tried in order (default: derived from
            each ``uri``); None disables
            the binding watcher (static bindings only).
        window: publishes in flight on the confirm window.
        use_management: False to rely on static bindings only.
        connection_name: shown by the broker (management UI, ``rabbitmqctl``).
        diverts: ``[[divert]]`` entries (:class:`rtroute.config.divert.DivertConfig`), in order.
        persist_diverts: keep the diverts created over HTTP in the broker
            (:mod:`rtroute.sidecar.divert_store`); needs the management API.
        divert_sync_interval: seconds between two readings of the stored diverts.
        allowed_transformers: the ``module:function`` names that diverts made at run time
            (HTTP, broker-stored) may use; none by default. Config-file diverts may use any.

    Raises:
        ValueError: nothing to serve, ``persist_diverts`` without the management API, or a
            divert that cannot run (a
            :class:`~rtroute.divert.DivertError`: no managed exchange matches its address, a
            cycle, a transformer that does not import, ...).
    """

    def __init__(self, uri: str | Sequence[str], exchanges: list[ExchangeSpec],
                 management_uri: str | Sequence[str] | None = None, window: int = 4000,
                 use_management: bool = True, connection_name: str = "rtroute-sidecar",
                 diverts: Sequence[Any] = (), persist_diverts: bool = False,
                 divert_sync_interval: float = DIVERT_SYNC_INTERVAL,
                 allowed_transformers: Iterable[str] = ()) -> None:
        if not exchanges:
            raise ValueError("nothing to serve: give at least one managed exchange")
        if persist_diverts and not use_management:
            raise ValueError("persist_diverts needs the management API")
        self.uri = uri
        # a cluster's nodes: one is picked per connect (status shows the one connected)
        self.masked_uri = ", ".join(mask_uri(one) for one in ([uri] if isinstance(uri, str)
                                                                 else uri))
        management = ManagementClient.from_amqp_uri(uri, management_uri) if use_management \
            else None
        vhost = parse_uri(uri if isinstance(uri, str) else uri[0], strict=False).vhost
        self._vhost = vhost
        self._management = management
        self._roles = ReplicaRoles(management, vhost)
        # outside the event plugin's vhost the watchers follow its events through a
        # connection of their own there (they poll where it cannot be used: /status says why)
        self._events: EventSource | None = None
        self._events_feed: RelayedFeed | None = None
        if management is not None and vhost != EVENT_VHOST:
            self._events = EventSource.acquire(uri)
            self._events_feed = self._events.relayed()
        self.exchanges = {
            spec.name: ManagedExchange(spec, management, vhost, frame_max=131072,
                                       feed=self._events_feed)
            for spec in exchanges
        }
        self.diverts = DivertTable(list(self.exchanges))
        for config in diverts:
            self.diverts.add(config)
        self._layout = BrokerLayout(self.exchanges)
        self._connection = ReconnectingConnection(
            uri, on_ready=self._on_ready, on_lost=self._on_lost,
            declarations=self._layout.declarations, connection_name=connection_name)
        self._consume_channel: Any = None
        self._stopping = False
        self._stopped = threading.Event()
        self._addresses = ForwardingAddresses(self._connection)
        self._pipeline = Pipeline(self._connection, self.exchanges, self.diverts,
                                  self._addresses, on_broken=self._reconnect_now,
                                  on_error=self._note_error, window=window,
                                  on_window_closed=self._on_window_closed,
                                  on_flow=self._on_flow)
        self._shards = ShardConsumers(self._connection, self._pipeline, management, vhost,
                                      on_broken=self._reconnect_now,
                                      stopping=lambda: self._stopping)
        for ex in self.exchanges.values():
            if ex.spec.shards:
                self._shards.register(ex)
        self._divert_admin = DivertAdmin(
            self.diverts, self.exchanges, self._addresses, self._connection,
            DivertStore(management, vhost) if persist_diverts and management else None,
            allowed_transformers, divert_sync_interval,
            connected=lambda: self._pipeline.window is not None,
            stopping=lambda: self._stopping, stopped=self._stopped)
        self.connects = 0
        self.last_error: str | None = None
        self.fatal_error: str | None = None
        self._notified_ready = False  # systemd (Type=notify) told once every exchange consumes

    @property
    def internal_errors(self) -> int:
        """Unexpected exceptions caught while routing (their messages were dead-lettered)."""
        return self._pipeline.internal_errors

    # -- any thread ---------------------------------------------------------------------------
    def run(self) -> None:
        """Connects and serves until :meth:`stop` (blocks the calling thread).

        Raises:
            SidecarFatal: it stopped by itself because it cannot serve correctly (e.g. the
                management API is another broker's).
        """
        LOG.info("sidecar starting: broker %s, exchanges %s, %d diverts", self.masked_uri,
                 ", ".join(self.exchanges), len(self.diverts))
        if self._divert_admin.store is not None:
            threading.Thread(target=self._divert_admin.sync_stored_diverts,
                             name="rtroute-divert-sync", daemon=True).start()
        try:
            with running(self._events):
                self._connection.run()
        finally:
            self._stopped.set()
        if self.fatal_error is not None:
            raise SidecarFatal(self.fatal_error)
        received = sum(ex.counters.received for ex in self.exchanges.values())
        republished = sum(ex.counters.republished for ex in self.exchanges.values())
        unsettled = self._pipeline.in_flight
        LOG.info("sidecar stopped: %d messages received, %d republishes confirmed%s",
                 received, republished,
                 f"; {unsettled} unsettled, left to the broker to deliver again" if unsettled
                 else "; nothing left in flight")

    def stop(self, drain_timeout: float = 10.0) -> None:
        """Graceful stop: stop consuming, wait for in-flight confirms and acks, close."""
        self._connection.add_callback_threadsafe(lambda: self._begin_stop(drain_timeout))

    def wait_stopped(self, timeout: float | None = None) -> bool:
        return self._stopped.wait(timeout)

    def create_divert(self, config: Any, timeout: float = 10.0) -> dict:
        """Adds a divert while running (see :meth:`.DivertAdmin.create_divert`)."""
        return self._divert_admin.create_divert(config, timeout)

    def delete_divert(self, name: str, timeout: float = 10.0) -> dict:
        """Removes a divert while running (see :meth:`.DivertAdmin.delete_divert`)."""
        return self._divert_admin.delete_divert(name, timeout)

    def update_divert(self, config: Any, timeout: float = 10.0) -> dict:
        """Gives a running divert new settings (see :meth:`.DivertAdmin.update_divert`)."""
        return self._divert_admin.update_divert(config, timeout)

    def http_routes(self) -> dict:
        """``POST /diverts``, ``PUT``/``PATCH``/``DELETE /diverts/NAME`` and ``GET /diverts``
        for the OpsServer."""
        return self._divert_admin.http_routes()

    def status(self) -> dict:
        """A snapshot for ``/status`` and ``/metrics``."""
        window = self._pipeline.window
        in_flight = self._pipeline.in_flight
        exchanges = [ex.status(in_flight) for ex in self.exchanges.values()]
        for status, ex in zip(exchanges, self.exchanges.values()):
            shards = self._shards.status(status["name"])
            if shards is not None:
                status["shards"] = shards
                status["role"] = "sharded"
            else:  # which replica routes it: the ingress queue's single active consumer
                status["role"], status["role_reason"] = self._roles.role(
                    ex.spec.ingress_queue, ex.consumer_tag)
        diverts = self._divert_admin.diverts_status()
        healthy = self._connection.state not in ("stopped",) and window is not None \
            and not window.closed
        reason = None if healthy else f"broker connection {self._connection.state}" + (
            f": {self.last_error}" if self.last_error else "")
        # never ready while an exchange's bindings load: its ingress is not consumed yet
        loading = [text for text in (ex.watcher.progress() for ex in self.exchanges.values()
                                     if ex.watcher is not None) if text is not None]
        if healthy and loading:
            healthy, reason = False, "loading " + "; ".join(loading)
        metrics = sidecar_metrics(
            self._vhost, exchanges,
            [(ex.spec.name, ex.latency.sample()) for ex in self.exchanges.values()],
            diverts, in_flight, self.connects, self.internal_errors)
        store = self._divert_admin.store
        return {"healthy": bool(healthy), "reason": reason, "broker": self.masked_uri,
                "connected_to": self._connection.current_uri,
                "connection": self._connection.state, "connects": self.connects,
                # how binding changes are seen: None = the connection's own vhost's events
                "binding_events": None if self._events is None else {
                    "vhost": self._events.vhost, "following": self._events.unavailable is None,
                    "reason": self._events.unavailable},
                "replica_id": self._shards.replica_id,
                "last_error": self.last_error, "internal_errors": self.internal_errors,
                "hints": [BCC_HINT], "exchanges": exchanges, "diverts": diverts,
                "divert_store": None if store is None else store.parameter,
                "forwarding_addresses": dict(self._addresses.kinds), "metrics": metrics}

    # -- ioloop thread: connection life cycle ---------------------------------------------------
    def _on_ready(self, connection: Any, channel: Any, _last_queue: str | None) -> None:
        self.connects += 1
        pipeline = self._pipeline
        pipeline.attach(connection, channel)
        self._shards.attach(connection)
        self._consume_channel = channel
        channel.add_on_close_callback(self._on_channel_closed)
        channel.add_on_cancel_callback(self._on_broker_cancel)
        for ex in self.exchanges.values():
            ex.consumer_tag = None
            ex.set_state(ExchangeState.STARTING)

        pipeline.frame_max = getattr(getattr(connection, "params", None), "frame_max", None) \
            or pipeline.frame_max

        def with_publish_channel(publish_channel: Any) -> None:
            pipeline.open_window(publish_channel, on_ready=lambda: self._verify_management(
                connection, lambda: self._addresses.look_up(
                    connection, self._divert_admin.forwarding_names(),
                    lambda: self._start_exchanges(connection))))

        connection.channel(on_open_callback=with_publish_channel)
        LOG.info("connected to %s", self._connection.current_uri or self.masked_uri)

    def _verify_management(self, connection: Any, then: Callable[[], Any]) -> None:
        """Makes sure the management API is this broker's before anything believes it, then
        calls ``then()``: a listing from another broker would empty the binding tables.

        The check (``cluster_name`` of ``connection.start`` against ``/api/overview``) runs in
        a thread. A mismatch stops the sidecar with :class:`SidecarFatal`; an API that does not
        answer is retried every few seconds while serving goes on (listings wait for it, and
        the client refuses to answer for another broker: see
        :meth:`ManagementClient.expect_broker`). Stored diverts are read here, the first time.
        """
        management = self._management
        if management is None:
            then()
            return
        management.expect_broker(
            identity_from_server_properties(getattr(connection, "server_properties", None)),
            self._connection.current_uri or self.masked_uri, MANAGEMENT_OPTION)
        ioloop = self._connection.ioloop
        started = False
        logged: list[str] = []  # the problem last logged: one line per change, not per retry

        def work() -> None:
            stored = None
            problem: Exception | None = None
            try:
                management.verify_broker()
                stored = self._divert_admin.read_stored()
            except ManagementError as exc:
                problem = exc
            try:
                ioloop.add_callback_threadsafe(lambda: verified(problem, stored))
            except Exception:  # noqa: BLE001 - the ioloop is gone: nothing left to start
                LOG.debug("management check finished after the ioloop closed")

        def verified(problem: Exception | None, stored: Any) -> None:
            nonlocal started
            if self._stopping or connection is not self._connection.connection:
                return
            if isinstance(problem, WrongBroker):
                self._fail(str(problem))
                return
            self._divert_admin.add_stored(stored)
            if not started:
                started = True
                then()
            if problem is not None:
                if logged != [str(problem)]:
                    LOG.warning("management API not usable yet (%s); checking again every "
                                "%.0f s", problem, VERIFY_RETRY)
                    logged[:] = [str(problem)]
                self.last_error = str(problem)
                ioloop.call_later(VERIFY_RETRY, retry)
            elif logged:
                LOG.info("management API usable again")

        def retry() -> None:
            if not self._stopping and connection is self._connection.connection:
                threading.Thread(target=work, name="rtroute-verify", daemon=True).start()

        threading.Thread(target=work, name="rtroute-verify", daemon=True).start()

    def _fail(self, reason: str) -> None:
        """Stops the sidecar for good: ``run()`` raises :class:`SidecarFatal` with ``reason``."""
        LOG.error("%s", reason)
        self.fatal_error = self.last_error = reason
        self._begin_stop(drain_timeout=5.0)

    def _note_error(self, error: str) -> None:
        """Keeps ``error`` as the last one ``/status`` shows."""
        self.last_error = error

    def _start_exchanges(self, connection: Any) -> None:
        """Consumes each ingress queue once its bindings are known (never route blind)."""
        if self._events_feed is not None:
            self._events_feed.start(connection)  # before the watchers, which wait for it
        for ex in self.exchanges.values():
            if ex.watcher is None:
                self._consume(ex)
                continue
            ex.on_bindings_ready = functools.partial(self._consume, ex)
            ex.watcher.start(connection)  # keeps what it knew across reconnects
            if ex.watcher.ready:
                self._consume(ex)

    def _consume(self, ex: ManagedExchange) -> None:
        if self._stopping or ex.consumer_tag is not None or self._consume_channel is None:
            return
        ch = self._consume_channel
        if not ch.is_open:
            return
        if ex.spec.shards:
            self._shards.consume(ex)
            what = f"its {ex.spec.shards} shards as replica {self._shards.replica_id}"
        else:
            ch.basic_qos(prefetch_count=ex.spec.prefetch)
            # deliveries reach Pipeline.on_delivery through the frame reader; pika never sees
            # them
            ex.consumer_tag = ch.basic_consume(ex.spec.ingress_queue,
                                               self._on_unexpected_message)
            self._pipeline.consumers[ex.consumer_tag] = ex
            what = ex.spec.ingress_queue
        ex.set_state(ExchangeState.BLOCKED if self._pipeline.relay.blocked
                     else ExchangeState.RUNNING)
        self._notify_ready()
        LOG.info("exchange %s: consuming %s (%s bindings known)", ex.spec.name, what,
                 "broker-routed, no" if ex.broker_routed else ex.binding_count())

    def _notify_ready(self) -> None:
        """Tells systemd (Type=notify) once, when every exchange consumes."""
        if not self._notified_ready and all(
                e.state in (ExchangeState.RUNNING, ExchangeState.BLOCKED)
                for e in self.exchanges.values()):
            self._notified_ready = True
            sd_notify.notify(f"READY=1\nSTATUS=serving {len(self.exchanges)} exchange(s)")

    def _on_flow(self, blocked: bool, _reason: str | None) -> None:
        """The broker blocked or unblocked the connection: consuming exchanges say so."""
        for ex in self.exchanges.values():
            if ex.state in (ExchangeState.RUNNING, ExchangeState.BLOCKED):
                ex.set_state(ExchangeState.BLOCKED if blocked else ExchangeState.RUNNING)

    def _on_lost(self, reason: str) -> None:
        self._shards.detach()
        plugin = missing_plugin(reason)
        if plugin is not None and not self._stopping:
            self._fail(plugin)
        self._layout.learn(reason)
        self.last_error = reason
        was_serving = self._pipeline.window is not None
        self._consume_channel = None
        self._pipeline.detach()
        self._addresses.cancel_probe()
        for ex in self.exchanges.values():
            ex.consumer_tag = None
            ex.set_state(ExchangeState.STOPPED if self._stopping
                         else ExchangeState.RECONNECTING)
        if not self._stopping and was_serving:
            LOG.warning("unacked ingress messages will be redelivered after the reconnect")

    def _on_channel_closed(self, _channel: Any, reason: Exception) -> None:
        if self._stopping:
            return
        LOG.warning("ingress channel closed (%s): reconnecting", reason)
        self._reconnect_now()

    def _on_broker_cancel(self, frame: Any) -> None:
        """The broker cancelled an ingress consumer: its queue was deleted (or, for a quorum
        queue, lost its leader). Reconnecting declares the queue again and consumes anew;
        messages published to ``NAME`` while it was gone had no queue to go to."""
        ex = self._pipeline.consumers.get(frame.method.consumer_tag)
        if self._stopping or ex is None:
            return
        LOG.warning("exchange %s: the broker cancelled the consumer of %s (queue deleted?): "
                    "reconnecting to declare it again", ex.spec.name, ex.spec.ingress_queue)
        ex.set_state(ExchangeState.RECONNECTING)
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
        sd_notify.notify("STOPPING=1")
        self._addresses.stop()
        ch = self._consume_channel
        self._shards.cancel_all()
        for ex in self.exchanges.values():
            if ex.consumer_tag and ch is not None and ch.is_open:
                ch.basic_cancel(ex.consumer_tag)
            ex.consumer_tag = None
            if ex.watcher is not None:
                ex.watcher.stop()
            ex.set_state(ExchangeState.STOPPING)
        self._pipeline.route_batch()
        # what was read goes out; retries and holds stop (their messages are requeued when
        # the connection closes)
        self._pipeline.relay.drain(park=False)

        def drained() -> None:
            for ex in self.exchanges.values():
                ex.set_state(ExchangeState.STOPPED)
            self._connection.stop()

        # every republish answered and its ingress message acked, or the timeout, or the
        # publish channel gone (unacked messages are redelivered)
        self._pipeline.relay.when_drained(drained, drain_timeout)

    def _on_unexpected_message(self, _channel: Any, method: Any, _props: Any, _body: Any
                               ) -> None:
        LOG.error("delivery %d bypassed the frame reader: reconnecting", method.delivery_tag)
        self._reconnect_now()


def serve(sidecar: Sidecar, http_listen: str | None, http_token: str | None = None,
          on_started: Callable[[Any], None] | None = None, shovels: Any = None, *,
          allow_unauthenticated_changes: bool = False, protect_reads: bool = False) -> None:
    """Runs ``sidecar`` with its HTTP endpoint until SIGTERM/SIGINT, then stops gracefully.

    ``shovels`` (a :class:`rtroute.shovel.runner.ShovelRunner`) run beside it, each in its own
    thread, and share the endpoint: ``/status`` then lists ``shovels`` too.

    The endpoint serves ``/livez``, ``/readyz`` (``/healthz``), ``/status`` and ``/metrics``,
    and manages diverts: ``POST /diverts`` (a JSON object with the ``[[divert]]`` keys),
    ``DELETE /diverts/NAME`` and ``GET /diverts``. Changes need ``http_token`` (``Authorization:
    Bearer``) unless ``allow_unauthenticated_changes`` and no token; reads need it only with
    ``protect_reads`` (see :class:`rtroute.ops.http.OpsServer`).

    Raises:
        rtroute.ops.http.ListenError: the endpoint cannot listen (e.g. address in use).
    """
    import signal

    from rtroute.ops.http import OpsServer, merge_status

    status = sidecar.status if shovels is None else \
        (lambda: merge_status(sidecar.status(), shovels.status()))
    http = OpsServer(http_listen, status, token=http_token, routes=sidecar.http_routes(),
                     allow_unauthenticated_changes=allow_unauthenticated_changes,
                     protect_reads=protect_reads).start() if http_listen else None
    if http is not None:
        LOG.info("http endpoint on %s (/livez /readyz /status /metrics /diverts)", http_listen)

    def on_signal(signum: int, _frame: Any) -> None:
        LOG.info("signal %d: stopping (draining confirms)", signum)
        # not sidecar.stop() here: the handler runs in the main thread between two bytecodes,
        # which may be inside pika's wake_threadsafe holding its (non-reentrant) lock, and
        # stop() takes that lock: the process hung on SIGTERM (seen in CI). A thread waits
        # for the lock instead, once the main thread has let it go
        threading.Thread(target=sidecar.stop, name="rtroute-stop", daemon=True).start()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        if shovels is not None:
            shovels.start()
        if on_started is not None:
            on_started(http)
        sidecar.run()
    finally:
        if shovels is not None:
            shovels.stop()
        for s, handler in previous.items():
            signal.signal(s, handler)
        if http is not None:
            http.stop()
