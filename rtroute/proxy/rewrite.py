"""The proxy's rewriters: what a client's frames become for an x-rtopic exchange.

A :class:`~rtroute.proxy.session.Session` pumps a client's bytes to the broker and back and
stops only where a frame must change; what it then becomes is decided here (see the session's
module docstring for the whole list):

- :meth:`Rewriter.declare`: ``exchange.declare`` of type ``x-rtopic`` becomes the layout's
  declarations on the client's own channel (``NAME.bindings``, ``NAME`` as a marked fanout,
  the registration), the broker's answers swallowed but the last;
- :meth:`Rewriter.delete`: ``exchange.delete`` of an x-rtopic ``NAME`` deletes both exchanges;
- :meth:`Rewriter.bind`: ``queue.bind``/``unbind`` and ``exchange.bind``/``unbind`` from
  ``NAME`` bind from ``NAME.bindings`` after the plugin's permission check;
- :meth:`Rewriter.route`: a publish to ``NAME`` (its publish frame and content header) routed
  and sent as one publish to ``NAME.bindings`` with ``BCC`` = one binding key per destination
  (and, with an archive stream, its key ``ARCHIVE_KEY``: every message reaches it), or its
  channel refused when one header frame cannot carry the match set or the archive stream is
  not bound;
- the broker's ``channel.close`` texts that name ``NAME.bindings`` or the layout's fanout
  (:func:`renamed_in_close`, :func:`rtopic_named_in_close`, :func:`rtopic_type_in_close`),
  told as RabbitMQ tells them with the plugin.

The rewriters touch the pumps only through :class:`Pumps`: the negotiated ``frame_max``, the
client's :class:`~rtroute.proxy.confirm_meter.ConfirmMeter` and ``rewritten`` count, the
answers a channel expects (``expect``), an answer held until every proxy agreed
(``answer_after``), and a channel refused (``refuse_channel``).
"""
from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable, Protocol

from rtroute.amqp.content_header import FLAG_HEADERS, FLAGS_OFFSET, ContentHeader
from rtroute.amqp.frame_codec import FRAME_HEAD_AND_END, frame_fits
from rtroute.core import MAX_QUERY_BYTES
from rtroute.core.headers import HeaderKeys
from rtroute.proxy import wire
from rtroute.proxy.catalog import BINDINGS_SUFFIX, LAYOUT_ARGUMENTS, REGISTRY_EXCHANGE
from rtroute.proxy.permissions import read_probe
from rtroute.routing.rtopic_layout import ARCHIVE_KEY

if TYPE_CHECKING:
    from rtroute.proxy.catalog import RTopic, VhostCatalog
    from rtroute.proxy.confirm_meter import ConfirmMeter

__all__ = ["Expected", "Pumps", "Rewriter", "renamed_in_close", "rtopic_named_in_close",
           "rtopic_type_in_close"]

_U16 = wire.U16.unpack_from
_HEADERS_BIT = FLAG_HEADERS >> 8  # in the content header's first flags octet
#: the bind and unbind methods the rewriters take, with their answers
REPLIES = {wire.EXCHANGE_BIND: wire.EXCHANGE_BIND_OK, wire.EXCHANGE_UNBIND: wire.EXCHANGE_UNBIND_OK,
           wire.QUEUE_BIND: wire.QUEUE_BIND_OK, wire.QUEUE_UNBIND: wire.QUEUE_UNBIND_OK}
_NO_WAIT = 16  # exchange.declare's no-wait bit


class Expected:
    """An answer a channel waits for: ``answer`` None swallows it, else the client gets
    ``answer`` (``b""``: the broker's frame as is) and ``then()`` runs. If the broker closes
    the channel instead, ``refused(close frame)`` is what the client gets (default: the close
    with ``'NAME.bindings'`` named ``'NAME'``)."""

    __slots__ = ("answer", "method", "names", "refused", "then")

    def __init__(self, method: int, answer: bytes | None = None,
                 then: Callable[[], Any] | None = None,
                 names: tuple[bytes, bytes] | None = None,
                 refused: Callable[[bytes], bytes] | None = None) -> None:
        self.method = method
        self.answer = answer
        self.then = then
        self.names = names  # (NAME, NAME.bindings): a refusal's text names NAME
        self.refused = refused


