"""rtroute.toml: a valid file loads into the documented dataclasses; each bad field is reported
with its line, section, entry and field."""
import pathlib
import sys
import textwrap
import types

import pytest

import rtroute
from rtroute.config.rtroute_toml import (
    BindingConfig,
    BrokerConfig,
    Config,
    ConfigError,
    DivertConfig,
    ExchangeConfig,
    HttpConfig,
    derive_management_uri,
    load,
    loads,
)
from rtroute.config.shovel import Endpoint, ShovelConfig, ShovelFilter
from rtroute.routing.divert_graph import address_matches

ROOT = pathlib.Path(__file__).resolve().parents[2]

FULL = """\
[broker]
uri = "amqps://app:p%40ss@broker.example:5671/prod"

[http]
listen = "0.0.0.0:9500"
token = "t0ken"

[[exchange]]
name = "logs"
alternate_exchange = "logs.unroutable"
prefetch = 500
ingress_queue_type = "quorum"
bcc_alias_header = "x-bcc"
max_hops = 4
bindings = [
    { destination = "A", key = "server1.app1.mod1.info" },
    { destination = "audit", key = "#.error", destination_type = "exchange" },
]

[[exchange]]
name = "prices"
kind = "headers"
bindings = [{ destination = "ny", arguments = { "x-match" = "all", office = "NY" } }]

[[divert]]
name = "d1"
address = "prices"
forwarding_address = "logs, archive"
exclusive = true
routing_type = "PASS"
routing_key = "copied"
transformer = "pkg.mod:fn"

[[shovel]]
name = "move"
sources = { brokers = ["amqp://a", "amqp://b"] }
destinations = { broker = "amqp://c" }
src_exchange = "orders"
src-exchange-key = "eu.#"
durable_queue = true
dest-exchange = "orders"
dest-exchange-key = "copied"
ack_mode = "on-publish"
prefetch-count = 0
reconnect_delay = 0
src-delete-after = "queue-length"
publish_properties = { delivery_mode = 1, priority = 9, expiration = "60000", headers = { a = 1 } }
filter = { key = "eu.de", kind = "rtopic", on_mismatch = "leave" }
"""


def test_full_config_loads_into_the_documented_dataclasses():
    config = loads(FULL, "full.toml")
    assert config == Config(
        broker=BrokerConfig(
            uri="amqps://app:p%40ss@broker.example:5671/prod",
            management_uri="https://app:p%40ss@broker.example:15671/",
        ),
        http=HttpConfig(listen="0.0.0.0:9500", token="t0ken"),
        exchanges=[
            ExchangeConfig(
                name="logs", kind="rtopic", alternate_exchange="logs.unroutable", prefetch=500,
                ingress_queue_type="quorum", bcc_alias_header="x-bcc", max_hops=4,
                bindings=[
                    BindingConfig("A", "server1.app1.mod1.info"),
                    BindingConfig("audit", "#.error", destination_type="exchange"),
                ],
            ),
            ExchangeConfig(
                name="prices", kind="headers",
                bindings=[BindingConfig("ny", "", arguments={"x-match": "all", "office": "NY"})],
            ),
        ],
        diverts=[
            DivertConfig(name="d1", address="prices", forwarding_address="logs,archive",
                         exclusive=True, routing_name="d1", routing_key="copied",
                         routing_type="PASS", transformer="pkg.mod:fn"),
        ],
        shovels=[
            ShovelConfig(
                name="move",
                sources=Endpoint(["amqp://a", "amqp://b"]),
                destinations=Endpoint(["amqp://c"]),
                src_exchange="orders", src_exchange_key="eu.#",
                durable_queue="rtroute.shovel.move",
                dest_exchange="orders", dest_exchange_key="copied",
                ack_mode="on_publish", prefetch_count=0, reconnect_delay=0.0,
                src_delete_after="queue-length",
                publish_properties={"delivery_mode": 1, "priority": 9, "expiration": "60000",
                                    "headers": {"a": 1}},
                on_unroutable="drop",
                filter=ShovelFilter(key="eu.de", kind="rtopic", on_mismatch="leave"),
            ),
        ],
        path="full.toml",
    )
    assert config.diverts[0].forwarding_addresses == ("logs", "archive")
    assert config.exchanges[0].ingress_queue == "rtroute.ingress.logs"
    assert config.exchanges[0].bindings_exchange == "logs.bindings"
    assert (config.http.host, config.http.port) == ("0.0.0.0", 9500)


