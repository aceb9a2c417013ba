"""Which exchanges of a vhost are x-rtopic, and the binding table of each.

The source of truth lives in the broker, so it survives proxy restarts and is shared by every
proxy of the broker: the durable internal exchange ``rtroute.rtopic`` (type direct; nothing
can publish to it) holds one exchange-to-exchange binding per x-rtopic exchange ``NAME``, to
``NAME.bindings`` with routing key ``NAME``. A proxy makes that binding when a client declares
``NAME`` with type ``x-rtopic`` (before answering ``declare-ok``); deleting ``NAME`` through a
proxy deletes ``NAME.bindings``, and the broker drops the binding with it. Exchange arguments
would not do: RabbitMQ does not compare them on a redeclare (but ``alternate-exchange``): no
marker on a ``NAME.bindings`` the sidecar declared first. (``rtroute definitions`` imports it.)

A registration alone proves little: binding from ``rtroute.rtopic`` needs read permission on
it, and ``NAME.bindings`` may be any exchange its maker could configure. So a registration
found in the broker (rather than made through this proxy, after the client's own declaration
of ``NAME`` succeeded) is followed only if ``NAME`` is the layout's fanout: declared through a
proxy, which marks it with the argument ``x-rtroute-layout = "rtopic"`` (declaring ``NAME``
needs configure permission on it), or fed to a sidecar's ingress (``rtroute.ingress.NAME`` or
``NAME.shards``, bindings that need read permission on ``NAME``). Anything else is ignored
and logged: a user who may not read ``NAME`` cannot make the proxy send ``NAME``'s messages
to an exchange of theirs.

Every proxy follows that registry with a :class:`~rtroute.amqp.binding_watcher.BindingWatcher`
(the management API's listing, then the event exchange) and the bindings of each
``NAME.bindings`` with one more watcher each, as the sidecar and the library do. The watchers run
on a pika connection of the proxy's own (its ``--uri`` credentials) in a thread per vhost; what
they report is handed to the asyncio loop, where the routers live (only it touches them; an
exchange's first table is filled in the pika thread and taken by the loop in one callback).

Size: one vhost's catalog is one state machine across two threads (the registry, the check
of each registration, a watcher per exchange, and what each hands to the loop); its hand-offs
are a few lines each and only make sense beside the state they change.
"""
from __future__ import annotations

import asyncio
import ctypes
import logging
import threading
from collections.abc import Iterable
from typing import Any, Callable

from rtroute.amqp.binding_watcher import Binding, BindingWatcher
from rtroute.amqp.broker_identity import identity_from_server_properties
from rtroute.amqp.connection import ReconnectingConnection
from rtroute.amqp.event_feed import EventFeed, RelayedFeed
from rtroute.amqp.event_source import EVENT_VHOST, EventSource
from rtroute.amqp.field_table import encode_table
from rtroute.amqp.management import ManagementClient, NotFound, WrongBroker
from rtroute.amqp.uri import mask_uri, parse_uri
from rtroute.proxy.loop_queue import LoopQueue
from rtroute.proxy.registration import layout_errors
from rtroute.proxy.rtopic_exchange import RTopic
from rtroute.proxy.sync import SYNC_EXCHANGE, ProxySync
from rtroute.routing import rtopic_layout
from rtroute.routing.delivery_plan import bindings_exchange_type
from rtroute.routing.exchange_router import ExchangeRouter
from rtroute.routing.rtopic_layout import BINDINGS_SUFFIX, LAYOUT_ARGUMENT, REGISTRY_EXCHANGE

__all__ = ["LAYOUT_ARGUMENT", "LAYOUT_ARGUMENTS", "REGISTRY_EXCHANGE", "Catalog", "RTopic",
           "VhostCatalog"]

