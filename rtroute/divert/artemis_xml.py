"""The ``<diverts>`` of an ActiveMQ Artemis ``broker.xml`` as ``[[divert]]`` tables of
``rtroute.toml`` (``rtroute divert import``).

Artemis's element names map to the keys rtroute reads (``forwarding-address`` to
``forwarding_address``, ``<filter string=...>`` to ``filter``, ...). What cannot be carried over
is said, never dropped silently: a transformer is a Java class (rtroute runs Python functions),
so it is left out with a comment line; an element rtroute does not know is named in a warning; a
filter rtroute's selector cannot compile leaves its divert commented out, with the reason.

The file is untrusted input: a document with a DTD (``<!DOCTYPE``, hence entities) is refused
before anything in it is expanded, nothing is fetched, and its size is bounded.
"""
from __future__ import annotations

import json
import urllib.parse
import xml.etree.ElementTree as ET
import xml.parsers.expat
from dataclasses import dataclass, field

from rtroute.config.constants import DEFAULT_URI, EXCHANGE_KINDS, ROUTING_TYPES
from rtroute.config.lines import MAX_CONFIG_BYTES
from rtroute.config.validators import selector_problem
from rtroute.routing.divert_graph import address_matches

__all__ = ["ArtemisImport", "ArtemisXmlError", "import_diverts"]

#: ``<divert>`` children and the ``[[divert]]`` key each becomes (``filter`` and
#: ``transformer`` are read apart)
_ELEMENTS = {"address": "address", "forwarding-address": "forwarding_address",
             "exclusive": "exclusive", "routing-type": "routing_type",
             "routing-name": "routing_name"}
_TRANSFORMERS = ("transformer-class-name", "transformer")
_WILDCARDS = ("*", "#")


class ArtemisXmlError(ValueError):
    """The file is not a ``broker.xml`` that can be read (malformed, has a DTD, too large,
    a divert without a name or an address); the message is one line."""


@dataclass
class ArtemisImport:
    """What :func:`import_diverts` made of a ``broker.xml``.

    Attributes:
        toml: the ``rtroute.toml`` text (exchanges, then diverts).
        warnings: what was left out or needs a look, one line each.
        diverts: the names of the diverts carried over.
    """

    toml: str
    warnings: list[str] = field(default_factory=list)
    diverts: list[str] = field(default_factory=list)


def import_diverts(data: bytes | str, path: str = "broker.xml", vhost: str | None = None,
                   kind: str = "topic") -> ArtemisImport:
    """The ``[[exchange]]`` and ``[[divert]]`` tables for the diverts of ``data``.

    Each divert's ``address`` becomes a managed exchange of ``kind``; an address with Artemis
    wildcards (``orders.#``, ``*.eu``: the same words as RabbitMQ's topic patterns) stays a
    pattern, as ``rtroute.toml`` takes it, and the addresses of ``<addresses>`` it matches
    become managed exchanges.

    Args:
        data: the file's content.
        path: its name, for messages.
        vhost: the virtual host to serve (a ``[broker]`` table); None leaves the default.
        kind: the kind of the managed exchanges (``rtopic``, ``topic``, ...).

    Raises:
        ArtemisXmlError: see the class.
    """
    root, element_lines = _parse(data, path)
    warnings: list[str] = []
    declared = [a.get("name", "") for section in _all(root, "addresses")
                for a in _children(section) if _local(a.tag) == "address" and a.get("name")]
    sections = [d for d in root.iter() if _local(d.tag) == "diverts"]
    if not sections:
        warnings.append(f"{path}: no <diverts> section: nothing to import")
    diverts: list[tuple[dict, list[str]]] = []
    for section in sections:
        for element in _children(section):
            if _local(element.tag) != "divert":
                warnings.append(f"{path}: <{_local(element.tag)}> in <diverts> is not a divert: "
                                "ignored")
                continue
            diverts.append(_divert(element, f"{path}:{element_lines[element]}", warnings))
    addresses: list[str] = []
    for values, _comments in diverts:
        address = values["address"]
        if any(w in address.split(".") for w in _WILDCARDS):
            matched = [a for a in declared if address_matches(address, a)
                       and not any(w in a.split(".") for w in _WILDCARDS)]
            if not matched:
                warnings.append(f"divert {values['name']!r}: address {address!r} is a wildcard "
                                "and no <address> of the file matches it: add an [[exchange]] "
                                "for each address it should watch")
            addresses += matched
        else:
            addresses.append(address)
    lines = [f"# diverts imported from {path} (ActiveMQ Artemis) by rtroute divert import", ""]
    if vhost is not None:
        base = DEFAULT_URI.rsplit("/", 1)[0]
        lines += ["[broker]", "# the broker's host and credentials: set your own",
                  f"uri = {_toml(base + '/' + urllib.parse.quote(vhost, safe=''))}", ""]
    if kind not in EXCHANGE_KINDS:
        raise ValueError(f"kind must be one of {', '.join(EXCHANGE_KINDS)}, got {kind!r}")
    for address in dict.fromkeys(addresses):
        lines += ["[[exchange]]", f"name = {_toml(address)}", f"kind = {_toml(kind)}", ""]
    result = ArtemisImport("", warnings)
    for values, comments in diverts:
        table = ["[[divert]]"] + [f"{k} = {_toml(v)}" for k, v in values.items()]
        problem = selector_problem(values["filter"]) if "filter" in values else None
        if problem is not None:
            message, position = problem
            at = f" at position {position}" if position is not None else ""
            why = (f"divert {values['name']!r}: filter {values['filter']!r} is not a selector "
                   f"rtroute runs ({message}{at}): the divert is left commented out")
            warnings.append(why)
            comments = [*comments, why]
            table = ["# " + line for line in table]
        else:
            result.diverts.append(values["name"])
        lines += [f"# {c}" for c in comments] + table + [""]
    result.toml = "\n".join(lines)
    return result


