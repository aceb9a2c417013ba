"""No config error shows a password: URIs that do not parse, urllib's own error text (which
quotes a "port" that is really the password), raw values echoed back and Erlang terms are all
masked, while the message still says what is wrong and where."""
from __future__ import annotations

import json
import textwrap

import pytest

from rtroute.amqp.uri import mask_uri, split_url
from rtroute.config.lines import shown
from rtroute.config.rtroute_toml import ConfigError, loads, loads_divert
from rtroute.config.shovel import amqp_uri_problem
from rtroute.shovel.importers import from_definitions, from_erlang_config

SECRET = "Hunter2pw"

# URIs whose password urllib reads as a port (no "@" before the first "/", "?" or "#")
PORT_IS_PASSWORD = [
    f"amqp://fred:{SECRET}/",
    f"amqp://fred:{SECRET}",
    f"amqp://fred:Hunter/{SECRET}@host1/v",
    f"amqp://fred:Hunter?{SECRET}@host1/v",
    f"amqps://fred:{SECRET}?heartbeat=5",
]


@pytest.mark.parametrize("uri", PORT_IS_PASSWORD)
def test_split_url_never_passes_on_urllibs_text(uri):
    with pytest.raises(ValueError) as info:
        split_url(uri)
    assert SECRET not in str(info.value)
    assert str(info.value).startswith("not a valid URI: ")


def test_split_url_names_the_problem():
    with pytest.raises(ValueError, match="the port is not a number"):
        split_url(f"amqp://fred:{SECRET}/")
    with pytest.raises(ValueError, match="out of range"):
        split_url("amqp://h:99999/")
    with pytest.raises(ValueError, match="IPv6"):
        split_url(f"amqp://fred:{SECRET}@[::1/")
    assert split_url("http://u:p@h:15672/")[1] == 15672


@pytest.mark.parametrize("uri", PORT_IS_PASSWORD)
def test_broker_uri_errors_mask_the_password(uri):
    with pytest.raises(ConfigError) as info:
        loads(f'[broker]\nuri = "{uri}"\n')
    assert SECRET not in str(info.value)
    assert info.value.line == 2 and "[broker]: uri is" in info.value.message


def test_broker_uri_error_still_says_what_is_wrong():
    with pytest.raises(ConfigError) as info:
        loads(f'[broker]\nuri = "amqp://fred:{SECRET}/"\n')
    assert info.value.message == ("[broker]: uri is not a valid URI: amqp://fred:***/: "
                                  "the port is not a number")


@pytest.mark.parametrize("management", [
    f"http://fred:{SECRET}/",
    f"https://fred:Hunter/{SECRET}@host/",
    f"ftp://fred:{SECRET}@host/",
    f"fred:{SECRET}@host",
])
def test_management_uri_errors_mask_the_password(management):
    with pytest.raises(ConfigError) as info:
        loads(f'[broker]\nmanagement_uri = "{management}"\n')
    assert SECRET not in str(info.value)
    assert info.value.line == 2 and "management_uri" in info.value.message


@pytest.mark.parametrize("uri", PORT_IS_PASSWORD)
def test_shovel_uri_errors_mask_the_password(uri):
    text = textwrap.dedent(f"""\
        [[shovel]]
        name = "s"
        queue = "q"
        sources = {{ brokers = ["amqp://", "{uri}"] }}
        destinations = {{ broker = "amqp://" }}
        """)
    with pytest.raises(ConfigError) as info:
        loads(text)
    assert SECRET not in str(info.value)
    assert info.value.line == 4 and "sources.brokers[1]" in info.value.message
    assert SECRET not in (amqp_uri_problem(uri) or "")


def test_a_uri_given_where_a_choice_is_expected_is_masked():
    with pytest.raises(ConfigError) as info:
        loads(f'[[shovel]]\nname = "s"\nqueue = "q"\nsources = {{ broker = "amqp://" }}\n'
              f'destinations = {{ broker = "amqp://" }}\nack_mode = "amqp://fred:{SECRET}@host/"\n')
    assert SECRET not in str(info.value) and "fred:***@host" in str(info.value)


