"""`rtroute bench publish`: publisher-side routing against a native topic exchange, the sidecar
and (with a broker that has it) the x-rtopic plugin, in one run.

Every path delivers the same messages to the same queues and is timed from the first publish
until the queues hold every copy. The table: 10,000 bindings, of which 1, 10 or 100 queues
match each message, and for one queue the four key shapes (literal, ``*``, trailing ``#``,
leading ``#``).

- **native topic exchange**: the wildcards sit in the binding keys (``*.app1.mod1.t0``), the
  publisher publishes a literal key; what a user without rtopic would do.
- **publisher-side** (:class:`rtroute.RTopicPublisher`): plain binding keys on
  ``NAME.bindings``; the wildcard is in the publish key; routed here, one publish with BCC.
- **publisher-side, matched key** (``delivery="matched-key"``): the same, but a message that
  matched one binding key is published with that key as its routing key and no BCC (the key as
  published in the ``x-rtroute-routing-key`` header).
- **publisher-side, matched key, no header** (``published_key_header=None`` too): the same
  without that header, so the broker routes a plain publish.
- **sidecar**: the same, published to ``NAME`` through an ``rtroute run`` process.
- **x-rtopic plugin** (``--plugin-uri``): the same plain binding keys on an ``x-rtopic``
  exchange of the plugin's broker (not the same broker: compare its column with care).

Each scenario runs ``repeat`` times, the paths alternating, and reports the median rates.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import statistics
import subprocess
import sys
import time
import urllib.request
import uuid
from dataclasses import dataclass
from typing import Any, Callable

import pika

from rtroute.amqp import connect_blocking, publish
from rtroute.amqp.publish_tool import HEADER_VARIANTS
from rtroute.bench import traffic
from rtroute.bench.measure import wait_for_depth
from rtroute.bench.traffic import Traffic
from rtroute.config.constants import DEFAULT_URI
from rtroute.ops.netaddr import free_port

BINDINGS = 10_000
BODY = 100


@dataclass(frozen=True)
class Shape:
    """``matched`` queues get each message; ``rtopic_key`` is what rtopic publishers send,
    ``topic_binding`` what the native topic exchange's queues are bound with (its publisher
    sends ``topic_key``)."""

    label: str
    matched: int
    messages: int
    rtopic_key: str
    topic_binding: str
    topic_key: str = "hit.app1.mod1.t0"
    name: str = ""  # what ``rtroute bench publish --scenario`` calls it
    # varied traffic (many keys in turn, their own bindings; see rtroute.bench.traffic): then
    # ``matched``, the keys and ``topic_binding`` above are not used
    traffic: Traffic | None = None
    vary_header: bool = False  # a header whose value changes per message

    @property
    def rtopic_keys(self) -> list[str]:
        """What rtopic publishers send, in turn."""
        return list(self.traffic.rtopic_keys) if self.traffic else [self.rtopic_key]

    @property
    def topic_keys(self) -> list[str]:
        """What the native topic exchange's publisher sends, in turn."""
        return list(self.traffic.topic_keys) if self.traffic else [self.topic_key]

    def copies(self, messages: int | None = None) -> int:
        """The copies ``messages`` (default: the shape's count) deliver in all."""
        messages = self.messages if messages is None else messages
        return self.traffic.total_copies(messages) if self.traffic else messages * self.matched

    @property
    def queue_count(self) -> int:
        return self.traffic.queues if self.traffic else self.matched

    def rtopic_bindings(self) -> list[tuple[int, str]]:
        """``(queue, key)`` on ``NAME.bindings`` and the plugin's exchange."""
        if self.traffic:
            return list(self.traffic.rtopic_bindings)
        return [(i, f"hit.app1.mod1.t{i}") for i in range(self.matched)]

    def topic_bindings(self) -> list[tuple[int, str]]:
        """``(queue, key)`` on the native topic exchange."""
        if self.traffic:
            return list(self.traffic.topic_bindings)
        return [(i, self.topic_binding) for i in range(self.matched)]


