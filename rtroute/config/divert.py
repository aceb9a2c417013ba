"""``[[divert]]``: a divert of ``rtroute.toml``, or of the HTTP divert API, validated with lines.

:func:`parse_divert` reads one ``[[divert]]`` table into a :class:`DivertConfig` (every key
checked; errors name the divert, the field and the line); :func:`loads_divert` and
:func:`loads_divert_update` read the JSON object that ``POST``/``PUT``/``PATCH /diverts`` take.
Across the diverts of one file, :func:`first_of_each_name` keeps the first divert of each name
(Artemis deploys the first and logs the next, ``ActiveMQServerImpl.deployDivert``: "binding
already exists"), and :func:`check_divert_graph` checks that each divert's ``address`` (a name,
or a topic pattern over the names with ``*`` and ``#``) matches a managed exchange and that the
divert graph has no cycle (a message diverted from A to B and back to A would loop).

A divert's keys may also be spelled as Artemis spells them (see :data:`DIVERT_KEY_SPELLINGS`).
:mod:`rtroute.config.rtroute_toml` reads the whole file; the names here are importable from it too.
"""
from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from rtroute.config.constants import ROUTING_TYPES
from rtroute.config.lines import (
    ConfigError,
    TableReader,
    Where,
    check_amqp_name,
    json_source_map,
    parse_json,
    shown,
    suggest,
    type_name,
)
from rtroute.config.validators import selector_problem
from rtroute.routing.divert_graph import find_cycle, watched_exchanges

__all__ = [
    "DIVERT_KEY_SPELLINGS",
    "DIVERT_UPDATABLE",
    "ROUTING_TYPES",
    "DivertConfig",
    "check_divert_graph",
    "first_of_each_name",
    "loads_divert",
    "loads_divert_update",
    "parse_divert",
    "parse_transformer_list",
]

_TRANSFORMER = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
DIVERT_KEY_SPELLINGS: dict[str, tuple[str, ...]] = {
    "forwarding_address": ("forwarding-address", "forwardingAddress"),
    "routing_name": ("routing-name", "routingName"),
    "filter": ("filter-string", "filterString"),
    "routing_type": ("routing-type", "routingType"),
    "transformer": ("transformer-class-name", "transformerClassName",
                    "transformer-configuration"),
    "routing_key": ("routing-key", "routingKey"),
}
"""Other spellings a ``[[divert]]`` key (and the HTTP divert API) accepts: Artemis's
``broker.xml`` elements and ``DivertConfiguration`` JSON keys (hyphenated) and the parameter
names of its management ``createDivert``/``updateDivert`` (camelCase). ``transformer-configuration``
is Artemis's JSON object ``{"class-name": ..., "properties": {...}}``; rtroute's transformers
take no properties. ``routing_key`` is rtroute's own, spelled alike for consistency."""
DIVERT_UPDATABLE = ("filter", "forwarding_address", "routing_type", "transformer", "routing_key")
"""What an update of a divert may change: what Artemis's ``updateDivert`` changes (filter,
forwarding address, routing type, transformer) plus rtroute's ``routing_key``. Its address,
``exclusive`` and routing name are fixed (Artemis destroys and deploys the divert again)."""


@dataclass(frozen=True)
class DivertConfig:
    """``[[divert]]``: moves or copies messages between addresses (Artemis names).

    Attributes:
        name: unique name (also the copies' ``_AMQ_ORIG_QUEUE``).
        address: managed exchange watched, or a topic pattern (``orders.#``) over their names.
        forwarding_address: where copies go; may be a comma-separated list.
        filter: selector a message must match, or ``None`` (all messages).
        exclusive: the original does not go on when this divert fires.
        routing_name: diverts sharing one take turns; defaults to ``name`` (all fire).
        routing_key: routing key of the copy (``None``: the original's).
        routing_type: ``ANYCAST`` (to the queue named by the forwarding address),
            ``MULTICAST`` (to the exchange of that name), ``PASS`` (keep the original's kind)
            or ``STRIP`` (let the forwarding address decide).
        transformer: ``module:function`` applied to each copy, or ``None``.
    """

    name: str
    address: str
    forwarding_address: str
    filter: str | None = None
    exclusive: bool = False
    routing_name: str = ""
    routing_key: str | None = None
    routing_type: str = "STRIP"
    transformer: str | None = None

    @property
    def forwarding_addresses(self) -> tuple[str, ...]:
        """``forwarding_address`` split at commas."""
        return tuple(a.strip() for a in self.forwarding_address.split(","))



