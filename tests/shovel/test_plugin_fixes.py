"""Where RabbitMQ's shovel plugin loses or loops messages, and what rtroute's shovel does."""
from __future__ import annotations

import json
import logging
import time
import urllib.request
import uuid

import pika
import pytest

from rtroute.ops.http import OpsServer, prometheus_text
from rtroute.shovel.runner import ShovelRunner
from rtroute.shovel.status import ShovelState

from ..conftest import BROKER_ADDRESS, BROKER_URI, MANAGEMENT_URI, broker_uri_for, wait_for
from .conftest import (
    bodies,
    declare_queue,
    depth,
    publish,
    shovel_config,
    toml_shovel,
    wait_depth,
    wait_state,
)

LOCAL = BROKER_URI


def source_with_dead_letters(names) -> tuple[str, str]:
    """A source queue whose dead-letter exchange ("" to the queue dlq) keeps what is nacked
    without requeue."""
    src, dlq = names.queue("src"), names.queue("dlq")
    declare_queue(LOCAL, dlq)
    declare_queue(LOCAL, src, arguments={"x-dead-letter-exchange": "",
                                         "x-dead-letter-routing-key": dlq})
    return src, dlq


def test_unroutable_messages_go_to_the_source_dead_letter_exchange(names, shovels):
    """rabbitmq-server#16993: the plugin publishes without mandatory, so a message no queue
    takes is confirmed and lost. Here it comes back (mandatory), is counted and nacked to the
    source without requeue."""
    src, dlq = source_with_dead_letters(names)
    nowhere = names.exchange("nowhere")
    worker = shovels.start(toml_shovel(
        "unroutable", LOCAL, LOCAL, f'queue = "{src}"\ndest-exchange = "{nowhere}"\n'
        f'src_management_uri = "{MANAGEMENT_URI}"',
        dst_declarations=f'[{{ method = "exchange.declare", exchange = "{nowhere}" }}]'))
    publish(LOCAL, src, 5)
    wait_depth(LOCAL, dlq, 5)
    assert bodies(LOCAL, dlq) == [0, 1, 2, 3, 4]
    assert depth(LOCAL, src) == 0
    assert (worker.status.counters["returned"], worker.status.counters["dead_lettered"],
            worker.status.counters["moved"]) == (5, 5, 0)


def test_on_unroutable_drop_and_requeue(names, shovels):
    nowhere = names.exchange("nowhere")
    decl = f'[{{ method = "exchange.declare", exchange = "{nowhere}" }}]'
    dropped, requeued = names.queue("drop"), names.queue("requeue")
    declare_queue(LOCAL, dropped)
    declare_queue(LOCAL, requeued)
    drop = shovels.start(toml_shovel("drop", LOCAL, LOCAL, f'queue = "{dropped}"\n'
                                     f'dest-exchange = "{nowhere}"\non_unroutable = "drop"',
                                     dst_declarations=decl))
    keep = shovels.start(toml_shovel("requeue", LOCAL, LOCAL, f'queue = "{requeued}"\n'
                                     f'dest-exchange = "{nowhere}"\non_unroutable = "requeue"',
                                     dst_declarations=decl))
    publish(LOCAL, dropped, 3)
    publish(LOCAL, requeued, 3)
    wait_for(lambda: drop.status.counters["acked"] == 3)
    assert drop.status.counters["returned"] == 3
    assert depth(LOCAL, dropped) == 0
    # requeued after a hold, taken again, returned again...: never lost, never spinning
    wait_for(lambda: keep.status.counters["requeued"] >= 3)
    time.sleep(1.5)
    assert keep.status.counters["requeued"] < 12
    keep.stop()
    keep.join(10)
    assert depth(LOCAL, requeued) == 3


