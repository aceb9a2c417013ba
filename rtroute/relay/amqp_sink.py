"""The AMQP 0-9-1 sink: a pika channel, with or without a confirm window, under the outbox.

:class:`AmqpSink` is the :class:`~rtroute.relay.seams.Sink` the relay attaches for a publish
channel. With confirms its per-message lane is the
:class:`~rtroute.amqp.confirm_window.ConfirmWindow`'s own ``publish_frames`` (bound once: no
call more per publish than the window's); without, :meth:`AmqpSink.write` writes the frames of
one ioloop turn with one ``emit``.

The frame_max guard: a content header frame larger than the connection's ``frame_max`` makes
RabbitMQ close the whole connection (``FRAME_ERROR``), and the message would come back for ever.
:meth:`AmqpSink.check` measures a publish (RabbitMQ's ``FRAME_SIZE_FUDGE`` forgives the 8
bytes of frame head and end, so a payload of ``frame_max`` bytes is accepted); one that does
not fit, or whose properties pika cannot encode, is never written and goes to the policy's
``rejected`` without spending a sequence number.
"""
from __future__ import annotations

import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pika.exceptions

from rtroute.amqp import frames as amqp_frames
from rtroute.amqp.confirm_window import ConfirmWindow, WindowClosed, WindowFull
from rtroute.relay.outgoing import Outgoing
from rtroute.relay.seams import Unpublishable

if TYPE_CHECKING:
    from rtroute.relay.seams import Sink

__all__ = ["ENCODING_ERRORS", "AmqpSink", "header_too_large"]

#: What pika raises for a property value it cannot encode.
ENCODING_ERRORS = (TypeError, ValueError, OverflowError, struct.error, UnicodeError,
                   pika.exceptions.UnsupportedAMQPFieldException)


def header_too_large(out: Outgoing, frame_max: int) -> str | None:
    """Why ``out`` cannot be published on a connection with ``frame_max``, or None.

    Raises:
        Exception: what pika raises for properties it cannot encode (see
            :data:`ENCODING_ERRORS`).
    """
    data = out.frames
    if data is not None:
        size = len(data[1]) if isinstance(data, list) else amqp_frames.content_header_size(data)
    elif out.properties is not None:
        body = out.body
        size = amqp_frames.properties_frame_size(len(body) if isinstance(body, bytes) else 0,
                                                 out.properties)
    else:
        return None
    if amqp_frames.frame_fits(size, frame_max):  # RabbitMQ's rule (see frame_codec)
        return None
    return (f"its properties and headers ({size - 8} bytes as a content header) exceed "
            f"the connection's frame_max ({frame_max} bytes)")


def _unwritable(*_args: Any, **_kwargs: Any) -> Any:
    raise RuntimeError("this sink has no confirm window")


class AmqpSink:
    """A publish channel of a pika ``SelectConnection`` (see the module docstring).

    Args:
        channel: the open publish channel.
        window: its confirm window (started), or None to publish without confirms.
    """

    full: tuple[type[BaseException], ...] = (WindowFull,)
    gone: tuple[type[BaseException], ...] = (WindowClosed,
                                             pika.exceptions.ChannelWrongStateError)

    def __init__(self, channel: Any, window: ConfirmWindow | None) -> None:
        self.channel = channel
        self.connection = channel.connection
        self.frame_max: int = self.connection.params.frame_max
        # the largest content header frame_max takes (amqp_frames.frame_fits, as a bound
        # checked inline below: 0 for none)
        self._frame_limit = amqp_frames.frame_size_limit(self.frame_max)
        self.window = window
        self.confirms = window is not None
        # the per-message lane is the window's bound method itself
        self.publish_frames: Callable[..., Any] = \
            window.publish_frames if window is not None else _unwritable
        self.publish_frames_in_bulk: Callable[[list[bytes], int, list], None] = \
            window.publish_frames_in_bulk if window is not None else _unwritable

    @property
    def closing(self) -> bool:
        """True once the connection is closing or closed."""
        connection = self.connection
        return bool(connection.is_closing or connection.is_closed)

    @property
    def in_flight(self) -> int:
        """Publishes awaiting their confirm (0 without confirms)."""
        window = self.window
        return window.in_flight if window is not None else 0

    @property
    def room(self) -> int:
        """Publishes the window takes before it is full (0 once it closed; without confirms
        nothing bounds them: the flow control's write buffer marks do)."""
        window = self.window
        if window is None:
            return 0 if self.closing else 1 << 30
        if window.closed:
            return 0
        return window.window - window.in_flight

    def check(self, out: Outgoing) -> str | None:
        """Why ``out`` cannot be published here (too large a header, properties pika cannot
        encode), or None: :func:`header_too_large`, inlined (the sidecar's republishes come
        through here one by one)."""
        data = out.frames
        try:
            if data is not None:
                size = len(data[1]) if isinstance(data, list) \
                    else amqp_frames.content_header_size(data)
            elif out.properties is not None:
                body = out.body
                size = amqp_frames.properties_frame_size(
                    len(body) if isinstance(body, bytes) else 0, out.properties)
            else:
                return None
        except ENCODING_ERRORS as exc:
            return f"its properties cannot be encoded ({type(exc).__name__}: {exc})"
        limit = self._frame_limit
        if size <= limit or not limit:  # RabbitMQ's rule (frame_fits, see frame_codec)
            return None
        return (f"its properties and headers ({size - 8} bytes as a content header) exceed "
                f"the connection's frame_max ({self.frame_max} bytes)")

    def encode(self, out: Outgoing) -> tuple[bytes | list[bytes], int]:
        """``out`` (properties and body) as frames for this channel: method, header, bodies.

        Raises:
            Unpublishable: pika cannot encode its properties.
        """
        try:
            data = _encoded(self.channel.channel_number, out, self.frame_max)
        except ENCODING_ERRORS as exc:
            raise Unpublishable(f"its properties cannot be encoded "
                                f"({type(exc).__name__}: {exc})") from exc
        return data, len(data)

    def write(self, data: bytes, frame_count: int) -> None:
        """Without confirms: write the frames of one turn in one piece (nothing once the
        connection is going)."""
        if not self.closing:
            amqp_frames.emit(self.connection, data, frame_count)


def _encoded(channel: int, out: Outgoing, frame_max: int) -> list[bytes]:
    """``out`` (properties and body) as frames for ``channel``: method, header, bodies."""
    from pika.frame import Header

    body = out.body() if callable(out.body) else (out.body or b"")
    method = amqp_frames.publish_frame(channel, amqp_frames.shortstr(out.exchange),
                                       amqp_frames.shortstr(out.routing_key), out.mandatory)
    header = Header(channel, len(body), out.properties).marshal()
    return [method, header, *amqp_frames.body_frames(channel, body, frame_max)]


if TYPE_CHECKING:  # mypy holds the AMQP sink to the seam (tests/test_typecheck.py)
    _SINK: type[Sink] = AmqpSink
