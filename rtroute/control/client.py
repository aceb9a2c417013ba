"""The client side of the ops endpoint (:mod:`rtroute.ops.http`): what ``rtroute status`` and
``rtroute shovel status|delete|restart`` send to a running ``rtroute run``, ``rtroute proxy``
or ``rtroute shovel run``, and the ``--http``/``--token``/``--token-file`` options they share.

Every failure is an :class:`OpsClientError` whose message is one line that says what to do.
"""
from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any, Callable

import click

__all__ = ["OpsClientError", "OpsHttpError", "call", "endpoint", "resolve_token",
           "token_options"]

TIMEOUT = 30.0  # seconds for one request (a shovel's graceful restart answers when done)
#: what the server of each kind of endpoint is started with, to give it its token
SERVER_TOKEN_OPTIONS = "rtroute run --token, rtroute proxy --token or rtroute shovel run --token"
CLIENT_TOKEN_OPTIONS = "--token or --token-file (RTROUTE_HTTP_TOKEN / RTROUTE_HTTP_TOKEN_FILE)"


class OpsClientError(Exception):
    """The endpoint cannot be reached, refused, or answered something unexpected."""


class OpsHttpError(OpsClientError):
    """The endpoint answered with an HTTP error (``code``; ``reason`` is its ``error``)."""

    def __init__(self, message: str, code: int, reason: str | None) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


def endpoint(http_listen: str) -> str:
    """``http://HOST:PORT`` of the ops endpoint at ``http_listen`` (``HOST:PORT``).

    Raises:
        click.BadParameter: not ``HOST:PORT`` (named as ``--http``).
    """
    from rtroute.ops.netaddr import split_listen

    try:
        host, port = split_listen(http_listen)
    except ValueError as exc:
        raise click.BadParameter(f"{http_listen!r} {exc}", param_hint="--http") from None
    return f"http://{host if ':' not in host else f'[{host}]'}:{port}"


def call(url: str, token: str | None, method: str = "GET", timeout: float = TIMEOUT,
         body: Any = None) -> Any:
    """The JSON answer of the ops endpoint to ``method url``; ``body`` (not None) is sent
    as JSON.

    Raises:
        OpsHttpError: an HTTP error; a 401 says which options give the token.
        OpsClientError: nothing answers, or the answer is not JSON.
    """
    payload = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=payload, method=method)
    if payload is not None:
        request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            data = response.read()
    except urllib.error.HTTPError as exc:
        try:
            reason = json.loads(exc.read()).get("error")
        except (ValueError, AttributeError, OSError):
            reason = None
        text = f"{url}: HTTP {exc.code}" + (f": {reason}" if reason else "")
        if exc.code == 401:
            given = "the token given was refused" if token else "no token was given"
            text += (f"; {given}: give the one the server was started with "
                     f"({_server_option(reason)}) with {CLIENT_TOKEN_OPTIONS}")
        raise OpsHttpError(text, exc.code, reason) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        reason = getattr(reason, "strerror", None) or reason
        raise OpsClientError(f"{url}: nothing answers ({reason}): is an rtroute process "
                             "serving HTTP there (its --http HOST:PORT)?") from None
    try:
        return json.loads(data)
    except ValueError:
        raise OpsClientError(f"{url}: not an rtroute endpoint (the answer is not JSON)"
                             ) from None


def _server_option(reason: str | None) -> str:
    """The server's token option named in its 401 answer, else every one it may be."""
    for command in ("rtroute shovel run", "rtroute proxy", "rtroute run"):
        if reason and f"{command} --token" in reason:
            return f"{command} --token"
    return SERVER_TOKEN_OPTIONS


def resolve_token(token: str | None, token_file: str | None) -> str | None:
    """The token of ``--token`` or the content of ``--token-file`` (not both).

    Raises:
        click.UsageError: both given.
        click.ClickException: the file cannot be read or is empty.
    """
    if not token_file:
        return token or None
    if token:
        raise click.UsageError("give either --token or --token-file, not both")
    from rtroute.proxy.ops import read_token_file

    try:
        return read_token_file(token_file)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None


def token_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--token`` and ``--token-file`` (as ``token`` and ``token_file``) of a client
    command, from the same variables as the servers' options."""
    function = click.option(
        "--token-file", "token_file", default=None, envvar="RTROUTE_HTTP_TOKEN_FILE",
        show_envvar=True, type=click.Path(dir_okay=False),
        help="Read that token from a file (its content, stripped).")(function)
    return click.option(
        "--token", "token", default=None, envvar="RTROUTE_HTTP_TOKEN", show_envvar=True,
        help="Bearer token of the endpoint: the one the process was started with "
             "(rtroute run / proxy / shovel run --token).")(function)
