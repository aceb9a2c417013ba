"""`rtroute status`: the /status of a running `rtroute run`, `rtroute proxy` or `rtroute shovel
run` as tables (or its JSON), and token refusals that name the command of the process asked."""
from __future__ import annotations

import http.server
import json
import threading
import uuid

import pika
import pytest
from click.testing import CliRunner

from rtroute.cli import main
from rtroute.control.status_tables import format_status, process_kind
from rtroute.ops.http import OpsServer
from rtroute.ops.netaddr import free_port

from ..conftest import BROKER_URI, wait_for
from ..processes import RtrouteProcess
from ..proxy.conftest import ProxyProcess
from ..sidecar.conftest import SidecarProcess, broker_toml

TOKEN = "status-token"


def status(port: int, *args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(main, ["status", "--http", f"127.0.0.1:{port}", *args],
                              env={"RTROUTE_HTTP_TOKEN": None, "RTROUTE_HTTP_TOKEN_FILE": None,
                                   **(env or {})})


@pytest.fixture
def queues(broker_uri):
    """``new() -> name``: fresh queues (and exchanges by ``exchange()``), deleted at teardown."""
    made: list[tuple[str, str]] = []

    def new(kind: str = "queue") -> str:
        name = f"rtroute-test.status.{uuid.uuid4().hex[:8]}"
        made.append((kind, name))
        return name

    yield new
    connection = pika.BlockingConnection(pika.URLParameters(broker_uri))
    channel = connection.channel()
    for kind, name in made:
        if kind == "queue":
            channel.queue_delete(name)
        else:
            for suffix in ("", ".bindings"):
                channel.exchange_delete(name + suffix)
            channel.queue_delete(f"rtroute.ingress.{name}")
    connection.close()


@pytest.fixture
def processes():
    started: list[RtrouteProcess] = []
    yield started
    for process in started:
        process.stop()


# -- against real processes ----------------------------------------------------------------------

def test_status_of_a_sidecar_shows_its_exchanges_and_diverts_and_wants_its_token(
        processes, queues, tmp_path, broker_uri):
    name = queues("exchange")
    config = tmp_path / "rtroute.toml"
    config.write_text(broker_toml() + f'[http]\ntoken = "{TOKEN}"\nprotect_reads = true\n'
                      f'[[exchange]]\nname = "{name}"\n')
    sidecar = SidecarProcess(["-c", str(config)], tmp_path / "sidecar.log")
    processes.append(sidecar)
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")

    def running() -> bool:
        if sidecar.proc.poll() is not None:
            pytest.fail(sidecar.log())
        result = status(sidecar.port, "--json", "--token", TOKEN)
        return result.exit_code == 0 and json.loads(result.output)["exchanges"][0]["state"] \
            == "running"

    wait_for(running, 30)
    table = status(sidecar.port, "--token-file", str(token_file))
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].startswith("rtroute run: healthy; connection")
    header = lines.index("Exchanges (1)") + 1
    assert lines[header].split() == ["name", "kind", "state", "role", "bindings_known",
                                     "received", "routed", "unroutable", "dead_lettered",
                                     "diverted", "returned", "requeued", "in_flight", "since"]
    row = lines[header + 1].split()
    assert row[:3] == [name, "rtopic", "running"] and row[4:9] == ["0", "0", "0", "0", "0"]
    # one replica: the ingress queue's active consumer, once the broker's statistics say so
    assert row[3] in ("active", "unknown")
    assert "Diverts (0)" in lines
    raw = status(sidecar.port, "--json", env={"RTROUTE_HTTP_TOKEN": TOKEN})
    assert raw.exit_code == 0
    assert json.loads(raw.output)["exchanges"][0]["name"] == name

    for args in ([], ["--token", "wrong"]):
        refused = status(sidecar.port, *args)
        assert refused.exit_code == 1
        assert "HTTP 401" in refused.output and "rtroute run --token" in refused.output
        assert "--token or --token-file" in refused.output
        assert len(refused.output.splitlines()) == 1
    assert "no token was given" in status(sidecar.port).output
    assert "the token given was refused" in status(sidecar.port, "--token", "x").output


