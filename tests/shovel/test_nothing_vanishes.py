"""Issue 13, "nothing vanishes": what the destination keeps refusing stays at the source (or goes
to the source's dead-letter exchange, if it has one), and a start that fails half way ends in
one log line, removes the server-named queues it declared and tries again."""
from __future__ import annotations

import logging
import time
import uuid

import pika
import pytest

from rtroute.config.lines import ConfigError
from rtroute.config.rtroute_toml import loads
from rtroute.shovel.status import ShovelState
from rtroute.shovel.worker import ShovelWorker

from ..conftest import BROKER_URI, MANAGEMENT_URI, wait_for
from .conftest import (
    declare_queue,
    depth,
    drain,
    publish,
    shovel_config,
    toml_shovel,
    wait_depth,
    wait_state,
)

LOCAL = BROKER_URI
DOWN = "amqp://guest:guest@127.0.0.1:5699/%2F"   # nothing listens there


def with_ids(i: int) -> pika.BasicProperties:
    return pika.BasicProperties(message_id=f"m{i}")


def ids(messages) -> list[str]:
    return [props.message_id for _method, props, _body in messages]


def stop(worker) -> None:
    worker.stop()
    assert worker.join(15)


def refusing_queue(names, room: int) -> str:
    """A destination queue that takes ``room`` messages and nacks the rest."""
    queue = names.queue("dst")
    declare_queue(LOCAL, queue, arguments={"x-max-length": room,
                                           "x-overflow": "reject-publish"})
    return queue


# ------------------------------------------------------------------------ refused messages


def test_refused_messages_stay_in_the_source_and_arrive_once_there_is_room(names, shovels):
    src = names.queue("src")
    declare_queue(LOCAL, src)
    dst = refusing_queue(names, 5)
    publish(LOCAL, src, 10, properties=with_ids)
    config = toml_shovel("refused", LOCAL, LOCAL, f'queue = "{src}"\ndest-queue = "{dst}"\n'
                         "nack_retries = 1\nnack_retry_delay = 0.05")

    worker = shovels.start(config)
    wait_depth(LOCAL, dst, 5)
    wait_for(lambda: worker.status.counters["requeued"] >= 5, timeout=15)
    requeued = worker.status.counters["requeued"]
    time.sleep(2)
    # held longer each round: no spinning on what the destination refuses
    assert worker.status.counters["requeued"] - requeued <= 10
    counters = worker.status.counters
    assert counters["refused"] >= 5 and counters["dead_lettered"] == 0
    assert worker.status.state is ShovelState.RUNNING
    stop(worker)
    assert (depth(LOCAL, src), depth(LOCAL, dst)) == (5, 5)

    # a new shovel: refused again while the destination is full, then room is made
    worker = shovels.start(config)
    wait_for(lambda: worker.status.counters["requeued"] >= 5, timeout=15)
    arrived: list = []

    def all_arrived() -> bool:   # consuming makes the room
        arrived.extend(drain(LOCAL, dst, idle=0.2))
        return len(arrived) >= 10

    wait_for(all_arrived, timeout=30)
    stop(worker)
    arrived += drain(LOCAL, dst)
    assert sorted(ids(arrived)) == sorted(f"m{i}" for i in range(10))   # each once
    assert depth(LOCAL, src) == 0


