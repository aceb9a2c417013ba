"""The ops endpoint of ``rtroute proxy --http HOST:PORT``: ``/livez``, ``/readyz`` (alias
``/healthz``), ``/status`` (JSON) and ``/metrics`` (Prometheus).

It is the sidecar's :class:`~rtroute.ops.http.OpsServer` (its own threads, a deadline and size
limits on every request, a bounded number of sockets, a token beyond loopback), fed with a
snapshot that is taken in the proxy's asyncio loop: the sessions and catalogs live there and
only that thread reads them. A request hops into the loop and waits at most
:data:`LOOP_TIMEOUT` seconds for its answer.

``/readyz`` is 200 when the AMQP listeners are open and the catalog of the proxy's own vhost
(the ``--uri``'s) knows the x-rtopic exchanges and the bindings of each, and has its broker
connection (without it, changes made in the broker are not followed); else 503 with
``{"healthy": false, "reason": ...}``, e.g. while bindings load ``"loading bindings of
'logs.bindings': 120,000 of ~300,000 read (9 s)"``. ``/livez`` is 200 while the process serves HTTP (restart a hung process, never one that
waits for its broker).

Metrics (the sidecar's naming, ``rtroute_...``):

- ``rtroute_proxy_client_connections``: client connections open (gauge).
- ``rtroute_proxy_client_connections_accepted_total``: client connections accepted.
- ``rtroute_proxy_publishes_rewritten_total``: publishes to x-rtopic exchanges rewritten.
- ``rtroute_proxy_refusals_total{kind}``: what the proxy refused clients, by kind.
- ``rtroute_proxy_catalog_ready{vhost}``: 1 when the catalog of that vhost is ready, else 0.
- ``rtroute_proxy_catalog_exchanges{vhost}``: x-rtopic exchanges that catalog knows.
- ``rtroute_proxy_sync_members{vhost}``: the other proxies whose copy a change waits for.
- ``rtroute_proxy_sync_timeouts_total{vhost}``: changes answered after :data:`rtroute.proxy.sync.SYNC_TIMEOUT`
  without every other proxy's reply (see rtroute.proxy.sync).
- ``rtroute_proxy_ready``: 1 when ``/readyz`` answers 200.

plus the process metrics and ``rtroute_build_info``, as every rtroute ``/metrics``.

An address that cannot be listened on (AMQP or HTTP) is one line, as the sidecar's:
:func:`check_listen` tries the AMQP addresses before the proxy starts anything, and
:func:`listen_error` words what the listeners themselves report.
"""
from __future__ import annotations

import concurrent.futures
import errno
import re
import socket
import time
from typing import TYPE_CHECKING, Any

from rtroute.ops.http import ListenError, OpsServer

if TYPE_CHECKING:
    from rtroute.proxy.server import ProxyServer

__all__ = ["LOOP_TIMEOUT", "ProxyOps", "check_listen", "listen_error", "proxy_metrics",
           "proxy_status", "read_token_file"]

LOOP_TIMEOUT = 2.0  # seconds an HTTP request waits for the asyncio loop's snapshot
MAX_REASON = 300  # characters of a /readyz reason (a broker error can be long)
MAX_FOLLOWED = 1000  # x-rtopic exchanges /status lists per vhost (the count says how many)

# asyncio's bind error: "error while attempting to bind on address ('HOST', PORT): reason"
_BIND_ERROR = re.compile(r"bind on address \('([^']*)', (\d+)[^)]*\): (.*)")


def listen_error(exc: OSError, listen: list[str]) -> ListenError:
    """One line for an AMQP listener that cannot listen (``listen 127.0.0.1:5680: address
    already in use``), from the error of :meth:`asyncio.loop.create_server`; ``listen`` are
    the configured addresses, named when the error does not say which one failed."""
    m = _BIND_ERROR.search(exc.strerror or "")
    if m is not None:
        host, port, reason = m.groups()
        where = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    else:
        where = ", ".join(listen)
        reason = exc.strerror or str(exc)
    if exc.errno == errno.EADDRINUSE:
        reason = "address already in use"
    error = ListenError(f"listen {where}: {reason[:1].lower()}{reason[1:]}")
    error.errno = exc.errno
    return error


