"""What the source and the destination side of a shovel share: connecting and declaring.

A :class:`Side` is one side of one session (see :mod:`rtroute.shovel.session`): it tries
its brokers in a random order until one accepts, opens the shovel's channel, runs the side's
declarations one at a time and hands the channel to its subclass
(:class:`~rtroute.shovel.source.Source`, :class:`~rtroute.shovel.destination.Destination`).
Any failure ends the whole session through :meth:`Session.fail`.

A start that fails half way stops where it is: no further declaration is sent on a closing
channel. What it declared stays, except the server-named queues (``queue.declare`` with an
empty name, not exclusive): a new start declares new ones, so each would be left behind for
good. They are unbound and deleted if empty, on the connection still open, else at the next
start; one that holds messages is kept and named in the log. Named queues and exchanges are
never deleted: they may be a user's, and the next start declares them again anyway.
"""
from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pika
import pika.exceptions

from rtroute.amqp import declare_async, frames
from rtroute.amqp.uri import AmqpUri
from rtroute.shovel.status import scrub

if TYPE_CHECKING:
    from rtroute.shovel.session import Session

__all__ = ["STOP_TIMEOUT", "Side", "short_reason"]

LOGGER = logging.getLogger("rtroute.shovel")

#: How long :meth:`ShovelWorker.stop` waits for confirms before closing anyway; also the
#: longest wait for a broker's answer while a session ends.
STOP_TIMEOUT = 10.0

#: server-named queue -> the bindings a start gave it (exchange, routing key, arguments)
Queues = dict[str, list[tuple[str, str, Any]]]


