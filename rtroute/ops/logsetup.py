"""Process logging for the long-running commands (``rtroute run``, ``rtroute shovel run``).

rtroute logs one line per event that matters (a connection lost, with the URI masked, and when
it tries again); pika's own loggers say the same thing in 6-7 ERROR lines with object reprs per
failed connect, so they are kept at DEBUG: shown only with ``--log-level DEBUG``.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any, Callable

FORMATS = ("text", "json")
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts`` (UTC, ISO 8601), ``level``, ``logger``, ``message``
    and, for an exception, ``exception`` (the formatted traceback)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


def configure(level: str = "INFO", fmt: str = "text") -> None:
    """Sets up the root logger (stderr) at ``level`` in ``fmt`` (``text`` or ``json``).

    Raises:
        ValueError: an unknown format.
    """
    if fmt not in FORMATS:
        raise ValueError(f"log format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # pika repeats rtroute's one line as several ERROR lines per failed connect
    logging.getLogger("pika").setLevel(logging.DEBUG if level == "DEBUG" else logging.CRITICAL)


def log_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--log-level`` and ``--log-format`` (as ``log_level``, upper case, and ``log_format``,
    lower case) of a long-running command: one spelling for ``rtroute run``, ``rtroute proxy``
    and ``rtroute shovel run``, any case accepted."""
    import click

    function = click.option(
        "--log-format", "log_format", default="text", show_default=True,
        envvar="RTROUTE_LOG_FORMAT", show_envvar=True,
        type=click.Choice(FORMATS, case_sensitive=False),
        callback=lambda _ctx, _param, value: value.lower(),
        help="Log lines as text or as one JSON object per line.")(function)
    return click.option(
        "--log-level", "log_level", default="INFO", show_default=True,
        envvar="RTROUTE_LOG_LEVEL", show_envvar=True,
        type=click.Choice(LEVELS, case_sensitive=False),
        callback=lambda _ctx, _param, value: value.upper(),
        help="Least severe level logged (any case).")(function)