def check_listen(addresses: list[str], reuse_port: bool = False) -> None:
    """Binds (and closes) a socket on each AMQP listen address as the listeners will bind
    theirs, so that one in use fails in one line before the proxy starts anything (the
    listeners open after the catalog's broker connection started).

    Raises:
        ValueError: an address that is not ``host:port``.
        ListenError: an address that cannot be bound (in use, not local, not permitted).
    """
    from rtroute.ops.netaddr import split_hostport

    for listen in addresses:
        host, port = split_hostport(listen)
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                       flags=socket.AI_PASSIVE)
        except socket.gaierror as exc:
            raise ListenError(f"listen {listen}: {exc.strerror}") from None
        for family, kind, proto, _, address in found:
            with socket.socket(family, kind, proto) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if reuse_port:
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
                if family == socket.AF_INET6:  # as asyncio binds it
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                try:
                    sock.bind(address)
                except OSError as exc:
                    raise listen_error(OSError(
                        exc.errno, f"error while attempting to bind on address "
                                   f"{address[:2]!r}: {exc.strerror}"), [listen]) from None


def read_token_file(path: str) -> str:
    """The bearer token in file ``path`` (its content, stripped).

    Raises:
        ValueError: unreadable, not UTF-8, or empty (the message names the file).
    """
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read(64 * 1024).strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"--token-file {path}: "
                         f"{getattr(exc, 'strerror', None) or exc}") from None
    if not token:
        raise ValueError(f"--token-file {path}: the file is empty")
    return token


def _readiness(server: ProxyServer, listening: bool) -> str | None:
    """Why the proxy is not ready (None: it is). Loop thread."""
    if not listening:
        return "the AMQP listeners are not open"
    vhost = server.upstream.vhost
    catalog = server.catalog.vhosts.get(vhost)
    if catalog is None:
        return f"no catalog of vhost {vhost!r}"
    if catalog.ready.is_set():
        if catalog.disconnected is not None:
            # what it knows may be going stale: changes made meanwhile are not followed
            text = (f"the catalog of vhost {vhost!r} lost its broker connection: "
                    f"{catalog.disconnected}")
        elif catalog.gap is not None:  # publishes wait until it is listed again
            text = f"the catalog of vhost {vhost!r}: {catalog.gap}"
        elif catalog.sync.queue is None:  # other proxies' bind-ok would not wait for it
            text = (f"the catalog of vhost {vhost!r} does not follow the other proxies' "
                    "changes (its rtroute.rtopic.sync queue is gone)")
        else:
            loading = [x for x in catalog.exchanges.values() if not x.ready.is_set()]
            if not loading:
                return None
            # publishes to these wait: not ready until every x-rtopic exchange is loaded
            first = min(loading, key=lambda x: x.name)
            progress, _ = catalog.progress(first)
            more = f" (and {len(loading) - 1} more exchanges)" if len(loading) > 1 else ""
            text = f"loading {progress}{more}"
    else:
        reason = catalog.failure or catalog.last_error
        text = f"the catalog of vhost {vhost!r} is not ready" + (f": {reason}" if reason else "")
    return text if len(text) <= MAX_REASON else text[:MAX_REASON - 3] + "..."


def proxy_metrics(server: ProxyServer, ready: bool) -> dict[str, dict[str, Any]]:
    """The proxy's metrics in the form :func:`rtroute.ops.metrics.render` takes. Loop thread."""
    stats = server.stats
    rewritten = stats.rewritten_closed + sum(s.rewritten for s in server.sessions)
    catalogs = sorted(server.catalog.vhosts.items())
    return {
        "rtroute_proxy_client_connections": {
            "help": "Client connections open", "type": "gauge",
            "samples": [({}, len(server.sessions))]},
        "rtroute_proxy_client_connections_accepted_total": {
            "help": "Client connections accepted", "type": "counter",
            "samples": [({}, stats.connections)]},
        "rtroute_proxy_publishes_rewritten_total": {
            "help": "Publishes to x-rtopic exchanges rewritten for the broker",
            "type": "counter", "samples": [({}, rewritten)]},
        "rtroute_proxy_refusals_total": {
            "help": "What the proxy refused clients, by kind", "type": "counter",
            "samples": [({"kind": kind}, count) for kind, count in
                        sorted(stats.refusals.items())]},
        "rtroute_proxy_catalog_ready": {
            "help": "1 when the catalog of the vhost knows its x-rtopic exchanges",
            "type": "gauge",
            "samples": [({"vhost": vhost}, int(c.ready.is_set())) for vhost, c in catalogs]},
        "rtroute_proxy_catalog_exchanges": {
            "help": "x-rtopic exchanges known in the vhost", "type": "gauge",
            "samples": [({"vhost": vhost}, len(c.exchanges)) for vhost, c in catalogs]},
        "rtroute_proxy_sync_members": {
            "help": "Other proxies of the vhost whose copy of the bindings a change waits for",
            "type": "gauge",
            "samples": [({"vhost": vhost}, c.sync.members) for vhost, c in catalogs]},
        "rtroute_proxy_sync_timeouts_total": {
            "help": "Changes answered without every other proxy's reply within the timeout",
            "type": "counter",
            "samples": [({"vhost": vhost}, c.sync.timeouts) for vhost, c in catalogs]},
        "rtroute_proxy_ready": {
            "help": "1 when /readyz answers 200", "type": "gauge",
            "samples": [({}, int(ready))]},
    }


