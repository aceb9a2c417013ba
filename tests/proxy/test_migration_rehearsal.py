"""The move off the plugin, rehearsed as docs/migrate.md's way 1 says (a new 4.3 broker beside
the old one): RabbitMQ 4.0.5 with the x-rtopic plugin v4.0.9 (``RTROUTE_TEST_PLUGIN4_URI``; CI
enables the plugin on its 4.0 node while the 4.3 leg runs) holds a plugin user's topology and a
backlog; pika and Node (amqplib) publishers and consumers run throughout. By the guide: the
definitions are imported into the broker under test (4.3.6 in CI) with ``rtroute definitions
import``, ``rtroute proxy`` starts in front of it, the consumers move (a restart with another
port, the only change), then the publishers, then ``rtroute shovel run`` moves what is still
queued on the old broker. Every message published before, during and after the move reaches
every queue the plugin's rules send it to, exactly once (the clients stop cleanly, so the
at-least-once window of docs/migrate.md is empty here)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import uuid
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pika
import pytest

from rtroute.amqp import ManagementClient
from rtroute.sidecar.demo import PLUGIN_QUEUES, PLUGIN_README_TABLE

from ..conftest import BROKER_URI, MANAGEMENT_URI, wait_for
from ..node_amqplib import amqplib_script
from .plugin_brokers import export_vhost, in_vhost, make_vhost, plugin_broker, rtroute_cli

pytestmark = pytest.mark.broker

NODE_DIR = Path(__file__).resolve().parent / "node"
EXCHANGE = "orders"
KEYS = [key for key, _queues in PLUGIN_README_TABLE]
PY_QUEUES, NODE_QUEUES = ["A", "B", "C"], ["D", "E", "F"]


def expected(client: str, end: int) -> dict[str, set[str]]:
    """What each queue must hold of ``client``'s messages 0..end-1, by the plugin's rules."""
    out: dict[str, set[str]] = {queue: set() for queue in PLUGIN_QUEUES}
    for seq in range(end):
        for queue in dict(PLUGIN_README_TABLE)[KEYS[seq % len(KEYS)]]:
            out[queue].add(f"{client}-{seq}")
    return out


def _depths(url: str) -> dict[str, int]:
    """Messages in each queue of the plugin's README table at ``url``."""
    conn = pika.BlockingConnection(pika.URLParameters(url))
    try:
        ch = conn.channel()
        return {q: ch.queue_declare(q, passive=True).method.message_count
                for q in PLUGIN_QUEUES}
    finally:
        conn.close()


