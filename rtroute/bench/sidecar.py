"""`rtroute bench sidecar`: the sidecar path against a native topic exchange, in one run.

Both paths deliver the same messages to the same queues. Each is timed from the first publish
until the destination queues hold every copy, with a fast publisher (windowed confirms, no
per-message wait), so that the routing path is what is measured. The sidecar runs as its own
`rtroute run` process, as in production. Each scenario runs ``repeat`` times, the two paths
alternating, and reports the median rates (on a small machine the broker, the publisher and the
sidecar share the cores, and single runs vary by 10-20%).
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from typing import Callable

from rtroute.amqp import connect_blocking, parse_uri, publish
from rtroute.bench.measure import CpuMeter, find_process, sidecar_status, wait_for_depth
from rtroute.config.constants import DEFAULT_URI
from rtroute.ops.netaddr import free_port, is_loopback
from rtroute.routing.delivery_plan import bindings_exchange_type


@dataclass
class Scenario:
    """``matched`` queues receive each message; ``extra`` bindings match nothing. Publishers
    use a wildcard key (``bench.*``), or with ``exact`` (one queue) the bound key itself."""

    matched: int
    extra: int
    messages: int
    exact: bool = False

    @property
    def label(self) -> str:
        more = f", +{self.extra:,} bindings" if self.extra else ""
        exact = ", exact key" if self.exact else ""
        return f"{self.matched} queue{'s' if self.matched > 1 else ''}/msg{more}{exact}"


#: every scenario by the name ``rtroute bench sidecar --scenario`` takes
SCENARIOS_BY_NAME = {
    "1-queue": Scenario(1, 0, 50_000),
    "10-queues": Scenario(10, 0, 20_000),
    "100-queues": Scenario(100, 0, 3_000),
    "10k-bindings": Scenario(1, 10_000, 50_000),
    "exact-key": Scenario(1, 0, 50_000, exact=True),
}
SCENARIOS = list(SCENARIOS_BY_NAME.values())


def _timed_publish(uri: str, exchange: str, key: str, scenario: Scenario, channel,
                   queues: list[str], meter: CpuMeter) -> tuple[float, dict]:
    """The path's rate, and the CPU µs per message each metered process spent on it."""
    meter.start()
    start = time.monotonic()
    result = publish(uri, exchange, key, scenario.messages, 100, window=2000,
                     echo=lambda *_: None)
    if result.get("error") or result["acked"] != scenario.messages:
        raise RuntimeError(f"publish to {exchange} failed: {result}")
    end = wait_for_depth(channel, queues, scenario.messages * scenario.matched, 600)
    cpu = {name: None if used is None else used / scenario.messages * 1e6
           for name, used in meter.stop().items()}
    return scenario.messages / (end - start), cpu


