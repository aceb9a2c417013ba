"""RabbitMQ 4.3's shovel plugin: its new dynamic keys (``src-consumer-name``,
``src-delete-after-duration``, ``internal``, ``internal_owner``), a definitions export of
RabbitMQ 4.3.6 run unchanged, and the columns of its ``rabbitmqctl shovel_status`` (``pending``,
``remaining``, ``remaining_unacked``, ``forwarded``) with real values."""
from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from click.testing import CliRunner

from rtroute.amqp import connect_blocking
from rtroute.config.lines import ConfigError
from rtroute.config.shovel import RefusedShovel
from rtroute.ops.http import OpsServer
from rtroute.shovel.commands import TABLE_COLUMNS, format_table, load_shovels
from rtroute.shovel.commands import shovel as shovel_group
from rtroute.shovel.importers import from_definitions, from_erlang_config
from rtroute.shovel.runner import ShovelRunner
from rtroute.shovel.status import ShovelState
from rtroute.shovel.worker import DELETE_AFTER_DURATION_FLOOR, ShovelWorker

from ..conftest import BROKER_URI, wait_for
from .conftest import declare_queue, depth, drain, publish, wait_depth, wait_state

LOCAL = BROKER_URI
FIXTURE = Path(__file__).parent / "data" / "definitions-rabbitmq-4.3.6.json"
#: The broker the fixture's shovels were defined on (the 4.3.6 node, rabbit43@localhost).
FIXTURE_URI = "amqp://guest:guest@127.0.0.1:5674/%2F"
FIXTURE_QUEUES = ("rtroute.fixture43.orders", "rtroute.fixture43.orders.copy",
                  "rtroute.fixture43.batch", "rtroute.fixture43.batch.out",
                  "rtroute.fixture43.timed.out")
TOKEN = "rabbitmq-4-3-token"
#: What ``rabbitmqctl shovel_status --formatter json`` of RabbitMQ 4.3.6 prints for a running
#: dynamic shovel from a queue to a queue, in its order.
PLUGIN_43_COLUMNS = ("name", "pending", "type", "state", "source", "destination", "vhost",
                     "termination_reason", "destination_protocol", "source_protocol",
                     "last_changed", "source_queue", "destination_queue", "remaining",
                     "remaining_unacked", "forwarded")


def _dynamic(value: dict, name: str = "s") -> dict:
    base = {"src-uri": "amqp://", "src-queue": "q", "dest-uri": "amqp://", "dest-queue": "d"}
    return {"parameters": [{"component": "shovel", "name": name, "vhost": "/",
                            "value": {**base, **value}}]}


# ------------------------------------------------------------------------------ the keys


def test_the_keys_rabbitmq_4_3_added_are_accepted():
    (config,) = from_definitions(_dynamic({
        "src-consumer-name": "my-tag", "src-delete-after-duration": 3600, "internal": True,
        "internal_owner": {"name": "d", "kind": "queue", "virtual_host": "/"}}))
    assert config.consumer_name == "my-tag"
    assert config.src_delete_after_duration == 3600
    assert config.internal is True
    assert config.internal_owner == {"name": "d", "kind": "queue", "virtual_host": "/"}
    (plain,) = from_definitions(_dynamic({"src-consumer-name": ""}))
    assert plain.consumer_name is None and plain.src_delete_after_duration is None


@pytest.mark.parametrize("value,message", [
    (0, "must be a positive integer (seconds), got 0"),
    (-5, "must be a positive integer (seconds), got -5"),
    (1.5, "must be a positive integer (seconds), got 1.5"),
    ("60", "must be a positive integer (seconds), got '60'"),
    (True, "must be a positive integer (seconds), got True"),
    (315_360_001, "is 315360001 seconds, more than the plugin's maximum"),
])
def test_src_delete_after_duration_is_checked_as_the_plugin_checks_it(value, message):
    """As rabbit_shovel_util:validate_delete_after_duration on 4.3.6 (0, -5, 1.5 and a string
    refused; at most 315,360,000 s, ten years)."""
    with pytest.raises(ConfigError) as info:
        from_definitions(_dynamic({"src-delete-after-duration": value}))
    assert f"src-delete-after-duration {message}" in str(info.value)
    (config,) = from_definitions(_dynamic({"src-delete-after-duration": 315_360_000}))
    assert config.src_delete_after_duration == 315_360_000