def test_empty_file_gives_the_defaults():
    config = loads("")
    assert config.broker == BrokerConfig(
        uri="amqp://guest:guest@127.0.0.1:5672/%2F",
        management_uri="http://guest:guest@127.0.0.1:15672/",
    )
    assert config.http == HttpConfig(listen="127.0.0.1:8419", token=None, persist_diverts=False)
    assert (config.exchanges, config.diverts, config.shovels) == ([], [], [])


def test_exchange_defaults():
    (exchange,) = loads('[[exchange]]\nname = "logs"\n').exchanges
    assert exchange == ExchangeConfig(
        name="logs", kind="rtopic", alternate_exchange=None, prefetch=1000,
        ingress_queue_type="classic", bcc_alias_header="x-rtroute-bcc", bindings=[],
        max_hops=64,
    )


def test_shovel_defaults_follow_the_plugin():
    (shovel,) = loads(
        '[[shovel]]\nname = "s"\nsources = { broker = "amqp://" }\n'
        'destinations = { broker = "amqp://" }\nqueue = "q"\n'
    ).shovels
    assert shovel.prefetch_count == 1000
    assert shovel.ack_mode == "on_confirm"
    assert shovel.reconnect_delay == 1.0
    assert shovel.src_delete_after == "never"
    assert shovel.on_unroutable == "nack"
    assert (shovel.add_forward_headers, shovel.dest_add_timestamp_header) == (False, False)
    assert shovel.publish_properties == {} and shovel.publish_fields == {}


def test_the_example_file_loads_and_uses_every_section():
    config = load(ROOT / "examples" / "rtroute.toml")
    assert config.path == str(ROOT / "examples" / "rtroute.toml")
    assert config.broker.management_uri == "http://guest:guest@127.0.0.1:15672/"
    assert [e.name for e in config.exchanges][:2] == ["logs", "priceUpdates"]
    assert {e.kind for e in config.exchanges} == {"rtopic", "topic", "direct", "fanout"}
    assert [d.name for d in config.diverts] == ["prices-divert", "orders-spy"]
    first, second = config.shovels
    assert first.sources.brokers == ["amqp://guest:guest@127.0.0.1:5672/%2F",
                                     "amqp://guest:guest@localhost:5672/%2F"]
    assert [d["method"] for d in first.sources.declarations] == [
        "exchange.declare", "queue.declare", "queue.bind"]
    assert first.sources.declarations[1]["arguments"] == {"x-message-ttl": 60000}
    assert first.queue == "" and first.reconnect_delay == 2.5
    assert second.src_exchange == "orders" and second.durable_queue == "shovel.orders-to-dc2"
    assert second.filter == ShovelFilter(selector="region = 'eu'", key="eu.*.new")


def test_the_design_skeleton_loads():
    design = pathlib.Path("/work/shared/DESIGN.md")
    if not design.exists():
        design = ROOT.parent / "shared" / "DESIGN.md"
    if not design.exists():
        pytest.skip("shared/DESIGN.md is not beside the repository")
    text = design.read_text()
    skeleton = text.split("```toml\n", 1)[1].split("```", 1)[0]
    # the skeleton's divert watches priceUpdates, which the skeleton does not declare
    skeleton += '\n[[exchange]]\nname = "priceUpdates"\nkind = "topic"\n'
    config = loads(skeleton)
    assert config.shovels[0].name == "my_first_shovel"
    assert config.shovels[0].reconnect_delay == 2.5


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read the config file"):
        load(tmp_path / "absent.toml")


def test_non_utf8_file_reports_its_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_bytes(b'[broker]\nuri = "amqp://\xff"\n')
    with pytest.raises(ConfigError) as info:
        load(path)
    assert info.value.line == 2 and "not UTF-8" in info.value.message


@pytest.mark.parametrize(
    "uri,expected",
    [
        ("amqp://", "http://guest:guest@127.0.0.1:15672/"),
        ("amqp://u:p@host/v", "http://u:p@host:15672/"),
        ("amqp://u@host:5673", "http://u:guest@host:15672/"),
        ("amqps://u:p@host/v", "https://u:p@host:15671/"),
        ("amqp://u:p%2Fq@[::1]:5672/", "http://u:p%2Fq@[::1]:15672/"),
    ],
)
def test_management_uri_is_derived_from_the_amqp_uri(uri, expected):
    assert derive_management_uri(uri) == expected