def test_destination_nacks_are_retried_with_back_off_then_dead_lettered(names, shovels):
    """rabbitmq-server#7555: the plugin nacks a destination nack to the source with requeue,
    at once, so a message the destination refuses loops as fast as it can. Here: nack_retries
    republishes with back-off, then (on_refused = "dead_letter") a nack without requeue to the
    source's dead-letter exchange; the default requeues with back-off, see
    test_nothing_vanishes.py."""
    src, dlq = source_with_dead_letters(names)
    full = names.queue("full")
    declare_queue(LOCAL, full, arguments={"x-max-length": 0, "x-overflow": "reject-publish"})
    worker = shovels.start(toml_shovel(
        "nacks", LOCAL, LOCAL, f'queue = "{src}"\ndest-queue = "{full}"\nnack_retries = 3\n'
        'nack_retry_delay = 0.05\non_refused = "dead_letter"\n'
        f'src_management_uri = "{MANAGEMENT_URI}"'))
    publish(LOCAL, src, 2)
    wait_depth(LOCAL, dlq, 2)
    counters = worker.status.counters
    assert (counters["nacked"], counters["retried"], counters["dead_lettered"]) == (8, 6, 2)
    assert depth(LOCAL, src) == 0
    assert sorted(bodies(LOCAL, dlq)) == [0, 1]


def test_a_header_grown_past_the_destination_frame_max_is_refused_not_written(names, shovels):
    """The shovel's own headers (or a source with a larger frame_max) can make a content
    header the destination rejects with FRAME_ERROR, which closes the whole connection and
    brings the message back for ever. It is never written: it is refused (dead-lettered here)
    and the messages behind it move on the same connection."""
    src, dlq = source_with_dead_letters(names)
    dst = names.queue("dst")
    declare_queue(LOCAL, dst)
    worker = shovels.start(toml_shovel(
        "big-header", LOCAL, LOCAL, f'queue = "{src}"\ndest-queue = "{dst}"\n'
        'add_forward_headers = true\non_refused = "dead_letter"\n'
        f'src_management_uri = "{MANAGEMENT_URI}"'))
    wait_state(worker, ShovelState.RUNNING)
    # 27 bytes of header payload besides the value: frame_max - 93 bytes, which the source
    # takes; the x-shovelled table the shovel adds does not fit any more
    padded = pika.BasicProperties(headers={"pad": "x" * (131072 - 120)})
    publish(LOCAL, src, 1, properties=padded)
    publish(LOCAL, src, 1, start=1)
    wait_depth(LOCAL, dlq, 1)
    wait_depth(LOCAL, dst, 1)
    assert bodies(LOCAL, dst) == [1] and bodies(LOCAL, dlq) == [0]
    counters = worker.status.counters
    assert (counters["refused"], counters["dead_lettered"], counters["reconnects"]) == (1, 1, 0)
    assert worker.status.state is ShovelState.RUNNING


def test_a_nacked_message_goes_through_once_the_destination_takes_it_again(names, shovels,
                                                                           mgmt):
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    policy = f"rtroute-test-{uuid.uuid4().hex[:8]}"
    mgmt.request("PUT", f"policies/%2F/{policy}", {
        "pattern": f"^{dst}$", "apply-to": "queues", "priority": 100,
        "definition": {"max-length": 0, "overflow": "reject-publish"}})
    try:
        worker = shovels.start(toml_shovel(
            "retry", LOCAL, LOCAL, f'queue = "{src}"\ndest-queue = "{dst}"\n'
            "nack_retries = 30\nnack_retry_delay = 0.1"))
        publish(LOCAL, src, 1)
        wait_for(lambda: worker.status.counters["nacked"] >= 2)
    finally:
        mgmt.request("DELETE", f"policies/%2F/{policy}")
    wait_depth(LOCAL, dst, 1)
    assert worker.status.counters["dead_lettered"] == 0
    assert worker.status.counters["moved"] == 1


