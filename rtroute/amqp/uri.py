"""RabbitMQ URIs (``amqp://`` and ``amqps://``) parsed the way RabbitMQ's Erlang client does.

The shovel and federation plugins take URIs such as::

    amqp://user:pass@host:5672/vhost?heartbeat=5&frame_max=8192&channel_max=16
    amqps://host?cacertfile=/ca.pem&certfile=/c.pem&keyfile=/k.pem&verify=verify_peer

pika's ``URLParameters`` rejects several of these query keys (and repeated ones), so this
module parses the URI itself and builds ``pika.ConnectionParameters``. The rules follow
RabbitMQ's URI specification and ``amqp_uri.erl``:

- user, password, host and vhost are percent-decoded; a vhost must not contain a raw ``/``
  (write ``%2F``); ``amqp://host`` means vhost ``/`` but ``amqp://host/`` means vhost ``""``;
- defaults: ``guest``/``guest``, vhost ``/``, port 5672 (``amqps``: 5671);
- no host (``amqp://``, ``amqp:///vhost``) means the local broker, 127.0.0.1 here (the Erlang
  client makes a direct in-node connection instead); a port without a host is an error;
- ``connection_timeout`` is in milliseconds, ``heartbeat`` in seconds (0 turns heartbeats off);
- ``auth_mechanism`` may repeat (``plain``, ``amqplain``, ``external``);
- TLS keys (``amqps`` only): ``cacertfile``, ``certfile``, ``keyfile``, ``password`` (of the
  key), ``verify`` (``verify_peer`` | ``verify_none``), ``fail_if_no_peer_cert``,
  ``server_name_indication`` (a host name or ``disable``), ``depth``,
  ``customize_hostname_check`` (``https``).

Unlike the Erlang client, which silently ignores unknown query keys, :func:`parse_uri` rejects
them by default (a typo such as ``heartbaet`` would otherwise go unnoticed); pass
``strict=False`` for the plugin's lenient behaviour. Unlike Erlang/OTP 24, ``amqps`` verifies the
server certificate unless the URI says ``verify=verify_none``.

Error messages and :func:`mask_uri` never contain the password.
"""
from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, quote, unquote, urlsplit

import pika

__all__ = [
    "AmqpUri",
    "TlsOptions",
    "connection_parameters",
    "management_url",
    "mask_uri",
    "parse_uri",
    "split_url",
]

LOCAL_HOST = "127.0.0.1"
DEFAULT_PORTS = {"amqp": 5672, "amqps": 5671}
MASK = "***"

# pika accepts frame sizes in this range only (AMQP's minimum is 4096).
_PIKA_FRAME_MIN = 4096
_PIKA_FRAME_MAX = 131072

_AMQP_INT_KEYS = ("heartbeat", "frame_max", "channel_max", "connection_timeout")
_TLS_KEYS = (
    "cacertfile",
    "certfile",
    "keyfile",
    "password",
    "verify",
    "fail_if_no_peer_cert",
    "server_name_indication",
    "depth",
    "customize_hostname_check",
)
_AUTH_MECHANISMS = ("plain", "amqplain", "external")

_URI_RE = re.compile(
    r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://"
    r"(?P<authority>[^/?]*)"
    r"(?P<path>[^?]*)"
    r"(?:\?(?P<query>.*))?$",
    re.DOTALL,
)
_BAD_ESCAPE_RE = re.compile(r"%(?![0-9A-Fa-f]{2})")