@pytest.mark.parametrize(
    "pattern,name,matches",
    [
        ("orders", "orders", True),
        ("orders", "orders.eu", False),
        ("orders.#", "orders", True),
        ("orders.#", "orders.eu.de", True),
        ("orders.*", "orders.eu", True),
        ("orders.*", "orders.eu.de", False),
        ("orders.*", "orders", False),
        ("#", "anything.at.all", True),
        ("*.eu", "orders.eu", True),
        ("#.eu", "a.b.eu", True),
        ("#.eu", "eu", True),
        ("#.eu.#", "x.eu.y", True),
        ("a.#.b", "a.b", True),
        ("a.#.b", "a.x.y.b", True),
        ("a.#.b", "a.x.y.c", False),
    ],
)
def test_divert_addresses_match_with_topic_semantics(pattern, name, matches):
    assert address_matches(pattern, name) is matches


# ------------------------------------------------------------------------------ bad fields

EX = '[[exchange]]\nname = "logs"\n'

BAD_FIELDS = [
    # syntax
    ('[broker]\nuri = "amqp://" extra  # <-\n', "invalid TOML"),
    # top level
    ('[[exchanges]]  # <-\nname = "x"\n', "unknown section 'exchanges' (did you mean 'exchange'?)"),
    ('uri = "amqp://"  # <-\n', "unknown top-level key 'uri'"),
    ('[exchange]  # <-\nname = "x"\n', "exchange must be an array of tables: write [[exchange]]"),
    ('broker = "amqp://"  # <-\n', "[broker] must be a table, got a string"),
    # [broker]
    ('[broker]\nuri = "http://host/"  # <-\n', "[broker]: uri must start with amqp:// or amqps://"),
    ('[broker]\nuri = 5672  # <-\n', "[broker]: uri must be a string or a non-empty array of strings (one URI per node), got an integer"),
    ('[broker]\nuri = "amqp://h:99999/"  # <-\n', "[broker]: uri is not a valid URI"),
    ('[broker]\nuri = "amqp://h/a/b"  # <-\n', "has a '/' in the vhost; write it as %2F"),
    ('[broker]\nmanagement_uri = "ftp://h/"  # <-\n',
     "management_uri must be http(s)://host[:port]/"),
    ('[broker]\nurii = "amqp://"  # <-\n', "[broker]: unknown key 'urii' (did you mean 'uri'?)"),
    ('[broker]\nuri = []  # <-\n', "uri must be a string or a non-empty array of strings"),
    ('[broker]\nuri = ["amqp://h/", 5]  # <-\n', "uri[1] must be a URI string, got an integer"),
    ('[broker]\nuri = ["amqp://h/", "http://h/"]  # <-\n', "uri[1] must start with amqp://"),
    ('[broker]\nmanagement_uri = ["http://h:15672/", "ftp://x/"]  # <-\n',
     "management_uri[1] must be http(s)://"),
    # [http]
    ('[http]\nlisten = "0.0.0.0:8419"  # <-\n',
     "is not a loopback address, so a token is required"),
    ('[http]\nlisten = "localhost"  # <-\n', "listen must be HOST:PORT"),
    ('[http]\npersist_diverts = "yes"  # <-\n', "persist_diverts must be a boolean, got a string"),
    ('[http]\nlisten = "127.0.0.1:70000"  # <-\n', "ports go up to 65535"),
    ('[http]\ntoken = ""  # <-\n', "[http]: token must not be empty"),
    ('[http]\nlisen = "127.0.0.1:1"  # <-\n', "unknown key 'lisen' (did you mean 'listen'?)"),
    # [[exchange]]
    ('[[exchange]]  # <-\nkind = "topic"\n', "exchange #1: name is required"),
    (EX + 'kind = "rtopik"  # <-\n',
     ("exchange 'logs': kind must be one of rtopic, topic, direct, fanout, headers, got 'rtopik' "
     "(did you mean 'rtopic'?)")),
    (EX + "prefetch = 0  # <-\n", "exchange 'logs': prefetch must be between 1 and 65535, got 0"),
    (EX + 'prefetch = "10"  # <-\n', "prefetch must be an integer, got a string"),
    (EX + 'ingress_queue_type = "stream"  # <-\n', "must be one of classic, quorum, got 'stream'"),
    (EX + 'bcc_alias_header = "BCC"  # <-\n', "bcc_alias_header must not be 'BCC'"),
    (EX + 'alternate_exchange = "logs"  # <-\n', "alternate_exchange must differ"),
    (EX + "max_hops = 0  # <-\n", "max_hops must be between 1 and 1000, got 0"),
    (EX + 'alternate-exchange = "x"  # <-\n',
     "unknown key 'alternate-exchange' (did you mean 'alternate_exchange'?)"),
    ('[[exchange]]\nname = "amq.topic"  # <-\n', "must not start with 'amq.'"),
    ('[[exchange]]\nname = "' + "x" * 256 + '"  # <-\n',
     "is 256 bytes long; AMQP allows at most 255"),
    (EX + '[[exchange]]\nname = "logs"  # <-\n',
     "exchange 'logs': name used twice (first defined on line 2)"),
    (EX + 'bindings = [\n  { destination = "A", key = "a" },\n  { key = "b" },  # <-\n]\n',
     "exchange 'logs': bindings[1].destination is required"),
    (EX + 'bindings = [\n  { destination = "A", key = 5 },  # <-\n]\n',
     "bindings[0].key must be a string, got an integer"),
    (EX + 'bindings = [{ destination = "A", dest = "B" }]  # <-\n',
     "unknown key 'dest' in bindings[0] (did you mean 'destination'?)"),
    (EX + 'bindings = [{ destination = "A", destination_type = "topic" }]  # <-\n',
     "bindings[0].destination_type must be one of queue, exchange, got 'topic'"),
    (EX + 'bindings = ["A"]  # <-\n', "bindings[0] must be a table"),
    (EX + 'bindings = { destination = "A" }  # <-\n', "bindings must be an array of tables"),
    # [[divert]]
    (EX + '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "x"\n'
     'routing_type = "strip"  # <-\n',
     ("divert 'd': routing_type must be one of ANYCAST, MULTICAST, PASS, STRIP, got 'strip' "
     "(did you mean 'STRIP'?)")),
    (EX + '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "x"\n'
     'transformer = "pkg.mod.fn"  # <-\n', "transformer must be 'module:function'"),
    (EX + '[[divert]]\nname = "d"\naddress = "logz"  # <-\nforwarding_address = "x"\n',
     ("divert 'd': address 'logz' matches no managed exchange; declare it with [[exchange]] "
     "(did you mean 'logs'?)")),
    (EX + '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "x"\n'
     'exclusive = "yes"  # <-\n', "divert 'd': exclusive must be a boolean, got a string"),
    (EX + '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "a,,b"  # <-\n',
     "forwarding_address has an empty address"),
    (EX + '[[divert]]  # <-\nname = "d"\naddress = "logs"\n',
     "divert 'd': forwarding_address is required"),
    (EX + '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "x"\n'
     'filtre = "a = 1"  # <-\n', "unknown key 'filtre' (did you mean 'filter'?)"),
]


