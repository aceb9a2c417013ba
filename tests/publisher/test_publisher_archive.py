"""RTopicPublisher(archive_stream=...): the archive stream keeps every message the publisher
publishes, once, as published, matched or not (as ``rtroute proxy --archive-stream`` does for
the proxy's publishes); while the stream is not bound, messages fail and are never sent."""
from __future__ import annotations

import uuid

import pika
import pytest

from rtroute import RTopicPublisher
from rtroute.amqp.confirm_window import Outcome
from rtroute.routing import PreconditionFailed
from rtroute.routing.rtopic_layout import ARCHIVE_KEY
from rtroute.spark.stream_consumer import read_range

from ..conftest import wait_for

# (id, routing key, headers, mandatory)
MESSAGES = [
    ("m-literal", "a.b", None, False),
    ("m-wildcard", "a.*", None, False),
    ("m-none", "zz.top", None, False),                 # matches no binding: archived all the same
    ("m-mandatory-none", "zz.top", None, True),        # routed to the archive: not returned
    ("m-cc", "x.y", {"CC": ["c.d"], "n": 7}, False),
    ("m-bcc", "x.y", {"BCC": ["a.b"]}, False),         # reaches q1 by its real BCC only
]


@pytest.fixture
def archived(channel):
    """``NAME.bindings`` (as the sidecar declares it), queues q1 (a.b) and q2 (c.d), and the
    stream ``NAME.archive``, not bound yet; all deleted after."""
    name = f"rtroute.test.pub-archive.{uuid.uuid4().hex[:8]}"
    bindings, stream = f"{name}.bindings", f"{name}.archive"
    channel.exchange_declare(bindings, "topic", durable=True)
    queues = {}
    for q, key in (("q1", "a.b"), ("q2", "c.d")):
        queue = channel.queue_declare("", exclusive=True).method.queue
        channel.queue_bind(queue, bindings, key)
        queues[q] = queue
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    yield name, stream, queues
    channel.queue_delete(stream)
    channel.exchange_delete(bindings)


def _received(channel, queues: dict[str, str]) -> dict[str, list[str]]:
    got: dict[str, list[str]] = {}
    for q, queue in queues.items():
        while True:
            method, properties, _body = channel.basic_get(queue, auto_ack=True)
            if method is None:
                break
            got.setdefault(properties.message_id, []).append(q)
    return got


def test_every_message_published_is_archived_once_as_published(channel, archived, broker_uri,
                                                                management_uri):
    name, stream, queues = archived
    channel.queue_bind(stream, f"{name}.bindings", ARCHIVE_KEY)
    with RTopicPublisher(broker_uri, name, management_uri=management_uri,
                         archive_stream="{exchange}.archive") as pub:
        assert pub.archive_stream == stream
        wait_for(lambda: len(pub.bindings) >= 2 and pub._router.archived_to(("queue", stream)))
        futures = [pub.publish(key, message_id.encode(), headers=headers, mandatory=mandatory,
                               properties=pika.BasicProperties(message_id=message_id))
                   for message_id, key, headers, mandatory in MESSAGES]
        for future in futures:  # the mandatory one matching nothing is not returned
            assert future.result(timeout=20) is Outcome.ACKED
    rows = []
    for batch in read_range(broker_uri, stream, 0, len(MESSAGES)):
        rows += batch.to_pylist()
    assert [r["message_id"] for r in rows] == [m[0] for m in MESSAGES]  # each once, in order
    assert [r["routing_key"] for r in rows] == [m[1] for m in MESSAGES]  # as published
    assert {r["exchange"] for r in rows} == {f"{name}.bindings"}
    assert all("BCC" not in (r["headers"] or "") for r in rows)  # stripped by the broker
    # the queues got what they get without an archive
    assert _received(channel, queues) == {"m-literal": ["q1"], "m-wildcard": ["q1"],
                                          "m-cc": ["q2"], "m-bcc": ["q1"]}


def test_while_the_archive_is_not_bound_messages_fail_unsent(channel, archived, broker_uri,
                                                              management_uri):
    name, stream, queues = archived
    with RTopicPublisher(broker_uri, name, management_uri=management_uri,
                         archive_stream=stream) as pub:
        wait_for(lambda: len(pub.bindings) >= 2)
        future = pub.publish("a.b", b"x", properties=pika.BasicProperties(message_id="before"))
        with pytest.raises(PreconditionFailed, match="not bound .* not published, nor archived"):
            future.result(timeout=20)
        assert _received(channel, queues) == {}  # not sent: q1 would have had it
        channel.queue_bind(stream, f"{name}.bindings", ARCHIVE_KEY)
        wait_for(lambda: pub._router.archived_to(("queue", stream)))
        after = pub.publish("a.b", b"y", properties=pika.BasicProperties(message_id="after"))
        assert after.result(timeout=20) is Outcome.ACKED
    [batch] = list(read_range(broker_uri, stream, 0, 1))
    assert batch.column("message_id").to_pylist() == ["after"]  # offset 0: nothing before
    assert _received(channel, queues) == {"after": ["q1"]}


def test_an_archive_needs_the_key_as_published():
    with pytest.raises(ValueError, match="archive_stream needs delivery='bcc'"):
        RTopicPublisher("amqp://guest:guest@127.0.0.1:5672/%2F", "x", archive_stream="x.a",
                        delivery="matched-key", connect_timeout=0)
    with pytest.raises(ValueError, match="archive_stream must be None or a stream name"):
        RTopicPublisher("amqp://guest:guest@127.0.0.1:5672/%2F", "x", archive_stream=" ",
                        connect_timeout=0)
