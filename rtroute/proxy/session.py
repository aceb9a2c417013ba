"""One client connection through the proxy: two byte pumps and the few frames they rewrite.

Client to broker, everything passes byte for byte except:

- ``exchange.declare`` of type ``x-rtopic``: becomes the layout's declarations on the client's
  own channel (so the broker checks the client's permissions and flags): ``NAME.bindings``
  (topic, the client's flags and arguments: an ``alternate-exchange`` catches what matches
  nothing), ``NAME`` (fanout, as the sidecar declares it, so publishers that reach the broker
  directly still work through a sidecar, and the sidecar's own declaration is equivalent), and
  the registration ``rtroute.rtopic`` -> ``NAME.bindings`` (see :mod:`rtroute.proxy.catalog`).
  The broker's answers are swallowed but the last, which the client gets as its ``declare-ok``.
  A passive declaration passes as it is: the broker checks that ``NAME`` exists, whatever its
  type, as with the plugin; it registers nothing. ``exchange.delete`` deletes
  both exchanges. An exchange in the way is refused as RabbitMQ refuses an inequivalent
  declaration (406): ``NAME`` of another type than fanout in the plugin's words (``received
  ''x-rtopic''``, its quoting), a ``NAME.bindings`` of another type than the proxy's by name, with what it is
  for; a ``NAME.bindings`` declared just before ``NAME`` was refused is deleted again if unused.
- ``queue.bind``/``unbind`` and ``exchange.bind``/``unbind`` from an x-rtopic ``NAME``: from
  ``NAME.bindings``; the binding table learns the change when the broker confirms it.
- ``basic.publish`` to an x-rtopic ``NAME``: held until its content header arrives, routed with
  the core (routing key, ``CC``, the client's real ``BCC``) and sent as one publish to
  ``NAME.bindings`` with ``BCC`` = one binding key per destination. One client publish is one
  broker publish, so confirm sequence numbers, ``mandatory`` returns and transactions are the
  broker's own. A match set one header frame cannot carry would need several publishes: the proxy closes
  the channel instead (406), so no confirm can be misattributed (see docs/proxy.md).

Broker to client: ``basic.deliver``, ``basic.get-ok`` and ``basic.return`` from ``NAME.bindings``
name ``NAME``; the answers to injected methods are swallowed. Synchronous methods of one channel
are answered in order and clients wait for each answer (every client library does), so the
answers a channel expects are a queue.

Cost per message: both pumps walk their bytes with :class:`rtroute.core.frames.FrameScanner`
(native), which passes over every frame that goes on as it is and stops only where this module
has to look, so pass-through frames cost no Python. A publish to an x-rtopic exchange that
arrives whole with its content is handled at one stop; a message without headers whose publish
and header were rewritten before takes its rewrite from the exchange's cache, and so do the
messages right after it that repeat them byte for byte, in one native call. Anything else (a
message cut between reads, headers to edit, a channel closing) takes the frame-by-frame path,
which gives the same bytes (``tests/proxy/test_session_pumps.py`` checks it). A message with
headers (a sequence number, a timestamp: different in every message) is routed from its ``CC``,
``BCC`` and alias arrays read natively (:mod:`rtroute.core.headers`), its plan cached per
routing key and arrays, its table rewritten natively; only what that reader leaves (a ``CC``
that is no array of ASCII strings, a malformed table) is decoded in Python, with the same
result (``tests/proxy/test_route_paths.py``).

Size: the two pumps and the per-channel state they share (publishes held for their header,
channels being closed, answers expected) are one state machine of the client's connection; what
the rewritten frames become is :mod:`rtroute.proxy.rewrite`'s (a :class:`Rewriter` per
session, which reaches the pumps only through its ``Pumps`` seam); the frame codecs live in
rtroute.proxy.wire and rtroute.core.frames.
"""
from __future__ import annotations

import asyncio
import collections
import functools
import logging
import socket
from time import monotonic, perf_counter
from typing import TYPE_CHECKING, Any, Callable

from rtroute.amqp.content_header import FLAG_HEADERS, FLAGS_OFFSET
from rtroute.amqp.frame_codec import frame_size_limit
from rtroute.core.frames import SCAN_BAD_END, SCAN_STOP, SCAN_TOO_LARGE, FrameScanner
from rtroute.proxy import wire
from rtroute.proxy.catalog import (
    Catalog,
    RTopic,
    VhostCatalog,
)
from rtroute.proxy.confirm_meter import DEFAULT_BUDGET, TX_REFUSED, ConfirmMeter
from rtroute.proxy.permissions import ProbeChannel
from rtroute.proxy.rewrite import (
    REPLIES,
    Expected,
    Pumps,
    Rewriter,
    renamed_in_close,
    rtopic_named_in_close,
    rtopic_type_in_close,
)
from rtroute.routing.exchange_router import DEFAULT_FRAME_MAX

__all__ = ["Session"]

