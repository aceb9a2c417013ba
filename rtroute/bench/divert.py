"""`rtroute bench divert`: a managed exchange with 0, 1 and 10 filtered diverts, in one run.

Each scenario publishes the same messages (100-byte bodies, headers ``region = 'eu'`` and
``price = 12``) twice: to a native RabbitMQ topic exchange bound to a queue, and to a managed
``topic`` exchange whose ``NAME.bindings`` is bound to a queue the same way, through a real
`rtroute run -c FILE` process with the scenario's diverts. Each path is timed from the first
publish until its queues hold every message (and every copy), with a fast publisher (windowed
confirms), so that the routing path is what is measured.

The filters of the "no match" diverts read both headers and select nothing, so those scenarios
measure the cost of the divert stage itself; the last scenario's divert copies every message to
a spy queue, so the broker stores each message twice there.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from dataclasses import dataclass, field
from typing import Callable

from rtroute.amqp import connect_blocking, publish
from rtroute.bench.measure import wait_for_depth
from rtroute.config.constants import DEFAULT_URI
from rtroute.ops.netaddr import free_port

HEADERS = {"region": "eu", "price": 12}


@dataclass
class Scenario:
    """``filters``: one non-exclusive divert per filter; ``copies``: whether each message is
    copied (then to a spy queue, which must fill up too)."""

    label: str
    filters: list[str] = field(default_factory=list)
    copies: bool = False
    messages: int = 30_000


SCENARIOS = [
    Scenario("0 diverts"),
    Scenario("1 divert, filter matches none", ["region = 'us' AND price > 10"]),
    Scenario("10 diverts, filters match none",
             [f"region = 'us{i}' AND price > {i}" for i in range(10)]),
    Scenario("1 divert, filter matches all (copy)", ["region = 'eu' AND price > 10"],
             copies=True),
]


def _timed(uri: str, exchange: str, messages: int, channel, queues: list[str]) -> float:
    start = time.monotonic()
    result = publish(uri, exchange, "bench.key", messages, 100, window=2000, headers=HEADERS,
                     echo=lambda *_: None)
    if result.get("error") or result["acked"] != messages:
        raise RuntimeError(f"publish to {exchange} failed: {result}")
    end = wait_for_depth(channel, queues, messages * len(queues), 600)
    return messages / (end - start)


def _config(uri: str, name: str, spy: str, scenario: Scenario,
            management_uri: str | None = None) -> str:
    lines = ["[broker]", f"uri = {json.dumps(uri)}"]
    if management_uri:
        lines.append(f"management_uri = {json.dumps(management_uri)}")
    lines += ["", "[[exchange]]",
             f"name = {json.dumps(name)}", 'kind = "topic"', ""]
    for i, selector in enumerate(scenario.filters):
        lines += ["[[divert]]", f'name = "bench-divert-{i}"', f"address = {json.dumps(name)}",
                  f"forwarding_address = {json.dumps(spy)}", 'routing_type = "ANYCAST"',
                  f"filter = {json.dumps(selector)}", ""]
    return "\n".join(lines)


def _wait_running(port: int, proc: subprocess.Popen, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
                if json.load(r)["exchanges"][0]["state"] == "running":
                    return
        except (OSError, KeyError, IndexError, ValueError):
            pass
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the sidecar did not come up")
        time.sleep(0.1)


def run_scenario(uri: str, scenario: Scenario, echo: Callable[[str], None],
                 management_uri: str | None = None) -> dict:
    """Measures one scenario on both paths; returns the rates and their ratio."""
    tag = uuid.uuid4().hex[:6]
    name, native = f"rtroute.bench.divert.{tag}", f"rtroute.bench.divert.{tag}.native"
    queue, native_queue, spy = f"{name}.q", f"{native}.q", f"{name}.spy"
    conn = connect_blocking(uri)
    ch = conn.channel()
    port = free_port()
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(_config(uri, name, spy, scenario, management_uri))
        config_path = f.name
    proc = None
    try:
        # RabbitMQ 4 denies transient non-exclusive queues: the sidecar probes the spy queue
        # (a passive declare, refused on another connection's exclusive queue), so it is
        # durable; the measured queues are only read here, so they are exclusive.
        ch.queue_declare(spy, durable=True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtroute.cli", "run", "-c", config_path,
             "--http", f"127.0.0.1:{port}", "--log-level", "WARNING", "--name", f"bench-{tag}"],
            env=dict(os.environ))
        ch.exchange_declare(native, "topic", auto_delete=True)
        ch.exchange_declare(f"{name}.bindings", "topic", durable=True)
        for q, exchange in ((queue, f"{name}.bindings"), (native_queue, native)):
            ch.queue_declare(q, exclusive=True)
            ch.queue_bind(q, exchange, "#")
        _wait_running(port, proc)
        echo(f"  {scenario.label}: native topic exchange ...")
        native_rate = _timed(uri, native, scenario.messages, ch, [native_queue])
        ch.queue_purge(native_queue)
        echo(f"  {scenario.label}: sidecar ...")
        queues = [queue, spy] if scenario.copies else [queue]
        sidecar_rate = _timed(uri, name, scenario.messages, ch, queues)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        os.unlink(config_path)
        if not ch.is_open:  # a channel error: clean up on a new channel
            ch = conn.channel()
        for q in (queue, native_queue, spy, f"rtroute.ingress.{name}"):
            ch.queue_delete(q)
        for x in (name, f"{name}.bindings", native):
            ch.exchange_delete(x)
        conn.close()
    return {"scenario": scenario.label, "diverts": len(scenario.filters),
            "copies": scenario.copies, "messages": scenario.messages, "native_msgs_per_s": native_rate,
            "sidecar_msgs_per_s": sidecar_rate, "ratio": sidecar_rate / native_rate}


def run(echo: Callable[[str], None] = print, uri: str = DEFAULT_URI,
        scenarios: list[Scenario] = SCENARIOS,
        management_uri: str | None = None) -> list[dict]:
    """Runs every scenario; prints progress and a table; returns the rows."""
    echo(f"managed topic exchange with diverts vs native topic exchange "
         f"({len(scenarios)} scenarios, 100-byte messages)")
    rows = [run_scenario(uri, s, echo, management_uri) for s in scenarios]
    echo("")
    echo("| scenario | messages | native msg/s | sidecar msg/s | sidecar / native |")
    echo("|---|---:|---:|---:|---:|")
    for r in rows:
        echo(f"| {r['scenario']} | {r['messages']:,} | {r['native_msgs_per_s']:,.0f} | "
             f"{r['sidecar_msgs_per_s']:,.0f} | {r['ratio']:.2f} |")
    return rows


def json_rows(rows: list[dict]) -> list[dict]:
    """The report rows of a run: the managed exchange with diverts against the native topic
    exchange, per scenario (msg/s)."""
    return [{"name": "managed exchange + diverts", "value": r["sidecar_msgs_per_s"],
             "unit": "msg/s", "baseline": "native topic exchange",
             "baseline_value": r["native_msgs_per_s"], "ratio": r["ratio"],
             "ratio_means": "rtroute / baseline", "scenario": r["scenario"],
             "diverts": r["diverts"], "copies": r["copies"], "messages": r["messages"]}
            for r in rows]


if __name__ == "__main__":  # pragma: no cover
    run()
