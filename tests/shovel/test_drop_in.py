"""Drop-in compatibility with the shovel plugin (issue #19): a definitions export of RabbitMQ
4.0.5 runs unchanged, the plugin's status columns, metrics and connection names, delete and
restart through the ops endpoint, src-delete-after 0, predeclared queues, consumer arguments,
zero shovels, and size limits checked before a file is read."""
from __future__ import annotations

import json
import re
import threading
import urllib.request
from pathlib import Path

import pika
import pytest
from click.testing import CliRunner

from rtroute.amqp import connect_blocking
from rtroute.config.lines import ConfigError
from rtroute.config.shovel import RefusedShovel
from rtroute.ops.http import OpsServer
from rtroute.shovel.commands import load_shovels
from rtroute.shovel.commands import shovel as shovel_group
from rtroute.shovel.importers import from_definitions
from rtroute.shovel.runner import ShovelRunner
from rtroute.shovel.status import ShovelState, StatusRegistry, scrub, uri_without_credentials

from ..conftest import BROKER_URI, wait_for
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
from .test_process import ShovelProcess

LOCAL = BROKER_URI
FIXTURE = Path(__file__).parent / "data" / "definitions-rabbitmq-4.0.5.json"
#: The broker the fixture's shovels were defined on (the 4.0.5 node of scripts/start-rabbitmq4.sh).
FIXTURE_URI = "amqp://guest:guest@127.0.0.1:5673/%2F"
FIXTURE_QUEUES = ("rtroute.fixture.orders", "rtroute.fixture.orders.copy",
                  "rtroute.fixture.batch", "rtroute.fixture.audit.out")
TOKEN = "drop-in-token"


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics") as response:
        return response.read().decode()


def _cli(port: int, *args: str) -> str:
    result = CliRunner().invoke(shovel_group, [*args, "--http", f"127.0.0.1:{port}",
                                               "--token", TOKEN])
    assert result.exit_code == 0, result.output
    return result.output


def _rows(port: int) -> dict[str, dict]:
    data = json.loads(_cli(port, "status", "--json"))
    return {row["name"]: row for row in data["shovels"]}