class PikaClient(threading.Thread):
    """A pika client in a thread of its own, until :meth:`stop`; an error fails the test."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url, self.error = url, None
        self.stopping = threading.Event()
        self.start()

    def run(self) -> None:
        try:
            conn = pika.BlockingConnection(pika.URLParameters(self.url))
            self.work(conn, conn.channel())
            conn.close()
        except Exception as exc:  # noqa: BLE001 - the test reports it
            self.error = exc

    def work(self, conn, ch) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert self.error is None, self.error


class PikaPublisher(PikaClient):
    """Publishes py-SEQ with confirms, one at a time, until stopped; ``next`` after it."""

    def __init__(self, url: str, first: int) -> None:
        self.next = first
        super().__init__(url)

    def work(self, conn, ch) -> None:
        ch.confirm_delivery()
        while not self.stopping.wait(0.005):
            ch.basic_publish(EXCHANGE, KEYS[self.next % len(KEYS)], f"py-{self.next}".encode())
            self.next += 1

    def stop(self) -> int:  # type: ignore[override]
        super().stop()
        return self.next


class PikaConsumer(PikaClient):
    """Consumes ``PY_QUEUES``, recording each body, then acking it, until stopped."""

    def __init__(self, url: str, got: Counter) -> None:
        self.got = got
        super().__init__(url)

    def work(self, conn, ch) -> None:
        ch.basic_qos(prefetch_count=10)
        for queue in PY_QUEUES:
            def on_message(ch, method, _props, body, queue=queue):
                self.got[(queue, body.decode())] += 1
                ch.basic_ack(method.delivery_tag)
            ch.basic_consume(queue, on_message)
        while not self.stopping.is_set():
            conn.process_data_events(time_limit=0.05)
        ch.cancel()


class NodeClient:
    """The Node client of tests/proxy/node/migrating_client.js, stopped with SIGTERM."""

    def __init__(self, script: Path, out: Path, *args: str) -> None:
        self.out = out
        self.proc = subprocess.Popen(["node", str(script), *args], stdout=out.open("w"),
                                     stderr=subprocess.STDOUT)

    def stop(self) -> str:
        self.proc.send_signal(signal.SIGTERM)
        assert self.proc.wait(30) == 0, self.out.read_text()[-2000:]
        return self.out.read_text()


def test_a_plugin_user_moves_to_the_new_broker_by_the_guide_and_loses_nothing(
        mgmt, proxies, tmp_path):
    old_amqp, old_http = plugin_broker("plugin-4.0")
    script = amqplib_script(NODE_DIR, "migrating_client.js")
    old = ManagementClient(old_http)
    user = pika.URLParameters(old_amqp).credentials
    vhost = f"rtroute-test-rehearsal-{uuid.uuid4().hex[:6]}"
    make_vhost(old, vhost, user.username)
    old_url = in_vhost(old_amqp, vhost)
    got: Counter = Counter()
    node_lines: list[str] = []
    try:
        conn = pika.BlockingConnection(pika.URLParameters(old_url))
        ch = conn.channel()
        ch.exchange_declare(EXCHANGE, "x-rtopic", durable=True)
        for queue, key in PLUGIN_QUEUES.items():
            ch.queue_declare(queue, durable=True)
            ch.queue_bind(queue, EXCHANGE, key)
        conn.close()

        # before: the publishers run against the plugin, a backlog builds up, then consumers
        keys = json.dumps(KEYS)
        py_pub = PikaPublisher(old_url, 0)
        node_pub = NodeClient(script, tmp_path / "node-pub-old.txt", "publish", old_url,
                              EXCHANGE, "node", "0", keys)
        wait_for(lambda: py_pub.next >= 30, 30)
        py_con = PikaConsumer(old_url, got)
        node_con = NodeClient(script, tmp_path / "node-con-old.txt", "consume", old_url,
                              *NODE_QUEUES)
        wait_for(lambda: sum(got.values()) >= 50, 30)

        # the guide's steps: import the converted definitions, start the proxy
        exported = tmp_path / "definitions.json"
        exported.write_text(json.dumps(export_vhost(old, vhost)))
        done = rtroute_cli("definitions", "import", str(exported), "--management-uri",
                        MANAGEMENT_URI)
        assert done.returncode == 0, done.stderr
        proxy = proxies()
        new_url = f"amqp://{user.username}:{user.password}@127.0.0.1:{proxy.port}/" \
                  f"{quote(vhost, safe='')}"
        old_port = str(pika.URLParameters(old_amqp).port)
        assert new_url == old_url.replace(f":{old_port}/", f":{proxy.port}/")  # only the port

        # consumers move first, then publishers (a restart with the new port each)
        py_con.stop()
        node_lines += node_con.stop().splitlines()
        py_con = PikaConsumer(new_url, got)
        node_con = NodeClient(script, tmp_path / "node-con-new.txt", "consume", new_url,
                              *NODE_QUEUES)
        # meanwhile what is published to the old broker waits there, in its queues
        moved_at = py_pub.next
        wait_for(lambda: py_pub.next >= moved_at + 20, 30)
        py_next = py_pub.stop()
        node_next = json.loads(node_pub.stop())["next"]
        py_pub = PikaPublisher(new_url, py_next)
        node_pub = NodeClient(script, tmp_path / "node-pub-new.txt", "publish", new_url,
                              EXCHANGE, "node", str(node_next), keys)

        # what is still queued on the old broker moves with a shovel, acked there once the
        # new broker confirmed it
        new_direct = BROKER_URI.rsplit("/", 1)[0] + "/" + quote(vhost, safe="")
        config = tmp_path / "move-queues.toml"
        config.write_text("".join(
            f'[[shovel]]\nname = "move-{queue}"\nqueue = "{queue}"\nack_mode = "on_confirm"\n'
            f'src_delete_after = "queue-length"\n'
            f'publish_fields = {{ exchange = "", routing_key = "{queue}" }}\n'
            f'[shovel.sources]\nbrokers = ["{old_url}"]\n'
            f'[shovel.destinations]\nbroker = "{new_direct}"\n' for queue in PLUGIN_QUEUES))
        left = _depths(old_url)
        assert sum(left.values()) > 0, left
        moved = subprocess.run([sys.executable, "-m", "rtroute.cli", "shovel", "run", "-c",
                                str(config), "--no-http", "--exit-when-done"],
                               capture_output=True, text=True, timeout=180, check=False)
        assert moved.returncode == 0, moved.stdout + moved.stderr
        assert sum(_depths(old_url).values()) == 0

        # after: a little more traffic on the new broker, then everyone stops
        wait_for(lambda: py_pub.next >= py_next + 30, 30)
        py_end = py_pub.stop()
        node_end = json.loads(node_pub.stop())["next"]
        want = {queue: expected("py", py_end)[queue] | expected("node", node_end)[queue]
                for queue in PLUGIN_QUEUES}

        def received() -> dict[str, set[str]]:
            seen = {queue: set() for queue in PLUGIN_QUEUES}
            for (queue, body) in got:
                seen[queue].add(body)
            lines = node_lines + (tmp_path / "node-con-new.txt").read_text().splitlines()
            for line in lines:
                queue, _, body = line.partition(" ")
                if queue in seen:
                    seen[queue].add(body)
            return seen

        wait_for(lambda: all(received()[q] >= want[q] for q in PY_QUEUES + NODE_QUEUES), 60)
        py_con.stop()
        node_lines += node_con.stop().splitlines()
        seen = received()
        for queue in PLUGIN_QUEUES:
            assert seen[queue] == want[queue], (queue, sorted(want[queue] - seen[queue])[:10],
                                                sorted(seen[queue] - want[queue])[:10])
        # exactly once: no body twice in a queue
        node_counts = Counter(tuple(line.partition(" ")[::2]) for line in node_lines)
        twice = [k for k, n in (got + node_counts).items() if n > 1]
        assert twice == [], twice[:10]
        assert py_end > py_next > 30 and node_end > node_next > 0
        print(f"rehearsal: pika published {py_end} ({py_next} to the old broker), Node "
              f"{node_end} ({node_next}); the shovel moved {sum(left.values())}; "
              f"{sum(len(v) for v in seen.values())} deliveries, each once")
    finally:
        old.request("DELETE", f"vhosts/{quote(vhost, safe='')}")
        if any(v["name"] == vhost for v in mgmt.request("GET", "vhosts") or []):
            mgmt.request("DELETE", f"vhosts/{quote(vhost, safe='')}")
