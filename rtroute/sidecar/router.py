"""Moved to :mod:`rtroute.routing.exchange_router` (pure decisions, shared with the proxy and
the publisher); this name stays for existing imports."""
from rtroute.routing.exchange_router import *
from rtroute.routing.exchange_router import __all__  # noqa: F401