SHAPES = [
    Shape("1 queue/msg, literal key", 1, 40_000, "hit.app1.mod1.t0", "hit.app1.mod1.t0",
          name="literal"),
    Shape("1 queue/msg, *.app1.mod1.t0", 1, 40_000, "*.app1.mod1.t0", "*.app1.mod1.t0",
          name="star"),
    Shape("1 queue/msg, hit.#", 1, 40_000, "hit.#", "hit.#", name="trailing-hash"),
    Shape("1 queue/msg, #.t0 (leading #)", 1, 40_000, "#.t0", "#.t0", name="leading-hash"),
    Shape("10 queues/msg, hit.app1.mod1.*", 10, 15_000, "hit.app1.mod1.*", "hit.app1.mod1.*",
          name="fanout-10"),
    Shape("100 queues/msg, hit.app1.mod1.*", 100, 2_000, "hit.app1.mod1.*", "hit.app1.mod1.*",
          name="fanout-100"),
]
# real traffic: many keys in turn (rtroute.bench.traffic); `--scenario varied` runs them all
VARIED_SHAPES = [
    Shape("10,000 literal keys in turn, 1 binding each", 1, 20_000, "", "",
          name="varied-literal", traffic=traffic.varied_literal()),
    Shape("1,000 keys w{i}.* in turn, each 10 bindings of 1 queue", 1, 20_000, "", "",
          name="varied-star", traffic=traffic.varied_star()),
    Shape("100 keys in turn, each to 10 queues", 10, 5_000, "", "", name="varied-fanout-10",
          traffic=traffic.fanout()),
    Shape("*.app1.mod1.t0, a header changing per message", 1, 20_000, "*.app1.mod1.t0",
          "*.app1.mod1.t0", name="header-per-message", vary_header=True),
    Shape("mixed: literal, w{i}.*, fan-out 10, header per message", 1, 20_000, "", "",
          name="mixed", traffic=traffic.mixed(), vary_header=True),
]
VARY_HEADER = "x-seq"  # the header a shape with vary_header changes per message
SCENARIOS = [s.name for s in SHAPES + VARIED_SHAPES]
# the publisher-side paths: key of the rates -> (name in the JSON report, column title,
# RTopicPublisher options)
PUBLISHERS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "publisher": ("publisher-side", "publisher-side (BCC)", {}),
    "publisher_key": ("publisher-side, matched key", "matched key",
                      {"delivery": "matched-key"}),
    "publisher_bare": ("publisher-side, matched key, no header", "matched key, no header",
                       {"delivery": "matched-key", "published_key_header": None}),
}


def _filler(j: int) -> str:
    """One of the bindings no message matches: four words like the matched ones, under 100
    servers, 10 apps and 7 modules (a tree like the plugin README's, not 10k first words)."""
    return f"s{j % 100}.app{j // 100 % 10}.mod{j % 7}.w{j}"


def _open(uri: str, plugin_uri: str | None, client: str) -> tuple[Any, Any, Any, Any]:
    """``(conn, channel, plugin_conn, plugin_channel)``, the plugin's None without its URI.
    No heartbeats: each connection idles while the other's 10k bindings are made."""
    conn = connect_blocking(uri, client, heartbeat=0)
    plugin_conn = connect_blocking(plugin_uri, client, heartbeat=0) if plugin_uri else None
    return conn, conn.channel(), plugin_conn, plugin_conn.channel() if plugin_conn else None


def _close(conn: Any, channel: Any, plugin_conn: Any, plugin_channel: Any,
           setup: _Setup) -> None:
    """Removes the shape's objects and closes the connections of :func:`_open`."""
    if not channel.is_open:
        channel = conn.channel()
    setup.remove(channel, plugin_channel)
    conn.close()
    if plugin_conn is not None:
        plugin_conn.close()


def _medians(rates: dict[str, list[float]], repeat: int) -> dict[str, Any]:
    """Each path's median rate (``PATH_msgs_per_s``) and every run's rates (``runs``)."""
    return {**{f"{path}_msgs_per_s": statistics.median(values)
               for path, values in rates.items()},
            "runs": [{path: values[i] for path, values in rates.items()}
                     for i in range(repeat)]}


