"""Diverted copies as pure logic: Artemis's headers, hops, routing types, transformers."""
from __future__ import annotations

import pytest

from rtroute.config.lines import ConfigError
from rtroute.config.rtroute_toml import DivertConfig, loads_divert
from rtroute.divert import (
    ANYCAST,
    HDR_ORIG_MESSAGE_ID,
    HDR_ORIG_ROUTING_TYPE,
    HDR_ORIGINAL_ADDRESS,
    HDR_ORIGINAL_QUEUE,
    HDR_ROUTING_TYPE,
    HOPS_HEADER,
    MULTICAST,
    ROUTING_TYPES,
    Divert,
    Message,
    make_copy,
    original_routing_type,
    publish_fields,
    resolve_target,
)


def divert(name="d", routing_type="STRIP", **kw):
    return Divert(DivertConfig(name=name, address="prices", forwarding_address="fwd",
                               routing_name=name, routing_type=routing_type, **kw))


def original(**headers):
    return Message(b"body", "price.eu", dict(headers),
                   {"message_id": "m-1", "expiration": "60000", "delivery_mode": 2,
                    "priority": 3, "timestamp": 1700000000}, "prices")


def copy_of(message, d=None, address="fwd", source="prices", max_hops=16):
    d = d or divert()
    return make_copy(message, d, address, source, max_hops, d.transformer)


def test_copy_carries_artemis_original_headers_and_a_new_message_id():
    msg = original(keep="me")
    copy = copy_of(msg, divert("spy"))
    h = copy.message.headers
    assert h[HDR_ORIGINAL_ADDRESS] == "prices"
    assert h[HDR_ORIGINAL_QUEUE] == "spy"
    assert h[HDR_ORIG_MESSAGE_ID] == "m-1"
    assert HDR_ORIG_ROUTING_TYPE not in h  # the original has no routing type
    assert h[HOPS_HEADER] == 1 and h["keep"] == "me"
    props = copy.message.properties
    assert props["message_id"] not in (None, "m-1")
    assert props["expiration"] == "60000"  # kept, as Artemis keeps the expiration
    assert {k: props[k] for k in ("delivery_mode", "priority", "timestamp")} == \
        {"delivery_mode": 2, "priority": 3, "timestamp": 1700000000}
    assert copy.message.body == b"body" and copy.message.routing_key == "price.eu"
    assert copy.message.address == "fwd" and copy.error is None
    assert msg.headers == {"keep": "me"}  # the original is untouched


def test_each_hop_overwrites_the_original_headers():
    first = copy_of(original(), divert("a-to-b"), address="B", source="A").message
    second = copy_of(first, divert("b-to-c"), address="C", source="B").message
    h = second.headers
    assert h[HDR_ORIGINAL_ADDRESS] == "B" and h[HDR_ORIGINAL_QUEUE] == "b-to-c"
    assert h[HDR_ORIG_MESSAGE_ID] == first.properties["message_id"]
    assert h[HOPS_HEADER] == 2
    assert second.properties["message_id"] != first.properties["message_id"]


def test_copy_ids_repeat_for_a_redelivered_original_so_duplicates_can_be_dropped():
    a = copy_of(original()).message.properties["message_id"]
    b = copy_of(original()).message.properties["message_id"]
    assert a == b
    other = copy_of(original(), address="other").message.properties["message_id"]
    assert other != a
    no_id = Message(b"x", "k", {}, {}, "prices")
    c1, c2 = copy_of(no_id).message, copy_of(no_id).message
    assert c1.properties["message_id"] != c2.properties["message_id"]
    assert HDR_ORIG_MESSAGE_ID not in c1.headers


def test_routing_key_override():
    d = Divert(DivertConfig(name="d", address="prices", forwarding_address="fwd",
                            routing_key="diverted.key"))
    assert copy_of(original(), d).message.routing_key == "diverted.key"


@pytest.mark.parametrize("routing_type,headers,delivery,copy_type", [
    ("ANYCAST", {}, "queue", ANYCAST),
    ("MULTICAST", {}, "exchange", MULTICAST),
    ("PASS", {}, "address", None),
    ("PASS", {HDR_ROUTING_TYPE: ANYCAST}, "queue", ANYCAST),
    ("PASS", {HDR_ROUTING_TYPE: MULTICAST}, "exchange", MULTICAST),
    ("STRIP", {HDR_ROUTING_TYPE: ANYCAST}, "address", None),
])
def test_routing_types(routing_type, headers, delivery, copy_type):
    copy = copy_of(original(**headers), divert(routing_type=routing_type))
    assert copy.delivery == delivery
    assert copy.message.headers.get(HDR_ROUTING_TYPE) == copy_type
    assert copy.message.headers.get(HDR_ORIG_ROUTING_TYPE) == headers.get(HDR_ROUTING_TYPE)


