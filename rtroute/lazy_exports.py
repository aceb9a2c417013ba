"""Lazy package exports (PEP 562) for packages whose submodules are costly to import.

A package names what it exports and the submodule each name lives in; a submodule is
imported on the first use of one of its names, so importing the package itself costs nothing
(``import rtroute.config.rtroute_toml`` loads no pika: ``tests/config/test_import_cost.py``)::

    __getattr__, __dir__ = lazy_exports(__name__, globals(), {"Relay": "engine", ...})
"""
from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

__all__ = ["lazy_exports"]


def lazy_exports(package: str, namespace: dict[str, Any], submodules: dict[str, str]
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module-level ``__getattr__`` and ``__dir__`` of ``package`` (whose globals are
    ``namespace``) exporting each name of ``submodules`` from ``package.<submodule>``."""

    def __getattr__(name: str) -> Any:
        submodule = submodules.get(name)
        if submodule is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{submodule}"), name)
        namespace[name] = value  # later lookups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(submodules))

    return __getattr__, __dir__