@dataclass(frozen=True)
class TlsOptions:
    """TLS settings of an ``amqps://`` URI (paths are not opened until a connection is built).

    ``fail_if_no_peer_cert`` and ``depth`` are accepted for compatibility with the Erlang client;
    the first is a server-side option and Python's ``ssl`` has no verification depth, so neither
    changes the client's behaviour.
    """

    cacertfile: str | None = None
    certfile: str | None = None
    keyfile: str | None = None
    password: str | None = field(default=None, repr=False)
    verify: str = "verify_peer"
    fail_if_no_peer_cert: bool | None = None
    server_name_indication: str | None = None
    depth: int | None = None
    customize_hostname_check: str | None = None

    def ssl_context(self) -> ssl.SSLContext:
        """Build a client ``ssl.SSLContext``.

        Raises:
            ValueError: a certificate or key file cannot be loaded (the message names the key).
        """
        verify_peer = self.verify == "verify_peer"
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
        if not verify_peer:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        else:
            context.check_hostname = self.server_name_indication != "disable"
        try:
            if self.cacertfile:
                context.load_verify_locations(cafile=self.cacertfile)
        except (OSError, ssl.SSLError) as exc:
            raise ValueError(f"cannot load cacertfile {self.cacertfile!r}: {exc}") from exc
        if self.certfile:
            try:
                context.load_cert_chain(self.certfile, self.keyfile, self.password)
            except (OSError, ssl.SSLError) as exc:
                raise ValueError(
                    f"cannot load certfile {self.certfile!r} / keyfile {self.keyfile!r}: "
                    f"{type(exc).__name__}"
                ) from exc
        elif self.keyfile:
            raise ValueError("keyfile given without certfile")
        return context

    def server_hostname(self, host: str) -> str | None:
        """The name sent as SNI (and checked against the certificate), or None if disabled."""
        if self.server_name_indication == "disable":
            return None
        return self.server_name_indication or host


@dataclass(frozen=True)
class AmqpUri:
    """A parsed RabbitMQ URI. Build pika parameters with :meth:`connection_parameters`.

    ``connection_timeout`` is in seconds here (the URI gives milliseconds). ``None`` means the
    URI did not set the value and pika's default applies. ``host_given`` is False for URIs
    without a host (``amqp://``), which mean the local broker.
    """

    scheme: str
    host: str
    port: int
    username: str
    password: str = field(repr=False)
    vhost: str
    heartbeat: int | None = None
    frame_max: int | None = None
    channel_max: int | None = None
    connection_timeout: float | None = None
    auth_mechanisms: tuple[str, ...] = ("plain", "amqplain")
    tls: TlsOptions | None = None
    host_given: bool = True

    def connection_parameters(
        self, connection_name: str | None = None, **overrides: Any
    ) -> pika.ConnectionParameters:
        """Return ``pika.ConnectionParameters`` for this URI.

        Args:
            connection_name: shown by ``rabbitmqctl list_connections`` and the management UI
                (``client_properties.connection_name``); handy to find or close it later.
            **overrides: any other ``pika.ConnectionParameters`` keyword (e.g.
                ``blocked_connection_timeout``, ``connection_attempts``); wins over the URI.

        Raises:
            ValueError: a TLS file cannot be loaded.
        """
        if self.auth_mechanisms[0] == "external":
            credentials: Any = pika.credentials.ExternalCredentials()
        else:
            credentials = pika.PlainCredentials(self.username, self.password)
        kwargs: dict[str, Any] = {
            "host": self.host,
            "port": self.port,
            "virtual_host": self.vhost,
            "credentials": credentials,
        }
        if self.heartbeat is not None:
            kwargs["heartbeat"] = self.heartbeat
        if self.frame_max is not None:
            kwargs["frame_max"] = self.frame_max
        if self.channel_max is not None:
            kwargs["channel_max"] = self.channel_max
        if self.connection_timeout is not None:
            kwargs["socket_timeout"] = self.connection_timeout
            kwargs["stack_timeout"] = self.connection_timeout
        if self.tls is not None:
            kwargs["ssl_options"] = pika.SSLOptions(
                self.tls.ssl_context(), self.tls.server_hostname(self.host)
            )
        if connection_name is not None:
            kwargs["client_properties"] = {"connection_name": connection_name}
        kwargs.update(overrides)
        return pika.ConnectionParameters(**kwargs)

    def masked(self) -> str:
        """This URI as text without secrets (password and TLS key password)."""
        auth = quote(self.username, safe="") + f":{MASK}@"
        host = self.host if ":" not in self.host else f"[{self.host}]"
        vhost = quote(self.vhost, safe="")
        return f"{self.scheme}://{auth}{host}:{self.port}/{vhost}"