@pytest.mark.parametrize("how", ["argument", "policy"])
def test_refused_messages_go_to_the_source_dead_letter_exchange_with_the_reason(
        names, shovels, mgmt, how):
    src, dlq = names.queue("src"), names.queue("dlq")
    declare_queue(LOCAL, dlq)
    policy = None
    if how == "argument":
        declare_queue(LOCAL, src, arguments={"x-dead-letter-exchange": "",
                                             "x-dead-letter-routing-key": dlq})
    else:
        declare_queue(LOCAL, src)
        policy = f"rtroute-test-{uuid.uuid4().hex[:8]}"
        mgmt.request("PUT", f"policies/%2F/{policy}", {
            "pattern": f"^{src}$", "apply-to": "queues", "priority": 100,
            "definition": {"dead-letter-exchange": "", "dead-letter-routing-key": dlq}})
        # the API shows a queue's policy with its statistics, up to 5 s late
        wait_for(lambda: mgmt.queue(src).get("effective_policy_definition"), timeout=15)
    try:
        dst = refusing_queue(names, 0)
        worker = shovels.start(toml_shovel(
            "refused-dlx", LOCAL, LOCAL, f'queue = "{src}"\ndest-queue = "{dst}"\n'
            'nack_retries = 1\nnack_retry_delay = 0.05\non_refused = "dead_letter"\n'
            f'src_management_uri = "{MANAGEMENT_URI}"'))
        publish(LOCAL, src, 3, properties=with_ids)
        wait_depth(LOCAL, dlq, 3)
        counters = worker.status.counters
        assert (counters["refused"], counters["dead_lettered"], counters["requeued"]) == (3, 3, 0)
        assert depth(LOCAL, src) == 0
        dead = drain(LOCAL, dlq)
        assert sorted(ids(dead)) == ["m0", "m1", "m2"]
        for _method, props, _body in dead:
            (death,) = props.headers["x-death"]
            assert death["reason"] == "rejected" and death["queue"] == src
    finally:
        if policy is not None:
            mgmt.request("DELETE", f"policies/%2F/{policy}")


@pytest.mark.parametrize("management", ["asked", "unreachable"])
def test_dead_letter_mode_requeues_when_the_source_has_no_dead_letter_exchange(
        names, shovels, caplog, management):
    """No dead-letter exchange (or no management API to tell): a nack without requeue would
    drop the message, so it is requeued."""
    caplog.set_level(logging.WARNING, logger="rtroute.shovel")
    src = names.queue("src")
    if management == "asked":
        declare_queue(LOCAL, src)
        api = MANAGEMENT_URI
    else:   # it has one, but the shovel cannot find out
        dlq = names.queue("dlq")
        declare_queue(LOCAL, dlq)
        declare_queue(LOCAL, src, arguments={"x-dead-letter-exchange": "",
                                             "x-dead-letter-routing-key": dlq})
        api = "http://127.0.0.1:1/"
    dst = refusing_queue(names, 0)
    worker = shovels.start(toml_shovel(
        "refused-no-dlx", LOCAL, LOCAL, f'queue = "{src}"\ndest-queue = "{dst}"\n'
        'nack_retries = 0\non_refused = "dead_letter"\n'
        f'src_management_uri = "{api}"'))
    publish(LOCAL, src, 3)
    wait_for(lambda: worker.status.counters["requeued"] >= 3)
    assert worker.status.counters["dead_lettered"] == 0
    stop(worker)
    assert depth(LOCAL, src) == 3
    expected = "has no dead-letter exchange" if management == "asked" \
        else "cannot tell whether source queue"
    assert sum(expected in r.getMessage() for r in caplog.records) == 1


def test_unroutable_messages_are_requeued_when_the_source_has_no_dead_letter_exchange(
        names, shovels):
    """on_unroutable "nack" (the default with on_confirm) dead-letters only where a
    dead-letter exchange takes the message."""
    src = names.queue("src")
    declare_queue(LOCAL, src)
    nowhere = names.exchange("nowhere")
    worker = shovels.start(toml_shovel(
        "unroutable-no-dlx", LOCAL, LOCAL, f'queue = "{src}"\ndest-exchange = "{nowhere}"\n'
        f'src_management_uri = "{MANAGEMENT_URI}"',
        dst_declarations=f'[{{ method = "exchange.declare", exchange = "{nowhere}" }}]'))
    publish(LOCAL, src, 2)
    wait_for(lambda: worker.status.counters["requeued"] >= 2)
    assert worker.status.counters["dead_lettered"] == 0
    stop(worker)
    assert depth(LOCAL, src) == 2


# ------------------------------------------------------------------------------- config


BASE = ('[[shovel]]\nname = "s"\nsources = { broker = "amqp://" }\n'
        'destinations = { broker = "amqp://" }\nqueue = "q"\n')


