"""A small client for RabbitMQ's management HTTP API (standard library only).

What rtroute needs from it: the bindings of an exchange (the binding watcher's listing), queues
and their depth, connections (to close one from the broker side in fault tests), and dynamic
shovel parameters (the benchmark drives RabbitMQ's own shovel plugin with them).

Facts about the API on RabbitMQ 3.10 worth knowing:

- ``GET /api/exchanges/VHOST/NAME/bindings/source`` answers ``200 []`` for an exchange that does
  not exist; use :meth:`ManagementClient.exchange` to tell "no bindings" from "no exchange".
- Queue depths and the connection list come from statistics the broker emits every
  ``collect_statistics_interval`` (5 s by default): a count can lag by that much. Use a passive
  ``queue.declare`` over AMQP for an exact, current count.
- ``PUT /api/parameters/shovel/...`` fails with 400 "component shovel not found" unless the
  ``rabbitmq_shovel`` plugin is enabled.

Size: one API's client. Its request plumbing (failover between nodes, the broker identity
check, a long listing's growing wait, definitions exports) and the objects read through it
(exchanges and their bindings, queues, connections, shovel parameters) share that plumbing's
state; the parts that stand alone live beside it (``management_listing``,
``definitions_export``, ``broker_identity``).
"""
from __future__ import annotations

import base64
import json
import logging
import re
import socket
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlencode, urlsplit

from rtroute.amqp.broker_identity import (
    BrokerIdentity,
    BrokerMismatch,
    check_same_broker,
    identity_from_overview,
)
from rtroute.amqp.definitions_export import DefinitionsExports, ExportRefused
from rtroute.amqp.management_listing import (
    LISTING_TIMEOUT,
    ListingBudget,
    ListingProgress,
    json_rows,
    log_progress,
    read_listing,
)
from rtroute.amqp.uri import management_url, mask_uri, parse_uri, split_url

__all__ = ["BindingInfo", "ManagementClient", "ManagementError", "NotFound", "WrongBroker"]

LOG = logging.getLogger(__name__)


class ManagementError(RuntimeError):
    """A management API call failed.

    Attributes:
        status: the HTTP status, or None if the API could not be reached.
        method, path: the request.
    """

    def __init__(self, message: str, status: int | None, method: str, path: str) -> None:
        super().__init__(message)
        self.status = status
        self.method = method
        self.path = path


class NotFound(ManagementError):
    """The object (vhost, exchange, queue, connection, parameter) does not exist (HTTP 404)."""


class WrongBroker(ManagementError):
    """The management API belongs to another broker than the one the client was told to
    expect (see :meth:`ManagementClient.expect_broker`); no answer of it is to be trusted."""


@dataclass(frozen=True)
class BindingInfo:
    """One binding as the management API lists it."""

    source: str
    destination: str
    destination_type: str  # "queue" or "exchange"
    routing_key: str
    arguments: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    vhost: str = "/"
    properties_key: str = ""


