"""docs/configuration.md cannot drift from the readers of rtroute.toml.

The keys the readers know are recorded, not listed here: every table is read through
:class:`TableReader`, whose :meth:`~TableReader.take` every getter calls with the key's name and
its aliases, so wrapping it while a config that exercises every table is loaded records, per
table, each ``(name, *aliases)`` the code asks for. Each table of the page (found by the
``[section]`` code span of its heading) must list exactly those, and every key (and alias) it
lists must be accepted by the reader: a config with it does not fail with "unknown key". What
is not read through a reader is compared with the constants the code checks against
(declaration methods and fields, basic properties, publish fields), and the environment
variables of the commands reading the file with their click options.
"""
from __future__ import annotations

import copy
import json
import re
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from rtroute.config.lines import TableReader
from rtroute.config.rtroute_toml import SECTIONS, ConfigError, loads
from rtroute.config.shovel_fields import BASIC_PROPERTIES, DECLARATION_METHODS, PUBLISH_FIELDS
from rtroute.proxy.config import loads_proxy_settings

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "configuration.md"

SHOVEL = {
    "name": "s1",
    "sources": {"broker": "amqp://"},
    "destinations": {"brokers": ["amqp://"]},
    "queue": "q",
    "filter": {"key": "a.#"},
    "internal_owner": {"name": "o", "kind": "queue", "virtual_host": "/"},
}
#: A valid document with every table (and both spellings of a side's brokers on each side).
BASE: dict[str, Any] = {
    "broker": {"uri": "amqp://guest:guest@127.0.0.1:5672/%2F"},
    "http": {"listen": "127.0.0.1:8419"},
    "exchange": [{"name": "x", "ingress_queue_type": "quorum",
                  "bindings": [{"destination": "q", "key": "a.b"}]}],
    "divert": [{"name": "d", "address": "x", "forwarding_address": "y"}],
    "shovel": [SHOVEL, {**SHOVEL, "name": "s2", "sources": {"brokers": ["amqp://"]},
                        "destinations": {"broker": "amqp://"}}],
    "proxy": {"listen": "127.0.0.1:5680"},
}
#: Tables that read their keys without a TableReader, and the constants they check against.
UNREAD = {"shovel.publish_properties": BASIC_PROPERTIES, "shovel.publish_fields": PUBLISH_FIELDS}
#: Tables whose keys may be written with "-" for "_" (the page says which).
HYPHENS = ("shovel", "shovel.sources", "shovel.destinations", "shovel.filter")


# ------------------------------------------------------------------------------------ helpers


def toml(value: Any) -> str:
    """``value`` as a TOML value (tables inline)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml(v) for v in value) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {toml(v)}" for k, v in value.items()) + "}"


def document(doc: dict[str, Any]) -> str:
    out = []
    for section, value in doc.items():
        for table in value if isinstance(value, list) else [value]:
            out.append(f"[[{section}]]" if isinstance(value, list) else f"[{section}]")
            out += [f"{json.dumps(k)} = {toml(v)}" for k, v in table.items()]
    return "\n".join(out) + "\n"


def load_all(doc: dict[str, Any]) -> None:
    """Read ``doc`` as ``rtroute config check`` does: the whole file, then ``[proxy]``."""
    text = document(doc)
    loads(text)
    loads_proxy_settings(text)


def table_of(doc: dict[str, Any], section: str) -> dict[str, Any]:
    """The (first) table of ``doc`` at a section id such as ``exchange.bindings``."""
    node: Any = doc
    for part in section.split("."):
        node = node[part]
        if isinstance(node, list):
            node = node[0]
    return node


def section_id(path: tuple) -> str:
    """``("shovel", 0, "sources")`` -> ``shovel.sources``."""
    return ".".join(p for p in path if isinstance(p, str))


def page_tables(text: str) -> dict[str, list[list[str]]]:
    """Section id -> the rows of its table, each a list of cells; a heading holds one or more
    ``[id]``/``[[id]]`` code spans (other headings are keyed by their text)."""
    out: dict[str, list[list[str]]] = {}
    current: list[list[str]] = []
    for line in text.splitlines():
        heading = re.match(r"#{1,6} (.*)", line)
        if heading:
            current = []
            ids = re.findall(r"`\[\[?([\w.]+)\]\]?`", heading.group(1)) or [heading.group(1)]
            for name in ids:
                out[name] = current
        elif line.startswith("|") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if cells[0] not in ("key", "method", "variable", ""):
                current.append(cells)
    return out


def page_keys(section: str) -> dict[str, tuple[str, ...]]:
    """Key -> its aliases, as the page's table of ``section`` lists them."""
    rows = page_tables(PAGE.read_text())[section]
    keys = [re.findall(r"`([^`]+)`", row[0]) for row in rows]
    return {names[0]: tuple(names[1:]) for names in keys}


@pytest.fixture(scope="module")
def recorded() -> dict[str, dict[str, tuple[str, ...]]]:
    """Section id -> key -> aliases: what the readers ask for while reading :data:`BASE`."""
    calls: dict[str, dict[str, tuple[str, ...]]] = defaultdict(dict)
    original = TableReader.take

    def take(self: TableReader, name: str, *aliases: str) -> Any:
        known = calls[section_id(self.path)]
        assert known.get(name, aliases) == aliases, f"{name}: aliases differ between calls"
        known[name] = aliases
        return original(self, name, *aliases)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(TableReader, "take", take)
        load_all(BASE)
    return dict(calls)