def test_on_refused_defaults_to_requeue_and_takes_either_spelling():
    (config,) = loads(BASE).shovels
    assert config.on_refused == "requeue" and config.src_management_uri is None
    (config,) = loads(BASE + 'on-refused = "dead-letter"\n'
                      'src-management-uri = "http://10.0.0.1:15673/"').shovels
    assert config.on_refused == "dead_letter"
    assert config.src_management_uri == "http://10.0.0.1:15673/"


@pytest.mark.parametrize(("extra", "message"), [
    ('on_refused = "drop"',
     "rtroute.toml:6: shovel 's': on_refused must be one of requeue, dead_letter, got 'drop'"),
    ('ack_mode = "on_publish"\non_refused = "dead_letter"',
     "rtroute.toml:7: shovel 's': on_refused 'dead_letter' needs ack_mode on_confirm"),
    ('src_management_uri = "amqp://h/"',
     "rtroute.toml:6: shovel 's': src_management_uri must be http(s)://host[:port]/"),
])
def test_on_refused_and_src_management_uri_errors_name_their_line(extra, message):
    with pytest.raises(ConfigError) as caught:
        loads(BASE + extra)
    assert str(caught.value).startswith(message)


# ---------------------------------------------------------------------- failed starts


def failures(worker) -> int:
    return sum(1 for state, reason, _t in worker.status.history
               if state is ShovelState.TERMINATED and reason != "stopped")


def shovel_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records
            if r.name == "rtroute.shovel" and r.levelno >= logging.WARNING]


def assert_no_traceback(caplog, capfd) -> None:
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert not any("WrongStateError" in r.getMessage() for r in caplog.records)
    out, err = capfd.readouterr()
    assert "Traceback" not in out + err


def test_a_destination_failing_during_the_source_declarations_logs_one_line_and_leaves_no_queue(
        names, shovels, mgmt, caplog, capfd):
    """The report: ChannelWrongStateError tracebacks (the source declarations went on on a
    closing channel) and server-named queues left behind by every attempt."""
    caplog.set_level(logging.DEBUG)
    fanout, clash = names.exchange("fan"), names.exchange("clash")
    steps = [f'{{ method = "exchange.declare", exchange = "{fanout}", type = "fanout" }}']
    steps += ['{ method = "queue.declare", queue = "" }',
              f'{{ method = "queue.bind", exchange = "{fanout}" }}'] * 6
    connection = pika.BlockingConnection(pika.URLParameters(LOCAL))
    connection.channel().exchange_declare(clash, "fanout")
    connection.close()
    worker = shovels.start(toml_shovel(
        "half-way", LOCAL, LOCAL, 'queue = ""\nreconnect_delay = 0.2',
        src_declarations=f"[{', '.join(steps)}]",
        dst_declarations=f'[{{ method = "exchange.declare", exchange = "{clash}", '
                         'type = "topic" }]'))
    wait_for(lambda: failures(worker) >= 8, timeout=20)
    stop(worker)
    assert_no_traceback(caplog, capfd)
    lines = shovel_lines(caplog)
    assert len(lines) == failures(worker)
    assert all("during exchange.declare" in r.getMessage()
               and "inequivalent arg 'type'" in r.getMessage()
               and "reconnecting in 0.2 s" in r.getMessage() for r in lines)
    # every server-named queue bound to the exchange was removed again
    wait_for(lambda: mgmt.exchange_bindings(fanout) == [], timeout=10)
    assert worker.leftover_queues == {"source": {}, "destination": {}}