def proxy_status(server: ProxyServer, listening: bool) -> dict[str, Any]:
    """What ``/status`` shows (and ``metrics``, which ``/metrics`` renders). Loop thread."""
    reason = _readiness(server, listening)
    settings = server.settings
    stats = server.stats
    return {
        "healthy": reason is None,
        "reason": reason,
        "vhost": server.upstream.vhost,
        "listening": listening,
        "listeners": [{"listen": listen, "tls": tls} for listen, tls in
                      [(a, False) for a in settings.listen] +
                      [(a, True) for a in settings.listen_tls]],
        "client_connections": len(server.sessions),
        "client_connections_accepted": stats.connections,
        "publishes_rewritten": stats.rewritten_closed + sum(s.rewritten for s in server.sessions),
        "refusals": {kind: n for kind, n in sorted(stats.refusals.items()) if n},
        "catalogs": [{"vhost": vhost, "ready": c.ready.is_set(),
                      "exchanges": len(c.exchanges), "failure": c.failure,
                      "last_error": c.last_error, "followed": _followed(c)}
                     for vhost, c in sorted(server.catalog.vhosts.items())],
        "metrics": proxy_metrics(server, reason is None),
    }


def _followed(catalog: Any) -> list[dict[str, Any]]:
    """The x-rtopic exchanges a catalog follows, by name (at most :data:`MAX_FOLLOWED`): each
    one's bindings, whether they are known, and when they last changed. Loop thread."""
    shown = sorted(catalog.exchanges.values(), key=lambda x: x.name)[:MAX_FOLLOWED]
    return [{"name": x.name, "bindings": x.router.binding_count(), "ready": x.ready.is_set(),
             "last_change": None if x.changed is None
             else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(x.changed))}
            for x in shown]


class LoopUnavailable(RuntimeError):
    """The asyncio loop did not take a snapshot in time (stopped, or busy)."""


class ProxyOps:
    """The ops endpoint of one proxy process.

    Args:
        listen: ``HOST:PORT`` (loopback unless ``token``).
        server: the proxy; read only in ``server.loop``'s thread.
        token: bearer token; mandatory beyond loopback (reads do not need it).

    Raises:
        ListenError: the address cannot be listened on (the message is one line).
        ValueError: an address beyond loopback without a token.
    """

    def __init__(self, listen: str, server: ProxyServer, token: str | None = None) -> None:
        self._server = server
        self._loop = server.loop
        self.listen = listen
        #: set in the loop thread once the AMQP listeners are open, cleared when they close
        self.listening = False
        routes = {("GET", "/readyz"): self._readyz, ("GET", "/healthz"): self._readyz}
        self._http = OpsServer(listen, self._status, token=token, routes=routes,
                               command="rtroute proxy")

    @property
    def port(self) -> int:
        return self._http.port

    def start(self) -> ProxyOps:
        self._http.start()
        return self

    def stop(self) -> None:
        self._http.stop()

    # -- HTTP threads -----------------------------------------------------------------------------

    def _status(self) -> dict[str, Any]:
        """A snapshot taken in the loop thread.

        Raises:
            LoopUnavailable: the loop is closed or did not answer in :data:`LOOP_TIMEOUT` s.
        """
        future: concurrent.futures.Future = concurrent.futures.Future()

        def take() -> None:
            if not future.set_running_or_notify_cancel():
                return  # the request gave up waiting
            try:
                future.set_result(proxy_status(self._server, self.listening))
            except Exception as exc:  # noqa: BLE001 - handed to the HTTP thread: a 500
                future.set_exception(exc)

        try:
            self._loop.call_soon_threadsafe(take)
        except RuntimeError:
            raise LoopUnavailable("the proxy is stopping") from None
        try:
            return future.result(LOOP_TIMEOUT)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise LoopUnavailable(
                f"the proxy's event loop did not answer in {LOOP_TIMEOUT:g} s") from None

    def _readyz(self, _path: str, _body: bytes) -> tuple[int, dict[str, Any]]:
        try:
            status = self._status()
        except LoopUnavailable as exc:
            return 503, {"healthy": False, "reason": str(exc)}
        if status["healthy"]:
            return 200, {"healthy": True}
        return 503, {"healthy": False, "reason": status["reason"]}