def run_scenario(uri: str, scenario: Scenario, echo: Callable[[str], None],
                 prefetch: int = 1000, repeat: int = 3,
                 management_uri: str | None = None) -> dict:
    """Measures one scenario on both paths ``repeat`` times; returns the median rates, their
    ratio and every run's rates."""
    tag = uuid.uuid4().hex[:6]
    name, native = f"rtroute.bench.{tag}", f"rtroute.bench.{tag}.native"
    conn = connect_blocking(uri)
    ch = conn.channel()
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtroute.cli", "run", "--rtopic", name,
         "--http", f"127.0.0.1:{port}", "--log-level", "WARNING", "--name", f"bench-{tag}",
         "--prefetch", str(prefetch)],
        env=dict(os.environ, RTROUTE_URI=uri,  # not in argv, where ps shows it
                 **({"RTROUTE_MANAGEMENT_URI": management_uri} if management_uri else {})))
    queues = [f"{name}.q{i}" for i in range(scenario.matched)]
    # CPU per message of the broker (when it runs on this machine) and of the sidecar
    broker_pid = find_process("beam.smp") if is_loopback(parse_uri(uri).host) else None
    meter = CpuMeter(broker=broker_pid, sidecar=proc.pid)
    try:
        ch.exchange_declare(native, "topic", auto_delete=True)
        # of the type the sidecar declares it with (direct on RabbitMQ 4, topic on 3.x)
        version = conn._impl.server_properties.get("version")
        ch.exchange_declare(f"{name}.bindings", bindings_exchange_type(
            version.decode() if isinstance(version, bytes) else version), durable=True)
        for i, q in enumerate(queues):
            # exclusive: RabbitMQ 4 denies transient non-exclusive queues, and only this
            # connection reads them (the sidecar publishes through the exchange)
            ch.queue_declare(q, exclusive=True)
            ch.queue_bind(q, f"{name}.bindings", f"bench.q{i}")  # plain keys for rtopic
            ch.queue_bind(q, native, "bench.*")
        for j in range(scenario.extra):
            ch.queue_bind(queues[j % len(queues)], f"{name}.bindings", f"other.k{j}")
            ch.queue_bind(queues[j % len(queues)], native, f"other.k{j}")
        bindings = scenario.matched + scenario.extra
        deadline = time.monotonic() + 120
        while True:
            try:
                ex = sidecar_status(port)["exchanges"][0]
                if ex["state"] == "running" and ex["bindings_known"] == bindings:
                    break
            except (OSError, KeyError, IndexError):
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the sidecar did not come up")
            time.sleep(0.1)
        native_rates, sidecar_rates, native_cpu, sidecar_cpu = [], [], [], []
        paths = ((native, "bench.x", native_rates, native_cpu),
                 (name, "bench.*", sidecar_rates, sidecar_cpu))
        for run_number in range(1, repeat + 1):
            for exchange, key, rates, cpus in paths:
                for q in queues:
                    ch.queue_purge(q)
                rate, cpu = _timed_publish(uri, exchange, "bench.q0" if scenario.exact else key,
                                           scenario, ch, queues, meter)
                rates.append(rate)
                cpus.append(cpu)
            echo(f"  {scenario.label}, run {run_number}/{repeat}: native "
                 f"{native_rates[-1]:,.0f} msg/s, sidecar {sidecar_rates[-1]:,.0f} msg/s")
    finally:
        proc.terminate()
        proc.wait(30)
        if not ch.is_open:  # a channel error: clean up on a new channel
            ch = conn.channel()
        for q in queues:
            ch.queue_delete(q)
        for x in (name, f"{name}.bindings", native):
            ch.exchange_delete(x)
        ch.queue_delete(f"rtroute.ingress.{name}")
        conn.close()
    native_rate = statistics.median(native_rates)
    sidecar_rate = statistics.median(sidecar_rates)
    return {"scenario": scenario.label, "messages": scenario.messages,
            "queues_per_message": scenario.matched, "extra_bindings": scenario.extra,
            "exact": scenario.exact,
            "native_msgs_per_s": native_rate, "sidecar_msgs_per_s": sidecar_rate,
            "ratio": sidecar_rate / native_rate,
            "broker_cpu_us_native": _median(c["broker"] for c in native_cpu),
            "broker_cpu_us_sidecar": _median(c["broker"] for c in sidecar_cpu),
            "sidecar_cpu_us": _median(c["sidecar"] for c in sidecar_cpu),
            "runs": [{"native_msgs_per_s": n, "sidecar_msgs_per_s": s}
                     for n, s in zip(native_rates, sidecar_rates)]}


def run(uri: str = DEFAULT_URI, scenarios: list[Scenario] = SCENARIOS,
        echo: Callable[[str], None] = print, prefetch: int = 1000,
        repeat: int = 3, management_uri: str | None = None) -> list[dict]:
    """Runs every scenario; prints progress and a table of medians; returns the rows."""
    echo(f"sidecar vs native topic exchange ({len(scenarios)} scenarios, 100-byte messages, "
         f"sidecar prefetch {prefetch}, median of {repeat} runs)")
    rows = [run_scenario(uri, s, echo, prefetch, repeat, management_uri) for s in scenarios]
    echo("")
    echo("| scenario | messages | native msg/s | sidecar msg/s | sidecar / native | "
         "range of run ratios |")
    echo("|---|---:|---:|---:|---:|---|")
    for r in rows:
        ratios = [x["sidecar_msgs_per_s"] / x["native_msgs_per_s"] for x in r["runs"]]
        echo(f"| {r['scenario']} | {r['messages']:,} | {r['native_msgs_per_s']:,.0f} | "
             f"{r['sidecar_msgs_per_s']:,.0f} | {r['ratio']:.2f} | "
             f"{min(ratios):.2f}-{max(ratios):.2f} |")
    echo("")
    echo("CPU per message (µs, medians): where the time goes")
    echo("")
    echo("| scenario | broker, native path | broker, sidecar path | sidecar process |")
    echo("|---|---:|---:|---:|")
    for r in rows:
        echo(f"| {r['scenario']} | {_us(r['broker_cpu_us_native'])} | "
             f"{_us(r['broker_cpu_us_sidecar'])} | {_us(r['sidecar_cpu_us'])} |")
    return rows


def _median(values) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _us(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f}"


def json_rows(rows: list[dict]) -> list[dict]:
    """The report rows of a run: the sidecar against the native topic exchange per scenario
    (median msg/s), with the CPU per message of each side."""
    return [{"name": "sidecar", "value": r["sidecar_msgs_per_s"], "unit": "msg/s",
             "baseline": "native topic exchange", "baseline_value": r["native_msgs_per_s"],
             "ratio": r["ratio"], "ratio_means": "rtroute / baseline",
             "scenario": r["scenario"], "queues_per_message": r["queues_per_message"],
             "extra_bindings": r["extra_bindings"], "exact": r["exact"],
             "messages": r["messages"], "broker_cpu_us_native": r["broker_cpu_us_native"],
             "broker_cpu_us_sidecar": r["broker_cpu_us_sidecar"],
             "sidecar_cpu_us": r["sidecar_cpu_us"], "runs": r["runs"]} for r in rows]