def parse_uri(uri: str, strict: bool = True) -> AmqpUri:
    """Parse a RabbitMQ URI.

    Args:
        uri: ``amqp://...`` or ``amqps://...``.
        strict: reject unknown or repeated query keys and TLS keys on ``amqp://`` (the Erlang
            client ignores them; ``strict=False`` does too, the first of repeated keys winning).

    Raises:
        ValueError: the URI is malformed; the message names the problem and shows the URI with
            its password masked.
        TypeError: ``uri`` is not a string.
    """
    if not isinstance(uri, str):
        raise TypeError(f"AMQP URI must be a string, not {type(uri).__name__}")

    def fail(problem: str) -> ValueError:
        return ValueError(f"invalid AMQP URI {mask_uri(uri)!r}: {problem}")

    if any(ch.isspace() or ord(ch) < 32 for ch in uri):
        raise fail("it contains whitespace or control characters (percent-encode them)")
    if "#" in uri:
        raise fail("it contains '#' (percent-encode it as %23)")
    match = _URI_RE.match(uri)
    if match is None:
        raise fail("expected amqp://[user[:password]@][host][:port][/vhost][?key=value&...]")
    scheme = match["scheme"].lower()
    if scheme not in DEFAULT_PORTS:
        raise fail(f"unsupported scheme {match['scheme']!r} (expected amqp or amqps)")

    username, password = "guest", "guest"
    authority = match["authority"]
    if "@" in authority:
        userinfo, _, hostport = authority.rpartition("@")
        user_raw, has_password, password_raw = userinfo.partition(":")
        username = _decode(user_raw, "user name", fail)
        if has_password:
            password = _decode(password_raw, "password", fail)
    else:
        hostport = authority
    host_raw, port_raw = _split_hostport(hostport, fail)
    host = _decode(host_raw, "host", fail) if host_raw else ""
    if port_raw is not None:
        if not port_raw.isdigit():
            raise fail("the port is not a number")
        port = int(port_raw)
        if not 0 < port <= 65535:
            raise fail(f"port {port} is out of range 1-65535")
        if not host:
            raise fail("a port needs a host (no host means the local broker on its default port)")
    else:
        port = DEFAULT_PORTS[scheme]

    path = match["path"]
    if path == "":
        vhost = "/"
    else:
        vhost_raw = path[1:]
        if "/" in vhost_raw:
            raise fail("the vhost contains '/' (percent-encode it as %2F)")
        if "@" in vhost_raw:  # amqp://fr/ed:secret@host: a '/' in the user info, unescaped
            raise fail("the vhost contains '@': percent-encode a '/' in the user name or "
                       "password as %2F (and an '@' in a vhost name as %40)")
        vhost = _decode(vhost_raw, "vhost", fail)

    query = _parse_query(match["query"], strict, fail)
    ints = {key: _int_param(query, key, fail) for key in _AMQP_INT_KEYS}
    heartbeat, frame_max = ints["heartbeat"], ints["frame_max"]
    channel_max, timeout_ms = ints["channel_max"], ints["connection_timeout"]
    if frame_max is not None:
        if frame_max == 0:  # AMQP: no limit; take the largest size pika accepts
            frame_max = _PIKA_FRAME_MAX
        elif not _PIKA_FRAME_MIN <= frame_max <= _PIKA_FRAME_MAX:
            raise fail(f"frame_max={frame_max} is outside {_PIKA_FRAME_MIN}-{_PIKA_FRAME_MAX}")
    if channel_max is not None:
        if channel_max == 0:  # AMQP: no limit
            channel_max = 65535
        elif channel_max > 65535:
            raise fail(f"channel_max={channel_max} is above 65535")
    if timeout_ms is not None and timeout_ms == 0:
        raise fail("connection_timeout must be a positive number of milliseconds")

    mechanisms = tuple(query.get("auth_mechanism", ())) or ("plain", "amqplain")
    for mechanism in mechanisms:
        if mechanism not in _AUTH_MECHANISMS:
            raise fail(f"unsupported auth_mechanism {mechanism!r} (plain, amqplain, external)")

    tls_given = [key for key in _TLS_KEYS if key in query]
    tls = None
    if scheme == "amqps":
        tls = _tls_options(query, fail)
    elif tls_given and strict:
        raise fail(f"TLS option {tls_given[0]!r} needs an amqps:// URI")

    return AmqpUri(
        scheme=scheme,
        host=host or LOCAL_HOST,
        port=port,
        username=username,
        password=password,
        vhost=vhost,
        heartbeat=heartbeat,
        frame_max=frame_max,
        channel_max=channel_max,
        connection_timeout=None if timeout_ms is None else timeout_ms / 1000.0,
        auth_mechanisms=mechanisms,
        tls=tls,
        host_given=bool(host),
    )


