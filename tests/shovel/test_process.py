"""The shovel as a process: `shovel run` and `shovel status`, kill -9, SIGTERM, config errors,
imports from the plugin's configs, src-delete-after, several shovels in one process."""
from __future__ import annotations

import json
import signal
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner

from rtroute.ops.http import OpsServer
from rtroute.shovel.commands import shovel as shovel_group
from rtroute.shovel.runner import ShovelRunner
from rtroute.shovel.status import ShovelState, uri_without_credentials

from ..conftest import BROKER_URI, broker_uri_for, wait_for
from ..processes import RtrouteProcess
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


class ShovelProcess(RtrouteProcess):
    """`python -m rtroute.shovel.commands run ...` with its /status endpoint."""

    def __init__(self, args: list[str], log: Path, log_level: str = "WARNING") -> None:
        super().__init__("rtroute.shovel.commands", ["run", *args, "--log-level", log_level],
                         log)

    def wait_running(self, timeout: float = 20) -> None:
        def running() -> bool:
            status = self.status()
            return bool(status and status["shovels"]
                        and all(s["state"] == "running" for s in status["shovels"]))

        wait_for(running, timeout)

    def terminate(self, timeout: float = 20) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)


@pytest.mark.slow
def test_kill_9_while_20000_persistent_messages_move_loses_nothing(node2, names, tmp_path):
    """on_confirm: a source message is acked only after the destination confirmed it, so a
    killed shovel loses nothing; what it had published but not yet acked is moved again."""
    total, prefetch = 20_000, 500
    src, dst = names.queue("src"), names.queue("dst", uri=node2.uri)
    declare_queue(LOCAL, src, durable=True)
    publish(LOCAL, src, total, persistent=True)
    config = tmp_path / "rtroute.toml"
    config.write_text(toml_shovel(
        "kill9", LOCAL, node2.uri, f'queue = "{src}"\ndest-queue = "{dst}"\n'
        f'ack_mode = "on_confirm"\nprefetch_count = {prefetch}',
        dst_declarations=f'[{{ method = "queue.declare", queue = "{dst}", durable = true }}]'))
    first = ShovelProcess(["-c", str(config)], tmp_path / "first.log")
    try:
        wait_for(lambda: _depth_or_zero(node2.uri, dst) >= 4000, 30, interval=0.005)
    finally:
        first.kill()
    at_kill = depth(node2.uri, dst)
    assert 0 < at_kill < total, "killed mid-transfer"
    second = ShovelProcess(["-c", str(config)], tmp_path / "second.log")
    try:
        wait_for(lambda: depth(LOCAL, src) == 0, 60)
        status = wait_for(second.status, 10)
        assert status["shovels"][0]["state"] == "running"
        wait_for(lambda: (second.status() or {}).get("shovels", [{}])[0].get(
            "counters", {}).get("acked", 0) + at_kill >= total, 30)
        assert second.terminate() == 0
    finally:
        if second.proc.poll() is None:
            second.kill()
    got = bodies(node2.uri, dst)
    duplicates = len(got) - len(set(got))
    print(f"kill -9 at {at_kill} of {total} moved: {duplicates} duplicates "
          f"(in flight at most {prefetch})")
    assert set(got) == set(range(total))
    assert duplicates <= prefetch
    assert len(got) == total + duplicates


def _depth_or_zero(uri: str, queue: str) -> int:
    try:
        return depth(uri, queue)
    except Exception:  # noqa: BLE001 - not declared yet
        return 0


def test_sigterm_stops_gracefully_without_duplicates(names, tmp_path):
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    config = tmp_path / "rtroute.toml"
    config.write_text(toml_shovel("term", LOCAL, LOCAL, f'queue = "{src}"\n'
                                  f'dest-queue = "{dst}"'))
    process = ShovelProcess(["-c", str(config)], tmp_path / "term.log", log_level="INFO")
    try:
        process.wait_running()
        publish(LOCAL, src, 3000)
        wait_depth(LOCAL, dst, 1)
        assert process.terminate() == 0
    finally:
        if process.proc.poll() is None:
            process.kill()
    moved = bodies(LOCAL, dst)
    left = bodies(LOCAL, src)
    assert sorted(moved + left) == list(range(3000))   # each message exactly once
    last = process.log().strip().splitlines()[-1]  # the last word is that it stopped, and how
    assert f"shovels stopped: 1 shovels, {len(moved)} messages forwarded" in last, last