def first_of_each_name(where: Where, diverts: list[DivertConfig]
                       ) -> tuple[list[int], list[str]]:
    """The indexes of the diverts to deploy (the first of each name) and a warning, with the
    file and line, for each later one: Artemis deploys the first divert of a name and logs
    the others (``deployDivert``), and so does rtroute rather than refusing the file."""
    first: dict[str, int] = {}
    kept, warnings = [], []
    for i, divert in enumerate(diverts):
        if divert.name not in first:
            first[divert.name] = i
            kept.append(i)
            continue
        line = where.source.line(("divert", first[divert.name], "name"))
        warnings.append(str(where.error(
            ("divert", i, "name"),
            f"divert {divert.name!r}: name used twice (first defined on line {line}); this "
            "one is ignored and the first is kept, as Artemis does")))
    return kept, warnings



def parse_transformer_list(reader: TableReader, key: str) -> tuple[str, ...]:
    """``key`` (``[http] allowed_transformers``): an array of ``module:function`` names, or
    ``()`` when absent.

    Raises:
        ConfigError: not an array of strings, or a name of another form.
    """
    got = reader.take(key)
    if got is None:
        return ()
    raw, value = got
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise reader.error_at((raw,), f"{key} must be an array of 'module:function' strings, "
                              f"got {type_name(value)}")
    for name in value:
        if not _TRANSFORMER.match(name):
            raise reader.error_at((raw,), f"{key}: {name!r} is not 'module:function' (e.g. "
                                  "'myapp.transforms:tag')")
    return tuple(value)