def test_a_rabbitmq_4_0_5_definitions_export_runs_unchanged(broker_uri, mgmt, names, tmp_path):
    """Three dynamic shovels made with rabbitmqctl set_parameter on RabbitMQ 4.0.5 (current
    keys: src-predeclared, dest-predeclared, src-consumer-args, dest-add-forward-headers,
    dest-add-timestamp-header, dest-publish-properties, publish-properties [], list-valued
    src-uri, src-delete-after, src-prefetch-count) and exported: the file runs as it is. On
    another broker than that node only the URI is substituted (in a copy, not the fixture)."""
    text = FIXTURE.read_text()
    if broker_uri != FIXTURE_URI:
        text = text.replace(FIXTURE_URI, broker_uri)
    path = tmp_path / "definitions.json"
    path.write_text(text)
    for queue in FIXTURE_QUEUES:
        names.made.append((LOCAL, "queue", queue))
    # the two predeclared queues must exist (as on the node they were exported from)
    declare_queue(LOCAL, "rtroute.fixture.orders")
    declare_queue(LOCAL, "rtroute.fixture.audit.out")
    topic_out = names.queue("topic-out")
    declare_queue(LOCAL, topic_out)
    connection = connect_blocking(LOCAL)
    connection.channel().queue_bind(topic_out, "amq.direct", "rtroute.fixture.topic.out")
    connection.close()

    refused: list[RefusedShovel] = []
    shovels, _http = load_shovels(definitions=(str(path),), refused=refused)
    assert refused == []
    assert sorted(s.name for s in shovels) == ["rtroute-fixture-batch",
                                               "rtroute-fixture-orders",
                                               "rtroute-fixture-topic"]
    runner = ShovelRunner(shovels)
    http = OpsServer("127.0.0.1:0", runner.status, token=TOKEN,
                     routes=runner.http_routes()).start()
    try:
        runner.start()
        for worker in runner.workers:
            wait_state(worker, ShovelState.RUNNING, 20)

        publish(LOCAL, "rtroute.fixture.orders", 5)
        publish(LOCAL, "rtroute.fixture.a.b", 4, exchange="amq.topic")
        publish(LOCAL, "rtroute.fixture.batch", 5)
        wait_depth(LOCAL, "rtroute.fixture.orders.copy", 5)
        wait_depth(LOCAL, topic_out, 4)
        wait_depth(LOCAL, "rtroute.fixture.audit.out", 3)
        batch = next(w for w in runner.workers if w.config.name == "rtroute-fixture-batch")
        wait_for(lambda: batch.status.completed, 15)
        assert depth(LOCAL, "rtroute.fixture.batch") == 2   # src-delete-after 3
        assert depth(LOCAL, "rtroute.fixture.orders") == 0

        copied = drain(LOCAL, "rtroute.fixture.orders.copy")
        assert len(copied) == 5
        for _method, props, _body in copied:
            assert (props.delivery_mode, props.app_id) == (2, "shovelled")
            (forward,) = props.headers["x-shovelled"]
            assert (forward["shovel-type"], forward["shovel-name"], forward["shovel-vhost"]) \
                == ("dynamic", "rtroute-fixture-orders", "/")
            assert isinstance(props.headers["x-shovelled-timestamp"], int)
        for _method, props, _body in drain(LOCAL, "rtroute.fixture.audit.out"):
            assert "x-shovelled-timestamp" in props.headers

        # src-consumer-args reached basic.consume; connections are named as the plugin's
        def orders_consumer():   # the management API's statistics lag a few seconds
            return [c for c in mgmt.request("GET", "consumers")
                    if c["queue"]["name"] == "rtroute.fixture.orders"]

        (orders,) = wait_for(orders_consumer, 30)
        assert orders["arguments"] == {"x-priority": 5}

        def named():
            return [c for c in mgmt.connections()
                    if (c.get("client_properties") or {}).get("connection_name")
                    == "Shovel rtroute-fixture-orders"]

        wait_for(lambda: len(named()) == 2, 30)   # source and destination

        rows = _rows(http.port)
        orders_row = rows["rtroute-fixture-orders"]
        assert (orders_row["type"], orders_row["vhost"], orders_row["state"]) \
            == ("dynamic", "/", "running")
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", orders_row["last_changed"])
        assert "guest" not in orders_row["source_uri"] + orders_row["destination"]
        assert orders_row["source_uri"] == re.sub(r"//[^@]*@", "//", broker_uri)
        assert (orders_row["source_queue"], orders_row["destination_queue"]) \
            == ("rtroute.fixture.orders", "rtroute.fixture.orders.copy")
        assert rows["rtroute-fixture-topic"]["source_exchange_key"] == "rtroute.fixture.#"
        metrics = _metrics(http.port)
        assert 'rabbitmq_shovel_dynamic{status="running"} 2' in metrics
        assert 'rabbitmq_shovel_dynamic{status="terminated"} 1' in metrics
        table = _cli(http.port, "status").splitlines()
        assert table[0].split() == ["name", "vhost", "type", "state", "source_protocol",
                                    "source", "destination_protocol", "destination",
                                    "termination_reason", "last_changed", "moved",
                                    # the columns RabbitMQ 4.3 added
                                    "pending", "source_queue", "destination_queue",
                                    "remaining", "remaining_unacked", "forwarded"]

        # restart and delete through the ops endpoint, as rabbitmqctl does in the broker
        _cli(http.port, "restart", "rtroute-fixture-orders", "--vhost", "/")
        orders_worker = next(w for w in runner.workers
                             if w.config.name == "rtroute-fixture-orders")
        wait_state(orders_worker, ShovelState.RUNNING, 20)
        publish(LOCAL, "rtroute.fixture.orders", 2)
        wait_depth(LOCAL, "rtroute.fixture.orders.copy", 2)
        _cli(http.port, "delete", "rtroute-fixture-topic", "-p", "/")
        assert "rtroute-fixture-topic" not in _rows(http.port)
        assert len(runner.workers) == 2
    finally:
        runner.stop(2)
        http.stop()


