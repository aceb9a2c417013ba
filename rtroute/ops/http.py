"""The operations endpoint: ``/livez``, ``/readyz`` (alias ``/healthz``), ``/status`` (JSON),
``/metrics`` (Prometheus) and the routes its owner adds (``/diverts``).

It only reads snapshots that the loops publish (a callable returning plain data), so it never
touches pika objects. It shares its process with AMQP connections, so no client may take that
process's descriptors, threads or memory: one selector thread reads every request under a
deadline and size limits and answers refusals itself; only complete, admitted requests reach a
small pool of worker threads; at most ``max_connections`` sockets are open at any time.

Who may do what:

- ``Host`` must name a loopback address, ``localhost`` or the listen host, unless the endpoint
  listens beyond loopback (where a token is mandatory): a web page the host's user visits cannot
  reach it through DNS rebinding.
- Changes (any method but GET/HEAD) need the bearer token; without a token they are refused
  unless ``allow_unauthenticated_changes``. A body must be ``application/json`` and an
  ``Origin``, when sent, must be the endpoint's own: a page cannot post a "simple" form.
- Reads need the token only with ``protect_reads``.
- The token is checked on the headers, before any body is read.

Size: the hardened server (one selector thread, admission, per-client limits and deadlines, the
worker pool) and the endpoints it serves; every limit is tested through an endpoint, and the
server has no other user.
"""
from __future__ import annotations

import errno
import hmac
import json
import logging
import queue
import re
import selectors
import socket
import threading
import time
import urllib.parse
from http import HTTPStatus
from typing import Any, Callable

from rtroute.ops.netaddr import is_loopback, split_listen

StatusProvider = Callable[[], dict]
Route = Callable[[str, bytes], tuple[int, Any]]

LOG = logging.getLogger("rtroute.http")

MAX_CONNECTIONS = 32
REQUEST_TIMEOUT = 10.0  # seconds from accept to the last byte of the request
MAX_HEADER_BYTES = 8 * 1024
MAX_BODY_BYTES = 64 * 1024
WORKERS = 4
READ_METHODS = ("GET", "HEAD")
# After a refusal the client may still be sending its body; reading (and dropping) a little of
# it before closing keeps the kernel from answering with a reset that would destroy our answer.
LINGER_SECONDS = 1.0
LINGER_BYTES = 64 * 1024
ACCEPT_PAUSE = 0.5  # seconds without accepting after accept() failed (descriptors exhausted)
FULL_WARNING_INTERVAL = 60.0
JSON = "application/json"
#: the config key that holds the endpoint's token, by the command that serves it
TOKEN_KEYS = {"rtroute run": "[http] token", "rtroute shovel run": "[http] token",
              "rtroute proxy": "[proxy] http_token"}


def changes_refused(command: str = "rtroute run") -> str:
    """The 403 answer to a change when no token is set, naming how ``command`` (the process
    that serves the endpoint: ``rtroute run``, ``rtroute shovel run``, ``rtroute proxy``)
    is given one."""
    key = TOKEN_KEYS.get(command, "[http] token")
    allow = "" if command == "rtroute proxy" else \
        ", or allow them without one with [http] allow_unauthenticated_changes = true"
    return (f"changes over HTTP need a token: set {key} (or {command} --token / "
            f"RTROUTE_HTTP_TOKEN){allow}")


def unauthorized(command: str = "rtroute run") -> str:
    """The 401 answer: which token the endpoint of ``command`` wants."""
    return (f"unauthorized: send the token given to {command} --token "
            "(Authorization: Bearer TOKEN)")

_HEAD_END = re.compile(rb"\r?\n\r?\n")
_LINE_END = re.compile(rb"\r?\n")
_METHOD = re.compile(r"[A-Z]+")
_HEADER_NAME = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_DIGITS = re.compile(r"[0-9]+")
_HOST_HEADER = re.compile(r"\[([0-9A-Fa-f:.]+)\](?::([0-9]*))?|([^:\[\]@/\s]+)(?::([0-9]*))?")
_SINGLE_HEADERS = ("host", "content-length", "authorization", "content-type", "origin",
                   "transfer-encoding")


