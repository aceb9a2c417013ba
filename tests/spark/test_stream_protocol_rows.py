"""The stream-protocol reader's rows, a chunk at a time (the common shape read by
rtroute.core.amqp10, native or twin, every other message by the full decoder), are the rows
the full decoder gives message by message, under both brokers' rules: on random chunks mixing
stored publishes with every other section and encoding."""
from __future__ import annotations

import datetime
import struct

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.amqp.stream_protocol import Chunk
from rtroute.core import amqp10
from rtroute.spark import stream_protocol_reader
from rtroute.spark.stream_protocol_reader import _Rows

from ..core.conftest import NATIVE
from ..core.test_amqp10_scan import compound, entries, section, text
from ..hypothesis_profiles import examples

NOW = datetime.datetime(2026, 1, 2, tzinfo=datetime.timezone.utc)
SCANNERS = [pytest.param(amqp10.py_scan_chunk, id="twin")]
SCANNERS.append(pytest.param(getattr(NATIVE, "scan_chunk", None), id="native",
                             marks=() if NATIVE else pytest.mark.skip("extension not built")))


def _header(durable: bytes, priority: bytes, ttl: bytes) -> bytes:
    return section(0x70, compound(0xC0, [durable, priority, ttl, b"\x42", b"\x43"]))


@st.composite
def stored(draw) -> bytes:
    """A message as a stream stores an AMQP 0-9-1 publish (3.x or 4.x), or with more."""
    parts = []
    if draw(st.booleans()):
        parts.append(_header(draw(st.sampled_from([b"\x40", b"\x41", b"\x42"])),
                             draw(st.sampled_from([b"\x40", b"\x50\x04"])),
                             draw(st.sampled_from([b"\x40", b"\x70\x00\x00\xea\x60"]))))
    items = [text("x-routing-key", 0xA3), text(draw(st.text(max_size=12))),
             text("x-exchange", 0xA3), text(draw(st.sampled_from(["", "ex", "é"])))]
    extra = draw(st.sampled_from(["", "cc", "delivery", "type"]))
    if extra == "cc":
        items += [text("x-cc", 0xA3), compound(0xC0, [text("c.d")])]
    elif extra == "delivery":
        items += [text("x-basic-delivery-mode", 0xA3), b"\x50\x02"]
    elif extra == "type":
        items += [text("x-basic-type", 0xA3), text("t")]
    parts.append(section(0x72, compound(0xC1, items)))
    if draw(st.booleans()):
        parts.append(section(0x73, compound(0xC0, [text("m1"), b"\x40", b"\x40", b"\x40",
                                                   text("/queues/r%2Fq"), b"\x40",
                                                   text("text/plain", 0xA3), b"\x40", b"\x40",
                                                   b"\x83" + struct.pack(">q", 1_700_000_000_500)
                                                   ])))
    if draw(st.booleans()):
        parts.append(section(0x74, compound(0xC1, [text("n"), b"\x54\x05", text("x-basic-type"),
                                                   text("t3")])))
    parts.append(section(0x75, b"\xa0" + bytes([3]) + b"abc"))
    return b"".join(parts)


def _by_message(version: str, messages: list[bytes], first: int, low: int, high: int):
    rows = _Rows("s", version)
    for offset, message in enumerate(messages, first):
        if low <= offset < high:
            rows.add(offset, message, NOW)
    return pa.Table.from_batches([rows.batch()])


@pytest.mark.parametrize("scanner", SCANNERS)
@settings(max_examples=examples(300))
@given(messages=st.lists(stored(), min_size=1, max_size=8), version=st.sampled_from(["3.10.8",
                                                                                    "4.3.6"]),
       first=st.integers(0, 5), low=st.integers(0, 8), size=st.integers(0, 10))
def test_rows_of_a_chunk_are_the_rows_of_its_messages(scanner, messages, version, first, low,
                                                      size):
    high = low + size
    original = stream_protocol_reader.scan_chunk
    stream_protocol_reader.scan_chunk = scanner
    try:
        rows = _Rows("s", version)
        chunk = Chunk(first, len(messages), len(messages), 0, memoryview(entries(*messages)))
        taken = rows.add_chunk(chunk, low, high, NOW)
    finally:
        stream_protocol_reader.scan_chunk = original
    expected = _by_message(version, messages, first, low, high)
    assert taken == expected.num_rows
    assert pa.Table.from_batches([rows.batch()]).equals(expected)
