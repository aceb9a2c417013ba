"""`rtroute bench confirms`: transactions vs synchronous confirms vs windowed confirms.

Reproduces the headline of RabbitMQ's publisher-confirms documentation on this broker: one
transaction per message, one synchronous confirm per message (a round trip each), and the
windowed confirms of :class:`rtroute.amqp.ConfirmWindow`, side by side in one run.
"""
from __future__ import annotations

import time
import uuid
from typing import Callable

import pika

from rtroute.amqp import connect_blocking, publish
from rtroute.config.constants import DEFAULT_URI


def _rate(count: int, send: Callable[[], None]) -> float:
    start = time.perf_counter()
    for _ in range(count):
        send()
    return count / (time.perf_counter() - start)


def run(uri: str = DEFAULT_URI, slow_count: int = 2_000, fast_count: int = 50_000,
        persistent: bool = False, echo: Callable[[str], None] = print) -> list[dict]:
    """Publishes to a fresh queue three ways; prints and returns msgs/s and ratios."""
    queue = f"rtroute.bench.confirms.{uuid.uuid4().hex[:6]}"
    body = b"x" * 100
    props = pika.BasicProperties(delivery_mode=2 if persistent else 1)
    conn = connect_blocking(uri)
    rows = []
    ch = None
    try:
        ch = conn.channel()
        # durable (RabbitMQ 4 denies transient non-exclusive queues; another connection
        # publishes the windowed run), so --persistent messages really reach the disk
        ch.queue_declare(queue, durable=True)

        echo(f"transactions: {slow_count:,} messages, tx.commit after each ...")
        tx = conn.channel()
        tx.tx_select()

        def tx_send() -> None:
            tx.basic_publish("", queue, body, props)
            tx.tx_commit()

        rows.append({"path": "transaction per message", "messages": slow_count,
                     "msgs_per_s": _rate(slow_count, tx_send)})

        echo(f"synchronous confirms: {slow_count:,} messages, one round trip each ...")
        sync = conn.channel()
        sync.confirm_delivery()
        rows.append({"path": "synchronous confirm per message", "messages": slow_count,
                     "msgs_per_s": _rate(slow_count,
                                         lambda: sync.basic_publish("", queue, body, props))})

        echo(f"windowed confirms: {fast_count:,} messages, window 1000 ...")
        result = publish(uri, "", queue, fast_count, 100, window=1000, persistent=persistent,
                         echo=lambda *_: None)
        rows.append({"path": "windowed confirms (ConfirmWindow, 1000)", "messages": fast_count,
                     "msgs_per_s": result["msgs_per_s"]})
    finally:
        try:
            if ch is not None and ch.is_open:
                ch.queue_delete(queue)
        finally:
            conn.close()
    base = rows[0]["msgs_per_s"]
    echo("")
    echo("| path | messages | msg/s | vs transactions |")
    echo("|---|---:|---:|---:|")
    for r in rows:
        r["vs_transactions"] = r["msgs_per_s"] / base
        echo(f"| {r['path']} | {r['messages']:,} | {r['msgs_per_s']:,.0f} | "
             f"{r['vs_transactions']:,.1f}x |")
    return rows


def json_rows(rows: list[dict]) -> list[dict]:
    """The report rows of a run: windowed confirms against each slower path (msg/s)."""
    windowed = rows[-1]
    return [{"name": windowed["path"], "value": windowed["msgs_per_s"], "unit": "msg/s",
             "baseline": r["path"], "baseline_value": r["msgs_per_s"],
             "ratio": windowed["msgs_per_s"] / r["msgs_per_s"],
             "ratio_means": "rtroute / baseline", "messages": windowed["messages"],
             "baseline_messages": r["messages"]} for r in rows[:-1]]
