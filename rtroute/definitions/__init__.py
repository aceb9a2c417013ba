"""RabbitMQ definitions exports with x-rtopic exchanges, carried to a broker without the plugin:
:func:`convert` (pure), :func:`import_converted` (through the management API) and the
``rtroute definitions`` commands."""
from __future__ import annotations

from rtroute.definitions.convert import LAYOUTS, Conversion, DefinitionsError, Finding, convert
from rtroute.definitions.importer import ImportRefused, import_converted

__all__ = ["LAYOUTS", "Conversion", "DefinitionsError", "Finding", "ImportRefused", "convert",
           "import_converted"]
