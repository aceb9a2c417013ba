"""The library's publisher-side routing and the sidecar on one managed exchange at once:
messages published to ``NAME`` (any language, through the sidecar) and through
``RTopicPublisher`` (straight to ``NAME.bindings``) reach the same queues, once each."""
from __future__ import annotations

import pika
import pytest

from rtroute import RTopicPublisher

from ..conftest import MANAGEMENT_URI, wait_for
from .conftest import depth, drain
from .test_sidecar_broker import PLUGIN, README_EXAMPLES, bind_queues, start_sidecar

pytestmark = pytest.mark.broker


def test_library_and_sidecar_publishers_reach_the_same_queues(sidecars, channel, managed,
                                                               broker_uri):
    name = managed("pubside")
    sc = start_sidecar(sidecars, channel, name)
    queues = bind_queues(channel, managed, name, PLUGIN.items())
    sc.wait_running(name, bindings=6)
    channel.confirm_delivery()
    with RTopicPublisher(broker_uri, name, management_uri=MANAGEMENT_URI) as pub:
        wait_for(lambda: len(pub.bindings) == 6)
        futures = []
        for i, (key, _) in enumerate(README_EXAMPLES):
            channel.basic_publish(name, key, f"sidecar-{i}".encode())  # through the sidecar
            futures.append(pub.publish(key, f"library-{i}".encode()))  # one crossing
        for future in futures:
            future.result(timeout=10)
        # BCC through the sidecar needs the alias header; the library takes the real one
        channel.basic_publish(name, "none.such", b"sidecar-bcc", properties=pika.BasicProperties(
            headers={"x-rtroute-bcc": ["#.error"]}))
        pub.publish("none.such", b"library-bcc", headers={"BCC": ["#.error"]}).result(10)
    total = 2 * sum(len(expected) for _, expected in README_EXAMPLES) + 2
    wait_for(lambda: sum(depth(channel, q) for q in queues.values()) >= total, 20)
    got = {dest: sorted(body.decode() for _, _, body in drain(channel, q))
           for dest, q in queues.items()}
    for dest in PLUGIN:
        expected = sorted(f"{who}-{i}" for i, (_, dests) in enumerate(README_EXAMPLES)
                          if dest in dests for who in ("sidecar", "library"))
        if dest == "B":
            expected = sorted(expected + ["library-bcc", "sidecar-bcc"])
        assert got[dest] == expected, dest
