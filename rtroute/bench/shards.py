"""`rtroute bench shards`: a sharded ingress served by 1, 2, 3 ... sidecar replicas.

For each replica count, one rtopic exchange with ``shards`` ingress shards is served by that
many `rtroute run` processes (the same config, as in production); once the replicas have shared
the shards out, ``messages`` are published with confirms over 64 routing keys (so that every
shard gets its part) and timed until the destination queue holds them all. Reported: the
end-to-end rate, the messages each replica routed, and the CPU each used per message routed
(and its share of the run's wall time): on a machine whose cores the broker, the publisher and
the replicas share, the broker is the ceiling, so CPU per message is where scaling shows.
A native topic exchange with the same bindings is measured in the same run, for reference.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable

from rtroute.amqp import connect_blocking, mask_uri, publish
from rtroute.bench.measure import CpuMeter, sidecar_status, wait_for_depth
from rtroute.config.constants import DEFAULT_URI
from rtroute.ops.netaddr import free_port

KEYS = [f"k{i}" for i in range(64)]
BALANCE_TIMEOUT = 90.0  # seconds for the replicas to share the shards out


def _exchange(port: int) -> dict:
    """The replica's one exchange in its ``/status`` (empty while it does not answer)."""
    try:
        exchanges = sidecar_status(port).get("exchanges") or [{}]
    except (OSError, ValueError):
        return {}
    return exchanges[0]


def _wait(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} within {timeout:.0f} s")
        time.sleep(0.2)


def _balanced(ports: list[int], shards: int) -> bool:
    """Every shard has an active replica and no replica holds more than its share."""
    active = [sum(1 for s in _exchange(p).get("shards") or [] if s.get("active"))
              for p in ports]
    share = -(-shards // len(ports))
    return sum(active) == shards and max(active) <= share and \
        min(active) >= shards // len(ports)


def run_replicas(uri: str, management_uri: str | None, replicas: int, shards: int,
                 messages: int, prefetch: int, echo: Callable[[str], None]) -> dict:
    """One measurement: ``replicas`` sidecars serving one exchange of ``shards`` shards."""
    tag = uuid.uuid4().hex[:6]
    name = f"rtroute.bench.shards.{tag}"
    queue = f"{name}.q"
    workdir = Path(tempfile.mkdtemp(prefix="rtroute-bench-shards-"))
    config = workdir / "rtroute.toml"
    config.write_text(f'[[exchange]]\nname = "{name}"\nkind = "rtopic"\nshards = {shards}\n'
                      f'prefetch = {prefetch}\n')
    env = dict(os.environ, RTROUTE_URI=uri,  # not in argv, where ps shows it
               **({"RTROUTE_MANAGEMENT_URI": management_uri} if management_uri else {}))
    conn = connect_blocking(uri)
    ch = conn.channel()
    procs: list[subprocess.Popen] = []
    ports: list[int] = []
    try:
        for i in range(replicas):
            port = free_port()
            log = open(workdir / f"replica-{i}.log", "wb")  # noqa: SIM115 - child writes it
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "rtroute.cli", "run", "-c", str(config), "--http",
                 f"127.0.0.1:{port}", "--log-level", "WARNING", "--name",
                 f"bench-shards-{tag}-{i}"], env=env, stdout=log, stderr=subprocess.STDOUT))
            ports.append(port)
            # one at a time: each waits in line on every shard behind the ones before
            _wait(lambda port=port: _exchange(port).get("state") == "running", 60,
                  f"replica {i} did not start (log: {workdir})")
        # exclusive: RabbitMQ 4 denies transient non-exclusive queues
        ch.queue_declare(queue, exclusive=True)
        for key in KEYS:
            ch.queue_bind(queue, f"{name}.bindings", key)
        _wait(lambda: all(_exchange(p).get("bindings_known") == len(KEYS) for p in ports), 60,
              "the replicas did not learn the bindings")
        _wait(lambda: _balanced(ports, shards), BALANCE_TIMEOUT,
              f"the {replicas} replicas did not share the {shards} shards out")
        before = [_exchange(p).get("received", 0) for p in ports]
        meter = CpuMeter(**{f"r{i}": proc.pid for i, proc in enumerate(procs)})
        meter.start()
        start = time.monotonic()
        result = publish(uri, name, KEYS, messages, 100, window=2000, echo=lambda *_: None)
        if result.get("error") or result["acked"] != messages:
            raise RuntimeError(f"publish to {name} failed: {result}")
        end = wait_for_depth(ch, [queue], messages, 600)
        used = meter.stop()
        wall = end - start
        routed = [_exchange(p).get("received", 0) - b for p, b in zip(ports, before)]
        cpu = [used[f"r{i}"] for i in range(replicas)]
        known = [c for c in cpu if c is not None]
        row = {"replicas": replicas, "shards": shards, "messages": messages,
               "msgs_per_s": messages / wall, "routed_per_replica": routed,
               "sidecar_cpu_us_per_msg": sum(known) / messages * 1e6 if known else None,
               "busiest_replica_cpu_share": max(known) / wall if known else None}
        echo(f"  {replicas} replica(s): {row['msgs_per_s']:,.0f} msg/s, routed "
             f"{', '.join(f'{n:,}' for n in routed)}")
        return row
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if not ch.is_open:
            ch = conn.channel()
        ch.queue_delete(queue)
        for x in (name, f"{name}.bindings", f"{name}.shards"):
            ch.exchange_delete(x)
        for i in range(shards):
            ch.queue_delete(f"rtroute.shard.{name}.{i}")
        conn.close()


