"""`rtroute bench proxy-isolation`: can one client take the proxy from the others?

One x-rtopic exchange with 20,000 bindings over 100 queues (made on ``NAME.bindings`` directly).
A well-behaved client publishes a literal key with confirms, one at a time, for ``--seconds``
alone, then again while a hostile client publishes ``#`` (every binding matches) as fast as it
can, without confirms, a header that changes per message (so each is routed). Reported: both confirm rates and their ratio, the time a new client
takes to connect and open a channel, and ``/readyz``'s answer time, both while the hostile
client runs, and how long the proxy takes to stop after SIGTERM under that load.
"""
from __future__ import annotations

import os
import signal
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
from rtroute.bench.proxy import proxy_uri
from rtroute.netaddr import free_port

BINDINGS = 20_000
QUEUES = 100


def _start(uri: str, management_uri: str | None) -> tuple[subprocess.Popen, int, int]:
    port, http = free_port(), free_port()
    env = dict(os.environ, RTROUTE_URI=uri)
    if management_uri:
        env["RTROUTE_MANAGEMENT_URI"] = management_uri
    proc = subprocess.Popen([sys.executable, "-m", "rtroute.cli", "proxy", "--listen",
                             f"127.0.0.1:{port}", "--http", f"127.0.0.1:{http}",
                             "--log-level", "WARNING"], env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            connect_blocking(proxy_uri(uri, port)).close()
            return proc, port, http
        except Exception:  # noqa: BLE001 - not up yet
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("rtroute proxy did not come up") from None
            time.sleep(0.2)


def _confirm_rate(uri: str, name: str, seconds: float) -> float:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        count, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            ch.basic_publish(name, "k0.a0.b0.c", b"x")
            count += 1
        return count / (time.monotonic() - started)
    finally:
        conn.close()


def _timed(work: Callable[[], Any]) -> float:
    started = time.monotonic()
    work()
    return time.monotonic() - started


def _readyz(http: int) -> None:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=30).read()
    except urllib.error.HTTPError:
        pass  # an answer all the same


def run(uri: str, management_uri: str | None, seconds: float = 3.0,
        echo: Callable[[str], Any] = print, bindings: int = BINDINGS,
        queues: int = QUEUES) -> dict[str, float]:
    name = f"rtroute-bench-isolation-{uuid.uuid4().hex[:6]}"
    direct = pika.BlockingConnection(pika.URLParameters(uri))
    ch = direct.channel()
    proc, port, http = _start(uri, management_uri)
    through = proxy_uri(uri, port)
    stop = threading.Event()
    try:
        setup = pika.BlockingConnection(pika.URLParameters(through))
        setup.channel().exchange_declare(name, "x-rtopic", auto_delete=False)
        setup.close()
        names = [f"{name}-q{i}" for i in range(queues)]
        for queue in names:
            ch.queue_declare(queue, arguments={"x-max-length": 1000})
        for i in range(bindings):
            ch.queue_bind(names[i % queues], f"{name}.bindings", f"k{i}.a{i % 7}.b{i % 13}.c")
        echo(f"{bindings} bindings over {queues} queues on {name}")
        solo = _confirm_rate(through, name, seconds)
        echo(f"alone: {solo:,.0f} confirms/s")

        def hog() -> None:
            conn = pika.BlockingConnection(pika.URLParameters(through))
            out = conn.channel()
            sent = 0
            while not stop.is_set():
                try:
                    # a header that changes per message, as amqplib's clients send: no cached
                    # rewrite, each message routed and planned
                    sent += 1
                    out.basic_publish(name, "#", b"h", pika.BasicProperties(headers={"n": sent}))
                    conn.process_data_events(0)
                except Exception:  # noqa: BLE001 - the proxy stopped under it
                    return
            conn.close()

        hogs = threading.Thread(target=hog, daemon=True)
        hogs.start()
        time.sleep(0.5)  # its backlog builds up
        loaded = _confirm_rate(through, name, seconds)
        connect = _timed(lambda: connect_blocking(through).close())
        readyz = _timed(lambda: _readyz(http))
        echo(f"beside a client publishing '#' as fast as it can: {loaded:,.0f} confirms/s "
             f"({loaded / solo:.2f} of alone); a new client connected in {connect:.3f} s; "
             f"/readyz answered in {readyz:.3f} s")
        proc.send_signal(signal.SIGTERM)
        sigterm = _timed(lambda: proc.wait(60))
        echo(f"SIGTERM under that load: stopped in {sigterm:.2f} s")
        return {"alone": solo, "loaded": loaded, "ratio": loaded / solo, "connect_s": connect,
                "readyz_s": readyz, "sigterm_s": sigterm}
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
        for i in range(queues):
            ch.queue_delete(f"{name}-q{i}")
        ch.exchange_delete(f"{name}.bindings")
        ch.exchange_delete(name)
        direct.close()


def json_rows(figures: dict[str, float]) -> list[dict[str, Any]]:
    """The report rows: the confirm rate beside the hostile client against the rate alone (the
    baseline, same run), and the answer times under that load."""
    return [
        {"name": "confirms/s beside a '#' publisher", "value": figures["loaded"],
         "unit": "msg/s", "baseline": "the same client alone",
         "baseline_value": figures["alone"], "ratio": figures["ratio"],
         "ratio_means": "beside / alone"},
        {"name": "new client connected", "value": figures["connect_s"], "unit": "s"},
        {"name": "/readyz answered", "value": figures["readyz_s"], "unit": "s"},
        {"name": "stopped after SIGTERM", "value": figures["sigterm_s"], "unit": "s"},
    ]