class _Setup:
    """The queues and bindings of one shape on one broker, for every path at once."""

    def __init__(self, channel: Any, shape: Shape, tag: str, plugin_channel: Any = None,
                 bindings: int = BINDINGS, bindings_type: str = "topic"):
        self.name = f"rtroute.bench.{tag}"
        self.native = f"{self.name}.native"
        self.queues = [f"{self.name}.q{i}" for i in range(shape.queue_count)]
        self.fillers = [f"{self.name}.f{i}" for i in range(10)]
        channel.exchange_declare(self.native, "topic", durable=True)
        channel.exchange_declare(f"{self.name}.bindings", bindings_type, durable=True)
        for queue in self.queues:
            channel.queue_declare(queue, exclusive=True)
        rtopic_bindings = shape.rtopic_bindings()
        for i, key in rtopic_bindings:
            channel.queue_bind(self.queues[i], f"{self.name}.bindings", key)
        for i, key in shape.topic_bindings():
            channel.queue_bind(self.queues[i], self.native, key)
        for queue in self.fillers:
            channel.queue_declare(queue, exclusive=True)
        self.fills = max(bindings - len(rtopic_bindings), 0)
        self.total = len(rtopic_bindings) + self.fills  # bindings of NAME.bindings
        for j in range(self.fills):
            queue = self.fillers[j % len(self.fillers)]
            channel.queue_bind(queue, f"{self.name}.bindings", _filler(j))
            channel.queue_bind(queue, self.native, _filler(j))
        # the plugin's exchange and queues have names of their own: its broker may be this one
        self.plugin_exchange = f"{self.name}.plugin"
        self.plugin_queues: list[str] = []
        if plugin_channel is not None:
            plugin_channel.exchange_declare(self.plugin_exchange, "x-rtopic", durable=True)
            for i in range(shape.queue_count):
                self.plugin_queues.append(plugin_channel.queue_declare(
                    f"{self.plugin_exchange}.q{i}", exclusive=True).method.queue)
            for i, key in rtopic_bindings:
                plugin_channel.queue_bind(self.plugin_queues[i], self.plugin_exchange, key)
            filler = plugin_channel.queue_declare(f"{self.plugin_exchange}.f",
                                                  exclusive=True).method.queue
            for j in range(self.fills):
                plugin_channel.queue_bind(filler, self.plugin_exchange, _filler(j))

    def purge(self, channel: Any) -> None:
        for queue in self.queues:
            channel.queue_purge(queue)

    def plugin_rate(self, plugin_uri: str, shape: Shape, plugin_channel: Any
                    ) -> tuple[float, bool]:
        """The plugin's path on its broker (probed first, see :func:`_probed_pika_path`)."""
        def purge_plugin() -> None:
            for queue in self.plugin_queues:
                plugin_channel.queue_purge(queue)

        purge_plugin()
        return _probed_pika_path(plugin_uri, self.plugin_exchange, shape.rtopic_keys, shape,
                                 plugin_channel, self.plugin_queues, purge_plugin)

    def remove(self, channel: Any, plugin_channel: Any = None) -> None:
        for queue in self.queues + self.fillers:
            channel.queue_delete(queue)
        for exchange in (self.native, self.name, f"{self.name}.bindings"):
            channel.exchange_delete(exchange)
        channel.queue_delete(f"rtroute.ingress.{self.name}")
        if plugin_channel is not None:
            plugin_channel.exchange_delete(self.plugin_exchange)


def _pika_path(uri: str, exchange: str, keys: list[str], shape: Shape, channel: Any,
               queues: list[str]) -> float:
    start = time.monotonic()
    result = publish(uri, exchange, keys, shape.messages, BODY, window=2000,
                     echo=lambda *_: None, vary_header=VARY_HEADER if shape.vary_header else None)
    if result.get("error") or result["acked"] != shape.messages:
        raise RuntimeError(f"publish to {exchange} failed: {result}")
    end = wait_for_depth(channel, queues, shape.copies(), 600)
    return shape.messages / (end - start)