class Pumps(Protocol):
    """What the rewriters use of the session's pumps (a
    :class:`~rtroute.proxy.session.Session`)."""

    frame_max: int
    rewritten: int
    meter: ConfirmMeter

    def expect(self, channel: int, *expected: Expected) -> None: ...

    def answer_after(self, channel: int, answer: bytes | None, agreed: Any) -> None: ...

    def refuse_channel(self, channel: int, text: str, out: list[bytes], code: int = 406,
                       kind: str = "publish", failing: int = wire.BASIC_PUBLISH) -> None: ...


class Rewriter:
    """The rewriters of one client connection (see the module docstring).

    Args:
        pumps: the session whose frames are rewritten.
        publishing: the session's channel -> (exchange, its ``basic.publish`` frame) of each
            publish held for its content header (:meth:`route` takes it out).
        bcc_alias: the sidecar's BCC alias header, honoured and stripped here too.
        archive: the archive stream of each x-rtopic exchange (``{exchange}`` stands for its
            name), bound to ``NAME`` and to ``NAME.bindings`` with ``ARCHIVE_KEY`` at each
            declaration; every publish carries that key in its ``BCC``, and a publish to an
            exchange whose archive is not bound is refused. None: no archive.
    """

    def __init__(self, pumps: Pumps, publishing: dict[int, tuple[RTopic, bytes]],
                 bcc_alias: str, archive: str | None = None) -> None:
        self._pumps = pumps
        self._publishing = publishing
        self._bcc_alias = bcc_alias
        self._bcc_alias_wire = bcc_alias.encode("utf-8")
        self._archive = archive

    def renames_as_published(self, exchange: RTopic) -> bool:
        """True when :meth:`route` sends every publish to ``exchange`` without headers whose
        routing key holds no ``*`` or ``#`` as published, only renamed to ``NAME.bindings``
        (cost 1): no archive, and the router routes such keys as published."""
        return self._archive is None and exchange.router.routes_as_published("")

    def archive_of(self, name: str) -> str | None:
        """The archive stream of the x-rtopic exchange ``name`` (None: no archive)."""
        return None if self._archive is None else self._archive.replace("{exchange}", name)

    def _unarchived(self, channel: int, exchange: RTopic, out: list[bytes]) -> bool:
        """True (and the channel refused, the publish not sent) when an archive is asked for
        and ``exchange``'s is not bound to its ``NAME.bindings``: the message would be
        confirmed and missing from the archive."""
        queue = self.archive_of(exchange.name)
        if queue is None or exchange.router.archived_to(("queue", queue)):
            return False
        self._pumps.refuse_channel(
            channel, f"NOT_FOUND - rtroute proxy: archive stream '{queue}' not bound to "
            f"x-rtopic exchange '{exchange.name}' (declare the stream, then the exchange "
            "through the proxy: it binds it)", out, code=404)
        return True

    def declare(self, channel: int, payload: bytes, frame: bytes, out: list[bytes],
                catalog: VhostCatalog) -> bool:
        """An ``exchange.declare`` of the client (``payload``; ``frame`` as it came): the
        layout's declarations for an x-rtopic one, else the frame as is. True: consumed."""
        declare = wire.parse_declare(payload)
        if declare.type != b"x-rtopic" or declare.passive or \
                catalog.plugin and catalog.rtopic(declare.exchange) is None:
            # a passive declaration only checks that the exchange exists, whatever its type,
            # as with the plugin (and registers nothing); where the broker runs the plugin, an
            # exchange not in rtroute's layout is the plugin's (docs/migrate.md: side by side)
            out.append(frame)
            return True
        name, bindings = declare.exchange, declare.exchange + BINDINGS_SUFFIX.encode()
        bits = declare.bits & ~_NO_WAIT
        answer = None if declare.nowait else \
            wire.method_frame(channel, wire.EXCHANGE_DECLARE_OK, b"")
        text = name.decode("utf-8", "replace")
        names = (name, bindings)
        known = catalog.rtopic(name) is not None
        if known:
            # an x-rtopic exchange that exists: checked, whatever type its NAME.bindings has
            out.append(wire.declare(channel, bindings, b"topic", bits | 1))
            self._pumps.expect(channel, Expected(wire.EXCHANGE_DECLARE_OK, names=names))
        else:  # direct on RabbitMQ 4, topic on 3.x, as the sidecar declares it
            out.append(wire.declare(channel, bindings, catalog.bindings_type.encode(),
                                    bits, declare.arguments))
            self._pumps.expect(channel, Expected(
                wire.EXCHANGE_DECLARE_OK, names=names,
                refused=lambda close: _bindings_refused(channel, close, names)))

        def name_refused(close: bytes) -> bytes:
            if not known:  # NAME.bindings was declared just now: not left behind unused
                catalog.discard_unused(bindings.decode("utf-8", "replace"))
            return _name_refused(channel, close, name)

        # the layout's fanout, marked as such (the mark holds on an exchange created here; a
        # declaration needs configure permission on NAME, so the mark says who may register)
        out.append(wire.declare(channel, name, b"fanout", bits, LAYOUT_ARGUMENTS))
        self._pumps.expect(channel, Expected(wire.EXCHANGE_DECLARE_OK, names=names,
                                        refused=name_refused))
        archive = self.archive_of(text)
        if archive is not None:  # what is published to NAME directly, and through a proxy
            queue = archive.encode("utf-8")
            for source, key in ((name, b""), (bindings, ARCHIVE_KEY.encode())):
                out.append(wire.queue_bind(channel, queue, source, key))
                self._pumps.expect(channel, Expected(wire.QUEUE_BIND_OK, names=names))
        out.append(wire.bind(channel, bindings, REGISTRY_EXCHANGE.encode(), name))

        def registered() -> None:
            catalog.learn(text)
            # declare-ok once every proxy knows NAME is x-rtopic (rtroute.proxy.sync)
            self._pumps.answer_after(channel, answer, catalog.announce({"learn": text}))

        self._pumps.expect(channel, Expected(wire.EXCHANGE_BIND_OK, None, registered, names))
        return True

    def delete(self, channel: int, payload: bytes, frame: bytes, out: list[bytes],
               catalog: VhostCatalog) -> bool:
        """An ``exchange.delete`` of the client: both exchanges of an x-rtopic one."""
        delete = wire.parse_delete(payload)
        exchange = catalog.rtopic(delete.exchange)
        if exchange is None:
            out.append(frame)
            return True
        names = (exchange.wire_name, exchange.wire_bindings)
        answer = None if delete.nowait else \
            wire.method_frame(channel, wire.EXCHANGE_DELETE_OK, b"")
        out.append(wire.delete(channel, exchange.wire_bindings, delete.bits & 1))
        out.append(wire.delete(channel, exchange.wire_name, 0))
        self._pumps.expect(channel, Expected(wire.EXCHANGE_DELETE_OK, names=names),
                     Expected(wire.EXCHANGE_DELETE_OK, answer,
                               lambda: catalog.forget(exchange.name), names))
        return True

    def bind(self, channel: int, method: int, payload: bytes, frame: bytes, out: list[bytes],
             catalog: VhostCatalog) -> bool:
        """A ``queue.bind``/``unbind`` or ``exchange.bind``/``unbind`` of the client: from
        ``NAME.bindings`` for an x-rtopic source, after the plugin's permission check."""
        bind = wire.parse_bind(method, payload)
        exchange = catalog.rtopic(bind.source)
        if exchange is None:
            out.append(frame)
            return True
        # the plugin's check first, on the client's channel: write on the destination and read
        # on NAME (a refusal closes the channel with the broker's text, as with the plugin)
        out.append(read_probe(channel, method, bind.destination, exchange.wire_name))
        unbind_ok = wire.QUEUE_UNBIND_OK if method in (wire.QUEUE_BIND, wire.QUEUE_UNBIND) \
            else wire.EXCHANGE_UNBIND_OK
        probed = Expected(unbind_ok, refused=_as_is)
        self._pumps.expect(channel, probed)
        out.append(bind.frame(channel, exchange.wire_bindings))
        destination = (bind.destination_type, bind.destination.decode("utf-8", "replace"))
        key = bind.routing_key.decode("utf-8", "replace")
        added = method in (wire.QUEUE_BIND, wire.EXCHANGE_BIND)

        def learn() -> None:
            catalog.bind(exchange.wire_name, destination, key, added)

        def learn_everywhere() -> None:
            learn()
            if added:  # bind-ok once every proxy routes by it (rtroute.proxy.sync)
                self._pumps.answer_after(channel, wire.method_frame(channel, REPLIES[method], b""),
                                   catalog.announce({"bind": exchange.name,
                                                     "destination": list(destination),
                                                     "key": key}))

        if bind.nowait:  # learnt once the probe passed (the broker's answer to it)
            probed.then = learn
        else:
            self._pumps.expect(channel, Expected(REPLIES[method], None if added else b"",
                                            learn_everywhere,
                                            (exchange.wire_name, exchange.wire_bindings)))
        return True

    def route(self, channel: int, header: bytes, out: list[bytes]) -> None:
        """The content header of a publish to an x-rtopic exchange: route, rewrite, send."""
        exchange, publish = self._publishing.pop(channel)
        frame_max = self._pumps.frame_max
        cache_key = None
        if not header[FLAGS_OFFSET] & _HEADERS_BIT:
            # no headers: the same publish and properties are rewritten alike
            cache_key = publish + header
            cached = exchange.rewritten.get(cache_key)
            if cached is not None and frame_max >= cached[1]:
                out.append(cached[0])
                self._pumps.rewritten += 1
                self._pumps.meter.published(channel, cached[2])
                return
        archive = self._archive is not None  # then every publish carries ARCHIVE_KEY
        if archive and self._unarchived(channel, exchange, out):
            return
        routing_key = wire.publish_key(publish)
        if cache_key is not None and not archive and \
                exchange.router.routes_as_published(routing_key):
            # a literal key and no headers: sent as published, nothing planned (a new key
            # per message misses every cache; its plan would be "no BCC" anyway)
            self._send_routed(channel, exchange, publish, header, out, cache_key, 1)
            return
        # CC, BCC and the alias read from the frame (no table decoding): the common case
        read = HeaderKeys.read(header, self._bcc_alias_wire, MAX_QUERY_BYTES) \
            if routing_key.isascii() else None
        if read is None:
            self._route_general(channel, exchange, publish, routing_key, header, out, cache_key)
            return
        if not read.cc and not read.drops and not archive and \
                exchange.router.routes_as_published(routing_key):
            # a literal key, no CC/BCC/alias (a header per message): as published
            self._send_routed(channel, exchange, publish, header, out, cache_key, 1)
            return
        key = routing_key.decode("ascii")
        plan_key = (key, frame_max, read.cc, read.bcc, read.alias) if read.has_table \
            else (key, frame_max)
        # the BCC of its one publish (or the router's decision when it is not that)
        plan = exchange.planned.get(plan_key)
        if plan is None:
            router = exchange.router
            router.frame_max = frame_max
            cc, bcc = read.cc or (), (*(read.bcc or ()), *(read.alias or ()))
            plan = router.plan_bcc(key, cc, bcc, read.table_size)
            if plan is None:
                plan = router.decide_keys(key, cc, bcc, read.table_size)
            exchange.keep_plan(plan_key, plan)
        bcc = plan if type(plan) is tuple else None
        if bcc is not None or plan.error is None:
            if bcc is None:
                bcc = self._one_publish(channel, key, plan, out)
                if bcc is None:
                    return
            if archive and ARCHIVE_KEY not in bcc:
                bcc = (*bcc, ARCHIVE_KEY)
            if bcc or read.drops:
                header = read.rewrite(exchange.bcc_entry(bcc) if bcc else b"")
                if not frame_fits(len(header), frame_max):
                    self._bcc_too_large(channel, out)
                    return
        elif archive:  # the broker may take what cannot be archived
            self._unroutable(channel, plan.error, out)
            return
        # else as published (a key too long for a query: the broker's own refusal)
        self._send_routed(channel, exchange, publish, header, out, cache_key,
                          1 + len(bcc) if bcc else 1)

    def _route_general(self, channel: int, exchange: RTopic, publish: bytes, routing_key: bytes,
                       header: bytes, out: list[bytes], cache_key: bytes | None) -> None:
        """:meth:`_route` for what rtroute.core.headers leaves to the general path: the whole
        headers table decoded (a CC or BCC that is no array of strings, a key that is not
        ASCII, a malformed frame), its plan cached as the common case's."""
        frame_max = self._pumps.frame_max
        if not _U16(header, 11 + 8)[0]:  # no properties at all
            headers = None
        elif header[FLAGS_OFFSET] & (FLAG_HEADERS >> 8):
            edited: ContentHeader | None = ContentHeader(header)
            headers = edited.get("headers")  # type: ignore[union-attr]
        else:
            headers = None
        if headers is None:
            edited = None
        router = exchange.router
        router.frame_max = frame_max
        router.bcc_alias = self._bcc_alias  # the proxy's (bcc_alias_header), not the default
        try:
            key = routing_key.decode("utf-8")
        except UnicodeDecodeError:
            key = None
        # (None first: not a key of the common path, whose plans are BCC tuples)
        plan_key = _plan_key(key, headers, self._bcc_alias, frame_max)
        if plan_key is not None:
            plan_key = (None, *plan_key)
        decision = exchange.planned.get(plan_key) if plan_key is not None else None
        if decision is None and key is not None:
            decision = router.decide(key, headers)
            if plan_key is not None:
                exchange.keep_plan(plan_key, decision)
        if self._archive is not None and (decision is None or decision.error is not None):
            self._unroutable(channel, "a routing key that is not UTF-8" if decision is None
                             else decision.error, out)
            return
        if decision is None or decision.error is not None:
            # as published (a CC or BCC that is no array: the broker closes the channel as it
            # would with the plugin)
            self._send_routed(channel, exchange, publish, header, out, None, 1)
            return
        bcc = self._one_publish(channel, key, decision, out)  # type: ignore[arg-type]
        if bcc is None:
            return
        if self._archive is not None and ARCHIVE_KEY not in bcc:
            bcc = (*bcc, ARCHIVE_KEY)
        if bcc or (headers is not None and ("BCC" in headers or self._bcc_alias in headers)):
            if edited is None:
                edited = ContentHeader(header)
            edited.drop_headers((self._bcc_alias, "BCC"))
            if bcc:  # encoded once per plan: a BCC of 100 keys costs more than the routing
                edited.set_encoded_header("BCC", exchange.bcc_entry(bcc))
            header = edited.frame(channel)
            if not frame_fits(len(header), frame_max):
                self._bcc_too_large(channel, out)
                return
        self._send_routed(channel, exchange, publish, header, out, cache_key,
                          1 + len(bcc) if bcc else 1)

    def _one_publish(self, channel: int, key: str, decision: Any, out: list[bytes]
                     ) -> tuple[str, ...] | None:
        """The ``BCC`` of the one publish ``decision`` makes of the client's, or None when it
        makes more than one, or another (the channel is then refused: the client's confirm
        would not be for what was sent)."""
        publishes = decision.publishes
        if len(publishes) > 1 or (publishes and (
                publishes[0].bcc is None or publishes[0].routing_key != key)):
            self._pumps.refuse_channel(
                channel, "PRECONDITION_FAILED - rtroute proxy: the message matched more binding "
                f"keys than one header frame of {self._pumps.frame_max} bytes can carry", out)
            return None
        return publishes[0].bcc if publishes else ()

    def _unroutable(self, channel: int, error: str | None, out: list[bytes]) -> None:
        """With an archive, a publish the router cannot route is refused (the broker might
        confirm it, routed by its own rules, and the archive would miss it)."""
        self._pumps.refuse_channel(
            channel, f"PRECONDITION_FAILED - rtroute proxy: {error}: not routed, nor archived",
            out)

    def _bcc_too_large(self, channel: int, out: list[bytes]) -> None:
        self._pumps.refuse_channel(
            channel, "PRECONDITION_FAILED - rtroute proxy: the matched binding keys do not fit "
            f"in a header frame of {self._pumps.frame_max} bytes", out)

    def _send_routed(self, channel: int, exchange: RTopic, publish: bytes, header: bytes,
                     out: list[bytes], cache_key: bytes | None, cost: int) -> None:
        """Sends the publish to ``NAME.bindings`` with ``header``; ``cache_key``: the client's
        frames of a message without headers, whose rewrite is kept for its repeats; ``cost``:
        the routing keys it carries (its key and ``BCC`` entries), metered until confirmed."""
        frames = wire.renamed_publish(publish, exchange.bindings_short) + header
        out.append(frames)
        self._pumps.rewritten += 1
        self._pumps.meter.published(channel, cost)
        if cache_key is not None:
            if len(exchange.rewritten) >= 4096:
                exchange.rewritten.clear()
            # with the least frame_max that takes its header frame
            exchange.rewritten[cache_key] = (frames, len(header) - FRAME_HEAD_AND_END, cost)

