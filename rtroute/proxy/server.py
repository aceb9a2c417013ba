"""``rtroute proxy``: listens like RabbitMQ, opens one broker connection per client connection.

Each accepted client gets its own connection to the broker (plain or TLS, as ``--uri`` says);
the client's handshake, authentication and vhost pass through, so the broker checks the
client's own credentials and the proxy holds none of them. A :class:`~rtroute.proxy.session.Session`
pumps the bytes both ways. Flow control: when one side's writes back up, the other side is no
longer read (TCP pushes back to the sender), so a slow consumer or a blocked broker slows the
client, as it would without the proxy.

Before its login, a client costs the broker nothing: its broker connection is opened when its
first bytes arrive, at most :data:`MAX_UNAUTHENTICATED_PER_SOURCE` connections of one source
address may be short of the broker's ``open-ok`` at a time (the next ones are closed at once,
counted as ``unauthenticated_per_source`` refusals), and one that has not logged in within
:data:`HANDSHAKE_TIMEOUT` seconds is closed (RabbitMQ's own ``handshake_timeout``).

A broker the proxy cannot reach (refused, no answer within the URI's ``connection_timeout``
or 10 s, a certificate that does not verify) refuses the client as RabbitMQ refuses a
connection during its handshake: ``connection.close`` 541 with the reason, which the proxy logs
too.

Nothing a client was told is kept only here: a confirm, a ``declare-ok`` or a ``bind-ok`` is
the broker's own answer, passed on after the broker gave it. A proxy that dies closes its
clients' connections; their publishes in flight were not confirmed, and they reconnect (to this
proxy again, or another) as they would to a broker.
"""
from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from rtroute.amqp.uri import AmqpUri, mask_uri, parse_uri
from rtroute.ops.netaddr import split_hostport
from rtroute.proxy.catalog import Catalog
from rtroute.proxy.confirm_meter import DEFAULT_BUDGET
from rtroute.proxy.session import ACTIVE_WINDOW, Session
from rtroute.routing.exchange_router import DEFAULT_BCC_ALIAS

__all__ = ["ProxyFatal", "ProxyServer", "ProxySettings", "check_archive_stream"]

LOG = logging.getLogger(__name__)
HIGH_WATER = 4 * 1024 * 1024
# connections of one source address short of the broker's open-ok (a flood of idle sockets
# would otherwise hold as many broker connections)
MAX_UNAUTHENTICATED_PER_SOURCE = 64
HANDSHAKE_TIMEOUT = 10.0  # seconds from accept to open-ok, as RabbitMQ's handshake_timeout
CONNECT_TIMEOUT = 10.0  # seconds for the broker's TCP (and TLS) handshake, unless the URI says


# what the proxy refuses clients, by kind: each a series of rtroute_proxy_refusals_total from
# the start (at 0), so that a rate or an alert on it has data before the first refusal
REFUSAL_KINDS = ("access_refused", "catalog", "channel_max", "frame_error", "frame_too_large",
                 "handshake_timeout", "publish", "unauthenticated_per_source")


@dataclass
class ProxyStats:
    """Counters of one proxy process (for ``/metrics``)."""

    connections: int = 0  # client connections accepted
    rewritten_closed: int = 0  # publishes rewritten by sessions that ended
    refusals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(REFUSAL_KINDS, 0))

    def refused(self, kind: str) -> None:
        self.refusals[kind] = self.refusals.get(kind, 0) + 1


@dataclass
class ProxySettings:
    """What one proxy process serves.

    Attributes:
        uri: the broker, with the proxy's own credentials (used for the catalog's watchers only).
        listen: plain AMQP listeners, ``host:port`` each.
        listen_tls: amqps listeners (need ``certfile`` and ``keyfile``).
        management_uri: the management API (default: derived from ``uri``).
        certfile, keyfile, cacertfile: the proxy's TLS certificate, its key, and the CA clients'
            certificates must be signed by (``verify_peer``: ask for one and check it).
        reuse_port: ``SO_REUSEPORT``, so several proxy processes share a port.
        bcc_alias: the sidecar's BCC alias header, honoured and stripped on publishes.
        client_in_flight: the routing keys (each publish's key and ``BCC`` entries) one client's
            unconfirmed publishes to x-rtopic exchanges may hold at the broker before the proxy
            stops reading that client (see :mod:`rtroute.proxy.confirm_meter`).
        http: the ops endpoint's ``host:port`` (``/livez /readyz /status /metrics``); None:
            no endpoint.
        http_token: its bearer token, mandatory when ``http`` is beyond loopback.
        archive_stream: the stream queue that keeps every message published to each x-rtopic
            exchange (``{exchange}`` stands for its name, e.g. ``{exchange}.archive``), bound
            by the proxy to ``NAME`` and to ``NAME.bindings`` with
            :data:`~rtroute.routing.rtopic_layout.ARCHIVE_KEY`, a key every rewritten publish
            carries in its ``BCC``; None: no archive.
    """

    uri: str
    listen: list[str] = field(default_factory=list)
    listen_tls: list[str] = field(default_factory=list)
    management_uri: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    cacertfile: str | None = None
    verify_peer: bool = False
    reuse_port: bool = False
    bcc_alias: str = DEFAULT_BCC_ALIAS
    client_in_flight: int = DEFAULT_BUDGET
    http: str | None = None
    http_token: str | None = None
    archive_stream: str | None = None

    def client_ssl_context(self) -> ssl.SSLContext | None:
        if not self.listen_tls:
            return None
        if not self.certfile or not self.keyfile:
            raise ValueError("a TLS listener needs certfile and keyfile")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.cacertfile)
        context.load_cert_chain(self.certfile, self.keyfile)
        context.verify_mode = ssl.CERT_REQUIRED if self.verify_peer else ssl.CERT_NONE
        return context