class Side:
    """One side of a session: its connection, its channel and its declarations.

    Args:
        session: the session both sides belong to (its :meth:`~Session.fail` ends them).
        role: ``"source"`` or ``"destination"`` (log lines, the worker's leftover queues).
        uris: the side's brokers; each connect tries them in a random order.
        declarations: run on every connect, before the side is ready.
    """

    def __init__(self, session: Session, role: str, uris: list[AmqpUri],
                 declarations: list[dict[str, Any]]) -> None:
        self.session = session
        self.worker = session.w
        self.cfg = session.cfg
        self.status = session.status
        self.counters = session.counters
        self.ioloop = session.ioloop
        self.role = role
        self.uris = uris
        self.declarations = declarations
        self.alive = True           # False once the session has ended
        self.ready = False
        self.connection: Any = None
        self.connected = False      # a connection of this side is opening or open
        self.channel: Any = None
        self.uri: AmqpUri | None = None
        self.reader: frames.FrameReader | None = None
        # server-named queues this start declared, and the declaration being run (named when
        # the channel closes under it)
        self.created: Queues = {}
        self.declaring: str | None = None
        self.naming = False         # awaiting the name of a server-named queue

    # -- hooks ---------------------------------------------------------------------------------

    def connected_to(self, connection: Any, uri: AmqpUri) -> None:
        """The side's connection is open (before its channel is)."""

    def channel_opened(self, connection: Any, channel: Any) -> None:
        """The shovel's channel is open: declare, then become ready."""

    # -- connecting ----------------------------------------------------------------------------

    def guard(self, callback: Callable[..., Any]) -> Callable[..., None]:
        """``callback`` as a pika callback of the start: a no-op once the session has ended, and
        a call that pika refuses (a channel closing under it) ends the session in one log line
        instead of a traceback."""
        def run(*args: Any) -> None:
            if not self.alive:
                return
            try:
                callback(*args)
            except pika.exceptions.AMQPError as exc:
                self.session.fail(f"start failed: {short_reason(exc)}")

        return run

    def connect(self) -> None:
        """Try the brokers in a random order; the session fails once every one has."""
        role, session = self.role, self.session
        order = list(self.uris)
        self.worker.rng.shuffle(order)
        errors: list[str] = []

        def attempt() -> None:
            if not self.alive:
                return
            if not order:
                session.fail(f"{role}: could not connect: {'; '.join(errors)}")
                return
            uri = order.pop(0)
            try:
                parameters = uri.connection_parameters(self.worker.connection_name)
            except ValueError as exc:
                errors.append(f"{uri.masked()}: {exc}")
                attempt()
                return
            self.connection = pika.SelectConnection(
                parameters,
                on_open_callback=lambda conn: opened(conn, uri),
                on_open_error_callback=lambda conn, error: open_failed(uri, error),
                on_close_callback=lambda conn, reason: closed(reason),
                custom_ioloop=self.ioloop,
            )
            self.connected = True

        def opened(connection: Any, uri: AmqpUri) -> None:
            if not self.alive:
                # the session ended while this connection was opening (closing it then trips
                # pika's connection workflow): close it now
                connection.close()
                return
            try:
                self.reader = frames.install(connection)
            except RuntimeError as exc:
                session.fail(str(exc), fatal=True)
                return
            self.uri = uri
            self.connected_to(connection, uri)
            LOGGER.info("shovel %r: %s connected to %s", self.cfg.name, role, uri.masked())
            # the shovel's channel first, so that both ends get the same channel number
            connection.channel(on_open_callback=self.guard(
                lambda ch: channel_open(connection, ch)))
            leftovers = self.worker.leftover_queues[role]
            if leftovers:
                self.remove_queues(connection, leftovers)

        def channel_open(connection: Any, channel: Any) -> None:
            channel.add_on_close_callback(
                lambda _ch, reason: channel_closed(connection, reason))
            self.channel = channel
            self.channel_opened(connection, channel)

        def channel_closed(connection: Any, reason: Any) -> None:
            if self.naming:
                self.naming = False   # no answer comes on a closed channel
                if not self.alive:   # shutdown kept the connection open for that answer
                    self.clean_up_and_close(connection)
                    return
            during = f" during {self.declaring}" if self.declaring else ""
            session.fail(f"{role} channel closed{during}: {short_reason(reason)}")

        def open_failed(uri: AmqpUri, error: Any) -> None:
            self.connection_gone()
            if not self.alive:
                return
            errors.append(f"{uri.masked()}: {short_reason(error)}")
            if order:  # the last failure is in the session's failure line
                LOGGER.info("shovel %r: %s %s failed: %s; trying the next broker",
                            self.cfg.name, role, uri.masked(), short_reason(error))
            attempt()

        def closed(reason: Any) -> None:
            self.connection_gone()
            session.fail(f"{role} connection closed: {short_reason(reason)}")

        attempt()

    def connection_gone(self) -> None:
        self.connected = False
        self.session.connection_gone()

    # -- declarations --------------------------------------------------------------------------

    def declare(self, connection: Any, channel: Any, on_done: Callable[[str | None], Any]
                ) -> None:
        """Run the side's declarations one at a time, none once the session has ended;
        ``queue.declare`` with ``if_missing`` declares only when a passive declare (on a channel
        of its own, since a 404 closes it) finds nothing. Server-named queues go to
        ``self.created``."""
        steps = list(self.declarations)
        created = self.created

        def on_error(exc: Any) -> None:
            self.session.fail(f"{self.role} declaration {self.declaring or ''} failed: "
                              f"{short_reason(exc)}")

        def run(index: int, last_queue: str | None) -> None:
            if index == len(steps):
                self.declaring = None
                on_done(last_queue)
                return
            step = steps[index]
            self.declaring = _describe(step)

            def done(queue: str | None) -> None:
                if self.alive:
                    self.naming = False
                    _note_declared(created, step, queue, last_queue)
                    self.guard(run)(index + 1, queue)
                elif self.naming:
                    # answered after the start failed (see shutdown): the queue exists
                    self.naming = False
                    _note_declared(self.worker.leftover_queues[self.role], step, queue,
                                   last_queue)
                    self.clean_up_and_close(connection)

            if _names_a_queue(step):
                self.naming = True

            if step.get("if_missing"):
                self._ensure_queue(connection, step, self.guard(done), on_error)
            else:
                declaration = {k: v for k, v in step.items() if k != "if_missing"}
                declare_async(channel, [declaration], done, on_error, last_queue=last_queue)

        self.guard(run)(0, None)

    def _ensure_queue(self, connection: Any, step: dict[str, Any],
                      on_ok: Callable[[str], Any], on_error: Callable[[Any], Any]) -> None:
        name = step["queue"]

        def answer_on(channel: Any, on_close: Callable[[Any, Any], Any],
                      answered: list[bool]) -> Callable[[Any], None]:
            def ok(frame: Any) -> None:
                answered.append(True)
                channel.close()
                on_ok(frame.method.queue)

            channel.add_on_close_callback(self.guard(on_close))
            return self.guard(ok)

        def passive(channel: Any) -> None:
            answered: list[bool] = []

            def on_close(_ch: Any, reason: Any) -> None:
                if answered or not self.alive:
                    return
                if getattr(reason, "reply_code", None) == 404:
                    connection.channel(on_open_callback=self.guard(create))
                else:
                    on_error(reason)

            channel.queue_declare(name, passive=True,
                                  callback=answer_on(channel, on_close, answered))

        def create(channel: Any) -> None:
            answered: list[bool] = []

            def on_close(_ch: Any, reason: Any) -> None:
                if not answered:
                    on_error(reason)

            channel.queue_declare(name, durable=step.get("durable", True),
                                  exclusive=step.get("exclusive", False),
                                  auto_delete=step.get("auto_delete", False),
                                  arguments=step.get("arguments") or None,
                                  callback=answer_on(channel, on_close, answered))

        connection.channel(on_open_callback=self.guard(passive))

    def remove_queues(self, connection: Any, queues: Queues,
                      then: Callable[[], Any] | None = None) -> None:
        """Unbind and delete (only if empty) server-named queues that failed starts left on
        ``connection``'s broker, one channel each, whether or not the session is alive; then
        call ``then``. A queue is forgotten once deleted, found gone or kept (it holds
        messages: it is named in the log); on a connection that closes meanwhile the rest
        wait for the next start."""
        tried: set[str] = set()
        name_of, role = self.cfg.name, self.role

        def next_queue() -> None:
            # the dict may grow meanwhile (a declare-ok that came after the failure)
            name = next((n for n in queues if n not in tried), None)
            if name is None:
                if then is not None:
                    then()
                return
            tried.add(name)
            bindings = queues[name]
            on_channel(lambda ch: remove(ch, name, bindings))

        def on_channel(callback: Callable[[Any], Any]) -> None:
            try:
                connection.channel(on_open_callback=callback)
            except pika.exceptions.AMQPError:   # the connection is going
                if then is not None:
                    then()

        def remove(channel: Any, name: str, bindings: list[tuple[str, str, Any]]) -> None:
            finished: list[bool] = []
            unbinding: list[int] = []   # the index of the binding being removed, if any

            def on_close(_ch: Any, reason: Any) -> None:
                if finished:
                    return
                finished.append(True)
                code = getattr(reason, "reply_code", None)
                if code == 404 and unbinding:
                    # no such exchange (its bindings went with it) or no such queue: go on
                    rest = bindings[unbinding[-1] + 1:]
                    on_channel(lambda ch: remove(ch, name, rest))
                    return
                if code == 406:
                    queues.pop(name, None)
                    LOGGER.warning("shovel %r: kept %s queue %r that a failed start declared: "
                                   "it holds messages (unbound; delete it once drained)",
                                   name_of, role, name)
                next_queue()

            def step(index: int, _frame: Any = None) -> None:
                if finished or not channel.is_open:
                    return
                try:
                    if index < len(bindings):
                        unbinding.append(index)
                        exchange, key, arguments = bindings[index]
                        channel.queue_unbind(name, exchange, key, arguments,
                                             callback=lambda f: step(index + 1, f))
                    else:
                        unbinding.clear()
                        channel.queue_delete(name, if_empty=True, callback=deleted)
                except pika.exceptions.AMQPError:
                    finished.append(True)   # the connection is going: left for the next start

            def deleted(_frame: Any) -> None:
                finished.append(True)
                if queues.pop(name, None) is not None:
                    LOGGER.info("shovel %r: deleted %s queue %r that a failed start declared",
                                name_of, role, name)
                if channel.is_open:
                    channel.close()
                next_queue()

            channel.add_on_close_callback(on_close)
            step(0)

        next_queue()

    # -- ending --------------------------------------------------------------------------------

    def shutdown(self, running: bool) -> None:
        """The session has ended: close this side's connection, after removing the
        server-named queues of a start that did not get to run (``running`` False)."""
        connection = self.connection
        if connection is None:
            return
        leftovers = self.worker.leftover_queues[self.role]
        if not running:
            # a start that did not get to run: its server-named queues are of no use
            leftovers.update(self.created)
        if connection.is_closed:
            self.connected = False
        elif connection.is_open and not running and self.naming:
            # a server-named queue.declare is under way: its answer names the queue to
            # remove, and then the connection closes (see declare)
            self.ioloop.call_later(STOP_TIMEOUT, lambda: self.close_connection(connection))
        elif connection.is_open and not running and leftovers:
            self.clean_up_and_close(connection)
        elif connection.is_open:
            self.close_connection(connection)
        # closing: its close callback follows; opening: closed in opened() or fails

    def clean_up_and_close(self, connection: Any) -> None:
        """Remove the leftover server-named queues of this side, then close its connection
        (after :data:`STOP_TIMEOUT` at the latest)."""
        def close() -> None:
            self.close_connection(connection)

        self.remove_queues(connection, self.worker.leftover_queues[self.role], then=close)
        self.ioloop.call_later(STOP_TIMEOUT, close)

    def close_connection(self, connection: Any) -> None:
        if not connection.is_open:
            return
        try:
            connection.close()
        except pika.exceptions.AMQPError:
            self.connection_gone()


