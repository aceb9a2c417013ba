"""`rtroute publish` publishes one message by default, as `rabbitmqadmin publish` does: its body,
headers and properties from the command line, confirmed; -n N (and `rtroute bench load`) is
the load generator it was."""
from __future__ import annotations

import decimal

import pytest
from click.testing import CliRunner

from rtroute.cli import main
from rtroute.publisher.message_options import (
    PROPERTY_NAMES,
    parse_header,
    parse_headers,
    parse_properties,
    parse_property,
)

from .conftest import message_count

# -- --header and --property, parsed -----------------------------------------------------------

@pytest.mark.parametrize(("text", "expected"), [
    ("n=1", ("n", 1)),
    ("f=1.5", ("f", decimal.Decimal("1.5"))),
    ("f=-0.001", ("f", decimal.Decimal("-0.001"))),
    ("b=true", ("b", True)),
    ("v=null", ("v", None)),
    ('CC=["a.b", "c.#"]', ("CC", ["a.b", "c.#"])),
    ('t={"k": [1, "x"]}', ("t", {"k": [1, "x"]})),
    ('s="1"', ("s", "1")),
    ("s=abc", ("s", "abc")),
    ("s=a b=c", ("s", "a b=c")),
    ("s=", ("s", "")),
    ("s=NaN", ("s", "NaN")),
    ("s=Infinity", ("s", "Infinity")),
    (" x-name =[1", ("x-name", "[1")),
])
def test_a_header_value_is_json_when_it_parses_else_the_text(text, expected):
    assert parse_header(text) == expected


@pytest.mark.parametrize(("text", "error"), [
    ("noequals", "NAME=VALUE"),
    ("=1", "NAME=VALUE"),
    (f"n={2 ** 63}", "64-bit"),
    (f"n=[{-(2 ** 63) - 1}]", "64-bit"),
    ("n=1e10", "AMQP decimal"),
    ("n=2147483648.5", "AMQP decimal"),
    ("x" * 256 + "=1", "255 bytes"),
])
def test_malformed_headers_are_refused(text, error):
    with pytest.raises(ValueError, match=error):
        parse_header(text)


def test_a_header_given_twice_is_refused_and_order_is_kept():
    assert list(parse_headers(["b=1", "a=2"])) == ["b", "a"]
    with pytest.raises(ValueError, match="given twice"):
        parse_headers(["a=1", "a=2"])


@pytest.mark.parametrize(("text", "expected"), [
    ("delivery_mode=2", ("delivery_mode", 2)),
    ("delivery_mode=persistent", ("delivery_mode", 2)),
    ("delivery_mode=Transient", ("delivery_mode", 1)),
    ("priority=0", ("priority", 0)),
    ("priority=255", ("priority", 255)),
    ("timestamp=1714564800", ("timestamp", 1714564800)),
    ("timestamp=2024-05-01T12:00:00Z", ("timestamp", 1714564800)),
    ("timestamp=2024-05-01T12:00:00", ("timestamp", 1714564800)),
    ("timestamp=2024-05-01T14:00:00+02:00", ("timestamp", 1714564800)),
    ("expiration=60000", ("expiration", "60000")),
    ("content_type=application/json; charset=utf-8",
     ("content_type", "application/json; charset=utf-8")),
    ("message_id=", ("message_id", "")),
    ("type=a=b", ("type", "a=b")),
])
def test_properties_take_their_amqp_types(text, expected):
    assert parse_property(text) == expected


@pytest.mark.parametrize(("text", "error"), [
    ("prority=1", "did you mean 'priority'"),
    ("headers={}", "--header NAME=VALUE"),
    ("delivery_mode=3", "1-2"),
    ("priority=256", "0-255"),
    ("priority=high", "takes an integer"),
    ("timestamp=yesterday", "ISO 8601"),
    ("expiration=1s", "milliseconds"),
    ("app_id=" + "x" * 256, "255 bytes"),
])
def test_malformed_properties_are_refused(text, error):
    with pytest.raises(ValueError, match=error):
        parse_property(text)


