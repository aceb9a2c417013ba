"""RabbitMQ nodes of the tests' own (loopback only), from the host's RabbitMQ packages.

:class:`LocalNode` starts one node detached with its own data directory, ports, plugins and
config, as the current user with ``HOME`` (and so the Erlang cookie) in a temp directory, so that
``rabbitmqctl -n NODE`` reaches it and nothing else. :class:`LocalCluster` starts three of them
and joins them into one cluster (``rabbitmqctl join_cluster``).
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rtroute.amqp import ManagementClient
from rtroute.ops.netaddr import free_port

RABBIT_BIN = Path("/usr/lib/rabbitmq/bin")
COOKIE = "RTROUTETESTNODESCOOKIE"


def rabbitmq_installed() -> bool:
    return (RABBIT_BIN / "rabbitmq-server").exists()


class LocalNode:
    """One detached RabbitMQ node.

    Args:
        base: its directory (data, logs, config, HOME with the cookie).
        name: the Erlang node name (``NAME@localhost``).
        amqp_port, dist_port: its AMQP listener and Erlang distribution port.
        management_port: the management API's port (None: no management plugin).
        plugins: plugins to enable besides the management plugin.
        config: extra ``rabbitmq.conf`` lines.
    """

    def __init__(self, base: Path, name: str, amqp_port: int, dist_port: int,
                 management_port: int | None = None, plugins: tuple[str, ...] = (),
                 config: str = "") -> None:
        self.base = base
        self.name = name
        self.amqp_port = amqp_port
        self.management_port = management_port
        self.uri = f"amqp://guest:guest@127.0.0.1:{amqp_port}/%2F"
        self.management_uri = (None if management_port is None
                               else f"http://guest:guest@127.0.0.1:{management_port}/")
        home = base / "home"
        home.mkdir(parents=True, exist_ok=True)
        cookie = home / ".erlang.cookie"
        if not cookie.exists():
            cookie.write_text(COOKIE)
            cookie.chmod(0o400)
        enabled = list(plugins) + (["rabbitmq_management"] if management_port else [])
        (base / "enabled_plugins").write_text(f"[{','.join(enabled)}].\n")
        lines = [f"listeners.tcp.default = 127.0.0.1:{amqp_port}", "log.console = false",
                 "loopback_users = none"]
        if management_port is not None:
            lines += [f"management.tcp.port = {management_port}",
                      "management.tcp.ip = 127.0.0.1"]
        (base / "rabbitmq.conf").write_text("\n".join(lines) + "\n" + config)
        self.pid_file = base / "node.pid"
        self.env = dict(
            os.environ,
            HOME=str(home),
            RABBITMQ_NODENAME=name,
            RABBITMQ_NODE_PORT=str(amqp_port),
            RABBITMQ_DIST_PORT=str(dist_port),
            RABBITMQ_MNESIA_BASE=str(base / "mnesia"),
            RABBITMQ_LOG_BASE=str(base / "log"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(base / "enabled_plugins"),
            RABBITMQ_CONFIG_FILE=str(base / "rabbitmq.conf"),
            RABBITMQ_PID_FILE=str(self.pid_file),
        )

    def ctl(self, *args: str, check: bool = True, timeout: float = 60,
            tool: str = "rabbitmqctl") -> subprocess.CompletedProcess:
        return subprocess.run([str(RABBIT_BIN / tool), "-n", self.name, *args],
                              env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=check)

    def launch(self) -> None:
        """Starts the node without waiting for it (see :meth:`await_startup`)."""
        subprocess.run([str(RABBIT_BIN / "rabbitmq-server"), "-detached"], env=self.env,
                       check=True, capture_output=True, timeout=30)

    def await_startup(self, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while True:
            # await_startup fails at once while the node has not registered yet: retry it
            done = self.ctl("await_startup", "--timeout", "5", check=False, timeout=30)
            if done.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} did not start: {done.stderr[-2000:]}")
            time.sleep(0.3)

    def start(self) -> None:
        self.launch()
        self.await_startup()

    def stop(self) -> None:
        self.ctl("stop", check=False, timeout=60)

    def running(self) -> bool:
        return self.ctl("status", check=False, timeout=30).returncode == 0

    def os_pid(self) -> int:
        return int(self.pid_file.read_text().split()[0])

    def kill9(self) -> None:
        """``kill -9`` of the node's Erlang VM (no goodbye to its peers or clients)."""
        pid = self.os_pid()
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        raise RuntimeError(f"{self.name} (pid {pid}) did not die")

    def management(self, timeout: float = 5) -> ManagementClient:
        assert self.management_uri is not None
        return ManagementClient(self.management_uri, timeout=timeout)


class LocalCluster:
    """Three nodes on free loopback ports, joined into one cluster (management on each)."""

    def __init__(self, base: Path, size: int = 3, prefix: str = "rtroute-cluster",
                 plugins: tuple[str, ...] = (), first_dist_port: int = 25691) -> None:
        self.base = base
        self.nodes = [
            LocalNode(base / f"n{i + 1}", f"{prefix}-{i + 1}@localhost", free_port(),
                      first_dist_port + i, free_port(), plugins)
            for i in range(size)
        ]

    @property
    def uris(self) -> list[str]:
        return [node.uri for node in self.nodes]

    @property
    def management_uris(self) -> list[str]:
        return [node.management_uri for node in self.nodes if node.management_uri]

    def node_named(self, erlang_name: str) -> LocalNode:
        return next(node for node in self.nodes if node.name == erlang_name)

    def start(self) -> None:
        for node in self.nodes:
            node.stop()  # one left over by an interrupted run
        for node in self.nodes:
            node.launch()
        for node in self.nodes:
            node.await_startup()
        first = self.nodes[0]
        for node in self.nodes[1:]:
            node.ctl("stop_app")
            node.ctl("reset")
            node.ctl("join_cluster", first.name)
            node.ctl("start_app")
        for node in self.nodes:
            node.await_startup()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()
        shutil.rmtree(self.base, ignore_errors=True)


@contextmanager
def node_in_tempdir(make: Callable[[Path], LocalNode], prefix: str) -> Iterator[LocalNode]:
    """``make(base)``'s node, started in a new temporary directory ``base``; stopped and its
    directory removed at the end."""
    base = Path(tempfile.mkdtemp(prefix=prefix))
    node = make(base)
    node.start()
    try:
        yield node
    finally:
        node.stop()
        shutil.rmtree(base, ignore_errors=True)