def test_status_of_a_proxy_shows_listeners_connections_catalogs_and_refusals(
        processes, tmp_path, broker_uri):
    http_port = free_port()
    proxy = ProxyProcess(tmp_path / "proxy.log", "--http", f"127.0.0.1:{http_port}")
    processes.append(proxy)
    connection = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        def ready() -> bool:
            result = status(http_port, "--json")
            return result.exit_code == 0 and json.loads(result.output)["healthy"]

        wait_for(ready, 30)
        # an x-rtopic exchange with one binding: the proxy's status names what it follows
        exchange = f"rtroute-test.status.{uuid.uuid4().hex[:8]}"
        ch = connection.channel()
        ch.exchange_declare(exchange, "x-rtopic", auto_delete=True)
        queue = ch.queue_declare("", exclusive=True).method.queue
        ch.queue_bind(queue, exchange, "a.b")

        # a binding made through the proxy counts at once; "ready" follows once the watcher's
        # first listing of the exchange is in (CI saw bindings 1, ready false in between)
        def followed() -> list:
            result = status(http_port, "--json")
            return [x for c in json.loads(result.output)["catalogs"]
                    for x in c["followed"]
                    if x["name"] == exchange and x["bindings"] == 1 and x["ready"]]

        [entry] = wait_for(followed, 15)
        table = status(http_port)
        raw = status(http_port, "--json")
    finally:
        connection.close()
    assert entry["ready"] is True and entry["last_change"].endswith("Z")
    shown = table.output.splitlines()
    rows = shown[shown.index(next(x for x in shown if x.startswith("x-rtopic exchanges "
                                                                  "followed"))) + 1:]
    assert rows[0].split() == ["vhost", "exchange", "bindings", "ready", "last_change"]
    assert any(row.split()[:4] == ["/", exchange, "1", "true"] for row in rows)
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0] == "rtroute proxy: healthy; vhost /"
    listeners = lines.index("Listeners (1)")
    assert lines[listeners + 1].split() == ["listen", "tls"]
    assert lines[listeners + 2].split() == [f"127.0.0.1:{proxy.port}", "false"]
    assert any(line.startswith("Client connections: 1 open, 1 accepted; publishes rewritten: 0")
               for line in lines)
    catalogs = lines.index("Catalogs (1)")
    assert lines[catalogs + 1].split() == ["vhost", "ready", "exchanges", "error"]
    assert lines[catalogs + 2].split()[:2] == ["/", "true"]
    assert "Refusals (0)" in lines
    data = json.loads(raw.output)
    assert data["listeners"] == [{"listen": f"127.0.0.1:{proxy.port}", "tls": False}]
    assert data["client_connections"] == 1 and data["refusals"] == {}


def test_status_of_a_shovel_process_shows_the_shovel_status_columns_and_wants_its_token(
        processes, queues, tmp_path, broker_uri):
    src, dst = queues(), queues()
    connection = pika.BlockingConnection(pika.URLParameters(broker_uri))
    for queue in (src, dst):
        connection.channel().queue_declare(queue)
    connection.close()
    config = tmp_path / "rtroute.toml"
    config.write_text(f'[http]\ntoken = "{TOKEN}"\nprotect_reads = true\n'
                      f'[[shovel]]\nname = "status-shovel"\n'
                      f'sources = {{ broker = "{BROKER_URI}" }}\n'
                      f'destinations = {{ broker = "{BROKER_URI}" }}\n'
                      f'queue = "{src}"\ndest-queue = "{dst}"\n')
    shovel = RtrouteProcess("rtroute.cli", ["shovel", "run", "-c", str(config)],
                            tmp_path / "shovel.log")
    processes.append(shovel)

    def running() -> bool:
        if shovel.proc.poll() is not None:
            pytest.fail(shovel.log())
        result = status(shovel.port, "--json", "--token", TOKEN)
        return result.exit_code == 0 and json.loads(result.output)["shovels"][0]["state"] \
            == "running"

    wait_for(running, 30)
    table = status(shovel.port, "--token", TOKEN)
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0] == "rtroute shovel run: healthy"
    assert lines[2].split()[:4] == ["name", "vhost", "type", "state"]
    assert lines[3].split()[:4] == ["status-shovel", "-", "static", "running"]
    refused = status(shovel.port)
    assert refused.exit_code == 1
    assert "HTTP 401" in refused.output and "rtroute shovel run --token" in refused.output
    assert "rtroute run --token" not in refused.output.replace("rtroute shovel run", "")