LOG = logging.getLogger(__name__)
_U16, _U32, _U64 = wire.U16.unpack_from, wire.U32.unpack_from, wire.U64.unpack_from
_BASIC_PUBLISH = wire.BASIC_PUBLISH
_CLIENT_METHODS = frozenset((
    wire.CONNECTION_TUNE_OK, wire.CONNECTION_OPEN, wire.CHANNEL_OPEN, wire.CHANNEL_CLOSE,
    wire.CHANNEL_CLOSE_OK, wire.EXCHANGE_DECLARE, wire.EXCHANGE_DELETE, wire.EXCHANGE_BIND,
    wire.EXCHANGE_UNBIND, wire.QUEUE_BIND, wire.QUEUE_UNBIND, wire.CONFIRM_SELECT,
    wire.TX_SELECT))  # basic.publish: inline in _pump_client
_RENAMED = frozenset((wire.BASIC_DELIVER, wire.BASIC_GET_OK, wire.BASIC_RETURN))
# what stops a scan of the client's frames, without and with x-rtopic exchanges in its vhost
# or channels in confirm mode (then every basic.publish: its exchange is looked up, it is
# numbered); every frame of a channel that holds a publish for its header, or is being
# closed, stops it too
_CLIENT_SCANNERS = (FrameScanner(sorted(_CLIENT_METHODS), check_end=True),
                    FrameScanner(sorted(_CLIENT_METHODS | {_BASIC_PUBLISH}), check_end=True))
# of the broker's: channel.close always, the deliveries to rename when there is an x-rtopic
# exchange, the confirms when there are channels in confirm mode (the client's in-flight
# budget: rtroute.proxy.confirm_meter); every frame of a channel that waits for answers, or is
# being closed
_CONFIRMS = frozenset((wire.BASIC_ACK, wire.BASIC_NACK))
_BROKER_SCANNERS = tuple(
    FrameScanner(sorted({wire.CHANNEL_CLOSE, wire.CONNECTION_TUNE} | renamed | confirms))
    for confirms in (frozenset(), _CONFIRMS) for renamed in (frozenset(), _RENAMED))
_HEADERS_BIT = FLAG_HEADERS >> 8  # in the content header's first flags octet
_EMPTY_TABLE = b"\x00\x00\x00\x00"
REFUSAL_TIMEOUT = 10.0
# seconds of routing one client's pump does before it lets the loop serve the others
PUMP_TURN = 0.005
# seconds a client waits for the proxy to know the x-rtopic exchanges of its vhost (or the
# bindings of one exchange that are not loading) before it is told why not, instead of waiting
# forever
READY_TIMEOUT = 15.0
# seconds at most a client waits for the bindings of one exchange while they load (a listing in
# flight, or being applied): RabbitMQ's default heartbeat timeout. Nothing of the client is read
# meanwhile, its heartbeats neither: held longer, the broker could drop it for missed heartbeats
# (with no reason given); a shorter heartbeat the client negotiated lowers it (to READY_TIMEOUT
# at least, the wait before this one). Measured: 300,000 bindings routed 38 s after the proxy's
# start on a busy 2-core machine (docs/performance.md, rtroute bench scale).
LOAD_TIMEOUT = 60.0
# seconds since a client last sent something during which it counts as active: a client at its
# in-flight budget waits, after its confirms came, SHARE_WEIGHT times as long as it waited for
# them for each other active client (its share of the broker), at most SHARE_PAUSE_MAX seconds.
# 2, not 1: the wait for its confirms includes the broker's time for the others' work, so once
# again left the others under half of their rate on 4.3.6 (bench proxy-isolation, quiet machine:
# 0.47 with 1, 0.57 with 2; 3.10.8: 0.64 and 0.75), while the '#' client kept 40-120 msg/s
ACTIVE_WINDOW = 0.2
SHARE_WEIGHT = 2
SHARE_PAUSE_MAX = 1.0
# bytes of a client's stream read ahead of what its pump took, at most: beyond, the client is
# not read until the pump catches up (a client held by its budget keeps sending; reading on
# would buffer without bound, and cutting a large buffer costs each turn)
CLIENT_READ_AHEAD = 256 * 1024
# seconds between checks of a client not read for a reset of its connection (see _watch_reset)
RESET_CHECK = 0.5


