"""Which exchanges of a vhost are x-rtopic, and the binding table of each.

The source of truth lives in the broker, so it survives proxy restarts and is shared by every
proxy of the broker: the durable internal exchange ``rtroute.rtopic`` (type direct; nothing
can publish to it) holds one exchange-to-exchange binding per x-rtopic exchange ``NAME``, to
``NAME.bindings`` with routing key ``NAME``. A proxy makes that binding when a client declares
``NAME`` with type ``x-rtopic`` (before answering ``declare-ok``); deleting ``NAME`` through a
proxy deletes ``NAME.bindings``, and the broker drops the binding with it. Exchange arguments
would not do: RabbitMQ does not compare them on a redeclare (but ``alternate-exchange``), so a
marker could never be added to a ``NAME.bindings`` the sidecar declared first.

Every proxy follows that registry with a :class:`~rtroute.amqp.binding_watcher.BindingWatcher`
(the management API's listing, then the event exchange) and the bindings of each
``NAME.bindings`` with one more watcher each, as the sidecar and the library do. The watchers run
on a pika connection of the proxy's own (its ``--uri`` credentials) in a thread per vhost; what
they report is handed to the asyncio loop, where the routers live: only that thread reads or
changes them.
"""
from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Callable

from rtroute.amqp.binding_watcher import Binding, BindingWatcher
from rtroute.amqp.connection import ReconnectingConnection
from rtroute.amqp.management import ManagementClient
from rtroute.sidecar.delivery import bindings_exchange_type
from rtroute.sidecar.router import ExchangeRouter

__all__ = ["REGISTRY_EXCHANGE", "Catalog", "VhostCatalog"]

LOG = logging.getLogger(__name__)
REGISTRY_EXCHANGE = "rtroute.rtopic"
BINDINGS_SUFFIX = ".bindings"


class RTopic:
    """One x-rtopic exchange as a proxy knows it (loop thread)."""

    __slots__ = ("name", "ready", "rewritten", "router", "wire_bindings", "wire_name")

    def __init__(self, name: str) -> None:
        self.name = name
        self.wire_name = name.encode("utf-8")
        self.wire_bindings = (name + BINDINGS_SUFFIX).encode("utf-8")
        self.router = ExchangeRouter(name, "rtopic")
        self.ready = asyncio.Event()
        # (routing key, content header past its channel) -> the publish frame's rewritten
        # pair, for messages without headers; emptied by every binding change
        self.rewritten: dict[tuple[bytes, bytes], tuple[bytes, bytes]] = {}

    def bind(self, destination: tuple[str, str], key: str, added: bool) -> None:
        self.rewritten.clear()
        if added:
            self.router.bind(destination, key)
        else:
            self.router.unbind(destination, key)


