"""Several shovels in one process: one worker thread (and ioloop) per shovel.

Each :class:`~rtroute.shovel.worker.ShovelWorker` runs its source and destination connections
on its own ioloop in its own thread, so a slow or failing shovel never stalls another, and a
message never crosses threads on its way. The shovels share the status registry that the ops
endpoint serves (``/status``, ``/metrics``, ``/healthz``).

A running process takes two changes through that endpoint, as ``rabbitmqctl delete_shovel`` and
``restart_shovel`` do in the broker: ``DELETE /shovels/VHOST/NAME`` stops a shovel gracefully
(no more deliveries taken, the ones in flight confirmed and acknowledged, the rest requeued by
the source broker when the channel closes) and removes it from the status, and
``POST /shovels/VHOST/NAME/restart`` stops it the same way and starts it again; ``PUT
/shovels/VHOST/NAME`` starts a new one from the plugin's definition keys. ``VHOST`` is
percent-encoded (``%2F``); a static shovel (no vhost) is found under the default ``/`` too.
"""
from __future__ import annotations

import json
import logging
import signal
import threading
import time
import urllib.parse
from collections.abc import Sequence
from typing import Any, Callable

from rtroute.config.shovel import RefusedShovel, ShovelConfig
from rtroute.shovel.side import STOP_TIMEOUT
from rtroute.shovel.status import StatusRegistry
from rtroute.shovel.worker import ShovelWorker

__all__ = ["ShovelExists", "ShovelRunner", "serve"]

LOGGER = logging.getLogger("rtroute.shovel")


