"""Importing shovels from rabbitmq.config (Erlang terms) and from a definitions export."""
import json
import textwrap

import pytest

from rtroute.config.lines import ConfigError
from rtroute.config.rtroute_toml import loads
from rtroute.config.shovel import Endpoint, ShovelConfig
from rtroute.shovel.erlang_terms import ErlangSyntaxError
from rtroute.shovel.importers import from_definitions, from_erlang_config

# The shovel guide's classic example (sources/destinations with brokers), in a full
# rabbitmq.config.
CLASSIC = """\
%% rabbitmq.config
[{rabbit, [{tcp_listeners, [5672]}]},
 {rabbitmq_shovel,
  [ {shovels, [ {my_first_shovel,
                  [ {sources,
                      [ {brokers, [ "amqp://fred:secret@host1.domain/my_vhost"
                                  , "amqp://john:secret@host2.domain/my_vhost"
                                  ]}
                      , {declarations, [ {'exchange.declare',
                                            [ {exchange, <<"my_fanout">>}
                                            , {type, <<"fanout">>}
                                            , durable
                                            ]}
                                       , {'queue.declare',
                                            [{arguments,
                                               [{<<"x-message-ttl">>, long, 60000}]}]}
                                       , {'queue.bind',
                                            [ {exchange, <<"my_fanout">>}
                                            , {queue,    <<>>}
                                            ]}
                                       ]}
                      ]}
                  , {destinations,
                      [ {broker, "amqp://"}
                      , {declarations, [ {'exchange.declare',
                                            [ {exchange, <<"my_direct">>}
                                            , {type, <<"direct">>}
                                            , durable
                                            ]}
                                       ]}
                      ]}
                  , {queue, <<>>}
                  , {prefetch_count, 10}
                  , {ack_mode, on_confirm}
                  , {publish_properties, [ {delivery_mode, 2} ]}
                  , {add_forward_headers, true}
                  , {publish_fields, [ {exchange, <<"my_direct">>}
                                     , {routing_key, <<"from_shovel">>}
                                     ]}
                  , {reconnect_delay, 5}
                  ]}
              ]}
  ]}
].
"""

SOURCE_DECLARATIONS = [
    {"method": "exchange.declare", "exchange": "my_fanout", "type": "fanout", "passive": False,
     "durable": True, "auto_delete": False, "internal": False, "arguments": {}},
    {"method": "queue.declare", "queue": "", "passive": False, "durable": False,
     "exclusive": False, "auto_delete": False, "arguments": {"x-message-ttl": 60000},
     "if_missing": False},
    {"method": "queue.bind", "queue": "", "exchange": "my_fanout", "routing_key": "",
     "arguments": {}},
]
DEST_DECLARATIONS = [
    {"method": "exchange.declare", "exchange": "my_direct", "type": "direct", "passive": False,
     "durable": True, "auto_delete": False, "internal": False, "arguments": {}},
]
MY_FIRST_SHOVEL = ShovelConfig(
    name="my_first_shovel",
    sources=Endpoint(
        brokers=["amqp://fred:secret@host1.domain/my_vhost",
                 "amqp://john:secret@host2.domain/my_vhost"],
        declarations=SOURCE_DECLARATIONS,
    ),
    destinations=Endpoint(brokers=["amqp://"], declarations=DEST_DECLARATIONS),
    queue="",
    prefetch_count=10,
    ack_mode="on_confirm",
    publish_properties={"delivery_mode": 2},
    publish_fields={"exchange": "my_direct", "routing_key": "from_shovel"},
    add_forward_headers=True,
    reconnect_delay=5.0,
)

# The current guide's example (source/destination with protocol and uris).
CURRENT = """\
[{rabbitmq_shovel,
  [ {shovels, [ {my_first_shovel,
                  [ {source,
                      [ {protocol, amqp091},
                        {uris, [ "amqp://fred:secret@host1.domain/my_vhost",
                                 "amqp://john:secret@host2.domain/my_vhost" ]},
                        {declarations, [ {'exchange.declare',
                                            [ {exchange, <<"my_fanout">>},
                                              {type, <<"fanout">>},
                                              durable
                                            ]},
                                          {'queue.declare',
                                            [{arguments,
                                                [{<<"x-message-ttl">>, long, 60000}]}]},
                                          {'queue.bind',
                                            [ {exchange, <<"my_fanout">>},
                                              {queue,    <<>>}
                                            ]}
                                          ]},
                        {queue, <<>>},
                        {prefetch_count, 10}
                      ]},
                    {destination,
                      [ {protocol, amqp091},
                        {uris, ["amqp://"]},
                        {declarations, [ {'exchange.declare',
                                            [ {exchange, <<"my_direct">>},
                                              {type, <<"direct">>},
                                              durable
                                            ]}
                                        ]},
                        {publish_properties, [ {delivery_mode, 2} ]},
                        {add_forward_headers, true},
                        {publish_fields, [ {exchange, <<"my_direct">>},
                                          {routing_key, <<"from_shovel">>}
                                          ]}
                          ]},
                    {ack_mode, on_confirm},
                    {reconnect_delay, 5}
                  ]}
              ]}
  ]}
].
"""