def prometheus_text(status: dict, process: bool = False) -> str:
    """Renders ``status["metrics"]`` (``{name: {"help", "type", "samples": [(labels, value)]}}``,
    see :mod:`rtroute.ops.metrics`) in the Prometheus text format with ``prometheus_client``;
    ``process`` adds the process metrics and ``rtroute_build_info`` (as ``/metrics`` does)."""
    from rtroute.ops.metrics import render

    metrics = dict(status.get("metrics", {}))
    # every process kind (sidecar, shovels, proxy, divert) says whether /readyz is 200
    metrics["rtroute_ready"] = {"help": "1 when /readyz answers 200 (the status is healthy)",
                                "type": "gauge",
                                "samples": [({}, int(bool(status.get("healthy", True))))]}
    return render(metrics, process=process)


def merge_status(*statuses: dict) -> dict:
    """One ``/status`` for several components: healthy only if all are; metrics side by side;
    the other keys of later statuses added (``shovels`` beside ``exchanges``)."""
    merged: dict = {"healthy": True, "metrics": {}}
    for status in statuses:
        for key, value in status.items():
            if key == "healthy":
                merged["healthy"] = merged["healthy"] and bool(value)
            elif key == "metrics":
                merged["metrics"].update(value)
            elif key == "reason":  # why not healthy: the first component that says
                merged["reason"] = merged.get("reason") or value
            else:
                merged.setdefault(key, value)
    return merged


class ListenError(OSError):
    """The endpoint cannot listen on its address; the message is one line, e.g.
    ``http listen 127.0.0.1:8419: address already in use`` (``errno`` is kept)."""


