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

Each section has its own parser: ``[broker]``, ``[http]`` and ``[[exchange]]`` here,
``[[divert]]`` in :mod:`rtroute.config.divert` (whose names, :class:`DivertConfig`,
:func:`loads_divert` and the rest, are importable from here too), ``[[shovel]]`` in
:mod:`rtroute.config.shovel`, ``[proxy]`` in :mod:`rtroute.proxy.config`. A divert's keys may
also be spelled as Artemis spells them (see :data:`DIVERT_KEY_SPELLINGS`).
"""
from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import quote, unquote, urlsplit

from rtroute.config.constants import DEFAULT_LISTEN, DEFAULT_URI, EXCHANGE_KINDS, QUEUE_TYPES
from rtroute.config.divert import (
    DIVERT_KEY_SPELLINGS,
    DIVERT_UPDATABLE,
    ROUTING_TYPES,
    DivertConfig,
    check_divert_graph,
    first_of_each_name,
    loads_divert,
    loads_divert_update,
    parse_divert,
    parse_transformer_list,
)
from rtroute.config.lines import (
    MAX_CONFIG_BYTES,
    ConfigError,
    Path,
    TableReader,
    Where,
    check_amqp_name,
    check_size,
    load_toml,
    suggest,
    token_in_environment,
    type_name,
)
from rtroute.config.shovel import ShovelConfig, check_unique, parse_shovel
from rtroute.config.validators import (
    amqp_uri_problem,
    management_uri_problem,
)
from rtroute.ops.netaddr import is_loopback, split_listen

__all__ = [
    "DIVERT_KEY_SPELLINGS",
    "DIVERT_UPDATABLE",
    "ROUTING_TYPES",
    "BindingConfig",
    "BrokerConfig",
    "Config",
    "ConfigError",
    "DivertConfig",
    "ExchangeConfig",
    "HttpConfig",
    "ShovelConfig",
    "derive_management_uri",
    "load",
    "loads",
    "loads_divert",
    "loads_divert_update",
]

LOG = logging.getLogger("rtroute.config")

MAX_SHARDS = 256  # ingress shards of one exchange (a channel each, per replica)
DESTINATION_TYPES = ("queue", "exchange")
SECTIONS = ("broker", "http", "exchange", "divert", "shovel", "proxy")  # proxy: rtroute.proxy.config


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
        archive_stream: a stream queue (RabbitMQ 3.9+) bound to ``NAME`` that keeps every
            message published to the exchange, as published, for readers that replay it by
            offset (``rtroute spark stream``) without taking it from anyone; None: none.
        archive_arguments: its retention arguments (``x-max-age``, ``x-max-length-bytes``,
            ``x-stream-max-segment-size-bytes``), passed to the broker as given.
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
    archive_stream: str | None = None
    archive_arguments: dict[str, Any] = field(default_factory=dict)

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
    http = _parse_http(_section(data, where, "http"), token_given or token_in_environment())
    exchanges = [
        _parse_exchange(TableReader(item, ("exchange", i), where, f"exchange #{i + 1}"))
        for i, item in enumerate(_entries(data, where, "exchange"))
    ]
    _unique(where, "exchange", [(e.name, ("exchange", i, "name")) for i, e in enumerate(exchanges)])
    diverts = [
        parse_divert(TableReader(item, ("divert", i), where, f"divert #{i + 1}"))
        for i, item in enumerate(_entries(data, where, "divert"))
    ]
    kept, warnings = first_of_each_name(where, diverts)
    diverts = [diverts[i] for i in kept]
    check_divert_graph(where, [e.name for e in exchanges], diverts, kept)
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



def _name(reader: TableReader, section: str) -> str:
    name = reader.string("name", empty=False)
    reader.context = f"{section} {name!r}"
    return name


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
    allowed = parse_transformer_list(reader, "allowed_transformers")
    reader.finish()
    if token is None and not token_given and not is_loopback(host):
        raise reader.error_at(("listen",), f"listen {listen!r} is not a loopback address, so "
                              "a token is required (token = \"...\", or RTROUTE_HTTP_TOKEN / "
                              "RTROUTE_HTTP_TOKEN_FILE / rtroute run --token)")
    return HttpConfig(listen=listen, token=token, persist_diverts=persist,
                      allow_unauthenticated_changes=allow_changes, protect_reads=protect_reads,
                      allowed_transformers=allowed)



# ------------------------------------------------------------------------------- [[exchange]]


def _parse_exchange(reader: TableReader) -> ExchangeConfig:
    name = _name(reader, "exchange")
    check_amqp_name(reader, "name", name)
    if name.startswith("amq."):
        raise reader.error_at(("name",), "name must not start with 'amq.' (reserved by "
                              "RabbitMQ)")
    kind = reader.choice("kind", EXCHANGE_KINDS, default="rtopic")
    alternate = reader.string("alternate_exchange", default=None, empty=False)
    check_amqp_name(reader, "alternate_exchange", alternate)
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
    archive, archive_arguments = _parse_archive(reader, name)
    reader.finish()
    return ExchangeConfig(name=name, kind=kind, alternate_exchange=alternate, prefetch=prefetch,
                          ingress_queue_type=queue_type,
                          ingress_delivery_limit=delivery_limit, bcc_alias_header=bcc_alias,
                          bindings=bindings, max_hops=max_hops, shards=shards,
                          archive_stream=archive, archive_arguments=archive_arguments)


# RabbitMQ's x-max-age: a positive integer and one unit (Years, Months, Days, hours, minutes,
# seconds)
_MAX_AGE = re.compile(r"[1-9][0-9]*[YMDhms]")
_ARCHIVE_RETENTION = (("archive_max_age", "x-max-age"),
                      ("archive_max_length_bytes", "x-max-length-bytes"),
                      ("archive_max_segment_size_bytes", "x-stream-max-segment-size-bytes"))


def _parse_archive(reader: TableReader, name: str) -> tuple[str | None, dict[str, Any]]:
    """``archive_stream`` and its retention keys: the stream queue's name and arguments."""
    archive = reader.string("archive_stream", default=None, empty=False)
    check_amqp_name(reader, "archive_stream", archive)
    if archive is not None and (archive.startswith(("amq.", "rtroute.")) or archive == name):
        raise reader.error_at(("archive_stream",), f"archive_stream {archive!r} must not start "
                              "with 'amq.' or 'rtroute.' (reserved) and must differ from the "
                              "exchange's name")
    arguments: dict[str, Any] = {}
    max_age = reader.string("archive_max_age", default=None, empty=False)
    if max_age is not None:
        if not _MAX_AGE.fullmatch(max_age):
            raise reader.error_at(("archive_max_age",), f"archive_max_age {max_age!r} is not "
                                  "RabbitMQ's x-max-age: a number and one unit of Y, M, D, h, "
                                  "m, s (e.g. \"7D\", \"12h\")")
        arguments["x-max-age"] = max_age
    for key, argument in _ARCHIVE_RETENTION[1:]:
        value = reader.integer(key, default=None, minimum=1, maximum=2**63 - 1)
        if value is not None:
            arguments[argument] = value
    given = [key for key, _ in _ARCHIVE_RETENTION if reader.has(key)]
    if given and archive is None:
        raise reader.error_at((given[0],), f"{given[0]} applies only to an archive stream "
                              "(archive_stream = \"NAME.archive\")")
    return archive, arguments


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
        check_amqp_name(sub, "destination", destination)
        key = sub.string("key", default="")
        check_amqp_name(sub, "key", key)
        destination_type = sub.choice("destination_type", DESTINATION_TYPES, default="queue")
        arguments = dict(sub.get("arguments", kind="table", default={}))
        sub.finish()
        out.append(BindingConfig(destination=destination, key=key,
                                 destination_type=destination_type, arguments=arguments))
    return out