@pytest.mark.parametrize("value,message", [
    ({"src-consumer-name": 5}, "src-consumer-name must be a string"),
    ({"internal": "yes"}, "internal must be a boolean"),
    ({"internal_owner": {"name": "d", "kind": "topic", "virtual_host": "/"}},
     "must be one of exchange, queue"),
    ({"internal_owner": {"name": "d", "kind": "queue"}}, "virtual_host is required"),
    ({"internal_owner": "d"}, "internal_owner must be a table"),
])
def test_malformed_4_3_keys_fail_clearly(value, message):
    with pytest.raises(ConfigError, match=message):
        from_definitions(_dynamic(value))


def test_unknown_keys_are_still_refused_with_a_suggestion():
    refused: list[RefusedShovel] = []
    shovels = from_definitions(_dynamic({"src-delete-after-duraton": 60}), refused=refused)
    assert shovels == []
    (refusal,) = refused
    assert refusal.reason == ("unknown key 'src-delete-after-duraton' (did you mean "
                              "'src-delete-after-duration'?)")


def test_a_local_protocol_shovel_is_refused_alone():
    """4.3's ``local`` protocol runs inside the broker; the rest of the export still runs."""
    data = _dynamic({"src-protocol": "local", "dest-protocol": "local"}, name="in-broker")
    data["parameters"] += _dynamic({}, name="plain")["parameters"]
    refused: list[RefusedShovel] = []
    (shovel,) = from_definitions(data, refused=refused)
    assert shovel.name == "plain"
    assert [r.name for r in refused] == ["in-broker"]
    assert "local" in refused[0].reason


def test_the_erlang_config_takes_consumer_name_and_delete_after_duration():
    current = """[{rabbitmq_shovel, [{shovels, [{s, [
        {source, [{protocol, amqp091}, {uris, ["amqp://"]}, {queue, <<"q">>},
                  {consumer_name, <<"tag-1">>}, {delete_after_duration, 120}]},
        {destination, [{protocol, amqp091}, {uris, ["amqp://"]}]}]}]}]}]."""
    (config,) = from_erlang_config(current)
    assert (config.consumer_name, config.src_delete_after_duration) == ("tag-1", 120)
    classic = """[{rabbitmq_shovel, [{shovels, [{s, [
        {sources, [{broker, "amqp://"}]}, {destinations, [{broker, "amqp://"}]},
        {queue, <<"q">>}, {delete_after_duration, 90}]}]}]}]."""
    (config,) = from_erlang_config(classic)
    assert config.src_delete_after_duration == 90


def test_a_duration_below_the_floor_is_raised_to_it(caplog):
    """As the plugin: ``src-delete-after-duration`` 1 runs for the floor (60 s), with a
    warning."""
    (config,) = from_definitions(_dynamic({"src-delete-after-duration": 1}))
    worker = ShovelWorker(config)
    delays: list[float] = []
    worker.ioloop.call_later = lambda delay, _callback: delays.append(delay) or object()
    with caplog.at_level(logging.WARNING, "rtroute.shovel"):
        worker.consuming()
        worker.consuming()     # a reconnect does not start the time again
    assert delays == [DELETE_AFTER_DURATION_FLOOR] == [60]
    assert "adjusting to the minimum allowed 60 seconds" in caplog.text
    worker.ioloop.close()


# ------------------------------------------------------------------------ status columns


