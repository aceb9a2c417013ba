"""The proxy's rewrites with an archive stream, without a broker: every publish to an x-rtopic
exchange carries the archive key in its BCC (matched or not, headers or none, from the cache
too), nothing else changes; with the archive not bound to the exchange, the publish is refused
(404) and nothing is sent (tests/proxy/test_archive_stream.py does it on the brokers)."""
from __future__ import annotations

import asyncio
import struct

from rtroute.amqp.content_header import ContentHeader
from rtroute.proxy import wire
from rtroute.routing.rtopic_layout import ARCHIVE_KEY

from .test_session_pumps import client_stream, cuts, new_session, scanner  # noqa: F401


def _run(data: list[bytes], archive_bound: bool) -> tuple[bytes, bytes]:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    session, client, broker = new_session()
    session.rewriter._archive = "{exchange}.archive"
    logs = session.catalog.exchanges[b"logs"]
    if archive_bound:
        logs.bind(("queue", "logs.archive"), ARCHIVE_KEY, True)
    for piece in data:
        session.client_data(piece)
        while session._held:
            loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    return bytes(broker.data), bytes(client.data)


def _publishes(data: bytes) -> list[tuple[bytes, list | None]]:
    """(exchange, BCC) of each publish in ``data``."""
    out, pos, exchange = [], 0, None
    while pos < len(data):
        size = struct.unpack_from(">I", data, pos + 3)[0]
        end = pos + size + 8
        if data[pos] == 1 and struct.unpack_from(">I", data, pos + 7)[0] == wire.BASIC_PUBLISH:
            exchange = data[pos + 14:pos + 14 + data[pos + 13]]
        elif data[pos] == 2:
            headers = ContentHeader(data[pos:end]).get("headers")
            out.append((exchange, sorted(headers["BCC"]) if headers else None))
        pos = end
    return out


def test_every_rewritten_publish_carries_the_archive_key(scanner):  # noqa: F811
    whole, _ = _run([client_stream()], archive_bound=True)
    cut, _ = _run(cuts(client_stream(), seed=5), archive_bound=True)
    assert whole == cut   # the cached and the frame-by-frame paths agree
    got = _publishes(whole)
    assert [e for e, _ in got] == [b"logs.bindings"] * 7 + [b"plain", b""] + \
        [b"logs.bindings"] * 4
    assert [b for _, b in got] == [sorted(["a.b", "a.c", ARCHIVE_KEY])] * 6 + [
        sorted(["b.c.d", ARCHIVE_KEY]), None, None, sorted(["a.b", "a.c", "x.c", ARCHIVE_KEY]),
        [ARCHIVE_KEY], [ARCHIVE_KEY], sorted(["a.b", "a.c", ARCHIVE_KEY])]


def test_a_publish_whose_archive_is_not_bound_is_refused_and_not_sent(scanner):  # noqa: F811
    to_broker, to_client = _run([client_stream()], archive_bound=False)
    assert not [e for e, _ in _publishes(to_broker) if e == b"logs.bindings"]
    assert b"NOT_FOUND - rtroute proxy: archive stream 'logs.archive' not bound" in to_client
    assert struct.pack(">HH", 20, 40) in to_client   # channel.close to the client