class ManagementClient:
    """Client for ``http(s)://HOST:PORT/api/``.

    Args:
        url: the management base URL (``http://127.0.0.1:15672/``); credentials in it
            (``http://user:pass@host:15672/``) override ``username``/``password``. A list of
            URLs (one per node of a cluster) fails over: a request that cannot reach the API
            at one is sent to the next, and the client stays with the one that answered.
        username, password: HTTP basic auth.
        timeout: seconds per request (but listings).
        listing_timeout: seconds a listing of bindings first waits for the broker's answer
            (which it builds whole before sending a byte) and for each read of it; it grows
            with the listings' work (see :class:`~rtroute.amqp.management_listing.ListingBudget`).
        ssl_context: for an https API: the TLS settings to use (default: the system CAs).

    Every method raises :class:`ManagementError` (or :class:`NotFound` for 404) on failure; the
    message names the request and the broker's reason, never the password.

    Size: one method per management API call rtroute makes, over one request path (failover,
    retries, TLS, errors); split by resource, callers would hold several clients of one API.
    """

    def __init__(
        self,
        url: str | Sequence[str] = "http://127.0.0.1:15672/",
        username: str = "guest",
        password: str = "guest",
        timeout: float = 10.0,
        ssl_context: ssl.SSLContext | None = None,
        listing_timeout: float = LISTING_TIMEOUT,
    ) -> None:
        urls = [url] if isinstance(url, str) else list(url)
        if not urls:
            raise ValueError("no management URL given")
        bases: list[tuple[str, str]] = []
        for text in urls:
            base, user_info = _base_url(text)
            if user_info is not None:
                username, password = user_info
            bases.append((base, "Basic " + base64.b64encode(
                f"{username}:{password}".encode()).decode()))
        self._bases = bases
        self._current = 0
        self.base_url = bases[0][0]
        self.username = username
        self._auth = bases[0][1]
        self.timeout = timeout
        self.listings = ListingBudget(listing_timeout)
        # https with the AMQP URI's TLS settings (a private CA, a client certificate)
        self._opener = _OPENER if ssl_context is None else urllib.request.build_opener(
            _SameOriginRedirects, urllib.request.HTTPSHandler(context=ssl_context))
        # the broker this API must belong to (expect_broker), and whether that was checked
        self._expected: tuple[BrokerIdentity, str, str] | None = None
        self._verified = False
        # reentrant: verify_broker may fail over (_next_base)
        self._verify_lock = threading.RLock()
        # a vhost's bindings from one definitions export where the broker keeps every binding
        # in it (iter_exchange_bindings; rtroute.amqp.definitions_export)
        self.exports = DefinitionsExports(self._export_definitions, self._broker_version)

    @classmethod
    def from_amqp_uri(
        cls, uri: str | Sequence[str], management_uri: str | Sequence[str] | None = None,
        timeout: float = 10.0, listing_timeout: float = LISTING_TIMEOUT,
    ) -> ManagementClient:
        """A client for the broker of an AMQP URI, with the same credentials.

        ``management_uri`` overrides the derived ``http://HOST:15672/`` (see
        :func:`rtroute.amqp.uri.management_url`). A list of AMQP URIs (a cluster's nodes)
        derives one API URL per host, failing over in that order; so does a list of
        ``management_uri``. An ``amqps`` URI's TLS settings
        (``cacertfile``, ``certfile``, ``keyfile``, ``verify``, ...) apply to an https API too.

        Raises:
            ValueError: a malformed URI.
        """
        uris = [uri] if isinstance(uri, str) else list(uri)
        parsed = parse_uri(uris[0], strict=False)
        if management_uri:
            urls = [management_uri] if isinstance(management_uri, str) else list(management_uri)
        else:
            urls = list(dict.fromkeys(management_url(one) for one in uris))
        context = parsed.tls.ssl_context() if parsed.tls is not None \
            and urls[0].lower().startswith("https:") else None
        return cls(urls, parsed.username, parsed.password, timeout, ssl_context=context,
                   listing_timeout=listing_timeout)

    def __repr__(self) -> str:
        return f"ManagementClient({self.base_url!r}, user={self.username!r})"

    # -- identity ------------------------------------------------------------------------------

    def expect_broker(self, identity: BrokerIdentity, amqp_where: str,
                      option: str = "--management-uri") -> None:
        """From now on, answer only if this API belongs to the broker ``identity`` (what the
        AMQP connection's ``connection.start`` said; see :mod:`rtroute.amqp.broker_identity`).

        The first request after this call checks ``/api/overview`` first; on a mismatch that
        request and every later one raise :class:`WrongBroker`. Call it again after each
        (re)connect: a new identity is checked anew, the same one is not.

        Args:
            identity: the connected broker's identity.
            amqp_where: the AMQP endpoint, masked, for the error message.
            option: what the user sets to fix a mismatch, for the error message.
        """
        with self._verify_lock:
            if self._expected is None or self._expected[0] != identity:
                self._verified = False
            self._expected = (identity, amqp_where, option)

    def verify_broker(self) -> BrokerIdentity | None:
        """Checks now that this API belongs to the expected broker; returns the API's identity
        (None when nothing is expected).

        Raises:
            WrongBroker: it belongs to another broker.
            ManagementError: the API could not be asked.
        """
        with self._verify_lock:
            if self._expected is None:
                return None
            identity, amqp_where, option = self._expected
            overview = self._send("GET", "overview", None, None, check=False)
            found = identity_from_overview(overview)
            nodes: list[str] = []
            if identity.cluster_name != found.cluster_name and identity.cluster_name:
                # a cluster without a name of its own: each node says its own default
                listed = self._send("GET", "nodes?columns=name", None, None, check=False) or []
                nodes = [row.get("name", "") for row in listed if isinstance(row, dict)]
            try:
                check_same_broker(identity, found, amqp_where, mask_uri(self.base_url[:-4]),
                                  option, management_nodes=nodes)
            except BrokerMismatch as exc:
                self._verified = False
                raise WrongBroker(str(exc), None, "GET", "overview") from None
            self._verified = True
            return found

    # -- generic -------------------------------------------------------------------------------

    def request(self, method: str, path: str, body: Any = None,
                headers: dict[str, str] | None = None) -> Any:
        """Send ``METHOD /api/PATH`` (``body`` as JSON) and return the decoded JSON or None.

        After :meth:`expect_broker`, the API's identity is checked first (once).
        """
        return self._send(method, path, body, headers)

    def _send(self, method: str, path: str, body: Any,
              headers: dict[str, str] | None, check: bool = True,
              listing: ListingProgress | None = None, raw: bool = False) -> Any:
        """One request, failing over to the next URL while the API cannot be reached (a node
        that is down); an answer of any kind, even an error status, ends the search.
        ``listing``: a long listing, read with its own growing wait while it tells how far
        it is. ``raw``: the answer's bytes, not parsed."""
        tries = len(self._bases)
        while True:
            try:
                return self._send_once(method, path, body, headers, check, listing, raw)
            except ManagementError as exc:
                tries -= 1
                if exc.status is not None or tries <= 0 or isinstance(exc, WrongBroker):
                    raise
                self._next_base()

    def _next_base(self) -> None:
        """Moves to the next URL of the list; its identity is checked before it is believed."""
        with self._verify_lock:
            self._current = (self._current + 1) % len(self._bases)
            self.base_url, self._auth = self._bases[self._current]
            self._verified = False

    def _send_once(self, method: str, path: str, body: Any,
                   headers: dict[str, str] | None, check: bool,
                   listing: ListingProgress | None = None, raw: bool = False) -> Any:
        if check and self._expected is not None and not self._verified:
            self.verify_broker()  # a node failed over to is checked before it is believed
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.base_url + path, data=data, method=method)
        req.add_header("Authorization", self._auth)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        for name, value in (headers or {}).items():
            req.add_header(name, value)
        where = f"{method} {self.base_url}{path}"
        timeout = self.timeout if listing is None else self.listings.wait(path)
        started = time.monotonic()
        try:
            with self._opener.open(req, timeout=timeout) as response:
                payload = response.read() if listing is None else read_listing(response,
                                                                               listing)
        except _CrossOriginRedirect as exc:
            raise ManagementError(
                f"{where}: HTTP {exc.code} redirects to {mask_uri(exc.location)}, another "
                "origin, which must not get the credentials: not followed (if it is the right "
                "API, give its URL as the management URI)", exc.code, method, path) from None
        except urllib.error.HTTPError as exc:
            reason = _error_reason(exc)
            error_class = NotFound if exc.code == 404 else ManagementError
            raise error_class(f"{where}: HTTP {exc.code}: {reason}", exc.code, method,
                              path) from None
        except (urllib.error.URLError, socket.timeout, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            if listing is not None and isinstance(reason, TimeoutError):
                after = self.listings.timed_out(path)
                raise ManagementError(
                    f"{where}: the listing timed out: no answer or no byte of it within "
                    f"{timeout:g} s ({listing.describe()}; the broker builds a listing whole "
                    f"before it answers; the next try waits {after:g} s)", None, method,
                    path) from None
            raise ManagementError(f"{where}: management API unreachable: {reason}", None,
                                  method, path) from None
        if listing is not None:
            self.listings.succeeded(path, time.monotonic() - started)
        if not payload or raw:
            return payload or None
        try:
            return json.loads(payload)
        except ValueError:
            raise ManagementError(f"{where}: answer is not JSON", None, method, path) from None

    # -- objects -------------------------------------------------------------------------------

    def overview(self) -> dict[str, Any]:
        """``GET /api/overview`` (versions, listeners, totals)."""
        return self.request("GET", "overview")

    def exchange(self, name: str, vhost: str = "/") -> dict[str, Any]:
        """One exchange's description. Raises :class:`NotFound` if it does not exist."""
        return self.request("GET", f"exchanges/{_q(vhost)}/{_q(name)}")

    def exchanges(self, vhost: str = "/") -> list[dict[str, Any]]:
        """Every exchange of ``vhost``: name, type and arguments (one request)."""
        return self.request("GET", f"exchanges/{_q(vhost)}?columns=name,type,arguments") or []

    def exchange_exists(self, name: str, vhost: str = "/") -> bool:
        """True if the exchange exists."""
        try:
            self.exchange(name, vhost)
        except NotFound:
            return False
        return True

    def delete_exchange(self, name: str, vhost: str = "/", if_unused: bool = False) -> None:
        """Deletes an exchange (``if_unused``: only if nothing is bound to it; else the API
        answers 400). Raises :class:`NotFound` if it does not exist."""
        query = "?if-unused=true" if if_unused else ""
        self.request("DELETE", f"exchanges/{_q(vhost)}/{_q(name)}{query}")

    def exchange_bindings(self, name: str, vhost: str = "/",
                          progress: ListingProgress | None = None) -> list[BindingInfo]:
        """The bindings whose source is exchange ``name`` (queues and exchanges bound to it).

        An exchange that does not exist has no bindings (the API answers ``[]``). The API does
        not page this listing (RabbitMQ builds it whole, then sends it): it waits as long as
        :attr:`listings` allows (growing with the work, not :attr:`timeout`), and
        ``progress`` (made here if not given) says how far it is; a long one logs a line
        every few seconds. ``progress`` is finished (``"done"`` or ``"failed"``) on return.
        """
        if progress is None:
            progress = ListingProgress(f"bindings of {name!r}")
        log_progress(progress)
        try:
            rows = self._send("GET", f"exchanges/{_q(vhost)}/{_q(name)}/bindings/source",
                              None, None, listing=progress) or []
        except BaseException as exc:
            progress.finish(str(exc) or repr(exc))
            raise
        progress.total = len(rows)
        progress.finish()
        return [
            BindingInfo(
                source=row["source"],
                destination=row["destination"],
                destination_type=row["destination_type"],
                routing_key=row["routing_key"],
                arguments=row.get("arguments") or {},
                vhost=row.get("vhost", vhost),
                properties_key=row.get("properties_key", ""),
            )
            for row in rows
        ]

    def iter_exchange_bindings(self, name: str, vhost: str = "/",
                               progress: ListingProgress | None = None,
                               export: bool = True) -> Iterator[BindingInfo]:
        """:meth:`exchange_bindings` for listings of 100,000s, lean: the API is asked for the
        columns a watcher needs only (half the bytes; ``properties_key`` is left empty), and
        the answer is parsed row by row as it is iterated (no list of every row at once).
        ``progress`` is finished once the rows are all read."""
        if progress is None:
            progress = ListingProgress(f"bindings of {name!r}")
        log_progress(progress)
        try:
            exported = self.exports.bindings(vhost, name, progress) if export else None
        except LookupError:
            progress.finish("no such exchange")
            raise NotFound(f"GET {self.base_url}definitions/{_q(vhost)}: no exchange {name!r} "
                           f"in vhost {vhost!r}", 404, "GET", f"definitions/{_q(vhost)}"
                           ) from None
        except BaseException as exc:
            progress.finish(str(exc) or repr(exc))
            raise
        if exported is not None:
            for destination, destination_type, routing_key, arguments in exported:
                yield BindingInfo(source=name, destination=destination,
                                  destination_type=destination_type, routing_key=routing_key,
                                  arguments=arguments, vhost=vhost)
            progress.finish()
            return
        path = (f"exchanges/{_q(vhost)}/{_q(name)}/bindings/source?columns="
                "destination,destination_type,routing_key,arguments")
        try:
            payload = self._send("GET", path, None, None, listing=progress, raw=True) or b"[]"
        except BaseException as exc:
            progress.finish(str(exc) or repr(exc))
            raise
        count = 0
        try:
            for row in json_rows(payload):
                count += 1
                yield BindingInfo(source=name, destination=row["destination"],
                                  destination_type=row["destination_type"],
                                  routing_key=row["routing_key"],
                                  arguments=row.get("arguments") or {}, vhost=vhost)
        except (ValueError, LookupError, TypeError) as exc:
            progress.finish(f"answer is not a JSON list of bindings: {exc}")
            raise ManagementError(f"GET {self.base_url}{path}: answer is not a JSON list of "
                                  f"bindings: {exc}", None, "GET", path) from None
        progress.total = count
        progress.finish()

    def _export_definitions(self, vhost: str, progress: ListingProgress) -> bytes:
        """``GET /api/definitions/VHOST``'s bytes (for :attr:`exports`)."""
        try:
            return self._send("GET", f"definitions/{_q(vhost)}", None, None, listing=progress,
                              raw=True) or b"{}"
        except ManagementError as exc:
            if exc.status in (401, 403):
                LOG.info("the management API does not let %s export definitions (no "
                         "administrator): bindings are listed per exchange (slower with "
                         "100,000s of bindings)", self.username)
                raise ExportRefused(str(exc)) from None
            raise

    def _broker_version(self) -> tuple[int, ...]:
        """The broker's version (``rabbitmq_version`` of the overview) as numbers."""
        text = str(self.overview().get("rabbitmq_version", ""))
        return tuple(int(part) for part in re.findall(r"\d+", text)[:3])

    def queues(self, vhost: str | None = None,
               columns: tuple[str, ...] = ()) -> list[dict[str, Any]]:
        """All queues (of one vhost if given); ``columns`` limits the fields returned."""
        path = "queues" if vhost is None else f"queues/{_q(vhost)}"
        if columns:
            path += "?" + urlencode({"columns": ",".join(columns)})
        return self.request("GET", path)

    def queue(self, name: str, vhost: str = "/") -> dict[str, Any]:
        """One queue's description. Raises :class:`NotFound` if it does not exist."""
        return self.request("GET", f"queues/{_q(vhost)}/{_q(name)}")

    def queue_message_count(self, name: str, vhost: str = "/") -> int:
        """Messages in a queue (ready + unacked) per the statistics, which lag up to ~5 s."""
        return int(self.queue(name, vhost).get("messages") or 0)

    def consumers(self, vhost: str = "/") -> list[dict[str, Any]]:
        """The consumers of a vhost's queues (``queue.name``, ``consumer_tag``, ``active``:
        the single active consumer or not), per the statistics: a change of the active
        consumer shows up to ~5 s late, a new or gone consumer at once."""
        return self.request("GET", f"consumers/{_q(vhost)}")

    def connections(self) -> list[dict[str, Any]]:
        """Open client connections (``name``, ``user``, ``client_properties``, ...)."""
        return self.request("GET", "connections")

    def connection_names(self, client_name: str) -> list[str]:
        """Names of the connections whose client gave ``connection_name = client_name``.

        A new connection shows up once the broker has emitted its statistics (can take ~5 s).
        """
        names = []
        for row in self.connections():
            properties = row.get("client_properties") or {}
            if properties.get("connection_name") == client_name:
                names.append(row["name"])
        return names

    def close_connection(self, name: str, reason: str = "closed by rtroute") -> None:
        """Close a connection by its broker-side name (``"127.0.0.1:5000 -> 127.0.0.1:5672"``)."""
        self.request("DELETE", f"connections/{_q(name)}", headers={"X-Reason": reason})

    def close_connections_named(self, client_name: str,
                                reason: str = "closed by rtroute") -> int:
        """Close every connection with ``connection_name = client_name``; returns how many."""
        closed = 0
        for name in self.connection_names(client_name):
            try:
                self.close_connection(name, reason)
                closed += 1
            except NotFound:
                pass  # it went away by itself
        return closed

    def global_parameter(self, name: str) -> Any:
        """The value of the global parameter ``name``, or None if there is none."""
        try:
            return self.request("GET", f"global-parameters/{_q(name)}")["value"]
        except NotFound:
            return None

    def put_global_parameter(self, name: str, value: Any) -> None:
        """Sets the global parameter ``name`` (kept by the broker across restarts)."""
        self.request("PUT", f"global-parameters/{_q(name)}", {"name": name, "value": value})

    def delete_global_parameter(self, name: str) -> None:
        """Removes the global parameter ``name`` (no error if there is none)."""
        try:
            self.request("DELETE", f"global-parameters/{_q(name)}")
        except NotFound:
            pass

    def put_shovel(self, name: str, value: dict[str, Any], vhost: str = "/") -> None:
        """Create or replace a dynamic shovel (needs the ``rabbitmq_shovel`` plugin).

        ``value`` holds the shovel's keys (``src-uri``, ``src-queue``, ``dest-uri``, ...).
        """
        self.request("PUT", f"parameters/shovel/{_q(vhost)}/{_q(name)}",
                     {"component": "shovel", "vhost": vhost, "name": name, "value": value})

    def delete_shovel(self, name: str, vhost: str = "/") -> None:
        """Delete a dynamic shovel. Raises :class:`NotFound` if there is none by that name."""
        self.request("DELETE", f"parameters/shovel/{_q(vhost)}/{_q(name)}")

    def definitions(self, vhost: str | None = None) -> dict[str, Any]:
        """``GET /api/definitions`` (the whole broker) or one vhost's export."""
        return self.request("GET", "definitions" if vhost is None
                            else f"definitions/{_q(vhost)}") or {}

    def import_definitions(self, definitions: dict[str, Any], vhost: str | None = None) -> None:
        """``POST /api/definitions`` (an export of the whole broker, its items name their
        vhost) or ``/api/definitions/VHOST`` (one vhost's export). What exists already with
        the same properties is left as it is, so importing twice changes nothing."""
        self.request("POST", "definitions" if vhost is None else f"definitions/{_q(vhost)}",
                     definitions)

    def shovels(self, vhost: str | None = None) -> list[dict[str, Any]]:
        """Shovel status rows (needs the ``rabbitmq_shovel_management`` plugin)."""
        return self.request("GET", "shovels" if vhost is None else f"shovels/{_q(vhost)}")


def _base_url(url: str) -> tuple[str, tuple[str, str] | None]:
    """``http(s)://HOST[:PORT]/PATH/api/`` of a management URL, and the credentials it holds."""
    parts, port = split_url(url)  # urllib's own errors may quote the password
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"management URL must be http(s)://host[:port]/, got {mask_uri(url)!r}")
    user_info = None
    if parts.username is not None:
        user_info = (unquote(parts.username), unquote(parts.password or ""))
    netloc = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    if port is not None:
        netloc += f":{port}"
    return f"{parts.scheme}://{netloc}{parts.path.rstrip('/')}/api/", user_info


