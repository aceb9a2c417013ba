"""The ``rtroute proxy`` process: its :class:`~rtroute.proxy.server.ProxyServer` and its ops
endpoint (:mod:`rtroute.proxy.ops`) on one event loop, stopped by SIGTERM/SIGINT, with systemd's
readiness protocol (``READY=1`` once the AMQP listeners are open)."""
from __future__ import annotations

import asyncio
import logging
import signal

from rtroute.ops import sd_notify
from rtroute.proxy.ops import ProxyOps, check_listen, listen_error
from rtroute.proxy.server import ProxyFatal, ProxyServer, ProxySettings

__all__ = ["run"]

LOG = logging.getLogger("rtroute.proxy.server")  # the logger these lines always had


def run(settings: ProxySettings, on_listening=None) -> None:
    """Runs a proxy until SIGTERM/SIGINT; ``on_listening(addresses)`` once it listens.

    With ``settings.http``, the ops endpoint listens first (see :mod:`rtroute.proxy.ops`).
    Under systemd (``Type=notify``) it reports ``READY=1`` once the AMQP listeners are open.

    Raises:
        ProxyFatal: it stopped by itself because it cannot serve truthfully (the management
            API belongs to another broker than ``--uri``).
        rtroute.ops.http.ListenError: a listener (AMQP or HTTP) cannot listen; the message is
            one line (``listen 127.0.0.1:5680: address already in use``).
        ValueError: a listen address that is not ``host:port``; an HTTP endpoint beyond
            loopback without a token.
    """
    check_listen([*settings.listen, *settings.listen_tls], settings.reuse_port)
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    server = ProxyServer(settings, loop)
    try:
        ops = ProxyOps(settings.http, server, settings.http_token) if settings.http else None
    except BaseException:
        loop.close()
        raise
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        LOG.info("signal %d: stopping (closing %d client connections)", signum,
                 len(server.sessions))
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal, signum)
    server.on_fatal = lambda _reason: stop.set()

    async def main() -> None:
        if ops is not None:
            ops.start()
            LOG.info("http endpoint on %s (/livez /readyz /status /metrics)", ops.listen)
        try:
            addresses = await server.start()
        except OSError as exc:
            raise listen_error(exc, [*settings.listen, *settings.listen_tls]) from None
        if ops is not None:
            ops.listening = True
        if on_listening is not None:
            on_listening(addresses)
        sd_notify.notify("READY=1\nSTATUS=listening on "
                         + ", ".join(f"{h}:{p}" for h, p in addresses))
        await stop.wait()
        if ops is not None:
            ops.listening = False
        sd_notify.notify("STOPPING=1")

    try:
        loop.run_until_complete(main())
    finally:
        if ops is not None:
            ops.stop()
        open_sessions = len(server.sessions)
        server.close()
        _finish_tasks(loop)
        loop.close()
    LOG.info("proxy stopped: %d client connections served, %d closed at the stop",
             server.stats.connections, open_sessions)
    if server.fatal_error is not None:
        raise ProxyFatal(server.fatal_error)


def _finish_tasks(loop: asyncio.AbstractEventLoop) -> None:
    """Cancels what is still pending on ``loop`` (a held client's wait, say) and lets each task
    end, as ``asyncio.run`` does at its end: a task dropped pending is logged by asyncio as an
    error at every stop."""
    pending = [task for task in asyncio.all_tasks(loop) if not task.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
