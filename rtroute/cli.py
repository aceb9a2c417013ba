"""The `rtroute` command: thin wrappers that parse arguments and call one function each."""
from __future__ import annotations

import json
import sys
from typing import Any

import click

from rtroute.bench.load import (
    PUBLISHED_KEY_HEADER_DEFAULT,  # noqa: F401 - rtroute.cli's name of it (a test pins it)
    check_routing,
    load_options,
    routing_headers,
    routing_options,
    run_load,
)
from rtroute.config.constants import DEFAULT_URI
from rtroute.control.client import token_options
from rtroute.ops.logsetup import log_options
from rtroute.publisher.message_options import PROPERTY_NAMES


def _show_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``--version``: the version and which matching core this install uses (a wheel or an
    install without a C compiler may have only the pure-Python one, far slower)."""
    if not value or ctx.resilient_parsing:
        return
    from importlib.metadata import version

    from rtroute import core

    where = "native core" if core.FALLBACK_REASON is None else \
        f"pure-Python core, the native one is not in use: {core.FALLBACK_REASON}"
    click.echo(f"rtroute, version {version('rtroute')} ({where})")
    ctx.exit()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True,
              callback=_show_version, help="Show the version and the matching core, and exit.")
def main() -> None:
    """rtroute: reverse-topic exchanges, CC/BCC, shovels and diverts beside an unmodified RabbitMQ."""


@main.command()
@click.option("--bindings", "bindings_path", required=True, type=click.Path(dir_okay=False),
              help="TOML or JSON file mapping each destination to its binding key(s).")
@click.option("--kind", type=click.Choice(["rtopic", "topic", "direct", "fanout"]),
              default="rtopic", show_default=True, help="Exchange semantics to route with.")
@click.option("--cc", multiple=True, metavar="KEY", help="Add a CC routing key (repeatable).")
@click.option("--bcc", multiple=True, metavar="KEY", help="Add a BCC routing key (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print destinations and headers as JSON.")
@click.argument("routing_key")
def route(bindings_path: str, kind: str, cc: tuple, bcc: tuple, as_json: bool,
          routing_key: str) -> None:
    """Print the destinations a publish with ROUTING_KEY (plus CC/BCC) reaches.

    \b
    Example:
      rtroute route --bindings examples/bindings.toml '*.app1.mod1.info' --cc 'server2.#'
    """
    from rtroute.config.bindings_file import BindingsFileError, load_bindings
    from rtroute.routing import make_exchange

    try:
        exchange = make_exchange(kind)
        for destination, key in load_bindings(bindings_path):
            exchange.bind(destination, key)
        headers = {}
        if cc:
            headers["CC"] = list(cc)
        if bcc:
            headers["BCC"] = list(bcc)
        result = exchange.route(routing_key, headers=headers or None)
    except (BindingsFileError, TypeError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"destinations": sorted(result.destinations),
                               "headers": result.headers}))
    else:
        for destination in sorted(result.destinations):
            click.echo(destination)
        if not result.destinations:
            click.echo("(unroutable: no destination matched)", err=True)


@main.command()
@click.option("-c", "--config", "config_path", type=click.Path(dir_okay=False),
              help="rtroute.toml declaring the broker, managed exchanges and the HTTP endpoint.")
@click.option("--uri", "uris", multiple=True, envvar="RTROUTE_URI", show_envvar=True,
              help="Broker URI (overrides [broker] uri); repeat it for each node of a cluster "
                   "(one is picked per connect, a lost connection fails over; in the "
                   "variable, separate them with spaces).  "
                   "[default: amqp://guest:guest@127.0.0.1:5672/%2F]")
@click.option("--management-uri", "management_uris", multiple=True,
              envvar="RTROUTE_MANAGEMENT_URI", show_envvar=True,
              help="Management API of that broker (overrides [broker] management_uri); "
                   "repeatable, tried in order.  [default: http://HOST:15672/ of each --uri "
                   "with its credentials; checked to be the same broker before it is trusted]")
@click.option("--rtopic", "rtopic", multiple=True, metavar="NAME",
              help="Serve NAME as an x-rtopic exchange (repeatable; without a config file).")
@click.option("--http", "http_listen", default=None, metavar="HOST:PORT",
              help="Ops endpoint (/livez /readyz /status /metrics /diverts).  "
                   "[default: 127.0.0.1:8419]")
@click.option("--token", "cli_token", default=None, envvar="RTROUTE_HTTP_TOKEN",
              show_envvar=True,
              help="Bearer token of the ops endpoint (overrides [http] token).")
@click.option("--token-file", "token_file", default=None, envvar="RTROUTE_HTTP_TOKEN_FILE",
              show_envvar=True, type=click.Path(dir_okay=False),
              help="Read that token from a file (its content, stripped).")
@click.option("--prefetch", default=1000, show_default=True, type=click.IntRange(1, 65535),
              help="Ingress prefetch window per exchange (without a config file).")
@click.option("--name", "connection_name", default="rtroute-sidecar", show_default=True,
              help="Connection name shown by the broker (management UI, rabbitmqctl).")
@click.option("--persist-diverts", is_flag=True,
              help="Keep diverts created over HTTP in the broker (a global parameter): they "
                   "outlive the process and reach standbys ([http] persist_diverts).")
@log_options
def run(config_path: str | None, uris: tuple[str, ...], management_uris: tuple[str, ...],
        rtopic: tuple,
        http_listen: str | None,
        prefetch: int, connection_name: str, persist_diverts: bool, log_level: str,
        log_format: str, cli_token: str | None, token_file: str | None) -> None:
    """Serve managed exchanges (x-rtopic) over the broker until SIGTERM/SIGINT.

    \b
    Publishers publish to NAME (with * and # in the routing key); applications bind their
    queues to NAME.bindings with plain keys. Either give a config file or --rtopic NAME:
      rtroute run -c rtroute.toml
      rtroute run --uri amqp://guest:guest@127.0.0.1:5672/%2F --rtopic logs
    """

    from rtroute.ops.logsetup import configure as configure_logging
    from rtroute.sidecar.service import ExchangeSpec, Sidecar, SidecarFatal, serve

    configure_logging(log_level.upper(), log_format)
    from rtroute.core import warn_if_fallback

    warn_if_fallback()
    from rtroute.ops.http import ListenError

    if token_file:
        if cli_token:
            raise click.UsageError("give either --token or --token-file, not both")
        try:
            with open(token_file, encoding="utf-8") as f:
                cli_token = f.read().strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise click.ClickException(f"--token-file {token_file}: "
                                       f"{getattr(exc, 'strerror', None) or exc}") from None
        if not cli_token:
            raise click.ClickException(f"--token-file {token_file}: the file is empty")
    token = cli_token or None
    allow_changes = protect_reads = False
    shovels = None
    if config_path:
        if rtopic:
            raise click.UsageError("give either --config or --rtopic, not both")
        from rtroute.config.rtroute_toml import ConfigError, derive_management_uri, load

        try:
            config = load(config_path, token_given=bool(token))
        except ConfigError as exc:
            raise click.ClickException(str(exc)) from None
        specs = list(config.exchanges)
        if uris and not management_uris and uris != config.broker.uris:
            # not the file's: another broker's
            management_uris = tuple(dict.fromkeys(derive_management_uri(u) for u in uris))
        uris = uris or config.broker.uris
        management_uris = management_uris or config.broker.management_uris
        http_listen = http_listen or config.http.listen
        token = token or config.http.token
        allow_changes = config.http.allow_unauthenticated_changes
        protect_reads = config.http.protect_reads
        persist_diverts = persist_diverts or config.http.persist_diverts
        allowed_transformers = config.http.allowed_transformers
        diverts = config.diverts
        if config.shovels:
            from rtroute.shovel.runner import ShovelRunner

            shovels = ShovelRunner(config.shovels)
        if not specs:
            if shovels is None:
                raise click.ClickException(f"{config_path}: declares nothing to run")
            from rtroute.shovel.runner import serve as serve_shovels

            try:
                serve_shovels(shovels, http_listen, token,
                              allow_unauthenticated_changes=allow_changes,
                              protect_reads=protect_reads, command="rtroute run")
            except ListenError as exc:
                raise click.ClickException(str(exc)) from None
            return
    else:
        if not rtopic:
            raise click.UsageError("nothing to serve: give --config FILE or --rtopic NAME")
        specs = [ExchangeSpec(name=name, prefetch=prefetch) for name in rtopic]
        diverts = []
        allowed_transformers = ()
    try:
        sidecar = Sidecar(_one_or_list(uris) or DEFAULT_URI,
                          specs, management_uri=_one_or_list(management_uris),
                          connection_name=connection_name,
                          diverts=diverts, persist_diverts=persist_diverts,
                          allowed_transformers=allowed_transformers)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    try:
        serve(sidecar, http_listen or "127.0.0.1:8419", token, shovels=shovels,
              allow_unauthenticated_changes=allow_changes, protect_reads=protect_reads)
    except (SidecarFatal, ListenError) as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:  # e.g. an endpoint beyond loopback without a token
        raise click.ClickException(str(exc)) from None


def _one_or_list(values: tuple[str, ...]) -> str | list[str] | None:
    """None, the one value, or the list (a cluster's nodes)."""
    return None if not values else values[0] if len(values) == 1 else list(values)


@main.command()
@click.option("--uri", default=DEFAULT_URI, show_default=True,
              envvar="RTROUTE_URI", show_envvar=True)
@click.option("--management-uri", "management_uri", default=None,
              envvar="RTROUTE_MANAGEMENT_URI", show_envvar=True,
              help="Management API of that broker, for the sidecar.  [default: "
                   "http://HOST:15672/, right for a broker on the default ports only]")
def demo(uri: str, management_uri: str | None) -> None:
    """Run the rtopic plugin's README example end to end through a real sidecar.

    \b
    Against RabbitMQ 4.3, where the x-rtopic plugin cannot start (the node of
    scripts/start-rabbitmq4.sh 4.3; 4.0: ports 5673 and 15673):
      rtroute demo --uri amqp://guest:guest@127.0.0.1:5674/%2F \\
                   --management-uri http://127.0.0.1:15674/
    """
    import pika.exceptions

    from rtroute.sidecar.demo import run as run_demo

    try:
        run_demo(uri, echo=click.echo, management_uri=management_uri)
    except (OSError, RuntimeError, pika.exceptions.AMQPError) as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@routing_options()
@load_options(count_default=None)
@click.option("--body", default=None, metavar="TEXT",
              help="The body of the one message (UTF-8).  [default: empty]")
@click.option("--body-file", default=None, type=click.File("rb"), metavar="PATH",
              help="The body of the one message from a file, byte for byte ('-': stdin).")
@click.option("--header", "header_args", multiple=True, metavar="NAME=VALUE",
              help="A message header (repeatable); VALUE is JSON when it parses as JSON "
                   "(1, true, null, [\"a\"], {\"k\": 1}, '\"1\"' for the string 1; 2.5 "
                   "as an AMQP decimal), else the text.")
@click.option("--property", "property_args", multiple=True, metavar="NAME=VALUE",
              help=f"A message property (repeatable): {', '.join(PROPERTY_NAMES)}. "
                   "delivery_mode 1|2 (transient|persistent), priority 0-255, timestamp "
                   "seconds or ISO 8601, expiration milliseconds.")
@click.option("--mandatory", is_flag=True,
              help="The broker returns the message if no queue takes it: exit status 1.")
def publish(uri: str, exchange: str, routing_key: str, cc: tuple, bcc_alias: tuple,
            bcc: tuple, persistent: bool, route_locally: bool, management_uri: str | None,
            delivery: str, published_key_header: str, count: int | None, size: int,
            rate: float | None, window: int, body: str | None, body_file: Any,
            header_args: tuple[str, ...], property_args: tuple[str, ...],
            mandatory: bool) -> None:
    """Publish one message and wait for its confirm (as `rabbitmqadmin publish`); with
    -n N, publish N generated messages as a load generator (as `rtroute bench load`).

    \b
    One message: exit status 0 once the broker confirmed it (and, with --mandatory, a queue
    took it); 1 with one line when it was nacked, returned, or the broker refused (a missing
    exchange: 404) or could not be reached.
    \b
    Examples:
      rtroute publish --exchange logs --routing-key server1.app1.mod1.error --body 'disk full'
      rtroute publish --exchange logs --routing-key '*.app1.#' --body-file msg.json \\
          --property content_type=application/json --property delivery_mode=2 \\
          --header x-attempt=1 --header 'CC=["audit.all"]' --mandatory
      echo hello | rtroute publish --exchange '' --routing-key my-queue --body-file -
      rtroute publish --exchange logs --routing-key '*.app1.#' --route-locally --bcc audit.all
      rtroute publish --exchange logs --routing-key '#.error' -n 100000 --rate 5000
    """
    ctx = click.get_current_context()
    if count is not None:
        for name in ("body", "body_file", "header_args", "property_args", "mandatory"):
            if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
                option = next(p.opts[0] for p in ctx.command.params if p.name == name)
                raise click.UsageError(f"{option} is for one message; -n publishes generated "
                                       "bodies of --size bytes")
        run_load(uri, exchange, routing_key, count, size, rate, window, cc, bcc_alias, bcc,
                 persistent, route_locally, management_uri, delivery, published_key_header)
        return
    for name in ("size", "rate", "window"):
        if ctx.get_parameter_source(name) is click.core.ParameterSource.COMMANDLINE:
            raise click.UsageError(f"--{name} is for the load generator: give -n N too (or "
                                   "use rtroute bench load)")
    check_routing(route_locally, bcc, delivery, published_key_header)
    if body is not None and body_file is not None:
        raise click.UsageError("give either --body or --body-file, not both")
    payload = body_file.read() if body_file is not None else (body or "").encode("utf-8")
    from rtroute.publisher.message_options import parse_headers, parse_properties

    try:
        headers = parse_headers(header_args)
        properties = parse_properties(property_args)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    for name, value in routing_headers(cc, bcc_alias, bcc).items():
        if name in headers:
            raise click.UsageError(f"header {name} is given by --header and by its own option")
        headers[name] = value
    if persistent:
        if properties.get("delivery_mode", 2) != 2:
            raise click.UsageError("--persistent and --property delivery_mode=1 disagree")
        properties["delivery_mode"] = 2
    _publish_one(uri, exchange, routing_key, payload, headers, properties, mandatory,
                 route_locally, management_uri, delivery, published_key_header)


def _publish_one(uri: str, exchange: str, routing_key: str, body: bytes,
                 headers: dict[str, Any], properties: dict[str, Any], mandatory: bool,
                 route_locally: bool, management_uri: str | None, delivery: str,
                 published_key_header: str) -> None:
    """The one message of `rtroute publish`, confirmed; a failure is one line (exit 1)."""
    import pika

    basic = pika.BasicProperties(headers=headers or None, **properties)
    where = f"exchange {exchange!r} with routing key {routing_key!r}"
    if route_locally:
        from rtroute.publisher import PublishError
        from rtroute.publisher.publish_routed import publish_one_routed
        from rtroute.routing import PreconditionFailed

        try:
            matched = publish_one_routed(uri, exchange, routing_key, body, basic,
                                         management_uri=management_uri, mandatory=mandatory,
                                         delivery=delivery,
                                         published_key_header=published_key_header or None)
        except (ConnectionError, ValueError, TimeoutError, PublishError,
                PreconditionFailed) as exc:
            raise click.ClickException(f"{where}: {exc}") from None
        click.echo(f"published 1 message ({len(body)} bytes) to {exchange}.bindings, routed "
                   f"here to {len(matched)} binding key(s): confirmed")
        return
    from rtroute.amqp.publish_tool import PublishOneError, publish_one

    try:
        publish_one(uri, exchange, routing_key, body, basic, mandatory=mandatory)
    except (PublishOneError, ValueError) as exc:
        raise click.ClickException(f"{where}: {exc}") from None
    click.echo(f"published 1 message ({len(body)} bytes) to {where}: confirmed"
               + (" and routed" if mandatory else ""))


# rtroute status's exit status for a process that answers but is not healthy: EX_UNAVAILABLE,
# as rabbitmq-diagnostics check_running exits for a node that is not running
STATUS_NOT_HEALTHY = 69


@main.command("status")
@click.option("--http", "http_listen", default="127.0.0.1:8419", show_default=True,
              envvar="RTROUTE_HTTP", show_envvar=True, metavar="HOST:PORT",
              help="Ops endpoint of the running process (its --http).")
@token_options
@click.option("--json", "as_json", is_flag=True, help="Print the /status JSON as is.")
def status(http_listen: str, token: str | None, token_file: str | None,
           as_json: bool) -> None:
    """Show a running `rtroute run`, `rtroute proxy` or `rtroute shovel run` (its /status).

    \b
    A sidecar shows one row per exchange and its diverts; a proxy its listeners, client
    connections, catalogs and refusals; a shovel process the columns of
    `rabbitmqctl shovel_status`.

    \b
    Exit status (as rabbitmq-diagnostics check_running's):
      0   the process answers and is healthy (its /readyz is 200)
      1   nothing answers, the token is refused or the endpoint is not rtroute's
      2   a usage error
      69  the process answers but is not healthy (the status, with its reason, is printed)

    \b
    Examples:
      rtroute status
      rtroute status --http 127.0.0.1:8421 --token-file /etc/rtroute/token
      rtroute status --json
    """
    from rtroute.control.client import OpsClientError, OpsHttpError, call, endpoint, resolve_token
    from rtroute.control.status_tables import format_status, process_kind

    url = f"{endpoint(http_listen)}/status"
    try:
        data = call(url, resolve_token(token, token_file), timeout=10)
    except OpsHttpError as exc:
        if exc.code in (404, 405):
            raise click.ClickException(f"{url}: not an rtroute endpoint (HTTP {exc.code})"
                                       ) from None
        raise click.ClickException(str(exc)) from None
    except OpsClientError as exc:
        raise click.ClickException(str(exc)) from None
    if process_kind(data) is None:
        raise click.ClickException(f"{url}: not an rtroute endpoint (no rtroute /status in "
                                   "its answer)")
    click.echo(json.dumps(data, indent=1) if as_json else format_status(data))
    if not data.get("healthy"):
        sys.exit(STATUS_NOT_HEALTHY)


@main.group("config")
def config_group() -> None:
    """Configuration files (rtroute.toml)."""


@config_group.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
@click.option("--bindings", "as_bindings", is_flag=True,
              help="PATH is a bindings file (as `rtroute route --bindings` and `rtroute spark` "
                   "read: destination = binding key(s), TOML or JSON), not rtroute.toml.")
@click.option("--kind", type=click.Choice(["rtopic", "topic", "direct", "fanout"]),
              default="rtopic", show_default=True,
              help="With --bindings: the exchange semantics its keys are checked for.")
def config_check(path: str, as_bindings: bool, kind: str) -> None:
    """Validate PATH; print each problem as FILE:LINE: message (exit status 1 on error).

    \b
    Examples:
      rtroute config check rtroute.toml
      rtroute config check --bindings examples/bindings.toml
    """
    if as_bindings:
        _check_bindings(path, kind)
        return
    from rtroute.config.rtroute_toml import ConfigError, load
    from rtroute.proxy.config import load_proxy_settings

    try:
        # a token beyond loopback may come at run time (a Kubernetes Secret's
        # RTROUTE_HTTP_TOKEN, --token): said below, not an error of the file
        config = load(path, token_given=True)
        proxy = load_proxy_settings(path, token_given=True)  # [proxy]: the proxy's own reader
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    listeners = [*proxy.listen, *proxy.listen_tls]
    proxied = f", a proxy on {', '.join(listeners)}" if listeners else ""
    click.echo(f"{path}: OK ({len(config.exchanges)} exchanges, {len(config.diverts)} diverts, "
               f"{len(config.shovels)} shovels{proxied})")
    for note in _token_notes(config, proxy):
        click.echo(f"{path}: note: {note}")


def _token_notes(config: Any, proxy: Any) -> list[str]:
    """What needs a token at run time that the file does not hold (neither does the
    environment of this check)."""
    from rtroute.config.lines import token_in_environment
    from rtroute.ops.netaddr import is_loopback, split_listen

    if token_in_environment():
        return []
    notes = []
    for where, listen, token, option in (
            ("[http] listen", config.http.listen if config.http else None,
             config.http.token if config.http else None, "rtroute run --token"),
            ("[proxy] http", proxy.http, proxy.http_token, "rtroute proxy --token")):
        if listen and token is None and not is_loopback(split_listen(listen)[0]):
            notes.append(f"{where} {listen} is beyond loopback: the process needs a token at "
                         f"run time (RTROUTE_HTTP_TOKEN, RTROUTE_HTTP_TOKEN_FILE or {option})")
    return notes


def _check_bindings(path: str, kind: str) -> None:
    from rtroute.config.bindings_file import BindingsFileError, load_bindings
    from rtroute.routing import make_exchange

    try:
        bindings = load_bindings(path)
        exchange = make_exchange(kind)
        for destination, key in bindings:
            try:
                exchange.bind(destination, key)
            except (TypeError, ValueError) as exc:
                raise BindingsFileError(f"{path}: {destination!r} = {key!r}: {exc}") from None
    except BindingsFileError as exc:
        raise click.ClickException(str(exc)) from None
    destinations = len({destination for destination, _ in bindings})
    click.echo(f"{path}: OK ({len(bindings)} bindings, {destinations} destinations, {kind})")


def _register_groups() -> None:
    """Command groups that live beside the code they drive."""
    from rtroute.bench.commands import bench
    from rtroute.definitions.commands import definitions
    from rtroute.divert.commands import divert
    from rtroute.proxy.commands import proxy
    from rtroute.shovel.commands import shovel
    from rtroute.spark.commands import spark

    main.add_command(bench)
    main.add_command(definitions)
    main.add_command(divert)
    main.add_command(proxy)
    main.add_command(shovel)
    main.add_command(spark)


_register_groups()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
