"""`rtroute proxy` is operable like `rtroute run`: an ops endpoint when asked (``--http``:
``/livez``, ``/readyz`` with the reason it is not ready, ``/metrics``), one line and a non-zero
status when a port is taken, pika kept quiet while the broker is down, and the same logging
options (``--log-level`` in either case, ``--log-format json``)."""
from __future__ import annotations

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import pika
import pytest

from rtroute.amqp.uri import parse_uri
from rtroute.ops.netaddr import free_port

from ..conftest import BROKER_URI, wait_for
from .conftest import assert_round_trip
from .raw_client import PROTOCOL_HEADER, RawClient

pytestmark = pytest.mark.broker
_BROKER = parse_uri(BROKER_URI, strict=False)


def http_get(port: int, path: str) -> tuple[int, str]:
    """``(status, body)`` of ``GET path`` on the ops endpoint at ``127.0.0.1:port``."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metric(text: str, sample: str) -> float | None:
    """The value of ``sample`` (name and labels, as rendered) in a ``/metrics`` text."""
    for line in text.splitlines():
        name, _, value = line.rpartition(" ")
        if name == sample:
            return float(value)
    return None


def broker_uri_on(port: int) -> str:
    """The broker under test's URI (credentials, vhost) on another local port."""
    return BROKER_URI.replace(f"@{_BROKER.host}:{_BROKER.port}", f"@127.0.0.1:{port}", 1)


