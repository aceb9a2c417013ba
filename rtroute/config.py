"""``rtroute.toml``: connections, managed exchanges, diverts and shovels, validated with lines.

:func:`load` reads the file into frozen dataclasses (:class:`Config` and the section classes
below). Every key is checked (type, range, choices; unknown keys are errors with a "did you
mean" suggestion), and every error is a :class:`ConfigError` whose message names the section,
the entry and the field, with the line it is on::

    rtroute.toml:14: shovel 'my_first_shovel': ack_mode must be one of no_ack, on_publish,
    on_confirm, got 'on_ack'

Across entries it checks unique names, that each divert's ``address`` (a name, or a topic
pattern over the names with ``*`` and ``#``) matches a managed exchange, and that the divert
graph has no cycle (a message diverted from A to B and back to A would loop). A divert name
used twice is not an error but a warning (logged, and in :attr:`Config.warnings`): the first
divert of that name is kept, as Artemis deploys the first and logs the next
(``ActiveMQServerImpl.deployDivert``: "binding already exists").

A divert's keys may also be spelled as Artemis spells them (see :data:`DIVERT_KEY_SPELLINGS`).
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import quote, unquote, urlsplit

from rtroute.config_lines import (
    MAX_CONFIG_BYTES,
    ConfigError,
    Path,
    TableReader,
    Where,
    check_size,
    json_source_map,
    load_toml,
    parse_json,
    shown,
    suggest,
    type_name,
)
from rtroute.divert.graph import address_matches, find_cycle, watched_exchanges
from rtroute.netaddr import is_loopback, split_listen
from rtroute.shovel.config import ShovelConfig, check_unique, parse_shovel
from rtroute.validators import (
    amqp_uri_problem,
    management_uri_problem,
    selector_problem,
    shortstr_problem,
)

__all__ = [
    "DIVERT_KEY_SPELLINGS",
    "DIVERT_UPDATABLE",
    "BindingConfig",
    "BrokerConfig",
    "Config",
    "ConfigError",
    "DivertConfig",
    "ExchangeConfig",
    "HttpConfig",
    "ShovelConfig",
    "address_matches",
    "derive_management_uri",
    "load",
    "loads",
    "loads_divert",
    "loads_divert_update",
]

LOG = logging.getLogger("rtroute.config")

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"
# 8419: outside 9100-9999, the range Prometheus allocates to exporters (9419 is the RabbitMQ
# exporter's); the ops endpoint serves /metrics beside it on the same host.
DEFAULT_LISTEN = "127.0.0.1:8419"
EXCHANGE_KINDS = ("rtopic", "topic", "direct", "fanout", "headers")
QUEUE_TYPES = ("classic", "quorum")
MAX_SHARDS = 256  # ingress shards of one exchange (a channel each, per replica)
DESTINATION_TYPES = ("queue", "exchange")
ROUTING_TYPES = ("ANYCAST", "MULTICAST", "PASS", "STRIP")
SECTIONS = ("broker", "http", "exchange", "divert", "shovel", "proxy")  # proxy: rtroute.proxy.config
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
class BrokerConfig:
    """``[broker]``: the RabbitMQ the sidecar serves.

    Attributes:
        uri: AMQP URI (``amqp://`` or ``amqps://``): the first of ``uris``.
        management_uri: management HTTP API base URI; by default ``http://HOST:15672/`` (or
            ``https://HOST:15671/`` for ``amqps``) with the credentials of ``uri``.
        uris: every node the sidecar may connect to (``uri = [..]`` lists a cluster's nodes;
            each connect picks one at random, a lost connection fails over to another).
        management_uris: the management API of each node, tried in order (by default one
            derived per AMQP URI host).
    """

    uri: str = DEFAULT_URI
    management_uri: str = "http://guest:guest@127.0.0.1:15672/"
    uris: tuple[str, ...] = ()
    management_uris: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # the one-node form, built with uri/management_uri only: the lists hold just those
        if not self.uris:
            object.__setattr__(self, "uris", (self.uri,))
        if not self.management_uris:
            object.__setattr__(self, "management_uris", (self.management_uri,))


@dataclass(frozen=True)
class HttpConfig:
    """``[http]``: the status endpoint (``/livez``, ``/readyz``, ``/status``, ``/metrics``).

    Attributes:
        listen: ``HOST:PORT`` (``[::1]:PORT`` for IPv6); loopback by default.
        token: bearer token that changes (and, with ``protect_reads``, reads) require;
            mandatory when ``listen`` is not a loopback address.
        persist_diverts: keep the diverts created with ``POST /diverts`` in the broker (a
            global parameter), so that they outlive the sidecar and reach its standbys.
        allow_unauthenticated_changes: without a token, accept changes (``POST /diverts``,
            ``DELETE /diverts/NAME``) anyway; otherwise they need the token.
        protect_reads: with a token, require it for reads too (``/status``, ``/metrics``,
            health, ``GET /diverts``), which are open by default.
        allowed_transformers: the ``module:function`` transformers that diverts made at run
            time (``POST /diverts``, broker-stored) may name; none by default, since the name
            is code the sidecar imports and runs. Config-file diverts may name any.
    """

    listen: str = DEFAULT_LISTEN
    token: str | None = None
    persist_diverts: bool = False
    allow_unauthenticated_changes: bool = False
    protect_reads: bool = False
    allowed_transformers: tuple[str, ...] = ()

    @property
    def host(self) -> str:
        """The host part of ``listen`` (without IPv6 brackets)."""
        return split_listen(self.listen)[0]

    @property
    def port(self) -> int:
        """The port part of ``listen``."""
        return split_listen(self.listen)[1]


@dataclass(frozen=True)
class BindingConfig:
    """One static binding of a managed exchange (``bindings = [{...}]``).

    Attributes:
        destination: queue (or exchange) name.
        key: binding key (``""`` for fanout and headers).
        destination_type: ``queue`` or ``exchange``.
        arguments: binding arguments (headers exchanges: ``x-match`` and the header values).
    """

    destination: str
    key: str = ""
    destination_type: str = "queue"
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ExchangeConfig:
    """``[[exchange]]``: one managed exchange.

    Attributes:
        name: the exchange publishers publish to.
        kind: ``rtopic``, ``topic``, ``direct``, ``fanout`` or ``headers``.
        alternate_exchange: where unroutable messages go (``None``: counted only).
        prefetch: prefetch window of the ingress consumer (1-65535).
        ingress_queue_type: ``classic`` or ``quorum``.
        ingress_delivery_limit: for a quorum ingress queue, deliveries of one message before
            the broker dead-letters it to ``rtroute.dead`` (4.x drops it after 20 by default
            when no dead-letter exchange is set; 3.x has no limit unless one is set).
        bcc_alias_header: header with BCC semantics that publishers use instead of ``BCC``
            (RabbitMQ strips ``BCC`` before the sidecar sees it); removed before delivery.
        bindings: static bindings, in addition to those learned from the broker.
        max_hops: how many divert hops a message may take before it is dead-lettered. The
            divert graph of one sidecar is checked for cycles, so only a loop made through
            broker bindings, other sidecars or other brokers can reach it; 64 leaves room for
            any realistic acyclic chain (Artemis tests 25 hops) and still stops such a loop.
        shards: 0 (one ingress queue, one active sidecar at a time), or the number of ingress
            queues the messages are split into by a hash of their routing key (RabbitMQ's
            consistent hash exchange plugin): each shard has one active consumer, and the
            replicas of the sidecar share the shards (see :mod:`rtroute.sidecar.shards`).
    """

    name: str
    kind: str = "rtopic"
    alternate_exchange: str | None = None
    prefetch: int = 1000
    ingress_queue_type: str = "classic"
    ingress_delivery_limit: int = 20
    bcc_alias_header: str = "x-rtroute-bcc"
    bindings: list[BindingConfig] = field(default_factory=list)
    max_hops: int = 64
    shards: int = 0

    @property
    def ingress_queue(self) -> str:
        """Name of the ingress queue: ``rtroute.ingress.NAME`` (not sharded)."""
        return f"rtroute.ingress.{self.name}"

    @property
    def shards_exchange(self) -> str:
        """Name of the consistent hash exchange of a sharded ingress: ``NAME.shards``."""
        return f"{self.name}.shards"

    def shard_queue(self, index: int) -> str:
        """Name of ingress shard ``index`` (0-based): ``rtroute.shard.NAME.INDEX``."""
        return f"rtroute.shard.{self.name}.{index}"

    @property
    def ingress_queues(self) -> list[str]:
        """Every ingress queue: the shards' in order, or the one ingress queue."""
        return [self.shard_queue(i) for i in range(self.shards)] if self.shards \
            else [self.ingress_queue]

    @property
    def bindings_exchange(self) -> str:
        """Name of the exchange applications bind to: ``NAME.bindings``."""
        return f"{self.name}.bindings"


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


@dataclass(frozen=True)
class Config:
    """A whole ``rtroute.toml``.

    Attributes:
        broker: ``[broker]``.
        http: ``[http]``.
        exchanges: ``[[exchange]]`` entries, in file order.
        diverts: ``[[divert]]`` entries, in file order.
        shovels: ``[[shovel]]`` entries, in file order.
        path: the file it was read from (``None`` for text).
        warnings: what was accepted but deserves a look (``file:line: message``), e.g. a
            divert name used twice (the later one is ignored); each is also logged.
    """

    broker: BrokerConfig = field(default_factory=BrokerConfig)
    http: HttpConfig = field(default_factory=HttpConfig)
    exchanges: list[ExchangeConfig] = field(default_factory=list)
    diverts: list[DivertConfig] = field(default_factory=list)
    shovels: list[ShovelConfig] = field(default_factory=list)
    path: str | None = None
    warnings: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------- loading


def load(path: str | os.PathLike, token_given: bool = False) -> Config:
    """Read and validate an ``rtroute.toml``.

    ``token_given``: the HTTP token comes from elsewhere (``--token``), so a non-loopback
    ``[http] listen`` without ``token`` is fine. ``RTROUTE_HTTP_TOKEN`` or
    ``RTROUTE_HTTP_TOKEN_FILE`` in the environment count as given too.

    Raises:
        ConfigError: the file cannot be read, is larger than 4 MiB, is not TOML, or a value is
            wrong (with the line).
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror}", None, name) from None
    check_size(raw, name)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError("the config file is not UTF-8", line, name) from None
    return loads(text, name, token_given)


def loads(text: str, path: str | None = "rtroute.toml", token_given: bool = False) -> Config:
    """Validate ``rtroute.toml`` text; ``path`` only names the file in error messages.

    Raises:
        ConfigError: with the line of the offending key.
    """
    data, source = load_toml(text, path)
    where = Where(source, path)
    for key, value in data.items():
        if key not in SECTIONS:
            what = "section" if isinstance(value, (Mapping, list)) else "top-level key"
            raise where.error((key,), f"unknown {what} '{key}'" + suggest(key, SECTIONS))
    broker = _parse_broker(_section(data, where, "broker"))
    http = _parse_http(_section(data, where, "http"), token_given or bool(
        os.environ.get("RTROUTE_HTTP_TOKEN") or os.environ.get("RTROUTE_HTTP_TOKEN_FILE")))
    exchanges = [
        _parse_exchange(TableReader(item, ("exchange", i), where, f"exchange #{i + 1}"))
        for i, item in enumerate(_entries(data, where, "exchange"))
    ]
    _unique(where, "exchange", [(e.name, ("exchange", i, "name")) for i, e in enumerate(exchanges)])
    diverts = [
        _parse_divert(TableReader(item, ("divert", i), where, f"divert #{i + 1}"))
        for i, item in enumerate(_entries(data, where, "divert"))
    ]
    kept, warnings = _first_of_each_name(where, diverts)
    diverts = [diverts[i] for i in kept]
    _check_divert_graph(where, exchanges, diverts, kept)
    shovel_tables = _entries(data, where, "shovel")
    shovel_paths: list[Path] = [("shovel", i) for i in range(len(shovel_tables))]
    shovels = [parse_shovel(item, where, p) for item, p in zip(shovel_tables, shovel_paths)]
    check_unique(shovels, where, shovel_paths)
    for warning in warnings:
        LOG.warning("%s", warning)
    return Config(broker=broker, http=http, exchanges=exchanges, diverts=diverts,
                  shovels=shovels, path=path, warnings=tuple(warnings))


def _section(data: Mapping[str, Any], where: Where, name: str) -> TableReader:
    value = data.get(name, {})
    if not isinstance(value, Mapping):
        raise where.error((name,), f"[{name}] must be a table, got {type_name(value)}")
    return TableReader(value, (name,), where, f"[{name}]")


def _entries(data: Mapping[str, Any], where: Where, name: str) -> list[Mapping[str, Any]]:
    value = data.get(name, [])
    if isinstance(value, Mapping):
        raise where.error((name,), f"{name} must be an array of tables: write [[{name}]]")
    if not isinstance(value, list):
        raise where.error((name,), f"{name} must be an array of tables ([[{name}]]), got "
                          f"{type_name(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise where.error((name, i), f"{name} #{i + 1} must be a table, got "
                              f"{type_name(item)}")
    return value


def _unique(where: Where, section: str, names: list[tuple[str, Path]]) -> None:
    seen: dict[str, Path] = {}
    for name, path in names:
        if name in seen:
            first = where.source.line(seen[name])
            raise where.error(path, f"{section} {name!r}: name used twice (first defined on "
                              f"line {first})")
        seen[name] = path


def _first_of_each_name(where: Where, diverts: list[DivertConfig]
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


def _name(reader: TableReader, section: str) -> str:
    name = reader.string("name", empty=False)
    reader.context = f"{section} {name!r}"
    return name


def _checked_name(reader: TableReader, key: str, value: str | None) -> None:
    """Reject AMQP names longer than a short string allows."""
    if value is not None:
        problem = shortstr_problem(value)
        if problem:
            raise reader.error_at((key,), f"{reader.label(key)} {problem}")


# ----------------------------------------------------------------------------- [broker]/[http]


def _parse_broker(reader: TableReader) -> BrokerConfig:
    uris = _uri_list(reader, "uri", DEFAULT_URI, amqp_uri_problem)
    managements = _uri_list(reader, "management_uri", None, management_uri_problem)
    if managements is None:
        # one API per node, in the order of the AMQP URIs (a cluster's nodes fail over)
        managements = tuple(dict.fromkeys(derive_management_uri(uri) for uri in uris))
    reader.finish()
    return BrokerConfig(uri=uris[0], management_uri=managements[0], uris=uris,
                        management_uris=managements)


def _uri_list(reader: TableReader, key: str, default: str | None,
              problem_of: Callable[[str], str | None]) -> tuple[str, ...] | None:
    """``key`` as one URI or a non-empty array of them (a cluster's nodes), each checked."""
    got = reader.take(key)
    if got is None:
        return None if default is None else (default,)
    raw, value = got
    if isinstance(value, str):
        values, paths = [value], [(raw,)]
    elif isinstance(value, (list, tuple)) and value:
        values, paths = list(value), [(raw, i) for i in range(len(value))]
    else:
        got_text = "an empty array" if isinstance(value, list) else type_name(value)
        raise reader.error_at((raw,), f"{reader.label(raw)} must be a string or a non-empty "
                              f"array of strings (one URI per node), got {got_text}")
    for text, path in zip(values, paths):
        if not isinstance(text, str) or not text:
            got_text = "an empty string" if isinstance(text, str) else type_name(text)
            raise reader.error_at(path, f"{reader.label(*path)} must be a URI string, "
                                  f"got {got_text}")
        problem = problem_of(text)
        if problem:
            raise reader.error_at(path, f"{reader.label(*path)} {problem}")
    return tuple(values)


def derive_management_uri(amqp_uri: str) -> str:
    """The management API URI of the broker at ``amqp_uri``, with the same credentials.

    ``amqp://u:p@host:5672/v`` gives ``http://u:p@host:15672/``; ``amqps`` gives ``https`` on
    port 15671; a URI without host means the local broker, without credentials guest/guest.
    """
    parts = urlsplit(amqp_uri)
    host = parts.hostname or "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    user = unquote(parts.username) if parts.username is not None else "guest"
    password = unquote(parts.password) if parts.password is not None else "guest"
    scheme, port = ("https", 15671) if parts.scheme == "amqps" else ("http", 15672)
    return f"{scheme}://{quote(user, safe='')}:{quote(password, safe='')}@{host}:{port}/"


def _parse_http(reader: TableReader, token_given: bool = False) -> HttpConfig:
    listen = reader.string("listen", default=DEFAULT_LISTEN, empty=False)
    try:
        host, _port = split_listen(listen)
    except ValueError as exc:
        raise reader.error_at(("listen",), f"listen {exc}, got {listen!r}") from None
    token = reader.string("token", default=None, empty=False)
    persist = reader.boolean("persist_diverts", default=False)
    allow_changes = reader.boolean("allow_unauthenticated_changes", default=False)
    protect_reads = reader.boolean("protect_reads", default=False)
    allowed = _transformer_list(reader, "allowed_transformers")
    reader.finish()
    if token is None and not token_given and not is_loopback(host):
        raise reader.error_at(("listen",), f"listen {listen!r} is not a loopback address, so "
                              "a token is required (token = \"...\", or RTROUTE_HTTP_TOKEN / "
                              "RTROUTE_HTTP_TOKEN_FILE / rtroute run --token)")
    return HttpConfig(listen=listen, token=token, persist_diverts=persist,
                      allow_unauthenticated_changes=allow_changes, protect_reads=protect_reads,
                      allowed_transformers=allowed)


def _transformer_list(reader: TableReader, key: str) -> tuple[str, ...]:
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


# ------------------------------------------------------------------------------- [[exchange]]


def _parse_exchange(reader: TableReader) -> ExchangeConfig:
    name = _name(reader, "exchange")
    _checked_name(reader, "name", name)
    if name.startswith("amq."):
        raise reader.error_at(("name",), "name must not start with 'amq.' (reserved by "
                              "RabbitMQ)")
    kind = reader.choice("kind", EXCHANGE_KINDS, default="rtopic")
    alternate = reader.string("alternate_exchange", default=None, empty=False)
    _checked_name(reader, "alternate_exchange", alternate)
    if alternate == name:
        raise reader.error_at(("alternate_exchange",),
                              "alternate_exchange must differ from the exchange itself")
    prefetch = reader.integer("prefetch", default=1000, minimum=1, maximum=65535)
    queue_type = reader.choice("ingress_queue_type", QUEUE_TYPES, default="classic")
    delivery_limit = reader.integer("ingress_delivery_limit", default=20, minimum=1,
                                    maximum=2**31 - 1)
    if reader.has("ingress_delivery_limit") and queue_type != "quorum":
        raise reader.error_at(("ingress_delivery_limit",), "ingress_delivery_limit applies "
                              "only to a quorum ingress queue (ingress_queue_type = \"quorum\")")
    bcc_alias = reader.string("bcc_alias_header", default="x-rtroute-bcc", empty=False)
    if bcc_alias in ("CC", "BCC"):
        raise reader.error_at(("bcc_alias_header",),
                              f"bcc_alias_header must not be {bcc_alias!r}: RabbitMQ itself "
                              "acts on CC and BCC")
    bindings = _parse_bindings(reader)
    max_hops = reader.integer("max_hops", default=64, minimum=1, maximum=1000)
    shards = reader.integer("shards", default=0, minimum=0, maximum=MAX_SHARDS)
    reader.finish()
    return ExchangeConfig(name=name, kind=kind, alternate_exchange=alternate, prefetch=prefetch,
                          ingress_queue_type=queue_type,
                          ingress_delivery_limit=delivery_limit, bcc_alias_header=bcc_alias,
                          bindings=bindings, max_hops=max_hops, shards=shards)


def _parse_bindings(reader: TableReader) -> list[BindingConfig]:
    got = reader.take("bindings")
    if got is None:
        return []
    raw, value = got
    if not isinstance(value, list):
        raise reader.error_at((raw,), f"bindings must be an array of tables, got "
                              f"{type_name(value)}")
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise reader.error_at((raw, i), f"bindings[{i}] must be a table like "
                                  "{destination = \"q\", key = \"a.b\"}, got "
                                  f"{type_name(item)}")
        sub = TableReader(item, reader.path + (raw, i), reader.where, reader.context,
                          label_start=len(reader.path))
        destination = sub.string("destination", empty=False)
        _checked_name(sub, "destination", destination)
        key = sub.string("key", default="")
        _checked_name(sub, "key", key)
        destination_type = sub.choice("destination_type", DESTINATION_TYPES, default="queue")
        arguments = dict(sub.get("arguments", kind="table", default={}))
        sub.finish()
        out.append(BindingConfig(destination=destination, key=key,
                                 destination_type=destination_type, arguments=arguments))
    return out


# --------------------------------------------------------------------------------- [[divert]]


def _parse_divert(reader: TableReader, current: DivertConfig | None = None,
                  name: str | None = None) -> DivertConfig:
    """One divert. With ``current`` (an update) every key is optional and defaults to its
    value there, and ``null`` clears ``filter``, ``routing_key`` and ``transformer``; ``name``
    is the name an update or replacement is for (the table's own, if any, must equal it)."""
    reader = _one_spelling_each(reader)
    fixed = current.name if current is not None else name
    given = _name(reader, "divert") if fixed is None or reader.has("name") else fixed
    if fixed is not None and given != fixed:
        raise reader.error_at(("name",), f"name {given!r} differs from the divert named in "
                              f"the path, {fixed!r}; a divert cannot be renamed")
    reader.context = f"divert {given!r}"
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
        _checked_name(reader, got[0] if got else "routing_key", routing_key)
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
        _checked_name(reader, raw, part)
    return ",".join(parts)


def _check_divert_graph(
    where: Where, exchanges: list[ExchangeConfig], diverts: list[DivertConfig],
    indexes: list[int] | None = None,
) -> None:
    """Every divert watches a managed exchange, and no message can be diverted in a circle.
    ``indexes``: each divert's position among the file's ``[[divert]]`` tables."""
    names = [e.name for e in exchanges]
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
    return _parse_divert(_divert_reader(text, path))


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
        return _parse_divert(reader, current)
    config = _parse_divert(reader, name=current.name)
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