def connection_parameters(
    uri: str, connection_name: str | None = None, **overrides: Any
) -> pika.ConnectionParameters:
    """Shortcut for ``parse_uri(uri).connection_parameters(connection_name, **overrides)``.

    Raises:
        ValueError: the URI is malformed or a TLS file cannot be loaded.
    """
    return parse_uri(uri).connection_parameters(connection_name, **overrides)


def management_url(uri: str) -> str:
    """The management API base URL that goes with an AMQP URI.

    ``http://HOST:15672/`` for ``amqp``, ``https://HOST:15671/`` for ``amqps`` (the management
    plugin's usual ports); the credentials are not part of the result.

    Raises:
        ValueError: the URI is malformed.
    """
    parsed = parse_uri(uri, strict=False)
    host = parsed.host if ":" not in parsed.host else f"[{parsed.host}]"
    if parsed.scheme == "amqps":
        return f"https://{host}:15671/"
    return f"http://{host}:15672/"


# a scheme and "//", possibly mistyped ("amqp:://", " amqp://"), but never holding user info
_SCHEME_RE = re.compile(r"^\s*[A-Za-z][A-Za-z0-9+.-]*:*//")
_QUERY_SECRET_RE = re.compile(r"(?i)([?&](?:password|pass|passwd)=)[^&]*")


def mask_uri(uri: Any) -> str:
    """Return ``uri`` with its password replaced by ``***``, for logs, errors and status output.

    Works on URIs that do not parse too, and masks more rather than less when the user info is
    ambiguous. With an ``@`` after ``//``, the text between ``//`` and the *last* ``@`` is the
    user info: ``user:***@`` when it starts with a plain user name and a ``:``; a lone user
    name (no ``:``, no ``/`` or ``?``) is shown; anything else (``amqp://a/b:secret@host``) is
    masked whole. Without an ``@``, a non-numeric "port" (``amqp://user:secret``) is masked. A
    ``password=`` query value (a TLS key password) is masked too. Non-string input is shown as
    ``<TYPE>``.
    """
    if not isinstance(uri, str):
        return f"<{type(uri).__name__}>"
    scheme = _SCHEME_RE.match(uri)
    prefix = scheme.group(0) if scheme else ""
    rest = uri[len(prefix):]
    at = rest.rfind("@")
    if at >= 0:
        userinfo, tail = rest[:at], rest[at:]
        user, has_password, _secret = userinfo.partition(":")
        if has_password and not any(c in user for c in "/?"):
            rest = f"{user}:{MASK}{tail}"
        elif has_password or any(c in userinfo for c in "/?"):
            rest = MASK + tail
    else:
        authority_end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0),
                            default=len(rest))
        authority, after = rest[:authority_end], rest[authority_end:]
        host_end = authority.find("]") + 1 if authority.startswith("[") else 0
        host, has_port, port = authority[host_end:].partition(":")
        if has_port and not port.isdigit():
            rest = f"{authority[:host_end]}{host}:{MASK}{after}"
    return prefix + _QUERY_SECRET_RE.sub(lambda m: m.group(1) + MASK, rest)