def test_classic_documented_example_imports_as_expected():
    assert from_erlang_config(CLASSIC, "rabbitmq.config") == [MY_FIRST_SHOVEL]


def test_current_documented_example_imports_as_the_same_shovel():
    assert from_erlang_config(CURRENT, "advanced.config") == [MY_FIRST_SHOVEL]


def test_a_lone_section_and_the_plugin_defaults():
    text = """\
    {rabbitmq_shovel, [{shovels, [
        {'MUTHA-SHOVELER', [
            {sources, [{broker, "amqp://"}]},
            {destinations, [{broker, "amqp://"},
                            {declarations, ['queue.declare']}]},
            {queue, <<"my_queue">>}
        ]},
        {second, [
            {sources, [{broker, "amqp://a"}]},
            {destinations, [{broker, "amqp://b"}]},
            {queue, "char list queue"},
            {delete_after, 'queue-length'},
            {add_timestamp_header, true},
            {ack_mode, no_ack},
            {reconnect_delay, 0.5},
            {publish_properties, [{headers, [{<<"k">>, longstr, <<"v">>},
                                             {<<"n">>, table, [{<<"x">>, long, 1}]}]}]}
        ]}
    ]}]}.
    """
    first, second = from_erlang_config(textwrap.dedent(text))
    assert first.name == "MUTHA-SHOVELER"
    assert (first.queue, first.prefetch_count, first.ack_mode) == ("my_queue", 1000, "on_confirm")
    assert first.reconnect_delay == 5  # the plugin's DEFAULT_RECONNECT_DELAY, not ours
    assert first.destinations.declarations[0]["method"] == "queue.declare"
    assert second.queue == "char list queue"
    assert second.src_delete_after == "queue-length"
    assert second.dest_add_timestamp_header and second.ack_mode == "no_ack"
    assert second.reconnect_delay == 0.5
    assert second.publish_properties == {"headers": {"k": "v", "n": {"x": 1}}}


def _line_of(text, needle):
    return next(i + 1 for i, line in enumerate(text.splitlines()) if needle in line)


@pytest.mark.parametrize(
    "old,new,needle,message",
    [
        ("{ack_mode, on_confirm}", "{ack_mode, on_ack}", "on_ack",
         ("shovel 'my_first_shovel': ack_mode must be one of no_ack, on_publish, on_confirm, "
         "got 'on_ack'")),
        ("{prefetch_count, 10}", "{prefetch_count, ten}", "prefetch_count",
         "shovel 'my_first_shovel': prefetch_count must be an integer, got a string"),
        ("{reconnect_delay, 5}", "{reconnect_delay, -1}", "reconnect_delay",
         "reconnect_delay must be >= 0, got -1"),
        ("{delivery_mode, 2}", "{delivery_mode, 3}", "delivery_mode",
         "publish_properties.delivery_mode must be 1 (transient) or 2 (persistent), got 3"),
        ("{delivery_mode, 2}", "{delivery_mod, 2}", "delivery_mod",
         "(did you mean 'delivery_mode'?)"),
        ("{queue, <<>>}", "{queue, my_queue}", "my_queue",
         "queue must be a binary (<<\"...\">>) or a string, got atom 'my_queue'"),
        ("{queue, <<>>}", "{queu, <<>>}", "queu,", "unknown key 'queu' (did you mean 'queue'?)"),
        ("{queue, <<>>}", "{source, []}", "{sources,",
         "'sources' belongs to the other shovel format"),
        ("{type, <<\"direct\">>}", "{typ, <<\"direct\">>}", "typ,",
         "exchange.declare has no field 'typ'"),
        ("'queue.bind'", "'queue.bnd'", "queue.bnd", "unknown method 'queue.bnd'"),
        ('"amqp://fred', '"http://fred', "http://fred",
         "sources.brokers[0] must start with amqp:// or amqps://"),
        ("{broker, \"amqp://\"}", "{broker, \"amqp://\"}, {broker, \"amqp://x\"}", "amqp://x",
         "destinations: 'broker' is given twice"),
        ("{add_forward_headers, true}", "{add_forward_headers, yes}", "add_forward_headers",
         "add_forward_headers must be a boolean, got a string"),
    ],
)
def test_bad_erlang_shovel_names_shovel_field_and_line(old, new, needle, message):
    assert old in CLASSIC
    text = CLASSIC.replace(old, new, 1)
    with pytest.raises(ConfigError) as info:
        from_erlang_config(text, "rabbitmq.config")
    error = info.value
    assert message in error.message
    assert error.line == _line_of(text, needle), str(error)
    assert str(error).startswith(f"rabbitmq.config:{error.line}: ")


