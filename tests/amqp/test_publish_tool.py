"""The body of ``rtroute publish``: counts, headers, persistence, pacing, returns."""
from __future__ import annotations

import pytest

from rtroute.amqp import publish
from rtroute.amqp.publish_tool import _percentile


@pytest.mark.broker
def test_publishes_count_messages_and_reports_confirms(broker_uri, channel, names, depth):
    queue = names.queue()
    channel.queue_declare(queue, durable=True)
    lines = []
    result = publish(broker_uri, "", queue, 3000, 64, window=200, echo=lines.append)
    assert (result["published"], result["acked"], result["failed"]) == (3000, 3000, 0)
    assert result["msgs_per_s"] > 0 and result["error"] is None
    latency = result["confirm_latency_ms"]
    assert 0 <= latency["p50"] <= latency["p99"] <= latency["max"]
    assert depth(queue) == 3000
    assert "guest:***@" in result["uri"] and "guest:guest" not in result["uri"]
    assert lines[-1].startswith("3000 published to")
    assert "p99" in lines[-1]


@pytest.mark.broker
def test_headers_cc_and_persistence_reach_the_queues(broker_uri, channel, names):
    exchange, main, copy = names.exchange(), names.queue(), names.queue()
    channel.exchange_declare(exchange, "direct")
    for queue, key in ((main, "main"), (copy, "copy")):
        channel.queue_declare(queue, durable=True)
        channel.queue_bind(queue, exchange, key)
    result = publish(broker_uri, exchange, "main", 5, 10, headers={"CC": ["copy"], "x-a": 1},
                     persistent=True, echo=lambda _line: None)
    assert result["acked"] == 5
    for queue in (main, copy):
        _method, properties, body = channel.basic_get(queue, auto_ack=True)
        assert body == b"x" * 10
        assert properties.delivery_mode == 2
        assert properties.headers == {"CC": ["copy"], "x-a": 1}


@pytest.mark.broker
def test_mandatory_unroutable_messages_are_counted_as_returned(broker_uri, channel, names):
    exchange = names.exchange()
    channel.exchange_declare(exchange, "direct")
    result = publish(broker_uri, exchange, "nowhere", 50, 10, mandatory=True,
                     echo=lambda _line: None)
    assert (result["returned"], result["acked"]) == (50, 0)


@pytest.mark.broker
def test_rate_paces_the_publishes(broker_uri, channel, names):
    queue = names.queue()
    channel.queue_declare(queue, durable=True)
    result = publish(broker_uri, "", queue, 30, 10, rate=100, echo=lambda _line: None)
    assert result["acked"] == 30
    assert result["seconds"] >= 0.25  # 30 messages at 100/s cannot take less than ~0.29 s


def test_unreachable_broker_is_reported_not_raised():
    result = publish("amqp://guest:secret@127.0.0.1:1/%2F", "", "q", 10, 10,
                     echo=lambda _line: None)
    assert result["published"] == 0
    assert "127.0.0.1:1" in result["error"] and "secret" not in result["error"]


def test_bad_arguments_are_value_errors():
    with pytest.raises(ValueError, match="window"):
        publish("amqp://", "", "q", 10, 10, window=0)
    with pytest.raises(ValueError, match="invalid AMQP URI"):
        publish("http://x", "", "q", 10, 10)


@pytest.mark.parametrize(("values", "fraction", "expected"), [
    ([], 0.5, 0.0),
    ([3.0], 0.99, 3.0),
    ([1.0, 2.0, 3.0, 4.0], 0.5, 2.0),
    (list(range(1, 101)), 0.99, 99),
])
def test_percentile_is_nearest_rank(values, fraction, expected):
    assert _percentile(values, fraction) == expected