def test_status_has_the_columns_of_rabbitmq_4_3():
    (config,) = from_definitions(_dynamic({}))
    (limited,) = from_definitions(_dynamic({"src-delete-after": 7}, name="limited"))
    (measured,) = from_definitions(_dynamic({"src-delete-after": "queue-length"}, name="m"))
    rows = {}
    for cfg in (config, limited, measured):
        worker = ShovelWorker(cfg)
        rows[cfg.name] = worker.status.snapshot()
        worker.ioloop.close()
    row = rows["s"]
    assert set(PLUGIN_43_COLUMNS) <= set(row)
    assert (row["pending"], row["remaining"], row["remaining_unacked"], row["forwarded"]) \
        == (0, "unlimited", "unlimited", 0)
    assert (rows["limited"]["remaining"], rows["limited"]["remaining_unacked"]) == (7, 7)
    assert rows["m"]["remaining"] is None     # not measured yet (the plugin shows nothing)
    # the earlier columns keep their places; the 4.3 ones follow
    assert TABLE_COLUMNS[:11] == ("name", "vhost", "type", "state", "source_protocol",
                                  "source", "destination_protocol", "destination",
                                  "termination_reason", "last_changed", "moved")
    assert set(PLUGIN_43_COLUMNS) <= set(TABLE_COLUMNS)
    header, line = format_table([row]).splitlines()
    assert header.split() == list(TABLE_COLUMNS)
    assert line.split()[-4:] == ["d", "unlimited", "unlimited", "0"]


# ----------------------------------------------------------------------------- on a broker


def _rows(port: int) -> dict[str, dict]:
    result = CliRunner().invoke(shovel_group, ["status", "--json", "--http", f"127.0.0.1:{port}",
                                               "--token", TOKEN])
    assert result.exit_code == 0, result.output
    return {row["name"]: row for row in json.loads(result.output)["shovels"]}


def test_a_rabbitmq_4_3_6_definitions_export_runs_unchanged(broker_uri, mgmt, names, tmp_path):
    """Three dynamic shovels made with rabbitmqctl set_parameter on RabbitMQ 4.3.6 (current
    keys, 4.3's src-consumer-name, src-delete-after-duration, internal and internal_owner
    included) and exported with GET /api/definitions (trimmed to those shovels' entries): the
    file runs as it is. On another broker only the URI is substituted (in a copy)."""
    text = FIXTURE.read_text()
    if broker_uri != FIXTURE_URI:
        text = text.replace(FIXTURE_URI, broker_uri)
    path = tmp_path / "definitions.json"
    path.write_text(text)
    for queue in FIXTURE_QUEUES:
        names.made.append((LOCAL, "queue", queue))
    declare_queue(LOCAL, "rtroute.fixture43.orders")       # src-predeclared
    declare_queue(LOCAL, "rtroute.fixture43.orders.copy")
    connection = connect_blocking(LOCAL)
    connection.channel().queue_bind("rtroute.fixture43.orders.copy", "amq.direct",
                                    "rtroute.fixture43.orders.out")
    connection.close()

    refused: list[RefusedShovel] = []
    shovels, _http = load_shovels(definitions=(str(path),), refused=refused)
    assert refused == []
    by_name = {s.name: s for s in shovels}
    assert sorted(by_name) == ["rtroute-fixture43-batch", "rtroute-fixture43-orders",
                               "rtroute-fixture43-timed"]
    assert by_name["rtroute-fixture43-timed"].src_delete_after_duration == 3600
    runner = ShovelRunner(shovels)
    http = OpsServer("127.0.0.1:0", runner.status, token=TOKEN,
                     routes=runner.http_routes()).start()
    try:
        runner.start()
        for worker in runner.workers:
            wait_state(worker, ShovelState.RUNNING, 20)

        publish(LOCAL, "rtroute.fixture43.orders", 5)
        publish(LOCAL, "rtroute.fixture43.a.b", 4, exchange="amq.topic")
        publish(LOCAL, "rtroute.fixture43.batch", 5)
        wait_depth(LOCAL, "rtroute.fixture43.orders.copy", 5)
        wait_depth(LOCAL, "rtroute.fixture43.timed.out", 4)
        wait_depth(LOCAL, "rtroute.fixture43.batch.out", 3)
        batch = next(w for w in runner.workers if w.config.name == "rtroute-fixture43-batch")
        wait_for(lambda: batch.status.completed, 15)
        assert depth(LOCAL, "rtroute.fixture43.batch") == 2   # src-delete-after 3
        assert depth(LOCAL, "rtroute.fixture43.orders") == 0

        for _method, props, _body in drain(LOCAL, "rtroute.fixture43.orders.copy"):
            assert (props.delivery_mode, props.app_id) == (2, "shovelled43")
            (forward,) = props.headers["x-shovelled"]
            assert (forward["shovel-name"], forward["dest-exchange"]) \
                == ("rtroute-fixture43-orders", "amq.direct")
        for _method, props, _body in drain(LOCAL, "rtroute.fixture43.batch.out"):
            assert isinstance(props.headers["x-shovelled-timestamp"], int)
        for _method, props, _body in drain(LOCAL, "rtroute.fixture43.timed.out"):
            assert "x-shovelled" not in (props.headers or {})

        # src-consumer-name is the consumer tag, src-consumer-args its arguments
        def consumers():   # the management API's statistics lag a few seconds
            tags = {c["consumer_tag"]: c for c in mgmt.request("GET", "consumers")}
            wanted = ("rtroute-fixture43-orders", "rtroute-fixture43-timed")
            return tags if all(t in tags for t in wanted) else None

        tags = wait_for(consumers, 30)
        assert tags["rtroute-fixture43-orders"]["queue"]["name"] == "rtroute.fixture43.orders"
        assert tags["rtroute-fixture43-orders"]["arguments"] == {"x-priority": 5}

        rows = _rows(http.port)
        orders, timed, done = (rows[f"rtroute-fixture43-{n}"] for n in ("orders", "timed",
                                                                          "batch"))
        assert set(PLUGIN_43_COLUMNS) - {"destination_queue"} <= set(orders)
        assert (orders["pending"], orders["remaining"], orders["remaining_unacked"],
                orders["forwarded"]) == (0, "unlimited", "unlimited", 5)
        assert (orders["destination_exchange"], orders["destination_exchange_key"]) \
            == ("amq.direct", "rtroute.fixture43.orders.out")
        assert (timed["forwarded"], timed["internal"], timed["internal_owner"]["kind"]) \
            == (4, True, "queue")
        assert (done["state"], done["remaining"], done["remaining_unacked"],
                done["forwarded"]) == ("terminated", 0, 0, 3)
    finally:
        runner.stop(2)
        http.stop()