def test_erlang_syntax_errors_keep_line_and_column():
    text = CLASSIC.replace('<<"from_shovel">>}', '<<"from_shovel>>}')
    with pytest.raises(ErlangSyntaxError) as info:
        from_erlang_config(text, "rabbitmq.config")
    assert info.value.line == _line_of(text, "from_shovel>>")
    assert "unterminated string" in info.value.message


@pytest.mark.parametrize(
    "text,message",
    [
        ("[{rabbit, []}].", "no {rabbitmq_shovel, [...]} section"),
        ("[{rabbitmq_shovel, [{other, 1}]}].", "rabbitmq_shovel: no {shovels, [...]} entry"),
        ("[{rabbitmq_shovel, [{shovels, [{\"name\", []}]}]}].", "each shovel must be {name"),
        (("[{rabbitmq_shovel, [{shovels, [{s, [{source, [{protocol, amqp10}, {uris, "
         "[\"amqp://\"]}]}, {destination, [{uris, [\"amqp://\"]}]}]}]}]}]."),
         "shovel 's': source.protocol: only amqp091 is supported, got 'amqp10'"),
    ],
)
def test_bad_erlang_structure(text, message):
    with pytest.raises(ConfigError, match=None) as info:
        from_erlang_config(text)
    assert message in info.value.message


def test_duplicate_static_shovel_names_are_rejected():
    text = CLASSIC.replace("[ {shovels, [ {my_first_shovel,", "[ {shovels, [ {dup, [{sources, "
                           "[{broker, \"amqp://\"}]}, {destinations, [{broker, \"amqp://\"}]},"
                           " {queue, <<\"q\">>}]}, {dup,")
    with pytest.raises(ConfigError, match="shovel 'dup': name used twice"):
        from_erlang_config(text)


# ----------------------------------------------------------------------------- definitions

DEFINITIONS = """\
{
  "rabbit_version": "3.10.8",
  "queues": [],
  "parameters": [
    {
      "value": {
        "src-uri": "amqp://",
        "src-queue": "source",
        "src-queue-args": {"x-queue-type": "quorum"},
        "dest-uri": "amqp://remote",
        "dest-queue": "dest",
        "ack-mode": "on-publish",
        "prefetch-count": 250,
        "reconnect-delay": 30,
        "delete-after": "never",
        "dest-exchange": null,
        "add-forward-headers": false
      },
      "vhost": "/",
      "component": "shovel",
      "name": "my-shovel"
    },
    {
      "value": {"max-hops": 1, "uri": "amqp://up"},
      "vhost": "/",
      "component": "federation-upstream",
      "name": "up"
    },
    {
      "value": {
        "src-protocol": "amqp091",
        "src-uri": ["amqp://a", "amqp://b"],
        "src-exchange": "orders",
        "src-exchange-key": "eu.#",
        "src-delete-after": 100,
        "dest-protocol": "amqp091",
        "dest-uri": "amqp://c",
        "dest-exchange": "orders-copy",
        "dest-exchange-key": "copied",
        "dest-add-forward-headers": true,
        "dest-add-timestamp-header": true,
        "dest-publish-properties": {"delivery_mode": 2}
      },
      "vhost": "other",
      "component": "shovel",
      "name": "my-shovel"
    }
  ]
}
"""