def test_several_shovels_in_one_process_and_the_status_command(names):
    queues = [(names.queue(f"src{i}"), names.queue(f"dst{i}")) for i in range(3)]
    for src, dst in queues:
        declare_queue(LOCAL, src)
        declare_queue(LOCAL, dst)
    runner = ShovelRunner([
        shovel_config(toml_shovel(f"multi-{i}", LOCAL, LOCAL,
                                  f'queue = "{src}"\ndest-queue = "{dst}"'))
        for i, (src, dst) in enumerate(queues)])
    http = OpsServer("127.0.0.1:0", runner.status).start()
    try:
        runner.start()
        for worker in runner.workers:
            wait_state(worker, ShovelState.RUNNING)
        for i, (src, dst) in enumerate(queues):
            publish(LOCAL, src, 10 * (i + 1))
        for i, (_src, dst) in enumerate(queues):
            wait_depth(LOCAL, dst, 10 * (i + 1))
        wait_for(lambda: runner.workers[2].status.counters["acked"] == 30)
        result = CliRunner().invoke(shovel_group, ["status", "--http",
                                                   f"127.0.0.1:{http.port}"])
        assert result.exit_code == 0, result.output
        lines = result.output.splitlines()
        # the columns of rabbitmqctl shovel_status, the count moved, then 4.3's columns
        assert lines[0].split() == [
            "name", "vhost", "type", "state", "source_protocol", "source",
            "destination_protocol", "destination", "termination_reason", "last_changed",
            "moved", "pending", "source_queue", "destination_queue", "remaining",
            "remaining_unacked", "forwarded"]
        for i, line in enumerate(lines[1:]):
            cells = line.split()
            assert cells[:4] == [f"multi-{i}", "-", "static", "running"]
            assert cells[5] == uri_without_credentials(broker_uri_for())  # as the plugin
            # counted from the end: last_changed holds a space
            assert cells[-7:] == [str(10 * (i + 1)), "0", queues[i][0], queues[i][1],
                                  "unlimited", "unlimited", str(10 * (i + 1))]
        with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/metrics") as response:
            metrics = response.read().decode()
        assert 'rtroute_shovel_moved_total{shovel="multi-2"} 30' in metrics
        assert 'rtroute_shovel_acked_total{shovel="multi-1"} 20' in metrics
        assert 'rtroute_shovel_state{shovel="multi-0",state="running"} 1' in metrics
        with urllib.request.urlopen(f"http://127.0.0.1:{http.port}/healthz") as response:
            assert json.loads(response.read()) == {"healthy": True}
    finally:
        runner.stop(2)
        http.stop()
    assert all(w.status.state is ShovelState.TERMINATED for w in runner.workers)
    assert all(w.status.reason == "stopped" for w in runner.workers)


def test_src_delete_after_queue_length_moves_what_was_there_then_stops(names, shovels):
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    publish(LOCAL, src, 500)
    worker = shovels.start(toml_shovel("qlen", LOCAL, LOCAL, f'queue = "{src}"\n'
                                       f'dest-queue = "{dst}"\nsrc-delete-after = "queue-length"'
                                       "\nprefetch_count = 100"))
    assert worker.join(20)
    assert worker.status.completed and worker.status.healthy
    assert worker.status.state is ShovelState.TERMINATED
    assert "src-delete-after" in worker.status.reason
    assert bodies(LOCAL, dst) == list(range(500))


@pytest.mark.parametrize("ack_mode", ["on_confirm", "on_publish"])
def test_src_delete_after_a_count_moves_exactly_that_many(ack_mode, names, shovels):
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    publish(LOCAL, src, 300)
    worker = shovels.start(toml_shovel("count", LOCAL, LOCAL, f'queue = "{src}"\n'
                                       f'dest-queue = "{dst}"\nsrc-delete-after = 120\n'
                                       f'prefetch_count = 50\nack_mode = "{ack_mode}"'))
    assert worker.join(20)
    assert worker.status.completed
    assert bodies(LOCAL, dst) == list(range(120))
    assert bodies(LOCAL, src) == list(range(120, 300))    # the rest stays, in order


def test_src_delete_after_queue_length_with_no_ack_takes_no_more(names, shovels):
    """no_ack cannot take back what it received: with a limit it acks each message on
    receipt instead, so the messages beyond the limit stay in the source."""
    src, dst = names.queue("src"), names.queue("dst")
    declare_queue(LOCAL, src)
    declare_queue(LOCAL, dst)
    publish(LOCAL, src, 300)
    worker = shovels.start(toml_shovel("qlen-noack", LOCAL, LOCAL, f'queue = "{src}"\n'
                                       f'dest-queue = "{dst}"\nsrc-delete-after = "queue-length"'
                                       '\nprefetch_count = 50\nack_mode = "no_ack"'))
    wait_for(lambda: worker.status.completed or worker.finished, 20)
    publish(LOCAL, src, 5, start=300)
    assert worker.join(20)
    assert bodies(LOCAL, dst) == list(range(300))
    assert bodies(LOCAL, src) == list(range(300, 305))


