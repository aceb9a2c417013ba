"""Exchange semantics and sender-selected distribution (CC/BCC) as RabbitMQ does them."""
import pytest

from rtroute import DirectExchange, FanoutExchange, RTopicExchange, TopicExchange
from rtroute.routing import PreconditionFailed, make_exchange
from rtroute.sidecar.demo import PLUGIN_QUEUES, PLUGIN_README_TABLE

PLUGIN = PLUGIN_QUEUES  # the rtopic plugin README's queues A-F and their keys


@pytest.fixture
def plugin_exchange():
    ex = RTopicExchange("rtopic")
    for queue, key in PLUGIN.items():
        ex.bind(queue, key)
    return ex


@pytest.mark.parametrize("key,expected", PLUGIN_README_TABLE)
def test_plugin_readme_scenario(plugin_exchange, key, expected):
    assert plugin_exchange.route(key).destinations == frozenset(expected)


def test_cc_and_bcc_add_routing_keys_and_bcc_is_removed_before_delivery(plugin_exchange):
    r = plugin_exchange.route(
        "server1.app1.mod1.info",
        headers={"CC": ["server2.#"], "BCC": ["#.error"], "other": 1},
    )
    assert r.destinations == frozenset("ABDF")
    assert r.headers == {"CC": ["server2.#"], "other": 1}


def test_a_destination_matched_several_ways_gets_one_copy():
    ex = RTopicExchange()
    ex.bind("q", "a.b")
    ex.bind("q", "a.c")
    ex.bind("q", "a.b")  # duplicate binding
    r = ex.route("a.*", headers={"CC": ["a.b", "#"], "BCC": ["a.c"]})
    assert r.destinations == frozenset({"q"})
    assert r.binding_keys == frozenset({"a.b", "a.c"})
    assert ex.bindings() == [("q", "a.b"), ("q", "a.c")]


@pytest.mark.parametrize(
    "header,value,type_name",
    [
        ("CC", "k1", "longstr"),
        ("CC", None, "void"),
        ("BCC", 5, "signedint"),
        ("BCC", 2**40, "long"),
        ("CC", {"a": 1}, "table"),
        ("CC", b"k1", "binary"),
        ("BCC", 1.5, "double"),
        ("CC", True, "bool"),
    ],
)
def test_cc_bcc_that_is_not_an_array_fails_like_rabbitmq(header, value, type_name):
    # RabbitMQ 3.10.8 closes the channel: 406 PRECONDITION_FAILED - invalid message:
    # {unacceptable_type_in_header,"CC",longstr} (pinned against the broker in
    # test_rabbitmq_parity.py).
    ex = DirectExchange()
    ex.bind("q", "k1")
    with pytest.raises(PreconditionFailed) as err:
        ex.route("x", headers={header: value})
    assert str(err.value) == (
        f'invalid message: {{unacceptable_type_in_header,"{header}",{type_name}}}')
    assert err.value.reply_code == 406


def test_non_string_elements_of_cc_are_ignored_for_routing():
    ex = DirectExchange()
    ex.bind("q1", "k1")
    ex.bind("q2", "k2")
    r = ex.route("none", headers={"CC": ["k1", b"k2", 5, None, ["k2"]]})
    assert r.destinations == frozenset({"q1"})
    assert r.headers == {"CC": ["k1", b"k2", 5, None, ["k2"]]}


def test_topic_exchange_semantics_with_cc():
    ex = TopicExchange()
    ex.bind("all", "#")
    ex.bind("errors", "*.error")
    ex.bind("app1", "app1.#")
    assert ex.route("app1.error").destinations == frozenset({"all", "errors", "app1"})
    assert ex.route("").destinations == frozenset({"all"})
    r = ex.route("x.info", headers={"BCC": ["app1"], "CC": []})
    assert r.destinations == frozenset({"all", "app1"}) and r.headers == {"CC": []}


def test_direct_exchange_semantics():
    ex = DirectExchange()
    ex.bind("q", "a.*")
    ex.bind("r", "a.b")
    assert ex.route("a.b").destinations == frozenset({"r"})
    assert ex.route("a.*").destinations == frozenset({"q"})
    assert ex.route("z", headers={"CC": ["a.b", "a.*"]}).destinations == frozenset({"q", "r"})


def test_fanout_ignores_keys_but_still_strips_bcc():
    ex = FanoutExchange()
    ex.bind("q1")
    ex.bind("q2", "anything")
    r = ex.route("k", headers={"BCC": ["x"]})
    assert r.destinations == frozenset({"q1", "q2"}) and r.headers == {}


def test_unbind_and_deleted_destination():
    ex = RTopicExchange()
    ex.bind("q", "a.b")
    ex.bind("q", "a.c")
    ex.bind("r", "a.b")
    assert ex.unbind("r", "a.b") is True
    assert ex.unbind("r", "a.b") is False
    assert ex.route("a.b").destinations == frozenset({"q"})
    assert ex.unbind_destination("q") == 2
    assert ex.route("#").destinations == frozenset()
    assert ex.bindings() == []


def test_unroutable_is_an_empty_result():
    r = RTopicExchange().route("a.b", headers=None)
    assert r.destinations == frozenset() and r.headers == {}


def test_route_many_matches_route():
    ex = RTopicExchange()
    for q, k in PLUGIN.items():
        ex.bind(q, k)
    publishes = [("#.info", None), ("x", {"CC": ["server2.#"]}), ("*.*", {"BCC": ["#"]})]
    assert ex.route_many(publishes) == [ex.route(k, h) for k, h in publishes]


@pytest.mark.parametrize("bad", [None, 3, b"\xff"])
def test_bad_routing_keys_raise_clear_errors(plugin_exchange, bad):
    with pytest.raises((TypeError, ValueError)):
        plugin_exchange.route(bad)


def test_over_long_routing_key_and_binding_key_are_rejected(plugin_exchange):
    with pytest.raises(ValueError, match="255"):
        plugin_exchange.route("a" * 256)
    with pytest.raises(ValueError, match="255"):
        plugin_exchange.bind("q", "a" * 256)


def test_make_exchange_knows_each_kind():
    assert isinstance(make_exchange("rtopic"), RTopicExchange)
    assert isinstance(make_exchange("fanout"), FanoutExchange)
    with pytest.raises(ValueError, match="unknown exchange kind"):
        make_exchange("x-rtopic2")
