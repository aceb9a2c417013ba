"""`rtroute bench shovel`: rtroute's shovel against RabbitMQ's shovel plugin, in one run.

For each ack mode both move the same N messages (100-byte bodies, transient) from one queue to
another on the local broker, through network connections (``amqp://...@127.0.0.1``) for both:

- rtroute: a :class:`~rtroute.shovel.worker.ShovelWorker` in this process;
- the plugin: a dynamic shovel created through the management API (``PUT
  /api/parameters/shovel/...``, needs ``rabbitmq_shovel``) and deleted afterwards.

Each run starts with the source queue filled with N messages and the destination empty, and
is timed from the start of the shovel until the destination holds N (counted with a passive
``queue.declare``, which is exact and current). Rates fall as queues grow, so both run at the
same depth; the runs alternate (plugin, rtroute) per mode, ``repeat`` times, and the best rate
of each counts (the broker shares the machine, so single runs are noisy).
"""
from __future__ import annotations

import time
import uuid
from typing import Any, Callable

from rtroute.amqp import ManagementClient, NotFound, connect_blocking
from rtroute.amqp.publish_tool import publish
from rtroute.config.constants import DEFAULT_URI
from rtroute.config.rtroute_toml import loads

__all__ = ["run"]

MODES = ("on_confirm", "on_publish", "no_ack")
_PREFETCH = 1000  # the plugin's default prefetch, used by both


def _fill(uri: str, queue: str, count: int) -> None:
    result = publish(uri, "", queue, count, 100, window=2000, progress_interval=0,
                     echo=lambda *_: None)
    if result.get("error") or result.get("acked") != count:
        raise RuntimeError(f"filling {queue} failed: {result.get('error') or result}")


def _wait_for(channel: Any, queue: str, count: int, timeout: float) -> float:
    start = time.perf_counter()
    while True:
        depth = channel.queue_declare(queue, passive=True).method.message_count
        if depth >= count:
            return time.perf_counter()
        if time.perf_counter() - start > timeout:
            raise TimeoutError(f"{queue}: {depth} of {count} messages after {timeout:.0f} s")
        time.sleep(0.005)


def _time_rtroute(uri: str, src: str, dst: str, mode: str, count: int, timeout: float,
                  channel: Any) -> float:
    from rtroute.shovel.worker import ShovelWorker

    (config,) = loads(
        f'[[shovel]]\nname = "bench-{mode}"\nsources = {{ broker = "{uri}" }}\n'
        f'destinations = {{ broker = "{uri}" }}\nqueue = "{src}"\ndest-queue = "{dst}"\n'
        f'ack_mode = "{mode}"\nprefetch_count = {_PREFETCH}\n').shovels
    worker = ShovelWorker(config)
    start = time.perf_counter()
    worker.start()
    try:
        end = _wait_for(channel, dst, count, timeout)
    finally:
        worker.stop()
        worker.join(15)
    return end - start


def _time_plugin(mgmt: ManagementClient, uri: str, src: str, dst: str, mode: str, count: int,
                 timeout: float, channel: Any) -> float:
    name = f"rtroute-bench-{uuid.uuid4().hex[:8]}"
    value = {"src-uri": uri, "src-queue": src, "dest-uri": uri, "dest-queue": dst,
             "ack-mode": mode.replace("_", "-"), "src-prefetch-count": _PREFETCH}
    start = time.perf_counter()
    mgmt.put_shovel(name, value)
    try:
        end = _wait_for(channel, dst, count, timeout)
    finally:
        try:
            mgmt.delete_shovel(name)
        except NotFound:
            pass
    return end - start


def run(count: int = 100_000, echo: Callable[[str], Any] = print, uri: str = DEFAULT_URI,
        modes: tuple[str, ...] = MODES, repeat: int = 2,
        timeout: float = 300.0) -> dict[str, Any]:
    """Move ``count`` messages with each ack mode, rtroute and the plugin; print the table.

    Returns:
        ``{"count", "repeat", "results": {mode: {"rtroute": msgs/s, "plugin": msgs/s,
        "ratio"}}, "runs": {mode: {"rtroute": [msgs/s, ...], "plugin": [...]}}}``; the
        results are the best of ``repeat`` runs.

    Raises:
        ManagementError: the management API or the shovel plugin is not available.
        TimeoutError: a run did not finish within ``timeout`` seconds.
    """
    mgmt = ManagementClient.from_amqp_uri(uri)
    mgmt.request("GET", "shovels")  # fails early without rabbitmq_shovel_management
    connection = connect_blocking(uri, connection_name="rtroute-bench-shovel")
    channel = connection.channel()
    tag = uuid.uuid4().hex[:8]
    src, dst = f"rtroute-bench.shovel.{tag}.src", f"rtroute-bench.shovel.{tag}.dst"
    results: dict[str, dict[str, float]] = {}
    runs: dict[str, dict[str, list[float]]] = {}
    echo(f"shovel benchmark: {count:,} messages of 100 bytes, queue to queue on "
         f"{uri.split('@')[-1]}, prefetch {_PREFETCH}, best of {repeat}")
    try:
        for mode in modes:
            runs[mode] = {"plugin": [], "rtroute": []}
            for _ in range(repeat):
                for who in ("plugin", "rtroute"):
                    for queue in (src, dst):
                        channel.queue_delete(queue)
                        channel.queue_declare(queue, durable=True)
                    _fill(uri, src, count)
                    if who == "plugin":
                        seconds = _time_plugin(mgmt, uri, src, dst, mode, count, timeout,
                                               channel)
                    else:
                        seconds = _time_rtroute(uri, src, dst, mode, count, timeout, channel)
                    runs[mode][who].append(count / seconds)
                    echo(f"  {mode:<11} {who:<8} {seconds:7.2f} s  {count / seconds:10,.0f} "
                         "msgs/s")
            rates = {who: max(values) for who, values in runs[mode].items()}
            rates["ratio"] = rates["rtroute"] / rates["plugin"]
            results[mode] = rates
    finally:
        for queue in (src, dst):
            channel.queue_delete(queue)
        connection.close()
    echo("")
    echo(f"{'ack mode':<12}{'rtroute msgs/s':>16}{'plugin msgs/s':>16}{'ratio':>8}")
    for mode, rates in results.items():
        echo(f"{mode:<12}{rates['rtroute']:>16,.0f}{rates['plugin']:>16,.0f}"
             f"{rates['ratio']:>8.2f}")
    return {"count": count, "repeat": repeat, "results": results, "runs": runs}


def json_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The report rows of a run: rtroute's shovel against the plugin per ack mode (best rates)."""
    return [{"name": "rtroute shovel", "value": rates["rtroute"], "unit": "msg/s",
             "baseline": "RabbitMQ shovel plugin", "baseline_value": rates["plugin"],
             "ratio": rates["ratio"], "ratio_means": "rtroute / baseline", "ack_mode": mode,
             "messages": result["count"], "runs": result["runs"][mode]}
            for mode, rates in result["results"].items()]


if __name__ == "__main__":  # pragma: no cover
    run()
