"""`rtroute demo`: the rtopic plugin's README example, end to end through a real sidecar.

Starts `rtroute run` for a demo exchange, binds queues A-F to ``NAME.bindings`` with the
plugin's keys, publishes the plugin's example routing keys (plus one CC and one blind copy),
and prints which queue got what. Everything it declares is deleted afterwards; its queues are
exclusive, so they go with its connection whatever happens (and RabbitMQ 4.x, which deprecates
transient non-exclusive queues, takes them as they are).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterable
from typing import Any, Callable

import pika

from rtroute.amqp import connect_blocking, mask_uri
from rtroute.ops.netaddr import free_port
from rtroute.routing import RTopicExchange

PLUGIN_QUEUES = {
    "A": "server1.app1.mod1.info",
    "B": "server1.app1.mod1.error",
    "C": "server1.app2.mod1.info",
    "D": "server2.app2.mod1.warning",
    "E": "server1.app1.mod2.info",
    "F": "server2.app1.mod1.info",
}
# the plugin README's publish keys and the queues (of PLUGIN_QUEUES) each one reaches
PLUGIN_README_TABLE = [
    ("server1.app1.mod1.info", "A"),
    ("*.app1.mod1.info", "AF"),
    ("#.info", "ACEF"),
    ("#.mod1.info", "ACF"),
    ("#", "ABCDEF"),
    ("server1.app1.mod1.*", "AB"),
    ("server1.app1.#", "ABE"),
]
EXAMPLES = [
    ("server1.app1.mod1.info", {}),
    ("*.app1.mod1.info", {}),
    ("#.info", {}),
    ("#.mod1.info", {}),
    ("#", {}),
    ("server1.app1.mod1.*", {}),
    ("server1.app1.#", {}),
    ("server1.app1.mod1.info", {"CC": ["#.warning"], "x-rtroute-bcc": ["*.app2.#"]}),
]


def run(uri: str, echo: Callable[[str], None] = print,
        management_uri: str | None = None) -> dict[str, list[str]]:
    """Runs the demo; returns, per queue, the routing keys it received.

    Args:
        uri: the broker.
        echo: where the progress and the result table go.
        management_uri: that broker's management API, for the sidecar; None lets the sidecar
            derive it (``http://HOST:15672/``), which is right only for a broker on the
            default ports: the sidecar refuses an API that answers for another broker.

    Raises:
        RuntimeError: the sidecar exited or did not become ready.
    """
    name = f"rtroute.sidecar.demo.{uuid.uuid4().hex[:6]}"
    port = free_port()
    echo(f"broker: {mask_uri(uri)}; starting the sidecar for exchange {name!r} ...")
    env = dict(os.environ, RTROUTE_URI=uri)  # not in argv, where ps shows it to every user
    if management_uri:
        env["RTROUTE_MANAGEMENT_URI"] = management_uri
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtroute.cli", "run", "--rtopic", name,
         "--http", f"127.0.0.1:{port}", "--log-level", "WARNING"], env=env)
    queues = {q: f"{name}.{q}" for q in PLUGIN_QUEUES}
    conn = None
    try:  # from here on the sidecar is stopped whatever happens (a broker that is down too)
        conn = connect_blocking(uri)
        ch = conn.channel()
        _wait_status(port, name, None, proc)
        for q, key in PLUGIN_QUEUES.items():
            ch.queue_declare(queues[q], exclusive=True)
            ch.queue_bind(queues[q], f"{name}.bindings", key)
            echo(f"  queue {q} bound to {name}.bindings with {key!r}")
        _wait_status(port, name, len(PLUGIN_QUEUES), proc)
        ch.confirm_delivery()
        for key, headers in EXAMPLES:
            ch.basic_publish(name, key, key.encode(), pika.BasicProperties(headers=headers))
        # what the plugin would deliver, computed by the library: the sidecar must match it
        library = RTopicExchange(name)
        for q, key in PLUGIN_QUEUES.items():
            library.bind(q, key)
        expected = sum(len(library.route(key, {"CC": h.get("CC", []),
                                               "BCC": h.get("x-rtroute-bcc", [])}).destinations)
                       for key, h in EXAMPLES)
        deadline = time.monotonic() + 20
        while sum(ch.queue_declare(q, passive=True).method.message_count
                  for q in queues.values()) < expected and time.monotonic() < deadline:
            time.sleep(0.05)
        received: dict[str, list[str]] = {}
        for q, queue in queues.items():
            received[q] = []
            while True:
                method, props, _body = ch.basic_get(queue, auto_ack=True)
                if method is None:
                    break
                note = " (CC)" if (props.headers or {}).get("CC") else ""
                received[q].append(method.routing_key + note)
        echo("")
        echo(f"{'published routing key':<28} received by")
        notes: list[str] = []
        for key, headers in EXAMPLES:
            label = key
            if headers:  # the headers go in a footnote: the key column stays aligned
                notes.append(f"[{len(notes) + 1}] with CC {headers['CC']} and the BCC alias "
                             f"{headers['x-rtroute-bcc']}")
                label = f"{key} [{len(notes)}]"
            who = [q for q in queues if any(r.split(" ")[0] == key and
                                            (bool(headers) == r.endswith("(CC)"))
                                            for r in received[q])]
            echo(f"{label:<28} {', '.join(who) or '-'}")
        echo("")
        for note in notes:
            echo(note)
        echo("(the blind copies carry no trace of the BCC alias header; CC stays visible)")
        return received
    finally:
        proc.terminate()
        proc.wait(30)
        if conn is not None and conn.is_open:
            _delete_objects(conn, name, queues.values())


def _delete_objects(conn: Any, name: str, queues: Iterable[str]) -> None:
    """The demo's exchanges and queues go (a connection lost meanwhile leaves them: the
    exclusive queues go with it, the exchanges are named for this run only)."""
    try:
        ch = conn.channel()
        for queue in queues:
            ch.queue_delete(queue)
        for x in (name, f"{name}.bindings"):
            ch.exchange_delete(x)
        ch.queue_delete(f"rtroute.ingress.{name}")
        conn.close()
    except pika.exceptions.AMQPError:
        pass


def _wait_status(port: int, name: str, bindings: int | None, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the sidecar exited with status {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=2) as r:
                ex = json.load(r)["exchanges"][0]
            if ex["state"] == "running" and bindings in (None, ex["bindings_known"]):
                return
        except (OSError, KeyError, IndexError, ValueError):
            pass
        time.sleep(0.1)
    raise RuntimeError("the sidecar did not become ready within 30 s")