# RabbitMQ's refusal of a permission (3.x: "access to", 4.x: "read access to"...)
_PERMISSION_REFUSED = re.compile(rb"ACCESS_REFUSED - (?:\w+ )?access to ")


def _plan_key(key: str | None, headers: dict | None, alias: str, frame_max: int
              ) -> tuple | None:
    """What the router's decision for a message depends on: its routing key, its ``CC``,
    ``BCC`` and alias headers (string lists: anything else is decided each time) and the
    frame size; None: not to be cached."""
    if key is None:
        return None
    if headers is None:
        return (key, frame_max)
    parts: list[Any] = [key, frame_max]
    for name in ("CC", "BCC", alias):
        if name not in headers:
            parts.append(None)
            continue
        value = headers[name]  # a void one (None) is refused by the broker: not cached
        if type(value) is list and all(type(v) is str for v in value):
            parts.append(tuple(value))
        else:
            return None
    return tuple(parts)


def _as_is(frame: bytes) -> bytes:
    return frame


def renamed_in_close(channel: int, frame: bytes, names: tuple[bytes, bytes]) -> bytes:
    """A ``channel.close`` whose text names ``'NAME.bindings'`` naming ``'NAME'``, but a
    permission refusal (403): it names what the broker refused (the plugin's checks on ``NAME``
    were made before, see rtroute.proxy.permissions)."""
    if wire.U16.unpack_from(frame, 11)[0] == 403 and \
            _PERMISSION_REFUSED.match(wire.short(frame[7:-1], 6)[0]):
        return frame
    return _close_text(channel, frame, lambda text: text.replace(
        b"'" + names[1] + b"'", b"'" + names[0] + b"'"))