class Relay:
    """A TCP relay from ``127.0.0.1:port`` to the broker under test, opened when the test
    says (a broker that comes up late)."""

    def __init__(self, port: int) -> None:
        self._listener = socket.create_server(("127.0.0.1", port))
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
                broker = socket.create_connection((_BROKER.host, _BROKER.port), timeout=10)
            except OSError:
                return
            broker.settimeout(None)
            self._sockets += [client, broker]
            for source, sink in ((client, broker), (broker, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        """Stops relaying: its connections end (a shutdown first: a close alone would leave
        them open while a pump thread still reads)."""
        for sock in self._sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass  # the listener, or one already shut
            sock.close()


def test_livez_readyz_and_metrics_answer_and_count_what_the_proxy_did(proxies, exchange_name):
    http = free_port()
    proxy = proxies("--http", f"127.0.0.1:{http}")
    assert http_get(http, "/livez") == (200, '{"alive": true}')
    wait_for(lambda: http_get(http, "/readyz")[0] == 200, timeout=30)
    assert json.loads(http_get(http, "/readyz")[1]) == {"healthy": True}

    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    try:
        assert_round_trip(conn.channel(), exchange_name, b"counted")
        code, text = http_get(http, "/metrics")
        assert code == 200
        assert metric(text, "rtroute_proxy_client_connections") == 1
        assert metric(text, "rtroute_proxy_client_connections_accepted_total") >= 1
        assert metric(text, "rtroute_proxy_publishes_rewritten_total") == 1
        vhost = f'{{vhost="{_BROKER.vhost}"}}'
        assert metric(text, f"rtroute_proxy_catalog_ready{vhost}") == 1
        assert metric(text, f"rtroute_proxy_catalog_exchanges{vhost}") >= 1
        assert metric(text, "rtroute_proxy_ready") == 1
        assert "rtroute_build_info{" in text and "process_open_fds" in text
    finally:
        conn.close()

    # a refusal: a frame larger than RabbitMQ reads before tune-ok
    client = RawClient(proxy.port)
    client.send(PROTOCOL_HEADER)
    assert client.method_ids()[:2] == (10, 10)
    client.send(struct.pack(">BHI", 1, 0, 1 << 20))
    assert client.closed()
    client.close()

    def counted() -> bool:
        text = http_get(http, "/metrics")[1]
        return metric(text, 'rtroute_proxy_refusals_total{kind="frame_too_large"}') == 1 \
            and metric(text, "rtroute_proxy_client_connections") == 0 \
            and metric(text, "rtroute_proxy_publishes_rewritten_total") == 1

    wait_for(counted, timeout=10)
    status = json.loads(http_get(http, "/status")[1])
    assert status["healthy"] and status["listening"] and "metrics" not in status


def test_readyz_is_503_with_the_reason_while_the_broker_is_down_then_200_quietly(proxies):
    http, broker_port = free_port(), free_port()
    proxy = proxies("--http", f"127.0.0.1:{http}", broker=broker_uri_on(broker_port))
    start = len(proxy.log_path.read_text().splitlines())
    time.sleep(5)
    code, body = http_get(http, "/readyz")
    assert code == 503
    reason = json.loads(body)["reason"]
    assert "not ready" in reason and "refused" in reason, reason
    lines = proxy.log_path.read_text().splitlines()[start:]
    # one attempt in 0.5, 1, 2, 4 s: each logged by rtroute, none by pika
    assert 1 <= len(lines) <= 10, "\n".join(lines)
    assert not [line for line in lines if "pika" in line or " ERROR " in line], lines
    assert "Traceback" not in proxy.log_path.read_text()
    status = json.loads(http_get(http, "/status")[1])
    assert status["catalogs"][0]["ready"] is False
    assert metric(http_get(http, "/metrics")[1], "rtroute_proxy_ready") == 0

    relay = Relay(broker_port)  # the broker "comes up"
    try:
        wait_for(lambda: http_get(http, "/readyz")[0] == 200, timeout=30)
    finally:
        relay.close()


def test_readyz_is_503_while_the_catalog_has_lost_its_broker_connection(proxies):
    # before: 200 through a broker outage, while every new client got 541
    http, broker_port = free_port(), free_port()
    relay = Relay(broker_port)
    proxy = proxies("--http", f"127.0.0.1:{http}", broker=broker_uri_on(broker_port))
    try:
        wait_for(lambda: http_get(http, "/readyz")[0] == 200, timeout=30)
    finally:
        relay.close()  # the broker goes away
    wait_for(lambda: http_get(http, "/readyz")[0] == 503, timeout=10)
    reason = json.loads(http_get(http, "/readyz")[1])["reason"]
    assert "lost its broker connection" in reason, reason
    assert metric(http_get(http, "/metrics")[1], "rtroute_proxy_ready") == 0
    relay = Relay(broker_port)  # and comes back
    try:
        wait_for(lambda: http_get(http, "/readyz")[0] == 200, timeout=30)
    finally:
        relay.close()
    assert "Traceback" not in proxy.log_path.read_text()


def run_proxy(*args: str) -> subprocess.CompletedProcess:
    """`rtroute proxy ARGS` to its end (a startup error), against a port nothing listens on
    (the URI in RTROUTE_URI, as the README says)."""
    return subprocess.run(
        [sys.executable, "-m", "rtroute.cli", "proxy", *args], capture_output=True, text=True,
        timeout=60, check=False, env=dict(os.environ, RTROUTE_URI=broker_uri_on(free_port())))


@pytest.mark.parametrize("taken", ["amqp", "http"])
def test_a_port_in_use_is_one_line_and_a_failure(taken):
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        listen, http = (port, free_port()) if taken == "amqp" else (free_port(), port)
        done = run_proxy("--listen", f"127.0.0.1:{listen}", "--http", f"127.0.0.1:{http}")
    assert done.returncode != 0
    output = done.stdout + done.stderr
    assert "Traceback" not in output
    what = "http listen" if taken == "http" else "listen"
    assert output.strip().splitlines() == [
        f"Error: {what} 127.0.0.1:{port}: address already in use"]


def test_an_ops_endpoint_beyond_loopback_needs_a_token():
    done = run_proxy("--listen", f"127.0.0.1:{free_port()}", "--http", f"0.0.0.0:{free_port()}")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "token" in done.stderr


@pytest.mark.parametrize("level", ["debug", "DEBUG"])
def test_log_level_takes_either_case(proxies, level):
    proxy = proxies("--log-level", level)
    # pika follows --log-level DEBUG (and only DEBUG): the lower case is understood as such
    wait_for(lambda: " DEBUG pika." in proxy.log_path.read_text(), timeout=10)


def test_log_format_json_writes_one_object_per_line(proxies, exchange_name):
    proxy = proxies("--log-format", "json")
    conn = pika.BlockingConnection(pika.URLParameters(proxy.uri))
    assert_round_trip(conn.channel(), exchange_name, b"logged")
    conn.close()
    assert proxy.terminate() == 0
    lines = proxy.log_path.read_text().splitlines()
    entries = [json.loads(line) for line in lines]
    assert entries and all({"ts", "level", "logger", "message"} <= set(e) for e in entries)
    assert any(e["message"].startswith("listening on ") for e in entries)
    # the last word is that it stopped, and how
    assert entries[-1]["message"].startswith("proxy stopped: 1 client connections served"), \
        entries[-1]
    assert any(e["message"].startswith("signal 15: stopping") for e in entries)


def test_the_config_file_can_open_the_ops_endpoint(proxies, tmp_path):
    http = free_port()
    config = tmp_path / "rtroute.toml"
    config.write_text(f'[proxy]\nhttp = "127.0.0.1:{http}"\n')
    proxies("-c", str(config))
    assert http_get(http, "/livez")[0] == 200


def test_a_password_given_with_uri_on_the_command_line_is_warned_about(proxies):
    proxy = proxies()  # the fixture passes --uri with the broker's password
    assert "RTROUTE_URI" in proxy.log_path.read_text()
    assert "holds a password" in proxy.log_path.read_text()
