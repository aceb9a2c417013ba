"""`rtroute bench scale`: how long ``rtroute proxy`` and ``rtroute run`` (the sidecar) take from
their start to the first publish they route, over an x-rtopic exchange of N bindings, and their
memory then.

For each N the topology is made with definitions imports through the management API (much
faster than N ``queue.bind``; 25,000 bindings an import: the API limits a body's size): the exchange ``NAME`` in the proxy's layout (the marked fanout,
``NAME.bindings`` with N bindings of 4-word keys over ``--queues`` queues, the registration),
in the vhost of ``--uri`` (use a vhost other than ``/`` to measure what issue #47 measured).
Then, one process at a time:

- the proxy: started, a client connects through it as soon as it listens and publishes (with
  confirms) the key of the first binding; timed until that message is in its queue. A client
  refused meanwhile (541) connects again.
- the sidecar (``--rtopic NAME``): started, a client publishes to ``NAME`` on the broker every
  0.1 s; timed until the first message is in the queue (the sidecar consumes its ingress only
  once the bindings are known).

With ``idle`` seconds (``--idle``), each process is then left idle that long and the broker's
CPU meanwhile (the median of 5-s spans) is read from ``/proc/PID/stat`` of its node (``os_pid`` in the management API:
a broker on this machine only), beside the same span with neither process running: what an
idle proxy or sidecar costs the broker (its event consumption, its re-listings).

``/readyz`` of each is polled meanwhile: the time it first said 200 is reported beside the first
route (it should not come before). RSS is the process's ``VmRSS`` at the first route (and its
peak, ``VmHWM``). The topology is deleted after each N. ``RTROUTE_BENCH_PYTHONPATH`` runs the
processes from another checkout (to measure before a change: its ``PYTHONPATH``).
"""
from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from typing import Any, Callable

import pika

from rtroute.amqp import connect_blocking
from rtroute.amqp.management import ManagementClient, ManagementError, NotFound
from rtroute.bench.proxy import proxy_uri
from rtroute.ops.netaddr import free_port
from rtroute.routing.delivery_plan import bindings_exchange_type
from rtroute.routing.rtopic_layout import (
    BINDINGS_SUFFIX,
    LAYOUT_ARGUMENT,
    LAYOUT_VALUE,
    REGISTRY_EXCHANGE,
)

__all__ = ["definitions", "json_rows", "run"]

INGRESS_PREFIX = "rtroute.ingress."
WORDS = ("app", "eu", "db", "web", "core", "log", "ops")
IMPORT_BATCH = 25_000  # bindings per definitions import


def definitions(name: str, bindings: int, queues: int, bindings_type: str) -> dict[str, Any]:
    """One vhost's definitions: ``name`` in the proxy's layout with ``bindings`` bindings of
    4-word keys (``w.kI.w.w``, each key once) spread over ``queues`` queues
    ``NAME.q0 ...``; binding 0 (key :func:`first_key`) goes to ``NAME.q0``."""
    exchange = {"durable": True, "auto_delete": False, "internal": False}
    return {
        "exchanges": [
            {"name": name, "type": "fanout", **exchange,
             "arguments": {LAYOUT_ARGUMENT: LAYOUT_VALUE}},
            {"name": name + BINDINGS_SUFFIX, "type": bindings_type, **exchange, "arguments": {}},
            {"name": REGISTRY_EXCHANGE, "type": "direct", "durable": True,
             "auto_delete": False, "internal": True, "arguments": {}}],
        "queues": [{"name": f"{name}.q{i}", "durable": True, "auto_delete": False,
                    "arguments": {}} for i in range(queues)],
        "bindings": [{"source": REGISTRY_EXCHANGE, "destination": name + BINDINGS_SUFFIX,
                      "destination_type": "exchange", "routing_key": name, "arguments": {}}] +
                    [{"source": name + BINDINGS_SUFFIX, "destination": f"{name}.q{i % queues}",
                      "destination_type": "queue", "routing_key": _key(i), "arguments": {}}
                     for i in range(bindings)],
    }


def _key(i: int) -> str:
    return f"{WORDS[i % 7]}.k{i}.{WORDS[(i // 7) % 7]}.{WORDS[(i // 49) % 7]}"


def first_key() -> str:
    """The key of binding 0 (to ``NAME.q0``)."""
    return _key(0)