@pytest.mark.parametrize("text,message", BAD_FIELDS)
def test_bad_field_is_reported_at_its_line(text, message, error_at_marker):
    error_at_marker(text, message)


def test_error_string_has_file_line_and_message(load_error):
    error = load_error('[[exchange]]\nname = "logs"\nkind = "rtopik"\n')
    assert str(error).startswith("rtroute.toml:3: exchange 'logs': kind must be one of")


# --------------------------------------------------------------------------- divert cycles

CYCLES = [
    (
        "a_to_b_to_a",
        """
        [[exchange]]
        name = "A"
        [[exchange]]
        name = "B"
        [[divert]]
        name = "a-to-b"
        address = "A"
        forwarding_address = "B"
        [[divert]]
        name = "b-to-a"
        address = "B"
        forwarding_address = "A"  # <-
        """,
        ("divert 'b-to-a': forwarding to 'A' closes a cycle A -> B -> A (diverts 'a-to-b', "
        "'b-to-a')"),
    ),
    (
        "self_loop",
        """
        [[exchange]]
        name = "A"
        [[divert]]
        name = "loop"
        address = "A"
        forwarding_address = "B, A"  # <-
        """,
        "divert 'loop': forwarding to 'A' closes a cycle A -> A (diverts 'loop')",
    ),
    (
        "via_wildcard_address",
        """
        [[exchange]]
        name = "orders.eu"
        [[exchange]]
        name = "orders.archive"
        [[divert]]
        name = "archive-all"
        address = "orders.#"
        forwarding_address = "orders.archive"  # <-
        """,
        ("divert 'archive-all': forwarding to 'orders.archive' closes a cycle "
        "orders.archive -> orders.archive"),
    ),
    (
        "three_hops",
        """
        [[exchange]]
        name = "A"
        [[exchange]]
        name = "B"
        [[exchange]]
        name = "C"
        [[divert]]
        name = "ab"
        address = "A"
        forwarding_address = "B"
        [[divert]]
        name = "bc"
        address = "B"
        forwarding_address = "C"
        [[divert]]
        name = "ca"
        address = "C"
        forwarding_address = "A"  # <-
        """,
        "closes a cycle A -> B -> C -> A (diverts 'ab', 'bc', 'ca')",
    ),
]


