"""The sidecar process's own CPU per message on one varied shape of `rtroute bench publish`,
for one or more source trees in turn (old and new code alternating), on a real broker.

For each run and each tree: the shape's queues and 10,000 bindings are made once; an
``rtroute run --rtopic NAME --prefetch 5000`` process is started with ``PYTHONPATH`` the tree,
waited for until it knows every binding, then messages are published to ``NAME`` (window 2000,
confirms) and the queues waited for until they hold every copy; the sidecar's user and system
CPU (``/proc``) over that span, per message, is printed as a JSON line with the rate, the load
average and, with ``--broker-pid``, the broker's CPU per message. A tree needs its native core
built in place (copy a work tree's ``rtroute`` package elsewhere before rebuilding it, so a
running sidecar never sees its extension replaced).

Run: python benchmarks/sidecar_cpu.py URI MANAGEMENT_URI MESSAGES RUNS TREE [TREE ...]
     [--scenario varied-literal] [--broker-pid PID] [--pyspy PREFIX]
e.g. python benchmarks/sidecar_cpu.py amqp://guest:guest@127.0.0.1:5673/%2F \\
     http://127.0.0.1:15673/ 20000 4 /work/main /tmp/new   (new: a copy of the tree to test)
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from rtroute.amqp import publish
from rtroute.bench import publish as bench
from rtroute.bench.measure import process_cpu_seconds, wait_for_depth
from rtroute.ops.netaddr import free_port


def _times(pid: int) -> tuple[float, float]:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("uri")
    parser.add_argument("management_uri")
    parser.add_argument("messages", type=int)
    parser.add_argument("runs", type=int)
    parser.add_argument("trees", nargs="+")
    parser.add_argument("--scenario", default="varied-literal",
                        choices=[s.name for s in bench.VARIED_SHAPES])
    parser.add_argument("--broker-pid", type=int)
    parser.add_argument("--pyspy", help="py-spy record (raw) into PREFIX-TREE-RUN.txt")
    args = parser.parse_args()
    shape = next(s for s in bench.VARIED_SHAPES if s.name == args.scenario)
    shape = dataclasses.replace(shape, messages=args.messages)
    kind = bench.resolve_bindings_type(args.uri, "auto")
    conn, channel, _, _ = bench._open(args.uri, None, "rtroute sidecar cpu")
    setup = bench._Setup(channel, shape, uuid.uuid4().hex[:6], None, bench.BINDINGS, kind)
    try:
        for run in range(args.runs):
            for tree in args.trees:
                setup.purge(channel)
                port = free_port()
                env = dict(os.environ, RTROUTE_URI=args.uri, PYTHONPATH=tree,
                           RTROUTE_MANAGEMENT_URI=args.management_uri)
                proc = subprocess.Popen(
                    [sys.executable, "-m", "rtroute.cli", "run", "--rtopic", setup.name,
                     "--http", f"127.0.0.1:{port}", "--log-level", "WARNING", "--prefetch",
                     "5000"], env=env, cwd="/")
                spy = None
                try:
                    bench._wait_sidecar(proc, port, setup.total)
                    if args.pyspy:
                        spy = subprocess.Popen(
                            ["py-spy", "record", "-p", str(proc.pid), "-f", "raw", "-r", "200",
                             "--nonblocking", "-o",
                             f"{args.pyspy}-{Path(tree).name}-{run}.txt"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                        time.sleep(1)
                    user, system = _times(proc.pid)
                    broker = process_cpu_seconds(args.broker_pid)
                    start = time.monotonic()
                    result = publish(args.uri, setup.name, shape.rtopic_keys, shape.messages,
                                     bench.BODY, window=2000, echo=lambda *_: None)
                    if result.get("acked") != shape.messages:
                        raise RuntimeError(f"publish failed: {result}")
                    end = wait_for_depth(channel, setup.queues, shape.copies(), 600)
                    user2, system2 = _times(proc.pid)
                    broker2 = process_cpu_seconds(args.broker_pid)
                finally:
                    if spy is not None:
                        spy.send_signal(2)
                        spy.wait(30)
                    proc.terminate()
                    proc.wait(30)
                n = shape.messages
                line = {"tree": tree, "run": run, "messages": n,
                        "msgs_per_s": round(n / (end - start)),
                        "cpu_us_per_msg": round((user2 + system2 - user - system) / n * 1e6, 1),
                        "user_us": round((user2 - user) / n * 1e6, 1),
                        "system_us": round((system2 - system) / n * 1e6, 1),
                        "load": round(os.getloadavg()[0], 2)}
                if broker is not None and broker2 is not None:
                    line["broker_us_per_msg"] = round((broker2 - broker) / n * 1e6, 1)
                print(json.dumps(line), flush=True)
    finally:
        bench._close(conn, channel, None, None, setup)


if __name__ == "__main__":
    main()
