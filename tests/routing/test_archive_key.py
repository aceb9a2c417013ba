"""The archive key (rtroute.routing.rtopic_layout.ARCHIVE_KEY): a binding with it is an
archive stream, reached by the proxy's BCC, never a destination of anyone's routing (or the
sidecar's republishes and a wildcard would put a second copy in the archive)."""
from __future__ import annotations

from rtroute.routing.exchange_router import ExchangeRouter
from rtroute.routing.rtopic_layout import ARCHIVE_KEY


def test_the_archive_key_is_no_destination_of_routing():
    router = ExchangeRouter("x", "rtopic")
    router.bind(("queue", "x.archive"), ARCHIVE_KEY)
    router.bind(("queue", "q"), "a.b")
    assert router.archived_to(("queue", "x.archive"))
    assert router.decide("#").matched == ("a.b",)     # the archive is no match of '#'
    assert (("queue", "x.archive"), ARCHIVE_KEY) in router.bindings()
    router.replace_bindings([(("queue", "q"), "a.b")])
    assert not router.archived_to(("queue", "x.archive"))