def rtopic_named_in_close(channel: int, frame: bytes, by_bindings: dict[bytes, RTopic]
                           ) -> bytes:
    """A ``channel.close`` whose text names an x-rtopic exchange's ``'NAME.bindings'``,
    naming ``'NAME'`` instead (the client never sees NAME.bindings)."""
    text = wire.short(frame[7:-1], 6)[0]
    for quoted in text.split(b"'")[1::2]:
        exchange = by_bindings.get(quoted)
        if exchange is not None:
            return renamed_in_close(channel, frame, (exchange.wire_name, quoted))
    return frame


def _close_text(channel: int, frame: bytes, edit: Callable[[bytes], bytes]) -> bytes:
    """The ``channel.close`` ``frame`` with its text edited (cut to 255 bytes)."""
    payload = frame[7:-1]
    text, after = wire.short(payload, 6)
    return wire.method_frame(channel, wire.CHANNEL_CLOSE, payload[4:6] +
                             wire.shortstr(edit(text)[:255]) + payload[after:])


_INEQUIVALENT_TYPE = b"PRECONDITION_FAILED - inequivalent arg 'type' for exchange '"


def _inequivalent_type(frame: bytes, exchange: bytes) -> bool:
    """Whether the ``channel.close`` ``frame`` refuses a declaration of ``exchange`` because
    the exchange exists with another type."""
    text = wire.short(frame[7:-1], 6)[0]
    return text.startswith(_INEQUIVALENT_TYPE + exchange + b"' in vhost ")