@pytest.mark.parametrize("value,expected", [
    (ANYCAST, ANYCAST), (MULTICAST, MULTICAST), (None, None), (2, None), (-1, None),
    ("1", None), (True, None), (1.0, None),
])
def test_orig_routing_type_is_added_only_when_the_original_had_one(value, expected):
    """Artemis's referenceOriginalMessage sets _AMQ_ORIG_ROUTING_TYPE only `if
    (original.getRoutingType() != null)`: here, an _AMQ_ROUTING_TYPE header of 0 or 1."""
    headers = {} if value is None else {HDR_ROUTING_TYPE: value}
    assert original_routing_type(headers) == expected
    for routing_type in ROUTING_TYPES:
        copy = copy_of(original(**headers), divert(routing_type=routing_type)).message
        assert copy.headers.get(HDR_ORIG_ROUTING_TYPE) == expected, routing_type
        if expected is None:
            assert HDR_ORIG_ROUTING_TYPE not in copy.headers


def test_orig_routing_type_of_an_earlier_hop_is_left_when_the_copy_has_none():
    """As in Artemis: a STRIP copy has no routing type, so a second divert leaves the
    first hop's _AMQ_ORIG_ROUTING_TYPE as it was (copied with the other properties)."""
    first = copy_of(original(**{HDR_ROUTING_TYPE: ANYCAST}), divert("a-to-b"),
                    address="B", source="A").message
    assert first.headers[HDR_ORIG_ROUTING_TYPE] == ANYCAST
    assert HDR_ROUTING_TYPE not in first.headers  # STRIP
    second = copy_of(first, divert("b-to-c"), address="C", source="B").message
    assert second.headers[HDR_ORIG_ROUTING_TYPE] == ANYCAST
    assert second.headers[HDR_ORIGINAL_ADDRESS] == "B"


def test_hop_limit_turns_the_copy_into_a_dead_letter_with_the_reason():
    msg = original(**{HOPS_HEADER: 3})
    assert copy_of(msg, max_hops=4).error is None
    copy = copy_of(msg, max_hops=3)
    assert "hop limit reached" in copy.error and "would be hop 4" in copy.error
    assert copy.message.headers[HOPS_HEADER] == 4


def test_transformer_rewrites_the_copy():
    d = divert(transformer="tests.divert.transformers:tag")
    copy = copy_of(original(), d)
    assert copy.error is None
    assert copy.message.body == b"BODY"
    assert copy.message.routing_key == "transformed.price.eu"
    assert copy.message.headers["x-transformed-by"] == "tag"
    assert copy.message.headers["x-seen-orig-queue"] == "d"  # sees the _AMQ_ORIG_* headers
    assert copy.message.properties["content_type"] == "text/plain"


@pytest.mark.parametrize("function,reason", [
    ("explode", "transformer raised RuntimeError: no such luck"),
    ("wrong_type", "transformer returned str, not a Message"),
    ("reroute", "transformer changed the address to 'somewhere.else'"),
])
def test_a_failing_transformer_gives_a_dead_letter_of_the_untransformed_copy(function, reason):
    copy = copy_of(original(), divert(transformer=f"tests.divert.transformers:{function}"))
    assert reason in copy.error
    assert copy.message.body == b"body" and copy.message.address == "fwd"


@pytest.mark.parametrize("delivery,managed,found,target", [
    ("queue", False, None, "queue"),
    ("queue", True, "exchange", "queue"),
    ("exchange", True, None, "managed"),
    ("exchange", False, "exchange", "exchange"),
    ("address", False, "exchange", "exchange"),
    ("address", False, "queue", "queue"),
    ("address", True, None, "managed"),
])
def test_resolve_target(delivery, managed, found, target):
    assert resolve_target(delivery, "fwd", managed, found) == target


@pytest.mark.parametrize("delivery,found,reason", [
    ("exchange", "queue", "no exchange of that name"),
    ("exchange", None, "no exchange of that name"),
    ("address", None, "no exchange or queue of that name"),
])
def test_publishing_to_a_missing_exchange_is_refused(delivery, found, reason):
    with pytest.raises(LookupError, match=reason):
        resolve_target(delivery, "fwd", False, found)


def test_publish_fields_per_target():
    msg = Message(b"x", "a.b", {"CC": ["c.c"], "x-rtroute-bcc": ["b.b"], "k": 1}, {}, "fwd")
    assert publish_fields(msg, "queue", "x-rtroute-bcc") == ("", "fwd", {"k": 1})
    assert publish_fields(msg, "exchange", "x-rtroute-bcc") == \
        ("fwd", "a.b", {"CC": ["c.c"], "BCC": ["b.b"], "k": 1})
    assert publish_fields(msg, "managed", "x-rtroute-bcc", "x-other-bcc") == \
        ("fwd", "a.b", {"CC": ["c.c"], "x-other-bcc": ["b.b"], "k": 1})
    bad = Message(b"x", "a.b", {"CC": "c.c"}, {}, "fwd")
    with pytest.raises(ValueError, match="'CC' must be an array"):
        publish_fields(bad, "exchange", "x-rtroute-bcc")


def test_http_body_is_validated_like_the_config_file():
    config = loads_divert('{"name": "d", "address": "prices", "forwarding_address": ["a", "b"],'
                          ' "exclusive": true, "filter": "office = \'New York\'"}')
    assert config.forwarding_addresses == ("a", "b") and config.exclusive
    assert config.routing_name == "d" and config.routing_type == "STRIP"
    with pytest.raises(ConfigError, match="routing_type must be one of"):
        loads_divert('{"name": "d", "address": "p", "forwarding_address": "f",\n'
                     ' "routing_type": "anycast"}')
    with pytest.raises(ConfigError, match="not valid JSON"):
        loads_divert("{")