def split_url(url: str) -> tuple[SplitResult, int | None]:
    """``urlsplit(url)`` and its port, with an error that never quotes the password.

    urllib's own ``ValueError`` text can hold it (``Port could not be cast to integer value as
    'secret'`` for ``amqp://user:secret/``), so it is never passed on.

    Raises:
        ValueError: ``not a valid URI: <the URI, masked>: the port is not a number`` and the like.
    """
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        text = str(exc)
        if "Port out of range" in text:
            problem = "the port is out of range 0-65535"
        elif "Port" in text:
            problem = "the port is not a number"
        elif "IPv6" in text or "IPv4" in text:
            problem = "the host in [...] is not a valid IPv6 address"
        else:
            problem = "it cannot be split into scheme, host and path"
        raise ValueError(f"not a valid URI: {mask_uri(url)}: {problem}") from None
    return parts, port


def _split_hostport(hostport: str, fail) -> tuple[str, str | None]:
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0:
            raise fail("unterminated IPv6 address (missing ']')")
        host, rest = hostport[1:end], hostport[end + 1:]
        if rest == "":
            return host, None
        if not rest.startswith(":"):
            raise fail("unexpected text after the IPv6 address")
        return host, rest[1:]
    if hostport.count(":") > 1:
        raise fail("more than one ':' in host:port (write IPv6 addresses as [addr])")
    host, has_port, port = hostport.partition(":")
    return host, port if has_port else None


def _decode(text: str, what: str, fail) -> str:
    if _BAD_ESCAPE_RE.search(text):
        raise fail(f"bad percent-escape in the {what} (use %XX with two hex digits)")
    try:
        return unquote(text, errors="strict")
    except UnicodeDecodeError:
        raise fail(f"the {what} is not valid UTF-8 after percent-decoding") from None


def _parse_query(query: str | None, strict: bool, fail) -> dict[str, Any]:
    """Query keys to values; ``auth_mechanism`` maps to a list (it may repeat)."""
    result: dict[str, Any] = {}
    if not query:
        return result
    known = set(_AMQP_INT_KEYS) | set(_TLS_KEYS) | {"auth_mechanism"}
    for item in query.split("&"):
        if item == "":
            continue
        key_raw, has_value, value_raw = item.partition("=")
        key = _decode(key_raw, "query key", fail)
        if not has_value:
            if strict:
                raise fail(f"query key {key!r} has no value (write {key}=VALUE)")
            continue
        value = _decode(value_raw, f"value of {key!r}", fail)
        if key == "auth_mechanism":
            result.setdefault(key, []).append(value)
            continue
        if key not in known:
            if strict:
                raise fail(f"unknown query key {key!r} (known: {', '.join(sorted(known))})")
            continue
        if key in result:
            if strict:
                raise fail(f"query key {key!r} is repeated")
            continue
        result[key] = value
    return result


def _int_param(query: dict[str, Any], key: str, fail) -> int | None:
    value = query.get(key)
    if value is None:
        return None
    if not value.isdigit():
        raise fail(f"{key} must be a non-negative integer, got {value!r}")
    return int(value)


def _tls_options(query: dict[str, Any], fail) -> TlsOptions:
    verify = query.get("verify", "verify_peer")
    if verify not in ("verify_peer", "verify_none"):
        raise fail(f"verify must be verify_peer or verify_none, got {verify!r}")
    fail_if_no_peer_cert = query.get("fail_if_no_peer_cert")
    if fail_if_no_peer_cert not in (None, "true", "false"):
        raise fail(f"fail_if_no_peer_cert must be true or false, got {fail_if_no_peer_cert!r}")
    depth = _int_param(query, "depth", fail)
    check = query.get("customize_hostname_check")
    if check not in (None, "https"):
        raise fail(f"customize_hostname_check supports only 'https', got {check!r}")
    sni = query.get("server_name_indication")
    if sni == "":
        raise fail("server_name_indication is empty (give a host name or 'disable')")
    for key in ("cacertfile", "certfile", "keyfile"):
        if query.get(key) == "":
            raise fail(f"{key} is empty")
    return TlsOptions(
        cacertfile=query.get("cacertfile"),
        certfile=query.get("certfile"),
        keyfile=query.get("keyfile"),
        password=query.get("password"),
        verify=verify,
        fail_if_no_peer_cert=None if fail_if_no_peer_cert is None else fail_if_no_peer_cert == "true",
        server_name_indication=sni,
        depth=depth,
        customize_hostname_check=check,
    )