class _Refusal(Exception):
    """A request answered without reaching a handler (bad, too large, not allowed)."""

    def __init__(self, code: int, message: str, headers: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.headers = headers


class _Request:
    __slots__ = ("body", "headers", "length", "method", "path", "version")

    def __init__(self, method: str, path: str, version: str, headers: dict[str, str]) -> None:
        self.method = method
        self.path = path
        self.version = version
        self.headers = headers
        self.length = 0
        self.body = b""


class _Connection:
    """A socket in the selector: reading its request, or lingering after a refusal."""

    __slots__ = ("accepted", "buffer", "deadline", "dropped", "lingering", "request", "sock")

    def __init__(self, sock: socket.socket, now: float, timeout: float) -> None:
        self.sock = sock
        self.accepted = now
        self.deadline = now + timeout
        self.buffer = bytearray()
        self.request: _Request | None = None
        self.lingering = False
        self.dropped = 0


def _host_name_and_port(value: str) -> tuple[str, str] | None:
    """``("name", "port")`` of a ``Host`` header (port ``""`` when absent), None if malformed."""
    m = _HOST_HEADER.fullmatch(value.strip())
    if m is None:
        return None
    if m.group(1) is not None:
        return m.group(1).lower(), m.group(2) or ""
    return m.group(3).lower(), m.group(4) or ""


def _same_origin(origin: str, host: str | None) -> bool:
    """True when ``Origin`` names the host and port the request was sent to (``Host``)."""
    target = _host_name_and_port(host) if host is not None else None
    try:
        parts = urllib.parse.urlsplit(origin.strip())
        origin_port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:
        return False
    if target is None or origin_port is None or not parts.hostname:
        return False
    name, port = target
    return parts.hostname.lower() == name and origin_port == int(port or origin_port)


def _response(code: int, body: bytes, content_type: str = JSON,
              headers: tuple[str, ...] = (), head_only: bool = False) -> bytes:
    try:
        reason = HTTPStatus(code).phrase
    except ValueError:
        reason = ""
    lines = [f"HTTP/1.1 {code} {reason}", f"Content-Type: {content_type}",
             f"Content-Length: {len(body)}", "Connection: close", "Cache-Control: no-store",
             "X-Content-Type-Options: nosniff", *headers]
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return head if head_only else head + body


def _error(code: int, message: str, headers: tuple[str, ...] = ()) -> bytes:
    return _response(code, json.dumps({"error": message}).encode(), headers=headers)


class OpsServer:
    """Serves the status of a running process over HTTP.

    Args:
        listen: ``host:port``; port 0 picks a free one (see :attr:`port`).
        status: returns ``{"healthy": bool, ..., "metrics": {...}}``; everything but
            ``metrics`` is served as ``/status``, ``healthy`` as ``/readyz``.
        token: ``Authorization: Bearer TOKEN``; mandatory when listening beyond loopback,
            required by changes (POST, DELETE, ...) and, with ``protect_reads``, by reads.
        routes: extra ``{(method, path): handler(path, body) -> (code, json_value)}``; a path
            ending in ``/`` matches every path below it. A handler that raises answers 500.
        allow_unauthenticated_changes: without a token, accept changes anyway (else 403).
        protect_reads: with a token, require it for reads too (health and metrics included).
        max_connections: open client sockets at most; the slowest request still being read
            makes room for a new one, and when every socket is being answered a new one gets 503.
        request_timeout: seconds a client has to send its whole request (else 408 and close);
            also the send timeout of the answer.
        max_header_bytes: request line and headers at most (else 431).
        max_body_bytes: request body at most (else 413, before reading it).
        workers: threads that run handlers and the status provider.
        command: the command of the process that serves the endpoint (``rtroute run``,
            ``rtroute shovel run``, ``rtroute proxy``): refusals say how to give it a token.

    Raises:
        ValueError: a non-loopback address without a token.
        ListenError: the address cannot be listened on (in use, not local, not permitted).
    """

    def __init__(self, listen: str, status: StatusProvider, token: str | None = None,
                 routes: dict[tuple[str, str], Route] | None = None, *,
                 allow_unauthenticated_changes: bool = False, protect_reads: bool = False,
                 max_connections: int = MAX_CONNECTIONS,
                 request_timeout: float = REQUEST_TIMEOUT,
                 max_header_bytes: int = MAX_HEADER_BYTES,
                 max_body_bytes: int = MAX_BODY_BYTES, workers: int = WORKERS,
                 command: str = "rtroute run") -> None:
        host, port = split_listen(listen)
        if not is_loopback(host) and not token:
            raise ValueError(f"http listen {listen!r} is not loopback: set a token")
        self._status = status
        self._token = f"Bearer {token}".encode() if token else None
        self._routes = dict(routes or {})
        self._allow_changes = allow_unauthenticated_changes
        self._protect_reads = protect_reads
        # beyond loopback clients use names we cannot know; the token stands guard there
        self._check_host = is_loopback(host) or not token
        self._listen_host = host.lower()
        self._max_connections = max(1, max_connections)
        self._timeout = request_timeout
        self._max_header = max_header_bytes
        self._max_body = max_body_bytes
        self._workers = max(1, workers)
        self._command = command

        self._listener = self._listen(listen, host, port)
        self._listener.setblocking(False)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, "listener")
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._connections: dict[socket.socket, _Connection] = {}
        self._busy = 0  # connections handed to the workers
        self._busy_lock = threading.Lock()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._stopping = threading.Event()
        self._accept_paused_until: float | None = None
        self._last_full_warning = float("-inf")
        self._thread: threading.Thread | None = None
        self._closed = False

    @staticmethod
    def _listen(listen: str, host: str, port: int) -> socket.socket:
        try:
            family, kind, proto, _, address = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        except socket.gaierror as exc:
            raise ListenError(f"http listen {listen}: {exc.strerror}") from None
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(128)
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                reason = "address already in use"
            else:
                reason = exc.strerror or str(exc)
                reason = reason[:1].lower() + reason[1:]
            error = ListenError(f"http listen {listen}: {reason}")
            error.errno = exc.errno
            raise error from None
        return sock

    @property
    def port(self) -> int:
        return self._listener.getsockname()[1]

    def start(self) -> OpsServer:
        """Starts serving in background (daemon) threads; returns ``self``."""
        for i in range(self._workers):
            threading.Thread(target=self._work, name=f"rtroute-http-{i}", daemon=True).start()
        self._thread = threading.Thread(target=self._serve, name="rtroute-http", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops accepting, closes every socket not being answered, ends the threads."""
        if self._thread is None:
            self._close()
            return
        self._stopping.set()
        try:
            self._wake_w.send(b"x")
        except OSError:
            pass
        self._thread.join(5)
        for _ in range(self._workers):
            self._jobs.put(None)

    # -- the selector thread ----------------------------------------------------------------

    def _serve(self) -> None:
        try:
            while not self._stopping.is_set():
                try:
                    self._step()
                except Exception:
                    LOG.exception("http: unexpected error in the connection loop")
                    time.sleep(0.1)
        finally:
            self._close()

    def _step(self) -> None:
        now = time.monotonic()
        waits = [c.deadline - now for c in self._connections.values()]
        if self._accept_paused_until is not None:
            waits.append(self._accept_paused_until - now)
        timeout = max(0.0, min(waits)) if waits else None
        for key, _events in self._selector.select(timeout):
            if key.data == "listener":
                self._accept()
            elif key.data == "wake":
                self._wake_r.recv(64)
            elif self._connections.get(key.fileobj) is key.data:  # not dropped meanwhile
                try:
                    self._on_readable(key.data)
                except Exception as exc:  # a bug here costs this connection, not the server
                    LOG.error("http: dropping a connection: %s: %s", type(exc).__name__, exc,
                              exc_info=LOG.isEnabledFor(logging.DEBUG))
                    self._drop(key.data)
        now = time.monotonic()
        for conn in [c for c in self._connections.values() if c.deadline <= now]:
            if conn.lingering:
                self._drop(conn)
            else:
                self._answer_now(conn, _error(408, "the request took too long"), linger=False)
        if self._accept_paused_until is not None and self._accept_paused_until <= now:
            self._accept_paused_until = None
            self._selector.register(self._listener, selectors.EVENT_READ, "listener")

    def _accept(self) -> None:
        for _ in range(64):
            try:
                sock, _peer = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # EMFILE, ENFILE, ENOBUFS: retry later, do not spin
                LOG.warning("http: cannot accept connections (%s); pausing %.1f s",
                            exc.strerror or exc, ACCEPT_PAUSE)
                self._selector.unregister(self._listener)
                self._accept_paused_until = time.monotonic() + ACCEPT_PAUSE
                return
            sock.setblocking(False)
            with self._busy_lock:
                busy = self._busy
            if len(self._connections) + busy >= self._max_connections and not self._make_room():
                try:
                    sock.send(_error(503, "too many connections"))
                except OSError:
                    pass
                sock.close()
                continue
            conn = _Connection(sock, time.monotonic(), self._timeout)
            self._connections[sock] = conn
            self._selector.register(sock, selectors.EVENT_READ, conn)

    def _make_room(self) -> bool:
        """Closes a lingering socket, else the oldest request still being read; False if
        every open socket is being answered."""
        if not self._connections:
            return False
        victim = min(self._connections.values(), key=lambda c: (not c.lingering, c.accepted))
        now = time.monotonic()
        if now - self._last_full_warning >= FULL_WARNING_INTERVAL:
            self._last_full_warning = now
            LOG.warning("http: %d connections open; closing the slowest to make room "
                        "(a slow or hostile client?)", self._max_connections)
        self._drop(victim)
        return True

    def _on_readable(self, conn: _Connection) -> None:
        try:
            data = conn.sock.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._drop(conn)
            return
        if conn.lingering:
            conn.dropped += len(data)
            if conn.dropped > LINGER_BYTES:
                self._drop(conn)
            return
        conn.buffer += data
        try:
            if conn.request is None and not self._read_head(conn):
                return
        except _Refusal as refusal:
            self._answer_now(conn, _error(refusal.code, refusal.message, refusal.headers))
            return
        request = conn.request
        if len(conn.buffer) >= request.length:
            request.body = bytes(conn.buffer[:request.length])
            self._hand_over(conn)

    def _read_head(self, conn: _Connection) -> bool:
        """Parses and admits the head once complete; False while it is not.

        Raises:
            _Refusal: the request is malformed, too large or not allowed.
        """
        if conn.buffer[:1] in (b"\r", b"\n"):  # blank lines before a request are tolerated
            del conn.buffer[:len(conn.buffer) - len(conn.buffer.lstrip(b"\r\n"))]
        end = _HEAD_END.search(conn.buffer)
        if end is None or end.start() > self._max_header:
            if end is not None or len(conn.buffer) > self._max_header:
                raise _Refusal(431, f"the request head is limited to {self._max_header} bytes")
            return False
        request = self._parse_head(bytes(conn.buffer[:end.start()]))
        del conn.buffer[:end.end()]
        self._admit(request)
        conn.request = request
        if request.length > len(conn.buffer) and request.version == "HTTP/1.1" and \
                request.headers.get("expect", "").lower() == "100-continue":
            try:
                conn.sock.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            except OSError:
                pass
        return True

    @staticmethod
    def _parse_head(head: bytes) -> _Request:
        lines = _LINE_END.split(head)
        parts = lines[0].decode("latin-1").split(" ")
        if len(parts) != 3 or not _METHOD.fullmatch(parts[0]) or \
                parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[1]:
            raise _Refusal(400, "malformed request line")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not _HEADER_NAME.fullmatch(name):
                raise _Refusal(400, "malformed header line")
            key = name.decode("ascii").lower()
            text = value.strip(b" \t").decode("latin-1")
            if key in headers:
                if key in _SINGLE_HEADERS:
                    raise _Refusal(400, f"duplicate {name.decode('ascii')} header")
                text = f"{headers[key]}, {text}"
            headers[key] = text
        return _Request(parts[0], parts[1].split("?", 1)[0], parts[2], headers)

    def _admit(self, request: _Request) -> None:
        """Checks a request on its head alone, so nothing is read for a refused one.

        Raises:
            _Refusal: 403 (Host, Origin, changes not allowed), 401 (token), 400/411/413
                (length), 415 (body not JSON).
        """
        headers = request.headers
        host = headers.get("host")
        # a request without Host cannot come from a browser: that is what the check is about
        if self._check_host and host is not None:
            parsed = _host_name_and_port(host)
            if parsed is None or not (is_loopback(parsed[0]) or parsed[0] == self._listen_host):
                raise _Refusal(403, f"Host {host!r} is not this endpoint's address")
        change = request.method not in READ_METHODS
        if change and "origin" in headers and not _same_origin(headers["origin"], host):
            raise _Refusal(403, "cross-origin requests are refused")
        if change or self._protect_reads:
            if self._token is not None:
                if not self._authorized(headers.get("authorization", "")):
                    raise _Refusal(401, unauthorized(self._command),
                                   ("WWW-Authenticate: Bearer",))
            elif change and not self._allow_changes:
                raise _Refusal(403, changes_refused(self._command))
        if "transfer-encoding" in headers:
            raise _Refusal(411, "send the body with a Content-Length (no Transfer-Encoding)")
        declared = headers.get("content-length")
        if declared is not None:
            if not _DIGITS.fullmatch(declared):
                raise _Refusal(400, f"Content-Length must be a byte count, got {declared!r}")
            if len(declared) > 18 or int(declared) > self._max_body:
                raise _Refusal(413, f"the request body is limited to {self._max_body} bytes")
            request.length = int(declared)
        if change and request.length:
            content_type = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            if content_type != JSON:
                raise _Refusal(415, "the request body must be application/json")

    def _authorized(self, given: str) -> bool:
        scheme, _, credentials = given.strip().partition(" ")
        presented = f"Bearer {credentials.strip()}".encode("latin-1") \
            if scheme.lower() == "bearer" else b""
        return hmac.compare_digest(presented, self._token)

    def _answer_now(self, conn: _Connection, response: bytes, linger: bool = True) -> None:
        """Sends a short answer from this thread (without blocking) and ends the request."""
        try:
            conn.sock.send(response)
            if linger:
                conn.sock.shutdown(socket.SHUT_WR)
        except OSError:
            linger = False
        if not linger:
            self._drop(conn)
            return
        conn.lingering = True
        conn.deadline = time.monotonic() + LINGER_SECONDS
        conn.buffer = bytearray()

    def _hand_over(self, conn: _Connection) -> None:
        self._selector.unregister(conn.sock)
        del self._connections[conn.sock]
        with self._busy_lock:
            self._busy += 1
        self._jobs.put((conn.sock, conn.request))

    def _drop(self, conn: _Connection) -> None:
        if self._connections.get(conn.sock) is not conn:
            return
        self._selector.unregister(conn.sock)
        del self._connections[conn.sock]
        conn.sock.close()

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for conn in list(self._connections.values()):
            self._drop(conn)
        self._selector.close()
        for sock in (self._listener, self._wake_r, self._wake_w):
            sock.close()

    # -- the workers --------------------------------------------------------------------------

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            sock, request = job
            try:
                self._respond(sock, request)
            finally:
                sock.close()
                with self._busy_lock:
                    self._busy -= 1

    def _respond(self, sock: socket.socket, request: _Request) -> None:
        try:
            code, body, content_type = self._handle(request)
        except Exception as exc:
            LOG.error("http %s %s failed: %s: %s", request.method, request.path,
                      type(exc).__name__, exc, exc_info=LOG.isEnabledFor(logging.DEBUG))
            code, body, content_type = 500, b'{"error": "internal error (see the log)"}', JSON
        try:
            sock.settimeout(self._timeout)
            sock.sendall(_response(code, body, content_type,
                                   head_only=request.method == "HEAD"))
        except OSError as exc:
            LOG.debug("http %s %s: the client went away: %s", request.method, request.path, exc)

    def _handle(self, request: _Request) -> tuple[int, bytes, str]:
        method = "GET" if request.method == "HEAD" else request.method
        path = request.path
        handler = self._routes.get((method, path))
        if handler is None:
            for (m, prefix), h in self._routes.items():
                if m == method and prefix.endswith("/") and path.startswith(prefix):
                    handler = h
        if handler is not None:
            code, value = handler(path, request.body)
            return code, json.dumps(value, default=str).encode(), JSON
        if method != "GET":
            return 405, b'{"error": "method not allowed"}', JSON
        if path == "/livez":
            return 200, b'{"alive": true}', JSON
        if path not in ("/readyz", "/healthz", "/status", "/metrics"):
            return 404, b'{"error": "not found"}', JSON
        status = self._status()
        if path == "/status":
            shown = {k: v for k, v in status.items() if k != "metrics"}
            return 200, json.dumps(shown, default=str, indent=1).encode(), JSON
        if path == "/metrics":
            return 200, prometheus_text(status, process=True).encode(), \
                "text/plain; version=0.0.4; charset=utf-8"
        ready = bool(status.get("healthy", True))
        answer: dict[str, Any] = {"healthy": ready}
        if not ready and status.get("reason"):  # e.g. how far the bindings' listing is
            answer["reason"] = status["reason"]
        return 200 if ready else 503, json.dumps(answer, default=str).encode(), JSON