LOG = logging.getLogger(__name__)
LAYOUT_ARGUMENTS = encode_table({LAYOUT_ARGUMENT: rtopic_layout.LAYOUT_VALUE})
# seconds a vhost's catalog outlives its last client (a client reconnecting keeps it)
LINGER = 5.0
# seconds before a registration check the management API could not answer is made again
RECHECK_DELAY = 5.0
# seconds between fallback re-listings of an exchange's bindings (the events keep them current)
EXCHANGE_RELIST = 300.0
def _name_os_thread(name: str) -> None:
    """Gives the calling thread ``name`` in the OS too (``top -H``, ``/proc/PID/task``; Linux
    keeps 15 bytes), so an operator sees what the proxy's threads are."""
    try:
        libc = ctypes.CDLL(None)
        libc.prctl(15, name.encode("utf-8")[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass  # not Linux: the Python name only


class VhostCatalog:
    """The x-rtopic exchanges of one vhost and their bindings.

    Args:
        uri: the proxy's own broker URI (its credentials); the vhost replaces the URI's.
        management: the management API of that broker: on each connect it is made to expect
            the broker the connection reached, and checked (see :meth:`_verify_broker`).
        vhost: the vhost.
        loop: the asyncio loop the routers live in.
        on_wrong_broker: called (loop thread) with the one-line reason when the management
            API belongs to another broker than the AMQP connection.
        relay: the events from another connection (another vhost's catalog, or an
            :class:`~rtroute.amqp.event_source.EventSource`); None: its own connection's.

    Size: the life of one vhost's catalog (its broker connection, the binding watcher's
    events, registrations that must hold, the exchanges' routers and waiters) as one object
    that the loop and the watcher thread share under one set of rules.
    """

    def __init__(self, uri: str, management: ManagementClient, vhost: str,
                 loop: asyncio.AbstractEventLoop,
                 on_wrong_broker: Callable[[str], Any] | None = None,
                 relay: RelayedFeed | None = None) -> None:
        self.vhost = vhost
        self._loop = loop
        self._queue = LoopQueue(loop)  # what the pika thread hands the loop, in order
        self._management = management
        self._masked_uri = mask_uri(uri)
        self._on_wrong_broker = on_wrong_broker
        self.exchanges: dict[bytes, RTopic] = {}       # NAME -> exchange
        self.by_bindings: dict[bytes, RTopic] = {}     # NAME.bindings -> exchange
        self.ready = asyncio.Event()
        self.failure: str | None = None  # why the catalog cannot start (loop thread)
        # (loop thread) why its broker connection is down right now (None: it is up); while
        # it is down, changes made in the broker are not followed
        self.disconnected: str | None = "not connected yet"
        # (loop thread) why a change made in the broker may be missed although connected (the
        # event subscription lost, a listing pending); None: no gap
        self.gap: str | None = None
        self._failed = asyncio.Event()
        self._registrations: set[str] = set()  # names registered in the broker (loop thread)
        self._validating = 0  # registrations being checked (loop thread)
        self._unchecked: set[str] = set()  # registrations to check this loop turn
        self._registry_ready = False
        self._stopped = False  # (loop thread) no check is made again once stopped
        # what a new NAME.bindings is declared as: direct on RabbitMQ 4, topic before (see
        # rtroute.routing.delivery_plan.bindings_exchange_type), known once connected
        self.bindings_type = "topic"
        # the broker has the x-rtopic plugin (its exchange types, read at connect): a NAME not
        # in rtroute's layout is the plugin's, declared unchanged (docs/migrate.md, side by side)
        self.plugin = False
        self._watchers: dict[str, BindingWatcher] = {}  # pika thread only
        self._pika_connection: Any = None
        # one event subscription for all its watchers; other vhosts' events come relayed
        self._feed: EventFeed | RelayedFeed = relay or EventFeed(
            f"proxy catalog of vhost {vhost!r}")
        self._registry = BindingWatcher(
            REGISTRY_EXCHANGE, management, vhost=vhost,
            on_add=lambda b: self._registered(b, True),
            on_remove=lambda b: self._registered(b, False),
            on_ready=lambda: self._to_loop(self._on_registry_ready), relist_interval=30.0,
            small=True, feed=self._feed, on_current=lambda current: self._to_loop(self._registry_current,
                                                                      current))
        self._connection = ReconnectingConnection(
            uri, on_ready=self._on_connected, on_lost=self._on_lost,
            declarations=[{"method": "exchange.declare", "exchange": REGISTRY_EXCHANGE,
                           "type": "direct", "durable": True, "internal": True},
                          {"method": "exchange.declare", "exchange": SYNC_EXCHANGE,
                           "type": "direct", "durable": True}],
            connection_name=f"rtroute proxy catalog {vhost}",
            parameters={"virtual_host": vhost})
        # bind-ok through this proxy means routable through every proxy (rtroute.proxy.sync)
        self.sync = ProxySync(management, vhost, loop, parse_uri(uri, strict=False).username,
                              apply=self._apply_change,
                              to_pika=lambda fn: self._connection.add_callback_threadsafe(fn),
                              on_queue=self._maybe_ready, feed=self._feed)
        self._thread = threading.Thread(target=self._run, daemon=True,
                                        name=f"rtroute-proxy-catalog-{vhost}")

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        _name_os_thread(self._thread.name)
        self._connection.run()

    def run_in_thread(self, callback: Callable[[], Any]) -> None:
        """Runs ``callback`` in the catalog's pika thread."""
        self._connection.add_callback_threadsafe(callback)

    @property
    def has_events(self) -> bool:
        """The catalog's vhost has the event exchange (not found absent so far)."""
        return isinstance(self._feed, EventFeed) and not self._feed.absent

    def stop(self, wait: bool = True) -> None:
        """Closes the catalog's connection (``wait``: until its thread ended, up to 10 s)."""
        self._stopped = True
        if isinstance(self._feed, RelayedFeed):
            self._feed.stop()
        self._connection.stop()
        if wait and self._thread.is_alive():
            self._thread.join(10.0)

    @property
    def last_error(self) -> str | None:
        return self._connection.last_error or self._registry.last_error

    # -- loop thread ------------------------------------------------------------------------------

    async def wait_ready(self, timeout: float) -> str | None:
        """Until the registry is known: None, or why not (refused by the broker at once,
        else after ``timeout`` seconds)."""
        if self.ready.is_set():
            return None
        waits = [asyncio.ensure_future(self.ready.wait()),
                 asyncio.ensure_future(self._failed.wait())]
        try:
            await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for wait in waits:
                wait.cancel()
        if self.ready.is_set():
            return None
        if self.failure is not None:
            return self.failure
        last = self.last_error
        return f"not ready after {timeout:g} s" + (f" (last error: {last})" if last else "")

    def _connection_state(self, reason: str | None) -> None:
        self.disconnected = reason

    def _on_failure(self, reason: str) -> None:
        self.disconnected = reason
        if self.ready.is_set():
            return
        # a refusal (login, vhost access, permission) will not pass by waiting
        if "refused" in reason and "Connection refused" not in reason or "ACCESS_REFUSED" \
                in reason or "NOT_ALLOWED" in reason:
            self.failure = (f"the proxy's own user (--uri) cannot use the vhost: {reason} "
                            "(see docs/proxy.md: what the proxy's user needs)")
            self._failed.set()

    def _verify_broker(self) -> None:
        """Checks (in the executor) that the management API belongs to the broker the
        connection reached. Another broker's listing would route every publish by a binding
        table that is not this broker's: confirmed, delivered nowhere. On a mismatch the
        catalog fails for good (clients are refused with the reason) and ``on_wrong_broker``
        is told; an API that does not answer is no verdict (every request checks it first)."""
        checked = self._loop.run_in_executor(None, self._management.verify_broker)

        def done(future: asyncio.Future) -> None:
            try:
                identity = future.result()
                self.plugin = identity is not None and "x-rtopic" in identity.exchange_types
            except WrongBroker as exc:
                reason = str(exc)
                LOG.error("%s", reason)
                self.failure = reason
                self.ready.clear()
                self._failed.set()
                if self._on_wrong_broker is not None:
                    self._on_wrong_broker(reason)
            except Exception as exc:  # noqa: BLE001 - no answer: the listings check again
                LOG.debug("vhost %r: broker identity not checked yet: %s", self.vhost, exc)

        checked.add_done_callback(done)

    def _on_registry_ready(self) -> None:
        self._registry_ready = True
        self._maybe_ready()

    def _maybe_ready(self) -> None:
        # ready once the registry is listed and checked, and the other proxies wait for this
        # one's copy (its sync queue is bound: rtroute.proxy.sync)
        if self._registry_ready and not self._validating and self.sync.queue is not None:
            self.failure = None
            self.ready.set()

    def _registration(self, name: str, added: bool) -> None:
        """A registration of ``name`` appeared in the broker or went away."""
        if not added:
            self._registrations.discard(name)
            if self.exchanges.get(name.encode("utf-8")) is not None:
                self.forget(name)
                self._loop.run_in_executor(None, self._remove_leftover, name)
            return
        self._registrations.add(name)
        if self.exchanges.get(name.encode("utf-8")) is not None:
            return
        self._validating += 1
        self._check(name)

    def _check(self, name: str) -> None:
        """Checks the registration of ``name`` with the others of this loop turn (see
        :meth:`_check_batch`)."""
        self._unchecked.add(name)
        if len(self._unchecked) == 1:
            self._loop.call_soon(self._check_batch)

    def _check_batch(self) -> None:
        """Checks the registrations (management API, in the executor) and follows those that
        hold. A check the API cannot answer is made again after :data:`RECHECK_DELAY` s, the
        catalog not ready meanwhile: a relist reports only new bindings, and an x-rtopic
        exchange taken for a plain one would have its publishes sent to the bare fanout
        ``NAME`` (confirmed, routed nowhere)."""
        names = sorted(self._unchecked)
        self._unchecked.clear()
        if not names:
            return
        checked = self._loop.run_in_executor(None, layout_errors, self._management, names,
                                             self.vhost)

        def done(future: asyncio.Future) -> None:
            try:
                errors = future.result()
            except Exception as exc:  # noqa: BLE001 - the API failed: not a verdict
                if self._stopped:
                    return
                again = [name for name in names if name in self._registrations]
                if again:
                    LOG.warning("vhost %r: cannot check %d x-rtopic registrations (%s, ...) "
                                "(%s): again in %g s", self.vhost, len(again), again[0], exc,
                                RECHECK_DELAY)
                    self._loop.call_later(RECHECK_DELAY, lambda: [self._check(n) for n in again])
                self._validating -= len(names) - len(again)
                self._maybe_ready()
                return
            for name in names:
                self._validating -= 1
                error = errors.get(name)
                if error is not None:
                    LOG.warning("vhost %r: ignoring the x-rtopic registration of %r: %s",
                                self.vhost, name, error)
                elif name in self._registrations:
                    self.learn(name)
            self._maybe_ready()

        checked.add_done_callback(done)

    def _remove_leftover(self, name: str) -> None:
        """After ``NAME.bindings`` went (an auto-delete one whose last binding went, or deleted
        by hand): an auto-delete fanout ``NAME`` nothing else uses goes too, as the plugin's
        auto-delete x-rtopic exchange goes with its last binding. Blocking (executor)."""
        management = self._management
        try:
            if management.exchange_exists(name + BINDINGS_SUFFIX, self.vhost):
                return
            exchange = management.exchange(name, self.vhost)
            if exchange.get("type") != "fanout" or not exchange.get("auto_delete"):
                return
            if management.exchange_bindings(name, self.vhost):
                return
            management.delete_exchange(name, self.vhost, if_unused=True)
            LOG.info("vhost %r: deleted auto-delete x-rtopic exchange %r after its last "
                     "binding", self.vhost, name)
        except NotFound:
            pass
        except Exception as exc:  # noqa: BLE001 - housekeeping: logged, not fatal
            LOG.warning("vhost %r: cannot delete the leftover fanout %r: %s", self.vhost, name,
                        exc)

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

    def announce(self, change: dict[str, Any]) -> Any:
        """Awaitable: until every other proxy applied ``change`` (see rtroute.proxy.sync):
        ``{"learn": NAME}``, or ``{"bind": NAME, "destination": [type, name], "key": KEY}``."""
        return self.sync.announce(change)

    def _apply_change(self, change: dict[str, Any]) -> None:
        """Another proxy's change (a declaration or a binding made through it), believed: it
        came from the proxies' own user (see rtroute.proxy.sync)."""
        name = change.get("learn") or change.get("bind")
        if not isinstance(name, str):
            return
        exchange = self.learn(name)
        destination, key = change.get("destination"), change.get("key")
        if "bind" in change and isinstance(key, str) and isinstance(destination, list) and \
                len(destination) == 2:
            exchange.bind((str(destination[0]), str(destination[1])), key, True)

    def _apply_batch(self, batch: list[tuple[str, Binding, bool]]) -> None:  # put_each
        for name, binding, added in batch:
            exchange = self.exchanges.get(name.encode("utf-8"))
            if exchange is not None:
                exchange.bind((binding.destination_type, binding.destination),
                              binding.binding_key, added)

    def _take_table(self, name: str, fresh: ExchangeRouter) -> None:
        exchange = self.exchanges.get(name.encode("utf-8"))
        if exchange is not None:
            exchange.forget_rewrites()
            exchange.router.take_bindings(fresh)

    def _registry_current(self, current: bool) -> None:
        self.gap = None if current else \
            "its event subscription was lost: re-listing the x-rtopic exchanges"

    def _exchange_current(self, name: str, current: bool) -> None:
        """The bindings of ``name`` may be missing a change (``current`` False: the event
        subscription was lost) or are listed again: its publishes wait meanwhile, as before its
        first listing, rather than being routed by a table that may be stale."""
        exchange = self.exchanges.get(name.encode("utf-8"))
        if exchange is None:
            return
        if current:
            exchange.ready.set()
        else:
            exchange.forget_rewrites()  # a cached rewrite is taken before the ready check
            exchange.ready.clear()

    def progress(self, exchange: RTopic) -> tuple[str, bool]:
        """How far the bindings of ``exchange`` (not ready) are: one line, and whether they
        are loading now (a listing in flight, or its bindings being applied); False: the
        listing failed and waits to be retried, or the broker connection is down."""
        name = exchange.name
        # the pika thread's dict, read here in one atomic lookup; what is read of the watcher
        # (its listing's counters) is a snapshot, for a status line only
        watcher = self._watchers.get(name)
        listing = None if watcher is None else watcher.listing
        if watcher is None or listing is None:
            why = f": {self.disconnected}" if self.disconnected else ""
            return f"the bindings of {name!r} are not listed yet{why}", \
                self.disconnected is None
        text = watcher.progress()
        if text is None or listing.phase in ("applying", "done"):
            total = "" if listing.total is None else f" of {listing.total:,}"
            return (f"bindings of {name + BINDINGS_SUFFIX!r}: "
                    f"{exchange.router.binding_count():,}{total} applied"), True
        return text, watcher.listing_running

    def _set_ready(self, name: str) -> None:
        exchange = self.exchanges.get(name.encode("utf-8"))
        if exchange is not None:
            exchange.ready.set()

    # -- pika thread ------------------------------------------------------------------------------

    def _to_loop(self, callback: Callable[..., Any], *args: Any) -> None:
        self._queue.put(callback, *args)  # in order, in turns (a listing's 300,000 bindings)

    def _registered(self, binding: Binding, added: bool) -> None:
        name = binding.binding_key
        if binding.destination_type != "exchange" or \
                binding.destination != name + BINDINGS_SUFFIX:
            return  # not a registration (made by hand?): ignored
        self._to_loop(self._registration, name, added)

    def _on_connected(self, connection: Any, _channel: Any, _last_queue: Any) -> None:
        self._pika_connection = connection
        properties = getattr(connection, "server_properties", None)
        # before any listing is believed: the API must be this broker's (each request after
        # this checks it first; the loop's check makes a mismatch fatal at once)
        self._management.expect_broker(identity_from_server_properties(properties),
                                       self._masked_uri, "--management-uri")
        self._to_loop(self._connection_state, None)
        self._to_loop(self._verify_broker)
        version = (properties or {}).get("version")
        if isinstance(version, bytes):
            version = version.decode("utf-8", "replace")
        self.bindings_type = bindings_exchange_type(version)
        self._feed.start(connection)  # before the watchers, which wait for it
        self._registry.start(connection)
        self.sync.start(connection)
        for watcher in self._watchers.values():
            watcher.start(connection)

    def _on_lost(self, reason: str) -> None:
        self._pika_connection = None  # (the connection's own WARNING line says why)
        self._to_loop(self._on_failure, reason)

    def _watch(self, name: str) -> None:
        if name in self._watchers:
            return
        watcher = self._watchers[name] = BindingWatcher(
            name + BINDINGS_SUFFIX, self._management, vhost=self.vhost,
            on_add=lambda b: self._queue.put_each(self._apply_batch, (name, b, True)),
            on_table=lambda bindings: self._first_table(name, bindings),
            on_remove=lambda b: self._queue.put_each(self._apply_batch, (name, b, False)),
            on_ready=lambda: self._to_loop(self._set_ready, name),
            relist_interval=EXCHANGE_RELIST,
            feed=self._feed, on_current=lambda current: self._to_loop(
                self._exchange_current, name, current))
        connection = self._pika_connection
        if connection is not None and connection.is_open:
            watcher.start(connection)

    def _first_table(self, name: str, bindings: Iterable[Binding]) -> None:
        """(pika thread) The first listing of ``name``'s bindings: a router is filled here
        and taken by the loop's in one callback (:meth:`ExchangeRouter.take_bindings`), not
        one binding per loop callback (100,000 bindings: the loop's share of the proxy's
        start, 1.3 s of 3 s, most of it threads taking turns)."""
        fresh = ExchangeRouter(name, "rtopic")
        for binding in bindings:
            fresh.bind((binding.destination_type, binding.destination), binding.binding_key)
        self._queue.put(self._take_table, name, fresh)

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
    """A :class:`VhostCatalog` per vhost, started when the broker first accepted a client of
    that vhost (:meth:`acquire`), shared by its clients, and stopped :data:`LINGER` seconds
    after the last one left (:meth:`release`); the proxy's own vhost's stays.

    Args:
        uri: the proxy's own broker URI (credentials for the watchers' connection).
        management_uri: the management API (default: derived from ``uri``).
        on_wrong_broker: called (loop thread) with the reason when that API turns out to
            belong to another broker (see :meth:`VhostCatalog._verify_broker`).
    """

    def __init__(self, uri: str, management_uri: str | None,
                 loop: asyncio.AbstractEventLoop,
                 on_wrong_broker: Callable[[str], Any] | None = None) -> None:
        self._uri = uri
        self._management = ManagementClient.from_amqp_uri(uri, management_uri)
        self._loop = loop
        self._on_wrong_broker = on_wrong_broker
        self._vhosts: dict[str, VhostCatalog] = {}
        self._users: dict[str, int] = {}
        self._pinned: set[str] = set()
        self._own: str | None = None  # the proxy's own vhost (see vhost())
        self._lingering: dict[str, asyncio.TimerHandle] = {}
        # the events of every vhost when the proxy's own vhost is not the event plugin's
        self._events: EventSource | None = None

    @property
    def vhosts(self) -> dict[str, VhostCatalog]:
        """The running catalogs by vhost (read only)."""
        return self._vhosts

    def vhost(self, name: str) -> VhostCatalog:
        """The catalog of vhost ``name``, started now if needed and kept until the proxy
        stops (the proxy's own vhost: the other vhosts' catalogs take the events from its
        connection, where RabbitMQ's event exchange is by default)."""
        self._pinned.add(name)
        if self._own is None:
            self._own = name
        return self._start(name)

    def acquire(self, name: str) -> VhostCatalog:
        """The catalog of vhost ``name`` for one more client (see :meth:`release`)."""
        self._users[name] = self._users.get(name, 0) + 1
        timer = self._lingering.pop(name, None)
        if timer is not None:
            timer.cancel()
        return self._start(name)

    def release(self, name: str) -> None:
        """One client of vhost ``name`` left; the catalog stops :data:`LINGER` s after the
        last one, unless pinned."""
        users = self._users.get(name, 0) - 1
        if users > 0:
            self._users[name] = users
            return
        self._users.pop(name, None)
        if name not in self._pinned and name in self._vhosts and name not in self._lingering:
            self._lingering[name] = self._loop.call_later(LINGER, self._retire, name)

    def _retire(self, name: str) -> None:
        self._lingering.pop(name, None)
        if self._users.get(name) or name in self._pinned:
            return
        catalog = self._vhosts.pop(name, None)
        if catalog is not None:
            LOG.info("proxy catalog of vhost %r stopped: no client uses it", name)
            catalog.stop(wait=False)

    def _start(self, name: str) -> VhostCatalog:
        catalog = self._vhosts.get(name)
        if catalog is None:
            own = self._vhosts.get(self._own) if self._own is not None else None
            relay = RelayedFeed(own._feed, own.run_in_thread) \
                if own is not None and isinstance(own._feed, EventFeed) and own.has_events \
                and name != own.vhost else None
            if self._own is not None and self._own != EVENT_VHOST:
                if self._events is None:  # the proxy's own vhost has no event exchange
                    self._events = EventSource.acquire(self._uri)
                    self._events.start()
                relay = self._events.relayed()
            catalog = self._vhosts[name] = VhostCatalog(self._uri, self._management, name,
                                                        self._loop, self._on_wrong_broker,
                                                        relay)
            LOG.info("proxy catalog of vhost %r started", name)
            catalog.start()
        return catalog

    def stop(self) -> None:
        for timer in self._lingering.values():
            timer.cancel()
        self._lingering.clear()
        for catalog in self._vhosts.values():
            catalog.stop(wait=False)
        for catalog in self._vhosts.values():
            catalog.stop()
        if self._events is not None:
            self._events.release()
            self._events = None
