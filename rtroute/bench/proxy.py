"""`rtroute bench proxy`: publishing through ``rtroute proxy`` to an x-rtopic exchange against
publishing straight to a native topic exchange, in one run (and the x-rtopic plugin's figure on
its own broker with ``--plugin-uri``).

The same publisher (:func:`rtroute.amqp.publish`, pika with a confirm window of 2,000) sends
100-byte messages; each path is timed from the first publish until the queues hold every copy.
The proxy's own CPU time per message (user + system, from ``/proc``) is reported beside its
rate: on a machine where the broker and the proxy share the cores, it is the proxy's cost.
The bindings are those of ``rtroute bench publish`` (10,000 by default, the matched ones
included); the rtopic path binds plain keys and publishes the wildcard key, the native path
binds the wildcard key and publishes a literal one. The proxy runs as its own ``rtroute proxy``
process on a free port.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
import uuid
from typing import Any, Callable

import pika

from rtroute.amqp import connect_blocking, publish
from rtroute.amqp.uri import parse_uri
from rtroute.bench.publish import BINDINGS, Shape, _close, _medians, _open, _pika_path, _Setup
from rtroute.bench.publish import SHAPES as PUBLISH_SHAPES
from rtroute.config.constants import DEFAULT_URI
from rtroute.ops.netaddr import free_port
from rtroute.routing.delivery_plan import bindings_exchange_type
from rtroute.routing.rtopic_layout import (
    BINDINGS_SUFFIX,
    LAYOUT_ARGUMENT,
    LAYOUT_VALUE,
    REGISTRY_EXCHANGE,
)

# the one-key shapes of `rtroute bench publish` up to 10 queues/msg, fewer messages a run
SHAPES = [dataclasses.replace(s, messages=20_000 if s.matched == 1 else 5_000)
          for s in PUBLISH_SHAPES if s.matched <= 10]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proxy_uri(uri: str, port: int) -> str:
    """``uri`` (credentials, vhost, query) with the proxy's host and port."""
    parsed = parse_uri(uri)
    scheme, rest = uri.split("://", 1)
    authority, sep, tail = rest.partition("/")
    userinfo = authority.rpartition("@")[0]
    userinfo = f"{userinfo}@" if userinfo else ""
    del parsed
    return f"amqp://{userinfo}127.0.0.1:{port}{sep}{tail}" if scheme == "amqp" else \
        f"amqp://{userinfo}127.0.0.1:{port}/{tail}"


def start_proxy(uri: str, management_uri: str | None) -> tuple[subprocess.Popen, int]:
    port = free_port()
    env = dict(os.environ, RTROUTE_URI=uri)  # not in argv, where ps shows it
    if management_uri:
        env["RTROUTE_MANAGEMENT_URI"] = management_uri
    proc = subprocess.Popen([sys.executable, "-m", "rtroute.cli", "proxy", "--listen",
                             f"127.0.0.1:{port}", "--log-level", "WARNING"], env=env)
    deadline = time.monotonic() + 60
    while True:
        try:
            connect_blocking(proxy_uri(uri, port)).close()
            return proc, port
        except Exception:  # noqa: BLE001 - any failure to connect: not up yet
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("rtroute proxy did not come up") from None
            time.sleep(0.2)


def register_rtopic(channel: Any, name: str, proxied: str, timeout: float = 60.0) -> None:
    """Makes ``name`` an x-rtopic exchange of the proxy's layout (``NAME.bindings`` exists):
    its marked fanout and its registration, made on the broker as ``rtroute definitions
    import`` makes them, then declared through the proxy until the proxy knows it. (Declared
    through the proxy alone, on a broker that runs the x-rtopic plugin too, ``name`` would be
    the plugin's: docs/migrate.md, side by side.)"""
    channel.exchange_declare(REGISTRY_EXCHANGE, "direct", durable=True, internal=True)
    channel.exchange_declare(name, "fanout", durable=True,
                             arguments={LAYOUT_ARGUMENT: LAYOUT_VALUE})
    channel.exchange_bind(name + BINDINGS_SUFFIX, REGISTRY_EXCHANGE, name)
    deadline = time.monotonic() + timeout
    while True:
        through = connect_blocking(proxied, heartbeat=0)
        try:
            through.channel().exchange_declare(name, "x-rtopic", durable=True)
            return
        except pika.exceptions.ChannelClosedByBroker:
            if time.monotonic() > deadline:  # 406: the proxy has not seen the registration
                raise RuntimeError(f"the proxy did not learn {name} within {timeout:.0f} s")
            time.sleep(0.2)
        finally:
            if through.is_open:
                through.close()