def test_a_durable_queue_keeps_what_src_exchange_receives_while_the_shovel_is_away(
        names, shovels):
    """rabbitmq-server#7248: src-exchange consumes through an exclusive server-named queue
    that dies with the connection, so what is published during an outage is lost (the
    plugin's behaviour, kept as the default: shovel "exclusive"). durable_queue keeps it."""
    src_x = names.exchange("sx")
    kept, lost = names.queue("kept"), names.queue("lost")
    durable = names.queue("durable")
    decl = f'[{{ method = "exchange.declare", exchange = "{src_x}", type = "fanout" }}]'

    def configs():
        return (toml_shovel("durable", LOCAL, LOCAL, f'src-exchange = "{src_x}"\n'
                            f'durable_queue = "{durable}"\ndest-queue = "{kept}"',
                            src_declarations=decl,
                            dst_declarations=f'[{{ method = "queue.declare", queue = "{kept}", '
                                                 'durable = true }]'),
                toml_shovel("exclusive", LOCAL, LOCAL, f'src-exchange = "{src_x}"\n'
                            f'dest-queue = "{lost}"', src_declarations=decl,
                            dst_declarations=f'[{{ method = "queue.declare", queue = "{lost}", '
                                                 'durable = true }]'))

    first = [shovels.start(text) for text in configs()]
    for worker in first:
        wait_state(worker, ShovelState.RUNNING)
    publish(LOCAL, "", 10, exchange=src_x)
    wait_depth(LOCAL, kept, 10)
    wait_depth(LOCAL, lost, 10)
    for worker in first:
        worker.stop()
        worker.join(10)
    publish(LOCAL, "", 10, exchange=src_x, start=10)       # nobody is shovelling now
    second = [shovels.start(text) for text in configs()]
    for worker in second:
        wait_state(worker, ShovelState.RUNNING)
    wait_depth(LOCAL, kept, 20)
    assert bodies(LOCAL, kept) == list(range(20))
    assert bodies(LOCAL, lost) == list(range(10))


def test_a_fractional_reconnect_delay_is_honoured(names, shovels):
    """The plugin treats 0.5 like 0 (it stops); the classic docs allow fractions."""
    src, dst = names.queue("src"), names.queue("dst")
    decl = f'[{{ method = "queue.declare", queue = "{src}", durable = true }}]'
    declare_queue(LOCAL, dst)
    worker = shovels.start(toml_shovel("frac", LOCAL, LOCAL, f'queue = "{src}"\n'
                                       f'dest-queue = "{dst}"\nreconnect_delay = 0.5',
                                       src_declarations=decl))
    wait_state(worker, ShovelState.RUNNING)
    start = len(worker.status.history)
    declare_queue(LOCAL, src)
    from rtroute.amqp import connect_blocking

    connection = connect_blocking(LOCAL)
    connection.channel().queue_delete(src)         # the consumer is cancelled: an error
    connection.close()
    wait_for(lambda: worker.status.counters["reconnects"] == 1, 10)
    wait_state(worker, ShovelState.RUNNING)
    states = [(s.value, t) for s, _r, t in worker.status.history[start:]]
    assert [s for s, _t in states] == ["terminated", "starting", "running"]
    gap = states[1][1] - states[0][1]
    assert 0.4 <= gap < 2.0
    publish(LOCAL, src, 3)
    wait_depth(LOCAL, dst, 3)


def test_reconnect_delay_zero_stops_after_the_first_error(names, shovels):
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    worker = shovels.start(toml_shovel("zero", LOCAL, LOCAL, f'queue = "{src}"\n'
                                       f'dest-queue = "{dst}"\nreconnect_delay = 0'))
    wait_state(worker, ShovelState.RUNNING)
    from rtroute.amqp import connect_blocking

    connection = connect_blocking(LOCAL)
    connection.channel().queue_delete(src)
    connection.close()
    wait_state(worker, ShovelState.TERMINATED)
    assert worker.join(10)
    assert "cancelled the consumer" in worker.status.reason
    assert worker.status.state is ShovelState.TERMINATED
    assert not worker.status.healthy


