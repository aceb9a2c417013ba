"""The plugin's permissions through the proxy, decided by the broker with the client's own
credentials.

With the x-rtopic plugin, RabbitMQ checks an operation on the exchange the client named:
binding a queue (or an exchange) to ``NAME`` needs write on the destination and read on
``NAME``, publishing to ``NAME`` needs write on ``NAME``. Through the proxy the bindings live on
``NAME.bindings`` and the publishes go there, so the broker's own check is on that name. Before
the first such operation the proxy asks the broker the question the plugin's broker would
have asked, on the client's own connection (so with its credentials, whatever the
authentication mechanism), with an operation that changes nothing:

- **read on NAME** (bind, unbind): ``queue.unbind``/``exchange.unbind`` of the same destination
  from ``NAME`` with :data:`PROBE_KEY`, a key nothing is bound with. The broker checks write on
  the destination, then read on ``NAME`` (the plugin's order, hence its refusal texts), then
  unbinds nothing. Sent on the client's own channel just before the real method: a refusal
  closes that channel with the broker's text, as with the plugin.
- **write on NAME** (the first publish of a channel to ``NAME``): ``exchange.unbind`` with
  destination ``NAME`` and the default exchange as source, on a channel of the client's
  connection that the client cannot use (:class:`ProbeChannel`). The broker checks write on the
  destination first and refuses the default exchange as a source after it, so the refusal
  names ``NAME`` (no write) or the default exchange (write allowed). RabbitMQ keeps such
  answers for the life of a channel too; so does the session (per channel and exchange).

The broker's own check on ``NAME.bindings`` still applies after the probe (a user allowed
exactly ``^NAME$`` is refused there, with the broker's text naming ``NAME.bindings``): see
docs/proxy.md's permissions table.
"""
from __future__ import annotations

import asyncio
from typing import Callable

from rtroute.proxy import wire

__all__ = ["PROBE_KEY", "ProbeChannel", "read_probe"]

# a binding key nothing is bound with: unbinding it changes nothing
PROBE_KEY = b"rtroute.permission-probe.\x00"
# the broker's refusal of the default exchange as a source, checked after write on the
# destination: write on that destination is allowed
_DEFAULT_EXCHANGE_REFUSED = b"operation not permitted on the default exchange"
# the largest channel_max: offered 65534 when the broker sets none (0)
_CHANNEL_MAX = 65535


def read_probe(channel: int, method: int, destination: bytes, name: bytes) -> bytes:
    """The unbind that checks, as binding ``destination`` to ``name`` would, write on the
    destination and read on ``name``, and changes nothing (``method``: the client's
    queue/exchange bind or unbind)."""
    kind = wire.QUEUE_UNBIND if method in (wire.QUEUE_BIND, wire.QUEUE_UNBIND) \
        else wire.EXCHANGE_UNBIND
    return wire.unbind(channel, kind, destination, name, PROBE_KEY)


class ProbeChannel:
    """A channel of the client's broker connection that the client cannot use: the broker's
    ``connection.tune`` offers the client one channel less than the broker allows, and the
    client's ``tune-ok`` asks the broker for that one more, the proxy's.

    Args:
        write: sends bytes to the broker (the client's connection).
    """

    def __init__(self, write: Callable[[bytes], object]) -> None:
        self._write = write
        self.channel = -1  # none before tune-ok
        self.watched: tuple[int, ...] = ()  # (channel,) once known: frames the pumps stop at
        self._offered = 0  # channel_max offered to the client (0: none)
        self._open = False
        # the answer awaited: one probe at a time (the session holds the client's stream
        # while it waits)
        self._waiting: asyncio.Future[bytes | None] | None = None

    def offer(self, tune: bytes) -> bytes:
        """The broker's ``connection.tune`` as the client gets it: one channel less."""
        broker_max = wire.U16.unpack_from(tune, 11)[0] or _CHANNEL_MAX
        self._offered = broker_max - 1
        return wire.with_channel_max(tune, self._offered)

    def accept(self, tune_ok: bytes) -> bytes:
        """The client's ``connection.tune-ok`` as the broker gets it: the proxy's channel above
        the client's (a client asking for no limit, 0, keeps it: the broker decides)."""
        if not self._offered:  # no tune seen (the broker always sends one first)
            return tune_ok
        client_max = wire.U16.unpack_from(tune_ok, 11)[0]
        if client_max == 0:
            self.channel = _CHANNEL_MAX
            self.watched = (self.channel,)
            return tune_ok
        client_max = min(client_max, self._offered)
        self.channel = client_max + 1
        self.watched = (self.channel,)
        return wire.with_channel_max(tune_ok, self.channel)

    async def may_write(self, name: bytes) -> bytes | None:
        """None if the client's user may write to exchange ``name``, else the broker's
        ``channel.close`` text refusing it."""
        answer: asyncio.Future[bytes | None] = asyncio.get_running_loop().create_future()
        self._waiting = answer
        frames = wire.unbind(self.channel, wire.EXCHANGE_UNBIND, name, b"", PROBE_KEY)
        if not self._open:
            self._open = True
            frames = wire.channel_open(self.channel) + frames
        self._write(frames)
        return await answer

    def broker_method(self, method: int, frame: bytes) -> None:
        """A method frame of the broker on the proxy's channel."""
        if method == wire.CHANNEL_CLOSE:
            self._open = False
            self._write(wire.method_frame(self.channel, wire.CHANNEL_CLOSE_OK, b""))
            code = wire.U16.unpack_from(frame, 11)[0]
            text = wire.short(frame[7:-1], 6)[0]
            allowed = code == 403 and text.endswith(_DEFAULT_EXCHANGE_REFUSED)
            self._answer(None if allowed else text)
        elif method == wire.EXCHANGE_UNBIND_OK:
            # a broker that takes the default exchange as a source: write was checked first
            self._answer(None)

    def _answer(self, refused: bytes | None) -> None:
        answer, self._waiting = self._waiting, None
        if answer is not None and not answer.done():
            answer.set_result(refused)

    def close(self) -> None:
        answer, self._waiting = self._waiting, None
        if answer is not None:
            answer.cancel()