class ShovelRunner:
    """Starts, watches and stops a set of shovels.

    Args:
        shovels: the shovels to run (names unique per vhost, as the config loaders ensure);
            none is fine (the process then serves an empty status).
        registry: where their status goes (default: a new :class:`StatusRegistry`).
        refused: shovels of the config that are not run; shown as terminated with the reason.
        **worker_options: passed to every :class:`ShovelWorker` (``shovelled_by``, ``rng``).

    Raises:
        ValueError: a shovel has a malformed broker URI (names the shovel).
    """

    def __init__(self, shovels: Sequence[ShovelConfig], registry: StatusRegistry | None = None,
                 *, refused: Sequence[RefusedShovel] = (), **worker_options: Any) -> None:
        self.registry = registry or StatusRegistry()
        self.workers: list[ShovelWorker] = []
        self._worker_options = worker_options
        self._lock = threading.Lock()
        self._started = False
        for config in shovels:
            self.workers.append(self._worker(config))
        for refusal in refused:
            self.registry.register_refused(refusal)

    def _worker(self, config: ShovelConfig) -> ShovelWorker:
        try:
            return ShovelWorker(config, self.registry.register(config), **self._worker_options)
        except ValueError as exc:
            raise ValueError(f"shovel {config.name!r}: {exc}") from None

    def start(self) -> ShovelRunner:
        """Start every shovel in its own thread; returns at once."""
        with self._lock:
            self._started = True
            workers = list(self.workers)
        for worker in workers:
            worker.start()
        LOGGER.info("started %d shovel(s): %s", len(workers),
                    ", ".join(w.config.name for w in workers) or "none")
        return self

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """Stop every shovel gracefully (any thread) and wait up to ``timeout`` + 5 s."""
        with self._lock:
            self._started = False
            workers = list(self.workers)
        for worker in workers:
            worker.stop(timeout)
        deadline = time.monotonic() + timeout + 5
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))

    @property
    def finished(self) -> bool:
        """True once every shovel ended (stopped, completed or terminated for good)."""
        with self._lock:
            workers = list(self.workers)
        return all(worker.finished for worker in workers)

    def status(self) -> dict[str, Any]:
        """The ops endpoint's status: ``{"healthy", "shovels", "metrics"}``."""
        return self.registry.status()

    # -- changes (any thread) ----------------------------------------------------------------

    def _find(self, name: str, vhost: str | None) -> tuple[str | None, ShovelWorker | None]:
        """The key (vhost) and worker of shovel ``name``: the one in ``vhost``, else, for the
        default vhost ``/``, the static shovel of that name. ``KeyError`` if none."""
        for key in ((vhost, None) if vhost == "/" else (vhost,)):
            try:
                self.registry.get(name, key)
            except KeyError:
                continue
            worker = next((w for w in self.workers
                           if w.config.name == name and w.config.vhost == key), None)
            return key, worker
        where = f" in vhost {vhost!r}" if vhost is not None else ""
        raise KeyError(f"no shovel named {name!r}{where}")

    def _stop_worker(self, worker: ShovelWorker, timeout: float) -> bool:
        """Stop ``worker`` gracefully and wait for it; True when its loop ended (or it never
        ran: the runner was not started)."""
        if not self._started:
            return True
        worker.stop(timeout)
        return worker.join(timeout + 5)

    def delete(self, name: str, vhost: str | None = "/",
               timeout: float = STOP_TIMEOUT) -> dict[str, Any]:
        """Stop shovel ``name`` gracefully and forget it (``rabbitmqctl delete_shovel``).

        Deliveries in flight are confirmed and acknowledged before the connections close;
        what the shovel had not yet acknowledged goes back to the source queue. Returns the
        shovel's last status.

        Raises:
            KeyError: no such shovel.
            TimeoutError: it did not stop in time (it is still shown, and stopping).
        """
        with self._lock:
            key, worker = self._find(name, vhost)
            if worker is not None and not self._stop_worker(worker, timeout):
                raise TimeoutError(f"shovel {name!r} did not stop within {timeout + 5:g} s")
            if worker is not None:
                self.workers.remove(worker)
            last = self.registry.remove(name, key).snapshot()
        LOGGER.info("shovel %r deleted", name)
        return last

    def restart(self, name: str, vhost: str | None = "/",
                timeout: float = STOP_TIMEOUT) -> dict[str, Any]:
        """Stop shovel ``name`` gracefully and start it again (``rabbitmqctl
        restart_shovel``); a shovel that had ended (terminated for good, or
        ``src-delete-after`` reached) runs again. Returns its new status.

        Raises:
            KeyError: no such shovel.
            LookupError: it is a refused shovel (not run: the reason says why).
            TimeoutError: it did not stop in time.
        """
        with self._lock:
            key, worker = self._find(name, vhost)
            if worker is None:
                reason = self.registry.get(name, key).reason
                raise LookupError(f"shovel {name!r} is not run: {reason}")
            if not self._stop_worker(worker, timeout):
                raise TimeoutError(f"shovel {name!r} did not stop within {timeout + 5:g} s")
            fresh = self._worker(worker.config)
            # server-named queues that failed starts left behind are still to clean up
            fresh.leftover_queues = worker.leftover_queues
            self.workers[self.workers.index(worker)] = fresh
            if self._started:
                fresh.start()
        LOGGER.info("shovel %r restarted", name)
        return fresh.status.snapshot()

    def add(self, config: ShovelConfig, replace: bool = False,
            timeout: float = STOP_TIMEOUT) -> dict[str, Any]:
        """Start shovel ``config`` in the running process (``rabbitmqctl set_parameter shovel``);
        with ``replace``, one of that name (and vhost) is first stopped gracefully, as by
        :meth:`delete`. Returns its status.

        Raises:
            ShovelExists: one of that name runs (or is shown) and ``replace`` is false.
            ValueError: a malformed broker URI.
            TimeoutError: the shovel replaced did not stop in time.
        """
        _check_uris(config)  # before anything stops: a bad definition changes nothing
        with self._lock:
            try:
                key, worker = self._find(config.name, config.vhost)
            except KeyError:
                key, worker, found = None, None, False
            else:
                found = True
            if found and not replace:
                where = f" in vhost {config.vhost!r}" if config.vhost is not None else ""
                raise ShovelExists(f"shovel {config.name!r}{where} exists; delete it first, or "
                                   "replace it (rtroute shovel add --replace)")
            if worker is not None:
                if not self._stop_worker(worker, timeout):
                    raise TimeoutError(f"shovel {config.name!r} did not stop within "
                                       f"{timeout + 5:g} s")
                self.workers.remove(worker)
            if found:
                self.registry.remove(config.name, key)
            fresh = self._worker(config)
            self.workers.append(fresh)
            if self._started:
                fresh.start()
        LOGGER.info("shovel %r %s", config.name, "replaced" if found else "added")
        return fresh.status.snapshot()

    def http_routes(self) -> dict[tuple[str, str], Callable[[str, bytes], tuple[int, Any]]]:
        """``DELETE /shovels/VHOST/NAME``, ``POST /shovels/VHOST/NAME/restart`` and
        ``PUT /shovels/VHOST/NAME`` (a new shovel) for the
        :class:`~rtroute.ops.http.OpsServer` (which checks the token, Host and Origin)."""
        return {("DELETE", "/shovels/"): self._http_delete,
                ("POST", "/shovels/"): self._http_restart,
                ("PUT", "/shovels/"): self._http_add}

    def _http_add(self, path: str, body: bytes) -> tuple[int, Any]:
        """``PUT /shovels/VHOST/NAME`` with the shovel's definition as ``rabbitmqctl
        set_parameter shovel NAME '{...}'`` takes it (the plugin's keys), or as the management
        API's ``PUT /api/parameters/shovel/VHOST/NAME`` does (``{"value": {...}}``); with
        ``"replace": true`` beside ``value``, a shovel of that name is replaced (else 409)."""
        target = _shovel_path(path, b"", action=None)
        if isinstance(target, str):
            return 404, {"error": target}
        name, vhost = target
        try:
            value, replace = _definition(body, name, vhost)
            config = _parse_definition(name, vhost, value)
        except ValueError as exc:
            return 400, {"error": str(exc)}
        try:
            status = self.add(config, replace=replace)
        except ShovelExists as exc:
            return 409, {"error": str(exc)}
        except ValueError as exc:
            return 400, {"error": str(exc)}
        except TimeoutError as exc:
            return 503, {"error": str(exc)}
        return 201, {"added": status}

    def _http_delete(self, path: str, body: bytes) -> tuple[int, Any]:
        target = _shovel_path(path, body, action=None)
        if isinstance(target, str):
            return 404, {"error": target}
        return _answer(lambda: {"deleted": self.delete(*target)})

    def _http_restart(self, path: str, body: bytes) -> tuple[int, Any]:
        target = _shovel_path(path, body, action="restart")
        if isinstance(target, str):
            return 404, {"error": target}
        return _answer(lambda: {"restarted": self.restart(*target)})