def test_delete_stops_gracefully_and_loses_nothing(names):
    """A shovel deleted while it moves messages settles what it holds: every message is in the
    source or in the destination, once."""
    total = 3000
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    publish(LOCAL, src, total)
    config = shovel_config(toml_shovel("deleted", LOCAL, LOCAL,
                                       f'queue = "{src}"\ndest-queue = "{dst}"\n'
                                       'prefetch_count = 50'))
    runner = ShovelRunner([config])
    http = OpsServer("127.0.0.1:0", runner.status, routes=runner.http_routes(),
                     allow_unauthenticated_changes=True).start()
    try:
        runner.start()
        wait_for(lambda: depth(LOCAL, dst) > 0, 15)
        request = urllib.request.Request(
            f"http://127.0.0.1:{http.port}/shovels/%2F/deleted", method="DELETE")
        with urllib.request.urlopen(request, timeout=30) as response:
            answer = json.loads(response.read())
        assert answer["deleted"]["name"] == "deleted"
        assert runner.workers == [] and runner.registry.snapshot() == []
        assert runner.finished
        wait_for(lambda: depth(LOCAL, src) + depth(LOCAL, dst) == total, 15)
        assert sorted(int(b) for _m, _p, b in drain(LOCAL, src) + drain(LOCAL, dst)) \
            == list(range(total))
        missing = urllib.request.Request(
            f"http://127.0.0.1:{http.port}/shovels/%2F/deleted/restart", method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(missing, timeout=10)
        assert info.value.code == 404
    finally:
        runner.stop(2)
        http.stop()


def test_changes_over_http_need_the_token():
    runner = ShovelRunner([])
    http = OpsServer("127.0.0.1:0", runner.status, routes=runner.http_routes()).start()
    try:
        result = CliRunner().invoke(shovel_group, ["delete", "x", "--http",
                                                   f"127.0.0.1:{http.port}"])
        assert result.exit_code != 0 and "HTTP 403" in result.output
    finally:
        http.stop()


def test_src_delete_after_0_still_declares_both_sides(names):
    """As the plugin: the destination's and the source's declarations run, then the shovel
    ends without taking a message."""
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    publish(LOCAL, src, 3)
    (config,) = from_definitions({"parameters": [{
        "component": "shovel", "name": "zero", "vhost": "/",
        "value": {"src-uri": LOCAL, "src-queue": src, "dest-uri": LOCAL, "dest-queue": dst,
                  "src-delete-after": 0}}]})
    runner = ShovelRunner([config]).start()
    try:
        wait_for(lambda: runner.finished, 20)
        (status,) = runner.registry.all()
        assert status.completed and status.state is ShovelState.TERMINATED
        assert depth(LOCAL, dst) == 0      # declared (depth raises for a missing queue)
        assert depth(LOCAL, src) == 3
    finally:
        runner.stop(2)


def test_src_predeclared_fails_clearly_when_the_queue_is_missing(names):
    src, dst = names.queue("src"), names.queue("dst")
    (config,) = from_definitions({"parameters": [{
        "component": "shovel", "name": "pre", "vhost": "/",
        "value": {"src-uri": LOCAL, "src-queue": src, "src-predeclared": True,
                  "dest-uri": LOCAL, "dest-queue": dst, "reconnect-delay": 0}}]})
    runner = ShovelRunner([config]).start()
    try:
        wait_for(lambda: runner.finished, 20)
        (status,) = runner.registry.all()
        assert status.state is ShovelState.TERMINATED
        assert "NOT_FOUND" in status.reason and src in status.reason
        connection = connect_blocking(LOCAL)
        with pytest.raises(pika.exceptions.ChannelClosedByBroker):
            connection.channel().queue_declare(src, passive=True)   # not created
        connection.close()
    finally:
        runner.stop(2)


def test_zero_shovels_run_with_an_empty_status(tmp_path):
    path = tmp_path / "definitions.json"
    path.write_text(json.dumps({"rabbit_version": "4.0.5", "parameters": []}))
    process = ShovelProcess(["--definitions", str(path)], tmp_path / "run.log")
    try:
        status = wait_for(process.status, 20)
        assert status["shovels"] == [] and status["healthy"] is True
        assert process.terminate() == 0
    finally:
        if process.proc.poll() is None:
            process.kill()


def test_refused_shovels_show_in_status_and_metrics():
    refusal = RefusedShovel("amqp10-shovel", "/", "src-protocol amqp10 is not supported")
    runner = ShovelRunner([], refused=[refusal])
    (row,) = runner.status()["shovels"]
    assert (row["name"], row["type"], row["state"]) == ("amqp10-shovel", "dynamic", "terminated")
    assert row["termination_reason"] == refusal.reason
    samples = runner.registry.metrics()["rabbitmq_shovel_dynamic"]["samples"]
    assert samples == [({"status": "terminated"}, 1)]


def test_static_shovels_are_counted_as_the_plugin_counts_them():
    registry = StatusRegistry()
    for i, state in enumerate((ShovelState.RUNNING, ShovelState.BLOCKED, ShovelState.STARTING)):
        status = registry.register(shovel_config(toml_shovel(f"s{i}", "amqp://", "amqp://",
                                                             'queue = "q"')))
        status.set_state(state)
    metrics = registry.metrics()
    assert metrics["rabbitmq_shovel_static"]["samples"] == [({"status": "running"}, 2),
                                                            ({"status": "starting"}, 1)]
    assert metrics["rabbitmq_shovel_dynamic"]["samples"] == []
    assert len(metrics["rtroute_shovel_state"]["samples"]) == 3 * len(ShovelState)


@pytest.mark.parametrize("uri,shown", [
    ("amqp://user:secret/v", "amqp:///v"),
    ("amqp://user:secret@host:5672/v?password=x", "amqp://host:5672/v"),
    ("amqps://a/b:secret@host/v", "amqps://host/v"),
    ("amqp://[::1]:5673/%2F", "amqp://[::1]:5673/%2F"),
    ("amqp://host", "amqp://host"),
])
def test_uris_are_shown_without_credentials(uri, shown):
    assert uri_without_credentials(uri) == shown
    assert "secret" not in scrub(f"failed: {uri} said no")


def test_credentials_are_scrubbed_even_without_an_at_sign():
    config = shovel_config(toml_shovel("s", "amqp://u:p4ss@h1/v", "amqp://h2", 'queue = "q"'))
    registry = StatusRegistry()
    status = registry.register(config)
    status.set_state(ShovelState.TERMINATED, "connect to amqp://u:p4ss/ failed: p4ss")
    assert "p4ss" not in status.reason
    assert scrub("amqp://user:hunter2/ and amqp://127.0.0.1:5672/") \
        == "amqp://user:***/ and amqp://127.0.0.1:5672/"


def test_a_huge_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    huge = tmp_path / "definitions.json"
    with open(huge, "wb") as handle:
        handle.truncate(17 * 1024 * 1024)    # sparse: no 17 MiB written
    big_erlang = tmp_path / "advanced.config"
    with open(big_erlang, "wb") as handle:
        handle.truncate(5 * 1024 * 1024)
    reads: list[int] = []
    real_open = open

    def spying_open(*args, **kwargs):
        handle = real_open(*args, **kwargs)
        original = handle.read

        def read(*a):
            reads.append(1)
            return original(*a)

        handle.read = read
        return handle

    monkeypatch.setattr("rtroute.shovel.commands.open", spying_open, raising=False)
    with pytest.raises(ConfigError, match="larger than 16 MiB"):
        load_shovels(definitions=(str(huge),))
    with pytest.raises(ConfigError, match="larger than 4 MiB"):
        load_shovels(erlang_configs=(str(big_erlang),))
    assert reads == []


def test_runner_changes_are_safe_from_several_threads(names):
    """Restart and delete from two threads at once: each answers, the registry stays whole."""
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    config = shovel_config(toml_shovel("twice", LOCAL, LOCAL,
                                       f'queue = "{src}"\ndest-queue = "{dst}"'))
    runner = ShovelRunner([config]).start()
    try:
        wait_state(runner.workers[0], ShovelState.RUNNING, 20)
        outcomes: list[str] = []

        def change(action):
            try:
                getattr(runner, action)("twice")
                outcomes.append(action)
            except KeyError:
                outcomes.append(f"{action}: gone")

        threads = [threading.Thread(target=change, args=(a,)) for a in ("restart", "delete")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert "delete" in outcomes
        assert runner.registry.snapshot() == [] and runner.workers == []
    finally:
        runner.stop(2)