def test_passwords_never_reach_logs_status_metrics_or_headers(names, mgmt, caplog):
    """rabbitmq-server#2709, #16835: URIs with passwords in status and logs."""
    user, secret = f"rtroute-test-{uuid.uuid4().hex[:6]}", f"pw-{uuid.uuid4().hex}"
    wrong = f"wrong-{uuid.uuid4().hex}"
    mgmt.request("PUT", f"users/{user}", {"password": secret, "tags": ""})
    mgmt.request("PUT", f"permissions/%2F/{user}", {"configure": ".*", "write": ".*",
                                                    "read": ".*"})
    caplog.set_level(logging.DEBUG)
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    good = broker_uri_for(credentials=f"{user}:{secret}", query="heartbeat=30")
    bad = broker_uri_for(credentials=f"{user}:{wrong}")
    runner = ShovelRunner([
        shovel_config(toml_shovel("secret-ok", good, good, f'queue = "{src}"\n'
                                  f'dest-queue = "{dst}"\nadd-forward-headers = true')),
        shovel_config(toml_shovel("secret-bad", bad, good, f'queue = "{src}"\n'
                                  f'dest-queue = "{dst}"')),
    ])
    http = OpsServer("127.0.0.1:0", runner.status).start()
    try:
        runner.start()
        ok, failing = runner.workers
        wait_state(ok, ShovelState.RUNNING)
        wait_for(lambda: failing.status.reason and "authentication" in failing.status.reason)
        publish(LOCAL, src, 1)
        wait_depth(LOCAL, dst, 1)
        with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/status") as response:
            status_text = response.read().decode()
        with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/metrics") as response:
            metrics_text = response.read().decode()
        from .conftest import drain

        ((_m, props, _b),) = drain(LOCAL, dst)
        header_text = json.dumps(props.headers)
    finally:
        runner.stop(2)
        http.stop()
        mgmt.request("DELETE", f"users/{user}")
    logs = "\n".join(r.getMessage() for r in caplog.records)
    assert "secret-bad" in status_text and "authentication failed" in status_text
    assert f"{user}:***@" in status_text
    assert "rtroute_shovel_moved_total" in metrics_text
    assert BROKER_ADDRESS in header_text
    for text in (logs, status_text, metrics_text, header_text,
                 prometheus_text(runner.status())):
        assert secret not in text and wrong not in text


def test_forward_headers_as_the_plugin_writes_them(names, shovels):
    """x-shovelled: a table prepended to the array (static shovels: shovelled-by, shovel-type,
    shovel-name, src-uri, dest-uri); x-shovelled-timestamp in seconds."""
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    uri = broker_uri_for(query="heartbeat=30")
    shovels.start(toml_shovel("fwd", uri, LOCAL, f'queue = "{src}"\ndest-queue = "{dst}"\n'
                              "add-forward-headers = true\ndest-add-timestamp-header = true"),
                  shovelled_by="rabbit@test-cluster")
    earlier = {"shovelled-by": "elsewhere", "shovel-name": "first"}
    import pika

    publish(LOCAL, src, 1, properties=pika.BasicProperties(
        headers={"x-shovelled": [earlier], "keep": "me"}))
    publish(LOCAL, src, 1, start=1)
    wait_depth(LOCAL, dst, 2)
    from .conftest import drain

    first, second = drain(LOCAL, dst)
    table = {"shovelled-by": "rabbit@test-cluster", "shovel-type": "static",
             "shovel-name": "fwd", "src-uri": f"amqp://{BROKER_ADDRESS}/%2F",
             "dest-uri": f"amqp://{BROKER_ADDRESS}/%2F"}
    headers = first[1].headers
    assert headers["x-shovelled"] == [table, earlier]
    assert list(headers["x-shovelled"][0]) == list(table)   # the plugin's key order
    assert headers["keep"] == "me"
    assert abs(headers["x-shovelled-timestamp"] - time.time()) < 30
    assert second[1].headers["x-shovelled"] == [table]


def test_dynamic_shovels_add_vhost_and_endpoints_to_the_forward_header(names, shovels):
    from rtroute.shovel.importers import from_definitions

    src, dst = names.queue("src"), names.queue("dst")
    definitions = {"parameters": [{
        "component": "shovel", "vhost": "/", "name": "dyn", "value": {
            "src-uri": LOCAL, "src-queue": src, "dest-uri": LOCAL, "dest-queue": dst,
            "add-forward-headers": True, "reconnect-delay": 1}}]}
    (config,) = from_definitions(json.dumps(definitions))
    worker = shovels.start(config, shovelled_by="rabbit@test-cluster")
    wait_state(worker, ShovelState.RUNNING)        # it declared both queues (if missing)
    publish(LOCAL, src, 1)
    wait_depth(LOCAL, dst, 1)
    from .conftest import drain

    ((_m, props, _b),) = drain(LOCAL, dst)
    (table,) = props.headers["x-shovelled"]
    assert list(table.items()) == [
        ("shovelled-by", "rabbit@test-cluster"), ("shovel-type", "dynamic"),
        ("shovel-name", "dyn"), ("shovel-vhost", "/"),
        ("src-uri", f"amqp://{BROKER_ADDRESS}/%2F"), ("dest-uri", f"amqp://{BROKER_ADDRESS}/%2F"),
        ("src-queue", src), ("dest-queue", dst)]


