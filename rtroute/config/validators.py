"""Checks of single config values that several sections share: AMQP URIs, management URLs,
selectors, AMQP short strings.

Each returns why a value is wrong (a phrase to follow the key's name: ``uri is ...``) or
``None``; the caller says where (:mod:`rtroute.config.lines`). This module sits below
:mod:`rtroute.config.rtroute_toml` and the section parsers (``config/shovel.py``, ``config/divert.py``),
so that all of them import it and none imports another: the general config does not depend on
a feature package.
"""
from __future__ import annotations

from urllib.parse import urlsplit

__all__ = ["amqp_uri_problem", "management_uri_problem", "selector_problem",
           "shortstr_problem"]


def amqp_uri_problem(uri: str) -> str | None:
    """Why ``uri`` is not an ``amqp://``/``amqps://`` URI, or ``None`` when it is one (the
    text never quotes the password)."""
    from rtroute.amqp.uri import parse_uri, split_url

    try:
        parts, port = split_url(uri)
    except ValueError as exc:
        return f"is {exc}"
    if parts.scheme not in ("amqp", "amqps"):
        return "must start with amqp:// or amqps://"
    if not uri.startswith(f"{parts.scheme}://"):
        return f"must start with {parts.scheme}://"
    if parts.fragment:
        return "must not have a #fragment"
    if port == 0:
        return "has port 0"
    if parts.path.count("/") > 1:
        return "has a '/' in the vhost; write it as %2F"
    try:
        parse_uri(uri)
    except ValueError as exc:
        # "invalid AMQP URI '...': PROBLEM" (masked): keep the problem
        return "is invalid: " + str(exc).rpartition("': ")[2]
    return None


def management_uri_problem(uri: str) -> str | None:
    """Why ``uri`` is not an ``http(s)://host[:port]/`` management URL, or ``None``."""
    try:
        parts = urlsplit(uri)
        port = parts.port
    except ValueError:  # its text may quote the password
        return "is not a valid URL (its host or port cannot be read)"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "must be http(s)://host[:port]/"
    return "has port 0" if port == 0 else None


def selector_problem(text: str) -> tuple[str, int | None] | None:
    """``(message, position)`` when ``text`` is not a valid selector, else ``None``.

    Uses ``rtroute.selector.compile`` when that module is importable and skips the check when
    it is not (the config layer does not depend on the selector).
    """
    try:
        from rtroute import selector
    except ImportError:
        return None
    compile_selector = getattr(selector, "compile", None)
    error_type = getattr(selector, "SelectorError", None)
    if compile_selector is None or error_type is None:
        return None
    try:
        compile_selector(text)
    except error_type as exc:
        return getattr(exc, "reason", str(exc)), getattr(exc, "position", None)
    return None


def shortstr_problem(value: str) -> str | None:
    """Why ``value`` cannot be an AMQP short string (more than 255 UTF-8 bytes), or ``None``."""
    size = len(value.encode("utf-8"))
    return f"is {size} bytes long; AMQP allows at most 255" if size > 255 else None