def parse_divert(reader: TableReader, current: DivertConfig | None = None,
                 name: str | None = None) -> DivertConfig:
    """One divert. With ``current`` (an update) every key is optional and defaults to its
    value there, and ``null`` clears ``filter``, ``routing_key`` and ``transformer``; ``name``
    is the name an update or replacement is for (the table's own, if any, must equal it)."""
    reader = _one_spelling_each(reader)
    fixed = current.name if current is not None else name
    given = reader.string("name", empty=False) if fixed is None or reader.has("name") else fixed
    reader.context = f"divert {given!r}"
    if fixed is not None and given != fixed:
        raise reader.error_at(("name",), f"name {given!r} differs from the divert named in "
                              f"the path, {fixed!r}; a divert cannot be renamed")
    base = current or DivertConfig(name=given, address="", forwarding_address="",
                                   routing_name=given)
    optional = current is not None

    def cleared(key: str) -> bool:
        got = reader.take(key, *DIVERT_KEY_SPELLINGS.get(key, ()))
        return got is not None and got[1] is None

    address = reader.string("address", empty=False, default=base.address) if optional \
        else reader.string("address", empty=False)
    if reader.has("forwarding_address", *DIVERT_KEY_SPELLINGS["forwarding_address"]) \
            or not optional:
        forwarding = _parse_forwarding(reader)
    else:
        forwarding = base.forwarding_address
    if cleared("filter"):
        selector = None
    else:
        selector = reader.string("filter", *DIVERT_KEY_SPELLINGS["filter"],
                                 default=base.filter)
    if selector is not None and selector != base.filter:
        problem = selector_problem(selector)
        if problem:
            message, position = problem
            at = f" at position {position}" if position is not None else ""
            raw = reader.take("filter", *DIVERT_KEY_SPELLINGS["filter"])
            raise reader.error_at((raw[0] if raw else "filter",),
                                  f"filter: invalid selector{at}: {message}")
    exclusive = reader.boolean("exclusive", default=base.exclusive)
    routing_name = reader.string("routing_name", *DIVERT_KEY_SPELLINGS["routing_name"],
                                 default=base.routing_name, empty=False)
    if cleared("routing_key"):
        routing_key = None
    else:
        routing_key = reader.string("routing_key", *DIVERT_KEY_SPELLINGS["routing_key"],
                                    default=base.routing_key)
        got = reader.take("routing_key", *DIVERT_KEY_SPELLINGS["routing_key"])
        check_amqp_name(reader, got[0] if got else "routing_key", routing_key)
    routing_type = reader.choice("routing_type", ROUTING_TYPES,
                                 *DIVERT_KEY_SPELLINGS["routing_type"],
                                 default=base.routing_type)
    if cleared("transformer"):
        transformer = None
    else:
        transformer = reader.string("transformer", *DIVERT_KEY_SPELLINGS["transformer"],
                                    default=base.transformer, empty=False)
    if transformer is not None and transformer != base.transformer \
            and not _TRANSFORMER.match(transformer):
        raw = reader.take("transformer", *DIVERT_KEY_SPELLINGS["transformer"])
        raise reader.error_at((raw[0] if raw else "transformer",),
                              "transformer must be 'module:function' (e.g. "
                              f"'myapp.transforms:tag'), got {shown(transformer)}")
    reader.finish()
    if current is not None:
        for key, before, after in (("address", current.address, address),
                                   ("exclusive", current.exclusive, exclusive),
                                   ("routing_name", current.routing_name, routing_name)):
            if before != after:
                raw = reader.take(key, *DIVERT_KEY_SPELLINGS.get(key, ()))
                raise reader.error_at((raw[0] if raw else key,), (
                    f"{key} cannot be changed by an update (it is {shown(before)}): as in "
                    "Artemis only the filter, forwarding address, routing type, transformer "
                    "(and routing key) can; delete the divert and create it again"))
    return DivertConfig(name=given, address=address, forwarding_address=forwarding,
                        filter=selector, exclusive=exclusive, routing_name=routing_name,
                        routing_key=routing_key, routing_type=routing_type,
                        transformer=transformer)


def _one_spelling_each(reader: TableReader) -> TableReader:
    """A reader of the same table in which each divert key has one spelling: the same value
    under two spellings (``forwarding_address`` and ``forwarding-address``) is kept once;
    different values are refused. Artemis's ``transformer-configuration`` object becomes its
    ``class-name``."""
    data = dict(reader.data)
    tc = "transformer-configuration"
    if tc in data:
        value = data[tc]
        if value is not None:
            if not isinstance(value, Mapping) or not isinstance(value.get("class-name"), str) \
                    or set(value) - {"class-name", "properties"}:
                raise reader.error_at((tc,), f"{tc} must be an object "
                                      "{\"class-name\": \"module:function\"}, got "
                                      f"{shown(value)}")
            if value.get("properties"):
                raise reader.error_at((tc, "properties"), f"{tc}: rtroute transformers take "
                                      "no properties (a Python function gets the message only)")
            data[tc] = value["class-name"]
    for key, others in DIVERT_KEY_SPELLINGS.items():
        present = [k for k in (key, *others) if k in data]
        for other in present[1:]:
            if data[other] != data[present[0]]:
                raise reader.error_at((other,), (
                    f"'{present[0]}' and '{other}' are two spellings of {key} with different "
                    f"values ({shown(data[present[0]])} and {shown(data[other])}); give one"))
            del data[other]
    return TableReader(data, reader.path, reader.where, reader.context,
                       label_start=reader.label_start)