@pytest.mark.parametrize("kind", ["drop", "leave"])
def test_filter_by_selector_and_key(kind, names, shovels):
    import pika

    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    worker = shovels.start(toml_shovel(
        f"filter-{kind}", LOCAL, LOCAL,
        f'queue = "{src}"\ndest-queue = "{dst}"\n'
        f'filter = {{ selector = "color = \'red\' AND JMSPriority > 3", key = "orders.#", '
        f'on_mismatch = "{kind}" }}'))
    # matches: red, priority 5, key orders.*; the others fail one condition each
    cases = [("orders.eu", "red", 5), ("orders.us", "blue", 5), ("orders.eu", "red", 1),
             ("stock.eu", "red", 5), ("orders.x.y", "red", 9)]
    from rtroute.amqp import connect_blocking

    exchange = names.exchange("fx")
    connection = connect_blocking(LOCAL)
    channel = connection.channel()
    channel.exchange_declare(exchange, "fanout")
    channel.queue_bind(src, exchange)
    channel.confirm_delivery()
    for i, (key, color, priority) in enumerate(cases):
        channel.basic_publish(exchange, key, str(i).encode(), pika.BasicProperties(
            headers={"color": color}, priority=priority))
    connection.close()
    wait_depth(LOCAL, dst, 2)
    wait_for(lambda: worker.status.counters["filtered"] >= 3)
    time.sleep(0.3)
    assert bodies(LOCAL, dst) == [0, 4]
    if kind == "drop":
        assert depth(LOCAL, src) == 0
    else:
        worker.stop()
        worker.join(10)
        assert sorted(bodies(LOCAL, src)) == [1, 2, 3]


def test_rtopic_key_filter_matches_pattern_routing_keys(names, shovels):
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, dst)
    exchange = names.exchange("rx")
    decl = (f'[{{ method = "exchange.declare", exchange = "{exchange}", type = "fanout" }}, '
            f'{{ method = "queue.declare", queue = "{src}", durable = true }}, '
            f'{{ method = "queue.bind", exchange = "{exchange}" }}]')
    worker = shovels.start(toml_shovel(
        "rtopic-filter", LOCAL, LOCAL, f'queue = "{src}"\ndest-queue = "{dst}"\n'
        'filter = { key = "server1.app1.info", kind = "rtopic" }', src_declarations=decl))
    wait_state(worker, ShovelState.RUNNING)
    for i, key in enumerate(["*.app1.info", "server2.#", "#.info", "server1.app1.info"]):
        publish(LOCAL, key, 1, exchange=exchange, start=i)
    wait_depth(LOCAL, dst, 3)
    time.sleep(0.3)
    assert bodies(LOCAL, dst) == [0, 2, 3]


def test_filter_by_xpath_on_the_body(names, shovels):
    """An Artemis XPATH selector reads the XML body (only such filters decode it)."""
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    worker = shovels.start(toml_shovel(
        "filter-xpath", LOCAL, LOCAL,
        f'queue = "{src}"\ndest-queue = "{dst}"\n'
        """filter = { selector = "XPATH '//order[@region=\\"eu\\"]' AND qty > 1" }"""))
    from rtroute.amqp import connect_blocking

    connection = connect_blocking(LOCAL)
    channel = connection.channel()
    channel.confirm_delivery()
    import pika

    cases = [(b'<order region="eu"/>', 2), (b'<order region="us"/>', 2),
             (b'<order region="eu"/>', 1), (b"not xml", 5)]
    for body, qty in cases:
        channel.basic_publish("", src, body, pika.BasicProperties(headers={"qty": qty}))
    connection.close()
    wait_depth(LOCAL, dst, 1)
    wait_for(lambda: worker.status.counters["filtered"] >= 3)
    from .conftest import drain

    assert [b for _m, _p, b in drain(LOCAL, dst)] == [b'<order region="eu"/>']
