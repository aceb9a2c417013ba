"""A fork server for the Python processes Spark starts on the driver of a local master, one
per query: started with the session, it imports what those processes import once, and each of
them is then a fork of it instead of a new interpreter.

Spark runs a Python data source's driver-side code in processes of their own, started anew for
each query (``python -m pyspark.sql.streaming.python_streaming_source_runner`` for a streaming
source's offsets; ``pyspark.sql.worker.*`` planners where Spark does not take them from its
worker daemon), not forked from the daemon. Each new interpreter imports pyspark and pyarrow
before it can answer, in the critical path of every ``rtroute spark stream`` query: measured
here (load average 6.5), the source runner took 0.38-0.54 s (medians) to get that far, a fork
0.06 s (docs/spark.md, "Third pass").

:func:`rtroute.spark.commands.session.local_python`'s launcher sends those module runs
(:data:`MODULES`) here: a small client
(:data:`CLIENT`, a Python without ``site``) passes the server its standard streams (as file
descriptors), environment, working directory and arguments over a Unix socket; the server
forks, and the child takes them over and runs the module as ``python -m`` would. The client
stays what Spark started: it forwards SIGTERM, SIGINT and SIGHUP to the child and exits with
the child's status, so Spark sees one process that behaves as the interpreter it asked for
(the module itself tells Spark the child's pid). Where the server does not answer (not yet
ready, gone) the client becomes that interpreter (``exec``): the same run, without the saving.

The server is a child of the session's process, reads nothing but its Unix socket (in the
launcher's private directory, mode 0700) and ends when its parent's end of a pipe closes.
"""
from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import select
import signal
import socket
import struct
import subprocess
import sys
import traceback
from typing import Any

__all__ = ["CLIENT", "MODULES", "serve", "start"]

MODULES = ("pyspark.sql.streaming.python_streaming_source_runner",
           "pyspark.sql.worker.create_data_source",
           "pyspark.sql.worker.plan_data_source_read",
           "pyspark.sql.worker.lookup_data_sources")
"""The modules run by a fork (``python -m MODULE``, nothing else on the command line)."""

# imported by the server before it answers: what the modules above and the rtroute stream
# source (unpickled by the runner) import
_WARM = MODULES + ("pyarrow", "rtroute.spark.stream_source", "rtroute.spark.batches")

_HEADER = struct.Struct(">I")
_STATUS = struct.Struct(">i")

CLIENT = r"""
import os, signal, socket, struct, sys
path, python, args = sys.argv[1], sys.argv[2], sys.argv[3:]
def become_python():
    os.execv(python, [python] + args)
try:
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.connect(path)
except OSError:
    become_python()
import json
payload = json.dumps({"args": args, "env": dict(os.environ), "cwd": os.getcwd()}).encode()
def take(size):
    data = b""
    while len(data) < size:
        more = server.recv(size - len(data))
        if not more:
            return None
        data += more
    return data
try:
    socket.send_fds(server, [struct.pack(">I", len(payload))], [0, 1, 2])
    server.sendall(payload)
    raw = take(4)
except OSError:
    raw = None
if raw is None:  # nothing ran: run it here
    become_python()
child = struct.unpack(">i", raw)[0]
def forward(signum, _frame):
    try:
        os.kill(child, signum)
    except OSError:
        pass
for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(signum, forward)
raw = take(4)
os._exit(struct.unpack(">i", raw)[0] & 0xFF if raw else 1)
"""
"""The launcher's client: ``python -I -S -c CLIENT SOCKET PYTHON ARG...``."""


def start(path: str, modules: tuple[str, ...] = MODULES) -> subprocess.Popen[bytes]:
    """Starts a server listening at ``path`` that runs ``modules`` (it answers once its
    imports are done; until then the launcher runs new interpreters). It ends when the
    returned process's stdin is closed, as when this process ends."""
    return subprocess.Popen([sys.executable, "-m", __name__, path, *modules],
                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, close_fds=True)


def serve(path: str, modules: tuple[str, ...] = MODULES) -> None:
    """Imports :data:`_WARM`, then forks a child for each client at ``path`` that asks to run
    one of ``modules``, until stdin closes (a client asking for anything else is refused: it
    runs a new interpreter)."""
    for name in _WARM:
        with contextlib.suppress(Exception):  # one this pyspark lacks: its runs say so
            importlib.import_module(name)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # children are reaped by the kernel
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    listener.bind(path)
    listener.listen(16)
    try:
        while True:
            ready, _, _ = select.select([listener, sys.stdin], [], [])
            if sys.stdin in ready and not os.read(sys.stdin.fileno(), 1024):
                return
            if listener in ready:
                connection, _ = listener.accept()
                try:
                    _fork(listener, connection, modules)
                finally:
                    connection.close()
    finally:
        listener.close()
        try:
            os.unlink(path)
        except OSError:
            pass


def _fork(listener: socket.socket, connection: socket.socket, modules: tuple[str, ...]
          ) -> None:
    connection.settimeout(10)
    fds: list[int] = []
    try:
        raw, fds, _, _ = socket.recv_fds(connection, _HEADER.size, 3)
        if len(raw) != _HEADER.size or len(fds) != 3:
            raise ValueError("not a client")
        (size,) = _HEADER.unpack(raw)
        payload = b""
        while len(payload) < size:
            more = connection.recv(size - len(payload))
            if not more:
                raise OSError("client gone")
            payload += more
        request = json.loads(payload)
    except (OSError, ValueError):
        for fd in fds:
            os.close(fd)
        return
    args = request["args"]
    if len(args) != 2 or args[0] != "-m" or args[1] not in modules:
        for fd in fds:
            os.close(fd)
        return  # the client runs it itself
    sys.stdout.flush()
    sys.stderr.flush()
    if os.fork():
        for fd in fds:
            os.close(fd)
        return
    # the child: never returns
    code = 1
    try:
        connection.settimeout(None)
        connection.sendall(_STATUS.pack(os.getpid()))  # the client forwards signals to it
        listener.close()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        _become(request)
        code = _run(args[1])
    finally:
        with contextlib.suppress(BaseException):
            sys.stdout.flush()
            sys.stderr.flush()
        with contextlib.suppress(BaseException):  # the client is gone: exit all the same
            connection.sendall(_STATUS.pack(code))
        os._exit(code & 0xFF)


def _become(request: dict[str, Any]) -> None:
    """The process state ``python -m`` would have started with: environment, working
    directory, the entries of ``PYTHONPATH`` and the working directory first on the path."""
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    extra = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    sys.path[:0] = [os.getcwd()] + [entry for entry in extra if entry not in sys.path]


def _run(module: str) -> int:
    sys.argv = [module]
    sys.modules.pop(module, None)  # imported by the server: run it anew as __main__, quietly
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001 - as the interpreter would: print it, exit 1
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    serve(sys.argv[1], tuple(sys.argv[2:]))
