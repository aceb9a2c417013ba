"""Divert tests run the sidecar as a real `rtroute run -c FILE` process (see tests/sidecar)."""
from __future__ import annotations

import json
import urllib.error
import urllib.request
import uuid
from typing import Any

import pika
import pytest

from ..sidecar.conftest import (  # noqa: F401 - fixtures shared with the sidecar tests
    SidecarProcess,
    broker_toml,
    channel,
    depth,
    drain,
    managed,
    sidecars,
    wait_depth,
)


def toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}"
                               for k, v in value.items()) + "}"
    raise TypeError(value)


def config_text(exchanges: list[dict], diverts: list[dict] = (), http: dict | None = None
                ) -> str:
    """An rtroute.toml with these ``[[exchange]]`` and ``[[divert]]`` tables."""
    lines = [broker_toml()]
    if http:
        lines += ['[http]'] + [f"{k} = {toml_value(v)}" for k, v in http.items()] + ['']
    for section, entries in (("exchange", exchanges), ("divert", diverts)):
        for entry in entries:
            lines.append(f"[[{section}]]")
            lines += [f"{k} = {toml_value(v)}" for k, v in entry.items()]
            lines.append("")
    return "\n".join(lines)


@pytest.fixture
def run_config(sidecars, tmp_path):  # noqa: F811 - the fixture imported above
    """``run_config(exchanges, diverts, http=None) -> SidecarProcess``, running every exchange."""

    def start(exchanges: list[dict], diverts: list[dict] = (), http: dict | None = None,
              wait: bool = True) -> SidecarProcess:
        path = tmp_path / f"rtroute-{uuid.uuid4().hex[:6]}.toml"
        path.write_text(config_text(exchanges, diverts, http))
        sc = sidecars("-c", str(path))
        token = (http or {}).get("token")
        if token:
            sc.status = lambda: _status_with_token(sc, token)  # type: ignore[method-assign]
        if wait:
            for e in exchanges:
                sc.wait_running(e["name"])
        return sc

    return start


def _status_with_token(sc: SidecarProcess, token: str) -> dict | None:
    code, status = http(sc, "GET", "/status", token=token) if sc.proc.poll() is None \
        else (0, None)
    return status if code == 200 else None


class BrokerObjects:
    """Plain queues and exchanges a test declares; deleted at teardown."""

    def __init__(self, ch) -> None:
        self.channel = ch
        self.queues: list[str] = []
        self.exchanges: list[str] = []

    def queue(self, name: str, bind: tuple[str, str] | None = None) -> str:
        self.channel.queue_declare(name, durable=True)  # RabbitMQ 4.x deprecates transient ones
        self.queues.append(name)
        if bind is not None:
            self.channel.queue_bind(name, bind[0], bind[1])
        return name

    def exchange(self, name: str, kind: str = "fanout") -> str:
        self.channel.exchange_declare(name, kind)
        self.exchanges.append(name)
        return name

    def dead_letters(self) -> str:
        """A private queue bound to rtroute.dead (other tests drain the shared one)."""
        self.channel.exchange_declare("rtroute.dead", "fanout", durable=True)
        return self.queue(f"rtroute-test.dead.{uuid.uuid4().hex[:8]}", bind=("rtroute.dead", ""))


@pytest.fixture
def objects(broker_uri):
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    objs = BrokerObjects(conn.channel())
    yield objs
    ch = conn.channel() if conn.is_open else None
    if ch is not None:
        for q in objs.queues:
            ch.queue_delete(q)
        for e in objs.exchanges:
            ch.exchange_delete(e)
        conn.close()


def http(sc: SidecarProcess, method: str, path: str, body: Any = None,
         token: str | None = None) -> tuple[int, Any]:
    """One request to the sidecar's endpoint: ``(status, decoded JSON)``."""
    data = None if body is None else (body if isinstance(body, bytes)
                                      else json.dumps(body).encode())
    request = urllib.request.Request(f"http://127.0.0.1:{sc.port}{path}", data=data,
                                     method=method)
    if data is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=15) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")
    except OSError:
        return 0, None


def divert_status(sc: SidecarProcess, name: str) -> dict:
    st = sc.status() or {}
    return next((d for d in st.get("diverts", []) if d["name"] == name), {})


STORE_PARAMETER = "rtroute.diverts./"
"""The global parameter that keeps the run-time diverts of the vhost ``/``."""


@pytest.fixture
def store(mgmt):
    """The stored diverts of the vhost ``/`` (a DivertStore), empty before and after the test."""
    from rtroute.sidecar.divert_store import DivertStore

    mgmt.delete_global_parameter(STORE_PARAMETER)
    yield DivertStore(mgmt, "/")
    mgmt.delete_global_parameter(STORE_PARAMETER)
