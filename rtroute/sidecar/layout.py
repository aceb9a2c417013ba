"""What the sidecar declares on the broker (DESIGN.md's broker layout), per managed exchange
``NAME``: the exchange ``NAME`` (fanout, what publishers publish to), ``NAME.bindings`` (where
applications bind), the durable single-active-consumer ingress queue ``rtroute.ingress.NAME``
(or, sharded, ``NAME.shards`` and its queues ``rtroute.shard.NAME.0`` ...), the archive stream
``archive_stream`` bound to ``NAME`` (and to ``NAME.bindings`` with the archive key, which a
proxy's rewritten publishes carry: see :mod:`rtroute.routing.rtopic_layout`) when the config
names one, and ``rtroute.dead`` for the
dead letters of every exchange.
"""
from __future__ import annotations

import logging
import re
from typing import TYPE_CHECKING, Any

from rtroute.config.rtroute_toml import ExchangeConfig
from rtroute.routing.delivery_plan import bindings_exchange_type
from rtroute.routing.exchange_router import ExchangeRouter

# the argument an x-rtopic exchange's fanout NAME is declared with (by the sidecar and the
# proxy): the proxy follows a registration of NAME only for such a NAME (rtroute.proxy.catalog)
from rtroute.routing.rtopic_layout import ARCHIVE_KEY, LAYOUT_ARGUMENT, LAYOUT_VALUE

if TYPE_CHECKING:
    from rtroute.sidecar.exchange import ManagedExchange

LOG = logging.getLogger("rtroute.sidecar")

DEAD_LETTER_EXCHANGE = "rtroute.dead"
CONSISTENT_HASH_TYPE = "x-consistent-hash"
CONSISTENT_HASH_PLUGIN = "rabbitmq_consistent_hash_exchange"
DEAD_LETTER_QUEUE = "rtroute.dead"

# rtroute.dead declared as a quorum queue exists as a classic one, or the other way round
_INEQUIVALENT_DEAD_LETTER_TYPE = re.compile(
    r"inequivalent arg 'x-queue-type' for queue '" + re.escape(DEAD_LETTER_QUEUE) +
    r"' in vhost '[^']*': received (?:the value )?'?(\w+)")
# a declaration refused because the exchange exists with another type
_INEQUIVALENT_TYPE = re.compile(
    r"inequivalent arg 'type' for exchange '([^']*)' in vhost '[^']*': received '[^']*' but "
    r"current is '([^']*)'")


# One managed exchange, as the config declares it; the sidecar needs nothing more.
ExchangeSpec = ExchangeConfig