def test_shovel_changes_without_a_server_token_name_rtroute_shovel_run(
        processes, queues, tmp_path, broker_uri):
    src, dst = queues(), queues()
    config = tmp_path / "rtroute.toml"
    config.write_text(f'[[shovel]]\nname = "tokenless"\n'
                      f'sources = {{ broker = "{BROKER_URI}", declarations = '
                      f'[{{ method = "queue.declare", queue = "{src}" }}] }}\n'
                      f'destinations = {{ broker = "{BROKER_URI}", '
                      f'declarations = [{{ method = "queue.declare", queue = "{dst}" }}] }}\n'
                      f'queue = "{src}"\ndest-queue = "{dst}"\n')
    shovel = RtrouteProcess("rtroute.cli", ["shovel", "run", "-c", str(config)],
                            tmp_path / "shovel.log")
    processes.append(shovel)
    wait_for(shovel.status, 30)
    for command in ("restart", "delete"):
        result = CliRunner().invoke(main, ["shovel", command, "tokenless", "--http",
                                           f"127.0.0.1:{shovel.port}"],
                                    env={"RTROUTE_HTTP_TOKEN": None})
        assert result.exit_code == 1
        assert "HTTP 403" in result.output
        assert "rtroute shovel run --token" in result.output
        assert "rtroute run --token" not in result.output


# -- without a process ---------------------------------------------------------------------------

def test_status_when_nothing_listens_is_one_line():
    port = free_port()
    result = status(port)
    assert result.exit_code == 1
    assert result.output == (f"Error: http://127.0.0.1:{port}/status: nothing answers "
                             "(Connection refused): is an rtroute process serving HTTP there "
                             "(its --http HOST:PORT)?\n")


class _NotRtroute(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"<html>hello</html>" if self.path == "/status" else b""
        self.send_response(200 if self.path == "/status" else 404)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: object) -> None:
        pass


def test_status_of_an_endpoint_that_is_not_rtroute_says_so():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _NotRtroute)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    other = OpsServer("127.0.0.1:0", lambda: {"ok": True}).start()
    try:
        html = status(server.server_address[1])
        json_without_status = status(other.port)
    finally:
        server.shutdown()
        server.server_close()
        other.stop()
    assert html.exit_code == 1 and "not an rtroute endpoint (the answer is not JSON)" in \
        html.output
    assert json_without_status.exit_code == 1
    assert "not an rtroute endpoint" in json_without_status.output


