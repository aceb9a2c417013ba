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


_handed_out: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    """The kernel's range for the local ports of outgoing connections (Linux's default if
    it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now, for a child process's endpoint.

    It is picked below the kernel's ephemeral range (or above it when that leaves too few),
    never one this process handed out before: a port from inside the range can be given to
    any outgoing connection (a test's own broker client, say) between this pick and the
    child's ``bind``, which then fails with "address already in use".
    """
    import random
    import socket

    low, high = _ephemeral_range()
    candidates = range(20000, low) if low - 20000 >= 2000 else range(high + 1, 65536)
    for _ in range(200 if candidates else 0):
        port = random.choice(candidates)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    with socket.socket() as s:  # every pick was taken: the kernel's choice, as before
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def split_hostport(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port`` too).

    Raises:
        ValueError: no port or a bad one.
    """
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"listen address must be host:port, got {text!r}")
    return host.strip("[]") or "0.0.0.0", int(port)