def check_archive_stream(template: str) -> None:
    """Raises ValueError unless ``template`` can name a queue: ``{exchange}`` (the x-rtopic
    exchange's name) is its only placeholder, and it is at most 255 bytes without it."""
    rest = template.replace("{exchange}", "")
    if "{" in rest or "}" in rest:
        raise ValueError(f"archive_stream {template!r}: {{exchange}} is its only placeholder")
    if not template.strip() or len(rest.encode("utf-8")) > 255:
        raise ValueError(f"archive_stream {template!r} cannot name a queue (1 to 255 bytes)")


def _no_delay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _ClientProtocol(asyncio.Protocol):
    def __init__(self, server: ProxyServer) -> None:
        self._server = server
        self.session: Session | None = None
        self._broker: _BrokerProtocol | None = None
        self._transport: asyncio.BaseTransport | None = None
        self._source: str | None = None  # counted as unauthenticated until open-ok
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        peer = transport.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        if not self._server.admit(source):
            transport.abort()
            return
        self._source = source
        self._transport = transport
        transport.set_write_buffer_limits(HIGH_WATER)  # type: ignore[attr-defined]
        _no_delay(transport)
        self._server.stats.connections += 1
        self.session = Session(self._server.catalog, transport,  # type: ignore[arg-type]
                               self._server.settings.bcc_alias, self._server.stats.refused,
                               on_open=self._authenticated,
                               in_flight=self._server.settings.client_in_flight,
                               others_active=self._server.others_active,
                               archive=self._server.settings.archive_stream)
        self._server.sessions.add(self.session)
        self.data_received = self._first_bytes  # type: ignore[method-assign]
        self._deadline = self._server.loop.call_later(HANDSHAKE_TIMEOUT, self._too_slow)

    def _first_bytes(self, data: bytes) -> None:
        """The client spoke: its broker connection is opened now, not at accept."""
        assert self.session is not None and self._transport is not None
        self.data_received = self.session.client_data  # type: ignore[method-assign]
        asyncio.ensure_future(self._connect_broker(self._transport))
        self.session.client_data(data)

    def _authenticated(self) -> None:
        """The broker accepted the client's login: no longer counted nor timed."""
        if self._source is not None:
            self._server.release(self._source)
            self._source = None
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if self._source is not None and self.session is not None:
            LOG.warning("closing a client connection from %s: no login within %g s",
                        self._source, HANDSHAKE_TIMEOUT)
            self._server.stats.refused("handshake_timeout")
            self.session.close()

    async def _connect_broker(self, client: asyncio.BaseTransport) -> None:
        server = self._server
        upstream = server.upstream
        hostname = None
        if upstream.tls is not None:  # "" turns SNI off (None would send the host)
            hostname = upstream.tls.server_hostname(upstream.host) or ""
        timeout = upstream.connection_timeout or CONNECT_TIMEOUT
        try:
            _, protocol = await asyncio.wait_for(server.loop.create_connection(
                lambda: _BrokerProtocol(self.session, client), upstream.host, upstream.port,
                ssl=server.upstream_ssl, server_hostname=hostname), timeout)
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:
            reason = str(exc) if not isinstance(exc, asyncio.TimeoutError) else \
                f"no answer in {timeout:g} s"
            LOG.warning("cannot reach the broker %s for a client: %s", upstream.masked(), reason)
            # the client is refused with the reason (as RabbitMQ refuses a connection) and tries
            # again, as with a broker
            if self.session is not None and not client.is_closing():
                self.session.refuse(f"cannot reach the broker: {reason}")
            return
        self._broker = protocol  # type: ignore[assignment]
        if self.session is not None and not client.is_closing():
            self.session.broker_connected(protocol.transport)  # type: ignore[attr-defined]
        else:
            protocol.transport.close()  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.session.client_data(data)  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        self._authenticated()  # (or gone before it: no longer counted either way)
        if self.session is not None:
            self._server.sessions.discard(self.session)
            self._server.stats.rewritten_closed += self.session.rewritten
            self.session.close()

    def pause_writing(self) -> None:
        if self._broker is not None:
            self._broker.transport.pause_reading()

    def resume_writing(self) -> None:
        if self._broker is not None and not self._broker.transport.is_closing():
            self._broker.transport.resume_reading()