class ShovelExists(Exception):
    """A shovel of that name (and vhost) is already there."""


class DefinitionError(ValueError):
    """A ``PUT /shovels/VHOST/NAME`` body that is no shovel definition."""


_PARAMETER_KEYS = ("value", "replace", "component", "name", "vhost")


def _definition(body: bytes, name: str, vhost: str) -> tuple[dict[str, Any], bool]:
    """The shovel's value and ``replace`` of a ``PUT /shovels/VHOST/NAME`` body.

    Raises:
        DefinitionError: not a JSON object, or its name, vhost or component differ from the path.
    """
    try:
        data = json.loads(body or b"null")
    except ValueError:
        raise DefinitionError("the request body is not JSON") from None
    if not isinstance(data, dict):
        raise DefinitionError("the request body must be a JSON object: the shovel's definition "
                         "(the keys of rabbitmqctl set_parameter shovel), or {\"value\": {...}}")
    if "value" not in data:
        return data, False
    unknown = sorted(set(data) - set(_PARAMETER_KEYS))
    if unknown:
        raise DefinitionError(f"unknown key {unknown[0]!r} beside 'value' (the shovel's keys go "
                         "inside it)")
    for key, expected in (("component", "shovel"), ("name", name), ("vhost", vhost)):
        if key in data and data[key] != expected:
            raise DefinitionError(f"{key} {data[key]!r} differs from {expected!r} of the path")
    if not isinstance(data.get("replace", False), bool):
        raise DefinitionError("replace must be true or false")
    if not isinstance(data["value"], dict):
        raise DefinitionError("value must be an object: the shovel's definition")
    return data["value"], data.get("replace", False)


