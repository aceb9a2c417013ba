"""The `rtroute` command: thin wrappers that parse arguments and call one function each."""
from __future__ import annotations

import json
import sys

import click

# rtroute.publisher.PUBLISHED_KEY_HEADER (not imported here: it loads pika; a test pins them)
PUBLISHED_KEY_HEADER_DEFAULT = "x-rtroute-routing-key"


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rtroute")
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
    from rtroute.bindings_file import BindingsFileError, load_bindings
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
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
@click.option("--log-format", default="text", show_default=True, envvar="RTROUTE_LOG_FORMAT",
              type=click.Choice(["text", "json"]),
              help="Log lines as text or as one JSON object per line.")
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

    from rtroute.logsetup import configure as configure_logging
    from rtroute.sidecar.service import ExchangeSpec, Sidecar, SidecarFatal, serve

    configure_logging(log_level.upper(), log_format)
    from rtroute.core import warn_if_fallback

    warn_if_fallback()
    from rtroute.ops_http import ListenError

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
        from rtroute.config import ConfigError, derive_management_uri, load

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
                              protect_reads=protect_reads)
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
        sidecar = Sidecar(_one_or_list(uris) or "amqp://guest:guest@127.0.0.1:5672/%2F",
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
@click.option("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F", show_default=True,
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

    from rtroute.demo import run as run_demo

    try:
        run_demo(uri, echo=click.echo, management_uri=management_uri)
    except (OSError, RuntimeError, pika.exceptions.AMQPError) as exc:
        raise click.ClickException(str(exc)) from None


@main.command()
@click.option("--uri", default="amqp://guest:guest@127.0.0.1:5672/%2F", show_default=True,
              envvar="RTROUTE_URI", show_envvar=True)
@click.option("--exchange", required=True, help="Exchange to publish to.")
@click.option("--routing-key", default="", help="Routing key (may hold * and # for rtopic).")
@click.option("-n", "--count", default=10_000, show_default=True, type=click.IntRange(1))
@click.option("--size", default=100, show_default=True, type=click.IntRange(0),
              help="Body size in bytes.")
@click.option("--rate", default=None, type=click.FloatRange(min=0, min_open=True),
              help="Messages per second (default: as fast as confirms allow).")
@click.option("--window", default=1000, show_default=True, type=click.IntRange(1),
              help="Publishes in flight awaiting confirms.")
@click.option("--cc", multiple=True, metavar="KEY", help="CC routing key (repeatable).")
@click.option("--bcc-alias", multiple=True, metavar="KEY",
              help="Blind copy via the sidecar's alias header x-rtroute-bcc (repeatable).")
@click.option("--bcc", multiple=True, metavar="KEY",
              help="Blind copy in a real BCC header (repeatable; needs --route-locally: the "
                   "broker strips BCC before the sidecar could see it).")
@click.option("--persistent", is_flag=True, help="delivery_mode 2.")
@click.option("--route-locally", is_flag=True,
              help="Route here with the native core and publish once to EXCHANGE.bindings "
                   "(rtopic exchanges managed by rtroute; no second broker crossing).")
@click.option("--management-uri", default=None, envvar="RTROUTE_MANAGEMENT_URI",
              show_envvar=True, help="With --route-locally: the management API that lists "
                                     "the bindings [default: derived from --uri].")
@click.option("--delivery", type=click.Choice(["bcc", "matched-key"]), default="bcc",
              show_default=True,
              help="With --route-locally: bcc delivers the key as published, as the plugin "
                   "does; matched-key publishes a message that matched one binding key with "
                   "that key (the published one in x-rtroute-routing-key), faster on "
                   "RabbitMQ 3.x.")
@click.option("--published-key-header", default=PUBLISHED_KEY_HEADER_DEFAULT, show_default=True,
              metavar="NAME",
              help="With --delivery matched-key: the header that carries the key as "
                   "published; '' leaves it out (RabbitMQ 3.x then routes a plain publish, "
                   "about 6% less broker CPU, and consumers see only the binding key).")
def publish(uri: str, exchange: str, routing_key: str, count: int, size: int,
            rate: float | None, window: int, cc: tuple, bcc_alias: tuple, bcc: tuple,
            persistent: bool, route_locally: bool, management_uri: str | None,
            delivery: str, published_key_header: str) -> None:
    """Publish N messages with windowed publisher confirms; print rate and confirm latency.

    \b
    Examples:
      rtroute publish --exchange logs --routing-key '#.error' -n 1000
      rtroute publish --exchange logs --routing-key '*.app1.#' --route-locally --bcc audit.all
    """
    headers = {}
    if cc:
        headers["CC"] = list(cc)
    if bcc_alias:
        headers["x-rtroute-bcc"] = list(bcc_alias)
    if bcc and not route_locally:
        raise click.UsageError("--bcc needs --route-locally (use --bcc-alias through the "
                               "sidecar: RabbitMQ strips BCC before the sidecar sees it)")
    if bcc:
        headers["BCC"] = list(bcc)
    if delivery != "bcc" and not route_locally:
        raise click.UsageError("--delivery needs --route-locally")
    if published_key_header != PUBLISHED_KEY_HEADER_DEFAULT and delivery != "matched-key":
        raise click.UsageError("--published-key-header needs --delivery matched-key")
    if route_locally:
        from rtroute.publish_routed import publish_routed

        if rate is not None:
            raise click.UsageError("--rate is not supported with --route-locally")
        try:
            result = publish_routed(uri, exchange, routing_key, count, size, management_uri,
                                    window=window, headers=headers or None,
                                    persistent=persistent, echo=click.echo,
                                    delivery=delivery,
                                    published_key_header=published_key_header or None)
        except (ConnectionError, ValueError) as exc:
            raise click.ClickException(str(exc)) from None
        if result["failed"]:
            raise click.ClickException(f"{result['failed']} message(s) failed: "
                                       f"{result['error']}")
        return
    from rtroute.amqp import publish as publish_messages

    result = publish_messages(uri, exchange, routing_key, count, size, rate=rate, window=window,
                              headers=headers or None, persistent=persistent, echo=click.echo)
    if result.get("error"):
        raise click.ClickException(str(result["error"]))


@main.group("config")
def config_group() -> None:
    """Configuration files (rtroute.toml)."""


@config_group.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
def config_check(path: str) -> None:
    """Validate PATH; print each problem as FILE:LINE: message (exit status 1 on error)."""
    from rtroute.config import ConfigError, load
    from rtroute.proxy.config import load_proxy_settings

    try:
        config = load(path)
        proxy = load_proxy_settings(path)  # [proxy] is checked by the proxy's own reader
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    listeners = [*proxy.listen, *proxy.listen_tls]
    proxied = f", a proxy on {', '.join(listeners)}" if listeners else ""
    click.echo(f"{path}: OK ({len(config.exchanges)} exchanges, {len(config.diverts)} diverts, "
               f"{len(config.shovels)} shovels{proxied})")


def _register_groups() -> None:
    """Command groups that live beside the code they drive."""
    from rtroute.bench.commands import bench
    from rtroute.proxy.commands import proxy
    from rtroute.shovel.commands import shovel
    from rtroute.spark.commands import spark

    main.add_command(bench)
    main.add_command(proxy)
    main.add_command(shovel)
    main.add_command(spark)


_register_groups()

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
