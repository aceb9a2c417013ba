"""What `rtroute proxy --archive-stream` costs a publisher: two proxies of one broker, one with
the option (its exchange's stream bound as the proxy binds it) and one without, each in front of
an x-rtopic exchange with one queue bound; a literal key, 100-byte bodies, a confirm window of
1,000; the two alternate, RUNS times each, in the same run (the ratio is what to read: the
machine's load moves both).

Run: python benchmarks/proxy_archive.py amqp://guest:guest@127.0.0.1:5674/%2F \
    http://127.0.0.1:15674/ --messages 50000
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pika

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from rtroute.bench.proxy import proxy_uri
from rtroute.bench.spark_stream import publish_messages
from rtroute.ops.netaddr import free_port


def start_proxy(uri: str, management_uri: str, *args: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = dict(os.environ, RTROUTE_URI=uri, RTROUTE_MANAGEMENT_URI=management_uri)
    proc = subprocess.Popen([sys.executable, "-m", "rtroute.cli", "proxy", "--listen",
                             f"127.0.0.1:{port}", "--log-level", "ERROR", *args], env=env,
                            cwd=ROOT)
    through = proxy_uri(uri, port)
    deadline = time.monotonic() + 60
    while True:
        try:
            pika.BlockingConnection(pika.URLParameters(through)).close()
            return proc, through
        except pika.exceptions.AMQPError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit("rtroute proxy did not come up") from None
            time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("uri")
    parser.add_argument("management_uri")
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    tag = uuid.uuid4().hex[:6]
    names = {"without": f"bench-plain-{tag}", "with archive": f"bench-archive-{tag}"}
    stream = f"{names['with archive']}.archive"
    admin = pika.BlockingConnection(pika.URLParameters(args.uri))
    channel = admin.channel()
    channel.queue_declare(stream, durable=True, arguments={"x-queue-type": "stream"})
    proxies = {"without": start_proxy(args.uri, args.management_uri),
               "with archive": start_proxy(args.uri, args.management_uri, "--archive-stream",
                                           "{exchange}.archive")}
    rates: dict[str, list[float]] = {path: [] for path in proxies}
    messages = [("k.a", None, b"x" * 100)] * args.messages
    try:
        for path, (_proc, through) in proxies.items():
            client = pika.BlockingConnection(pika.URLParameters(through))
            ch = client.channel()
            ch.exchange_declare(names[path], "x-rtopic")
            ch.queue_declare(f"{names[path]}.q", durable=True)
            ch.queue_bind(f"{names[path]}.q", names[path], "k.a")
            client.close()
            publish_messages(through, names[path], messages[:1000])  # bindings listed
        for run in range(1, args.runs + 1):
            for path, (_proc, through) in proxies.items():
                channel.queue_purge(f"{names[path]}.q")
                rates[path].append(args.messages / publish_messages(through, names[path],
                                                                    messages))
            print(f"run {run}: " + ", ".join(f"{p} {r[-1]:,.0f}" for p, r in rates.items()) +
                  " msg/s", flush=True)
    finally:
        for proc, _through in proxies.values():
            proc.terminate()
            proc.wait(30)
        for name in names.values():
            channel.queue_delete(f"{name}.q")
            channel.exchange_delete(name)
            channel.exchange_delete(f"{name}.bindings")
        channel.queue_delete(stream)
        admin.close()
    medians = {p: sorted(r)[len(r) // 2] for p, r in rates.items()}
    print("median: " + ", ".join(f"{p} {v:,.0f} msg/s" for p, v in medians.items()) +
          f"; with archive / without: {medians['with archive'] / medians['without']:.2f}")


if __name__ == "__main__":
    main()