def _rss(pid: int) -> tuple[float, float]:
    """``(VmRSS, VmHWM)`` of ``pid`` in MiB (0 where /proc does not say)."""
    found = {"VmRSS": 0.0, "VmHWM": 0.0}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                field, _, value = line.partition(":")
                if field in found:
                    found[field] = int(value.split()[0]) / 1024
    except OSError:
        pass
    return found["VmRSS"], found["VmHWM"]


def broker_pid(api: ManagementClient) -> int | None:
    """The OS pid of the broker's node when it runs on this machine (its /proc readable)."""
    try:
        pid = int(api.request("GET", "nodes")[0]["os_pid"])
    except (ManagementError, LookupError, TypeError, ValueError):
        return None
    return pid if os.path.exists(f"/proc/{pid}/stat") else None


def cpu_share(pid: int | None, seconds: float, window: float = 5.0) -> float | None:
    """The share of one core process ``pid`` used over the next ``seconds``: the median of
    its ``window``-second spans (a burst of another user of a shared broker moves it less
    than a mean would; None: unknown)."""
    if pid is None or seconds <= 0:
        return None

    def used() -> float:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    shares = []
    try:
        for _ in range(max(1, round(seconds / window))):
            before, begun = used(), time.monotonic()
            time.sleep(min(window, seconds))
            shares.append((used() - before) / (time.monotonic() - begun))
    except (OSError, IndexError, ValueError):
        return None
    return statistics.median(shares)


class _Readyz:
    """Polls ``/readyz`` of a process every 0.1 s; ``ready_at`` is when it first said 200 and
    ``reasons`` the 503 reasons seen (the last of each kind)."""

    def __init__(self, port: int, started: float) -> None:
        self.port, self.started = port, started
        self.ready_at: float | None = None
        self.up_at: float | None = None  # when the endpoint first answered
        self.reasons: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(0.1) and self.ready_at is None:
            now = time.monotonic() - self.started
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/readyz",
                                            timeout=3) as answer:
                    if answer.status == 200:
                        self.ready_at = now
                        self.up_at = self.up_at or now
            except urllib.error.HTTPError as exc:
                self.up_at = self.up_at or now
                reason = str(json.loads(exc.read() or b"{}").get("reason") or "")
                if reason and (not self.reasons or self.reasons[-1].split(":")[0]
                               != reason.split(":")[0]):
                    self.reasons.append(reason)
                elif reason:
                    self.reasons[-1] = reason
            except (OSError, ValueError):
                pass  # not listening yet

    def stop(self, wait: float = 0.0) -> None:
        """Stops polling (after up to ``wait`` s more for a 200, when there was a route)."""
        deadline = time.monotonic() + wait
        while self.ready_at is None and time.monotonic() < deadline:
            time.sleep(0.05)
        self._stop.set()
        self._thread.join(5)


def _child_cwd() -> str | None:
    """Where the processes run: ``python -m`` puts its directory first on the path, so with
    ``RTROUTE_BENCH_PYTHONPATH`` they run from there (not from a checkout in the cwd)."""
    return os.environ.get("RTROUTE_BENCH_PYTHONPATH") or None


def _child_env(uri: str, management_uri: str | None) -> dict[str, str]:
    env = dict(os.environ, RTROUTE_URI=uri)  # not in argv, where ps shows it
    if management_uri:
        env["RTROUTE_MANAGEMENT_URI"] = management_uri
    other = os.environ.get("RTROUTE_BENCH_PYTHONPATH")
    if other:
        env["PYTHONPATH"] = other
    return env


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def _take(channel: Any, queue: str) -> bool:
    method, _props, _body = channel.basic_get(queue, auto_ack=True)
    return method is not None


