"""The operations endpoint: ``/healthz``, ``/status`` (JSON) and ``/metrics`` (Prometheus).

Runs a small threaded HTTP server beside the sidecar/shovel loops. It only reads snapshots
that the loops publish (a callable returning plain data), so it never touches pika objects.
Listening beyond loopback requires a bearer token.
"""
from __future__ import annotations

import hmac
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from rtroute.netaddr import is_loopback, split_listen

StatusProvider = Callable[[], dict]
Route = Callable[[str, bytes], tuple[int, Any]]


def prometheus_text(status: dict) -> str:
    """Renders ``status["metrics"]``: ``{name: {"help": str, "type": str, "samples":
    [(labels dict, value)]}}`` in the Prometheus text format."""
    lines = []
    for name, metric in sorted(status.get("metrics", {}).items()):
        lines.append(f"# HELP {name} {metric.get('help', name)}")
        lines.append(f"# TYPE {name} {metric.get('type', 'counter')}")
        for labels, value in metric.get("samples", []):
            label_text = ",".join(
                f'{k}="{str(v).replace(chr(92), chr(92) * 2).replace(chr(34), chr(92) + chr(34))}"'
                for k, v in sorted(labels.items()))
            lines.append(f"{name}{{{label_text}}} {value}" if label_text else f"{name} {value}")
    return "\n".join(lines) + "\n"


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
            else:
                merged.setdefault(key, value)
    return merged


class OpsServer:
    """Serves the status of a running process over HTTP.

    Args:
        listen: ``host:port``; port 0 picks a free one (see :attr:`port`).
        status: returns ``{"healthy": bool, ..., "metrics": {...}}``; everything but
            ``metrics`` is served as ``/status``.
        token: required (``Authorization: Bearer TOKEN``) when listening beyond loopback.
        routes: extra ``{(method, path): handler(path, body) -> (code, json_value)}``.

    Raises:
        ValueError: a non-loopback address without a token.
    """

    def __init__(self, listen: str, status: StatusProvider, token: str | None = None,
                 routes: dict[tuple[str, str], Route] | None = None) -> None:
        host, port = split_listen(listen)
        if not is_loopback(host) and not token:
            raise ValueError(f"http listen {listen!r} is not loopback: set a token")
        self._status = status
        self._token = token
        self._routes = dict(routes or {})
        self._httpd = ThreadingHTTPServer((host, port), self._handler_class())
        self._httpd.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self._httpd.server_address[1]

    def start(self) -> OpsServer:
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="rtroute-http",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def _handler_class(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep stderr for the process's logs
                pass

            def _send(self, code: int, body: str, ctype: str = "application/json") -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if not server._token:
                    return True
                given = self.headers.get("Authorization", "")
                return hmac.compare_digest(given, f"Bearer {server._token}")

            def _dispatch(self, method: str) -> None:
                if not self._authorized():
                    return self._send(401, json.dumps({"error": "unauthorized"}))
                path = self.path.split("?", 1)[0]
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                try:
                    handler = server._routes.get((method, path))
                    if handler is None:
                        for (m, prefix), h in server._routes.items():
                            if m == method and prefix.endswith("/") and path.startswith(prefix):
                                handler = h
                    if handler is not None:
                        code, value = handler(path, body)
                        return self._send(code, json.dumps(value, default=str))
                    if method != "GET":
                        return self._send(405, json.dumps({"error": "method not allowed"}))
                    status = server._status()
                    if path == "/healthz":
                        ok = bool(status.get("healthy", True))
                        return self._send(200 if ok else 503, json.dumps({"healthy": ok}))
                    if path == "/status":
                        shown = {k: v for k, v in status.items() if k != "metrics"}
                        return self._send(200, json.dumps(shown, default=str, indent=1))
                    if path == "/metrics":
                        return self._send(200, prometheus_text(status),
                                          "text/plain; version=0.0.4")
                    return self._send(404, json.dumps({"error": "not found"}))
                except Exception as exc:  # noqa: BLE001 - an endpoint error must not kill serving
                    return self._send(500, json.dumps({"error": str(exc)}))

            def do_GET(self) -> None:
                self._dispatch("GET")

            def do_POST(self) -> None:
                self._dispatch("POST")

            def do_DELETE(self) -> None:
                self._dispatch("DELETE")

        return Handler
