"""The body of ``rtroute publish --route-locally``: one message (:func:`publish_one_routed`) or
N (:func:`publish_routed`) through :class:`RTopicPublisher`.

Routes each message on this side with the native core and publishes it once to
``NAME.bindings`` (see :mod:`rtroute.publisher`); for N, prints progress about once a second
and returns the figures as :func:`rtroute.amqp.publish_tool.publish` does.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import pika

from rtroute.amqp.uri import mask_uri
from rtroute.publisher import PUBLISHED_KEY_HEADER, MessageFuture, RTopicPublisher

__all__ = ["publish_one_routed", "publish_routed"]


def publish_routed(
    uri: str,
    exchange: str,
    routing_key: str,
    count: int,
    size: int,
    management_uri: str | None = None,
    window: int = 1000,
    headers: dict[str, Any] | None = None,
    persistent: bool = False,
    echo: Callable[[str], Any] = print,
    progress_interval: float = 1.0,
    delivery: str = "bcc",
    published_key_header: str | None = PUBLISHED_KEY_HEADER,
) -> dict[str, Any]:
    """Publish ``count`` messages of ``size`` bytes with publisher-side routing and wait for
    every confirm.

    Returns:
        ``{"published", "acked", "failed", "unroutable", "seconds", "msgs_per_s", "error",
        ...}``; ``seconds`` runs from the first publish to the last confirm.

    Raises:
        ValueError: a malformed URI.
        ConnectionError: the publisher could not start (the message says why).
    """
    body = b"x" * size
    # none unless needed: a message without properties is sent from frames built once
    properties = pika.BasicProperties(delivery_mode=pika.DeliveryMode.Persistent) \
        if persistent else None
    failures: list[str] = []

    def on_done(future: MessageFuture) -> None:
        error = future.exception()
        if error is not None and len(failures) < 5:
            failures.append(f"{type(error).__name__}: {error}")

    with RTopicPublisher(uri, exchange, management_uri=management_uri, window=window,
                         connection_name="rtroute publish --route-locally",
                         delivery=delivery,
                         published_key_header=published_key_header) as pub:
        echo(f"routing on this side: {len(pub.bindings)} binding(s) of {exchange}.bindings")
        started = last = time.perf_counter()
        for i in range(count):
            pub.publish(routing_key, body, properties, headers).add_done_callback(on_done)
            now = time.perf_counter()
            if progress_interval and now - last >= progress_interval:
                last = now
                echo(f"published {i + 1}/{count}, confirmed {pub.confirmed}, "
                     f"{pub.confirmed / (now - started):,.0f} msg/s")
        pub.wait_for_confirms()
        seconds = time.perf_counter() - started
        status = pub.status()
    result = {
        "uri": mask_uri(uri),
        "exchange": exchange,
        "routing_key": routing_key,
        "count": count,
        "size": size,
        "published": count,
        "acked": status["confirmed"],
        "failed": status["failed"],
        "unroutable": status["unroutable"],
        "seconds": seconds,
        "msgs_per_s": status["confirmed"] / seconds if seconds > 0 else 0.0,
        "error": failures[0] if failures else None,
    }
    echo(f"{count} routed here and published to {exchange}.bindings in {seconds:.2f} s: "
         f"{result['msgs_per_s']:,.0f} msg/s; confirmed {result['acked']}, failed "
         f"{result['failed']} (unroutable {result['unroutable']})"
         + (f"; first failure: {failures[0]}" if failures else ""))
    return result



def publish_one_routed(uri: str, exchange: str, routing_key: str, body: bytes,
                       properties: pika.BasicProperties | None = None,
                       management_uri: str | None = None, mandatory: bool = False,
                       delivery: str = "bcc",
                       published_key_header: str | None = PUBLISHED_KEY_HEADER,
                       timeout: float = 30.0) -> tuple[str, ...]:
    """Route one message on this side and publish it to ``NAME.bindings``; wait for its
    confirm. The ``CC``/``BCC`` of ``properties.headers`` are routed and applied as by the
    plugin.

    Returns:
        the binding keys it matched (empty: unroutable; without ``mandatory`` that is no error,
        as for the plugin).

    Raises:
        ValueError: a malformed URI.
        ConnectionError: the publisher could not start (the message says why).
        rtroute.publisher.PublishError: nacked, returned (``mandatory``) or not confirmed.
        TimeoutError: no confirm within ``timeout`` seconds.
    """
    with RTopicPublisher(uri, exchange, management_uri=management_uri, window=1,
                         connection_name="rtroute publish --route-locally",
                         delivery=delivery, published_key_header=published_key_header) as pub:
        future = pub.publish(routing_key, body, properties, mandatory=mandatory)
        future.result(timeout)
        return future.matched