def time_proxy(uri: str, management_uri: str | None, name: str, timeout: float,
               echo: Callable[[str], Any], idle: float = 0.0,
               broker: int | None = None) -> dict[str, Any]:
    """Starts ``rtroute proxy``; seconds to the first publish routed through it, RSS."""
    port, http = free_port(), free_port()
    direct = connect_blocking(uri)
    check = direct.channel()
    check.queue_purge(f"{name}.q0")  # what an earlier run left
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "rtroute.cli", "proxy", "--listen",
                             f"127.0.0.1:{port}", "--http", f"127.0.0.1:{http}",
                             "--log-level", "warning"], env=_child_env(uri, management_uri),
                            cwd=_child_cwd())
    readyz = _Readyz(http, started)
    figures: dict[str, Any] = {"first_route_s": None, "refused": 0}
    try:
        while time.monotonic() - started < timeout and proc.poll() is None:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except OSError:  # not listening yet
                time.sleep(0.02)
                continue
            figures.setdefault("listening_s", time.monotonic() - started)
            try:
                through = connect_blocking(proxy_uri(uri, port), heartbeat=0)
            except Exception:  # noqa: BLE001 - refused at the handshake: again
                figures["refused"] += 1
                continue
            try:
                channel = through.channel()
                channel.confirm_delivery()
                channel.basic_publish(name, first_key(), b"first")
            except pika.exceptions.AMQPError as exc:
                figures["refused"] += 1
                echo(f"  proxy: publish refused ({exc!r}); again")
                continue
            finally:
                if through.is_open:
                    through.close()
            while time.monotonic() - started < timeout:
                if _take(check, f"{name}.q0"):
                    figures["first_route_s"] = time.monotonic() - started
                    break
                direct.sleep(0.01)
            break
        figures["rss_mib"], figures["peak_rss_mib"] = _rss(proc.pid)
        if figures["first_route_s"] is not None:
            figures["idle_broker_cpu"] = cpu_share(broker, idle)
    finally:
        readyz.stop(10.0 if figures["first_route_s"] is not None else 0.0)
        _stop(proc)
        direct.close()
    figures["ready_s"], figures["readyz_reasons"] = readyz.ready_at, readyz.reasons
    figures["http_up_s"] = readyz.up_at
    return figures


def time_sidecar(uri: str, management_uri: str | None, name: str, timeout: float,
                 echo: Callable[[str], Any], idle: float = 0.0,
                 broker: int | None = None) -> dict[str, Any]:
    """Starts ``rtroute run --rtopic NAME``; seconds to the first message it routed, RSS."""
    http = free_port()
    direct = connect_blocking(uri)
    channel = direct.channel()
    channel.queue_purge(f"{name}.q0")  # what an earlier run left
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "rtroute.cli", "run", "--rtopic", name,
                             "--http", f"127.0.0.1:{http}", "--log-level", "warning"],
                            env=_child_env(uri, management_uri), cwd=_child_cwd())
    readyz = _Readyz(http, started)
    figures: dict[str, Any] = {"first_route_s": None}
    try:
        last_publish = 0.0
        while time.monotonic() - started < timeout and proc.poll() is None:
            if time.monotonic() - last_publish >= 0.1:
                channel.basic_publish(name, first_key(), b"first")
                last_publish = time.monotonic()
            if _take(channel, f"{name}.q0"):
                figures["first_route_s"] = time.monotonic() - started
                break
            direct.sleep(0.01)
        figures["rss_mib"], figures["peak_rss_mib"] = _rss(proc.pid)
        if figures["first_route_s"] is not None:
            figures["idle_broker_cpu"] = cpu_share(broker, idle)
    finally:
        readyz.stop(10.0 if figures["first_route_s"] is not None else 0.0)
        _stop(proc)
        try:
            direct.channel().queue_delete(INGRESS_PREFIX + name)
        finally:
            direct.close()
    if figures["first_route_s"] is None:
        echo(f"  sidecar: nothing routed within {timeout:g} s")
    figures["ready_s"], figures["readyz_reasons"] = readyz.ready_at, readyz.reasons
    figures["http_up_s"] = readyz.up_at
    return figures


def run(uri: str, management_uri: str | None, sizes: list[int], queues: int = 100,
        timeout: float = 120.0, echo: Callable[[str], Any] = print,
        idle: float = 0.0) -> list[dict[str, Any]]:
    """Per N of ``sizes``: the topology imported, then the proxy's and the sidecar's start to
    first route and RSS (and, with ``idle`` seconds, the broker's CPU while each idles).
    Returns one row per N."""
    api = ManagementClient.from_amqp_uri(uri, management_uri, timeout=900.0)
    broker = broker_pid(api) if idle > 0 else None
    if idle > 0 and broker is None:
        echo("  idle broker CPU: not measured (the broker's node is not on this machine)")
    parameters = pika.URLParameters(uri)
    vhost = parameters.virtual_host
    made = _ensure_vhost(api, vhost, parameters.credentials.username, echo)
    try:
        return _runs(api, uri, management_uri, vhost, sizes, queues, timeout, echo, idle,
                     broker)
    finally:
        if made:
            _forget(api.request, "DELETE", f"vhosts/{_q(vhost)}")