def declarations_for(spec: ExchangeSpec, rtopic_bindings_type: str = "topic") -> list[dict]:
    """The idempotent declarations one managed exchange needs (run on every connect).

    ``rtopic_bindings_type`` is the type of an rtopic exchange's ``NAME.bindings``: topic on
    RabbitMQ 3.x, direct on 4.x (see :func:`rtroute.routing.delivery_plan.bindings_exchange_type`
    for the measurements), or the type an existing one has.
    """
    bindings_args = {"alternate-exchange": spec.alternate_exchange} if spec.alternate_exchange \
        else {}
    bindings_type = rtopic_bindings_type if spec.kind == "rtopic" else spec.kind
    decls: list[dict] = [
        {"method": "exchange.declare", "exchange": spec.name, "type": "fanout",
         "durable": True,
         # says to proxies that NAME is an x-rtopic exchange's fanout (rtroute.proxy.catalog)
         "arguments": {LAYOUT_ARGUMENT: LAYOUT_VALUE} if spec.kind == "rtopic" else {}},
        {"method": "exchange.declare", "exchange": spec.bindings_exchange,
         "type": bindings_type, "durable": True, "arguments": bindings_args},
    ]
    if spec.alternate_exchange:
        decls.append({"method": "exchange.declare", "exchange": spec.alternate_exchange,
                      "type": "fanout", "durable": True})
    ingress_args: dict[str, Any] = {"x-single-active-consumer": True,
                                    "x-queue-type": spec.ingress_queue_type}
    if spec.ingress_queue_type == "quorum":
        # past the delivery limit a quorum queue drops the message unless it has a dead-letter
        # exchange (4.x sets a limit of 20 by default): dead-letter it, reason in x-death
        ingress_args.update({"x-dead-letter-exchange": DEAD_LETTER_EXCHANGE,
                             "x-delivery-limit": spec.ingress_delivery_limit})
    if spec.shards:
        decls += sharded_ingress_declarations(spec, ingress_args)
    else:
        decls += [
            {"method": "queue.declare", "queue": spec.ingress_queue, "durable": True,
             "arguments": ingress_args},
            {"method": "queue.bind", "queue": spec.ingress_queue, "exchange": spec.name,
             "routing_key": ""},
            # what a sharded ingress of the same name left (switched back): messages would
            # go to both. Last, once the ingress queue is bound: nothing published meanwhile
            # finds NAME bound to nothing
            {"method": "exchange.unbind", "destination": spec.shards_exchange,
             "source": spec.name, "routing_key": ""},
        ]
    if spec.archive_stream:
        # every message published to NAME, as published, kept for readers by offset
        decls += [
            {"method": "queue.declare", "queue": spec.archive_stream, "durable": True,
             "arguments": {"x-queue-type": "stream", **spec.archive_arguments}},
            {"method": "queue.bind", "queue": spec.archive_stream, "exchange": spec.name,
             "routing_key": ""},
        ]
        if spec.kind == "rtopic":
            # what a proxy publishes to NAME.bindings in NAME's stead (the sidecar's own
            # republishes never carry that key: each message is archived once, at NAME)
            decls.append({"method": "queue.bind", "queue": spec.archive_stream,
                          "exchange": spec.bindings_exchange, "routing_key": ARCHIVE_KEY})
    for b in spec.bindings:
        if b.destination_type == "queue":
            decls.append({"method": "queue.bind", "queue": b.destination,
                          "exchange": spec.bindings_exchange, "routing_key": b.key,
                          "arguments": dict(b.arguments)})
        else:
            decls.append({"method": "exchange.bind", "destination": b.destination,
                          "source": spec.bindings_exchange, "routing_key": b.key,
                          "arguments": dict(b.arguments)})
    return decls


def sharded_ingress_declarations(spec: ExchangeSpec, ingress_args: dict[str, Any]
                                 ) -> list[dict]:
    """A sharded ingress: ``NAME`` (fanout) feeds ``NAME.shards``, a consistent hash exchange
    (plugin ``rabbitmq_consistent_hash_exchange``) that sends each routing key to one of the
    shard queues, each bound with the same weight; every shard queue has the ingress queue's
    arguments (single active consumer, type, delivery limit). The unsharded ingress queue is
    unbound from ``NAME`` (switched to shards: what it holds stays in it, see docs/sidecar.md), last:
    if a declaration fails before (e.g. no consistent hash exchange on this broker), ``NAME``
    stays bound to it and nothing published meanwhile is dropped."""
    decls: list[dict] = [
        {"method": "exchange.declare", "exchange": spec.shards_exchange,
         "type": CONSISTENT_HASH_TYPE, "durable": True},
        {"method": "exchange.bind", "destination": spec.shards_exchange, "source": spec.name,
         "routing_key": ""},
    ]
    for queue in spec.ingress_queues:
        decls += [
            {"method": "queue.declare", "queue": queue, "durable": True,
             "arguments": dict(ingress_args)},
            # the binding key of a consistent hash exchange is the queue's weight
            {"method": "queue.bind", "queue": queue, "exchange": spec.shards_exchange,
             "routing_key": "1"},
        ]
    decls.append({"method": "queue.unbind", "queue": spec.ingress_queue, "exchange": spec.name,
                  "routing_key": ""})
    return decls


def missing_plugin(reason: str) -> str | None:
    """What to do when a refused declaration (the connection's close ``reason``) says the
    broker lacks the consistent hash exchange a sharded ingress needs; None otherwise."""
    # 3.x: 503 "unknown exchange type"; 4.x: 406 "invalid exchange type"
    refused_type = "unknown exchange type" in reason or "invalid exchange type" in reason
    if not refused_type or CONSISTENT_HASH_TYPE not in reason:
        return None
    return (f"this broker has no {CONSISTENT_HASH_TYPE!r} exchange type, which a sharded "
            f"ingress (shards = N) needs: enable the plugin with 'rabbitmq-plugins enable "
            f"{CONSISTENT_HASH_PLUGIN}' (it ships with RabbitMQ), or remove 'shards' from the "
            f"exchange's config")


