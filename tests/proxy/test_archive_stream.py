"""``rtroute proxy --archive-stream``: a stream keeps every message published to an x-rtopic
exchange ``NAME``, however it came in -- through the proxy (rewritten into one publish to
``NAME.bindings``, which reaches the stream by the archive key the proxy adds to its ``BCC``),
published to ``NAME`` directly on the broker, beside a sidecar that routes those -- each once,
matched or not; the stream's rows route under ``spark route``'s routing as the live path did;
a publish whose archive is not bound is refused, never confirmed."""
from __future__ import annotations

from collections import Counter

import pika
import pyarrow as pa
import pytest

from rtroute.routing.rtopic_layout import ARCHIVE_KEY
from rtroute.spark.batches import BatchRouter
from rtroute.spark.stream_consumer import read_range

from ..conftest import BROKER_URI, wait_for
from ..sidecar.conftest import SidecarProcess, broker_toml

pytestmark = pytest.mark.broker

BINDINGS = {"q1": "a.b", "q2": "c.d"}
# (id, routing key, headers): through the proxy
THROUGH = [
    ("p-literal", "a.b", None),
    ("p-wildcard", "a.*", None),
    ("p-all", "#", None),
    ("p-none", "zz.top", None),                       # matches no binding: archived all the same
    ("p-cc", "a.b", {"CC": ["c.d"]}),
    ("p-bcc", "x.y", {"BCC": ["a.b"]}),               # reaches q1 by its real BCC only
    ("p-headers", "c.*", {"n": 7, "s": "text"}),
]
DIRECT = [("d-literal", "a.b", None), ("d-none", "nothing.here", None)]


@pytest.fixture
def archive(exchange_name, broker_uri):
    """The stream ``NAME.archive`` (declared as an operator would), deleted after."""
    name = f"{exchange_name}.archive"
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        conn.channel().queue_declare(name, durable=True, arguments={"x-queue-type": "stream"})
    finally:
        conn.close()
    yield name
    conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
    try:
        conn.channel().queue_delete(name)
    finally:
        conn.close()


def _publish(ch, exchange: str, messages) -> None:
    for message_id, key, headers in messages:
        ch.basic_publish(exchange, key, message_id.encode(),
                         pika.BasicProperties(message_id=message_id, headers=headers))


def _archived(uri: str, stream: str, count: int) -> pa.Table:
    """The stream's first ``count`` messages as the Spark source reads them (its rows)."""
    def enough() -> bool:
        conn = pika.BlockingConnection(pika.URLParameters(uri))
        try:
            ch = conn.channel()
            ch.basic_qos(prefetch_count=100)
            seen = 0
            for method, _props, _body in ch.consume(stream, arguments={
                    "x-stream-offset": "first"}, inactivity_timeout=1):
                if method is None:
                    break
                seen += 1
                ch.basic_ack(method.delivery_tag)
            return seen >= count
        finally:
            conn.close()

    wait_for(enough, 20)
    return pa.Table.from_batches(list(read_range(uri, stream, 0, count)))


def _live(ch, queues: list[str]) -> dict[str, list[str]]:
    """Each message id -> the queues that received it (sorted)."""
    got: dict[str, list[str]] = {}
    for queue in queues:
        while True:
            method, props, _body = ch.basic_get(queue, auto_ack=True)
            if method is None:
                break
            got.setdefault(props.message_id, []).append(queue)
    return {k: sorted(v) for k, v in got.items()}


def _client(proxy, name: str, durable: bool = False
            ) -> tuple[pika.BlockingConnection, object, list[str]]:
    client = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    ch = client.channel()
    ch.confirm_delivery()
    ch.exchange_declare(name, "x-rtopic", durable=durable)
    queues = []
    for q, key in BINDINGS.items():
        queue = f"{name}.{q}"
        ch.queue_declare(queue, exclusive=True)
        ch.queue_bind(queue, name, key)
        queues.append(queue)
    return client, ch, queues


def test_every_message_published_to_name_is_archived_once(proxies, exchange_name, archive,
                                                          broker_uri, broker_version):
    name = exchange_name
    proxy = proxies("--archive-stream", "{exchange}.archive")
    client, ch, queues = _client(proxy, name)
    _publish(ch, name, THROUGH)
    # mandatory, matching nothing: routed to the archive, so not returned (docs/proxy.md)
    ch.basic_publish(name, "no.match", b"p-mandatory",
                     pika.BasicProperties(message_id="p-mandatory"), mandatory=True)
    direct = pika.BlockingConnection(pika.URLParameters(broker_uri))
    dch = direct.channel()
    dch.confirm_delivery()
    _publish(dch, name, DIRECT)    # straight to the fanout NAME, around the proxy
    direct.close()

    ids = [m[0] for m in THROUGH] + ["p-mandatory"] + [m[0] for m in DIRECT]
    rows = _archived(broker_uri, archive, len(ids))
    assert Counter(rows.column("message_id").to_pylist()) == Counter(ids)  # each exactly once
    by_id = {r["message_id"]: r for r in rows.to_pylist()}
    for message_id, key, _headers in THROUGH:
        assert (by_id[message_id]["routing_key"], by_id[message_id]["exchange"]) == \
            (key, f"{name}.bindings")   # the client's key; the exchange the proxy published to
        assert "BCC" not in (by_id[message_id]["headers"] or "")   # stripped by the broker
        assert ARCHIVE_KEY not in (by_id[message_id]["headers"] or "")
    for message_id, key, _headers in DIRECT:
        assert (by_id[message_id]["routing_key"], by_id[message_id]["exchange"]) == (key, name)

    # the live path (what the queues got) against `spark route`'s routing of the archive
    live = _live(ch, queues)
    client.close()
    router = BatchRouter("rtopic", [(f"{name}.{q}", key) for q, key in BINDINGS.items()])
    routed = router.route_batch(rows.combine_chunks().to_batches()[0]).to_pylist()
    replayed = {r["message_id"]: sorted(r["destinations"]) for r in routed}
    assert live == {"p-literal": [queues[0]], "p-wildcard": [queues[0]],
                    "p-all": queues, "p-cc": queues, "p-bcc": [queues[0]],
                    "p-headers": [queues[1]]}
    for message_id in ("p-literal", "p-wildcard", "p-all", "p-headers", "p-none",
                       "p-mandatory"):
        assert replayed[message_id] == live.get(message_id, []), message_id
    # what a stream cannot replay (docs/spark.md): a real BCC is stripped before any queue
    # stores the message, so the archive routes p-bcc nowhere
    assert replayed["p-bcc"] == []
    # CC survives in the stream on 4.x (a message annotation); 3.x drops array headers from
    # a stream (docs/rabbitmq-versions.md), so there the archive routes by the key alone
    assert replayed["p-cc"] == (queues if broker_version >= (4,) else [queues[0]])
    # direct publishes are archived; with no sidecar running nothing routed them live
    assert "d-literal" not in live and replayed["d-literal"] == [queues[0]]