def test_every_property_is_known_once():
    assert len(set(PROPERTY_NAMES)) == 12
    with pytest.raises(ValueError, match="given twice"):
        parse_properties(["priority=1", "priority=2"])


# -- usage -------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "error"), [
    (["--size", "10"], "--size is for the load generator"),
    (["--rate", "10"], "--rate is for the load generator"),
    (["-n", "5", "--body", "x"], "--body is for one message"),
    (["-n", "5", "--header", "a=1"], "--header is for one message"),
    (["--body", "x", "--body-file", "-"], "either --body or --body-file"),
    (["--cc", "k", "--header", 'CC=["j"]'], "header CC is given by --header and by its own"),
    (["--persistent", "--property", "delivery_mode=1"], "disagree"),
    (["--property", "priority=x"], "takes an integer"),
    (["--bcc", "k"], "--bcc needs --route-locally"),
])
def test_options_that_do_not_go_together_are_usage_errors(args, error):
    result = CliRunner().invoke(main, ["publish", "--exchange", "x", *args])
    assert result.exit_code == 2, result.output
    assert error in result.output


# -- against the broker ------------------------------------------------------------------------

def _publish(broker_uri: str, *args: str, input: bytes | None = None):
    return CliRunner().invoke(main, ["publish", "--uri", broker_uri, *args], input=input)


@pytest.mark.broker
def test_one_message_arrives_byte_exact_with_its_headers_and_properties(
        broker_uri, channel, names, tmp_path):
    exchange, queue, copy = names.exchange(), names.queue(), names.queue()
    channel.exchange_declare(exchange, "direct")
    for name, key in ((queue, "main"), (copy, "copy")):
        channel.queue_declare(name)
        channel.queue_bind(name, exchange, key)
    body = bytes(range(256)) * 3 + b"\r\n\x00"
    body_file = tmp_path / "body.bin"
    body_file.write_bytes(body)
    result = _publish(
        broker_uri, "--exchange", exchange, "--routing-key", "main", "--body-file",
        str(body_file), "--mandatory", "--cc", "copy",
        "--header", "x-int=42", "--header", "x-str=hello world", "--header", 'x-quoted="7"',
        "--header", 'x-list=[1, "a", true]', "--header", 'x-table={"k": "v"}',
        "--header", "x-float=2.5", "--header", "x-null=null",
        "--property", "content_type=application/octet-stream",
        "--property", "content_encoding=identity", "--property", "delivery_mode=2",
        "--property", "priority=7", "--property", "correlation_id=corr-1",
        "--property", "reply_to=replies", "--property", "expiration=600000",
        "--property", "message_id=msg-1", "--property", "timestamp=2024-05-01T12:00:00Z",
        "--property", "type=order.created", "--property", "user_id=guest",
        "--property", "app_id=rtroute-test")
    assert result.exit_code == 0, result.output
    assert "confirmed and routed" in result.output
    for name in (queue, copy):
        method, properties, got = channel.basic_get(name, auto_ack=True)
        assert got == body
        assert (method.exchange, method.routing_key) == (exchange, "main")
        assert properties.headers == {"x-int": 42, "x-str": "hello world", "x-quoted": "7",
                                      "x-list": [1, "a", True], "x-table": {"k": "v"},
                                      "x-float": decimal.Decimal("2.5"), "x-null": None,
                                      "CC": ["copy"]}
        assert (properties.content_type, properties.content_encoding,
                properties.delivery_mode, properties.priority, properties.correlation_id,
                properties.reply_to, properties.expiration, properties.message_id,
                properties.timestamp, properties.type, properties.user_id,
                properties.app_id) == (
            "application/octet-stream", "identity", 2, 7, "corr-1", "replies", "600000",
            "msg-1", 1714564800, "order.created", "guest", "rtroute-test")


