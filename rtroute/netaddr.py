"""Listen addresses (``host:port``) shared by the config checker and the HTTP endpoint."""
from __future__ import annotations

import ipaddress
import re


def split_listen(listen: str) -> tuple[str, int]:
    """Splits ``HOST:PORT`` (``[IPv6]:PORT``).

    Raises:
        ValueError: another shape, or a port above 65535 (the message completes "listen ...").
    """
    m = re.fullmatch(r"\[([^\]]+)\]:(\d+)|([^:\[\]]+):(\d+)", listen)
    if not m:
        raise ValueError("must be HOST:PORT (or [IPv6]:PORT)")
    host = m.group(1) or m.group(3)
    port = int(m.group(2) or m.group(4))
    if port > 65535:
        raise ValueError(f"has port {port}; ports go up to 65535")
    return host, port


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for child processes' endpoints)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
