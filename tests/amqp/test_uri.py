"""RabbitMQ URI parsing (the Erlang client's rules) and password masking."""
from __future__ import annotations

import ssl

import pika
import pytest

from rtroute.amqp.uri import management_url, mask_uri, parse_uri

# uri -> (host, port, user, password, vhost)
GOOD = [
    ("amqp://", ("127.0.0.1", 5672, "guest", "guest", "/")),
    ("amqps://", ("127.0.0.1", 5671, "guest", "guest", "/")),
    ("amqp://host", ("host", 5672, "guest", "guest", "/")),
    ("amqp://host/", ("host", 5672, "guest", "guest", "")),
    ("amqp:///vh", ("127.0.0.1", 5672, "guest", "guest", "vh")),
    ("amqp://user@host", ("host", 5672, "user", "guest", "/")),
    ("amqp://user:@host", ("host", 5672, "user", "", "/")),
    ("amqp://fred:secret@host1:5673/v", ("host1", 5673, "fred", "secret", "v")),
    ("amqp://guest:guest@127.0.0.1:5672/%2F", ("127.0.0.1", 5672, "guest", "guest", "/")),
    ("AMQP://h/%2Fa%20b", ("h", 5672, "guest", "guest", "/a b")),
    ("amqp://us%40er:p%3Aw%2Fd@h/v", ("h", 5672, "us@er", "p:w/d", "v")),
    ("amqp://h/team%40site", ("h", 5672, "guest", "guest", "team@site")),
    ("amqp://[::1]:5673/x", ("::1", 5673, "guest", "guest", "x")),
    ("amqps://u:p@h:1234/%2F", ("h", 1234, "u", "p", "/")),
]


@pytest.mark.parametrize(("uri", "expected"), GOOD)
def test_uri_fields_follow_the_rabbitmq_uri_spec(uri, expected):
    parsed = parse_uri(uri)
    assert (parsed.host, parsed.port, parsed.username, parsed.password, parsed.vhost) == expected


def test_query_parameters_become_pika_parameters():
    uri = ("amqp://u:p@h:1234/v?heartbeat=5&frame_max=8192&channel_max=16"
           "&connection_timeout=2500")
    params = parse_uri(uri).connection_parameters(connection_name="me")
    assert isinstance(params, pika.ConnectionParameters)
    assert (params.host, params.port, params.virtual_host) == ("h", 1234, "v")
    assert (params.credentials.username, params.credentials.password) == ("u", "p")
    assert (params.heartbeat, params.frame_max, params.channel_max) == (5, 8192, 16)
    # connection_timeout is in milliseconds in RabbitMQ URIs, seconds in pika
    assert params.socket_timeout == params.stack_timeout == 2.5
    assert params.client_properties == {"connection_name": "me"}
    assert params.ssl_options is None


@pytest.mark.parametrize(
    "query", ["connection_timeout=2500", "frame_max=8192&frame_max=8192", "verify=verify_none"]
)
def test_rabbitmq_query_keys_that_pika_rejects_are_translated(query):
    uri = f"amqps://h/v?{query}"
    with pytest.raises(ValueError, match="URL parameter"):
        pika.URLParameters(uri)
    parse_uri(uri, strict=False).connection_parameters()


def test_zero_means_no_limit_or_no_heartbeat():
    parsed = parse_uri("amqp://h?heartbeat=0&frame_max=0&channel_max=0")
    assert (parsed.heartbeat, parsed.frame_max, parsed.channel_max) == (0, 131072, 65535)


def test_auth_mechanism_may_repeat_and_external_uses_external_credentials():
    parsed = parse_uri("amqps://h?auth_mechanism=external&auth_mechanism=plain&verify=verify_none")
    assert parsed.auth_mechanisms == ("external", "plain")
    params = parsed.connection_parameters()
    assert isinstance(params.credentials, pika.credentials.ExternalCredentials)


def test_amqps_options_build_an_ssl_context():
    parsed = parse_uri(
        "amqps://h?verify=verify_none&fail_if_no_peer_cert=true&server_name_indication=broker.x"
        "&depth=3&password=keypass"
    )
    assert parsed.tls.verify == "verify_none"
    assert parsed.tls.fail_if_no_peer_cert is True
    assert parsed.tls.depth == 3
    params = parsed.connection_parameters()
    assert params.ssl_options.context.verify_mode == ssl.CERT_NONE
    assert params.ssl_options.server_hostname == "broker.x"
    assert "keypass" not in repr(parsed)


def test_amqps_verifies_the_peer_by_default_and_sni_can_be_disabled():
    params = parse_uri("amqps://h").connection_parameters()
    assert params.ssl_options.context.verify_mode == ssl.CERT_REQUIRED
    assert params.ssl_options.context.check_hostname
    assert params.ssl_options.server_hostname == "h"
    no_sni = parse_uri("amqps://h?server_name_indication=disable").connection_parameters()
    assert no_sni.ssl_options.server_hostname is None
    assert not no_sni.ssl_options.context.check_hostname


