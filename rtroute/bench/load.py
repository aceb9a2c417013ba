"""The load generator of ``rtroute bench load`` and ``rtroute publish -n N``: N generated
messages with windowed publisher confirms, then the rate and the confirm latency.

Both commands take the same options (:func:`load_options`) and run :func:`run_load`; the
routing options (:func:`routing_options`) are also those of ``rtroute publish``'s one message.
"""
from __future__ import annotations

from typing import Any, Callable

import click

from rtroute.config.constants import DEFAULT_URI

__all__ = ["PUBLISHED_KEY_HEADER_DEFAULT", "check_routing", "load_options", "routing_headers",
           "routing_options", "run_load"]

# rtroute.publisher.PUBLISHED_KEY_HEADER (not imported here: it loads pika; a test pins them)
PUBLISHED_KEY_HEADER_DEFAULT = "x-rtroute-routing-key"

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def _apply(options: list[Decorator]) -> Decorator:
    def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
        for option in reversed(options):
            function = option(function)
        return function

    return decorate


def routing_options() -> Decorator:
    """``--uri --exchange --routing-key --cc --bcc-alias --bcc --persistent --route-locally
    --management-uri --delivery --published-key-header``."""
    return _apply([
        click.option("--uri", default=DEFAULT_URI, show_default=True, envvar="RTROUTE_URI",
                     show_envvar=True),
        click.option("--exchange", required=True,
                     help="Exchange to publish to ('' for the default exchange)."),
        click.option("--routing-key", default="",
                     help="Routing key (may hold * and # for rtopic)."),
        click.option("--cc", multiple=True, metavar="KEY", help="CC routing key (repeatable)."),
        click.option("--bcc-alias", multiple=True, metavar="KEY",
                     help="Blind copy via the sidecar's alias header x-rtroute-bcc "
                          "(repeatable)."),
        click.option("--bcc", multiple=True, metavar="KEY",
                     help="Blind copy in a real BCC header (repeatable; needs --route-locally: "
                          "the broker strips BCC before the sidecar could see it)."),
        click.option("--persistent", is_flag=True, help="delivery_mode 2."),
        click.option("--route-locally", is_flag=True,
                     help="Route here with the native core and publish once to "
                          "EXCHANGE.bindings (rtopic exchanges managed by rtroute; no second "
                          "broker crossing)."),
        click.option("--management-uri", default=None, envvar="RTROUTE_MANAGEMENT_URI",
                     show_envvar=True,
                     help="With --route-locally: the management API that lists the bindings "
                          "[default: derived from --uri]."),
        click.option("--delivery", type=click.Choice(["bcc", "matched-key"]), default="bcc",
                     show_default=True,
                     help="With --route-locally: bcc delivers the key as published, as the "
                          "plugin does; matched-key publishes a message that matched one "
                          "binding key with that key (the published one in "
                          "x-rtroute-routing-key), faster on RabbitMQ 3.x."),
        click.option("--published-key-header", default=PUBLISHED_KEY_HEADER_DEFAULT,
                     show_default=True, metavar="NAME",
                     help="With --delivery matched-key: the header that carries the key as "
                          "published; '' leaves it out (RabbitMQ 3.x then routes a plain "
                          "publish, about 6% less broker CPU, and consumers see only the "
                          "binding key)."),
    ])


def load_options(count_default: int | None) -> Decorator:
    """``-n/--count --size --rate --window`` (``count_default`` None: no default, shown as
    such; ``rtroute publish`` then publishes one message)."""
    count_help = ("Messages to publish." if count_default is not None else
                  "Publish N generated messages as a load generator (windowed confirms, "
                  "progress, rate and confirm latency; as rtroute bench load); without it, "
                  "one message.")
    return _apply([
        click.option("-n", "--count", default=count_default, show_default=True,
                     type=click.IntRange(1), help=count_help),
        click.option("--size", default=100, show_default=True, type=click.IntRange(0),
                     help="Body size in bytes of the generated messages."),
        click.option("--rate", default=None, type=click.FloatRange(min=0, min_open=True),
                     help="Messages per second (default: as fast as confirms allow)."),
        click.option("--window", default=1000, show_default=True, type=click.IntRange(1),
                     help="Publishes in flight awaiting confirms."),
    ])


def check_routing(route_locally: bool, bcc: tuple[str, ...], delivery: str,
                  published_key_header: str) -> None:
    """The routing options that only go together.

    Raises:
        click.UsageError: ``--bcc``/``--delivery`` without ``--route-locally``,
            ``--published-key-header`` without ``--delivery matched-key``.
    """
    if bcc and not route_locally:
        raise click.UsageError("--bcc needs --route-locally (use --bcc-alias through the "
                               "sidecar: RabbitMQ strips BCC before the sidecar sees it)")
    if delivery != "bcc" and not route_locally:
        raise click.UsageError("--delivery needs --route-locally")
    if published_key_header != PUBLISHED_KEY_HEADER_DEFAULT and delivery != "matched-key":
        raise click.UsageError("--published-key-header needs --delivery matched-key")


def routing_headers(cc: tuple[str, ...], bcc_alias: tuple[str, ...],
                    bcc: tuple[str, ...]) -> dict[str, list[str]]:
    """The ``CC``, ``x-rtroute-bcc`` and ``BCC`` headers of ``--cc``, ``--bcc-alias`` and
    ``--bcc`` (only those given)."""
    headers = {}
    if cc:
        headers["CC"] = list(cc)
    if bcc_alias:
        headers["x-rtroute-bcc"] = list(bcc_alias)
    if bcc:
        headers["BCC"] = list(bcc)
    return headers


def run_load(uri: str, exchange: str, routing_key: str, count: int, size: int,
             rate: float | None, window: int, cc: tuple, bcc_alias: tuple, bcc: tuple,
             persistent: bool, route_locally: bool, management_uri: str | None,
             delivery: str, published_key_header: str) -> None:
    """Publish ``count`` messages of ``size`` bytes with ``window`` publishes in flight,
    through the broker or ``--route-locally``; print progress and the figures.

    Raises:
        click.UsageError: options that do not go together.
        click.ClickException: the run failed (the first error), or some messages did.
    """
    check_routing(route_locally, bcc, delivery, published_key_header)
    headers = routing_headers(cc, bcc_alias, bcc)
    if route_locally:
        from rtroute.publisher.publish_routed import publish_routed

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
