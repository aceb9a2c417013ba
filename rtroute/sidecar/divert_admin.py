"""Divert administration while the sidecar runs: the HTTP endpoints that create, change and
delete diverts (``/diverts``), their checks (forwarding addresses looked up first, transformers
allowed by the config file only), and the syncing of the run-time diverts with those the broker
stores (``persist_diverts``, :mod:`rtroute.sidecar.divert_store`).
"""
from __future__ import annotations

import concurrent.futures
import functools
import logging
import threading
import urllib.parse
from collections.abc import Iterable
from typing import Any, Callable

from rtroute.amqp import ManagementError, ReconnectingConnection
from rtroute.divert import Divert, DivertError, DivertExists, DivertTable
from rtroute.sidecar.address_probe import ForwardingAddresses
from rtroute.sidecar.divert_store import DivertStore, divert_json
from rtroute.sidecar.exchange import ManagedExchange

LOG = logging.getLogger("rtroute.sidecar")

DIVERT_SYNC_INTERVAL = 5.0  # seconds between readings of the stored diverts (persist_diverts)

FILE_WINS = ("stored divert %s ignored: the config file defines a divert of that name, and the "
             "file wins (as Artemis deploys a stored divert only when its configuration does not "
             "name it); delete it from %s, or rename one of them")


class Unavailable(RuntimeError):
    """The sidecar cannot do that now (not connected); the caller may try again."""


