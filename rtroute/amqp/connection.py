"""Connections that come back: a list of URIs, exponential back-off, declarations on connect.

:class:`ReconnectingConnection` keeps a pika ``SelectConnection`` up and runs its ioloop (the
sidecar and the shovel run on it); :func:`connect_blocking` is the one-shot blocking variant for
tools and tests. On every attempt one URI of the list is chosen at random, as the shovel plugin
does, for simple load balancing and fail-over.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Iterable, Sequence
from typing import Any, Callable

import pika
import pika.exceptions
from pika.adapters.select_connection import IOLoop

from rtroute.amqp.declarations import declare_async, parse_declarations
from rtroute.amqp.uri import AmqpUri, parse_uri

__all__ = ["Backoff", "ReconnectingConnection", "connect_blocking"]

LOGGER = logging.getLogger(__name__)


class Backoff:
    """Exponential back-off with a cap and jitter.

    Delays are ``initial * factor**n`` capped at ``maximum``, each then spread by up to
    ``jitter`` (a fraction) either way so that many clients do not reconnect in step. A constant
    delay (the shovel's ``reconnect_delay``) is ``Backoff(d, d, jitter=0)``.
    """

    def __init__(
        self,
        initial: float = 0.5,
        maximum: float = 30.0,
        factor: float = 2.0,
        jitter: float = 0.1,
        rng: random.Random | None = None,
    ) -> None:
        if initial < 0 or maximum < initial or factor < 1 or not 0 <= jitter < 1:
            raise ValueError("need 0 <= initial <= maximum, factor >= 1, 0 <= jitter < 1")
        self.initial = initial
        self.maximum = maximum
        self.factor = factor
        self.jitter = jitter
        self._rng = rng or random.Random()
        self._attempt = 0

    def next_delay(self) -> float:
        """The delay before the next attempt (grows until :meth:`reset`)."""
        base = min(self.maximum, self.initial * self.factor ** min(self._attempt, 64))
        self._attempt += 1
        if self.jitter:
            base *= 1 + self._rng.uniform(-self.jitter, self.jitter)
        return min(base, self.maximum)

    def reset(self) -> None:
        """Start again from ``initial`` (after a connection has been up for a while)."""
        self._attempt = 0


def _as_uri_list(uris: str | Sequence[str]) -> list[AmqpUri]:
    texts = [uris] if isinstance(uris, str) else list(uris)
    if not texts:
        raise ValueError("no broker URI given")
    return [parse_uri(text) for text in texts]


def connect_blocking(
    uris: str | Sequence[str],
    connection_name: str | None = None,
    attempts: int = 1,
    backoff: Backoff | None = None,
    rng: random.Random | None = None,
    **overrides: Any,
) -> pika.BlockingConnection:
    """Open a BlockingConnection to one of ``uris`` (a random one per attempt).

    Args:
        uris: one URI or a list.
        connection_name: shown in the management UI (see ``AmqpUri.connection_parameters``).
        attempts: how many tries before giving up.
        backoff: delays between tries (default ``Backoff()``).
        **overrides: extra ``pika.ConnectionParameters`` keywords.

    Raises:
        ValueError: a malformed URI.
        pika.exceptions.AMQPConnectionError: every attempt failed (the last error; its message
            names the URI with the password masked).
    """
    candidates = _as_uri_list(uris)
    rng = rng or random.Random()
    backoff = backoff or Backoff()
    last_error: Exception | None = None
    for attempt in range(max(1, attempts)):
        if attempt:
            time.sleep(backoff.next_delay())
        uri = rng.choice(candidates)
        try:
            return pika.BlockingConnection(uri.connection_parameters(connection_name, **overrides))
        except pika.exceptions.AMQPConnectionError as exc:
            LOGGER.warning("connecting to %s failed: %r", uri.masked(), exc)
            last_error = exc
    raise pika.exceptions.AMQPConnectionError(
        f"could not connect to {', '.join(u.masked() for u in candidates)}: {last_error!r}"
    )


OnReady = Callable[[pika.SelectConnection, Any, "str | None"], Any]


class ReconnectingConnection:
    """Keep a SelectConnection open: reconnect with back-off, run declarations on connect.

    Args:
        uris: one URI or a list; each attempt picks one at random.
        on_ready: ``on_ready(connection, channel, last_queue)`` once connected and the
            declarations ran; ``channel`` is the open channel they ran on (now the caller's) and
            ``last_queue`` the most recently declared queue (None if none). Runs in the ioloop.
        on_lost: ``on_lost(reason)`` when a ready connection is lost or an attempt fails.
        declarations: run on every connect (see :mod:`rtroute.amqp.declarations`); or a
            function ``declarations(connection)`` returning them, called on each connect
            (after ``connection.start``, so it may depend on the broker's version).
        backoff: delays between attempts (default ``Backoff()``); it is reset once a connection
            has stayed up for ``stable_after`` seconds.
        reconnect: False to stop after the first failure or loss (``run()`` then returns).
        connection_name: shown in the management UI, handy to find the connection.
        parameters: extra ``pika.ConnectionParameters`` keywords for every attempt.
        ioloop: a pika ``IOLoop`` to share with other connections (pika's ``custom_ioloop``);
            its owner runs it, and :meth:`start` begins connecting on it. Default: an ioloop
            of this object's own, run by :meth:`run`.

    ``run()`` runs the ioloop in the calling thread until ``stop()``; ``stop()`` and
    ``add_callback_threadsafe()`` may be called from any thread. On a shared ioloop, ``stop()``
    closes the connection and leaves the loop running.

    Raises:
        ValueError: a malformed URI or declaration (at construction).
    """

    def __init__(
        self,
        uris: str | Sequence[str],
        on_ready: OnReady,
        on_lost: Callable[[str], Any] | None = None,
        declarations: Iterable[Any] | Callable[[Any], Iterable[Any]] = (),
        backoff: Backoff | None = None,
        reconnect: bool = True,
        connection_name: str | None = None,
        stable_after: float = 5.0,
        rng: random.Random | None = None,
        parameters: dict[str, Any] | None = None,
        ioloop: IOLoop | None = None,
    ) -> None:
        self._uris = _as_uri_list(uris)
        self._on_ready = on_ready
        self._on_lost = on_lost
        self._make_declarations = declarations if callable(declarations) else None
        self._declarations = [] if callable(declarations) else parse_declarations(declarations)
        self._backoff = backoff or Backoff()
        self._reconnect = reconnect
        self._connection_name = connection_name
        self._stable_after = stable_after
        self._rng = rng or random.Random()
        self._parameters = dict(parameters or {})
        self._own_ioloop = ioloop is None
        self._ioloop = IOLoop() if ioloop is None else ioloop
        self._connection: pika.SelectConnection | None = None
        self._timer: Any = None
        self._stopping = False
        self._ready_at: float | None = None
        self._close_detail: str | None = None
        self._lock = threading.Lock()
        self.state = "idle"
        self.current_uri: str | None = None
        self.attempts = 0
        self.connects = 0
        self.last_error: str | None = None

    @property
    def ioloop(self) -> IOLoop:
        """The ioloop every connection of this object runs on (it outlives them)."""
        return self._ioloop

    @property
    def connection(self) -> pika.SelectConnection | None:
        """The current connection (open or opening), or None between attempts."""
        return self._connection

    def run(self) -> None:
        """Connect and run the ioloop here until :meth:`stop` (or, without reconnect, a loss).

        Raises:
            RuntimeError: called twice, or the ioloop is shared (use :meth:`start`).
        """
        if not self._own_ioloop:
            raise RuntimeError("on a shared ioloop, start() connects and its owner runs it")
        if self.state != "idle":
            raise RuntimeError("ReconnectingConnection.run() can be called once")
        self.state = "starting"
        self._ioloop.add_callback_threadsafe(self._connect)
        try:
            self._ioloop.start()
        finally:
            with self._lock:
                self.state = "stopped"
                self._ioloop.close()

    def start(self) -> None:
        """Begin connecting on the shared ioloop given at construction (any thread; returns at
        once); the connection then lives until :meth:`stop`.

        Raises:
            RuntimeError: called twice, or the ioloop is this object's own (use :meth:`run`).
        """
        if self._own_ioloop:
            raise RuntimeError("start() is for a shared ioloop; run() runs an own one")
        if self.state != "idle":
            raise RuntimeError("ReconnectingConnection.start() can be called once")
        self.state = "starting"
        self._ioloop.add_callback_threadsafe(self._connect)

    def stop(self) -> None:
        """Close the connection and end :meth:`run` (any thread; returns at once; a no-op once
        stopped)."""
        self.add_callback_threadsafe(self._stop)

    def add_callback_threadsafe(self, callback: Callable[[], Any]) -> None:
        """Run ``callback()`` in the ioloop thread soon (dropped once :meth:`run` has ended)."""
        with self._lock:
            if self.state != "stopped":
                self._ioloop.add_callback_threadsafe(callback)

    # -- ioloop thread -------------------------------------------------------------------------

    def _connect(self) -> None:
        self._timer = None
        if self._stopping:
            return
        uri = self._rng.choice(self._uris)
        self.current_uri = uri.masked()
        self._close_detail = None
        self.attempts += 1
        self.state = "connecting"
        try:
            parameters = uri.connection_parameters(self._connection_name, **self._parameters)
        except ValueError as exc:
            self._failed(f"{self.current_uri}: {exc}")
            return
        self._connection = pika.SelectConnection(
            parameters,
            on_open_callback=self._on_open,
            on_open_error_callback=self._on_open_error,
            on_close_callback=self._on_closed,
            custom_ioloop=self._ioloop,
        )

    def _on_open(self, connection: pika.SelectConnection) -> None:
        connection.channel(on_open_callback=self._on_channel_open)

    def _on_channel_open(self, channel: Any) -> None:
        connection = self._connection

        def on_done(last_queue: str | None) -> None:
            if self._connection is not connection or self._stopping:
                return
            self.state = "connected"
            self.connects += 1
            self._ready_at = time.monotonic()
            LOGGER.info("connected to %s", self.current_uri)
            self._on_ready(connection, channel, last_queue)

        def on_error(exc: Exception) -> None:
            if self._connection is connection and connection.is_open:
                self._close_detail = f"declarations failed: {exc}"
                connection.close(320, "declarations failed")

        declarations = self._declarations
        if self._make_declarations is not None:
            try:
                declarations = parse_declarations(self._make_declarations(connection))
            except ValueError as exc:
                on_error(exc)
                return
        declare_async(channel, declarations, on_done, on_error)

    def _on_open_error(self, _connection: Any, error: Exception) -> None:
        self._connection = None
        self._failed(f"{self.current_uri}: {describe_connect_error(error)}")

    def _on_closed(self, _connection: Any, reason: Exception) -> None:
        self._connection = None
        if self._stopping:
            self._finish()
            return
        was_ready = self._ready_at is not None
        if was_ready and time.monotonic() - self._ready_at >= self._stable_after:
            self._backoff.reset()
        self._ready_at = None
        detail = self._close_detail or repr(reason)
        self._failed(f"{self.current_uri}: {detail}")

    def _failed(self, reason: str) -> None:
        self.last_error = reason
        if self._on_lost is not None:
            self._on_lost(reason)
        if self._stopping or not self._reconnect:
            LOGGER.warning("connection lost or failed: %s", reason)
            self._finish()
            return
        delay = self._backoff.next_delay()
        LOGGER.warning("connection lost or failed: %s; trying again in %.1f s", reason, delay)
        self.state = "waiting"
        self._timer = self._ioloop.call_later(delay, self._connect)

    def _stop(self) -> None:
        self._stopping = True
        if self._timer is not None:
            self._ioloop.remove_timeout(self._timer)
            self._timer = None
        connection = self._connection
        if connection is not None and not connection.is_closed:
            if not connection.is_closing:
                connection.close()
            return  # _on_closed finishes
        self._finish()

    def _finish(self) -> None:
        """The end: stop an own ioloop (``run`` then returns); leave a shared one running."""
        if self._own_ioloop:
            self._ioloop.stop()
            return
        with self._lock:
            self.state = "stopped"


def describe_connect_error(error: BaseException) -> str:
    """One short line for what pika reports when a connection cannot be opened (its own text
    nests the real cause in several wrappers)."""
    if isinstance(error, pika.exceptions.ProbableAuthenticationError):
        return "the broker refused the login (wrong user name or password?)"
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        return "the broker refused access to the virtual host (unknown vhost, or no permission?)"
    if isinstance(error, pika.exceptions.AMQPConnectionError) and error.args:
        inner = error.args[0]
        last = getattr(inner, "exceptions", None)
        if last:
            inner = last[-1]
        cause = getattr(inner, "exception", None) or (inner.args[0] if getattr(
            inner, "args", None) and isinstance(inner.args[0], BaseException) else None)
        if isinstance(cause, BaseException):
            return f"{type(cause).__name__}: {cause}"
        if isinstance(inner, BaseException):
            return describe_connect_error(inner) if inner is not error else repr(inner)
    return f"{type(error).__name__}: {error}"
