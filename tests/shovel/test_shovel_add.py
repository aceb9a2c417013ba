"""`rtroute shovel add NAME KEY=VALUE... | --definition JSON` on a running `rtroute shovel run`
(``PUT /shovels/VHOST/NAME``): the shovel starts and moves messages, shows in `shovel status`
and `/status`, an existing name is refused unless `--replace`, an invalid definition is refused
with the importer's message, and `shovel delete` removes it."""
from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from rtroute.shovel.commands import shovel as shovel_group

from ..conftest import BROKER_URI, wait_for
from .conftest import bodies, depth, publish, wait_depth
from .test_process import ShovelProcess

pytestmark = pytest.mark.broker

TOKEN = "shovel-add-token"


@pytest.fixture
def process(tmp_path):
    definitions = tmp_path / "definitions.json"
    definitions.write_text('{"parameters": []}')
    proc = ShovelProcess(["--definitions", str(definitions), "--token", TOKEN],
                         tmp_path / "shovel.log")
    wait_for(lambda: proc.status() is not None, 20)
    yield proc
    proc.terminate()
    proc.stop()


def cli(process, *args: str, token: str | None = TOKEN):
    options = ["--http", f"127.0.0.1:{process.port}"] + (["--token", token] if token else [])
    return CliRunner().invoke(shovel_group, [*args, *options],
                              env={"RTROUTE_HTTP_TOKEN": None})


def shown(process, name):
    return next((s for s in (process.status() or {}).get("shovels", []) if s["name"] == name),
                None)


def error(result) -> str:
    assert result.exit_code == 1, result.output
    (line,) = result.output.splitlines()
    return line


def test_a_shovel_added_at_run_time_moves_messages_shows_and_is_deleted(process, names):
    src, dst, other = names.queue("src"), names.queue("dst"), names.queue("other")
    added = cli(process, "add", "mv", f"src-uri={BROKER_URI}", f"src-queue={src}",
                f"dest-uri={BROKER_URI}", f"dest-queue={dst}", "src-prefetch-count=50",
                "ack-mode=on-confirm")
    assert added.exit_code == 0, added.output
    assert added.output == "Added shovel mv in vhost /\n"
    wait_for(lambda: (shown(process, "mv") or {}).get("state") == "running", 20)
    publish(BROKER_URI, src, 20)
    wait_depth(BROKER_URI, dst, 20)
    assert sorted(bodies(BROKER_URI, dst)) == list(range(20))
    row = shown(process, "mv")
    assert (row["type"], row["vhost"], row["source_queue"], row["destination_queue"]) == \
        ("dynamic", "/", src, dst)
    status = cli(process, "status")
    assert status.exit_code == 0 and any(line.split()[:4] == ["mv", "/", "dynamic", "running"]
                                         for line in status.output.splitlines())

    again = error(cli(process, "add", "mv", f"src-uri={BROKER_URI}", f"src-queue={src}",
                      f"dest-uri={BROKER_URI}", f"dest-queue={other}"))
    assert "HTTP 409" in again and "shovel 'mv' in vhost '/' exists" in again \
        and "--replace" in again
    definition = {"src-uri": BROKER_URI, "src-queue": src, "dest-uri": BROKER_URI,
                  "dest-queue": other}
    replaced = cli(process, "add", "mv", "--definition", json.dumps(definition), "--replace")
    assert replaced.exit_code == 0 and replaced.output == "Replaced shovel mv in vhost /\n"
    wait_for(lambda: (shown(process, "mv") or {}).get("destination_queue") == other, 20)
    wait_for(lambda: shown(process, "mv")["state"] == "running", 20)
    publish(BROKER_URI, src, 5, start=100)
    wait_depth(BROKER_URI, other, 5)
    assert depth(BROKER_URI, dst) == 0

    deleted = cli(process, "delete", "mv")
    assert deleted.exit_code == 0, deleted.output
    assert shown(process, "mv") is None
    publish(BROKER_URI, src, 3, start=200)
    assert depth(BROKER_URI, src) == 3  # nobody moves them any more


def test_shovel_add_refusals_carry_the_servers_reason(process, names):
    src = names.queue("src")
    url = f"http://127.0.0.1:{process.port}/shovels/%2F/bad"
    missing = error(cli(process, "add", "bad", f"src-uri={BROKER_URI}", f"src-queue={src}"))
    assert missing == f"Error: {url}: HTTP 400: the definition: shovel 'bad': dest-uri is required"
    mode = error(cli(process, "add", "bad", f"src-uri={BROKER_URI}", f"src-queue={src}",
                     f"dest-uri={BROKER_URI}", "dest-queue=x", "ack-mode=sometimes"))
    assert "HTTP 400" in mode and "ack-mode must be one of" in mode
    amqp10 = error(cli(process, "add", "bad", "--definition", json.dumps(
        {"src-uri": BROKER_URI, "src-address": "a", "src-protocol": "amqp10",
         "dest-uri": BROKER_URI, "dest-queue": "x"})))
    assert "HTTP 400" in amqp10 and "amqp10 is not supported" in amqp10
    no_token = error(cli(process, "add", "bad", "--definition", "{}", token=None))
    assert "HTTP 401" in no_token and "rtroute shovel run --token" in no_token
    usage = cli(process, "add", "bad")
    assert usage.exit_code == 2 and "give the shovel's keys as KEY=VALUE" in usage.output
    assert shown(process, "bad") is None
