"""One managed exchange as the sidecar serves it: its router (or RabbitMQ's, for the
broker-routed kinds), the binding watcher that keeps the router's bindings current, its
counters and state, and what it says about unroutable messages."""
from __future__ import annotations

import collections
import logging
import time
from typing import Any, Callable

from rtroute.amqp import BindingWatcher, ManagementClient
from rtroute.amqp.binding_watcher import RELIST_WITH_EVENTS
from rtroute.amqp.event_feed import RelayedFeed
from rtroute.config.rtroute_toml import ExchangeConfig
from rtroute.ops.metrics import LatencyHistogram
from rtroute.routing.exchange_router import BrokerRoutedRouter, ExchangeRouter
from rtroute.sidecar.status import Counters, ExchangeState, utc_timestamp

LOG = logging.getLogger("rtroute.sidecar")

UNROUTABLE_LOG_INTERVAL = 10.0  # seconds between two log lines about unroutable messages


class ManagedExchange:
    """One managed exchange: its router, binding watcher, counters and ingress consumer."""

    def __init__(self, spec: ExchangeConfig, management: ManagementClient | None,
                 vhost: str, frame_max: int, feed: RelayedFeed | None = None) -> None:
        self.spec = spec
        self.broker_routed = spec.kind != "rtopic"
        self.router: ExchangeRouter | BrokerRoutedRouter
        if self.broker_routed:
            self.router = BrokerRoutedRouter(spec.name, spec.bcc_alias_header)
        else:
            self.router = ExchangeRouter(spec.name, "rtopic", spec.bcc_alias_header,
                                         spec.alternate_exchange, frame_max)
        self.on_bindings_ready: Callable[[], Any] = lambda: None
        self.counters = Counters()
        self.latency = LatencyHistogram()  # ingress delivery -> every republish confirmed
        # the last unroutable routing keys, and the log line's rate limit
        self.last_unroutable: collections.deque[tuple[str, str]] = collections.deque(maxlen=5)
        self._unroutable_logged_at = -1e9
        self._unroutable_since_log = 0
        self.state = ExchangeState.STARTING
        self.since = time.time()
        self.consumer_tag: str | None = None
        self.watcher: BindingWatcher | None = None
        if self.broker_routed:
            return  # RabbitMQ routes on NAME.bindings: no bindings to learn
        router = self.router
        assert isinstance(router, ExchangeRouter)
        if management is not None:
            self.watcher = BindingWatcher(
                spec.bindings_exchange, management, vhost=vhost,
                on_add=lambda b: router.bind((b.destination_type, b.destination),
                                             b.binding_key),
                on_remove=lambda b: router.unbind((b.destination_type, b.destination),
                                                  b.binding_key),
                on_ready=lambda: self.on_bindings_ready(),
                relist_interval=RELIST_WITH_EVENTS, feed=feed)
        else:
            for b in spec.bindings:
                router.bind((b.destination_type, b.destination), b.key)

    def note_unroutable(self, routing_key: str, why: str = "no binding matched") -> None:
        """Counts an unroutable message and says so: one log line at most every 10 s per
        exchange (with the count since the last one), the last few keys in ``/status``."""
        self.counters.unroutable += 1
        self.last_unroutable.append(
            (utc_timestamp(), routing_key))
        self._unroutable_since_log += 1
        now = time.monotonic()
        if now - self._unroutable_logged_at >= UNROUTABLE_LOG_INTERVAL:
            target = f"; it went to the alternate exchange {self.spec.alternate_exchange!r}" \
                if self.spec.alternate_exchange else \
                " and was dropped, as the plugin drops it (set alternate_exchange to keep it)"
            LOG.warning("exchange %s: %d unroutable message(s) since the last report (%s), "
                        "last routing key %r%s", self.spec.name, self._unroutable_since_log,
                        why, routing_key, target)
            self._unroutable_logged_at = now
            self._unroutable_since_log = 0

    def set_state(self, state: ExchangeState) -> None:
        if state != self.state:
            self.state = state
            self.since = time.time()

    def binding_count(self) -> int | None:
        """The bindings the sidecar routes by (None: broker-routed, RabbitMQ holds them)."""
        router = self.router
        return router.binding_count() if isinstance(router, ExchangeRouter) else None

    def status(self, in_flight: int) -> dict:
        c = self.counters
        return {
            "name": self.spec.name,
            "kind": self.spec.kind,
            "state": self.state.value,
            "since": utc_timestamp(self.since),
            # broker-routed kinds: RabbitMQ holds the bindings, the sidecar does not track them
            "bindings_known": self.binding_count(),
            # while they load (or are listed again): how far, or why the listing failed
            "bindings_loading": None if self.watcher is None else self.watcher.progress(),
            # "following" the event exchange, or "polling" (re-listing every few seconds)
            "bindings_watch": None if self.watcher is None else self.watcher.state.value,
            # re-listings that disagreed with the event stream (see BindingWatcher._reconcile)
            "bindings_disagreements": 0 if self.watcher is None else self.watcher.disagreements,
            "last_bindings_disagreement": None if self.watcher is None
            else self.watcher.last_disagreement,
            "in_flight": in_flight,
            **c.as_dict(),
            "last_unroutable": [{"at": at, "routing_key": key}
                                for at, key in self.last_unroutable],
            "bcc_alias_header": self.spec.bcc_alias_header,
        }