PROBE = 500  # messages first sent to a path that may be pathologically slow
PROBE_BUDGET = 30.0  # seconds the full count may take, judged from the probe


def _probed_pika_path(uri: str, exchange: str, key: list[str], shape: Shape, channel: Any,
                      queues: list[str], purge: Callable[[], Any]) -> tuple[float, bool]:
    """:func:`_pika_path`, after a probe of :data:`PROBE` messages: when the probe says the
    full count would take more than :data:`PROBE_BUDGET` s (the plugin walks its whole trie
    for a leading ``#``, at a few dozen messages per second), the probe's rate is the result.
    Returns the rate and whether it is the probe's."""
    probe = dataclasses.replace(shape, messages=min(PROBE, shape.messages))
    rate = _pika_path(uri, exchange, key, probe, channel, queues)
    if shape.messages <= PROBE or shape.messages / rate > PROBE_BUDGET:
        return rate, shape.messages > PROBE
    purge()
    return _pika_path(uri, exchange, key, shape, channel, queues), False


def _library_path(publisher: Any, shape: Shape, channel: Any, queues: list[str]) -> float:
    body = b"x" * BODY
    keys = shape.rtopic_keys
    variants = [pika.BasicProperties(headers={VARY_HEADER: i})
                for i in range(HEADER_VARIANTS)] if shape.vary_header else [None]
    start = time.monotonic()
    futures = [publisher.publish(keys[n % len(keys)], body, variants[n % len(variants)])
               for n in range(shape.messages)]
    publisher.wait_for_confirms()
    failed = [f for f in futures if f.exception() is not None]
    if failed:
        raise RuntimeError(f"{len(failed)} publisher-side message(s) failed: "
                           f"{failed[0].exception()}")
    end = wait_for_depth(channel, queues, shape.copies(), 600)
    return shape.messages / (end - start)


def _start_sidecar(uri: str, management_uri: str | None, name: str) -> tuple[Any, int]:
    port = free_port()
    env = dict(os.environ, RTROUTE_URI=uri)  # not in argv, where ps shows it
    if management_uri:
        env["RTROUTE_MANAGEMENT_URI"] = management_uri
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtroute.cli", "run", "--rtopic", name, "--http",
         f"127.0.0.1:{port}", "--log-level", "WARNING", "--name", f"bench-{name}",
         "--prefetch", "5000"], env=env)
    return proc, port


def _wait_sidecar(proc: Any, port: int, bindings: int) -> None:
    import json

    deadline = time.monotonic() + 120
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
                ex = json.load(r)["exchanges"][0]
            if ex["state"] == "running" and ex["bindings_known"] == bindings:
                return
        except (OSError, KeyError, IndexError, ValueError):
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the sidecar did not come up")
        time.sleep(0.1)


