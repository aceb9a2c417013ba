"""Reading a content header's CC, BCC and BCC-alias arrays and rewriting its headers table
(rtroute.core.headers): the native reader and its pure-Python twin give the same answers on
random and mutated frames, and both agree with the full decoder (rtroute.amqp) wherever they
answer. src_c/test_headers.c checks the C side on its own, under the sanitizers too."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtroute.amqp.content_header import ContentHeader
from rtroute.amqp.field_table import encode_table
from rtroute.core.headers import PyHeaderKeys

from ..hypothesis_profiles import examples
from .conftest import NATIVE

READERS = [pytest.param(PyHeaderKeys, id="twin")]
READERS.append(pytest.param(getattr(NATIVE, "HeaderKeys", None), id="native",
                            marks=() if NATIVE else pytest.mark.skip("extension not built")))
ALIAS = b"rtroute-bcc"


def header_frame(headers=None, content_type: bytes | None = None, raw_table: bytes | None = None,
                 channel: int = 1) -> bytes:
    flags, props = 0, b""
    if content_type is not None:
        flags |= 0x8000
        props += bytes((len(content_type),)) + content_type
    if headers is not None or raw_table is not None:
        flags |= 0x2000
        table = raw_table if raw_table is not None else encode_table(headers)
        props += table
    flags |= 0x1000
    props += b"\x02"  # delivery mode after the headers
    payload = struct.pack(">HHQH", 60, 0, 123, flags) + props
    return struct.pack(">BHI", 2, channel, len(payload)) + payload + b"\xce"


def bcc_entry(keys) -> bytes:
    return encode_table({"BCC": list(keys)})[4:]


@pytest.mark.parametrize("reader", READERS)
def test_reads_the_arrays_and_rewrites_the_table(reader):
    frame = header_frame({"n": 1, "CC": ["a.b", "c"], "rtroute-bcc": ["#.z"], "BCC": ["x.*"],
                          "t": "text"}, b"text/plain")
    read = reader.read(frame, ALIAS, 65536)
    assert (read.cc, read.bcc, read.alias) == (("a.b", "c"), ("x.*",), ("#.z",))
    assert read.has_table and read.drops
    out = read.rewrite(bcc_entry(["k1", "k2"]))
    assert ContentHeader(out).get("headers") == {"n": 1, "CC": ["a.b", "c"], "t": "text",
                                                 "BCC": ["k1", "k2"]}
    assert ContentHeader(out).get("content_type") == "text/plain"
    assert ContentHeader(out).get("delivery_mode") == 2
    # nothing planned: the table stays without BCC and the alias
    assert ContentHeader(read.rewrite(b"")).get("headers") == {"n": 1, "CC": ["a.b", "c"],
                                                              "t": "text"}


@pytest.mark.parametrize("reader", READERS)
def test_a_frame_without_headers_gets_a_table_only_for_a_planned_bcc(reader):
    frame = header_frame()
    read = reader.read(frame, ALIAS, 65536)
    assert (read.cc, read.bcc, read.alias, read.has_table, read.drops) == \
        (None, None, None, False, False)
    assert read.rewrite(b"") == frame
    assert ContentHeader(read.rewrite(bcc_entry(["k"]))).get("headers") == {"BCC": ["k"]}


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("headers", [
    {"CC": "a.b"},                    # not an array: the broker refuses it (the general path)
    {"BCC": ["a", 1]},                # an element that is no string (RabbitMQ ignores it)
    {"CC": ["caf\u00e9"]},             # not ASCII
    {"rtroute-bcc": {"x": 1}},
])
def test_what_the_general_path_reads(reader, headers):
    assert reader.read(header_frame(headers), ALIAS, 65536) is None


@pytest.mark.parametrize("reader", READERS)
def test_malformed_frames_are_the_general_paths(reader):
    good = header_frame({"CC": ["a"]})
    assert reader.read(good, ALIAS, 65536) is not None
    assert reader.read(good[:-1] + b"\x00", ALIAS, 65536) is None      # end octet
    assert reader.read(good[:-2] + b"\xce", ALIAS, 65536) is None       # size
    assert reader.read(header_frame(raw_table=b"\x00\x00\x00\x05\x01xQ\x00\x00"), ALIAS,
                       65536) is None                                   # unknown type
    assert reader.read(header_frame({"CC": ["abc"]}), ALIAS, 2) is None  # over max_entry
    twice = b"".join(encode_table({"BCC": ["a"]})[4:] for _ in range(2))
    assert reader.read(header_frame(raw_table=struct.pack(">I", len(twice)) + twice), ALIAS,
                       65536) is None


_keys = st.lists(st.sampled_from(["a", "a.b", "#", "*.c", "", "x.y.z"]), max_size=4)
_values = st.one_of(st.integers(-2**31, 2**31 - 1), st.text(max_size=5), st.booleans(),
                    st.none(), _keys, st.dictionaries(st.text(max_size=3), st.integers(0, 9),
                                                      max_size=2))
_names = st.sampled_from(["CC", "BCC", "rtroute-bcc", "n", "x-seq", "CCC"])


@st.composite
def frames(draw):
    entries = draw(st.lists(st.tuples(_names, st.one_of(_keys, _values)), max_size=6))
    headers = dict(entries) if draw(st.booleans()) or entries else None
    frame = bytearray(header_frame(headers, draw(st.sampled_from([None, b"", b"text/plain"]))))
    for _ in range(draw(st.integers(0, 3)) if draw(st.booleans()) else 0):
        frame[draw(st.integers(0, len(frame) - 1))] = draw(st.integers(0, 255))
    return bytes(frame)


@pytest.mark.skipif(NATIVE is None, reason="extension not built")
@settings(max_examples=examples(500))
@given(frames(), st.lists(st.sampled_from(["k1", "k2.b", "z"]), max_size=3))
def test_native_and_twin_agree_and_agree_with_the_decoder(frame, planned):
    native = NATIVE.HeaderKeys.read(frame, ALIAS, 65536)
    twin = PyHeaderKeys.read(frame, ALIAS, 65536)
    assert (native is None) == (twin is None)
    if native is None:
        return
    for read in (native, twin):
        assert (read.cc, read.bcc, read.alias, read.has_table, read.table_size, read.drops) == \
            (twin.cc, twin.bcc, twin.alias, twin.has_table, twin.table_size, twin.drops)
    entry = bcc_entry(planned) if planned else b""
    out = native.rewrite(entry)
    assert out == twin.rewrite(entry)
    # the full decoder reads the same arrays, and the rewrite as the general path makes it
    original = ContentHeader(frame).get("headers")
    if original is not None:
        assert native.cc == (tuple(original["CC"]) if "CC" in original else None)
        assert native.bcc == (tuple(original["BCC"]) if "BCC" in original else None)
        assert native.alias == (tuple(original["rtroute-bcc"])
                                if "rtroute-bcc" in original else None)
    general = ContentHeader(frame)
    if original is not None or planned:
        general.drop_headers(("BCC", "rtroute-bcc"))
        if planned:
            general.set_encoded_header("BCC", entry)
    assert out == general.frame(struct.unpack_from(">H", frame, 1)[0])
