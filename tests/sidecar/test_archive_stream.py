"""``archive_stream``: a stream queue bound to the managed exchange keeps every message published
to it, as published (routing key with its wildcards, body, properties, the headers a stream
keeps: see the per-version rule below), while the
sidecar routes the same flow as before; readers replay it by offset and take nothing from each
other or from the sidecar. An archive name held by a queue of another type is refused with the
broker's reason in the sidecar's log, and the exchange is not served half-declared."""
from __future__ import annotations

import uuid

import pika
import pytest

from ..conftest import wait_for
from .conftest import broker_toml, delete_layouts, publish_in_batches, wait_depth

pytestmark = [pytest.mark.broker]


def _config(tmp_path, name: str, archive: str) -> str:
    path = tmp_path / "rtroute.toml"
    path.write_text(broker_toml() + f'[[exchange]]\nname = "{name}"\n'
                    f'archive_stream = "{archive}"\narchive_max_age = "1D"\n')
    return str(path)


def read_stream(uri: str, stream: str, count: int, timeout: float = 20) -> list:
    """``count`` messages of ``stream`` from its first offset: (offset, key, headers, body)."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=500)
        got = []
        for method, props, body in ch.consume(stream, arguments={"x-stream-offset": "first"},
                                              inactivity_timeout=timeout):
            if method is None:
                break
            headers = dict(props.headers or {})
            got.append((headers.pop("x-stream-offset"), method.routing_key, headers, body))
            ch.basic_ack(method.delivery_tag)
            if len(got) == count:
                break
        ch.cancel()
        return got
    finally:
        conn.close()


@pytest.fixture
def names(broker_uri):
    name = f"rtroute-test.archive.{uuid.uuid4().hex[:8]}"
    archive, queue = f"{name}.archive", f"{name}.q"
    yield name, archive, queue
    delete_layouts([name], [archive, queue])


def test_every_publish_is_kept_in_the_stream_as_published_and_routed_as_before(
        sidecars, tmp_path, broker_uri, channel, names, broker_version):
    name, archive, queue = names
    sc = sidecars("-c", _config(tmp_path, name, archive))
    sc.wait_running(name)
    channel.queue_declare(queue)
    channel.queue_bind(queue, f"{name}.bindings", "eu.orders.created")
    keys = ["eu.orders.created", "*.orders.created", "eu.#", "#.created", "us.orders.created"]
    messages = [(keys[i % len(keys)], f"m{i}".encode(),
                 pika.BasicProperties(headers={"n": i, "CC": ["x.y"]} if i % 7 == 0 else {"n": i},
                                      message_id=str(i)))
                for i in range(500)]
    publish_in_batches(broker_uri, name, messages)
    routed = sum(1 for key, _, _ in messages if key != "us.orders.created")
    wait_depth(channel, queue, routed)

    first = read_stream(broker_uri, archive, len(messages))
    assert [(key, headers["n"], body) for _, key, headers, body in first] == \
        [(key, props.headers["n"], body) for key, body, props in messages]
    # what a stream keeps of an AMQP 0-9-1 message's headers (the broker converts it; measured):
    # 3.x drops every array- or table-valued header (CC included), 4.x keeps an array of strings
    # (a mixed array or a table it drops too: docs/rabbitmq-versions.md)
    cc = [b"x.y"] if broker_version < (4,) else ["x.y"]
    kept = [h.get("CC") for _, _, h, _ in first[:8]]
    assert kept == ([None] * 8 if broker_version < (4,) else [cc, *[None] * 6, cc])
    offsets = [offset for offset, *_ in first]
    assert offsets == list(range(offsets[0], offsets[0] + len(messages)))
    # a second reader gets the same messages: reading took nothing
    assert read_stream(broker_uri, archive, len(messages)) == first
    assert channel.queue_declare(queue, passive=True).method.message_count == routed


def test_an_archive_name_taken_by_a_classic_queue_is_refused_with_the_brokers_reason(
        sidecars, tmp_path, channel, names):
    name, archive, _ = names
    channel.queue_declare(archive, durable=True)
    sc = sidecars("-c", _config(tmp_path, name, archive))
    wait_for(lambda: "x-queue-type" in sc.log() or sc.proc.poll() is not None, 30)
    assert "inequivalent arg 'x-queue-type'" in sc.log()
    assert archive in sc.log()
    assert (sc.exchange(name) or {}).get("state") != "running"
