"""The proxy, the sidecar and the library on one exchange at once: a client through the proxy,
a plain publisher to NAME (routed by the sidecar) and an RTopicPublisher reach the same queues,
each message once, consumers through the proxy seeing the exchange as declared."""
from __future__ import annotations

import time

import pika
import pytest

from rtroute import RTopicPublisher

from ..conftest import BROKER_URI, MANAGEMENT_URI, wait_for
from ..sidecar.conftest import SidecarProcess
from .test_plugin_behaviour import BINDINGS, drain

pytestmark = pytest.mark.broker

KEY = "#.info"          # A, C, E and F (the plugin README's table)
MATCHED = "ACEF"


def test_proxy_sidecar_and_library_on_one_exchange(tmp_path, proxies, exchange_name):
    name = exchange_name
    sidecar = SidecarProcess(["--rtopic", name], tmp_path / "sidecar.log")
    try:
        sidecar.wait_running(name)
        proxy = proxies()
        client = pika.BlockingConnection(pika.URLParameters(proxy.uri))
        ch = client.channel()
        ch.confirm_delivery()
        ch.exchange_declare(name, "x-rtopic", durable=True)   # the sidecar's layout is there
        for q, key in BINDINGS.items():
            ch.queue_declare(f"{name}.{q}", exclusive=True)
            ch.queue_bind(f"{name}.{q}", name, key)
        sidecar.wait_running(name, bindings=len(BINDINGS))

        ch.basic_publish(name, KEY, b"through the proxy")
        plain = pika.BlockingConnection(pika.URLParameters(BROKER_URI))
        plain_ch = plain.channel()
        plain_ch.confirm_delivery()
        plain_ch.basic_publish(name, KEY, b"to NAME, routed by the sidecar")
        plain.close()
        with RTopicPublisher(BROKER_URI, name, management_uri=MANAGEMENT_URI) as publisher:
            wait_for(lambda: publisher.ready and len(publisher.bindings) >= len(BINDINGS), 20)
            publisher.publish(KEY, b"from the library").result(10)

        def depths() -> dict[str, int]:
            return {q: ch.queue_declare(f"{name}.{q}", passive=True).method.message_count
                    for q in BINDINGS}

        wait_for(lambda: all(depths()[q] >= 3 for q in MATCHED), 20)
        time.sleep(0.5)  # a duplicate would land now
        got = drain(ch, name)
        for body, exchange, _key, _headers in got["A"]:
            if body == "through the proxy":
                assert exchange == name   # as declared, through the proxy
        client.close()
        for q in BINDINGS:
            bodies = sorted(body for body, _, _, _ in got[q])
            want = sorted(["through the proxy", "to NAME, routed by the sidecar",
                           "from the library"]) if q in MATCHED else []
            assert bodies == want, q
            assert all(key == KEY for _, _, key, _ in got[q])
    finally:
        sidecar.terminate()
