"""The names and marks of an x-rtopic exchange ``NAME`` in rtroute's broker layout, shared by
the proxy, the sidecar and the definitions converter (constants only, no I/O):

- ``NAME``: a fanout, what publishers publish to, marked with ``LAYOUT_ARGUMENT = "rtopic"``;
- ``NAME`` + ``BINDINGS_SUFFIX``: where queues and exchanges are bound with the plugin's keys;
- an exchange-to-exchange binding ``REGISTRY_EXCHANGE`` -> ``NAME.bindings`` with key ``NAME``:
  the broker's own record that ``NAME`` is x-rtopic, which every proxy follows.
"""
from __future__ import annotations

__all__ = ["BINDINGS_SUFFIX", "LAYOUT_ARGUMENT", "LAYOUT_VALUE", "REGISTRY_EXCHANGE"]

LAYOUT_ARGUMENT = "x-rtroute-layout"
LAYOUT_VALUE = "rtopic"
REGISTRY_EXCHANGE = "rtroute.rtopic"
BINDINGS_SUFFIX = ".bindings"