class VhostCatalog:
    """The x-rtopic exchanges of one vhost and their bindings.

    Args:
        uri: the proxy's own broker URI (its credentials); the vhost replaces the URI's.
        management: the management API of that broker.
        vhost: the vhost.
        loop: the asyncio loop the routers live in.
    """

    def __init__(self, uri: str, management: ManagementClient, vhost: str,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.vhost = vhost
        self._loop = loop
        self._management = management
        self.exchanges: dict[bytes, RTopic] = {}       # NAME -> exchange
        self.by_bindings: dict[bytes, RTopic] = {}     # NAME.bindings -> exchange
        self.ready = asyncio.Event()
        # what a new NAME.bindings is declared as: direct on RabbitMQ 4, topic before (see
        # rtroute.sidecar.delivery.bindings_exchange_type), known once connected
        self.bindings_type = "topic"
        self._watchers: dict[str, BindingWatcher] = {}  # pika thread only
        self._pika_connection: Any = None
        self._registry = BindingWatcher(
            REGISTRY_EXCHANGE, management, vhost=vhost,
            on_add=lambda b: self._registered(b, True),
            on_remove=lambda b: self._registered(b, False),
            on_ready=lambda: self._to_loop(self.ready.set), relist_interval=30.0)
        self._connection = ReconnectingConnection(
            uri, on_ready=self._on_connected, on_lost=self._on_lost,
            declarations=[{"method": "exchange.declare", "exchange": REGISTRY_EXCHANGE,
                           "type": "direct", "durable": True, "internal": True}],
            connection_name=f"rtroute proxy catalog {vhost}",
            parameters={"virtual_host": vhost})
        self._thread = threading.Thread(target=self._connection.run, daemon=True,
                                        name=f"rtroute-proxy-catalog-{vhost}")

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._connection.stop()
        self._thread.join(10.0)

    @property
    def last_error(self) -> str | None:
        return self._connection.last_error or self._registry.last_error

    # -- loop thread ------------------------------------------------------------------------------

    def rtopic(self, name: bytes) -> RTopic | None:
        return self.exchanges.get(name)

    def learn(self, name: str) -> RTopic:
        """``name`` is x-rtopic from now on (declared through this proxy, or listed)."""
        wire = name.encode("utf-8")
        exchange = self.exchanges.get(wire)
        if exchange is None:
            exchange = self.exchanges[wire] = RTopic(name)
            exchange.router.bindings_type = self.bindings_type
            self.by_bindings[exchange.wire_bindings] = exchange
            self._connection.add_callback_threadsafe(lambda: self._watch(name))
        return exchange

    def forget(self, name: str) -> None:
        """``name`` is no x-rtopic exchange any more (deleted)."""
        exchange = self.exchanges.pop(name.encode("utf-8"), None)
        if exchange is not None:
            self.by_bindings.pop(exchange.wire_bindings, None)
            exchange.ready.set()  # whoever waits for it goes on: it is no rtopic now
            self._connection.add_callback_threadsafe(lambda: self._unwatch(name))

    def discard_unused(self, exchange: str) -> None:
        """Deletes ``exchange`` if nothing is bound to it (the ``NAME.bindings`` of a refused
        x-rtopic declaration), on the proxy's own connection; a refusal is ignored."""
        self._connection.add_callback_threadsafe(lambda: self._discard(exchange))

    def bind(self, name: bytes, destination: tuple[str, str], key: str, added: bool) -> None:
        """A binding of ``NAME.bindings`` made or removed through this proxy: learnt at once
        (the watcher's own report of it later changes nothing)."""
        exchange = self.exchanges.get(name)
        if exchange is not None:
            exchange.bind(destination, key, added)

    def _apply(self, name: str, binding: Binding, added: bool) -> None:
        exchange = self.exchanges.get(name.encode("utf-8"))
        if exchange is not None:
            exchange.bind((binding.destination_type, binding.destination),
                          binding.binding_key, added)

    def _set_ready(self, name: str) -> None:
        exchange = self.exchanges.get(name.encode("utf-8"))
        if exchange is not None:
            exchange.ready.set()

    # -- pika thread ------------------------------------------------------------------------------

    def _to_loop(self, callback: Callable[..., Any], *args: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(callback, *args)
        except RuntimeError:
            pass  # the loop is closed: the proxy is stopping

    def _registered(self, binding: Binding, added: bool) -> None:
        name = binding.binding_key
        if binding.destination_type != "exchange" or \
                binding.destination != name + BINDINGS_SUFFIX:
            return  # not a registration (made by hand?): ignored
        self._to_loop(self.learn if added else self.forget, name)

    def _on_connected(self, connection: Any, _channel: Any, _last_queue: Any) -> None:
        self._pika_connection = connection
        version = (getattr(connection, "server_properties", None) or {}).get("version")
        if isinstance(version, bytes):
            version = version.decode("utf-8", "replace")
        self.bindings_type = bindings_exchange_type(version)
        self._registry.start(connection)
        for watcher in self._watchers.values():
            watcher.start(connection)

    def _on_lost(self, reason: str) -> None:
        self._pika_connection = None
        LOG.warning("proxy catalog of vhost %r: %s", self.vhost, reason)

    def _watch(self, name: str) -> None:
        if name in self._watchers:
            return
        watcher = self._watchers[name] = BindingWatcher(
            name + BINDINGS_SUFFIX, self._management, vhost=self.vhost,
            on_add=lambda b: self._to_loop(self._apply, name, b, True),
            on_remove=lambda b: self._to_loop(self._apply, name, b, False),
            on_ready=lambda: self._to_loop(self._set_ready, name), relist_interval=30.0)
        connection = self._pika_connection
        if connection is not None and connection.is_open:
            watcher.start(connection)

    def _discard(self, exchange: str) -> None:
        connection = self._pika_connection
        if connection is None or not connection.is_open:
            return

        def opened(channel: Any) -> None:
            channel.exchange_delete(exchange, if_unused=True,
                                    callback=lambda _frame: channel.close())

        connection.channel(on_open_callback=opened)

    def _unwatch(self, name: str) -> None:
        watcher = self._watchers.pop(name, None)
        if watcher is not None:
            watcher.stop()


class Catalog:
    """A :class:`VhostCatalog` per vhost, started when a client first opens that vhost.

    Args:
        uri: the proxy's own broker URI (credentials for the watchers' connection).
        management_uri: the management API (default: derived from ``uri``).
    """

    def __init__(self, uri: str, management_uri: str | None,
                 loop: asyncio.AbstractEventLoop) -> None:
        self._uri = uri
        self._management = ManagementClient.from_amqp_uri(uri, management_uri)
        self._loop = loop
        self._vhosts: dict[str, VhostCatalog] = {}

    def vhost(self, name: str) -> VhostCatalog:
        catalog = self._vhosts.get(name)
        if catalog is None:
            catalog = self._vhosts[name] = VhostCatalog(self._uri, self._management, name,
                                                        self._loop)
            catalog.start()
        return catalog

    def stop(self) -> None:
        for catalog in self._vhosts.values():
            catalog.stop()