def run_shape(uri: str, shape: Shape, echo: Callable[[str], None], repeat: int = 3,
              management_uri: str | None = None, plugin_uri: str | None = None,
              sidecar: bool = True, bindings: int = BINDINGS,
              bindings_type: str = "topic") -> dict:
    """Measures one shape on every path ``repeat`` times; returns the median rates.

    ``bindings_type`` is the type of ``NAME.bindings`` (``topic`` or ``direct``; a sidecar
    keeps the type it finds)."""
    from rtroute.publisher import RTopicPublisher

    tag = uuid.uuid4().hex[:6]
    conn, channel, plugin_conn, plugin_channel = _open(uri, plugin_uri, "rtroute bench publish")
    setup = _Setup(channel, shape, tag, plugin_channel, bindings, bindings_type)
    proc = None
    rates: dict[str, list[float]] = {"native": [], **{path: [] for path in PUBLISHERS}}
    if sidecar:
        rates["sidecar"] = []
    if plugin_channel is not None:
        rates["plugin"] = []
    plugin_probed = False
    try:
        if sidecar:
            proc, port = _start_sidecar(uri, management_uri, setup.name)
            _wait_sidecar(proc, port, setup.total)
        with contextlib.ExitStack() as stack:
            publishers = {path: stack.enter_context(RTopicPublisher(
                uri, setup.name, management_uri=management_uri, window=2000, **options))
                for path, (_name, _title, options) in PUBLISHERS.items()}
            deadline = time.monotonic() + 120
            while any(len(p.bindings) < setup.total for p in publishers.values()):
                if time.monotonic() > deadline:
                    raise RuntimeError("the publisher did not list every binding")
                time.sleep(0.1)
            for run_number in range(1, repeat + 1):
                setup.purge(channel)
                rates["native"].append(_pika_path(uri, setup.native, shape.topic_keys, shape,
                                                  channel, setup.queues))
                for path, publisher in publishers.items():
                    setup.purge(channel)
                    rates[path].append(_library_path(publisher, shape, channel,
                                                     setup.queues))
                if sidecar:
                    setup.purge(channel)
                    rates["sidecar"].append(_pika_path(uri, setup.name, shape.rtopic_keys,
                                                       shape, channel, setup.queues))
                if plugin_channel is not None:
                    rate, probed = setup.plugin_rate(plugin_uri, shape, plugin_channel)
                    rates["plugin"].append(rate)
                    plugin_probed = plugin_probed or probed
                echo(f"  {shape.label}, run {run_number}/{repeat}: " + ", ".join(
                    f"{path} {values[-1]:,.0f}" for path, values in rates.items()) + " msg/s")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        _close(conn, channel, plugin_conn, plugin_channel, setup)
    medians = _medians(rates, repeat)
    return {"scenario": shape.label, "messages": shape.messages,
            "queues_per_message": shape.matched, "bindings": setup.total,
            "rtopic_key": shape.rtopic_key if shape.traffic is None else
            f"{len(shape.rtopic_keys):,} keys in turn",
            "topic_binding": shape.topic_binding, "header_per_message": shape.vary_header,
            "bindings_type": bindings_type, **medians,
            **{f"{path}_vs_native": (medians[f"{path}_msgs_per_s"]
                                     / medians["native_msgs_per_s"]) for path in PUBLISHERS},
            "plugin_probe_only": plugin_probed}


def resolve_bindings_type(uri: str, bindings_type: str) -> str:
    """``bindings_type``, or for ``auto`` the type rtroute declares ``NAME.bindings`` with on
    the broker at ``uri`` (see :func:`rtroute.routing.delivery_plan.bindings_exchange_type`)."""
    if bindings_type != "auto":
        return bindings_type
    from rtroute.amqp.broker_identity import identity_from_server_properties
    from rtroute.routing.delivery_plan import bindings_exchange_type

    conn = connect_blocking(uri, "rtroute bench publish")
    try:
        version = identity_from_server_properties(conn._impl.server_properties).version
    finally:
        conn.close()
    return bindings_exchange_type(version)


def run(uri: str = DEFAULT_URI, shapes: list[Shape] = SHAPES,
        echo: Callable[[str], None] = print, repeat: int = 3,
        management_uri: str | None = None, plugin_uri: str | None = None,
        sidecar: bool = True, bindings: int = BINDINGS,
        bindings_type: str = "auto") -> list[dict]:
    """Runs every shape; prints progress and a table of medians; returns the rows.
    ``bindings_type`` is the type of ``NAME.bindings`` (``auto``: see
    :func:`resolve_bindings_type`)."""
    bindings_type = resolve_bindings_type(uri, bindings_type)
    echo(f"publisher-side routing vs native topic exchange ({bindings:,} bindings, "
         f"{BODY}-byte messages, NAME.bindings a {bindings_type} exchange, median of {repeat} "
         "runs)")
    rows = [run_shape(uri, s, echo, repeat, management_uri, plugin_uri, sidecar, bindings,
                      bindings_type) for s in shapes]
    paths = [p for p in ("native", *PUBLISHERS, "sidecar", "plugin")
             if f"{p}_msgs_per_s" in rows[0]]
    titles = {"native": "topic exchange", **{p: t for p, (_n, t, _o) in PUBLISHERS.items()},
              "sidecar": "sidecar", "plugin": "x-rtopic plugin"}
    echo("")
    echo("| scenario | " + " | ".join(f"{titles[p]} msg/s" for p in paths) + " | " +
         " | ".join(f"{titles[p]} / topic" for p in PUBLISHERS) + " |")
    echo("|---|" + "---:|" * (len(paths) + len(PUBLISHERS)))
    for r in rows:
        echo(f"| {r['scenario']} | " + " | ".join(
            f"{r[f'{p}_msgs_per_s']:,.0f}" + ("*" if p == "plugin" and r["plugin_probe_only"]
                                               else "") for p in paths)
             + " | " + " | ".join(f"{r[f'{p}_vs_native']:.2f}" for p in PUBLISHERS) + " |")
    if any(r["plugin_probe_only"] for r in rows):
        echo(f"* the plugin's rate on a probe of {PROBE} messages: the full count would have "
             f"taken more than {PROBE_BUDGET:.0f} s")
    return rows


