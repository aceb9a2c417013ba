"""AMQP declarations given as data, as the shovel plugin takes them, run on a pika channel.

A declaration is a method name and its fields, with the field names of the AMQP methods (and of
the Erlang records the plugin's config uses)::

    "queue.declare"                                         # server-named queue
    {"method": "queue.bind", "exchange": "logs", "routing_key": "#"}
    ("exchange.declare", {"exchange": "logs", "type": "topic", "durable": True})

Supported methods: ``exchange.declare``, ``exchange.delete``, ``exchange.bind``,
``exchange.unbind``, ``queue.declare``, ``queue.delete``, ``queue.bind``, ``queue.unbind``,
``queue.purge``. Defaults are the AMQP ones (``exchange.declare`` type ``direct``; every flag
false). An empty (or absent) ``queue`` in anything but ``queue.declare`` means the most recently
declared queue, as in AMQP 0-9-1, so a server-named queue can be declared, bound and consumed
without knowing its name. Field names may use ``-`` for ``_`` (``auto-delete``). ``arguments`` is a
table: a mapping, or the Erlang config's list of ``[name, type, value]`` (or ``[name, value]``).
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Callable

from pika.adapters.blocking_connection import BlockingChannel

__all__ = ["Declaration", "declare", "declare_async", "parse_declarations"]

_FLAGS = ("passive", "durable", "auto_delete", "internal", "exclusive", "if_unused", "if_empty")
# method -> {field: default}; a default of None marks a required field
_METHODS: dict[str, dict[str, Any]] = {
    "exchange.declare": {
        "exchange": None, "type": "direct", "passive": False, "durable": False,
        "auto_delete": False, "internal": False, "arguments": {},
    },
    "exchange.delete": {"exchange": None, "if_unused": False},
    "exchange.bind": {"destination": None, "source": None, "routing_key": "", "arguments": {}},
    "exchange.unbind": {"destination": None, "source": None, "routing_key": "", "arguments": {}},
    "queue.declare": {
        "queue": "", "passive": False, "durable": False, "exclusive": False,
        "auto_delete": False, "arguments": {},
    },
    "queue.delete": {"queue": "", "if_unused": False, "if_empty": False},
    "queue.bind": {"queue": "", "exchange": None, "routing_key": "", "arguments": {}},
    "queue.unbind": {"queue": "", "exchange": None, "routing_key": "", "arguments": {}},
    "queue.purge": {"queue": ""},
}
# fields of the Erlang records that mean nothing to a pika client
_IGNORED_FIELDS = {"ticket", "nowait"}


@dataclass(frozen=True)
class Declaration:
    """One AMQP method with all its fields filled in (see :func:`parse_declarations`)."""

    method: str
    fields: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        """Short text for logs and errors, e.g. ``queue.bind(queue='', exchange='x')``."""
        shown = ", ".join(f"{k}={v!r}" for k, v in self.fields.items() if k != "arguments")
        return f"{self.method}({shown})"


def parse_declarations(items: Iterable[Any]) -> list[Declaration]:
    """Validate declarations given as data and fill in defaults.

    Each item is a method name, a mapping with a ``method`` key, a ``(method, fields)`` pair,
    or a :class:`Declaration`.

    Raises:
        ValueError: naming the item (by index), the method and the bad field.
    """
    result = []
    for index, item in enumerate(items):
        if isinstance(item, Declaration):
            item = (item.method, dict(item.fields))
        if isinstance(item, str):
            method, given = item, {}
        elif isinstance(item, Mapping):
            given = dict(item)
            method = given.pop("method", None)
        elif isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[1], Mapping):
            method, given = item[0], dict(item[1])
        else:
            raise ValueError(
                f"declaration #{index}: expected a method name, a table with 'method', or "
                f"[method, {{fields}}], got {item!r}"
            )
        if not isinstance(method, str) or method not in _METHODS:
            raise ValueError(
                f"declaration #{index}: unknown method {method!r} "
                f"(known: {', '.join(sorted(_METHODS))})"
            )
        spec = _METHODS[method]
        fields = {}
        for raw_key, value in given.items():
            key = str(raw_key).replace("-", "_")
            if key in _IGNORED_FIELDS:
                continue
            if key not in spec:
                raise ValueError(
                    f"declaration #{index} ({method}): unknown field {raw_key!r} "
                    f"(known: {', '.join(spec)})"
                )
            fields[key] = _check_field(index, method, key, value)
        for key, default in spec.items():
            if key not in fields:
                if default is None:
                    raise ValueError(f"declaration #{index} ({method}): field {key!r} is required")
                fields[key] = dict(default) if isinstance(default, dict) else default
        result.append(Declaration(method, fields))
    return result


def declare(
    channel: BlockingChannel, declarations: Iterable[Any], last_queue: str | None = None
) -> str | None:
    """Run declarations on a BlockingChannel, in order.

    Args:
        channel: an open BlockingChannel.
        declarations: as :func:`parse_declarations` takes them.
        last_queue: the most recently declared queue before these (for an empty queue name).

    Returns:
        The most recently declared queue after them (None if none was declared).

    Raises:
        ValueError: a malformed declaration, or an empty queue name with no queue declared.
        pika.exceptions.ChannelClosedByBroker: the broker refused one (the channel is closed).
    """
    for declaration in parse_declarations(declarations):
        name, kwargs = _pika_call(declaration, last_queue)
        frame = getattr(channel, name)(**kwargs)
        if declaration.method == "queue.declare":
            last_queue = frame.method.queue
    return last_queue


def declare_async(
    channel: Any,
    declarations: Iterable[Any],
    on_done: Callable[[str | None], Any],
    on_error: Callable[[Exception], Any],
    last_queue: str | None = None,
) -> None:
    """Run declarations on a SelectConnection channel, one after the other.

    Calls ``on_done(last_queue)`` after the last one, or ``on_error(exception)`` once if one is
    malformed (before anything is sent) or the channel closes before the end (a refused
    declaration closes the channel; the exception is pika's close reason).
    """
    try:
        steps = parse_declarations(declarations)
    except ValueError as exc:
        on_error(exc)
        return
    state = {"finished": False, "last_queue": last_queue}

    def on_close(_channel: Any, reason: Exception) -> None:
        if not state["finished"]:
            state["finished"] = True
            on_error(reason)

    def run(index: int) -> None:
        if state["finished"]:
            return
        if index == len(steps):
            state["finished"] = True
            on_done(state["last_queue"])
            return
        declaration = steps[index]
        try:
            name, kwargs = _pika_call(declaration, state["last_queue"])
        except ValueError as exc:
            state["finished"] = True
            on_error(exc)
            return

        def on_ok(frame: Any) -> None:
            if declaration.method == "queue.declare":
                state["last_queue"] = frame.method.queue
            run(index + 1)

        getattr(channel, name)(callback=on_ok, **kwargs)

    channel.add_on_close_callback(on_close)
    run(0)


def _check_field(index: int, method: str, key: str, value: Any) -> Any:
    where = f"declaration #{index} ({method}) field {key!r}"
    if key in _FLAGS:
        if not isinstance(value, bool):
            raise ValueError(f"{where}: expected true or false, got {value!r}")
        return value
    if key == "arguments":
        return _arguments_table(where, value)
    if isinstance(value, str):
        return value
    raise ValueError(f"{where}: expected a string, got {value!r}")


def _arguments_table(where: str, value: Any) -> dict[str, Any]:
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (list, tuple)):
        table = {}
        for entry in value:
            if isinstance(entry, (list, tuple)) and len(entry) in (2, 3):
                table[str(entry[0])] = entry[-1]
            else:
                raise ValueError(
                    f"{where}: expected [name, type, value] or [name, value], got {entry!r}"
                )
        return table
    raise ValueError(f"{where}: expected a table, got {value!r}")


def _pika_call(declaration: Declaration, last_queue: str | None) -> tuple[str, dict[str, Any]]:
    """The pika channel method and keyword arguments for a declaration."""
    f = declaration.fields
    method = declaration.method

    def queue_name() -> str:
        if f["queue"]:
            return f["queue"]
        if last_queue is None:
            raise ValueError(f"{declaration.describe()}: empty queue name but no queue declared")
        return last_queue

    arguments = f.get("arguments") or None
    if method == "exchange.declare":
        return "exchange_declare", {
            "exchange": f["exchange"], "exchange_type": f["type"], "passive": f["passive"],
            "durable": f["durable"], "auto_delete": f["auto_delete"], "internal": f["internal"],
            "arguments": arguments,
        }
    if method == "exchange.delete":
        return "exchange_delete", {"exchange": f["exchange"], "if_unused": f["if_unused"]}
    if method in ("exchange.bind", "exchange.unbind"):
        return method.replace(".", "_"), {
            "destination": f["destination"], "source": f["source"],
            "routing_key": f["routing_key"], "arguments": arguments,
        }
    if method == "queue.declare":
        return "queue_declare", {
            "queue": f["queue"], "passive": f["passive"], "durable": f["durable"],
            "exclusive": f["exclusive"], "auto_delete": f["auto_delete"], "arguments": arguments,
        }
    if method == "queue.delete":
        return "queue_delete", {
            "queue": queue_name(), "if_unused": f["if_unused"], "if_empty": f["if_empty"],
        }
    if method in ("queue.bind", "queue.unbind"):
        return method.replace(".", "_"), {
            "queue": queue_name(), "exchange": f["exchange"], "routing_key": f["routing_key"],
            "arguments": arguments,
        }
    return "queue_purge", {"queue": queue_name()}