class Session:
    """The pumps of one client connection.

    Nothing is started for a client before the broker accepted its login: the catalog of its
    vhost is taken at the broker's ``connection.open-ok`` (and given back when the session
    closes), and no frame larger than the negotiated ``frame_max`` (before ``tune-ok``:
    RabbitMQ's pre-handshake limit) is buffered: the client is refused as RabbitMQ refuses it.

    Args:
        catalogs: the proxy's :class:`Catalog` (a :class:`VhostCatalog` per vhost in use).
        client: the client's transport.
        bcc_alias: the sidecar's BCC alias header, honoured and stripped here too.
        on_refusal: ``on_refusal(kind)`` for each refusal the proxy itself makes (metrics).
        on_open: called once the broker accepted the client's login (its ``open-ok``).
        in_flight: the cost (routing keys) of unconfirmed publishes to x-rtopic exchanges at
            which the client is not read until confirms come (:mod:`.confirm_meter`).
        others_active: ``others_active(session)``: how many other clients are active (sent
            something in the last :data:`ACTIVE_WINDOW` s); None: none are counted.
        archive: the archive stream of each x-rtopic exchange (see
            :class:`~rtroute.proxy.rewrite.Rewriter`); None: none.

    Size: one state machine per client connection (see the module's Size paragraph): the pumps
    and the answers they hold share its per-channel state; the rewriters
    (:mod:`rtroute.proxy.rewrite`), the permission probe and the proxies' agreement live in
    their own modules.
    """

    def __init__(self, catalogs: Catalog, client: asyncio.Transport,
                 bcc_alias: str, on_refusal: Callable[[str], Any] | None = None,
                 on_open: Callable[[], Any] | None = None,
                 in_flight: int = DEFAULT_BUDGET,
                 others_active: Callable[[Session], int] | None = None,
                 archive: str | None = None) -> None:
        self._catalogs = catalogs
        self._on_refusal = on_refusal
        self._on_open = on_open
        self._vhost: str | None = None  # the vhost whose catalog this session holds
        self._opened: asyncio.Future[str] | None = None  # the broker's open-ok: its vhost
        self._tuned = False
        self._client = client
        self._broker: asyncio.Transport | None = None
        self.catalog: VhostCatalog | None = None
        self._from_client = bytearray()
        self._from_broker = bytearray()
        self._protocol_header = False
        self._broker_started = False
        self._held = False
        self._reading = True  # the client's transport reads (see _update_reading)
        self._reset_watch: asyncio.TimerHandle | None = None  # see _watch_reset
        self._broker_full = False  # the broker's write buffer is above its high mark
        self._closed = False
        self.frame_max = DEFAULT_FRAME_MAX
        self._heartbeat = 0  # seconds, as the client's tune-ok negotiated (0: none)
        self.rewritten = 0  # publishes sent to a NAME.bindings
        self._expected: dict[int, collections.deque[Expected]] = {}
        # channel -> (exchange, its basic.publish frame) of a publish held for its header
        self._publishing: dict[int, tuple[RTopic, bytes]] = {}
        # what the client's frames become for x-rtopic exchanges (rtroute.proxy.rewrite)
        self.rewriter = Rewriter(self, self._publishing, bcc_alias, archive)
        self._closing: dict[int, list[bool]] = {}  # channel -> [client ok, broker ok]
        self._closed_by_broker: dict[int, asyncio.Event] = {}
        self._refusal: str | None = None  # why the broker cannot be reached (see refuse())
        # the plugin's permission checks (see rtroute.proxy.permissions): the exchanges each
        # channel may publish to, asked on the proxy's own channel of the connection
        self._probe = ProbeChannel(self._to_broker)
        self._may_publish: dict[int, set[bytes]] = {}
        # the client's broker work in flight (its share of the broker), and the wait for room
        self.meter = ConfirmMeter(in_flight)
        self._room: asyncio.Future[None] | None = None
        self._others_active = others_active
        self.last_active = 0.0  # time.monotonic() of the client's last bytes

    # -- transports ------------------------------------------------------------------------------

    def broker_connected(self, broker: asyncio.Transport) -> None:
        self._broker = broker
        self._pump_client()
        self._update_reading()

    def broker_writable(self, writable: bool) -> None:
        """The broker's write buffer went above its high mark (False) or back under its low
        mark (True): the client is read again only when nothing else holds it."""
        self._broker_full = not writable
        self._update_reading()

    def _update_reading(self) -> None:
        """Reads the client while nothing holds it: not held (a wait of its own), the broker
        taking what it sends, and at most :data:`CLIENT_READ_AHEAD` bytes not yet pumped."""
        if self._closed:
            return
        reading = not self._held and not self._broker_full and self._broker is not None \
            and len(self._from_client) <= CLIENT_READ_AHEAD
        if reading != self._reading:
            self._reading = reading
            if reading:
                self._client.resume_reading()
            else:
                self._client.pause_reading()
                if self._reset_watch is None:
                    self._watch_reset()

    def _watch_reset(self) -> None:
        """While the client is not read, its socket is checked every :data:`RESET_CHECK` s
        for a reset (asyncio would see it only at its next read): a reset client's session
        ends then, and what the proxy had read of it but not yet sent goes nowhere, as what a
        broker had not read of a reset connection (the kernel drops it; nothing of it was
        confirmed). Before, a client held by its budget that reset its connection kept the
        proxy sending its read-ahead to the broker, metered, for minutes."""
        self._reset_watch = None
        if self._closed or self._reading:
            return
        sock = self._client.get_extra_info("socket")
        if sock is None:
            return  # not a socket: nothing to check
        try:
            error = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        except OSError:
            error = 0
        if error:
            LOG.info("a client not read reset its connection: closed, %d bytes read of it "
                     "and not sent dropped", len(self._from_client))
            self.close()
            return
        self._reset_watch = asyncio.get_running_loop().call_later(RESET_CHECK,
                                                                  self._watch_reset)

    def _to_broker(self, data: bytes) -> None:
        if self._broker is not None and not self._closed:
            self._broker.write(data)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._reset_watch is not None:
            self._reset_watch.cancel()
        self._probe.close()
        self._client.close()
        if self._broker is not None:
            self._broker.close()
        if self._opened is not None and not self._opened.done():
            self._opened.cancel()
        if self._room is not None and not self._room.done():
            self._room.cancel()
        if self._vhost is not None:
            self._catalogs.release(self._vhost)
            self._vhost = None

    def _fail(self, code: int, text: str, kind: str) -> None:
        """Ends the connection as RabbitMQ ends one: ``connection.close`` ``code`` with
        ``text`` to the client (written before the socket closes), the broker connection
        closed."""
        LOG.warning("closing a client connection: %s", text)
        if self._on_refusal is not None:
            self._on_refusal(kind)
        if not self._closed:
            self._client.write(wire.connection_close(code, text))
        self.close()

    def _frame_too_large(self, size: int, frame_type: int = wire.FRAME_METHOD) -> None:
        """A client frame (of ``frame_type``) announces more than the connection allows:
        refused before it is read (RabbitMQ: ``frame_too_large``, naming the frame's type;
        before ``tune-ok`` it just closes the socket)."""
        if not self._tuned:
            LOG.warning("closing a client connection: a frame of %d bytes before tune-ok "
                        "(at most %d)", size, wire.PRE_TUNE_FRAME_MAX)
            if self._on_refusal is not None:
                self._on_refusal("frame_too_large")
            self.close()
            return
        self._fail(501, f"FRAME_ERROR - type {frame_type}, all octets = <<>>: "
                        f"{{frame_too_large,{size - 8},{self.frame_max - 8}}}", "frame_too_large")

    def refuse(self, reason: str) -> None:
        """The broker cannot be reached: the client is told so as RabbitMQ refuses a connection
        during its handshake (``connection.start``, then ``connection.close`` 541 with
        ``reason`` once the client answered), and its connection is closed; a client that does
        not answer is dropped after :data:`REFUSAL_TIMEOUT` seconds."""
        self._refusal = f"INTERNAL_ERROR - rtroute proxy: {reason}"
        asyncio.get_running_loop().call_later(REFUSAL_TIMEOUT, self.close)
        self._pump_refusal()

    def _pump_refusal(self) -> None:
        buf = self._from_client
        if self._closed:
            return
        if not self._protocol_header:
            if len(buf) < 8:
                return
            header = bytes(buf[:8])
            del buf[:8]
            self._protocol_header = True
            if header != wire.PROTOCOL_HEADER:  # as RabbitMQ: the version it speaks, and bye
                self._client.write(wire.PROTOCOL_HEADER)
                self.close()
                return
            self._client.write(wire.connection_start(b"rtroute proxy"))
        while len(buf) >= 7:
            frame_end = _U32(buf, 3)[0] + 8
            if frame_end > wire.PRE_TUNE_FRAME_MAX:
                self._frame_too_large(frame_end)
                return
            if frame_end > len(buf):
                return
            method = _U32(buf, 7)[0] if buf[0] == wire.FRAME_METHOD else None
            del buf[:frame_end]
            if method == wire.CONNECTION_START_OK:
                self._client.write(wire.connection_close(541, self._refusal or ""))
            elif method in (wire.CONNECTION_CLOSE_OK, wire.CONNECTION_CLOSE):
                self.close()
                return

    def client_data(self, data: bytes) -> None:
        self.last_active = monotonic()
        self._from_client += data
        if self._refusal is not None:
            self._pump_refusal()
        elif self._broker is not None:
            self._pump_client()
            if len(self._from_client) > CLIENT_READ_AHEAD:
                self._update_reading()
        elif len(self._from_client) > wire.PRE_TUNE_FRAME_MAX + 8:
            # the broker connection is still being made: the client waits (TCP pushes back)
            self._update_reading()

    def broker_data(self, data: bytes) -> None:
        # most reads (confirms, deliveries of plain exchanges) are whole frames that pass as
        # they are: written on without a copy (the scan stops before the end of data at a
        # frame to look at, or at an incomplete one)
        if not self._from_broker and self._broker_started and not self._closed and \
                self._broker_scan(data, 0)[1] == len(data):
            self._client.write(data)
            return
        self._from_broker += data
        self._pump_broker()

    # -- client to broker ----------------------------------------------------------------------

    def _hold(self, until: Callable[[], Any]) -> None:
        """Stop reading the client until ``until()`` (a coroutine) is done, then go on."""
        self._held = True
        self._update_reading()

        async def wait() -> None:
            try:
                await until()
            finally:
                self._held = False
                if not self._closed:
                    self._pump_client()  # what was read ahead first
                    self._update_reading()

        asyncio.ensure_future(wait())

    def _pump_client(self) -> None:
        if self._held or self._closed:
            return
        buf = self._from_client
        out: list[bytes | memoryview] = []
        pos = 0
        if not self._protocol_header:
            if len(buf) < 8:
                return
            out.append(bytes(buf[:8]))
            pos = self._protocol_header = 8
        run = pos  # start of the bytes passed on as they are
        closing = self._closing
        publishing = self._publishing
        rtopics = self.catalog.exchanges if self.catalog is not None else None
        probe = self._probe.watched
        may_publish = self._may_publish
        meter = self.meter
        counted = meter.channels
        view = memoryview(buf)
        # RabbitMQ's rule: a payload up to frame_max (see rtroute.amqp.frame_codec)
        limit = frame_size_limit(self.frame_max) if self._tuned else wire.PRE_TUNE_FRAME_MAX
        data = b""
        # one client's routing work (a wildcard over many bindings costs milliseconds) takes
        # turns with the others' and with the proxy's own (HTTP, signals)
        deadline = perf_counter() + PUMP_TURN
        try:
            while True:
                # the scanner passes over every frame that goes on as it is (see
                # _CLIENT_SCANNERS) and stops at the next one to look at
                scanner = _CLIENT_SCANNERS[bool(rtopics) or bool(counted)]
                (result, pos, frame_end, kind, channel, method, name, header_end, content_end,
                 head) = scanner.scan(buf, pos, limit, (*publishing, *closing, *probe)
                                      if publishing or closing else probe)
                if result != SCAN_STOP:
                    if result == SCAN_TOO_LARGE:
                        self._frame_too_large(frame_end - pos, buf[pos])
                        return
                    if result == SCAN_BAD_END:
                        self._fail(501, "FRAME_ERROR - rtroute proxy: a frame of the client "
                                        "does not end with 0xCE (got "
                                        f"0x{buf[frame_end - 1]:02X})", "frame_error")
                        return
                    break  # pos: where an incomplete frame begins
                if kind == wire.FRAME_METHOD:
                    if method == _BASIC_PUBLISH and channel not in closing:
                        # the hot path, inline: a publish to an exchange that is no x-rtopic
                        # (or a malformed one: the broker refuses it) passes as it is; one to
                        # an x-rtopic is rewritten with its header (and first, the stream waits
                        # until that exchange's bindings are known)
                        exchange = rtopics.get(name) if name is not None and rtopics else None
                        if exchange is None:
                            if counted and channel in counted:
                                meter.published(channel)  # numbered by the broker
                            pos = frame_end
                            continue
                        if run < pos:
                            out.append(view[run:pos])
                        run = pos
                        allowed = may_publish.get(channel)
                        if allowed is None or name not in allowed:
                            # the first publish of this channel to NAME: may the client's user
                            # write to NAME (the plugin's check)?
                            self._hold(functools.partial(self._may_write, channel, name))
                            break  # this frame again when the answer is in
                        if meter.full:  # the client's share of the broker is in flight
                            self._hold(self._meter_room)
                            break  # this frame again when confirms made room
                        if meter.needs_select(channel):
                            # confirms, to see the broker's progress (no-wait: no answer)
                            out.append(wire.method_frame(channel, wire.CONFIRM_SELECT, b"\x01"))
                            meter.selected_by_proxy(channel)
                        if head is not None and channel not in publishing:
                            # the whole message is here: one rewrite of its publish and
                            # header (cached for a message without headers; an exchange with
                            # cached rewrites is ready), its body as is; so for the messages
                            # right after it that repeat its publish and header
                            if not head[frame_end - pos + FLAGS_OFFSET] & _HEADERS_BIT:
                                cached = exchange.rewritten.get(head)
                                if cached is not None and self.frame_max >= cached[1]:
                                    # as many repeats as the budget has room for
                                    cap = pos + meter.room(cached[2]) * (content_end - pos)
                                    with view[:min(cap, len(buf))] as part:
                                        end, count, repeated = scanner.repeats(
                                            part, pos, limit, head, cached[0])
                                    out.append(repeated)
                                    self.rewritten += count
                                    meter.published(channel, cached[2], count)
                                    run = pos = end
                                    continue
                                if exchange.ready.is_set() and \
                                        self.rewriter.renames_as_published(exchange):
                                    # literal keys without headers go on as published,
                                    # renamed (what route() does with each): this one and
                                    # the run right after it, in one native call
                                    end, count, renamed = scanner.renames(
                                        buf, pos, limit, channel, name,
                                        exchange.bindings_short, meter.room(1))
                                    if count:
                                        out.append(renamed)
                                        self.rewritten += count
                                        meter.published(channel, 1, count)
                                        run = pos = end
                                        continue
                            if not exchange.ready.is_set():
                                self._hold(functools.partial(self._exchange_ready, exchange))
                                break  # this frame again when the wait is over
                            publishing[channel] = (exchange, head[:frame_end - pos])
                            self.rewriter.route(channel, head[frame_end - pos:], out)
                            run = pos = header_end  # the body frames: as is (or void if the
                            if perf_counter() > deadline:  # channel was closed instead)
                                self._hold(_next_turn)  # the other clients' turn
                                break
                            continue
                        if not exchange.ready.is_set():
                            self._hold(functools.partial(self._exchange_ready, exchange))
                            break  # this frame again when the wait is over
                        publishing[channel] = (exchange, bytes(view[pos:frame_end]))
                        run = pos = frame_end
                        continue
                    if method in _CLIENT_METHODS or channel in closing or probe and \
                            channel == probe[0]:
                        if run < pos:
                            out.append(view[run:pos])
                        run = pos
                        payload = view[pos + 7:frame_end - 1].tobytes()
                        if not self._client_method(channel, method, payload, out):
                            break  # held: this frame again when the wait is over
                        run = pos = frame_end
                        if self._held or self._closed:
                            break
                        if method == wire.CONNECTION_TUNE_OK:
                            limit = frame_size_limit(self.frame_max)
                        continue
                elif probe and channel == probe[0]:
                    self._channel_above_max(channel)
                    return
                elif channel in publishing or channel in closing:
                    if run < pos:
                        out.append(view[run:pos])
                    run = frame_end
                    if channel in closing:
                        pass  # the rest of a refused publish
                    elif kind == wire.FRAME_HEADER:
                        self.rewriter.route(channel, bytes(view[pos:frame_end]), out)
                        if perf_counter() > deadline:  # the other clients' turn
                            pos = frame_end
                            self._hold(_next_turn)
                            break
                    else:
                        out.append(view[pos:frame_end])
                pos = frame_end
            if run < pos:
                out.append(view[run:pos])
            if out:
                data = b"".join(out)
        finally:
            out.clear()  # the slices of view go before the buffer is cut
            view.release()
            if not self._closed:
                del buf[:pos]
        if data and self._broker is not None and not self._closed:
            self._broker.write(data)
        if not self._reading and not self._held:  # caught up: read on
            self._update_reading()

    def _channel_above_max(self, channel: int) -> None:
        self._fail(504, f"CHANNEL_ERROR - rtroute proxy: channel {channel} is above the "
                        f"negotiated channel_max ({channel - 1})", "channel_max")

    def _client_method(self, channel: int, method: int, payload: bytes, out: list[bytes]) -> bool:
        """Handles one method frame of the client; False: hold the stream, frame unconsumed."""
        if channel == self._probe.channel:
            self._channel_above_max(channel)
            return False
        if channel in self._closing:
            state = self._closing[channel]
            if method == wire.CHANNEL_CLOSE_OK or method == wire.CHANNEL_CLOSE:
                if method == wire.CHANNEL_CLOSE:  # both closed at once: answer it here
                    self._client.write(wire.method_frame(channel, wire.CHANNEL_CLOSE_OK, b""))
                state[0] = True
                self._closing_done(channel)
            elif method == wire.CHANNEL_OPEN and state[0]:
                # the client is done with the channel, the broker not yet: its reopening waits
                self._hold(self._closed_by_broker[channel].wait)
                return False
            return True  # everything else the client sends on a closing channel is void
        frame = wire.HEAD.pack(wire.FRAME_METHOD, channel, len(payload)) + payload + b"\xce"
        catalog = self.catalog
        if method == wire.CONNECTION_TUNE_OK:  # the proxy's channel above the client's
            frame = self._probe.accept(frame)
        if method == wire.CONNECTION_OPEN:
            if self._opened is not None:  # a second connection.open: the broker refuses it
                out.append(frame)
                return True
            vhost = wire.short(payload, 4)[0].decode("utf-8", "replace")
            out.append(frame)
            self._broker.write(b"".join(out))  # type: ignore[union-attr]
            out.clear()
            # nothing is started for the client before the broker accepted it: its catalog
            # is taken at the broker's open-ok, and the client is read again once it is ready
            opened = self._opened = asyncio.get_running_loop().create_future()

            def open_ok() -> None:
                opened.set_result(vhost)
                if self._on_open is not None:
                    self._on_open()

            self.expect(0, Expected(wire.CONNECTION_OPEN_OK, b"", open_ok))
            self._hold(self._open_catalog)
            return True
        if method == wire.CONNECTION_TUNE_OK:
            self._tuned = True
            self.frame_max = _U32(payload, 6)[0] or DEFAULT_FRAME_MAX
            self._heartbeat = _U16(payload, 10)[0]  # bounds a wait for bindings (LOAD_TIMEOUT)
        elif method == wire.CHANNEL_OPEN:
            pending = self._closed_by_broker.get(channel)
            if pending is not None and not pending.is_set():
                self._hold(pending.wait)
                return False
            self._reset(channel)
        elif method == wire.CHANNEL_CLOSE:  # its confirms will not come: out of the budget
            self.meter.closed(channel)
            self._made_room()
        elif method == wire.CONFIRM_SELECT:
            self.meter.selected_by_client(channel)
        elif method == wire.TX_SELECT:
            if not self.meter.tx_select(channel):
                self.refuse_channel(channel, TX_REFUSED, out, failing=wire.TX_SELECT,
                                    kind="tx_select")
                return True
        elif catalog is not None:
            if method == wire.EXCHANGE_DECLARE:
                return self.rewriter.declare(channel, payload, frame, out, catalog)
            if method == wire.EXCHANGE_DELETE:
                return self.rewriter.delete(channel, payload, frame, out, catalog)
            if method in REPLIES:
                return self.rewriter.bind(channel, method, payload, frame, out, catalog)
        out.append(frame)
        return True

    async def _open_catalog(self) -> None:
        """After the broker's open-ok: the catalog of the vhost, ready, or the client is told
        why not within :data:`READY_TIMEOUT` seconds."""
        assert self._opened is not None
        vhost = await self._opened
        if self._closed:
            return
        self._vhost = vhost
        self.catalog = catalog = self._catalogs.acquire(vhost)
        error = await catalog.wait_ready(READY_TIMEOUT)
        if error is not None:
            self._fail(541, f"INTERNAL_ERROR - rtroute proxy: cannot follow the x-rtopic "
                            f"exchanges of vhost '{vhost}': {error}", "catalog")

    async def _exchange_ready(self, exchange: RTopic) -> None:
        """Until the bindings of ``exchange`` are known, or the client is told why not: it
        waits while they load (a listing in flight or being applied), up to
        :data:`LOAD_TIMEOUT` s; while they do not (the listing failed, the broker connection
        is down), up to :data:`READY_TIMEOUT` s."""
        catalog = self.catalog
        limit = LOAD_TIMEOUT if not self._heartbeat else \
            max(READY_TIMEOUT, min(LOAD_TIMEOUT, self._heartbeat))
        started = perf_counter()
        while not exchange.ready.is_set():
            try:
                await asyncio.wait_for(exchange.ready.wait(), 1.0)
                return
            except asyncio.TimeoutError:
                pass
            waited = perf_counter() - started
            if catalog is None or self._closed:
                return
            progress, loading = catalog.progress(exchange)
            if waited >= (limit if loading else READY_TIMEOUT):
                self._fail(541, f"INTERNAL_ERROR - rtroute proxy: the bindings of x-rtopic "
                                f"exchange '{exchange.name}' are not known after {waited:.0f} s"
                                f" ({'still loading' if loading else 'not loading'}: "
                                f"{progress})", "catalog")
                return

    def expect(self, channel: int, *expected: Expected) -> None:
        self._expected.setdefault(channel, collections.deque()).extend(expected)


    def answer_after(self, channel: int, answer: bytes | None, agreed: Any) -> None:
        """The broker's ``answer`` reaches the client once ``agreed`` (awaitable) is done:
        every proxy applied the change. None: the client asked for no answer."""
        async def wait() -> None:
            await agreed
            if answer is not None and not self._closed and channel not in self._closing:
                self._client.write(answer)

        asyncio.ensure_future(wait())


    def refuse_channel(self, channel: int, text: str, out: list[bytes], code: int = 406,
                kind: str = "publish", failing: int = wire.BASIC_PUBLISH) -> None:
        """Closes ``channel`` on both sides (the publish is not sent): the client sees the
        broker's kind of refusal (``code``); frames of either side on that channel are dropped
        until both answered ``close-ok``, and the client's next ``channel.open`` of that number
        waits for the broker's."""
        self._publishing.pop(channel, None)
        LOG.warning("channel %d: %s", channel, text)
        if self._on_refusal is not None:
            self._on_refusal(kind)
        self._client.write(wire.channel_close(channel, code, text, failing))
        out.append(wire.channel_close(channel, 200, "closed by the rtroute proxy", 0))
        self._closing[channel] = [False, False]
        self._closed_by_broker[channel] = asyncio.Event()
        self._expected.pop(channel, None)
        self.meter.reset(channel)  # its confirms are void now
        self._made_room()

    def _closing_done(self, channel: int) -> None:
        state = self._closing[channel]
        if state[1]:  # whichever side answered first, the broker's close-ok wakes the waiters
            closed = self._closed_by_broker.pop(channel, None)
            if closed is not None:
                closed.set()
        if state[0] and state[1]:
            del self._closing[channel]

    def _reset(self, channel: int) -> None:
        self._expected.pop(channel, None)
        self._publishing.pop(channel, None)
        self._may_publish.pop(channel, None)
        self.meter.reset(channel)
        self._made_room()

    async def _meter_room(self) -> None:
        """Until the client's publishes in flight are under its budget (confirms came, or
        their channel closed); then, while other clients are active, :data:`SHARE_WEIGHT`
        times as long as that took for each of them (at most :data:`SHARE_PAUSE_MAX`): the
        broker's time for this client's work is what it waited, and the others get theirs. A
        client under its budget never waits."""
        if not self.meter.full:
            return
        loop = asyncio.get_running_loop()
        started = loop.time()
        self._room = room = loop.create_future()
        await room
        others = self._others_active(self) if self._others_active is not None else 0
        if others:
            await asyncio.sleep(min(SHARE_PAUSE_MAX,
                                    (loop.time() - started) * others * SHARE_WEIGHT))

    def _made_room(self) -> None:
        room = self._room
        if room is not None and not self.meter.full:
            self._room = None
            if not room.done():
                room.set_result(None)

    async def _may_write(self, channel: int, name: bytes) -> None:
        """Whether the client's user may publish to ``name`` (write on it, as with the plugin);
        if not, the client's channel is closed with the broker's refusal."""
        refused = await self._probe.may_write(name)
        if self._closed or channel in self._closing:
            return
        if refused is None:
            self._may_publish.setdefault(channel, set()).add(name)
            return
        out: list[bytes] = []
        self.refuse_channel(channel, refused.decode("utf-8", "replace"), out, code=403,
                     kind="access_refused")
        self._to_broker(b"".join(out))

    # -- broker to client ----------------------------------------------------------------------

    def _broker_scan(self, data: bytes | bytearray, pos: int) -> tuple[int, ...]:
        """The next frame of the broker's ``data`` from ``pos`` to look at (see
        :data:`_BROKER_SCANNERS`)."""
        expected, closing = self._expected, self._closing
        catalog = self.catalog
        probe = self._probe.watched
        return _BROKER_SCANNERS[(catalog is not None and bool(catalog.by_bindings)) +
                                2 * bool(self.meter.channels)].scan(
            data, pos, 0, (*expected, *closing, *probe) if expected or closing else probe)

    def _pump_broker(self) -> None:
        if self._closed:
            return
        buf = self._from_broker
        out: list[bytes | memoryview] = []
        pos = run = 0
        expected = self._expected
        closing = self._closing
        catalog = self.catalog
        renames = catalog.by_bindings if catalog is not None else {}
        meter = self.meter
        counted = meter.channels
        confirmed = False
        view = memoryview(buf)
        data = b""
        try:
            if not self._broker_started:
                self._broker_started = True
                if buf.startswith(b"AMQP"):  # the broker refuses the protocol version
                    pos = len(buf)  # passed on as is
            while True:
                result, pos, frame_end, kind, channel, method = self._broker_scan(buf, pos)[:6]
                if result != SCAN_STOP:
                    break  # pos: where an incomplete frame begins
                if kind == wire.FRAME_METHOD:
                    if method in _RENAMED and renames:
                        start = wire.exchange_position(method, view[pos + 7:frame_end - 1])
                        name_at = pos + 7 + start
                        exchange = renames.get(bytes(buf[name_at + 1:name_at + 1 + buf[name_at]]))
                        if exchange is not None:
                            if run < pos:
                                out.append(view[run:pos])
                            out.append(wire.rename_exchange(
                                channel, view[pos + 7:frame_end - 1].tobytes(), start,
                                exchange.wire_name))
                            run = frame_end
                    elif method in _CONFIRMS and channel in counted and channel not in closing:
                        # a confirm: out of the client's budget; to the client in its own
                        # numbering, or not at all when it did not ask for confirms
                        tag = _U64(buf, pos + 11)[0]
                        given = meter.confirmed(channel, tag, buf[pos + 19] & 1)
                        confirmed = True
                        if given != tag:
                            if run < pos:
                                out.append(view[run:pos])
                            run = frame_end
                            if given is not None:
                                out.append(wire.method_frame(channel, method, wire.U64.pack(
                                    given) + bytes((buf[pos + 19],))))
                    elif channel in expected or channel in closing or \
                            method == wire.CHANNEL_CLOSE or method == wire.CONNECTION_TUNE or \
                            channel == self._probe.channel:
                        if run < pos:
                            out.append(view[run:pos])
                        run = frame_end
                        self._broker_method(channel, method, view[pos:frame_end].tobytes(), out)
                elif channel in closing:
                    if run < pos:
                        out.append(view[run:pos])
                    run = frame_end
                pos = frame_end
            if run < pos:
                out.append(view[run:pos])
            if out:
                data = b"".join(out)
        finally:
            out.clear()  # the slices of view go before the buffer is cut
            view.release()
            del buf[:pos]
        if data:
            self._client.write(data)
        if confirmed:
            self._made_room()

    def _broker_method(self, channel: int, method: int, frame: bytes, out: list[bytes]) -> None:
        if channel == self._probe.channel:
            self._probe.broker_method(method, frame)
            return
        if method == wire.CONNECTION_TUNE:  # one channel less for the client: the proxy's
            out.append(self._probe.offer(frame))
            return
        if channel in self._closing:
            if method == wire.CHANNEL_CLOSE_OK or method == wire.CHANNEL_CLOSE:
                if method == wire.CHANNEL_CLOSE:  # both closed at once: answer it here
                    self._broker.write(wire.method_frame(  # type: ignore[union-attr]
                        channel, wire.CHANNEL_CLOSE_OK, b""))
                self._closing[channel][1] = True
                self._closing_done(channel)
            return  # anything else on a channel being closed is void
        queue = self._expected.get(channel)
        if method == wire.CHANNEL_CLOSE:
            refused = queue[0].refused if queue else None
            names = next((e.names for e in queue or () if e.names), None)
            self._reset(channel)
            if refused is not None:
                frame = refused(frame)
            elif names is not None:  # a refused injected method names NAME, as the plugin
                frame = renamed_in_close(channel, frame, names)
            elif self.catalog is not None:  # e.g. a refused publish to an internal NAME
                frame = rtopic_named_in_close(channel, frame, self.catalog.by_bindings)
                frame = rtopic_type_in_close(channel, frame, self.catalog.exchanges)
            out.append(frame)
            return
        if queue and queue[0].method == method:
            expected = queue.popleft()
            if not queue:
                del self._expected[channel]
            if expected.answer is not None:
                out.append(expected.answer or frame)
            if expected.then is not None:
                expected.then()
            return
        out.append(frame)


async def _next_turn() -> None:
    """Until the loop served what else is ready (see :data:`PUMP_TURN`)."""
    await asyncio.sleep(0)


if TYPE_CHECKING:  # the session is the rewriters' pumps (rtroute.proxy.rewrite.Pumps)
    _PUMPS: type[Pumps] = Session
