"""Moved to :mod:`rtroute.routing.delivery_plan` (pure decisions, shared with the proxy and
the publisher); this name stays for existing imports."""
from rtroute.routing.delivery_plan import *
from rtroute.routing.delivery_plan import __all__  # noqa: F401
