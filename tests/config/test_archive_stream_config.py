"""``archive_stream`` on an ``[[exchange]]``: a stream queue bound to NAME with its retention
arguments passed through as RabbitMQ spells them; every mistake is one line with its position."""
from __future__ import annotations

import pytest

from rtroute.config.rtroute_toml import ConfigError, loads
from rtroute.routing.rtopic_layout import ARCHIVE_KEY
from rtroute.sidecar.layout import declarations_for


def _exchange(lines: str):
    return loads(f'[[exchange]]\nname = "logs"\n{lines}').exchanges[0]


def test_the_archive_stream_and_its_retention_become_the_stream_queues_declaration():
    spec = _exchange('archive_stream = "logs.archive"\narchive_max_age = "7D"\n'
                     'archive_max_length_bytes = 20000000000\n'
                     'archive_max_segment_size_bytes = 100000000\n')
    assert spec.archive_stream == "logs.archive"
    decls = declarations_for(spec)
    assert {"method": "queue.declare", "queue": "logs.archive", "durable": True,
            "arguments": {"x-queue-type": "stream", "x-max-age": "7D",
                          "x-max-length-bytes": 20000000000,
                          "x-stream-max-segment-size-bytes": 100000000}} in decls
    assert {"method": "queue.bind", "queue": "logs.archive", "exchange": "logs",
            "routing_key": ""} in decls


def test_without_it_nothing_is_declared_for_an_archive():
    spec = _exchange("")
    assert spec.archive_stream is None
    assert not [d for d in declarations_for(spec) if d.get("queue", "").endswith(".archive")]
    sharded = _exchange('shards = 2\narchive_stream = "logs.archive"\n')
    binds = [d for d in declarations_for(sharded) if d.get("queue") == "logs.archive"]
    # bound to NAME, and to NAME.bindings with the archive key for a proxy's publishes
    assert [(d["method"], d.get("exchange"), d.get("routing_key")) for d in binds] == [
        ("queue.declare", None, None), ("queue.bind", "logs", ""),
        ("queue.bind", "logs.bindings", ARCHIVE_KEY)]


@pytest.mark.parametrize(("lines", "line", "message"), [
    ('archive_stream = "logs.archive"\narchive_max_age = "7days"\n', 4,
     "archive_max_age '7days' is not RabbitMQ's x-max-age"),
    ('archive_max_age = "7D"\n', 3, "archive_max_age applies only to an archive stream"),
    ('archive_max_length_bytes = 10\n', 3,
     "archive_max_length_bytes applies only to an archive stream"),
    ('archive_stream = "logs.archive"\narchive_max_length_bytes = 0\n', 4, "archive_max_length_bytes"),
    ('archive_stream = "logs"\n', 3, "must differ from the exchange's name"),
    ('archive_stream = "rtroute.archive"\n', 3, "must not start with 'amq.' or 'rtroute.'"),
    ('archive_stream = ""\n', 3, "archive_stream"),
])
def test_a_bad_archive_setting_is_one_line_with_its_position(lines, line, message):
    with pytest.raises(ConfigError) as raised:
        _exchange(lines)
    assert message in str(raised.value)
    assert raised.value.line == line