def run_shape(uri: str, shape: Shape, proxied: str, echo: Callable[[str], None],
              repeat: int, plugin_uri: str | None, bindings: int, proxy_pid: int = 0,
              broker_pid: int = 0) -> dict:
    """One shape, each path ``repeat`` times (alternating); returns the median rates and the
    proxy's median CPU microseconds per message (process ``proxy_pid``), and with
    ``broker_pid`` (the broker's process on this machine) the broker's per path."""
    conn, channel, plugin_conn, plugin_channel = _open(uri, plugin_uri, "rtroute bench proxy")
    version = conn._impl.server_properties.get("version")  # NAME.bindings as the proxy has it
    kind = bindings_exchange_type(version.decode() if isinstance(version, bytes) else version)
    setup = _Setup(channel, shape, uuid.uuid4().hex[:6], plugin_channel, bindings, kind)
    rates: dict[str, list[float]] = {"native": [], "proxy": []}
    cpu: list[float] = []
    broker: dict[str, list[float]] = {"native": [], "proxy": []}
    if plugin_channel is not None:
        rates["plugin"] = []
    try:
        register_rtopic(channel, setup.name, proxied)
        # the first publish waits until the proxy has listed the bindings
        publish(proxied, setup.name, "warm.up", 1, 10, echo=lambda *_: None)
        for run_number in range(1, repeat + 1):
            setup.purge(channel)
            spent = cpu_seconds(broker_pid)
            rates["native"].append(_pika_path(uri, setup.native, shape.topic_keys, shape,
                                              channel, setup.queues))
            broker["native"].append((cpu_seconds(broker_pid) - spent) * 1e6 / shape.messages)
            setup.purge(channel)
            used, spent = cpu_seconds(proxy_pid), cpu_seconds(broker_pid)
            rates["proxy"].append(_pika_path(proxied, setup.name, shape.rtopic_keys, shape,
                                             channel, setup.queues))
            cpu.append((cpu_seconds(proxy_pid) - used) * 1e6 / shape.messages)
            broker["proxy"].append((cpu_seconds(broker_pid) - spent) * 1e6 / shape.messages)
            if plugin_channel is not None:
                rates["plugin"].append(setup.plugin_rate(plugin_uri, shape, plugin_channel)[0])
            echo(f"  {shape.label}, run {run_number}/{repeat}: " + ", ".join(
                f"{path} {values[-1]:,.0f}" for path, values in rates.items()) +
                f" msg/s; proxy CPU {cpu[-1]:.1f} µs/msg" + (
                    f"; broker CPU topic {broker['native'][-1]:.1f}, proxy "
                    f"{broker['proxy'][-1]:.1f} µs/msg" if broker_pid else ""))
    finally:
        _close(conn, channel, plugin_conn, plugin_channel, setup)
    medians = _medians(rates, repeat)
    row = {"scenario": shape.label, "messages": shape.messages,
           "queues_per_message": shape.matched, "bindings": setup.total,
           "header_per_message": shape.vary_header, **medians,
           "proxy_cpu_us_per_msg": sorted(cpu)[len(cpu) // 2],
           "proxy_vs_native": medians["proxy_msgs_per_s"] / medians["native_msgs_per_s"]}
    if broker_pid:  # the broker's CPU per message, the purges and waits included
        row["broker_cpu_us_per_msg"] = {path: sorted(v)[len(v) // 2]
                                        for path, v in broker.items()}
    if "plugin_msgs_per_s" in medians:
        row["proxy_vs_plugin"] = medians["proxy_msgs_per_s"] / medians["plugin_msgs_per_s"]
    return row


def run(uri: str = DEFAULT_URI, shapes: list[Shape] = SHAPES, echo: Callable[[str], Any] = print,
        repeat: int = 3, management_uri: str | None = None, plugin_uri: str | None = None,
        bindings: int = BINDINGS, broker_pid: int = 0) -> list[dict]:
    """Runs every shape through one proxy process; prints progress and a table of medians
    (with ``broker_pid``, the local broker's process, its CPU per message on each path)."""
    echo(f"rtroute proxy vs native topic exchange ({bindings:,} bindings, 100-byte messages, "
         f"median of {repeat} runs)")
    proc, port = start_proxy(uri, management_uri)
    try:
        rows = [run_shape(uri, s, proxy_uri(uri, port), echo, repeat, plugin_uri, bindings,
                          proc.pid, broker_pid) for s in shapes]
    finally:
        proc.terminate()
        proc.wait(30)
    paths = [p for p in ("native", "proxy", "plugin") if f"{p}_msgs_per_s" in rows[0]]
    titles = {"native": "topic exchange", "proxy": "rtroute proxy",
              "plugin": "x-rtopic plugin (--plugin-uri)"}
    echo("")
    plugin = "plugin" in paths
    echo("| scenario | " + " | ".join(f"{titles[p]} msg/s" for p in paths) +
         " | proxy CPU µs/msg | proxy / topic exchange |" + (" proxy / plugin |" if plugin else ""))
    echo("|---|" + "---:|" * (len(paths) + 2 + plugin))
    for r in rows:
        echo(f"| {r['scenario']} | " + " | ".join(f"{r[f'{p}_msgs_per_s']:,.0f}" for p in paths)
             + f" | {r['proxy_cpu_us_per_msg']:.1f} | {r['proxy_vs_native']:.2f} |"
             + (f" {r['proxy_vs_plugin']:.2f} |" if plugin else ""))
    if broker_pid:
        echo("")
        echo("| scenario | broker CPU µs/msg, topic exchange | broker CPU µs/msg, proxy |")
        echo("|---|---:|---:|")
        for r in rows:
            b = r["broker_cpu_us_per_msg"]
            echo(f"| {r['scenario']} | {b['native']:.1f} | {b['proxy']:.1f} |")
    return rows


def json_rows(rows: list[dict]) -> list[dict]:
    """The report rows: the proxy against the native topic exchange."""
    return [{"name": "rtroute proxy", "value": r["proxy_msgs_per_s"], "unit": "msg/s",
             "baseline": "native topic exchange", "baseline_value": r["native_msgs_per_s"],
             "ratio": r["proxy_vs_native"], "ratio_means": "rtroute / baseline",
             **{k: v for k, v in r.items() if k != "runs"}} for r in rows]