@pytest.mark.parametrize("text,message", [c[1:] for c in CYCLES], ids=[c[0] for c in CYCLES])
def test_cyclic_divert_graph_is_rejected(text, message, error_at_marker):
    error_at_marker(text, message)


def test_chains_and_anycast_back_to_the_source_are_not_cycles():
    text = textwrap.dedent("""
        [[exchange]]
        name = "A"
        [[exchange]]
        name = "B"
        [[exchange]]
        name = "C"
        [[divert]]
        name = "ab"
        address = "A"
        forwarding_address = "B"
        [[divert]]
        name = "bc"
        address = "B"
        forwarding_address = "C"
        [[divert]]
        name = "c-to-queue-a"
        address = "C"
        forwarding_address = "A"
        routing_type = "ANYCAST"
    """)
    assert [d.name for d in loads(text).diverts] == ["ab", "bc", "c-to-queue-a"]


# ------------------------------------------------------------------------- selector filters


class _FakeSelectorError(ValueError):
    def __init__(self, reason, position):
        super().__init__(f"{reason} (at position {position})")
        self.reason = reason
        self.position = position


def _fake_selector_module():
    def compile_selector(text):
        if ">" in text and text.rstrip().endswith(">"):
            raise _FakeSelectorError("expected an expression after '>'", len(text))
        return object()

    return types.SimpleNamespace(compile=compile_selector, SelectorError=_FakeSelectorError)


@pytest.fixture
def fake_selector(monkeypatch):
    module = _fake_selector_module()
    monkeypatch.setattr(rtroute, "selector", module, raising=False)
    monkeypatch.setitem(sys.modules, "rtroute.selector", module)
    return module


def test_divert_filter_is_checked_with_the_selector_compiler(fake_selector, error_at_marker):
    error_at_marker(
        EX + '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "x"\n'
        'filter = "price >"  # <-\n',
        "divert 'd': filter: invalid selector at position 7: expected an expression after '>'",
    )


def test_shovel_filter_is_checked_with_the_selector_compiler(fake_selector, error_at_marker):
    error_at_marker(
        '[[shovel]]\nname = "s"\nsources = { broker = "amqp://" }\n'
        'destinations = { broker = "amqp://" }\nqueue = "q"\n'
        'filter = { selector = "price >" }  # <-\n',
        "shovel 's': filter.selector: invalid selector at position 7",
    )


def test_filters_load_when_no_selector_compiler_is_importable(monkeypatch):
    monkeypatch.setattr(rtroute, "selector", types.SimpleNamespace(), raising=False)
    monkeypatch.setitem(sys.modules, "rtroute.selector", types.SimpleNamespace())
    config = loads(EX + '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "x"\n'
                   'filter = "price >"\n')
    assert config.diverts[0].filter == "price >"


def test_real_selector_rejects_a_broken_divert_filter(load_error):
    selector = pytest.importorskip("rtroute.selector")
    if not hasattr(selector, "compile"):
        pytest.skip("rtroute.selector.compile is not written yet")
    error = load_error(EX + '[[divert]]\nname = "d"\naddress = "logs"\nforwarding_address = "x"\n'
                       'filter = "price >"\n')
    assert error.line == 7 and "filter: invalid selector at position 7" in error.message


def test_broker_uri_may_list_a_clusters_nodes():
    config = loads(textwrap.dedent('''
        [broker]
        uri = ["amqp://u:p@n1:5672/v", "amqp://u:p@n2:5672/v", "amqp://u:p@n3:5672/v"]
        [[exchange]]
        name = "logs"
    '''))
    assert config.broker.uris == ("amqp://u:p@n1:5672/v", "amqp://u:p@n2:5672/v",
                                  "amqp://u:p@n3:5672/v")
    assert config.broker.uri == "amqp://u:p@n1:5672/v"
    assert config.broker.management_uris == ("http://u:p@n1:15672/", "http://u:p@n2:15672/",
                                             "http://u:p@n3:15672/")

