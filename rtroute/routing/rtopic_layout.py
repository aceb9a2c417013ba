"""The names and marks of an x-rtopic exchange ``NAME`` in rtroute's broker layout, shared by
the proxy, the sidecar and the definitions converter (constants only, no I/O):

- ``NAME``: a fanout, what publishers publish to, marked with ``LAYOUT_ARGUMENT = "rtopic"``;
- ``NAME`` + ``BINDINGS_SUFFIX``: where queues and exchanges are bound with the plugin's keys;
- an exchange-to-exchange binding ``REGISTRY_EXCHANGE`` -> ``NAME.bindings`` with key ``NAME``:
  the broker's own record that ``NAME`` is x-rtopic, which every proxy follows;
- an archive stream bound to ``NAME`` (what is published there directly) and to
  ``NAME.bindings`` with ``ARCHIVE_KEY`` (what a proxy publishes there: it adds that key to
  the ``BCC`` of every publish it rewrites). No router routes to a binding with that key (it
  is not a destination of anyone's routing key), so the archive holds each message once.
"""
from __future__ import annotations

__all__ = ["ARCHIVE_KEY", "BINDINGS_SUFFIX", "LAYOUT_ARGUMENT", "LAYOUT_VALUE", "REGISTRY_EXCHANGE"]

LAYOUT_ARGUMENT = "x-rtroute-layout"
LAYOUT_VALUE = "rtopic"
REGISTRY_EXCHANGE = "rtroute.rtopic"
BINDINGS_SUFFIX = ".bindings"
#: the binding key of an archive stream on ``NAME.bindings`` (reserved: see above)
ARCHIVE_KEY = "x-rtroute-archive"