def documented_keys() -> list[tuple[str, str]]:
    """(section, spelling) for every key and alias of every table of the page."""
    out = []
    for section in page_tables(PAGE.read_text()):
        if section.split(".")[0] not in SECTIONS or section in UNREAD:
            continue
        for key, aliases in page_keys(section).items():
            out += [(section, name) for name in (key, *aliases)]
            if section in HYPHENS and "_" in key:
                out.append((section, key.replace("_", "-")))
    return out


# -------------------------------------------------------------------------------------- tests


def test_the_base_document_is_valid():
    load_all(BASE)


def test_every_section_has_its_table_on_the_page(recorded):
    tables = page_tables(PAGE.read_text())
    for section in [*SECTIONS, *recorded, *UNREAD]:
        assert section in tables, f"docs/configuration.md has no heading with `[{section}]`"
    documented = {s for s in tables if s.split(".")[0] in SECTIONS}
    assert documented <= {*recorded, *UNREAD}, "the page documents tables no reader reads"


def test_the_page_lists_exactly_the_keys_each_reader_asks_for(recorded):
    for section, known in recorded.items():
        listed = page_keys(section)
        missing = {k: a for k, a in known.items() if k not in listed}
        assert not missing, f"[{section}]: keys read but not in docs/configuration.md: {missing}"
        extra = set(listed) - set(known)
        assert not extra, f"[{section}]: keys on the page that no reader asks for: {extra}"
        for key, aliases in known.items():
            assert set(listed[key]) == set(aliases), \
                f"[{section}] {key}: the page gives aliases {listed[key]}, the reader {aliases}"


@pytest.mark.parametrize("section, constant", sorted(UNREAD.items()))
def test_tables_read_without_a_reader_match_the_constants(section, constant):
    assert list(page_keys(section)) == list(constant)


def test_every_declaration_method_and_field_is_listed():
    rows = {re.findall(r"`([^`]+)`", row[0])[0]: row[1]
            for row in page_tables(PAGE.read_text())["Declarations"]}
    assert set(rows) == set(DECLARATION_METHODS)
    for method, fields in DECLARATION_METHODS.items():
        listed = set(re.findall(r"`(\w+)` \(|`(\w+)`,", rows[method]))
        named = {a or b for a, b in listed}
        assert named == set(fields), f"{method}: page lists {named}, the code {set(fields)}"


def plausible(section: str, key: str) -> Any:
    """A value of the type the page gives ``key`` (a wrong one still proves the key known)."""
    rows = page_tables(PAGE.read_text())[section]
    kind = next(row[1] for row in rows
                if {key, key.replace("-", "_")} & set(re.findall(r"`([^`]+)`", row[0])))
    if key == "transformer-configuration":
        return {"class-name": "m:f"}
    if "uri" in key or key == "broker":
        return "http://127.0.0.1:15672/" if "management" in key else "amqp://"
    if kind.startswith("`\""):
        return re.match(r"`\"([^\"]*)\"`", kind).group(1)
    if kind.startswith("boolean"):
        return True
    if kind.startswith(("integer", "number")):
        bound = re.search(r"\d+", kind)
        return int(bound.group()) if bound else 1
    if kind.startswith("table"):
        return {}
    if kind.startswith("array"):
        return []
    return "127.0.0.1:5680" if "HOST:PORT" in kind else "m:f" if "function" in kind else "v"


@pytest.mark.parametrize("section, key", documented_keys())
def test_every_key_the_page_lists_is_accepted(section, key):
    doc = copy.deepcopy(BASE)
    table = table_of(doc, section)
    canonical = next(k for k, aliases in page_keys(section).items()
                     if key in (k, k.replace("_", "-"), *aliases))
    value = table.pop(canonical) if canonical in table else plausible(section, key)
    if canonical in ("broker", "brokers"):  # a side takes one of them
        value = "amqp://" if key == "broker" else ["amqp://"]
        table.pop("broker", None)
        table.pop("brokers", None)
    table[key] = value
    try:
        load_all(doc)
    except ConfigError as exc:
        assert "unknown key" not in exc.message, f"[{section}] {key}: {exc}"


def test_an_unknown_key_is_refused_with_a_suggestion():
    """What the page says of unknown keys (and what the previous test relies on)."""
    doc = copy.deepcopy(BASE)
    doc["exchange"][0]["prefech"] = 10
    with pytest.raises(ConfigError, match=r"unknown key 'prefech' \(did you mean 'prefetch'"):
        load_all(doc)


def test_the_environment_variables_of_the_commands_are_on_the_page():
    from rtroute.cli import main

    text = PAGE.read_text()
    commands = [main.commands["run"], main.commands["proxy"],
                main.commands["shovel"].commands["run"]]  # type: ignore[attr-defined]
    for command in commands:
        for param in command.params:
            for variable in [param.envvar] if isinstance(param.envvar, str) else \
                    param.envvar or []:
                assert f"`{variable}`" in text, f"{command.name}: {variable} not on the page"