def _parse(data: bytes | str, path: str) -> tuple[ET.Element, dict[ET.Element, int]]:
    """The document's root and the line of each element, built by expat with DTDs (and so
    entities) refused as soon as they start, before anything is declared or expanded."""
    if len(data) > MAX_CONFIG_BYTES:
        raise ArtemisXmlError(f"{path}: the file is {len(data)} bytes, larger than "
                              f"{MAX_CONFIG_BYTES // (1024 * 1024)} MiB; is it the right file?")
    expat = xml.parsers.expat.ParserCreate(namespace_separator="}")
    expat.SetParamEntityParsing(xml.parsers.expat.XML_PARAM_ENTITY_PARSING_NEVER)
    builder = ET.TreeBuilder()
    lines: dict[ET.Element, int] = {}

    def refuse(what: str) -> None:
        raise ArtemisXmlError(f"{path}:{expat.CurrentLineNumber}: the document has {what}: "
                              "refused, as what a DTD declares could expand without bound or "
                              "read other files (Artemis's broker.xml has none)")

    def start(tag: str, attributes: dict[str, str]) -> None:
        element = builder.start("{" + tag if "}" in tag else tag,
                                {k.rsplit("}", 1)[-1]: v for k, v in attributes.items()})
        lines[element] = expat.CurrentLineNumber

    expat.StartDoctypeDeclHandler = lambda *_args: refuse("a DTD (<!DOCTYPE>)")
    expat.EntityDeclHandler = lambda *_args: refuse("an entity declaration (<!ENTITY>)")
    expat.ExternalEntityRefHandler = lambda *_args: refuse("an external entity")
    expat.StartElementHandler = start
    expat.EndElementHandler = lambda tag: builder.end("{" + tag if "}" in tag else tag)
    expat.CharacterDataHandler = builder.data
    try:
        expat.Parse(data, True)
    except xml.parsers.expat.ExpatError as exc:
        raise ArtemisXmlError(f"{path}:{exc.lineno}: not well-formed XML: "
                              f"{xml.parsers.expat.ErrorString(exc.code)}") from None
    return builder.close(), lines


def _divert(element: ET.Element, path: str, warnings: list[str]) -> tuple[dict, list[str]]:
    """One ``<divert>``: its ``[[divert]]`` keys (in file order) and comment lines."""
    name = element.get("name")
    if not name:
        raise ArtemisXmlError(f"{path}: a <divert> has no name attribute")
    values: dict = {"name": name}
    comments = [f"divert {name!r} from {path}"]
    for child in _children(element):
        local = _local(child.tag)
        text = (child.text or "").strip()
        if local in _ELEMENTS:
            key = _ELEMENTS[local]
            if key == "exclusive":
                if text.lower() not in ("true", "false"):
                    raise ArtemisXmlError(f"{path}: divert {name!r}: <exclusive> must be true "
                                          f"or false, got {text!r}")
                values[key] = text.lower() == "true"
            elif key == "routing_type":
                if text.upper() not in ROUTING_TYPES:
                    raise ArtemisXmlError(f"{path}: divert {name!r}: <routing-type> must be "
                                          f"one of {', '.join(ROUTING_TYPES)}, got {text!r}")
                values[key] = text.upper()
            else:
                values[key] = text
        elif local == "filter":
            if child.get("string", "").strip():
                values["filter"] = child.get("string", "")
        elif local in _TRANSFORMERS:
            java = text if local == "transformer-class-name" else next(
                ((c.text or "").strip() for c in _children(child)
                 if _local(c.tag) == "class-name"), "")
            why = (f"transformer {java or '(no class-name)'} is a Java class and is not "
                   "carried over: write a Python one (transformer = \"module:function\") if "
                   "the copies need it")
            comments.append(why)
            warnings.append(f"divert {name!r}: {why}")
        else:
            warnings.append(f"divert {name!r}: <{local}> is not a divert setting rtroute "
                            "knows: left out")
    for required in ("address", "forwarding_address"):
        if not values.get(required):
            raise ArtemisXmlError(f"{path}: divert {name!r} has no <"
                                  f"{required.replace('_', '-')}>")
    if values.get("routing_name") in ("", name):
        values.pop("routing_name", None)
    return values, comments


def _children(element: ET.Element) -> list[ET.Element]:
    """The child elements of ``element``: elements are known by their local names, whatever
    their namespace (Artemis writes ``urn:activemq`` and ``urn:activemq:core``, or none)."""
    return list(element)


def _all(root: ET.Element, local: str) -> list[ET.Element]:
    return [e for e in root.iter() if isinstance(e.tag, str) and _local(e.tag) == local]


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _toml(value: object) -> str:
    """``value`` as a TOML value (a basic string, or a boolean)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    # a JSON string is a TOML basic string once DEL (allowed by JSON, not by TOML) is escaped
    return json.dumps(str(value), ensure_ascii=False).replace("\x7f", "\\u007f")
