"""Declarations given as data, including the most recently declared (server-named) queue."""
from __future__ import annotations

import threading

import pika.exceptions
import pytest

from rtroute.amqp import Declaration, declare, declare_async, parse_declarations


def test_defaults_are_the_amqp_ones():
    (exchange, queue) = parse_declarations([
        {"method": "exchange.declare", "exchange": "x"},
        "queue.declare",
    ])
    assert exchange == Declaration("exchange.declare", {
        "exchange": "x", "type": "direct", "passive": False, "durable": False,
        "auto_delete": False, "internal": False, "arguments": {},
    })
    assert queue.fields["queue"] == "" and queue.fields["exclusive"] is False


def test_pair_form_hyphens_erlang_fields_and_argument_triples_are_accepted():
    (declaration,) = parse_declarations([
        ("queue.declare", {"queue": "q", "auto-delete": True, "nowait": False, "ticket": 0,
                           "arguments": [["x-message-ttl", "long", 1000], ["x-max-length", 5]]}),
    ])
    assert declaration.fields["auto_delete"] is True
    assert declaration.fields["arguments"] == {"x-message-ttl": 1000, "x-max-length": 5}


@pytest.mark.parametrize(("items", "message"), [
    (["queue.frobnicate"], "declaration #0: unknown method 'queue.frobnicate'"),
    ([{"method": "queue.bind", "queue": "q"}], "field 'exchange' is required"),
    ([{"method": "queue.declare", "durable": "yes"}], "field 'durable': expected true or false"),
    ([{"method": "queue.declare", "colour": "red"}], "unknown field 'colour'"),
    (["queue.declare", {"method": "queue.bind", "exchange": 5}], "declaration #1"),
    ([42], "expected a method name"),
    ([{"method": "queue.declare", "arguments": "x"}], "expected a table"),
])
def test_malformed_declaration_names_item_and_field(items, message):
    with pytest.raises(ValueError, match="declaration") as info:
        parse_declarations(items)
    assert message in str(info.value)


def test_empty_queue_name_without_a_declared_queue_is_an_error():
    with pytest.raises(ValueError, match="no queue declared"):
        declare(None, [{"method": "queue.bind", "exchange": "x"}])


@pytest.mark.broker
def test_server_named_queue_is_bound_through_the_empty_name(channel, names):
    exchange, target = names.exchange(), names.exchange("e2e")
    last = declare(channel, [
        {"method": "exchange.declare", "exchange": exchange, "type": "topic"},
        {"method": "exchange.declare", "exchange": target, "type": "fanout"},
        {"method": "exchange.bind", "destination": target, "source": exchange,
         "routing_key": "a.#"},
        {"method": "queue.declare", "exclusive": True},
        {"method": "queue.bind", "exchange": target},
    ])
    assert last.startswith("amq.gen-")
    channel.basic_publish(exchange, "a.b", b"via e2e")
    channel.basic_publish(exchange, "z", b"nowhere")
    _method, _props, body = channel.basic_get(last, auto_ack=True)
    assert body == b"via e2e"
    assert channel.basic_get(last, auto_ack=True)[0] is None


@pytest.mark.broker
def test_refused_declaration_closes_the_channel(channel, names):
    exchange = names.exchange()
    channel.exchange_declare(exchange, "direct")
    with pytest.raises(pika.exceptions.ChannelClosedByBroker) as info:
        declare(channel, [{"method": "exchange.declare", "exchange": exchange, "type": "fanout"}])
    assert info.value.reply_code == 406


@pytest.mark.broker
def test_async_declarations_report_the_last_queue_or_the_error(ioloop, names, mgmt):
    exchange = names.exchange()
    runner = ioloop()
    results = {}
    done = threading.Event()

    def run(declarations, label):
        def go():
            channel = runner.connection.channel(
                on_open_callback=lambda ch: declare_async(
                    ch, declarations,
                    on_done=lambda q: (results.__setitem__(label, ("done", q)), done.set()),
                    on_error=lambda e: (results.__setitem__(label, ("error", e)), done.set()),
                )
            )
            return channel

        done.clear()
        runner.call(go)
        assert done.wait(5)
        return results[label]

    kind, queue = run([
        {"method": "exchange.declare", "exchange": exchange, "auto_delete": False},
        {"method": "queue.declare", "exclusive": True},
        {"method": "queue.bind", "exchange": exchange, "routing_key": "k"},
    ], "good")
    assert kind == "done" and queue.startswith("amq.gen-")
    bound = {(b.destination, b.routing_key) for b in mgmt.exchange_bindings(exchange)}
    assert bound == {(queue, "k")}

    kind, error = run([{"method": "exchange.declare", "exchange": exchange, "type": "topic"}],
                      "bad")
    assert kind == "error" and error.reply_code == 406