def dead_letter_declarations(queue_type: str = "classic") -> list[dict]:
    """``rtroute.dead`` (exchange and queue). On a cluster (a quorum ingress) the queue is a
    quorum queue too: a classic one lives on one node, and while that node is down no sidecar
    can declare it (``404 home node ... is down``), so none could start."""
    arguments = {"x-queue-type": "quorum"} if queue_type == "quorum" else {}
    return [
        {"method": "exchange.declare", "exchange": DEAD_LETTER_EXCHANGE, "type": "fanout",
         "durable": True},
        {"method": "queue.declare", "queue": DEAD_LETTER_QUEUE, "durable": True,
         "arguments": arguments},
        {"method": "queue.bind", "queue": DEAD_LETTER_QUEUE, "exchange": DEAD_LETTER_EXCHANGE,
         "routing_key": ""},
    ]


DEAD_LETTER_DECLARATIONS = dead_letter_declarations()


class BrokerLayout:
    """The declarations of every managed exchange and of ``rtroute.dead``, with what the broker
    taught about them: the type an existing ``NAME.bindings`` or ``rtroute.dead`` has
    (RabbitMQ cannot change the type of an exchange, nor of a queue)."""

    def __init__(self, exchanges: dict[str, ManagedExchange]) -> None:
        self._exchanges = exchanges
        # the type each rtopic NAME.bindings has on the broker, once known (None: declare it
        # with the type that suits the broker's version)
        self._bindings_types: dict[str, str] = {}
        # quorum beside a quorum ingress (a cluster), unless it exists as a classic queue
        self._dead_letter_queue_type = "quorum" if any(
            ex.spec.ingress_queue_type == "quorum" for ex in exchanges.values()) else "classic"

    def declarations(self, connection: Any) -> list[dict]:
        """What to declare on this connection: an rtopic ``NAME.bindings`` is a direct exchange
        on RabbitMQ 4 (which indexes direct routing) and a topic one before, unless it exists
        with the other type (learned from the broker's refusal, see :meth:`learn`)."""
        properties = getattr(connection, "server_properties", None) or {}
        version = properties.get("version")
        if isinstance(version, bytes):
            version = version.decode("utf-8", "replace")
        preferred = bindings_exchange_type(version)
        declarations = dead_letter_declarations(self._dead_letter_queue_type)
        for name, ex in self._exchanges.items():
            kind = self._bindings_types.get(name, preferred)
            if isinstance(ex.router, ExchangeRouter):
                ex.router.bindings_type = kind
            declarations += declarations_for(ex.spec, kind)
        return declarations

    def learn(self, reason: str) -> None:
        """Keeps what a refused declaration (the connection's close ``reason``) says exists."""
        self._learn_bindings_type(reason)
        self._learn_dead_letter_type(reason)

    def _learn_bindings_type(self, reason: str) -> None:
        """A refused ``NAME.bindings`` declaration names the type the exchange has: keep it
        (RabbitMQ cannot change an exchange's type; delete the exchange to let it be
        declared anew)."""
        found = _INEQUIVALENT_TYPE.search(reason)
        if found is None:
            return
        exchange, current = found.group(1), found.group(2)
        for name, ex in self._exchanges.items():
            if ex.spec.bindings_exchange == exchange and ex.spec.kind == "rtopic" and \
                    current in ("topic", "direct"):
                self._bindings_types[name] = current
                LOG.info("%s is a %s exchange: kept as it is (on RabbitMQ 4 a direct one routes "
                         "BCC faster; delete it while no sidecar runs to have it declared so)",
                         exchange, current)

    def _learn_dead_letter_type(self, reason: str) -> None:
        """A refused ``rtroute.dead`` declaration: the queue exists with the other type; keep
        it (a queue's type cannot change)."""
        found = _INEQUIVALENT_DEAD_LETTER_TYPE.search(reason)
        if found is None:
            return
        self._dead_letter_queue_type = "classic" if found.group(1) == "quorum" else "quorum"
        LOG.info("%s is a %s queue: kept as it is (on a cluster a quorum one survives the loss "
                 "of a node; delete it while no sidecar runs to have it declared so)",
                 DEAD_LETTER_QUEUE, self._dead_letter_queue_type)