def rtopic_type_in_close(channel: int, frame: bytes, exchanges: dict[bytes, RTopic]) -> bytes:
    """A ``channel.close`` refusing to redeclare an x-rtopic exchange ``NAME`` with another
    type: the broker names the layout's fanout as the current type; with the plugin, RabbitMQ
    names ``''x-rtopic''``, and so does the client's copy."""
    text = wire.short(frame[7:-1], 6)[0]
    if not text.startswith(_INEQUIVALENT_TYPE) or \
            text[len(_INEQUIVALENT_TYPE):].split(b"'", 1)[0] not in exchanges:
        return frame
    return _close_text(channel, frame, lambda text: text.replace(
        b" but current is 'fanout'", b" but current is ''x-rtopic''", 1))


def _bindings_refused(channel: int, frame: bytes, names: tuple[bytes, bytes]) -> bytes:
    """The broker refused to declare ``NAME.bindings``. Another type than the proxy's: the
    broker's text as is (it names ``NAME.bindings`` and both types) and what that exchange is
    for; any other refusal (flags, arguments, permissions) is about the client's ``NAME``."""
    if not _inequivalent_type(frame, names[1]):
        return renamed_in_close(channel, frame, names)
    return _close_text(channel, frame, lambda text: text + b" (the binding table of x-rtopic "
                       b"exchange '" + names[0] + b"': delete it or use another name)")


def _name_refused(channel: int, frame: bytes, name: bytes) -> bytes:
    """The broker refused to declare ``NAME`` as fanout: it exists with another type. The
    client is told as RabbitMQ tells it with the plugin: it declared ``x-rtopic``."""
    if not _inequivalent_type(frame, name):
        return frame
    return _close_text(channel, frame, lambda text: text.replace(
        b": received 'fanout' but current is ", b": received ''x-rtopic'' but current is ", 1))
