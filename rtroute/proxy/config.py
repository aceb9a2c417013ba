"""The ``[proxy]`` table of ``rtroute.toml``, checked as the rest of the file (file:line errors,
"did you mean")::

    [broker]
    uri = "amqp://rtroute:secret@127.0.0.1:5672/%2F"   # the proxy's own credentials
    [proxy]
    listen = ["127.0.0.1:5680"]
    listen_tls = ["0.0.0.0:5681"]
    certfile = "/etc/rtroute/proxy.pem"
    keyfile = "/etc/rtroute/proxy.key"
    cacertfile = "/etc/rtroute/ca.pem"      # with verify_peer = true
    reuse_port = true
    client_in_flight = 256                  # a client's unconfirmed routing keys (its share)
    archive_stream = "{exchange}.archive"   # a stream keeping all that NAME is sent (default: none)
    http = "127.0.0.1:8421"                 # /livez /readyz /status /metrics (default: none)
    # http_token = "..."                    # needed when http is beyond loopback
"""
from __future__ import annotations

import os
from pathlib import Path

from rtroute.config.constants import DEFAULT_URI
from rtroute.config.lines import (
    ConfigError,
    TableReader,
    Where,
    check_size,
    load_toml,
    token_in_environment,
)
from rtroute.ops.netaddr import is_loopback, split_hostport, split_listen
from rtroute.proxy.confirm_meter import DEFAULT_BUDGET
from rtroute.proxy.server import ProxySettings, check_archive_stream

__all__ = ["load_proxy_settings", "loads_proxy_settings"]



def load_proxy_settings(path: str | os.PathLike, token_given: bool = False) -> ProxySettings:
    """The proxy's settings from ``[broker]`` and ``[proxy]`` of a config file.

    ``token_given``: the HTTP token comes from elsewhere (``--token``), so a non-loopback
    ``http`` without ``http_token`` is fine; ``RTROUTE_HTTP_TOKEN`` or
    ``RTROUTE_HTTP_TOKEN_FILE`` in the environment count as given too.

    Raises:
        ConfigError: unreadable file or a bad value (``file:line: message``).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the config file: {exc.strerror}", None,
                          str(path)) from None
    return loads_proxy_settings(text, str(path), token_given)


def loads_proxy_settings(text: str, path: str | None = "rtroute.toml",
                         token_given: bool = False) -> ProxySettings:
    """As :func:`load_proxy_settings`, from the file's text."""
    check_size(text, path)
    data, source = load_toml(text, path)
    settings = ProxySettings(uri=DEFAULT_URI)
    broker = data.get("broker")
    if isinstance(broker, dict):
        uri = broker.get("uri")
        if isinstance(uri, list) and uri:
            uri = uri[0]
        if isinstance(uri, str):
            settings.uri = uri
        if isinstance(broker.get("management_uri"), str):
            settings.management_uri = broker["management_uri"]
    table = data.get("proxy")
    if table is None:
        return settings
    where = Where(source, path)
    if not isinstance(table, dict):
        raise where.error(("proxy",), "[proxy] must be a table")
    reader = TableReader(table, ("proxy",), where, "proxy")
    for key in ("listen", "listen_tls"):
        found = reader.take(key)
        if found is None:
            continue
        raw, value = found
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise reader.error_at((raw,), f"{key} must be host:port or a list of them")
        for index, value in enumerate(values):
            try:
                split_hostport(value)
            except ValueError as exc:
                raise reader.error_at((raw, index), str(exc)) from None
        setattr(settings, key, values)
    for key in ("certfile", "keyfile", "cacertfile"):
        value = reader.string(key, default=None)
        if value is not None:
            if not Path(value).is_file():
                raise reader.error_at((key,), f"{key} {value!r} is not a readable file")
            setattr(settings, key, value)
    settings.verify_peer = reader.boolean("verify_peer", default=False)
    settings.reuse_port = reader.boolean("reuse_port", default=False)
    settings.bcc_alias = reader.string("bcc_alias_header", default=settings.bcc_alias)
    settings.client_in_flight = reader.integer("client_in_flight", default=DEFAULT_BUDGET,
                                               minimum=1, maximum=1 << 30)
    settings.archive_stream = reader.string("archive_stream", default=None, empty=False)
    if settings.archive_stream is not None:
        try:
            check_archive_stream(settings.archive_stream)
        except ValueError as exc:
            raise reader.error_at(("archive_stream",), str(exc)) from None
    settings.http = reader.string("http", default=None, empty=False)
    settings.http_token = reader.string("http_token", default=None, empty=False)
    reader.finish()
    if settings.http is not None:
        try:
            host, _port = split_listen(settings.http)
        except ValueError as exc:
            raise reader.error_at(("http",), f"http {exc}, got {settings.http!r}") from None
        token_given = token_given or token_in_environment()
        if settings.http_token is None and not token_given and not is_loopback(host):
            raise reader.error_at(("http",), f"http {settings.http!r} is not a loopback "
                                  "address, so a token is required (http_token = \"...\", or "
                                  "RTROUTE_HTTP_TOKEN / RTROUTE_HTTP_TOKEN_FILE / rtroute proxy "
                                  "--token)")
    if settings.listen_tls and not (settings.certfile and settings.keyfile):
        raise reader.error("listen_tls needs certfile and keyfile")
    return settings
