"""The body of ``rtroute publish``: one message, confirmed (:func:`publish_one`), or N
messages through a :class:`ConfirmWindow` (:func:`publish`, the load generator).

:func:`publish` runs a pika ``SelectConnection`` in the calling thread, keeps up to ``window``
publishes in flight, optionally paces them to ``rate`` messages per second, prints progress
about once a second and returns the figures (rate and confirm latency percentiles) as a dict.
"""
from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Callable

import pika

from rtroute.amqp import frames
from rtroute.amqp.confirm_window import ConfirmWindow, Outcome, PublishFuture
from rtroute.amqp.connection import ReconnectingConnection
from rtroute.amqp.content_header import content_header_frame
from rtroute.amqp.uri import mask_uri, parse_uri

__all__ = ["PublishOneError", "publish", "publish_one"]

_BATCH = 500  # publishes per ioloop turn, so that confirms are read in between


HEADER_VARIANTS = 1000  # distinct values of ``vary_header`` (their frames are built once)


def _variant_count(keys: int) -> int:
    """At least :data:`HEADER_VARIANTS`, a multiple of ``keys`` (so that message n keeps key
    n % keys)."""
    return -(-HEADER_VARIANTS // keys) * keys


def publish(
    uri: str,
    exchange: str,
    routing_key: str | Sequence[str],
    count: int,
    size: int,
    rate: float | None = None,
    window: int = 1000,
    headers: dict[str, Any] | None = None,
    persistent: bool = False,
    echo: Callable[[str], Any] = print,
    mandatory: bool = False,
    progress_interval: float = 1.0,
    vary_header: str | None = None,
) -> dict[str, Any]:
    """Publish ``count`` messages of ``size`` bytes and wait for every confirm.

    Args:
        uri: broker URI (see :mod:`rtroute.amqp.uri`).
        exchange, routing_key: where to publish (a list of routing keys: used in turn).
        count, size: how many messages, and the body size in bytes.
        rate: messages per second at most (None: as fast as the window allows).
        window: publishes in flight at most.
        headers: message headers, e.g. ``{"CC": ["k2"], "BCC": ["k3"]}``.
        persistent: delivery mode 2.
        echo: where progress lines go (``print`` by default; ``click.echo`` from the CLI).
        mandatory: publish with ``mandatory`` and count returns.
        progress_interval: seconds between progress lines (0 for none).
        vary_header: a header whose value changes from message to message (its number
            modulo :data:`HEADER_VARIANTS`, beside ``headers``), as a client that stamps each
            message sends it.

    Returns:
        ``{"published", "acked", "nacked", "returned", "failed", "seconds", "msgs_per_s",
        "confirm_latency_ms": {"p50", "p99", "max"}, "error", ...}``; ``seconds`` runs from the
        first publish to the last confirm, ``msgs_per_s`` is settled messages over that time,
        and ``error`` says why the run ended early (None if it did not).

    Raises:
        ValueError: a malformed URI or argument.
    """
    parse_uri(uri)
    if count < 0 or size < 0 or window < 1 or (rate is not None and rate <= 0):
        raise ValueError("need count >= 0, size >= 0, window >= 1 and rate > 0")
    body = b"x" * size
    keys = [routing_key] if isinstance(routing_key, str) else list(routing_key)
    if not keys:
        raise ValueError("need at least one routing key")
    # message n is published with keys[n % len(keys)] and variants[n % len(variants)]
    variants = [pika.BasicProperties(
        headers=(dict(headers or {}, **{vary_header: i}) if vary_header else
                 dict(headers) if headers else None),
        delivery_mode=pika.DeliveryMode.Persistent if persistent else None,
    ) for i in range(_variant_count(len(keys)) if vary_header else 1)]
    named = keys  # as given, for the result
    if len(variants) > 1:
        keys = [keys[i % len(keys)] for i in range(len(variants))]
    latencies: list[float] = []
    outcomes = dict.fromkeys(Outcome, 0)
    run: dict[str, Any] = {"published": 0, "started": None, "finished": None, "error": None,
                           "window": None, "last_progress": 0.0, "frames": None}

    def settled_count() -> int:
        return sum(outcomes.values())

    def on_settled(future: PublishFuture) -> None:
        outcomes[future.outcome] += 1
        if future.outcome is not Outcome.FAILED:
            latencies.append(future.latency)
        if settled_count() == count:
            run["finished"] = time.perf_counter()
            connection.stop()

    def progress(force: bool = False) -> None:
        now = time.perf_counter()
        if not progress_interval or run["started"] is None:
            return
        if not force and now - run["last_progress"] < progress_interval:
            return
        run["last_progress"] = now
        elapsed = max(now - run["started"], 1e-9)
        echo(f"published {run['published']}/{count}, confirmed {settled_count()}, "
             f"in flight {run['window'].in_flight}, {settled_count() / elapsed:,.0f} msg/s")

    def pump() -> None:
        confirm_window: ConfirmWindow = run["window"]
        if confirm_window.closed or run["published"] >= count:
            return
        budget = min(count - run["published"], _BATCH,
                     confirm_window.window - confirm_window.in_flight)
        paced = False
        if rate is not None:
            allowed = int((time.perf_counter() - run["started"]) * rate) + 1 - run["published"]
            if allowed < budget:
                budget, paced = max(allowed, 0), True
        fast = run["frames"]
        first = run["published"]
        if fast is not None:  # the frames of each routing key are built once, used in turn
            for n in range(first, first + budget):
                data, frame_count = fast[n % len(fast)]
                confirm_window.publish_frames(exchange, keys[n % len(keys)], data,
                                              frame_count, body if mandatory else None,
                                              mandatory, callback=on_settled)
        else:
            for n in range(first, first + budget):
                confirm_window.publish(exchange, keys[n % len(keys)], body,
                                       variants[n % len(variants)], mandatory,
                                       callback=on_settled)
        run["published"] += budget
        progress()
        if run["published"] >= count:
            return
        if paced:
            connection.ioloop.call_later(max(1.0 / rate, 0.001), pump)
        elif confirm_window.has_room:
            connection.ioloop.call_later(0, pump)
        # else: on_writable calls pump when confirms free the window

    def ticker() -> None:
        if run["finished"] is None and run["error"] is None:
            progress()
            connection.ioloop.call_later(max(progress_interval, 0.1), ticker)

    def on_ready(connection_: Any, channel: Any, _last_queue: str | None) -> None:
        # resume at half a window: publishes then go out in batches, not one per confirm
        confirm_window = ConfirmWindow(channel, window=window, on_writable=pump,
                                       low_watermark=window // 2)
        run["window"] = confirm_window
        try:  # ready-made frames, confirms read without pika's per-frame dispatch
            reader = frames.install(connection_)
            frame_max = connection_.params.frame_max
            number = channel.channel_number
            run["frames"] = [frames.content_after(
                frames.publish_frame(number, frames.shortstr(exchange), frames.shortstr(key),
                                     mandatory)
                + content_header_frame(number, len(body), variants[i % len(variants)]),
                number, body, frame_max)
                for i, key in enumerate(keys)]
            confirm_window.read_confirms_from(reader)
        except (RuntimeError, ValueError, AttributeError) as exc:
            echo(f"publishing through pika (slower): {exc}")

        def begin() -> None:
            run["started"] = time.perf_counter()
            if count == 0:
                run["finished"] = run["started"]
                connection.stop()
                return
            if progress_interval:
                connection.ioloop.call_later(progress_interval, ticker)
            pump()

        confirm_window.start(on_ready=begin)

    def on_lost(reason: str) -> None:
        if run["finished"] is None:
            run["error"] = reason

    connection = ReconnectingConnection(uri, on_ready, on_lost=on_lost, reconnect=False,
                                        connection_name="rtroute publish")
    connection.run()

    end = run["finished"] or time.perf_counter()
    seconds = end - run["started"] if run["started"] is not None else 0.0
    not_settled = run["published"] - settled_count()
    result = {
        "uri": mask_uri(uri),
        "exchange": exchange,
        "routing_key": named[0] if len(named) == 1 else named,
        "count": count,
        "size": size,
        "published": run["published"],
        "acked": outcomes[Outcome.ACKED],
        "nacked": outcomes[Outcome.NACKED],
        "returned": outcomes[Outcome.RETURNED],
        "failed": outcomes[Outcome.FAILED] + not_settled,
        "seconds": seconds,
        "msgs_per_s": settled_count() / seconds if seconds > 0 else 0.0,
        "confirm_latency_ms": {
            "p50": _percentile(latencies, 0.50) * 1000,
            "p99": _percentile(latencies, 0.99) * 1000,
            "max": (max(latencies) if latencies else 0.0) * 1000,
        },
        "error": run["error"],
    }
    if run["started"] is not None and progress_interval:
        progress(force=True)
    echo(
        f"{result['published']} published to {exchange!r} in {seconds:.2f} s: "
        f"{result['msgs_per_s']:,.0f} msg/s; acked {result['acked']}, nacked {result['nacked']}, "
        f"returned {result['returned']}, failed {result['failed']}; confirm latency "
        f"p50 {result['confirm_latency_ms']['p50']:.1f} ms, "
        f"p99 {result['confirm_latency_ms']['p99']:.1f} ms"
        + (f"; stopped early: {run['error']}" if run["error"] else "")
    )
    return result


class PublishOneError(Exception):
    """The message of :func:`publish_one` was not taken; the message is one line."""


def publish_one(uri: str, exchange: str, routing_key: str, body: bytes,
                properties: pika.BasicProperties | None = None, mandatory: bool = False,
                timeout: float = 30.0) -> None:
    """Publish one message and wait for its publisher confirm (``rabbitmqadmin publish``).

    Args:
        uri: broker URI (see :mod:`rtroute.amqp.uri`).
        exchange, routing_key: where to publish (``""``: the default exchange).
        body: the body, sent as is.
        properties: the message's properties and headers.
        mandatory: the broker returns the message when no queue takes it.
        timeout: seconds for connecting, and for the confirm.

    Raises:
        ValueError: a malformed URI.
        PublishOneError: the connection failed, the broker closed the channel (e.g. 404, no
            such exchange), nacked the message, or returned it (``mandatory``).
    """
    parsed = parse_uri(uri)
    parameters = parsed.connection_parameters("rtroute publish",
                                              blocked_connection_timeout=timeout,
                                              socket_timeout=timeout)
    try:
        connection = pika.BlockingConnection(parameters)
    except (pika.exceptions.AMQPError, OSError) as exc:  # OSError: a name not resolved
        raise PublishOneError(f"could not connect to {parsed.masked()}: "
                              f"{_connect_error(exc)}") from None
    try:
        channel = connection.channel()
        channel.confirm_delivery()
        channel.basic_publish(exchange, routing_key, body, properties, mandatory=mandatory)
    except pika.exceptions.UnroutableError as exc:
        method = exc.messages[0].method if exc.messages else None
        reason = f"{method.reply_code} {method.reply_text}" if method else "returned"
        raise PublishOneError(f"the broker returned the message ({reason}): no queue took "
                              f"routing key {routing_key!r} on exchange {exchange!r}") from None
    except pika.exceptions.NackError:
        raise PublishOneError("the broker nacked the message (not taken)") from None
    except pika.exceptions.ChannelClosed as exc:
        raise PublishOneError(f"the broker closed the channel: {exc.reply_code} "
                              f"{exc.reply_text}") from None
    except pika.exceptions.AMQPError as exc:
        raise PublishOneError(f"{type(exc).__name__}: {exc}") from None
    finally:
        if connection.is_open:
            try:
                connection.close()
            except pika.exceptions.AMQPError:
                pass


def _connect_error(exc: BaseException) -> str:
    """The reason inside pika's nested connection errors: the socket's (``connection
    refused``), else the broker's (access refused), else the error's name."""
    pending: list[object] = [exc]
    while pending:
        error = pending.pop(0)
        if isinstance(error, OSError) and error.strerror:
            return error.strerror[:1].lower() + error.strerror[1:]
        if isinstance(error, BaseException):
            pending += [*error.args, getattr(error, "exception", None)]  # pika's phase errors
    if isinstance(exc, pika.exceptions.ProbableAuthenticationError):
        return "authentication refused (user name or password)"
    if isinstance(exc, pika.exceptions.ProbableAccessDeniedError):
        return "access refused (the user may not use this virtual host)"
    return str(exc) or type(exc).__name__


def _percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile (0.0 for no values)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))
    return ordered[index]