def test_remaining_counts_down_to_src_delete_after(names):
    """``remaining`` and ``remaining_unacked`` count the messages still to move before
    ``src-delete-after`` ends the shovel; ``forwarded`` the ones moved."""
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    (config,) = from_definitions({"parameters": [{
        "component": "shovel", "name": "countdown", "vhost": "/",
        "value": {"src-uri": LOCAL, "src-queue": src, "dest-uri": LOCAL, "dest-queue": dst,
                  "src-delete-after": 10}}]})
    runner = ShovelRunner([config]).start()
    try:
        (worker,) = runner.workers
        wait_state(worker, ShovelState.RUNNING, 20)
        publish(LOCAL, src, 4)
        wait_depth(LOCAL, dst, 4)

        def counted():
            row = runner.registry.snapshot()[0]
            return row if row["forwarded"] == 4 and row["remaining"] == 6 else None

        row = wait_for(counted, 10)
        assert (row["remaining_unacked"], row["pending"]) == (6, 0)
    finally:
        runner.stop(2)


def test_src_delete_after_duration_ends_the_shovel(names):
    """After ``src-delete-after-duration`` seconds (the floor lowered to 1 s for the test)
    the shovel stops, settles what it holds and shows as completed; it moved what came
    before."""
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    (config,) = from_definitions({"parameters": [{
        "component": "shovel", "name": "timed", "vhost": "/",
        "value": {"src-uri": LOCAL, "src-queue": src, "dest-uri": LOCAL, "dest-queue": dst,
                  "src-delete-after-duration": 2, "src-consumer-name": "timed-tag"}}]})
    runner = ShovelRunner([config], delete_after_duration_floor=1).start()
    try:
        (worker,) = runner.workers
        wait_state(worker, ShovelState.RUNNING, 20)
        publish(LOCAL, src, 3)
        wait_depth(LOCAL, dst, 3)
        wait_for(lambda: runner.finished, 15)
        (row,) = runner.registry.snapshot()
        assert (row["state"], row["completed"]) == ("terminated", True)
        assert row["termination_reason"] == "src-delete-after-duration reached: 2 s"
        assert runner.registry.healthy
        publish(LOCAL, src, 2)
        assert depth(LOCAL, src) == 2 and depth(LOCAL, dst) == 3   # nothing taken any more
    finally:
        runner.stop(2)
