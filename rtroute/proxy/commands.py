"""``rtroute proxy``: the command (registered by ``rtroute.cli``)."""
from __future__ import annotations

import logging

import click

from rtroute.config.constants import DEFAULT_URI
from rtroute.ops.logsetup import log_options
from rtroute.proxy.confirm_meter import DEFAULT_BUDGET
from rtroute.proxy.server import ProxySettings, check_archive_stream


@click.command("proxy")
@click.option("--listen", "listen", multiple=True, metavar="HOST:PORT",
              help="Plain AMQP listener (repeatable). [default: 127.0.0.1:5680]")
@click.option("--listen-tls", "listen_tls", multiple=True, metavar="HOST:PORT",
              help="amqps listener (repeatable; needs --certfile and --keyfile).")
@click.option("--uri", default=None, envvar="RTROUTE_URI", show_envvar=True,
              help=f"The broker, with the proxy's own credentials. [default: {DEFAULT_URI}]")
@click.option("--management-uri", default=None, envvar="RTROUTE_MANAGEMENT_URI",
              show_envvar=True, help="Its management API (default: derived from --uri).")
@click.option("--certfile", default=None, type=click.Path(exists=True, dir_okay=False))
@click.option("--keyfile", default=None, type=click.Path(exists=True, dir_okay=False))
@click.option("--cacertfile", default=None, type=click.Path(exists=True, dir_okay=False),
              help="CA of client certificates (with --verify-peer).")
@click.option("--verify-peer", is_flag=True, default=None,
              help="TLS clients must present a certificate signed by --cacertfile.")
@click.option("--reuse-port", is_flag=True, default=None,
              help="SO_REUSEPORT: several proxy processes share the listen ports.")
@click.option("--client-in-flight", "client_in_flight", default=None, type=click.IntRange(1),
              metavar="KEYS",
              help="Routing keys (a publish's key and its BCC entries) one client's "
                   "unconfirmed publishes to x-rtopic exchanges may hold at the broker; the "
                   "proxy reads no more of that client meanwhile, so one client cannot queue "
                   "seconds of broker work ahead of the others ([proxy] client_in_flight). "
                   f"[default: {DEFAULT_BUDGET}]")
@click.option("--archive-stream", "archive_stream", default=None, metavar="QUEUE",
              help="A stream queue that keeps every message published to each x-rtopic "
                   "exchange, through the proxy or not ({exchange} stands for its name, e.g. "
                   "'{exchange}.archive'; it must exist): bound to NAME and NAME.bindings at "
                   "each declaration, reached by every rewritten publish; a publish to an "
                   "exchange whose archive is not bound is refused ([proxy] archive_stream).")
@click.option("-c", "--config", "config_path", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="rtroute.toml: its [proxy] table (options given here win).")
@click.option("--http", "http_listen", default=None, metavar="HOST:PORT",
              help="Ops endpoint (/livez /readyz /status /metrics), loopback unless a token "
                   "is set ([proxy] http).  [default: none]")
@click.option("--token", "cli_token", default=None, envvar="RTROUTE_HTTP_TOKEN",
              show_envvar=True,
              help="Bearer token of the ops endpoint (overrides [proxy] http_token); needed "
                   "beyond loopback.")
@click.option("--token-file", "token_file", default=None, envvar="RTROUTE_HTTP_TOKEN_FILE",
              show_envvar=True, type=click.Path(dir_okay=False),
              help="Read that token from a file (its content, stripped).")
@log_options
def proxy(listen: tuple[str, ...], listen_tls: tuple[str, ...], uri: str | None,
          management_uri: str | None, certfile: str | None, keyfile: str | None,
          cacertfile: str | None, verify_peer: bool | None, reuse_port: bool | None,
          client_in_flight: int | None, archive_stream: str | None, config_path: str | None, http_listen: str | None, cli_token: str | None,
          token_file: str | None, log_level: str, log_format: str) -> None:
    """An AMQP 0-9-1 proxy: x-rtopic exchanges as the plugin has them, for any client.

    Clients connect to it as to RabbitMQ (only the port changes); their handshake and
    credentials pass through to the broker.
    """
    from rtroute.config.lines import ConfigError
    from rtroute.core import warn_if_fallback
    from rtroute.ops.http import ListenError
    from rtroute.ops.logsetup import configure as configure_logging
    from rtroute.proxy.config import load_proxy_settings
    from rtroute.proxy.ops import read_token_file
    from rtroute.proxy.process import run
    from rtroute.proxy.server import ProxyFatal

    configure_logging(log_level.upper(), log_format.lower())
    warn_if_fallback()
    if token_file:
        if cli_token:
            raise click.UsageError("give either --token or --token-file, not both")
        try:
            cli_token = read_token_file(token_file)
        except ValueError as exc:
            raise click.ClickException(str(exc)) from None
    try:
        settings = load_proxy_settings(config_path, token_given=bool(cli_token)) \
            if config_path else ProxySettings(uri=DEFAULT_URI)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    given = {"listen": list(listen), "listen_tls": list(listen_tls), "uri": uri,
             "management_uri": management_uri, "certfile": certfile, "keyfile": keyfile,
             "cacertfile": cacertfile, "verify_peer": verify_peer, "reuse_port": reuse_port,
             "client_in_flight": client_in_flight, "archive_stream": archive_stream,
             "http": http_listen, "http_token": cli_token}
    for key, value in given.items():
        if value:
            setattr(settings, key, value)
    if uri and click.get_current_context().get_parameter_source("uri") is \
            click.core.ParameterSource.COMMANDLINE and _has_password(uri):
        logging.getLogger("rtroute.proxy").warning(
            "--uri holds a password, which every user of this machine sees in `ps`: give it in "
            "RTROUTE_URI (or [broker] uri of a config file) instead")
    if settings.archive_stream is not None:
        try:
            check_archive_stream(settings.archive_stream)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--archive-stream") from None
    if not settings.listen and not settings.listen_tls:
        settings.listen = ["127.0.0.1:5680"]
    try:
        settings.client_ssl_context()
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    try:
        run(settings, on_listening=_announce)
    except (ProxyFatal, ListenError) as exc:
        raise click.ClickException(str(exc)) from None
    except ValueError as exc:  # e.g. an endpoint beyond loopback without a token, a bad URI
        raise click.ClickException(str(exc)) from None


def _has_password(uri: str) -> bool:
    from urllib.parse import urlsplit

    try:
        return bool(urlsplit(uri).password)
    except ValueError:
        return False


def _announce(addresses: list[tuple[str, int]]) -> None:
    """``listening on HOST:PORT, ...``: one line in the log's format, whatever the log level
    (scripts and supervisors wait for it)."""
    logger = logging.getLogger("rtroute.proxy")
    # handle() passes the record to the handlers without the level check of info()
    logger.handle(logger.makeRecord(
        logger.name, logging.INFO, __file__, 0,
        "listening on " + ", ".join(f"{h}:{p}" for h, p in addresses), (), None))
