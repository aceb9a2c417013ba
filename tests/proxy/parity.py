"""One client scenario for the x-rtopic plugin and for `rtroute proxy`: what a pika client
observes (deliveries with the exchange and routing key seen, headers and properties, returns,
confirms, transactions, channel errors with code and text), as JSON, names normalised.

Run against the real plugin to record its observations (the tests compare the proxy's with
them; RabbitMQ 4.3, where no plugin starts, is compared with the 4.0.5 plugin's)::

    python -m tests.proxy.parity record amqp://guest:guest@127.0.0.1:5702/%2F \\
        tests/proxy/parity/plugin-3.10-pika.json
"""
from __future__ import annotations

import json
import sys
import time
import uuid
from typing import Any

import pika
import pika.exceptions

from rtroute.sidecar.demo import PLUGIN_QUEUES, PLUGIN_README_TABLE

MANY_KEYS = 7000  # bound to one queue: a match set larger than one header frame
BIG_BODY = 5 * 1024 * 1024


def _props(props: pika.BasicProperties) -> dict[str, Any]:
    seen = {k: getattr(props, k) for k in ("content_type", "correlation_id", "message_id",
                                           "priority", "delivery_mode", "type", "app_id")}
    seen["headers"] = props.headers
    return {k: v for k, v in seen.items() if v is not None}


def _drain(ch, queue: str) -> list[list[Any]]:
    got = []
    while True:
        method, props, body = ch.basic_get(queue, auto_ack=True)
        if method is None:
            return got
        shown = body.decode() if len(body) < 64 else f"<{len(body)} bytes>"
        got.append([shown, method.exchange, method.routing_key, _props(props)])


def _refusal(exc: BaseException) -> list[Any]:
    return [getattr(exc, "reply_code", None), getattr(exc, "reply_text", str(exc))]