def _check_uris(config: ShovelConfig) -> None:
    """Raises ``ValueError`` (naming the shovel) if a broker URI of ``config`` is malformed."""
    from rtroute.amqp import parse_uri

    for uri in (*config.sources.brokers, *config.destinations.brokers):
        try:
            parse_uri(uri)
        except ValueError as exc:
            raise ValueError(f"shovel {config.name!r}: {exc}") from None


def _parse_definition(name: str, vhost: str, value: dict[str, Any]) -> ShovelConfig:
    """``value`` (a dynamic shovel's definition) as the definitions importer reads it.

    Raises:
        ValueError: the importer's message (ConfigError), or why rtroute does not run it.
    """
    from rtroute.shovel.definitions import from_definitions

    refused: list[RefusedShovel] = []
    shovels = from_definitions([{"component": "shovel", "name": name, "vhost": vhost,
                                 "value": value}], "the definition", refused=refused)
    if refused:
        raise ValueError(f"shovel {name!r} is not run: {refused[0].reason}")
    return shovels[0]


def _shovel_path(path: str, body: bytes, action: str | None) -> tuple[str, str] | str:
    """``(name, vhost)`` of ``/shovels/VHOST/NAME[/ACTION]``, or why the path is not one."""
    parts = path[len("/shovels/"):].split("/")
    expected = 2 if action is None else 3
    usage = "/shovels/VHOST/NAME" + (f"/{action}" if action else "") + " (VHOST as %2F)"
    if len(parts) != expected or (action is not None and parts[2] != action) \
            or not parts[0] or not parts[1]:
        return f"not a shovel path; use {usage}"
    if body.strip():
        try:
            json.loads(body)
        except ValueError:
            return "the request body is not JSON (none is needed)"
    return urllib.parse.unquote(parts[1]), urllib.parse.unquote(parts[0])


def _answer(change: Callable[[], dict[str, Any]]) -> tuple[int, Any]:
    try:
        return 200, change()
    except KeyError as exc:
        return 404, {"error": exc.args[0]}
    except LookupError as exc:
        return 409, {"error": str(exc)}
    except TimeoutError as exc:
        return 503, {"error": str(exc)}


def serve(runner: ShovelRunner, http_listen: str | None, http_token: str | None = None,
          on_started: Callable[[Any], None] | None = None,
          keep_serving: bool = True, *, allow_unauthenticated_changes: bool = False,
          protect_reads: bool = False, command: str = "rtroute shovel run") -> None:
    """Run ``runner`` (and its HTTP endpoint) until SIGTERM/SIGINT, then stop gracefully.

    With ``keep_serving`` the process stays up after every shovel ended by itself (terminated
    for good or finished), so that ``/status`` can still be read; otherwise it returns.
    ``allow_unauthenticated_changes`` and ``protect_reads`` are those of
    :class:`rtroute.ops.http.OpsServer`; ``command`` is the one that runs this process, named
    by the endpoint's refusals (how to give it a token).

    Raises:
        rtroute.ops.http.ListenError: the endpoint cannot listen (e.g. address in use).
    """
    from rtroute.ops.http import OpsServer

    http = OpsServer(http_listen, runner.status, token=http_token, routes=runner.http_routes(),
                     allow_unauthenticated_changes=allow_unauthenticated_changes,
                     protect_reads=protect_reads, command=command).start() \
        if http_listen else None
    if http is not None:
        LOGGER.info("http endpoint on %s (/livez /readyz /status /metrics)", http_listen)
    stop_requested = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        LOGGER.info("signal %d: stopping the shovels (draining confirms)", signum)
        stop_requested.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        runner.start()
        if on_started is not None:
            on_started(http)
        while not stop_requested.wait(0.2):
            if not keep_serving and runner.finished:
                break
        runner.stop()
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        if http is not None:
            http.stop()
    shovels = runner.status().get("shovels", [])
    forwarded = sum(s["forwarded"] for s in shovels if isinstance(s.get("forwarded"), int))
    LOGGER.info("shovels stopped: %d shovels, %d messages forwarded", len(shovels), forwarded)