def test_definitions_export_imports_its_shovels():
    first, second = from_definitions(DEFINITIONS, "defs.json")
    assert first == ShovelConfig(
        name="my-shovel",
        vhost="/",
        sources=Endpoint(
            brokers=["amqp://"],
            declarations=[{"method": "queue.declare", "queue": "source", "passive": False,
                           "durable": True, "exclusive": False, "auto_delete": False,
                           "arguments": {"x-queue-type": "quorum"}, "if_missing": True}],
        ),
        destinations=Endpoint(
            brokers=["amqp://remote"],
            declarations=[{"method": "queue.declare", "queue": "dest", "passive": False,
                           "durable": True, "exclusive": False, "auto_delete": False,
                           "arguments": {}, "if_missing": True}],
        ),
        queue="source",
        dest_queue="dest",
        ack_mode="on_publish",
        prefetch_count=250,
        reconnect_delay=30.0,
        src_delete_after="never",
        on_unroutable="drop",
    )
    assert second.vhost == "other" and second.name == "my-shovel"
    assert second.sources.brokers == ["amqp://a", "amqp://b"]
    assert (second.src_exchange, second.src_exchange_key) == ("orders", "eu.#")
    assert second.sources.declarations == []
    assert (second.dest_exchange, second.dest_exchange_key) == ("orders-copy", "copied")
    assert second.src_delete_after == 100
    assert second.add_forward_headers and second.dest_add_timestamp_header
    assert second.publish_properties == {"delivery_mode": 2}
    assert second.ack_mode == "on_confirm" and second.reconnect_delay == 5


def test_definitions_as_data_and_as_a_parameter_list():
    data = json.loads(DEFINITIONS)
    assert from_definitions(data) == from_definitions(DEFINITIONS)
    assert from_definitions(data["parameters"]) == from_definitions(data)
    assert from_definitions({"queues": []}) == []


def _definitions_with(name, value):
    body = json.dumps(value, indent=2)
    return ('{\n  "parameters": [\n    {\n      "component": "shovel",\n'
            f'      "name": "{name}",\n      "vhost": "/",\n'
            f'      "value": {body}\n    }}\n  ]\n}}\n')


BASE = {"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://"}


@pytest.mark.parametrize(
    "change,needle,message",
    [
        ({"ack-mode": "on-ack"}, "ack-mode",
         "shovel 'bad': ack-mode must be one of no_ack, on_publish, on_confirm, got 'on-ack'"),
        ({"src-exchange": "x"}, "src-exchange", "give queue or src-exchange, not both"),
        ({"src-uri": "http://x"}, "src-uri", "src-uri must start with amqp:// or amqps://"),
        ({"src-uri": ["amqp://a", 7]}, "7", "src-uri[1] must be a string, got an integer"),
        ({"dest-publish-properties": {"delivery_mode": 9}}, "delivery_mode",
         "dest-publish-properties.delivery_mode must be 1 (transient) or 2 (persistent)"),
        ({"ack-mode": "no-ack", "src-delete-after": 5}, "src-delete-after",
         "a numeric src-delete-after needs acknowledgements"),
        ({"src-delete-after": "sometimes"}, "src-delete-after",
         "src-delete-after must be \"never\", \"queue-length\" or a message count"),
        ({"dest-queue": "a", "dest-exchange": "b"}, '"dest-queue"',
         "give dest-exchange or dest-queue, not both"),
        ({"reconnect-delay": "soon"}, "reconnect-delay", "reconnect-delay must be a number"),
        ({"prefetch-count": 10, "src-prefetch-count": 20}, "src-prefetch-count",
         "'prefetch-count' and 'src-prefetch-count' are the same setting"),
        ({"dest-queue-args": {"x": 1}}, "dest-queue-args", "dest-queue-args needs dest-queue"),
    ],
)
def test_bad_dynamic_shovel_names_shovel_field_and_line(change, needle, message):
    text = _definitions_with("bad", {**BASE, **change})
    with pytest.raises(ConfigError) as info:
        from_definitions(text, "defs.json")
    error = info.value
    assert message in error.message, error.message
    assert error.line == _line_of(text, needle), str(error)