def _parse_forwarding(reader: TableReader) -> str:
    got = reader.take("forwarding_address", *DIVERT_KEY_SPELLINGS["forwarding_address"])
    if got is None:
        raise reader.error("forwarding_address is required")
    raw, value = got
    if isinstance(value, str):
        parts = value.split(",")
    elif isinstance(value, list) and all(isinstance(v, str) for v in value):
        parts = list(value)
    else:
        raise reader.error_at((raw,), f"{raw} must be a string (comma-separated "
                              f"for several) or an array of strings, got {type_name(value)}")
    parts = [p.strip() for p in parts]
    if not parts or not all(parts):
        raise reader.error_at((raw,), f"{raw} has an empty address: {shown(value)}")
    for part in parts:
        check_amqp_name(reader, raw, part)
    return ",".join(parts)


def check_divert_graph(
    where: Where, names: list[str], diverts: list[DivertConfig],
    indexes: list[int] | None = None,
) -> None:
    """Every divert watches one of the managed exchanges ``names``, and no message can be
    diverted in a circle. ``indexes``: each divert's position among the file's ``[[divert]]``
    tables.

    Raises:
        ConfigError: at the divert's ``address`` or at the ``forwarding_address`` that closes
            a cycle.
    """
    at = indexes if indexes is not None else list(range(len(diverts)))
    for i, divert in zip(at, diverts):
        if not watched_exchanges(divert.address, names):
            raise where.error(
                ("divert", i, "address"),
                f"divert {divert.name!r}: address {divert.address!r} matches no managed "
                "exchange; declare it with [[exchange]]" + suggest(divert.address, names),
            )
    cycle = find_cycle(names, diverts)
    if cycle is not None:
        divert = diverts[cycle.closing]
        raise where.error(("divert", at[cycle.closing], "forwarding_address"),
                          f"divert {divert.name!r}: {cycle.describe(diverts)}")


def loads_divert(text: str, path: str | None = "request body") -> DivertConfig:
    """Validate one divert given as a JSON object with the ``[[divert]]`` keys.

    This is what ``POST /diverts`` takes; the checks are those of the config file, except the
    ones across entries (managed exchanges, cycles), which the sidecar makes. Keys may be
    spelled as Artemis spells them (:data:`DIVERT_KEY_SPELLINGS`); ``null`` stands for an
    absent ``filter``, ``routing_key`` or ``transformer``.

    Raises:
        ConfigError: not a JSON object, or a key is wrong (with the line of the value), or
            two spellings of one key disagree.
    """
    return parse_divert(_divert_reader(text, path))


def loads_divert_update(text: str, current: DivertConfig, replace: bool = False,
                        path: str | None = "request body") -> DivertConfig:
    """The divert ``current`` becomes once the JSON object ``text`` is applied.

    ``replace=False`` (``PATCH /diverts/NAME``): the keys given change, the others keep
    their value; ``null`` removes the filter, routing key or transformer. ``replace=True``
    (``PUT /diverts/NAME``): ``text`` is the whole divert as ``POST /diverts`` takes it (its
    ``name`` may be left out); keys left out take their defaults. Either way the divert's
    ``address``, ``exclusive`` and ``routing_name`` must stay as they are (see
    :data:`DIVERT_UPDATABLE`), and a ``name`` must be ``current``'s.

    Raises:
        ConfigError: as :func:`loads_divert`, or a key that cannot change by an update.
    """
    reader = _divert_reader(text, path)
    if not replace:
        return parse_divert(reader, current)
    config = parse_divert(reader, name=current.name)
    for key in ("address", "exclusive", "routing_name"):
        before, after = getattr(current, key), getattr(config, key)
        if before != after:
            raise ConfigError(
                f"divert {current.name!r}: {key} cannot be changed by an update (it is "
                f"{shown(before)}, the body gives {shown(after)}): as in Artemis only the "
                "filter, forwarding address, routing type, transformer (and routing key) can; "
                "delete the divert and create it again", None, path)
    return config


def _divert_reader(text: str, path: str | None) -> TableReader:
    data = parse_json(text, path, invalid="not valid JSON")
    if not isinstance(data, Mapping):
        raise ConfigError(f"a divert is a JSON object, got {type_name(data)}", None, path)
    where = Where(json_source_map(text, path=path), path)
    return TableReader(data, (), where, "divert")