class _Scenario:
    def __init__(self, uri: str, name: str) -> None:
        self.name = name
        self.conn = pika.BlockingConnection(pika.URLParameters(uri))
        self.out: dict[str, Any] = {}

    def channel(self, confirm: bool = True):
        ch = self.conn.channel()
        if confirm:
            ch.confirm_delivery()
        return ch

    def step(self, label: str, run) -> None:
        """Runs ``run()`` and records what it returned, or the channel error it raised."""
        try:
            self.out[label] = run()
        except pika.exceptions.ChannelClosedByBroker as exc:
            self.out[label] = {"channel closed": _refusal(exc)}
        except pika.exceptions.UnroutableError as exc:
            self.out[label] = {"returned": [[m.method.exchange, m.method.routing_key,
                                             m.method.reply_code, m.method.reply_text]
                                            for m in exc.messages]}
        except pika.exceptions.NackError:
            self.out[label] = {"nacked": True}

    def queues(self, ch, exchange: str, bindings: dict[str, str]) -> dict[str, str]:
        names = {}
        for q, key in bindings.items():
            names[q] = f"{exchange}.{q}"
            ch.queue_declare(names[q], exclusive=True)
            ch.queue_bind(names[q], exchange, key)
        return names

    def run(self) -> dict[str, Any]:
        name = self.name
        ch = self.channel()
        ch.exchange_declare(name, "x-rtopic")
        queues = self.queues(ch, name, PLUGIN_QUEUES)

        def drain_all() -> dict[str, list]:
            return {q: _drain(ch, queues[q]) for q in PLUGIN_QUEUES}

        def table() -> dict:
            for i, (key, _) in enumerate(PLUGIN_README_TABLE):
                ch.basic_publish(name, key, str(i).encode())
            return drain_all()

        def cc_bcc() -> dict:
            ch.basic_publish(name, "nothing.matches", b"cc", pika.BasicProperties(
                headers={"CC": ["server2.app2.mod1.warning"], "BCC": ["#.error"]}))
            return drain_all()

        def properties() -> dict:
            ch.basic_publish(name, "*.app1.mod1.info", b"props", pika.BasicProperties(
                content_type="text/plain", correlation_id="c-1", message_id="m-1",
                priority=3, delivery_mode=2, type="t", app_id="parity",
                headers={"x-int": 7, "x-str": "s", "x-list": ["a", 1],
                         "x-table": {"k": "v"}}))
            return drain_all()

        def no_headers() -> dict:
            ch.basic_publish(name, "server1.app1.mod1.info", b"plain")
            return drain_all()

        def mandatory_unroutable() -> str:
            ch.basic_publish(name, "no.match.here", b"m", mandatory=True)
            return "confirmed"

        def unroutable_confirmed() -> str:
            ch.basic_publish(name, "no.match.here", b"u")
            return "confirmed"

        def transactions() -> dict:
            tx = self.channel(confirm=False)
            tx.tx_select()
            tx.basic_publish(name, "server1.app1.mod1.info", b"rolled back")
            tx.tx_rollback()
            after_rollback = _drain(ch, queues["A"])
            tx.basic_publish(name, "server1.app1.mod1.info", b"committed")
            tx.tx_commit()
            tx.close()
            return {"rollback": after_rollback, "commit": _drain(ch, queues["A"])}

        def exchange_to_exchange() -> list:
            dest = f"{name}.e2e"
            ch.exchange_declare(dest, "fanout", auto_delete=True)
            ch.exchange_bind(dest, name, "server9.app1.mod1.info")
            queue = f"{name}.e2e-q"
            ch.queue_declare(queue, exclusive=True)
            ch.queue_bind(queue, dest, "")
            ch.basic_publish(name, "*.app1.mod1.info", b"e2e")
            drain_all()
            got = _drain(ch, queue)
            ch.exchange_unbind(dest, name, "server9.app1.mod1.info")
            return got

        def big_body() -> dict:
            ch.basic_publish(name, "server1.app1.mod1.info", b"b" * BIG_BODY)
            return drain_all()

        def literal_wildcard_binding() -> dict:
            more = self.queues(ch, name, {"W": "lit.*.word", "X": "lit.x.word"})
            ch.basic_publish(name, "lit.x.word", b"lit")
            return {q: _drain(ch, queue) for q, queue in more.items()}

        def many_keys() -> list:
            queue = f"{name}.many"
            ch.queue_declare(queue, exclusive=True)
            for i in range(MANY_KEYS):
                ch.queue_bind(queue, name, f"key.{i:05d}")
            time.sleep(0)  # (bindings through the proxy are known at bind-ok)
            ch.basic_publish(name, "key.#", b"many")
            return _drain(ch, queue)

        def redeclare_over_topic() -> str:
            other = self.channel()
            other.exchange_declare(f"{name}.topic", "topic", auto_delete=True)
            other.exchange_declare(f"{name}.topic", "x-rtopic", auto_delete=True)
            return "declared"

        def passive_missing() -> str:
            self.channel().exchange_declare(f"{name}.missing", "x-rtopic", passive=True)
            return "declared"

        def passive_other_type() -> str:
            other = self.channel()
            other.exchange_declare(f"{name}.fan", "fanout", auto_delete=True)
            other.exchange_declare(f"{name}.fan", "x-rtopic", passive=True)
            other.exchange_delete(f"{name}.fan")
            return "declared"

        def cc_not_an_array() -> str:
            self.channel().basic_publish(name, "server1.app1.mod1.info", b"bad",
                                         pika.BasicProperties(headers={"CC": "a.b"}))
            return "confirmed"

        def auto_delete() -> str:
            other = self.channel()
            auto = f"{name}.auto"
            other.exchange_declare(auto, "x-rtopic", auto_delete=True)
            queue = other.queue_declare("", exclusive=True).method.queue
            other.queue_bind(queue, auto, "a.b")
            other.queue_unbind(queue, auto, "a.b")
            deadline = time.monotonic() + 10
            while True:  # the plugin at once; a proxy once the broker's event reached it
                probe = self.channel()
                try:
                    probe.exchange_declare(auto, "x-rtopic", passive=True)
                except pika.exceptions.ChannelClosedByBroker as exc:
                    return f"gone: {exc.reply_code}"
                probe.close()
                if time.monotonic() > deadline:
                    return "stays"
                time.sleep(0.1)

        def deleted() -> str:
            other = self.channel()
            gone = f"{name}.deleted"
            other.exchange_declare(gone, "x-rtopic")
            other.exchange_delete(gone)
            other.basic_publish(gone, "a.b", b"x")
            return "confirmed"

        def internal() -> str:
            other = self.channel()
            inside = f"{name}.internal"
            other.exchange_declare(inside, "x-rtopic", internal=True, auto_delete=True)
            queue = other.queue_declare("", exclusive=True).method.queue
            other.queue_bind(queue, inside, "a.b")
            other.basic_publish(inside, "a.b", b"x")
            return "confirmed"

        for label, run in [("table", table), ("internal", internal), ("cc_bcc", cc_bcc), ("properties", properties),
                           ("no_headers", no_headers),
                           ("mandatory_unroutable", mandatory_unroutable),
                           ("unroutable_confirmed", unroutable_confirmed),
                           ("transactions", transactions),
                           ("exchange_to_exchange", exchange_to_exchange),
                           ("big_body", big_body),
                           ("literal_wildcard_binding", literal_wildcard_binding),
                           ("many_keys", many_keys),
                           ("redeclare_over_topic", redeclare_over_topic),
                           ("passive_missing", passive_missing),
                           ("passive_other_type", passive_other_type),
                           ("cc_not_an_array", cc_not_an_array), ("auto_delete", auto_delete),
                           ("deleted", deleted)]:
            self.step(label, run)
        ch.exchange_delete(name)
        self.conn.close()
        return self.out


def normalise(observations: dict[str, Any], name: str) -> dict[str, Any]:
    """``name`` (random per run) replaced by ``NAME`` everywhere."""
    return json.loads(json.dumps(observations, sort_keys=True, default=repr).replace(
        name, "NAME"))


def observe(uri: str) -> dict[str, Any]:
    """The scenario's observations through ``uri`` (a proxy, or a broker with the plugin)."""
    name = f"parity-{uuid.uuid4().hex[:8]}"
    return normalise(_Scenario(uri, name).run(), name)


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "record":
        sys.exit("usage: python -m tests.proxy.parity record AMQP_URI OUT.json")
    with open(sys.argv[3], "w") as out:
        json.dump(observe(sys.argv[2]), out, indent=1, sort_keys=True)
        out.write("\n")
