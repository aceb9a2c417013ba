"""`rtroute divert list|add|update|delete` against a real `rtroute run -c FILE` process and the
real broker: the divert added from the command line moves messages, the update changes its
filter, the list shows its counters, and refusals are one line with the server's reason."""
from __future__ import annotations

import json
import time

import pika
import pytest
from click.testing import CliRunner

from rtroute.divert.commands import divert as divert_group

from .conftest import divert_status, drain, wait_depth

pytestmark = pytest.mark.broker

TOKEN = "divert-cli-token"
NY = {"office": "New York"}
LONDON = {"office": "London"}


def cli(sc, *args: str, token: str | None = TOKEN):
    options = ["--http", f"127.0.0.1:{sc.port}"] + (["--token", token] if token else [])
    return CliRunner().invoke(divert_group, [*args, *options], env={"RTROUTE_HTTP_TOKEN": None})


def publish(channel, exchange, body, headers):
    channel.basic_publish(exchange, "k", body, pika.BasicProperties(headers=headers))


def bodies(channel, queue):
    return sorted(b.decode() for _, _, b in drain(channel, queue))


def test_divert_add_update_list_delete_from_the_command_line(run_config, channel, managed,
                                                             objects):
    name = managed("cli")
    spy = objects.queue(f"{name}.spy")
    sc = run_config([{"name": name, "kind": "topic"}], http={"token": TOKEN})
    local = objects.queue(f"{name}.local", bind=(f"{name}.bindings", "#"))
    channel.confirm_delivery()

    assert cli(sc, "list").output == "no diverts\n"
    added = cli(sc, "add", "spy", "--address", name, "--forwarding-address", spy,
                "--filter", "office = 'New York'", "--routing-type", "anycast")
    assert added.exit_code == 0, added.output
    assert added.output == f"Added divert spy: {name} -> {spy}\n"
    publish(channel, name, b"ny-1", NY)
    publish(channel, name, b"ldn-1", LONDON)
    wait_depth(channel, local, 2)
    wait_depth(channel, spy, 1)
    assert bodies(channel, spy) == ["ny-1"]

    updated = cli(sc, "update", "spy", "--filter", "office = 'London'")
    assert updated.exit_code == 0 and updated.output == "Updated divert spy\n", updated.output
    publish(channel, name, b"ny-2", NY)
    publish(channel, name, b"ldn-2", LONDON)
    wait_depth(channel, local, 4)
    wait_depth(channel, spy, 1)
    assert bodies(channel, spy) == ["ldn-2"]
    deadline = time.monotonic() + 10
    while divert_status(sc, "spy").get("forwarded") != 2 and time.monotonic() < deadline:
        time.sleep(0.05)

    listed = cli(sc, "list")
    assert listed.exit_code == 0, listed.output
    header, row = listed.output.splitlines()
    assert header.split() == ["name", "address", "forwarding_address", "exclusive",
                              "routing_type", "filter", "transformer", "matched", "forwarded",
                              "dead_lettered", "unrouted"]
    assert row.split() == ["spy", name, spy, "false", "ANYCAST", "office", "=", "'London'", "-",
                           "2", "2", "0", "0"]
    (as_json,) = json.loads(cli(sc, "list", "--json").output)
    assert (as_json["name"], as_json["filter"], as_json["matched"]) == \
        ("spy", "office = 'London'", 2)

    cleared = cli(sc, "update", "spy", "--no-filter")
    assert cleared.exit_code == 0, cleared.output
    assert divert_status(sc, "spy")["filter"] is None

    deleted = cli(sc, "delete", "spy")
    assert deleted.exit_code == 0 and deleted.output == "Deleted divert spy\n"
    assert cli(sc, "list").output == "no diverts\n"
    publish(channel, name, b"ny-3", NY)
    wait_depth(channel, local, 5)
    assert bodies(channel, spy) == []


def test_divert_cli_refusals_are_one_line_with_the_servers_reason(run_config, managed,
                                                                  objects):
    name = managed("cli-err")
    spy = objects.queue(f"{name}.spy")
    sc = run_config([{"name": name, "kind": "topic"}], http={"token": TOKEN})
    url = f"http://127.0.0.1:{sc.port}"

    def error(result) -> str:
        assert result.exit_code == 1, result.output
        (line,) = result.output.splitlines()
        return line

    assert error(cli(sc, "delete", "nope")) == \
        f"Error: {url}/diverts/nope: HTTP 404: no divert named 'nope'"
    assert error(cli(sc, "update", "nope", "--filter", "a = 1")) == \
        f"Error: {url}/diverts/nope: HTTP 404: no divert named 'nope'"
    bad_filter = error(cli(sc, "add", "d", "--address", name, "--forwarding-address", spy,
                           "--filter", "office ="))
    assert bad_filter.startswith(f"Error: {url}/diverts: HTTP 400: ") and "filter" in bad_filter
    nowhere = error(cli(sc, "add", "d", "--address", "nope", "--forwarding-address", spy))
    assert "HTTP 400" in nowhere and "matches no managed exchange" in nowhere
    no_token = error(cli(sc, "add", "d", "--address", name, "--forwarding-address", spy,
                         token=None))
    assert no_token.startswith(f"Error: {url}/diverts: HTTP 401: ")
    assert "no token was given" in no_token and "--token or --token-file" in no_token
    wrong = error(cli(sc, "delete", "x", token="wrong"))
    assert "the token given was refused" in wrong and "rtroute run --token" in wrong

    assert cli(sc, "add", "d", "--address", name, "--forwarding-address", spy,
               "--exclusive").exit_code == 0
    exists = error(cli(sc, "add", "d", "--address", name, "--forwarding-address", spy))
    assert "HTTP 409" in exists and "'d'" in exists
    fixed = error(cli(sc, "update", "d", "--not-exclusive"))
    assert "HTTP 400" in fixed and "exclusive cannot be changed by an update" in fixed
    nothing = cli(sc, "update", "d")
    assert nothing.exit_code == 2 and nothing.output.splitlines()[-1] == (
        "Error: nothing to change: give --forwarding-address, --filter, --routing-type, "
        "--routing-key or --transformer")


def test_divert_cli_against_an_endpoint_without_diverts_says_so(tmp_path):
    from rtroute.ops.http import OpsServer

    server = OpsServer("127.0.0.1:0", lambda: {"healthy": True, "shovels": []}).start()
    try:
        result = CliRunner().invoke(divert_group, ["list", "--http",
                                                   f"127.0.0.1:{server.port}"])
    finally:
        server.stop()
    assert result.exit_code == 1
    assert result.output.rstrip().endswith(
        "HTTP 404: not found: no divert API there; is it the endpoint of rtroute run (--http)?")