def _q(name: str) -> str:
    return quote(name, safe="")


class _CrossOriginRedirect(urllib.error.URLError):
    """A redirect to another scheme, host or port than the request's."""

    def __init__(self, code: int, location: str) -> None:
        super().__init__(f"redirect to another origin: {mask_uri(location)}")
        self.code = code
        self.location = location


def _origin(url: str) -> tuple[str, str, int | None] | None:
    """``(scheme, host, port)`` with the scheme's default port filled in; None if unparsable."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    return scheme, (parts.hostname or "").lower(), port or {"http": 80, "https": 443}.get(scheme)


class _SameOriginRedirects(urllib.request.HTTPRedirectHandler):
    """Follows redirects within the request's origin only.

    urllib's own handler resends every header, ``Authorization`` included, to wherever the
    ``Location`` points (another host, or from https to plain http); the broker's API never
    needs that, so any other origin is an error naming it.
    """

    def redirect_request(self, req: urllib.request.Request, fp: Any, code: int, msg: str,
                         headers: Any, newurl: str) -> urllib.request.Request | None:
        origin = _origin(newurl)
        if origin is None or origin != _origin(req.full_url):
            fp.close()
            raise _CrossOriginRedirect(code, newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SameOriginRedirects)


def _error_reason(exc: urllib.error.HTTPError) -> str:
    try:
        body = exc.read().decode("utf-8", "replace")
    except OSError:
        return exc.reason
    try:
        decoded = json.loads(body)
    except ValueError:
        return body.strip()[:300] or str(exc.reason)
    if isinstance(decoded, dict):
        return str(decoded.get("reason") or decoded.get("error") or decoded).strip()
    return str(decoded)
