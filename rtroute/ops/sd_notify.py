"""systemd's readiness protocol (``sd_notify``), without libsystemd: a datagram to the socket
that ``$NOTIFY_SOCKET`` names, if the service manager set one (``Type=notify``). Elsewhere
(no variable) every call does nothing."""
from __future__ import annotations

import logging
import os
import socket

LOG = logging.getLogger(__name__)


def notify(state: str) -> bool:
    """Sends ``state`` (e.g. ``"READY=1"``, ``"STOPPING=1"``, ``"STATUS=..."``); returns
    whether it was sent. Never raises: readiness reporting must not stop the service."""
    address = os.environ.get("NOTIFY_SOCKET")
    if not address:
        return False
    if address.startswith("@"):  # abstract namespace
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode("utf-8"))
    except OSError as exc:
        LOG.warning("could not notify the service manager (%s): %s", state, exc)
        return False
    return True
