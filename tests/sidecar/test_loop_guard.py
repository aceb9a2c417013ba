"""An exception while routing never ends the sidecar: the message it hit is dead-lettered with
the reason, its batch-mates are routed, and later messages keep flowing. The sidecar runs in
this process so that a fault can be injected into its router."""
from __future__ import annotations

import threading
import time
import uuid

import pytest

from rtroute.config.rtroute_toml import BindingConfig, ExchangeConfig
from rtroute.sidecar.service import Sidecar

pytestmark = pytest.mark.broker


def _get(channel, queue: str, timeout: float = 15):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        method, props, body = channel.basic_get(queue, auto_ack=True)
        if method is not None:
            return props, body
        time.sleep(0.05)
    return None, None


def test_an_exception_in_routing_dead_letters_that_message_and_serving_goes_on(
        broker_uri, channel, managed, caplog):
    name = managed("guard")
    queue, dead = f"{name}.q", f"rtroute-test.dead.{uuid.uuid4().hex[:8]}"
    channel.exchange_declare("rtroute.dead", "fanout", durable=True)
    for q in (queue, dead):
        channel.queue_declare(q, durable=True)
    managed.queues.extend([queue, dead])
    channel.queue_bind(dead, "rtroute.dead")
    spec = ExchangeConfig(name=name, bindings=[BindingConfig(queue, "ok.k")])
    sidecar = Sidecar(broker_uri, [spec], use_management=False)
    router = sidecar.exchanges[name].router
    decide_many = router.decide_many

    def faulty(batch):  # a bug that only one routing key triggers
        if any(key == "boom" for key, _headers in batch):
            raise KeyError("injected fault")
        return decide_many(batch)

    router.decide_many = faulty
    thread = threading.Thread(target=sidecar.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 15
        while sidecar.status()["exchanges"][0]["state"] != "running":
            assert time.monotonic() < deadline, "the sidecar did not start"
            time.sleep(0.05)
        for key in ("ok.k", "boom", "ok.k"):
            channel.basic_publish(name, key, f"{key}".encode())
        props, body = _get(channel, dead)
        assert body == b"boom"
        assert "KeyError" in props.headers["x-rtroute-error"]
        assert "injected fault" in props.headers["x-rtroute-error"]
        assert [_get(channel, queue)[1] for _ in range(2)] == [b"ok.k", b"ok.k"]
        channel.basic_publish(name, "ok.k", b"after")
        assert _get(channel, queue)[1] == b"after"
        status = sidecar.status()
        assert status["internal_errors"] >= 1
        assert status["exchanges"][0]["dead_lettered"] == 1
        assert status["exchanges"][0]["received"] == 4
        assert thread.is_alive()
    finally:
        sidecar.stop()
        thread.join(15)
    errors = [r for r in caplog.records if r.levelname == "ERROR" and "injected" in r.getMessage()]
    assert len(errors) == 1