@pytest.mark.parametrize(
    "change,reason",
    [
        ({"src-protocol": "amqp10", "src-address": "x"},
         "src-protocol amqp10 is not supported: rtroute shovels speak AMQP 0-9-1 only"),
        ({"dest-protocol": "amqp10", "dest-address": "x"}, "dest-protocol amqp10 is not supported"),
        ({"dest-address": "x"}, "dest-address is an AMQP 1.0 setting"),
        ({"dest-application-properties": {"a": "b"}},
         "dest-application-properties is an AMQP 1.0 setting"),
        ({"ack-mod": "on-confirm"}, "unknown key 'ack-mod' (did you mean 'ack-mode'?)"),
        ({"src-future-setting": True}, "unknown key 'src-future-setting'"),
    ],
)
def test_a_shovel_rtroute_cannot_run_is_refused_alone(change, reason, caplog):
    good = {"component": "shovel", "name": "good", "vhost": "/", "value": BASE}
    bad = {"component": "shovel", "name": "bad", "vhost": "v", "value": {**BASE, **change}}
    refused: list = []
    shovels = from_definitions(json.dumps({"parameters": [bad, good]}), "defs.json",
                               refused=refused)
    assert [s.name for s in shovels] == ["good"]
    ((name, vhost, why),) = [(r.name, r.vhost, r.reason) for r in refused]
    assert (name, vhost) == ("bad", "v") and reason in why
    assert reason in caplog.text and "'bad'" in caplog.text


def test_current_dynamic_keys_are_taken():
    value = {**BASE, "src-predeclared": True, "dest-queue": "d", "dest-predeclared": True,
             "src-consumer-args": {"x-priority": 5}, "publish-properties": []}
    (shovel,) = from_definitions({"parameters": [
        {"component": "shovel", "name": "s", "vhost": "/", "value": value}]})
    assert shovel.sources.declarations[0]["passive"] is True
    assert not shovel.sources.declarations[0]["if_missing"]
    assert shovel.destinations.declarations[0]["passive"] is True
    assert shovel.consumer_args == {"x-priority": 5}
    assert shovel.publish_properties == {}


@pytest.mark.parametrize("properties", [[], [["delivery_mode", 2], ["app_id", "x"]]])
def test_publish_properties_as_a_list_of_pairs(properties):
    expected = dict(properties)
    (shovel,) = from_definitions({"parameters": [{
        "component": "shovel", "name": "s", "vhost": "/",
        "value": {**BASE, "publish-properties": properties}}]})
    assert shovel.publish_properties == expected
    (toml,) = loads('[[shovel]]\nname = "t"\nsources = { broker = "amqp://" }\n'
                    'destinations = { broker = "amqp://" }\nqueue = "q"\n'
                    f'publish_properties = {json.dumps(properties)}\n').shovels
    assert toml.publish_properties == expected


def test_a_publish_properties_list_of_non_pairs_is_rejected_with_its_line():
    text = _definitions_with("bad", {**BASE, "publish-properties": [["delivery_mode"]]})
    with pytest.raises(ConfigError, match=r"publish-properties\[0\] must be a \[key, value\] "
                       "pair"):
        from_definitions(text, "defs.json")


def test_erlang_consumer_args_reach_the_shovel():
    text = ('[{rabbitmq_shovel, [{shovels, [{s, [{source, [{uris, ["amqp://"]}, {queue, <<"q">>},'
            ' {consumer_args, [{<<"x-priority">>, long, 7}]}]},'
            ' {destination, [{uris, ["amqp://"]}]}]}]}]}].')
    (shovel,) = from_erlang_config(text)
    assert shovel.consumer_args == {"x-priority": 7}


def test_dynamic_shovel_without_a_source_uri_is_rejected():
    with pytest.raises(ConfigError, match="shovel 'bad': src-uri is required"):
        from_definitions(_definitions_with("bad", {"src-queue": "q", "dest-uri": "amqp://"}))


def test_invalid_json_reports_its_line():
    with pytest.raises(ConfigError) as info:
        from_definitions('{\n  "parameters": [\n    {,}\n  ]\n}', "defs.json")
    assert info.value.line == 3 and "invalid JSON" in info.value.message


def test_duplicate_dynamic_shovels_in_one_vhost_are_rejected():
    param = {"component": "shovel", "name": "x", "vhost": "/", "value": BASE}
    with pytest.raises(ConfigError, match="shovel 'x': name used twice"):
        from_definitions({"parameters": [param, param]})


def test_errors_without_text_have_no_line():
    with pytest.raises(ConfigError) as info:
        from_definitions({"parameters": [
            {"component": "shovel", "name": "x", "value": {**BASE, "ack-mode": "bad"}}]})
    assert info.value.line is None
    assert str(info.value).startswith("<config>: shovel 'x': ack-mode must be one of")