def test_imported_erlang_config_and_definitions_run(names, tmp_path):
    src1, dst1, src2, dst2 = (names.queue(n) for n in ("src1", "dst1", "src2", "dst2"))
    for queue in (src1, dst1):
        declare_queue(LOCAL, queue)
    erlang = tmp_path / "advanced.config"
    erlang.write_text(f"""[
  {{rabbitmq_shovel, [{{shovels, [
    {{classic, [
      {{sources, [{{broker, "{LOCAL}"}}]}},
      {{destinations, [{{broker, "{LOCAL}"}}]}},
      {{queue, <<"{src1}">>}},
      {{ack_mode, on_confirm}},
      {{publish_fields, [{{exchange, <<"">>}}, {{routing_key, <<"{dst1}">>}}]}},
      {{publish_properties, [{{delivery_mode, 2}}]}},
      {{reconnect_delay, 0.5}}
    ]}}
  ]}}]}}
].
""")
    definitions = tmp_path / "definitions.json"
    definitions.write_text(json.dumps({"parameters": [{
        "component": "shovel", "vhost": "/", "name": "dynamic",
        "value": {"src-uri": LOCAL, "src-queue": src2, "dest-uri": [LOCAL],
                  "dest-queue": dst2, "ack-mode": "on-confirm"}}]}))
    process = ShovelProcess(["--erlang-config", str(erlang), "--definitions",
                             str(definitions)], tmp_path / "imports.log")
    try:
        process.wait_running()
        publish(LOCAL, src1, 20)
        publish(LOCAL, src2, 30)
        wait_depth(LOCAL, dst1, 20)
        wait_depth(LOCAL, dst2, 30)
        names_seen = sorted(s["name"] for s in process.status()["shovels"])
        assert names_seen == ["classic", "dynamic"]
        assert process.terminate() == 0
    finally:
        if process.proc.poll() is None:
            process.kill()
    assert bodies(LOCAL, dst1) == list(range(20))


BAD_CONFIGS = [
    ("rtroute.toml",
     ('[[shovel]]\nname = "bad"\nsources = { broker = "amqp://" }\n'
     'destinations = { broker = "amqp://" }\nqueue = "q"\nprefetch_count = "ten"\n'),
     "rtroute.toml:6: shovel 'bad': prefetch_count must be an integer"),
    ("rtroute.toml",
     ('[[shovel]]\nname = "bad"\nsources = { broker = "amqp://" }\n'
     'destinations = { broker = "amqp://h?heartbaet=5" }\nqueue = "q"\n'),
     ("rtroute.toml:4: shovel 'bad': destinations.broker is invalid: unknown query key "
     "'heartbaet'")),
    ("rtroute.toml",
     ('[[shovel]]\nname = "bad"\nsources = { broker = "amqp://" }\n'
     'destinations = { broker = "amqp://" }\nqueue = "q"\nack_mode = "no_ack"\n'
     'filter = { key = "a.#", on_mismatch = "leave" }\n'),
     "rtroute.toml:7: shovel 'bad': filter.on_mismatch \"leave\" needs acknowledgements"),
    ("rtroute.toml",
     ('[[shovel]]\nname = "bad"\nsources = { broker = "amqp://" }\n'
     'destinations = { broker = "amqp://" }\nqueue = "q"\nnack_retry_delay = -1\n'),
     "rtroute.toml:6: shovel 'bad': nack_retry_delay must be >= 0"),
    ("rtroute.toml",
     ('[[shovel]]\nname = "bad"\nsources = { broker = "amqp://" }\n'
     'destinations = { broker = "amqp://" }\nqueue = ""\n'),
     "rtroute.toml:5: shovel 'bad': queue \"\" means the most recently declared queue"),
    ("definitions.json",
     ('{"parameters": [{"component": "shovel", "vhost": "/", "name": "dyn",\n'
     ' "value": {"src-uri": "amqp://", "src-queue": "q",\n'
     '  "dest-uri": "amqp://", "ack-mode": "on-ack"}}]}\n'),
     "definitions.json:3: shovel 'dyn': ack-mode must be one of"),
    ("advanced.config",
     ('[{rabbitmq_shovel, [{shovels, [\n  {old, [\n'
     '    {sources, [{broker, "amqp://"}]},\n    {destinations, [{broker, "amqp://"}]},\n'
     '    {queue, <<"q">>},\n    {prefetch_count, -3}\n  ]}\n]}]}].\n'),
     "advanced.config:6: shovel 'old': prefetch_count must be between 0 and 65535"),
]


@pytest.mark.parametrize("filename,text,message", BAD_CONFIGS,
                         ids=[f"{f}-{i}" for i, (f, _t, _m) in enumerate(BAD_CONFIGS)])
def test_bad_config_errors_name_the_shovel_the_field_and_the_line(filename, text, message,
                                                                   tmp_path):
    path = tmp_path / filename
    path.write_text(text)
    option = {"rtroute.toml": "-c", "definitions.json": "--definitions",
              "advanced.config": "--erlang-config"}[filename]
    result = CliRunner().invoke(shovel_group, ["run", option, str(path), "--no-http"])
    assert result.exit_code == 1
    assert message in result.output.replace(str(tmp_path) + "/", "")


def test_the_examples_load():
    from rtroute.config.rtroute_toml import load
    from rtroute.shovel.importers import from_erlang_config

    root = Path(__file__).resolve().parents[2] / "examples"
    assert [s.name for s in load(str(root / "shovel.toml")).shovels] == [
        "orders-to-dc2", "my_first_shovel", "audit-copy", "drain-legacy"]
    text = (root / "rabbitmq.config").read_text()
    assert [s.name for s in from_erlang_config(text, "rabbitmq.config")] == [
        "my_first_shovel", "orders_to_dc2"]
