"""RabbitMQ streams for the stream tests: declare, publish with varied keys and headers, read
them back as a plain pika consumer, and what the library's routing makes of them."""
from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid

import pika

from rtroute import RTopicExchange
from rtroute.bench.spark_stream import temporary_stream
from rtroute.spark.batches import header_text
from rtroute.spark.stream_consumer import OFFSET_HEADER

from .conftest import plugin_bindings, random_messages


def rabbit_stream(uri: str, label: str = "spark-stream") -> contextlib.AbstractContextManager[str]:
    """A new stream and a fanout exchange of the same name bound to it, deleted after (the
    bench's :func:`~rtroute.bench.spark_stream.temporary_stream`)."""
    return temporary_stream(uri, f"rtroute-test.{label}.{uuid.uuid4().hex[:8]}")


def messages(count: int, seed: int, first_id: int = 0) -> list[dict]:
    """``count`` messages over the plugin's words (conftest's ``random_messages``): wildcard
    and concrete keys, CC/BCC (with non-string elements), other headers, none; an id in
    ``message_id`` and the body."""
    out = []
    for i, message in enumerate(random_messages(count, seed=seed)):
        number = first_id + i
        headers = json.loads(message["headers"]) if message["headers"] is not None else None
        if headers is not None and "n" in headers:
            headers["n"] = number
        out.append({"id": f"m{number}", "routing_key": message["routing_key"],
                    "headers": headers, "body": f"body {number}".encode(),
                    "timestamp": 1_700_000_000 + number})
    return out


def publish(uri: str, exchange: str, batch: list[dict]) -> None:
    """Publishes ``batch`` to ``exchange`` with confirms: once this returns, the stream holds
    every message (confirmed = committed, so consumers can see it)."""
    connection = pika.BlockingConnection(pika.URLParameters(uri))
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        for message in batch:
            channel.basic_publish(exchange, message["routing_key"], message["body"],
                                  pika.BasicProperties(headers=message["headers"],
                                                       message_id=message["id"],
                                                       timestamp=message["timestamp"]))
    finally:
        connection.close()


class PlainConsumer(threading.Thread):
    """Another consumer of the stream, a plain pika one from ``first``: runs beside the reader
    under test until it has ``count`` messages (or ``timeout`` passes).

    Attributes:
        got: ``{offset: (routing_key, headers without x-stream-offset, body, message_id)}``.
    """

    def __init__(self, uri: str, stream: str, count: int, timeout: float = 120) -> None:
        super().__init__(name=f"plain-consumer-{stream}", daemon=True)
        self.uri, self.stream, self.count, self.timeout = uri, stream, count, timeout
        self.got: dict[int, tuple] = {}
        self.error: BaseException | None = None
        self.consuming = threading.Event()

    def run(self) -> None:
        try:
            connection = pika.BlockingConnection(pika.URLParameters(self.uri))
            channel = connection.channel()
            channel.basic_qos(prefetch_count=500)

            def on_message(ch, method, properties, body):
                headers = dict(properties.headers)
                offset = int(headers.pop(OFFSET_HEADER))
                self.got[offset] = (method.routing_key, headers or None, body,
                                    properties.message_id)
                ch.basic_ack(method.delivery_tag)

            channel.basic_consume(self.stream, on_message,
                                  arguments={OFFSET_HEADER: "first"})
            self.consuming.set()
            deadline = time.monotonic() + self.timeout
            while len(self.got) < self.count and time.monotonic() < deadline:
                connection.process_data_events(0.1)
            connection.close()
        except BaseException as exc:  # noqa: BLE001 - reported to the test by wait()
            self.error = exc
            self.consuming.set()

    def wait(self) -> dict[int, tuple]:
        """The messages it read, once it has them all (re-raises what made it fail)."""
        self.join(self.timeout + 10)
        if self.error is not None:
            raise self.error
        return self.got


def read_back(uri: str, stream: str, count: int) -> dict[int, tuple]:
    """What a plain consumer reads from ``first`` (``count`` messages expected)."""
    consumer = PlainConsumer(uri, stream, count, timeout=60)
    consumer.start()
    return consumer.wait()


def exchange() -> RTopicExchange:
    """The library's rtopic exchange with the bindings the tests route with."""
    ex = RTopicExchange()
    for destination, key in plugin_bindings():
        ex.bind(destination, key)
    return ex


def expected_routing(got: dict[int, tuple]) -> dict[int, tuple[list[str], dict[str, str]]]:
    """Each message's destinations (sorted) and delivered headers (as ``route`` renders
    them), routed by the library as a plain consumer of the stream received it."""
    ex = exchange()
    out = {}
    for offset, (key, headers, _body, _id) in got.items():
        result = ex.route(key, headers)
        out[offset] = (sorted(result.destinations),
                       {k: header_text(v) for k, v in result.headers.items()})
    return out


def stored_headers(published: dict | None, broker_version: tuple[int, ...]) -> dict | None:
    """The headers a stream gives back for ``published`` (measured on 3.10.8, 4.0.5 and
    4.3.6): BCC is stripped (as on every queue); array and table values are dropped, except,
    from 4.0, under ``CC`` and under names starting with ``x-`` (which 4.x carries as message
    annotations)."""
    if published is None:
        return None
    kept = {name: value for name, value in published.items() if name != "BCC"
            and (not isinstance(value, (list, dict))
                 or (broker_version >= (4,) and (name == "CC" or name.startswith("x-"))))}
    return kept or None


def bindings_file(directory) -> str:
    """The tests' bindings as a TOML file (``rtroute spark ... --bindings``)."""
    by_destination: dict[str, list[str]] = {}
    for destination, key in plugin_bindings():
        by_destination.setdefault(destination, []).append(key)
    path = directory / "bindings.toml"
    path.write_text("".join(f"{d} = {json.dumps(keys)}\n" for d, keys in
                            sorted(by_destination.items())))
    return str(path)