def json_rows(rows: list[dict]) -> list[dict]:
    """The report rows: publisher-side routing (BCC, matched key, matched key without the
    header) against the native topic exchange."""
    return [{"name": name, "value": r[f"{path}_msgs_per_s"], "unit": "msg/s",
             "baseline": "native topic exchange", "baseline_value": r["native_msgs_per_s"],
             "ratio": r[f"{path}_vs_native"], "ratio_means": "rtroute / baseline",
             **{k: v for k, v in r.items() if k not in ("runs",)}}
            for r in rows
            for path, (name, _title, _options) in PUBLISHERS.items()]


def measure_visibility(uri: str = DEFAULT_URI, management_uri: str | None = None,
                       trials: int = 20, echo: Callable[[str], None] = print) -> dict:
    """How long a binding made (or removed) on the broker takes to reach a running
    publisher's table: from ``queue.bind``-ok until a message published to it through the
    publisher arrives (and from ``queue.unbind``-ok until one no longer does).

    Probes are published every millisecond or so, so the figures are upper bounds within
    about a probe's round trip. Returns ``{"bind_ms": [...], "unbind_ms": [...]}`` and prints
    the median and the maximum.
    """
    from rtroute.publisher import RTopicPublisher

    name = f"rtroute.bench.vis.{uuid.uuid4().hex[:6]}"
    conn = connect_blocking(uri)
    channel = conn.channel()
    channel.exchange_declare(f"{name}.bindings", "topic", durable=True)
    queue = channel.queue_declare("", exclusive=True).method.queue
    bind_ms: list[float] = []
    unbind_ms: list[float] = []
    try:
        with RTopicPublisher(uri, name, management_uri=management_uri) as pub:
            for trial in range(trials):
                key = f"vis.k{trial}"
                channel.queue_bind(queue, f"{name}.bindings", key)
                bound = time.monotonic()
                while pub.publish("vis.*", b"p").result(timeout=10) and \
                        channel.basic_get(queue, auto_ack=True)[0] is None:
                    if time.monotonic() - bound > 60:
                        raise RuntimeError("a new binding was not seen within 60 s")
                bind_ms.append((time.monotonic() - bound) * 1000)
                channel.queue_unbind(queue, f"{name}.bindings", key)
                unbound = time.monotonic()
                while True:
                    channel.queue_purge(queue)
                    pub.publish("vis.*", b"p").result(timeout=10)
                    if channel.basic_get(queue, auto_ack=True)[0] is None:
                        break
                    if time.monotonic() - unbound > 60:
                        raise RuntimeError("a removed binding was still used after 60 s")
                unbind_ms.append((time.monotonic() - unbound) * 1000)
    finally:
        channel.queue_delete(queue)
        channel.exchange_delete(f"{name}.bindings")
        conn.close()
    for label, values in (("bind -> first message routed", bind_ms),
                          ("unbind -> first message not routed", unbind_ms)):
        echo(f"{label}: median {statistics.median(values):.1f} ms, max {max(values):.1f} ms "
             f"({len(values)} trials)")
    return {"bind_ms": bind_ms, "unbind_ms": unbind_ms}