class DivertAdmin:
    """Creates, changes and deletes the diverts of ``diverts`` while the sidecar runs (each
    change made in the ioloop of ``connection``, between two batches), and keeps the run-time
    ones in ``store`` (None: not kept).

    Args:
        diverts: the divert table the pipeline evaluates.
        exchanges: the managed exchanges by name (a divert's address and targets).
        addresses: what forwarding addresses are on the broker.
        connection: the sidecar's connection (its ioloop, and the connection to look on).
        store: where run-time diverts are kept, or None.
        allowed_transformers: the ``module:function`` names run-time diverts may use.
        sync_interval: seconds between two readings of ``store``.
        connected: whether the sidecar has a connection to publish on.
        stopping: whether the sidecar is stopping.
        stopped: set once the sidecar has stopped (ends the syncing).
    """

    def __init__(self, diverts: DivertTable, exchanges: dict[str, ManagedExchange],
                 addresses: ForwardingAddresses, connection: ReconnectingConnection,
                 store: DivertStore | None, allowed_transformers: Iterable[str],
                 sync_interval: float, connected: Callable[[], bool],
                 stopping: Callable[[], bool], stopped: threading.Event) -> None:
        self._diverts = diverts
        self._exchanges = exchanges
        self._addresses = addresses
        self._connection = connection
        self.store = store
        self._allowed_transformers = frozenset(allowed_transformers)
        self._sync_interval = sync_interval
        self._connected = connected
        self._stopping = stopping
        self._stopped = stopped
        # serialises the stored list's read-modify-writes and the syncing of the table with it
        self._store_lock = threading.Lock()
        self._stored_loaded = False

    # -- any thread but the ioloop's ----------------------------------------------------------
    def create_divert(self, config: Any, timeout: float = 10.0) -> dict:
        """Adds a divert while running (it applies to messages routed from then on).

        Its forwarding addresses are looked up on the broker first, so the divert fires only
        once the sidecar knows where its copies go. Any thread but the ioloop's.

        Returns:
            The divert's status.

        Raises:
            DivertError: it cannot run (name taken, no managed exchange matches, a cycle...).
            RuntimeError: not connected to the broker, or no answer within ``timeout``.
        """
        return self._ask_ioloop(lambda result: self._create_divert(config, result), timeout)

    def delete_divert(self, name: str, timeout: float = 10.0) -> dict:
        """Removes a divert while running; returns its last status. Any thread but the ioloop's.

        Raises:
            KeyError: no such divert.
            RuntimeError: no answer within ``timeout``.
        """

        def delete(result: concurrent.futures.Future) -> None:
            try:
                divert = self._diverts.remove(name)
            except KeyError as exc:
                result.set_exception(exc)
                return
            LOG.info("divert %s deleted", name)
            result.set_result(self.divert_status(divert))

        return self._ask_ioloop(delete, timeout)

    def update_divert(self, config: Any, timeout: float = 10.0) -> dict:
        """Gives a running divert new settings (its filter, forwarding addresses, routing type,
        transformer, routing key), as Artemis's ``updateDivert`` does: in place, between two
        batches, so each message sees either the old settings or the new ones, and copies
        already decided go out as they were decided. New forwarding addresses are looked up
        on the broker first. Any thread but the ioloop's.

        Returns:
            The divert's status (its counters go on).

        Raises:
            KeyError: no such divert.
            DivertError: a setting that cannot change, a bad one, a cycle, a transformer not
                on the allow-list.
            RuntimeError: not connected, or no answer within ``timeout``.
        """
        return self._ask_ioloop(lambda result: self._update_divert(config, result), timeout)

    def _ask_ioloop(self, change: Callable[[concurrent.futures.Future], Any],
                    timeout: float) -> dict:
        """Runs ``change(result)`` in the ioloop; returns what it sets in ``result`` (or
        raises what it sets there).

        Raises:
            Unavailable: no answer within ``timeout``.
        """
        result: concurrent.futures.Future = concurrent.futures.Future()
        self._connection.add_callback_threadsafe(lambda: change(result))
        try:
            return result.result(timeout)
        except concurrent.futures.TimeoutError:
            raise Unavailable(f"no answer from the sidecar within {timeout} s") from None

    # -- the HTTP endpoint ----------------------------------------------------------------------
    def http_routes(self) -> dict:
        """``POST /diverts``, ``PUT``/``PATCH``/``DELETE /diverts/NAME`` and ``GET /diverts``
        for the OpsServer."""
        return {("POST", "/diverts"): self._http_create_divert,
                ("PUT", "/diverts/"): lambda path, body: self._http_update_divert(
                    path, body, replace=True),
                ("PATCH", "/diverts/"): self._http_update_divert,
                ("DELETE", "/diverts/"): self._http_delete_divert,
                ("GET", "/diverts"): lambda _path, _body: (200, self.diverts_status())}

    # -- ioloop thread ------------------------------------------------------------------------
    def forwarding_names(self, diverts: Iterable[Divert] | None = None) -> list[str]:
        """Forwarding addresses whose kind on the broker decides where copies go."""
        names = []
        for divert in (self._diverts if diverts is None else diverts):
            # ANYCAST copies go to the queue by name whatever the answer; it is looked up
            # only so that a missing one is said (at creation, in the log, in /status)
            names += [a for a in divert.forwarding_addresses if a not in self._exchanges]
        return list(dict.fromkeys(names))

    def _create_divert(self, config: Any, result: concurrent.futures.Future) -> None:
        try:
            self._check_transformer(config)
            divert = Divert(config, origin="http")
            self._diverts.check(config)
        except DivertError as exc:
            result.set_exception(exc)
            return

        def add() -> None:
            try:
                self._diverts.add(divert)
            except DivertError as exc:  # another one was created meanwhile
                result.set_exception(exc)
                return
            LOG.info("divert %s created: %s -> %s (%s%s)", divert.name, config.address,
                     config.forwarding_address, config.routing_type,
                     ", exclusive" if config.exclusive else "")
            result.set_result(self.divert_status(divert))

        self._look_up_targets_then(divert, add, result)

    def _look_up_targets_then(self, divert: Divert, then: Callable[[], Any],
                              result: concurrent.futures.Future) -> None:
        """Looks up the forwarding addresses of ``divert`` the sidecar knows nothing of, then
        calls ``then()``; without a connection to ask on, fails ``result`` instead."""
        names = [n for n in self.forwarding_names([divert])
                 if self._addresses.kinds.get(n) is None]
        connection = self._connection.connection
        if names and (connection is None or not connection.is_open or not self._connected()):
            result.set_exception(Unavailable("not connected to the broker, so the forwarding "
                                             "addresses cannot be looked up; try again"))
            return
        self._addresses.look_up(connection, names, then)

    def _update_divert(self, config: Any, result: concurrent.futures.Future) -> None:
        try:
            current = self._diverts.get(config.name)
            if current is None:
                raise KeyError(config.name)
            if config.transformer != current.config.transformer:
                self._check_transformer(config)
            candidate = self._diverts.check_update(config)
        except (KeyError, DivertError) as exc:
            result.set_exception(exc)
            return

        def apply() -> None:
            try:
                divert = self._diverts.update(config)
            except (KeyError, DivertError) as exc:  # changed meanwhile
                result.set_exception(exc)
                return
            LOG.info("divert %s updated: %s -> %s (%s%s)", divert.name, config.address,
                     config.forwarding_address, config.routing_type,
                     f", filter {config.filter!r}" if config.filter else "")
            result.set_result(self.divert_status(divert))

        self._look_up_targets_then(candidate, apply, result)

    # -- stored diverts (persist_diverts) -------------------------------------------------------
    def read_stored(self) -> tuple[list, list[str]] | None:
        """The stored diverts, read once the management API is known to be the broker's (any
        thread but the ioloop's); None if they could not be read (the sync thread retries),
        or need not be (no store, or already added)."""
        if self.store is None or self._stored_loaded:
            return None
        try:
            return self.store.load()
        except ManagementError as exc:
            LOG.warning("stored diverts not loaded (%s); trying again in %.0f s", exc,
                        self._sync_interval)
            return None

    def add_stored(self, stored: tuple[list, list[str]] | None) -> None:
        """Adds the stored diverts before the first consume (ioloop thread), once."""
        if stored is None or self._stored_loaded:
            return
        self._stored_loaded = True
        configs, problems = stored
        for problem in problems:
            LOG.warning("stored divert ignored: %s", problem)
        for config in configs:
            current = self._diverts.get(config.name)
            if current is not None and current.origin == "config":
                LOG.warning(FILE_WINS, config.name, self.store.parameter
                            if self.store is not None else "the broker")
                continue
            try:
                self._check_transformer(config)
                self._diverts.add(config, origin="http")
            except DivertError as exc:
                LOG.warning("stored divert %s ignored: %s", config.name, exc)

    def _check_transformer(self, config: Any) -> None:
        """A divert made at run time (HTTP, broker-stored) may name only a transformer that the
        config file allows: its name is code to import and run, and whoever can reach the
        endpoint or set broker parameters must not choose it. Checked before any import.

        Raises:
            DivertError: the transformer is not on the allow-list.
        """
        name = getattr(config, "transformer", None)
        if name and name not in self._allowed_transformers:
            LOG.warning("divert %s refused: transformer %r is not allowed for diverts made at "
                        "run time", getattr(config, "name", "?"), name)
            raise DivertError(
                f"divert {getattr(config, 'name', '?')!r}: transformer {name!r} is not allowed "
                "for diverts made at run time; list it in [http] allowed_transformers (or "
                "declare the divert in the config file)")

    def sync_stored_diverts(self) -> None:
        """Every few seconds, makes the run-time diverts those the broker stores (another
        sidecar of the vhost may have created or deleted some)."""
        assert self.store is not None
        ignored: dict[str, str] = {}  # name -> why, logged once
        while not self._stopped.wait(self._sync_interval):
            if self._stopping() or not self._connected():
                continue  # not connected: forwarding addresses cannot be looked up
            with self._store_lock:
                try:
                    configs, _problems = self.store.load()
                except ManagementError as exc:
                    LOG.warning("stored diverts not read: %s", exc)
                    continue
                wanted = {c.name: c for c in configs}
                for divert in self._diverts:
                    if divert.origin == "http" and divert.name not in wanted:
                        self._apply_stored(functools.partial(self.delete_divert, divert.name),
                                           f"removing divert {divert.name}")
                for name, config in wanted.items():
                    current = self._diverts.get(name)
                    if current is not None and (current.origin != "http"
                                                or divert_json(current.config)
                                                == divert_json(config)):
                        continue
                    if current is not None and _updatable(current.config, config):
                        why = self._apply_stored(functools.partial(self.update_divert, config),
                                                 f"updating divert {name}")
                    else:
                        if current is not None:
                            self._apply_stored(functools.partial(self.delete_divert, name),
                                               f"replacing divert {name}")
                        why = self._apply_stored(functools.partial(self.create_divert, config),
                                                 f"adding divert {name}")
                    if why and ignored.get(name) != why:
                        LOG.warning("stored divert %s ignored: %s", name, why)
                    if why:
                        ignored[name] = why
                    else:
                        ignored.pop(name, None)

    def _apply_stored(self, change: Callable[[], Any], what: str) -> str | None:
        """Runs one change of the table; returns why it failed (None: done)."""
        try:
            change()
        except DivertError as exc:
            return str(exc)
        except (KeyError, Unavailable) as exc:
            LOG.info("%s: %s", what, exc)
            return None
        LOG.info("%s (stored in the broker)", what)
        return None

    def diverts_status(self) -> list[dict]:
        """Every divert's status, in order (``GET /diverts``, ``/status``)."""
        return [self.divert_status(d) for d in self._diverts]

    def divert_status(self, divert: Divert) -> dict:
        """``divert``'s status, with the managed exchanges it watches."""
        status = divert.status()
        status["exchanges"] = self._diverts.exchanges_of(divert)
        return status

    def _http_create_divert(self, _path: str, body: bytes) -> tuple[int, Any]:
        from rtroute.config.rtroute_toml import ConfigError, loads_divert

        try:
            config = loads_divert(body.decode("utf-8"))
        except UnicodeDecodeError:
            return 400, {"error": "the request body is not UTF-8"}
        except ConfigError as exc:
            return 400, {"error": str(exc)}
        with self._store_lock:
            try:
                status = self.create_divert(config)
            except DivertExists as exc:
                return 409, {"error": str(exc)}
            except DivertError as exc:
                return 400, {"error": str(exc)}
            except Unavailable as exc:
                return 503, {"error": str(exc)}
            if self.store is not None:
                try:
                    self.store.put(config)
                except ManagementError as exc:
                    self.delete_divert(config.name)
                    return 503, {"error": f"the divert could not be stored in the broker, so "
                                          f"it was not created: {exc}"}
        return 201, {"divert": status, "warnings": self._missing_targets(status),
                     "stored": self.store is not None}

    def _http_delete_divert(self, path: str, _body: bytes) -> tuple[int, Any]:
        name = urllib.parse.unquote(path[len("/diverts/"):])
        with self._store_lock:
            stored = False
            if self.store is not None:
                try:
                    stored = self.store.remove(name)
                except ManagementError as exc:
                    return 503, {"error": f"the stored divert could not be removed, so it "
                                          f"was not deleted: {exc}"}
            try:
                return 200, {"deleted": self.delete_divert(name)}
            except KeyError:
                if stored:  # stored by another sidecar, not (yet) running here
                    return 200, {"deleted": {"name": name, "origin": "http"}}
                return 404, {"error": f"no divert named {name!r}"}
            except Unavailable as exc:
                return 503, {"error": str(exc)}

    def _http_update_divert(self, path: str, body: bytes, replace: bool = False
                            ) -> tuple[int, Any]:
        """``PATCH /diverts/NAME`` (the keys given change) and ``PUT /diverts/NAME`` (the
        whole divert): see :func:`rtroute.config.divert.loads_divert_update`."""
        from rtroute.config.rtroute_toml import ConfigError, loads_divert_update

        name = urllib.parse.unquote(path[len("/diverts/"):])
        with self._store_lock:
            current = self._diverts.get(name)
            if current is None:
                return 404, {"error": f"no divert named {name!r}"}
            try:
                # the table holds DivertConfigLike (divert/ does not import config/); the
                # sidecar makes every divert from a DivertConfig
                config = loads_divert_update(body.decode("utf-8"),
                                             current.config,  # type: ignore[arg-type]
                                             replace)
            except UnicodeDecodeError:
                return 400, {"error": "the request body is not UTF-8"}
            except ConfigError as exc:
                return 400, {"error": str(exc)}
            before = current.config
            try:
                status = self.update_divert(config)
            except KeyError:
                return 404, {"error": f"no divert named {name!r}"}
            except DivertError as exc:
                return 400, {"error": str(exc)}
            except Unavailable as exc:
                return 503, {"error": str(exc)}
            stored = False
            warnings = self._missing_targets(status)
            if current.origin == "config":
                warnings.append("this divert comes from the config file: the change lasts "
                                "until the process stops (edit the file to keep it)")
            elif self.store is not None:
                try:
                    self.store.put(config)
                    stored = True
                except ManagementError as exc:
                    try:
                        self.update_divert(before)
                    except (DivertError, KeyError, Unavailable) as undo:
                        LOG.error("divert %s: the update could not be stored (%s) nor "
                                  "undone (%s): it runs here until restarted", name, exc,
                                  undo)
                        return 503, {"error": f"the update could not be stored in the "
                                              f"broker ({exc}) and could not be undone "
                                              f"({undo})"}
                    return 503, {"error": f"the update could not be stored in the broker, so "
                                          f"it was undone: {exc}"}
        return 200, {"divert": status, "warnings": warnings, "stored": stored}

    def _missing_targets(self, status: dict) -> list[str]:
        divert = self._diverts.get(status["name"])
        if divert is None:
            return []
        anycast = divert.routing_type == "ANYCAST"
        warnings = [f"forwarding address {a!r} is neither an exchange nor a queue yet: copies "
                    "to it are dead-lettered until it exists"
                    for a in divert.forwarding_addresses
                    if a not in self._exchanges and self._addresses.kinds.get(a) is None]
        for warning in warnings:
            LOG.warning("divert %s: %s%s", divert.name, warning,
                        " (ANYCAST: a queue of that name)" if anycast else "")
        return warnings


def _updatable(old: Any, new: Any) -> bool:
    """Whether ``old`` becomes ``new`` by an update (what Artemis's ``updateDivert`` cannot
    change is the same)."""
    return old.name == new.name and old.address == new.address \
        and old.exclusive == new.exclusive \
        and (old.routing_name or old.name) == (new.routing_name or new.name)
