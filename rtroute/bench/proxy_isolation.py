"""`rtroute bench proxy-isolation`: can one client take the proxy from the others?

One x-rtopic exchange with 20,000 bindings over 100 queues (made on ``NAME.bindings`` directly).
A well-behaved client publishes a literal key with confirms, one at a time, for ``--seconds``
alone, then again while a hostile client publishes ``#`` (every binding matches) as fast as it
can, without confirms, a header that changes per message (so each is routed). The hostile
client is a process of its own, as a real one is (a thread of this process would take the
interpreter lock from the measured client, whatever the proxy does). Reported: both confirm
rates and their ratio, the time a new client takes to connect and open a channel, and
``/readyz``'s answer time, both while the hostile client runs, and how long the proxy takes to
stop after SIGTERM under that load. With ``--rounds N`` the alone/beside pair is measured N
times back to back and the median of the pairs' ratios is reported: on a shared machine, a
burst of other work spoils one pair instead of the figure.

A tap queue, bound with a key that ``#`` matches, counts the hostile client's messages routed in
each beside phase (reported, so that a hostile client the broker refuses is seen as no load),
and after each one the bench waits until the proxy has served what the stopped client sent.

The baseline, same run: the same two clients straight to the broker, the hostile one
publishing to ``NAME.bindings`` what the proxy sends for ``#`` (``BCC`` = one binding key per
queue): what the broker itself leaves the well-behaved client under that load.
"""
from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import socket
import statistics
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any, Callable

import pika

from rtroute.amqp import connect_blocking, frame_codec, methods
from rtroute.amqp.field_table import encode_entries, encode_table
from rtroute.bench.proxy import proxy_uri, register_rtopic
from rtroute.bench.publish import resolve_bindings_type
from rtroute.ops.netaddr import free_port

BINDINGS = 20_000
QUEUES = 100
LITERAL = "k0.a0.b0.c"  # the well-behaved client's key: one binding (of queue 0)
TAP_KEY = "tap.hostile"  # the tap queue's binding: '#' matches it, LITERAL does not


def _key(i: int) -> str:
    return f"k{i}.a{i % 7}.b{i % 13}.c"


def _start(uri: str, management_uri: str | None, in_flight: int | None = None
           ) -> tuple[subprocess.Popen, int, int]:
    port, http = free_port(), free_port()
    env = dict(os.environ, RTROUTE_URI=uri)
    if management_uri:
        env["RTROUTE_MANAGEMENT_URI"] = management_uri
    proc = subprocess.Popen([sys.executable, "-m", "rtroute.cli", "proxy", "--listen",
                             f"127.0.0.1:{port}", "--http", f"127.0.0.1:{http}",
                             "--log-level", "WARNING",
                             *(["--client-in-flight", str(in_flight)] if in_flight else [])],
                            env=env)
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


def _timed(work: Callable[[], Any]) -> float:
    started = time.monotonic()
    work()
    return time.monotonic() - started


def _readyz(http: int) -> None:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{http}/readyz", timeout=30).read()
    except urllib.error.HTTPError:
        pass  # an answer all the same


def _hog(uri: str, exchange: str, key: str, bcc: list[str] | None, stop: Any) -> None:
    """The hostile client (a process of its own): publishes ``key`` to ``exchange`` as fast as
    the other end reads, without confirms, a header that changes per message (as amqplib's
    clients send: no cached rewrite, each message routed), until ``stop`` is set.

    It writes pre-encoded frames to a blocking socket, as a fast client on another machine
    would: the pace is what the proxy (or the broker) reads, not this process's CPU (pika's
    BlockingConnection buffers every publish in its own memory at ~30 µs of CPU each, took a
    core of this 2-core machine from the broker and the proxy, and went on pushing its backlog
    for seconds after stop). At stop its socket is reset: what it had not sent is gone, as
    with a client that is killed."""
    try:
        sock = _raw_connection(uri)
    except OSError:
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    publish = frame_codec.publish_frame(1, frame_codec.shortstr(exchange),
                                        frame_codec.shortstr(key), False)
    body = frame_codec.HEAD.pack(frame_codec.FRAME_BODY, 1, 1) + b"h\xce"
    bcc_entry = encode_entries({"BCC": bcc}) if bcc else b""
    sent = 0
    try:
        while not stop.is_set():
            batch = []
            for _ in range(100):
                sent += 1
                table = b"\x01nl" + struct.pack(">q", sent) + bcc_entry
                props = struct.pack(">HHQH", 60, 0, 1, 0x2000) + _longstr(table)
                batch += (publish, frame_codec.HEAD.pack(frame_codec.FRAME_HEADER, 1,
                                                         len(props)), props, b"\xce", body)
            sock.sendall(b"".join(batch))
    except OSError:
        pass  # the proxy stopped under it
    finally:
        sock.close()