def test_erlang_config_values_are_masked_in_errors():
    text = ('[{rabbitmq_shovel, [{shovels, [{s, [{sources, [{brokers, '
            f'"amqp://fred:{SECRET}@host1/v"}}]}}]}}]}}]}}].')
    with pytest.raises(ConfigError) as info:
        from_erlang_config(text, "rabbitmq.config")
    assert SECRET not in str(info.value)
    assert "got string 'amqp://fred:***@host1/v'" in str(info.value)


def test_erlang_binaries_and_malformed_uris_are_masked_in_errors():
    for value in (f'<<"amqp://fred:{SECRET}@host1/v">>', f'"amqp://fred:{SECRET}/"'):
        text = f"[{{rabbitmq_shovel, [{{shovels, [{{s, [{{sources, [{{brokers, {value}}}]}}]}}]}}]}}]."
        with pytest.raises(ConfigError) as info:
            from_erlang_config(text, "rabbitmq.config")
        assert SECRET not in str(info.value), str(info.value)


def test_erlang_config_uri_problems_are_masked():
    text = ('[{rabbitmq_shovel, [{shovels, [{s, [{sources, [{brokers, '
            f'["amqp://fred:{SECRET}/"]}}]}}, {{destinations, [{{broker, "amqp://"}}]}}, '
            '{queue, <<"q">>}]}]}]}].')
    with pytest.raises(ConfigError) as info:
        from_erlang_config(text, "rabbitmq.config")
    assert SECRET not in str(info.value) and "not a valid URI" in str(info.value)


def test_definitions_uri_problems_are_masked():
    value = {"src-uri": f"amqp://fred:{SECRET}/", "src-queue": "q", "dest-uri": "amqp://",
             "dest-queue": "d"}
    text = json.dumps({"parameters": [{"component": "shovel", "name": "s", "vhost": "/",
                                       "value": value}]}, indent=1)
    with pytest.raises(ConfigError) as info:
        from_definitions(text, "defs.json")
    assert SECRET not in str(info.value) and info.value.line is not None


def test_a_divert_body_value_is_masked():
    with pytest.raises(ConfigError) as info:
        loads_divert(json.dumps({"name": "d", "address": "p", "forwarding_address": "f",
                                 "transformer": f"amqp://fred:{SECRET}@h/"}))
    assert SECRET not in str(info.value)


@pytest.mark.parametrize(("uri", "masked"), [
    (f"amqp://fred:{SECRET}@[bad", "amqp://fred:***@[bad"),
    (f"amqp://fr/ed:{SECRET}@host", "amqp://***@host"),
    (f"amqp://[::1]:{SECRET}/v", "amqp://[::1]:***/v"),
    ("amqp://[::1]:5672/v", "amqp://[::1]:5672/v"),
    (f"amqp://[fred:{SECRET}/", "amqp://[fred:***/"),
    (f"amqp:://fred:{SECRET}@host", "amqp:://fred:***@host"),
    (f" amqp://fred:{SECRET}", " amqp://fred:***"),
    (f"fred:{SECRET}@host//x", "fred:***@host//x"),
    (f"amqp:fred:{SECRET}//host", "amqp:***//host"),
    ("amqp://host/v@x", "amqp://***@x"),  # ambiguous: masks more rather than less
])
def test_mask_uri_of_uris_that_do_not_parse(uri, masked):
    assert mask_uri(uri) == masked


def test_shown_masks_before_it_cuts():
    long_uri = "amqp://fred:" + SECRET + "@" + "h" * 200 + "/v"
    assert SECRET not in shown(long_uri) and len(shown(long_uri)) <= 80
    assert SECRET not in shown([f"amqp://fred:{SECRET}@h"])
    assert SECRET not in shown(f"amqp://fred:{SECRET}@h".encode())
    assert shown("on_confirm") == "'on_confirm'"