def test_a_publish_whose_archive_is_not_bound_is_refused(proxies, exchange_name, archive,
                                                         broker_uri):
    name = exchange_name
    proxy = proxies("--archive-stream", "{exchange}.archive")
    client, ch, _queues = _client(proxy, name)
    ch.basic_publish(name, "a.b", b"archived", pika.BasicProperties(message_id="before"))
    # the archive unbound on the broker, around the proxy: once the proxy saw it, a publish
    # is refused (its channel closed with 404), never confirmed and left out of the archive
    broker = pika.BlockingConnection(pika.URLParameters(broker_uri))
    broker.channel().queue_unbind(archive, f"{name}.bindings", ARCHIVE_KEY)
    broker.close()

    refusal = []

    def refused() -> bool:
        channel = client.channel()
        channel.confirm_delivery()
        try:
            channel.basic_publish(name, "a.b", b"x", pika.BasicProperties(message_id="late"))
        except pika.exceptions.ChannelClosedByBroker as exc:
            refusal.append(exc)
            return True
        channel.close()
        return False

    wait_for(refused, 20)
    assert refusal[0].reply_code == 404
    assert f"archive stream '{archive}' not bound" in refusal[0].reply_text
    # declaring NAME again through the proxy binds it again, and publishes pass
    ch = client.channel()
    ch.confirm_delivery()
    ch.exchange_declare(name, "x-rtopic")
    wait_for(lambda: not refused(), 20)
    client.close()


def test_declaring_without_the_stream_is_refused(proxies, exchange_name):
    proxy = proxies("--archive-stream", "{exchange}.missing-archive")
    client = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        with pytest.raises(pika.exceptions.ChannelClosedByBroker) as refused:
            client.channel().exchange_declare(exchange_name, "x-rtopic")
        assert refused.value.reply_code == 404
        assert f"{exchange_name}.missing-archive" in refused.value.reply_text
    finally:
        client.close()


def test_beside_a_sidecar_each_message_is_archived_once(tmp_path, proxies, exchange_name,
                                                        broker_uri):
    """The sidecar archives what is published to ``NAME`` (its archive bound there) and binds
    the same stream to ``NAME.bindings`` with the archive key for the proxy; its own
    republishes never carry that key, so nothing is archived twice."""
    name = exchange_name
    stream = f"{name}.archive"
    config = tmp_path / "rtroute.toml"
    config.write_text(broker_toml() + f'[[exchange]]\nname = "{name}"\n'
                      f'archive_stream = "{stream}"\n')
    sidecar = SidecarProcess(["-c", str(config)], tmp_path / "sidecar.log")
    try:
        sidecar.wait_running(name)
        proxy = proxies("--archive-stream", "{exchange}.archive")
        client, ch, queues = _client(proxy, name, durable=True)  # the sidecar's layout
        sidecar.wait_running(name, bindings=len(BINDINGS) + 1)   # the archive's key too
        _publish(ch, name, THROUGH)
        direct = pika.BlockingConnection(pika.URLParameters(BROKER_URI))
        dch = direct.channel()
        dch.confirm_delivery()
        _publish(dch, name, [("d-all", "#", None), ("d-literal", "a.b", None),
                             ("d-none", "nothing.here", None)])
        direct.close()
        ids = [m[0] for m in THROUGH] + ["d-all", "d-literal", "d-none"]
        rows = _archived(broker_uri, stream, len(ids))
        assert Counter(rows.column("message_id").to_pylist()) == Counter(ids)
        wait_for(lambda: ch.queue_declare(queues[0], passive=True).method.message_count >= 7,
                 20)
        live = _live(ch, queues)
        assert live["d-all"] == queues and live["d-literal"] == [queues[0]]
        client.close()
        # nothing more arrives in the archive (a sidecar republish that reached it would)
        assert read_count(broker_uri, stream) == len(ids)
    finally:
        sidecar.stop()
        conn = pika.BlockingConnection(pika.URLParameters(broker_uri))
        try:
            conn.channel().queue_delete(stream)
        finally:
            conn.close()


def read_count(uri: str, stream: str) -> int:
    """How many messages ``stream`` holds (read from first until 2 s without one)."""
    conn = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        ch = conn.channel()
        ch.basic_qos(prefetch_count=100)
        seen = 0
        for method, _props, _body in ch.consume(stream, arguments={"x-stream-offset": "first"},
                                                inactivity_timeout=2):
            if method is None:
                break
            seen += 1
            ch.basic_ack(method.delivery_tag)
        return seen
    finally:
        conn.close()