def test_a_refused_source_declaration_unbinds_and_deletes_the_queues_it_declared(
        names, shovels, mgmt, caplog):
    caplog.set_level(logging.INFO, logger="rtroute.shovel")
    fanout, clash = names.exchange("fan"), names.exchange("clash")
    kept = names.queue("kept")
    declare_queue(LOCAL, kept, durable=True)
    connection = pika.BlockingConnection(pika.URLParameters(LOCAL))
    connection.channel().exchange_declare(clash, "fanout")
    connection.close()
    steps = (f'{{ method = "exchange.declare", exchange = "{fanout}", type = "fanout" }}, '
             '{ method = "queue.declare", queue = "" }, '
             f'{{ method = "queue.bind", exchange = "{fanout}" }}, '
             f'{{ method = "queue.declare", queue = "{kept}", durable = true }}, '
             f'{{ method = "queue.bind", queue = "{kept}", exchange = "{fanout}" }}, '
             f'{{ method = "exchange.declare", exchange = "{clash}", type = "topic" }}')
    worker = shovels.start(toml_shovel("refused-declaration", LOCAL, LOCAL,
                                       'queue = ""\nreconnect_delay = 0.3',
                                       src_declarations=f"[{steps}]"))
    wait_for(lambda: failures(worker) >= 3, timeout=10)
    stop(worker)
    deleted = [r.getMessage() for r in caplog.records if "deleted source queue" in r.getMessage()]
    assert len(deleted) >= 3
    assert all("amq.gen-" in line for line in deleted)
    # the user's named durable queue stays, with its binding; no server-named queue does
    bindings = mgmt.exchange_bindings(fanout)
    assert [(b.destination, b.destination_type) for b in bindings] == [(kept, "queue")]
    assert depth(LOCAL, kept) == 0


def test_a_left_over_queue_holding_messages_is_unbound_and_kept(names, shovels, mgmt, caplog):
    """Server-named queues that a failed start could not remove (its connection was gone) are
    removed at the next start; one that holds messages is only unbound: the shovel does not
    drop what is in it."""
    caplog.set_level(logging.INFO, logger="rtroute.shovel")
    src, dst, fanout = names.queue("src"), names.queue("dst"), names.exchange("fan")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    connection = pika.BlockingConnection(pika.URLParameters(LOCAL))
    channel = connection.channel()
    channel.exchange_declare(fanout, "fanout")
    empty = channel.queue_declare("").method.queue
    full = channel.queue_declare("").method.queue
    orphan = channel.queue_declare("").method.queue   # its exchange is gone
    channel.queue_bind(empty, fanout, routing_key="k")
    channel.queue_bind(full, fanout, routing_key="")
    channel.queue_bind(orphan, fanout, routing_key="")
    channel.basic_publish(fanout, "", b"keep me")
    channel.queue_purge(empty)
    channel.queue_purge(orphan)
    connection.close()
    config = toml_shovel("leftovers", LOCAL, LOCAL, f'queue = "{src}"\ndest-queue = "{dst}"')
    worker = ShovelWorker(shovel_config(config))
    worker.leftover_queues["source"].update({
        empty: [(fanout, "k", None)], full: [(fanout, "", None)],
        orphan: [(names.exchange("gone"), "", None), (fanout, "", None)]})
    shovels.workers.append(worker.start())
    wait_for(lambda: worker.leftover_queues["source"] == {})
    wait_state(worker, ShovelState.RUNNING)
    stop(worker)
    assert mgmt.exchange_bindings(fanout) == []
    assert depth(LOCAL, full) == 1
    for queue in (empty, orphan):
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            depth(LOCAL, queue)
    kept = [r.getMessage() for r in caplog.records if "kept source queue" in r.getMessage()]
    assert len(kept) == 1 and full in kept[0] and "holds messages" in kept[0]
    names.made.append((LOCAL, "queue", full))


def test_an_unreachable_destination_is_one_line_per_attempt_every_reconnect_delay(
        names, shovels, caplog, capfd):
    caplog.set_level(logging.DEBUG)
    src = names.queue("src")
    declare_queue(LOCAL, src)
    worker = shovels.start(toml_shovel("down", LOCAL, DOWN, f'queue = "{src}"\n'
                                       "reconnect_delay = 0.5"))
    wait_for(lambda: failures(worker) >= 4, timeout=10)
    stop(worker)
    assert_no_traceback(caplog, capfd)
    lines = shovel_lines(caplog)
    assert len(lines) == failures(worker)
    assert all("could not connect" in r.getMessage() and "Connection refused" in r.getMessage()
               for r in lines)
    history = worker.status.history
    gaps = [later[2] - earlier[2] for earlier, later in zip(history, history[1:])
            if earlier[0] is ShovelState.TERMINATED and later[0] is ShovelState.STARTING]
    assert gaps and min(gaps) >= 0.45