def test_token_and_token_file_together_are_a_usage_error(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("t")
    result = status(free_port(), "--token", "t", "--token-file", str(token_file))
    assert result.exit_code == 2 and "either --token or --token-file" in result.output


@pytest.mark.parametrize(("command", "config_key"), [
    ("rtroute run", "[http] token"), ("rtroute shovel run", "[http] token"),
    ("rtroute proxy", "[proxy] http_token")])
def test_the_endpoint_names_the_command_that_serves_it_when_it_refuses(command, config_key):
    import urllib.error
    import urllib.request

    open_server = OpsServer("127.0.0.1:0", dict, command=command).start()
    guarded = OpsServer("127.0.0.1:0", dict, token=TOKEN, protect_reads=True,
                        command=command).start()
    try:
        with pytest.raises(urllib.error.HTTPError) as forbidden:
            urllib.request.urlopen(urllib.request.Request(
                f"http://127.0.0.1:{open_server.port}/x", method="POST"), timeout=5)
        with pytest.raises(urllib.error.HTTPError) as unauthorized:
            urllib.request.urlopen(f"http://127.0.0.1:{guarded.port}/status", timeout=5)
    finally:
        open_server.stop()
        guarded.stop()
    refused = json.loads(forbidden.value.read())["error"]
    assert forbidden.value.code == 403
    assert f"set {config_key} (or {command} --token / RTROUTE_HTTP_TOKEN)" in refused
    assert unauthorized.value.code == 401
    assert f"{command} --token" in json.loads(unauthorized.value.read())["error"]


# -- the tables, from canned /status answers ---------------------------------------------------

def test_each_kind_of_process_is_recognised_from_its_status():
    assert process_kind({"healthy": True, "exchanges": [], "shovels": []}) == "rtroute run"
    assert process_kind({"healthy": True, "catalogs": []}) == "rtroute proxy"
    assert process_kind({"healthy": False, "shovels": []}) == "rtroute shovel run"
    for other in ({}, {"healthy": True}, [], "x", {"exchanges": []}):
        assert process_kind(other) is None


def test_a_sidecar_with_shovels_beside_it_shows_both_and_empty_cells_as_dashes():
    text = format_status({
        "healthy": False, "connection": "connecting", "broker": "amqp://b", "connects": 0,
        "last_error": "refused", "exchanges": [
            {"name": "logs", "kind": "topic", "state": "starting", "bindings_known": None,
             "received": 3, "in_flight": 1}],
        "diverts": [{"name": "d", "address": "logs", "forwarding_address": "audit",
                     "filter": None, "exclusive": True, "matched": 2}],
        "shovels": []})
    lines = text.splitlines()
    assert lines[0].startswith("rtroute run: NOT healthy; connection connecting to amqp://b")
    assert lines[1] == "last error: refused"
    row = lines[lines.index("Exchanges (1)") + 2].split()
    assert row[:6] == ["logs", "topic", "starting", "-", "-", "3"] and row[12] == "1"
    divert = lines[lines.index("Diverts (1)") + 2].split()
    assert divert[:6] == ["d", "logs", "audit", "-", "true", "2"]
    assert lines[-2:] == ["Shovels (0)", "no shovels"]


def test_a_sidecar_not_ready_says_why_on_its_first_line():
    reason = "loading bindings of 'logs.bindings': 120,000 of ~300,000 read (9 s)"
    text = format_status({"healthy": False, "reason": reason, "connection": "connected",
                          "broker": "amqp://b", "exchanges": [], "diverts": []})
    assert text.splitlines()[0].startswith(f"rtroute run: NOT healthy: {reason}; connection ")


def test_format_status_refuses_what_is_not_an_rtroute_status():
    with pytest.raises(ValueError, match="not the /status"):
        format_status({"healthy": True})



@pytest.mark.parametrize(("healthy", "code"), [(True, 0), (False, 69)])
def test_the_exit_status_says_whether_the_process_is_healthy(healthy, code):
    """As ``rabbitmq-diagnostics check_running``: a script or a probe can act on it (before,
    ``rtroute status`` exited 0 whatever it showed)."""
    snapshot = {"healthy": healthy, "connection": "connected", "broker": "amqp://b",
                "connects": 1, "last_error": None if healthy else "refused",
                "exchanges": [], "diverts": []}
    server = OpsServer("127.0.0.1:0", lambda: snapshot).start()
    try:
        tables, as_json = status(server.port), status(server.port, "--json")
    finally:
        server.stop()
    assert tables.exit_code == code, tables.output
    assert ("NOT healthy" in tables.output) is not healthy
    assert as_json.exit_code == code and json.loads(as_json.output)["healthy"] is healthy


def test_a_proxys_table_lists_the_x_rtopic_exchanges_it_follows():
    """Before: the count of exchanges per vhost only; an operator could not see which, nor
    whether their bindings had arrived."""
    text = format_status({
        "healthy": True, "vhost": "/", "catalogs": [
            {"vhost": "/", "ready": True, "exchanges": 2, "followed": [
                {"name": "logs", "bindings": 12, "ready": True,
                 "last_change": "2026-11-28T14:00:00Z"},
                {"name": "orders", "bindings": 0, "ready": False, "last_change": None}]}],
        "refusals": {}})
    lines = text.splitlines()
    at = lines.index("x-rtopic exchanges followed (2)")
    assert lines[at + 1].split() == ["vhost", "exchange", "bindings", "ready", "last_change"]
    assert lines[at + 2].split() == ["/", "logs", "12", "true", "2026-11-28T14:00:00Z"]
    assert lines[at + 3].split() == ["/", "orders", "0", "false", "-"]