def _ensure_vhost(api: ManagementClient, vhost: str, user: str,
                  echo: Callable[[str], Any]) -> bool:
    """Creates ``vhost`` with every permission for ``user`` unless it exists; True if it was
    created (the bench then deletes it at the end)."""
    try:
        api.request("GET", f"vhosts/{_q(vhost)}")
        return False
    except NotFound:
        pass
    echo(f"vhost {vhost!r} does not exist: creating it for the bench (deleted at the end)")
    api.request("PUT", f"vhosts/{_q(vhost)}", {})
    api.request("PUT", f"permissions/{_q(vhost)}/{_q(user)}",
                {"configure": ".*", "write": ".*", "read": ".*"})
    return True


def _runs(api: ManagementClient, uri: str, management_uri: str | None, vhost: str,
          sizes: list[int], queues: int, timeout: float, echo: Callable[[str], Any],
          idle: float, broker: int | None) -> list[dict[str, Any]]:
    with connect_blocking(uri) as conn:
        version = conn._impl.server_properties.get("version")
    if isinstance(version, bytes):
        version = version.decode()
    rows = []
    for n in sizes:
        name = f"rtroute-scale-{n}-{uuid.uuid4().hex[:6]}"
        echo(f"{n:,} bindings over {queues} queues: importing {name} into vhost {vhost!r}")
        begun = time.monotonic()
        defs = definitions(name, n, queues, bindings_exchange_type(version))
        bindings = defs.pop("bindings")
        api.import_definitions(defs, vhost)
        # in parts: the API refuses a body over its limit (~20 MB: ~100,000 bindings)
        for start in range(0, len(bindings), IMPORT_BATCH):
            api.import_definitions({"bindings": bindings[start:start + IMPORT_BATCH]}, vhost)
        imported = time.monotonic() - begun
        try:
            row: dict[str, Any] = {
                "bindings": n, "import_s": imported,
                "idle_broker_cpu": cpu_share(broker, idle),  # neither process running
                "proxy": time_proxy(uri, management_uri, name, timeout, echo, idle, broker),
                "sidecar": time_sidecar(uri, management_uri, name, timeout, echo, idle,
                                        broker)}
        finally:
            for i in range(queues):
                _forget(api.request, "DELETE", f"queues/{_q(vhost)}/{_q(f'{name}.q{i}')}")
            for exchange in (name + BINDINGS_SUFFIX, name):
                _forget(api.request, "DELETE", f"exchanges/{_q(vhost)}/{_q(exchange)}")
        rows.append(row)
        for who in ("proxy", "sidecar"):
            f = row[who]
            echo(f"  {who}: first route {_s(f['first_route_s'])}, /readyz 200 at "
                 f"{_s(f['ready_s'])} (HTTP up at {_s(f['http_up_s'])}), RSS {f.get('rss_mib', 0):.0f} MiB (peak "
                 f"{f.get('peak_rss_mib', 0):.0f})" + (
                     "" if f.get("idle_broker_cpu") is None else
                     f", idle broker CPU {f['idle_broker_cpu']:.1%} of a core (neither "
                     f"running: {row['idle_broker_cpu'] or 0:.1%})"))
    return rows


def _s(seconds: float | None) -> str:
    return "never" if seconds is None else f"{seconds:.2f} s"


def _q(text: str) -> str:
    from urllib.parse import quote

    return quote(text, safe="")


def _forget(request: Callable[..., Any], *args: Any) -> None:
    try:
        request(*args)
    except NotFound:
        pass


def json_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The report rows: per N and process, start to first route (s) and RSS (MiB)."""
    out = []
    for row in rows:
        for who in ("proxy", "sidecar"):
            f = row[who]
            out.append({"name": f"{who}, {row['bindings']:,} bindings: start to first route",
                        "value": f["first_route_s"], "unit": "s", "ready_s": f["ready_s"],
                        "http_up_s": f["http_up_s"], "listening_s": f.get("listening_s"),
                        "import_s": row["import_s"], "readyz_reasons": f["readyz_reasons"][-3:]})
            out.append({"name": f"{who}, {row['bindings']:,} bindings: RSS at first route",
                        "value": f.get("rss_mib"), "unit": "MiB",
                        "peak": f.get("peak_rss_mib")})
            if f.get("idle_broker_cpu") is not None:
                out.append({"name": f"{who}, {row['bindings']:,} bindings: idle broker CPU",
                            "value": f["idle_broker_cpu"], "unit": "cores",
                            "neither_running": row.get("idle_broker_cpu")})
    return out