class _BrokerProtocol(asyncio.Protocol):
    def __init__(self, session: Session | None, client: asyncio.BaseTransport) -> None:
        self._session = session
        self._client = client
        self.transport: asyncio.Transport = None  # type: ignore[assignment]
        if session is not None:  # the session's own method: no call in between per read
            self.data_received = session.broker_data  # type: ignore[method-assign]

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        transport.set_write_buffer_limits(HIGH_WATER)  # type: ignore[attr-defined]
        _no_delay(transport)

    def data_received(self, data: bytes) -> None:
        self._session.broker_data(data)  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if self._session is not None:
            self._session.close()

    def pause_writing(self) -> None:
        if self._session is not None:
            self._session.broker_writable(False)
        else:
            self._client.pause_reading()  # type: ignore[attr-defined]

    def resume_writing(self) -> None:
        if self._session is not None:
            self._session.broker_writable(True)
        elif not self._client.is_closing():
            self._client.resume_reading()  # type: ignore[attr-defined]


class ProxyFatal(RuntimeError):
    """The proxy stopped by itself because it cannot serve truthfully (e.g. its management API
    belongs to another broker than its AMQP connection); the message is one line."""


class ProxyServer:
    """The listeners, the catalog and the sessions of one proxy process."""

    def __init__(self, settings: ProxySettings, loop: asyncio.AbstractEventLoop) -> None:
        self.settings = settings
        self.loop = loop
        self.upstream: AmqpUri = parse_uri(settings.uri)
        self.upstream_ssl = self.upstream.tls.ssl_context() if self.upstream.tls else None
        # set when the proxy cannot serve truthfully and must stop (see ProxyFatal)
        self.fatal_error: str | None = None
        self.on_fatal: Callable[[str], Any] | None = None
        self.catalog = Catalog(settings.uri, settings.management_uri, loop,
                               on_wrong_broker=self._fatal)
        self.sessions: set[Session] = set()
        self.stats = ProxyStats()
        self._unauthenticated: dict[str, int] = {}  # source address -> connections
        self._over_cap: set[str] = set()  # sources told about in the log
        self._servers: list[asyncio.AbstractServer] = []

    def others_active(self, session: Session) -> int:
        """How many sessions besides ``session`` sent the proxy something in the last
        :data:`~rtroute.proxy.session.ACTIVE_WINDOW` seconds (a client at its in-flight budget
        gives them their share of the broker: see ``Session._meter_room``)."""
        since = time.monotonic() - ACTIVE_WINDOW
        return sum(1 for other in self.sessions if other.last_active > since) - \
            (session.last_active > since)

    def admit(self, source: str) -> bool:
        """Whether one more connection from ``source`` may wait for its login (see
        :data:`MAX_UNAUTHENTICATED_PER_SOURCE`); counted if so (:meth:`release` uncounts it)."""
        count = self._unauthenticated.get(source, 0)
        if count >= MAX_UNAUTHENTICATED_PER_SOURCE:
            self.stats.refused("unauthenticated_per_source")
            if source not in self._over_cap:  # one line per episode, not per socket
                self._over_cap.add(source)
                LOG.warning("closing new client connections from %s at once: %d of its "
                            "connections have not logged in yet", source, count)
            return False
        self._unauthenticated[source] = count + 1
        return True

    def release(self, source: str) -> None:
        count = self._unauthenticated.get(source, 0) - 1
        if count > 0:
            self._unauthenticated[source] = count
        else:
            self._unauthenticated.pop(source, None)
        if count < MAX_UNAUTHENTICATED_PER_SOURCE // 2:
            self._over_cap.discard(source)

    def _fatal(self, reason: str) -> None:
        if self.fatal_error is None:
            self.fatal_error = reason
            if self.on_fatal is not None:
                self.on_fatal(reason)

    async def start(self) -> list[tuple[str, int]]:
        """Opens the listeners; returns their addresses (port 0 picks one)."""
        self.catalog.vhost(self.upstream.vhost)  # the usual vhost: its catalog at once
        tls = self.settings.client_ssl_context()
        addresses = []
        for listen, context in [(a, None) for a in self.settings.listen] + \
                               [(a, tls) for a in self.settings.listen_tls]:
            host, port = split_hostport(listen)
            server = await self.loop.create_server(
                lambda: _ClientProtocol(self), host, port, ssl=context,
                reuse_port=self.settings.reuse_port or None, reuse_address=True)
            self._servers.append(server)
            for sock in server.sockets:
                address = sock.getsockname()[:2]
                addresses.append(address)
                LOG.info("listening on %s:%d%s for %s", address[0], address[1],
                         " (TLS)" if context else "", mask_uri(self.settings.uri))
        return addresses

    def close(self) -> None:
        for server in self._servers:
            server.close()
        for session in list(self.sessions):
            session.close()
        self.catalog.stop()
