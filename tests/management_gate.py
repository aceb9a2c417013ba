"""A gate in front of the real management API of the broker under test: every request passes
through unchanged, but the bindings listing of one exchange is held until the test opens the
gate (a listing as slow as the broker's at 300,000 bindings, on demand) or fails it. A vhost's
definitions export is held alike: where the broker keeps every binding in it (4.3), rtroute
reads a big exchange's bindings from it (rtroute.amqp.definitions_export)."""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import quote

__all__ = ["ManagementGate"]


class ManagementGate:
    """``url`` is a management URL to give the process under test (``--management-uri``).

    Args:
        upstream: the real API (``http://127.0.0.1:15672/``).
        exchange: whose ``/bindings/source`` listing is held (``open()`` lets it through,
            ``fail(status, text)`` answers it with that error instead).
    """

    def __init__(self, upstream: str, exchange: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.held_path = f"/{quote(exchange, safe='')}/bindings/source"
        self.opened = threading.Event()
        self.holding = 0  # listings held now
        self.failure: tuple[int, str] | None = None
        gate = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path.endswith(gate.held_path) or path.startswith("/api/definitions/"):
                    gate.holding += 1
                    try:
                        gate.opened.wait(120)
                    finally:
                        gate.holding -= 1
                    if gate.failure is not None:
                        self._answer(gate.failure[0], gate.failure[1].encode())
                        return
                self._forward()

            do_PUT = do_POST = do_DELETE = lambda self: self._forward()

            def _forward(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                request = urllib.request.Request(gate.upstream + self.path, data=body,
                                                 method=self.command)
                for name in ("Authorization", "Content-Type"):
                    if self.headers.get(name):
                        request.add_header(name, self.headers[name])
                try:
                    with urllib.request.urlopen(request, timeout=60) as answer:
                        self._answer(answer.status, answer.read())
                except urllib.error.HTTPError as exc:
                    self._answer(exc.code, exc.read())

            def _answer(self, status: int, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def open(self) -> None:
        """Lets the held listings (and every later one) through."""
        self.opened.set()

    def hold(self) -> None:
        """Holds the later listings again (a listing already let through goes on)."""
        self.opened.clear()

    def fail(self, status: int, reason: str) -> None:
        """Answers the held listings (and every later one) with ``status`` and ``reason``."""
        self.failure = (status, json.dumps({"error": "gate", "reason": reason}))
        self.opened.set()

    def close(self) -> None:
        self.opened.set()
        self._server.shutdown()
        self._server.server_close()