def run_native(uri: str, messages: int) -> float:
    """The same publish to a native topic exchange with the same bindings: msg/s."""
    name = f"rtroute.bench.shards.native.{uuid.uuid4().hex[:6]}"
    conn = connect_blocking(uri)
    ch = conn.channel()
    try:
        ch.exchange_declare(name, "topic", auto_delete=True)
        ch.queue_declare(f"{name}.q", exclusive=True)
        for key in KEYS:
            ch.queue_bind(f"{name}.q", name, key)
        start = time.monotonic()
        result = publish(uri, name, KEYS, messages, 100, window=2000, echo=lambda *_: None)
        if result.get("error") or result["acked"] != messages:
            raise RuntimeError(f"publish to {name} failed: {result}")
        return messages / (wait_for_depth(ch, [f"{name}.q"], messages, 600) - start)
    finally:
        ch.exchange_delete(name)
        conn.close()


def run(uri: str = DEFAULT_URI, management_uri: str | None = None,
        replica_counts: tuple[int, ...] = (1, 2, 3), shards: int = 4, messages: int = 60_000,
        prefetch: int = 1000, repeat: int = 3, echo: Callable[[str], None] = print
        ) -> list[dict]:
    """Measures each replica count ``repeat`` times (medians); prints a table; returns rows."""
    echo(f"sharded ingress on {mask_uri(uri)}: {shards} shards, {messages:,} messages over "
         f"{len(KEYS)} routing keys, replicas {', '.join(map(str, replica_counts))}, median "
         f"of {repeat}")
    rows = []
    native = []
    for _ in range(repeat):
        native.append(run_native(uri, messages))
    echo(f"  native topic exchange: {statistics.median(native):,.0f} msg/s")
    for count in replica_counts:
        runs = [run_replicas(uri, management_uri, count, shards, messages, prefetch, echo)
                for _ in range(repeat)]
        middle = sorted(runs, key=lambda r: r["msgs_per_s"])[len(runs) // 2]
        rows.append({**middle, "native_msgs_per_s": statistics.median(native),
                     "runs": [r["msgs_per_s"] for r in runs]})
    echo("")
    echo("| replicas | msg/s (median) | / native topic | routed per replica (median run) | "
         "sidecar CPU µs/msg (all replicas) | busiest replica's CPU share |")
    echo("|---:|---:|---:|---|---:|---:|")
    for r in rows:
        cpu = r["sidecar_cpu_us_per_msg"]
        share = r["busiest_replica_cpu_share"]
        echo(f"| {r['replicas']} | {r['msgs_per_s']:,.0f} | "
             f"{r['msgs_per_s'] / r['native_msgs_per_s']:.2f} | "
             f"{' / '.join(f'{n:,}' for n in r['routed_per_replica'])} | "
             f"{'n/a' if cpu is None else f'{cpu:,.1f}'} | "
             f"{'n/a' if share is None else f'{share:.0%}'} |")
    return rows


def json_rows(rows: list[dict]) -> list[dict]:
    """The report rows: per replica count, the sharded sidecar against a native topic
    exchange with the same bindings."""
    return [{"name": f"sharded sidecar, {r['replicas']} replica(s)", "value": r["msgs_per_s"],
             "unit": "msg/s", "baseline": "native topic exchange",
             "baseline_value": r["native_msgs_per_s"],
             "ratio": r["msgs_per_s"] / r["native_msgs_per_s"],
             "ratio_means": "rtroute / baseline", "replicas": r["replicas"],
             "shards": r["shards"], "messages": r["messages"],
             "routed_per_replica": r["routed_per_replica"],
             "sidecar_cpu_us_per_msg": r["sidecar_cpu_us_per_msg"],
             "busiest_replica_cpu_share": r["busiest_replica_cpu_share"], "runs": r["runs"]}
            for r in rows]