def _longstr(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _raw_connection(uri: str) -> socket.socket:
    """A socket with an AMQP 0-9-1 connection to ``uri`` (PLAIN login, no heartbeats) and
    channel 1 open."""
    params = pika.URLParameters(uri)
    sock = socket.create_connection((params.host, params.port), timeout=30)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    reader = sock.makefile("rb")

    def frame() -> bytes:
        _kind, _channel, size = frame_codec.HEAD.unpack(reader.read(7))
        return reader.read(size + 1)[:-1]

    def method(method_id: int, fields: bytes, channel: int = 0) -> None:
        sock.sendall(frame_codec.method_frame(channel, method_id, fields))

    credentials = params.credentials
    sock.sendall(b"AMQP\x00\x00\x09\x01")
    frame()  # connection.start
    login = b"\x00" + credentials.username.encode() + b"\x00" + credentials.password.encode()
    method(methods.CONNECTION_START_OK, encode_table({}) + frame_codec.shortstr("PLAIN") +
           _longstr(login) + frame_codec.shortstr("en_US"))
    tune = frame()  # connection.tune: channel_max, frame_max as offered
    method(methods.CONNECTION_TUNE_OK, tune[4:10] + b"\x00\x00")
    method(methods.CONNECTION_OPEN, frame_codec.shortstr(params.virtual_host) +
           frame_codec.shortstr("") + b"\x00")
    frame()  # open-ok
    method(methods.CHANNEL_OPEN, frame_codec.shortstr(""), channel=1)
    frame()  # channel.open-ok
    sock.settimeout(None)
    return sock


@contextlib.contextmanager
def _hog_running(*hog_args: Any) -> Iterator[None]:
    """While inside, :func:`_hog` runs with ``hog_args`` in a process of its own (started,
    and its backlog built up, on entry; stopped, or killed, on exit)."""
    context = multiprocessing.get_context("spawn")
    stop = context.Event()
    hog = context.Process(target=_hog, args=(*hog_args, stop), daemon=True)
    hog.start()
    try:
        time.sleep(1.0)  # it starts (an interpreter of its own) and its backlog builds up
        yield
    finally:
        stop.set()
        hog.join(10)
        if hog.is_alive():
            hog.kill()


def _settle(uri: str, name: str, alone: float, echo: Callable[[str], Any],
            timeout: float = 30.0) -> None:
    """Waits until a client's confirm rate is back to 80% of ``alone``: the broker goes on
    with what a stopped hostile client left in its queues and channels for a while, and a
    phase measured meanwhile would be charged for it."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if _confirm_rate(uri, name, 0.5) >= 0.8 * alone:
            return
    echo(f"(the broker did not settle within {timeout:.0f} s: the next figures are low)")


def _confirm_rate(uri: str, name: str, seconds: float) -> float:
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.confirm_delivery()
        count, started = 0, time.monotonic()
        while time.monotonic() - started < seconds:
            ch.basic_publish(name, LITERAL, b"x")
            count += 1
        return count / (time.monotonic() - started)
    finally:
        conn.close()


def _pairs(uri: str, name: str, hog_args: tuple, seconds: float, rounds: int,
           echo: Callable[[str], Any], tap: Callable[[], int],
           drained: Callable[[], None] = lambda: None
           ) -> tuple[list[float], list[float], list[float]]:
    """``rounds`` pairs of confirm rates measured back to back, alone then beside the hostile
    client (``hog_args``): the rates of a pair are measured within seconds of each other, so a
    burst of other work on a shared machine spoils one pair, not the whole figure (the median
    of the pairs' ratios is reported). Before each pair but the first the broker settles from
    the last, and after each hostile phase ``drained()`` waits until what it sent is through.
    Also returned: the hostile client's messages routed per second in each beside phase
    (``tap()``: how many reached the tap queue since the last call)."""
    alone, beside, hostile = [], [], []
    for round_ in range(rounds):
        if round_:
            _settle(uri, name, alone[-1], echo)
        alone.append(_confirm_rate(uri, name, seconds))
        with _hog_running(*hog_args):
            tap()
            started = time.monotonic()
            beside.append(_confirm_rate(uri, name, seconds))
            hostile.append(tap() / (time.monotonic() - started))
        drained()
        if rounds > 1:
            echo(f"  round {round_ + 1}: alone {alone[-1]:,.0f}, beside {beside[-1]:,.0f} "
                 f"({beside[-1] / alone[-1]:.2f}); the '#' client's messages routed: "
                 f"{hostile[-1]:,.0f}/s")
    return alone, beside, hostile


def _tap(channel: Any, queue: str) -> Callable[[], int]:
    """How many messages reached ``queue`` since the last call (it is emptied each time)."""
    def taken() -> int:
        return channel.queue_purge(queue).method.message_count
    return taken


def _drained(http: int, echo: Callable[[str], Any], sleep: Callable[[float], Any],
             timeout: float = 300.0) -> None:
    """Waits until the proxy has no client left: a hostile client's socket is reset at stop,
    but what the proxy had read of it before (up to its read-ahead, metered) still goes to the
    broker, and the next phase would be charged for it. ``sleep`` waits (the bench's broker
    connection's, which keeps its heartbeats meanwhile)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            text = urllib.request.urlopen(f"http://127.0.0.1:{http}/metrics",
                                          timeout=5).read().decode()
            if "\nrtroute_proxy_client_connections 0.0\n" in text:
                return
        sleep(0.1)
    echo(f"(the proxy still served the stopped client after {timeout:.0f} s)")


def run(uri: str, management_uri: str | None, seconds: float = 3.0,
        echo: Callable[[str], Any] = print, bindings: int = BINDINGS,
        queues: int = QUEUES, in_flight: int | None = None, rounds: int = 1
        ) -> dict[str, Any]:
    name = f"rtroute-bench-isolation-{uuid.uuid4().hex[:6]}"
    direct = pika.BlockingConnection(pika.URLParameters(uri))
    ch = direct.channel()
    proc, port, http = _start(uri, management_uri, in_flight)
    through = proxy_uri(uri, port)
    try:
        # NAME in the proxy's layout, also where the broker runs the x-rtopic plugin
        ch.exchange_declare(f"{name}.bindings", resolve_bindings_type(uri, "auto"),
                            durable=True)
        register_rtopic(ch, name, through)
        names = [f"{name}-q{i}" for i in range(queues)]
        for queue in names:
            ch.queue_declare(queue, arguments={"x-max-length": 1000})
        for i in range(bindings):
            ch.queue_bind(names[i % queues], f"{name}.bindings", _key(i))
        # one more queue, bound to nothing the measured client publishes: it counts what the
        # hostile client gets routed (a client whose frames the broker refuses is no load)
        ch.queue_declare(f"{name}-tap")
        ch.queue_bind(f"{name}-tap", f"{name}.bindings", TAP_KEY)
        tap = _tap(ch, f"{name}-tap")
        echo(f"{bindings} bindings over {queues} queues on {name}")
        alone, beside, hostile = _pairs(through, name, (through, name, "#", None), seconds,
                                        rounds, echo, tap,
                                        lambda: _drained(http, echo, direct.sleep))
        solo, loaded = statistics.median(alone), statistics.median(beside)
        ratio = statistics.median(b / a for a, b in zip(alone, beside))
        echo(f"through the proxy, alone: {solo:,.0f} confirms/s")
        echo(f"through the proxy, beside a client publishing '#' as fast as it can: "
             f"{loaded:,.0f} confirms/s ({ratio:.2f} of alone"
             + (f", median of {rounds} rounds)" if rounds > 1 else ")")
             + f"; the '#' client's messages routed meanwhile: {statistics.median(hostile):,.0f}/s")
        # the broker alone, same traffic: the hostile client sends what the proxy sends (once
        # the broker is through the backlog the last one left)
        one_per_queue = [_key(i) for i in range(min(queues, bindings))] + [TAP_KEY]
        _settle(through, name, alone[-1], echo)
        d_alone, d_beside, d_hostile = _pairs(uri, f"{name}.bindings",
                                              (uri, f"{name}.bindings", "#", one_per_queue),
                                              seconds, rounds, echo, tap)
        direct_alone, direct_loaded = statistics.median(d_alone), statistics.median(d_beside)
        direct_ratio = statistics.median(b / a for a, b in zip(d_alone, d_beside))
        echo(f"straight to the broker: alone {direct_alone:,.0f} confirms/s, beside the same "
             f"'#' traffic {direct_loaded:,.0f} ({direct_ratio:.2f} of alone); the '#' "
             f"client's messages routed meanwhile: {statistics.median(d_hostile):,.0f}/s")
        _settle(uri, f"{name}.bindings", d_alone[-1], echo)
        with _hog_running(through, name, "#", None):
            connect = _timed(lambda: connect_blocking(through).close())
            readyz = _timed(lambda: _readyz(http))
            echo(f"beside it again: a new client connected in {connect:.3f} s; /readyz "
                 f"answered in {readyz:.3f} s")
            proc.send_signal(signal.SIGTERM)
            sigterm = _timed(lambda: proc.wait(60))
            echo(f"SIGTERM under that load: stopped in {sigterm:.2f} s")
        return {"alone": solo, "loaded": loaded, "ratio": ratio, "connect_s": connect,
                "readyz_s": readyz, "sigterm_s": sigterm, "direct_alone": direct_alone,
                "direct_loaded": direct_loaded, "direct_ratio": direct_ratio,
                "hostile": statistics.median(hostile),
                "direct_hostile": statistics.median(d_hostile),
                "rounds": {"alone": alone, "beside": beside, "direct_alone": d_alone,
                           "direct_beside": d_beside}}
    finally:
        if proc.poll() is None:
            proc.kill()
        for i in range(queues):
            ch.queue_delete(f"{name}-q{i}")
        ch.queue_delete(f"{name}-tap")
        ch.exchange_delete(f"{name}.bindings")
        ch.exchange_delete(name)
        direct.close()


def json_rows(figures: dict[str, Any]) -> list[dict[str, Any]]:
    """The report rows: the confirm rate beside the hostile client against the rate alone (the
    baseline, same run; with several rounds, medians, and the ratio the median of the rounds'
    ratios, each round's rates in ``rounds``), and the answer times under that load."""
    rounds = figures.get("rounds", {})
    return [
        {"name": "confirms/s beside a '#' publisher", "value": figures["loaded"],
         "unit": "msg/s", "baseline": "the same client alone",
         "baseline_value": figures["alone"], "ratio": figures["ratio"],
         "ratio_means": "beside / alone", "direct_ratio": figures["direct_ratio"],
         "rounds": list(zip(rounds.get("alone", ()), rounds.get("beside", ()))),
         "hostile_routed_per_s": figures["hostile"]},
        {"name": "confirms/s beside the same traffic, straight to the broker",
         "value": figures["direct_loaded"], "unit": "msg/s", "baseline": "the same client alone",
         "baseline_value": figures["direct_alone"], "ratio": figures["direct_ratio"],
         "ratio_means": "beside / alone",
         "rounds": list(zip(rounds.get("direct_alone", ()), rounds.get("direct_beside", ()))),
         "hostile_routed_per_s": figures["direct_hostile"]},
        {"name": "new client connected", "value": figures["connect_s"], "unit": "s"},
        {"name": "/readyz answered", "value": figures["readyz_s"], "unit": "s"},
        {"name": "stopped after SIGTERM", "value": figures["sigterm_s"], "unit": "s"},
    ]
