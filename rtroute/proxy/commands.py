"""``rtroute proxy``: the command (registered by ``rtroute.cli``)."""
from __future__ import annotations

import logging

import click

from rtroute.proxy.server import ProxySettings

DEFAULT_URI = "amqp://guest:guest@127.0.0.1:5672/%2F"


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
@click.option("-c", "--config", "config_path", default=None,
              type=click.Path(exists=True, dir_okay=False),
              help="rtroute.toml: its [proxy] table (options given here win).")
@click.option("--log-level", default="INFO", show_default=True,
              type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"], case_sensitive=False))
def proxy(listen: tuple[str, ...], listen_tls: tuple[str, ...], uri: str | None,
          management_uri: str | None, certfile: str | None, keyfile: str | None,
          cacertfile: str | None, verify_peer: bool | None, reuse_port: bool | None,
          config_path: str | None, log_level: str) -> None:
    """An AMQP 0-9-1 proxy: x-rtopic exchanges as the plugin has them, for any client.

    Clients connect to it as to RabbitMQ (only the port changes); their handshake and
    credentials pass through to the broker.
    """
    from rtroute.config_lines import ConfigError
    from rtroute.proxy.config import load_proxy_settings
    from rtroute.proxy.server import run

    logging.basicConfig(level=log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pika").setLevel(logging.WARNING)
    try:
        settings = load_proxy_settings(config_path) if config_path else \
            ProxySettings(uri=DEFAULT_URI)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    given = {"listen": list(listen), "listen_tls": list(listen_tls), "uri": uri,
             "management_uri": management_uri, "certfile": certfile, "keyfile": keyfile,
             "cacertfile": cacertfile, "verify_peer": verify_peer, "reuse_port": reuse_port}
    for key, value in given.items():
        if value:
            setattr(settings, key, value)
    if not settings.listen and not settings.listen_tls:
        settings.listen = ["127.0.0.1:5680"]
    try:
        settings.client_ssl_context()
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    run(settings, on_listening=lambda addresses: click.echo(
        "listening on " + ", ".join(f"{h}:{p}" for h, p in addresses), err=True))
