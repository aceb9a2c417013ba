"""A range read over several connections (stream_protocol_reader._read_split, each part in a
thread): batches in offset order whatever order the parts finish in, a part's error raised in
its place, and a caller that stops early stops every part."""
from __future__ import annotations

import threading
import time

import pyarrow as pa
import pytest

from rtroute.spark import stream_protocol_reader


def _fake(monkeypatch, delays, fail_at=None):
    closed = []

    def read_range(_uri, _stream, low, high, **_options):
        try:
            for at in range(low, high, 10):
                time.sleep(delays.get(low, 0))
                if at == fail_at:
                    raise stream_protocol_reader.StreamReadError(f"failed at {at}")
                yield pa.record_batch({"offset": list(range(at, min(at + 10, high)))})
        finally:
            closed.append(low)

    monkeypatch.setattr(stream_protocol_reader, "read_range", read_range)
    return closed


def _offsets(batches):
    return [o for batch in batches for o in batch.column("offset").to_pylist()]


def test_parts_come_in_offset_order_whatever_order_they_finish_in(monkeypatch):
    closed = _fake(monkeypatch, {0: 0.02, 100: 0.0, 200: 0.0})
    ranges = [(0, 100), (100, 200), (200, 250)]
    assert _offsets(stream_protocol_reader._read_split("u", "s", ranges)) == list(range(250))
    assert sorted(closed) == [0, 100, 200]


def test_a_parts_error_is_raised_where_its_batches_would_have_come(monkeypatch):
    _fake(monkeypatch, {}, fail_at=130)
    seen = []
    with pytest.raises(stream_protocol_reader.StreamReadError, match="failed at 130"):
        for batch in stream_protocol_reader._read_split("u", "s", [(0, 100), (100, 200)]):
            seen += batch.column("offset").to_pylist()
    assert seen == list(range(130))


def test_a_caller_that_stops_early_stops_every_part(monkeypatch):
    closed = _fake(monkeypatch, {})
    before = threading.active_count()
    batches = stream_protocol_reader._read_split("u", "s", [(0, 1000), (1000, 2000)])
    next(batches)
    batches.close()
    assert sorted(closed) == [0, 1000]
    assert threading.active_count() == before


def test_a_range_is_read_over_as_many_connections_as_asked_no_more(monkeypatch):
    opened = []
    lock = threading.Lock()

    class Refused:
        def __init__(self, uri, name):
            with lock:
                opened.append(name)
            raise stream_protocol_reader.StreamProtocolError("refused")

    monkeypatch.setattr(stream_protocol_reader, "StreamProtocolConnection", Refused)
    low, high = 0, 8 * stream_protocol_reader.MIN_SPLIT_OFFSETS  # room for 8 parts
    for connections in (1, 2, 3):
        opened.clear()
        with pytest.raises(stream_protocol_reader.StreamReadError, match="refused"):
            list(stream_protocol_reader.read_range("u", "s", low, high, connections=connections))
        assert len(opened) == connections