def _describe(step: dict[str, Any]) -> str:
    """A declaration as logs name it: ``queue.bind(queue='q', exchange='x', routing_key='')``."""
    shown = ", ".join(f"{k}={v!r}" for k, v in step.items()
                      if k != "method" and isinstance(v, str))
    return f"{step['method']}({shown})"


def _names_a_queue(step: dict[str, Any]) -> bool:
    """A declaration that creates a server-named queue which outlives its connection."""
    return step["method"] == "queue.declare" and not step.get("queue") \
        and not step.get("exclusive") and not step.get("passive")


def _note_declared(created: Queues, step: dict[str, Any], queue: str | None,
                   last_queue: str | None) -> None:
    """Keep track of the server-named, non-exclusive queues a start declares and of the
    bindings it gives them (an exclusive queue goes with its connection)."""
    method = step["method"]
    if method == "queue.declare":
        if queue and _names_a_queue(step):
            created[queue] = []
        return
    if method not in ("queue.bind", "queue.unbind", "queue.delete"):
        return
    target = step.get("queue") or last_queue
    bindings = created.get(target or "")
    if bindings is None:
        return
    if method == "queue.delete":
        del created[target or ""]
        return
    binding = (step["exchange"], step["routing_key"], step.get("arguments") or None)
    if method == "queue.bind":
        bindings.append(binding)
    elif binding in bindings:
        bindings.remove(binding)


def short_reason(error: Any) -> str:
    """A short, password-free text for an exception or close reason."""
    for _ in range(8):  # pika wraps the cause of a failed connect in workflow exceptions
        inner = getattr(error, "exceptions", None)
        if inner:
            error = inner[-1]
            continue
        inner = getattr(error, "exception", None)
        if isinstance(inner, BaseException):
            error = inner
            continue
        if isinstance(error, pika.exceptions.AMQPConnectionError) and error.args \
                and isinstance(error.args[0], BaseException):
            error = error.args[0]
            continue
        break
    if isinstance(error, pika.exceptions.ChannelClosedByBroker):
        return f"{error.reply_code} {error.reply_text}"
    if isinstance(error, pika.exceptions.ConnectionClosedByBroker):
        return f"{error.reply_code} {error.reply_text}"
    if isinstance(error, pika.exceptions.ProbableAuthenticationError):
        return "authentication failed (ACCESS_REFUSED)"
    if isinstance(error, pika.exceptions.ProbableAccessDeniedError):
        return "access to the virtual host refused"
    text = str(error) or type(error).__name__
    return scrub(text if isinstance(error, str) else f"{type(error).__name__}: {text}")
