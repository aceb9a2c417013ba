"""200 hostile clients at once (giant frames, pipelined bad logins, slowloris) against one
proxy: its memory stays bounded and a well-behaved client keeps publishing through it."""
from __future__ import annotations

import struct
import threading
import time
import uuid

import pika
import pytest

from .raw_client import PROTOCOL_HEADER, RawClient, connection_open, start_ok, tune_ok
from .test_hostile_clients import USER, rss_mib

pytestmark = pytest.mark.broker
ATTACK_SECONDS = 12.0


def giant_frame(port: int, stop: threading.Event) -> None:
    try:
        client = RawClient(port)
        client.send(PROTOCOL_HEADER + struct.pack(">BHI", 1, 0, 2 ** 31))
        while not stop.is_set():
            client.send(b"\x00" * 65536)
    except OSError:
        pass  # refused: what the test wants


def bad_login(port: int, stop: threading.Event) -> None:
    while not stop.is_set():
        try:
            client = RawClient(port)
            client.send(PROTOCOL_HEADER + start_ok(USER, "wrong-" + uuid.uuid4().hex) +
                        tune_ok() + connection_open(f"made-up-{uuid.uuid4().hex[:6]}"))
            client.closed(timeout=15)
            client.close()
        except OSError:
            pass


def slowloris(port: int, stop: threading.Event) -> None:
    try:
        client = RawClient(port)
        for byte in PROTOCOL_HEADER:
            if stop.wait(1.0):
                break
            client.send(bytes((byte,)))
        stop.wait()
        client.close()
    except OSError:
        pass


def test_two_hundred_hostile_clients_neither_bloat_the_proxy_nor_stop_a_canary(
        proxies, exchange_name):
    proxy = proxies()
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    ch = conn.channel()
    ch.confirm_delivery()
    ch.exchange_declare(exchange_name, "x-rtopic", auto_delete=True)
    queue = ch.queue_declare("", exclusive=True).method.queue
    ch.queue_bind(queue, exchange_name, "canary.flow")
    stop = threading.Event()
    attackers = [threading.Thread(target=kind, args=(proxy.port, stop), daemon=True)
                 for kind in [giant_frame] * 70 + [bad_login] * 70 + [slowloris] * 60]
    for thread in attackers:
        thread.start()
    peak = 0.0
    confirmed = 0
    started = time.monotonic()
    try:
        while time.monotonic() - started < ATTACK_SECONDS:
            for _ in range(20):
                ch.basic_publish(exchange_name, "canary.*", b"x")  # raises unless confirmed
                confirmed += 1
            peak = max(peak, rss_mib(proxy.proc.pid))
    finally:
        stop.set()
    for thread in attackers:
        thread.join(20)
    print(f"proxy RSS peak {peak:.0f} MiB, canary confirms {confirmed}")
    assert peak < 300, f"proxy RSS reached {peak:.0f} MiB"
    assert confirmed >= 200, f"the canary got {confirmed} confirms in {ATTACK_SECONDS:g} s"
    assert ch.queue_declare(queue, passive=True).method.message_count == confirmed
    conn.close()