def test_missing_tls_file_is_reported_by_key(tmp_path):
    parsed = parse_uri(f"amqps://h?cacertfile={tmp_path}/missing.pem")
    with pytest.raises(ValueError, match="cacertfile"):
        parsed.connection_parameters()


BAD = [
    ("http://u:secret@h", "unsupported scheme"),
    ("amqp://u:secret@h:99999", "out of range"),
    ("amqp://u:secret@h:0", "out of range"),
    ("amqp://u:secret@h:port", "not a number"),
    ("amqp://user:secret", "not a number"),
    ("amqp://u:secret@h/a/b", "percent-encode it as %2F"),
    ("amqp://fr/ed:secret@host", "percent-encode a '/' in the user name or password"),
    ("amqp://u:secret@h/%zz", "bad percent-escape in the vhost"),
    ("amqp://u:secret@h/v?heartbeat=five", "heartbeat must be a non-negative integer"),
    ("amqp://u:secret@h/v?heartbaet=5", "unknown query key 'heartbaet'"),
    ("amqp://u:secret@h/v?heartbeat=5&heartbeat=6", "repeated"),
    ("amqp://u:secret@h/v?heartbeat", "has no value"),
    ("amqp://u:secret@h/v?frame_max=100", "frame_max=100 is outside"),
    ("amqp://u:secret@h/v?connection_timeout=0", "connection_timeout"),
    ("amqp://u:secret@h/v?cacertfile=/ca.pem", "needs an amqps:// URI"),
    ("amqps://u:secret@h/v?verify=maybe", "verify must be verify_peer or verify_none"),
    ("amqps://u:secret@h/v?fail_if_no_peer_cert=yes", "must be true or false"),
    ("amqp://u:secret@h/v?auth_mechanism=crdemo", "unsupported auth_mechanism"),
    ("amqp://u:sec#ret@h", "'#'"),
    ("amqp://u:secret@h /v", "whitespace"),
    ("amqp://:5673", "a port needs a host"),
    ("amqp://[::1/v", "IPv6"),
    ("amqp:/h", "expected amqp://"),
    ("", "expected amqp://"),
]


@pytest.mark.parametrize(("uri", "problem"), BAD)
def test_malformed_uri_names_the_problem_and_hides_the_password(uri, problem):
    with pytest.raises(ValueError) as info:
        parse_uri(uri)
    message = str(info.value)
    assert problem in message
    assert "secret" not in message
    assert "ret@" not in message


def test_lenient_mode_ignores_unknown_and_repeated_keys_like_the_erlang_client():
    parsed = parse_uri("amqp://h/v?foo=1&heartbeat=5&heartbeat=7&cacertfile=/x", strict=False)
    assert parsed.heartbeat == 5
    assert parsed.tls is None


def test_non_string_uri_is_a_type_error():
    with pytest.raises(TypeError):
        parse_uri(None)


MASKED = [
    ("amqp://fred:secret@host1/v", "amqp://fred:***@host1/v"),
    ("amqp://fred@host1/v", "amqp://fred@host1/v"),
    ("amqp://host1:5672/v", "amqp://host1:5672/v"),
    ("amqp://", "amqp://"),
    # unparseable: still no password
    ("amqp://u:pa/ss@host/v", "amqp://u:***@host/v"),
    ("amqp://u:pa#ss@host", "amqp://u:***@host"),
    ("amqp://u:se@cret@host:99999", "amqp://u:***@host:99999"),
    ("amqp://user:secret", "amqp://user:***"),
    ("user:secret@host", "user:***@host"),
    ("amqps://u:p@h/v?certfile=/c.pem&password=keypass", "amqps://u:***@h/v?certfile=/c.pem&password=***"),
]


@pytest.mark.parametrize(("uri", "masked"), MASKED)
def test_mask_uri_replaces_the_password(uri, masked):
    assert mask_uri(uri) == masked


def test_mask_uri_of_non_string_shows_only_the_type():
    assert mask_uri(b"amqp://u:secret@h") == "<bytes>"


def test_parsed_uri_repr_and_masked_form_hide_the_password():
    parsed = parse_uri("amqp://fred:secret@h/v")
    assert "secret" not in repr(parsed)
    assert parsed.masked() == "amqp://fred:***@h:5672/v"


def test_management_url_is_derived_from_the_amqp_uri():
    assert management_url("amqp://u:p@10.0.0.1:5672/v") == "http://10.0.0.1:15672/"
    assert management_url("amqp://") == "http://127.0.0.1:15672/"
    assert management_url("amqps://h") == "https://h:15671/"