@pytest.mark.broker
def test_the_body_comes_from_stdin_and_one_message_is_the_default(broker_uri, channel, names):
    queue = names.queue()
    channel.queue_declare(queue)
    result = _publish(broker_uri, "--exchange", "", "--routing-key", queue, "--body-file", "-",
                      input=b"from stdin\xff")
    assert result.exit_code == 0, result.output
    assert message_count(broker_uri, queue) == 1
    _method, _properties, got = channel.basic_get(queue, auto_ack=True)
    assert got == b"from stdin\xff"
    result = _publish(broker_uri, "--exchange", "", "--routing-key", queue, "--body", "héllo")
    assert result.exit_code == 0, result.output
    assert channel.basic_get(queue, auto_ack=True)[2] == "héllo".encode()


@pytest.mark.broker
def test_mandatory_to_an_unroutable_key_exits_non_zero(broker_uri, channel, names):
    exchange = names.exchange()
    channel.exchange_declare(exchange, "direct")
    result = _publish(broker_uri, "--exchange", exchange, "--routing-key", "nowhere",
                      "--mandatory", "--body", "x")
    assert result.exit_code == 1
    assert "312 NO_ROUTE" in result.output and "'nowhere'" in result.output
    assert len(result.output.strip().splitlines()) == 1
    without = _publish(broker_uri, "--exchange", exchange, "--routing-key", "nowhere")
    assert without.exit_code == 0, without.output  # confirmed, as the broker drops it


@pytest.mark.broker
def test_a_missing_exchange_exits_non_zero_with_the_brokers_404(broker_uri, names):
    missing = names.exchange("missing")
    result = _publish(broker_uri, "--exchange", missing, "--routing-key", "k", "--body", "x")
    assert result.exit_code == 1
    assert f"404 NOT_FOUND - no exchange '{missing}' in vhost '/'" in result.output


def test_a_broker_that_does_not_answer_is_one_line():
    result = _publish("amqp://guest:secret@127.0.0.1:1/%2F", "--exchange", "", "--body", "x")
    assert result.exit_code == 1
    assert result.output.startswith("Error: ") and "connection refused" in result.output
    assert "secret" not in result.output and len(result.output.splitlines()) == 1


@pytest.mark.broker
def test_count_given_keeps_the_load_generator(broker_uri, channel, names):
    queue = names.queue()
    channel.queue_declare(queue)
    result = _publish(broker_uri, "--exchange", "", "--routing-key", queue, "-n", "1",
                      "--size", "7")
    assert result.exit_code == 0, result.output
    assert "1 published to ''" in result.output and "confirm latency" in result.output
    result = CliRunner().invoke(main, ["bench", "load", "--uri", broker_uri, "--exchange", "",
                                       "--routing-key", queue, "-n", "20", "--size", "3",
                                       "--cc", "nothing"])
    assert result.exit_code == 0, result.output
    assert "20 published to ''" in result.output
    assert message_count(broker_uri, queue) == 21
    assert channel.basic_get(queue, auto_ack=True)[2] == b"x" * 7


@pytest.mark.broker
def test_route_locally_routes_one_message_here(broker_uri, management_uri, channel, names):
    name = names.exchange("managed")
    names.exchanges.append(f"{name}.bindings")
    channel.exchange_declare(f"{name}.bindings", "topic", durable=True)
    matched, audit, other = names.queue(), names.queue(), names.queue()
    for queue, key in ((matched, "a.b"), (audit, "audit.all"), (other, "c.d")):
        channel.queue_declare(queue)
        channel.queue_bind(queue, f"{name}.bindings", key)
    result = _publish(broker_uri, "--management-uri", management_uri, "--exchange", name,
                      "--routing-key", "*.b", "--route-locally", "--bcc", "audit.all",
                      "--body", "routed here", "--header", "x-a=1")
    assert result.exit_code == 0, result.output
    assert "routed here to 2 binding key(s)" in result.output
    for queue in (matched, audit):
        method, properties, got = channel.basic_get(queue, auto_ack=True)
        assert (method.routing_key, got, properties.headers) == ("*.b", b"routed here",
                                                                  {"x-a": 1})
    assert channel.basic_get(other, auto_ack=True)[0] is None
    unroutable = _publish(broker_uri, "--management-uri", management_uri, "--exchange", name,
                          "--routing-key", "z.z", "--route-locally", "--mandatory")
    assert unroutable.exit_code == 1 and "z.z" in unroutable.output
