"""`rtroute bench ...`: the benchmark commands (registered by ``rtroute.cli``).

Every command prints its progress and tables; ``--json FILE`` also writes the run's figures
(:mod:`rtroute.bench.report`), which ``rtroute bench chart`` draws.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from rtroute.bench.load import load_options, routing_options, run_load
from rtroute.config.constants import DEFAULT_URI

json_option = click.option(
    "--json", "json_path", default=None, metavar="FILE", type=click.Path(dir_okay=False),
    help="Also write the run's figures (machine, parameters, every row and its ratio) as JSON.")
management_option = click.option(
    "--management-uri", default=None, envvar="RTROUTE_MANAGEMENT_URI", show_envvar=True,
    help="The broker's management API [default: derived from --uri].")
plugin_option = click.option(
    "--plugin-uri", default=None, envvar="RTROUTE_PLUGIN_URI", show_envvar=True,
    help="A broker with the x-rtopic plugin: adds its column (same shapes).")
uri_option = click.option("--uri", default=DEFAULT_URI, show_default=True, envvar="RTROUTE_URI",
                          show_envvar=True)
# the options of the shape benchmarks (publish, proxy)
shape_repeat_option = click.option(
    "--repeat", default=3, show_default=True, type=click.IntRange(1, 50),
    help="Runs per shape (the paths alternate); the table shows medians.")
scale_option = click.option(
    "--scale", default=1.0, show_default=True, type=click.FloatRange(0.001, 100),
    help="Multiply the message counts (0.1 for a quick look).")
shape_bindings_option = click.option(
    "--bindings", default=10_000, show_default=True, type=click.IntRange(100),
    help="Bindings per shape (the matched ones included).")


def _save(json_path: str | None, benchmark: str, parameters: dict[str, Any], rows: list[dict],
          uri: str | None = None, extra: dict[str, Any] | None = None) -> None:
    """Writes the report of a run when ``--json`` was given."""
    if json_path is None:
        return
    from rtroute.bench.report import broker_version, build_report, write_report

    report = build_report(benchmark, parameters, rows,
                          broker=broker_version(uri) if uri else None, extra=extra)
    click.echo(f"wrote {write_report(json_path, report)}")


@click.group()
def bench() -> None:
    """Benchmarks: each measures rtroute against a baseline in the same run."""


@bench.command("match")
@click.option("--bindings", "sizes", multiple=True, type=click.IntRange(1),
              help="Binding-set size (repeatable). [default: 1000, 100000, 1000000]")
@click.option("--queries", default=20, show_default=True, type=click.IntRange(1),
              help="Queries per shape and implementation.")
@click.option("--scan-limit", default=100_000, show_default=True,
              help="Run reference.py (a full scan) only up to this many bindings.")
@json_option
def bench_match(sizes: tuple, queries: int, scan_limit: int, json_path: str | None) -> None:
    """Native core vs reference.py, a Python dict trie, marisa-trie and a naive regex scan."""
    from rtroute.bench.match import json_rows, run

    sizes = sizes or (1_000, 100_000, 1_000_000)
    result = run(sizes=sizes, scan_limit=scan_limit, queries=queries, echo=click.echo)
    _save(json_path, "match", {"bindings": list(sizes), "queries": queries,
                               "scan_limit": scan_limit}, json_rows(result))


@bench.command("selector")
@click.option("--evaluations", default=200_000, show_default=True, type=click.IntRange(1))
@json_option
def bench_selector(evaluations: int, json_path: str | None) -> None:
    """Compiled selectors vs a straightforward AST interpreter (evaluations/s)."""
    from rtroute.bench.selector import json_rows, run

    rows = run(evaluations=evaluations, echo=click.echo)
    _save(json_path, "selector", {"evaluations": evaluations}, json_rows(rows))


@bench.command("shovel")
@click.option("-n", "--count", default=100_000, show_default=True, type=click.IntRange(1))
@uri_option
@json_option
def bench_shovel(count: int, uri: str, json_path: str | None) -> None:
    """rtroute's shovel vs RabbitMQ's shovel plugin, each ack mode, same queues, one run."""
    from rtroute.bench.shovel import json_rows, run

    result = run(count, echo=click.echo, uri=uri)
    _save(json_path, "shovel", {"count": count, "repeat": result["repeat"]}, json_rows(result),
          uri=uri)


@bench.command("spark")
@click.option("--messages", default=2_000_000, show_default=True, type=click.IntRange(1))
@click.option("--bindings", default=10_000, show_default=True, type=click.IntRange(1))
@click.option("--master", default="local[2]", show_default=True)
@click.option("--repeats", default=3, show_default=True, type=click.IntRange(1),
              help="Runs of each full-archive pipeline (and stream reader); the best counts.")
@click.option("--reference-sample", default=2_000, show_default=True, type=click.IntRange(0),
              help="Rows for the footnote row UDF over reference.py (0 to skip).")
@click.option("--native-row-sample", default=200_000, show_default=True,
              type=click.IntRange(0), help="Rows for the row UDF over the native core (0 to skip).")
@click.option("--stream-uri", default=None, metavar="URI",
              help="Also fill a RabbitMQ stream on this broker and measure the streaming route "
                   "beside the batch route and a plain stream consumer (RTROUTE_URI is not "
                   "read for it).  [default: no stream rows]")
@click.option("--stream-messages", default=100_000, show_default=True, type=click.IntRange(1),
              help="Messages in the stream (with --stream-uri).")
@click.option("--stream-protocol-uri", default="auto", show_default=True,
              metavar="URI|auto|off",
              help="With --stream-uri: the broker's stream protocol (rabbitmq-stream://...) for "
                   "the stream-protocol reader row and the streaming route; auto: port 5552 of "
                   "the --stream-uri host if it is the same broker; off: AMQP 0-9-1 only.")
@click.option("--stream-only", is_flag=True,
              help="With --stream-uri: skip the batch pipelines, measure only the stream rows.")
@json_option
def bench_spark(messages: int, bindings: int, master: str, repeats: int, reference_sample: int,
                native_row_sample: int, stream_uri: str | None, stream_messages: int,
                stream_protocol_uri: str, stream_only: bool, json_path: str | None) -> None:
    """Arrow batches + native core vs a Python dict trie as a row UDF, a pandas UDF and in
    mapInArrow, and a no-op matcher, on Spark; every baseline's output is checked.

    \b
    With --stream-uri, also the streaming route (`spark stream --available-now`) beside the
    batch `spark route`, a plain pika stream consumer and rtroute's stream reader, on the
    same messages in a fresh stream (deleted after):
      rtroute bench spark --stream-only --stream-uri amqp://guest:guest@127.0.0.1:5672/%2F \\
        --stream-messages 50000
    """
    from rtroute.bench.spark import ResultMismatch, json_rows, run
    from rtroute.bench.spark_stream import StreamBenchError

    if stream_only and stream_uri is None:
        raise click.UsageError("--stream-only needs --stream-uri")
    parameters: dict[str, Any] = {"bindings": bindings, "master": master, "repeats": repeats}
    rows: list[dict] = []
    try:
        if not stream_only:
            result = run(messages=messages, bindings=bindings, master=master, echo=click.echo,
                         repeats=repeats, reference_sample=reference_sample,
                         native_row_sample=native_row_sample)
            parameters.update({
                "messages": messages, "bindings": result["bindings"],
                "reference_sample": reference_sample, "native_row_sample": native_row_sample,
                "spark": result["spark_version"], "mix": result["mix"]})
            rows += json_rows(result)
        if stream_uri is not None:
            from rtroute.bench import spark_stream
            from rtroute.spark.stream_consumer import StreamReadError

            click.echo("")
            try:
                streamed = spark_stream.run(stream_uri, messages=stream_messages,
                                            bindings=bindings, master=master, repeats=repeats,
                                            echo=click.echo,
                                            stream_protocol_uri=stream_protocol_uri)
            except StreamReadError as exc:
                raise StreamBenchError(str(exc)) from None
            parameters.update({"stream_messages": stream_messages,
                               "stream_protocol": streamed["stream_protocol_uri"] is not None,
                               "stream_chunks": streamed.get("chunks"),
                               "bindings": streamed["bindings"],
                               "spark": streamed["spark_version"], "mix": streamed["mix"]})
            rows += spark_stream.json_rows(streamed)
    except (ResultMismatch, StreamBenchError) as exc:
        raise click.ClickException(str(exc)) from None
    _save(json_path, "spark", parameters, rows, uri=stream_uri)


@bench.command("divert")
@uri_option
@management_option
@json_option
def bench_divert(uri: str, management_uri: str | None, json_path: str | None) -> None:
    """A managed exchange with 0, 1 and 10 filtered diverts vs a native topic exchange."""
    from rtroute.bench.divert import json_rows, run

    rows = run(echo=click.echo, uri=uri, management_uri=management_uri)
    _save(json_path, "divert", {}, json_rows(rows), uri=uri)


@bench.command("sidecar")
@uri_option
@management_option
@click.option("--prefetch", default=1000, show_default=True, type=click.IntRange(1, 65535),
              help="The sidecar's ingress prefetch window.")
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(1, 50),
              help="Runs per scenario (the two paths alternate); the table shows medians.")
@click.option("--scenario", "scenario_names", multiple=True,
              type=click.Choice(["1-queue", "10-queues", "100-queues", "10k-bindings",
                                 "exact-key"]),
              help="Run only these scenarios (repeatable) [default: all five].")
@click.option("-n", "--messages", type=click.IntRange(100), default=None,
              help="Messages per run of every scenario [default: each scenario's own, "
                   "3,000-50,000].")
@json_option
def bench_sidecar(uri: str, management_uri: str | None, prefetch: int, repeat: int,
                  scenario_names: tuple[str, ...], messages: int | None,
                  json_path: str | None) -> None:
    """Sidecar vs a native topic exchange: 1, 10, 100 queues/msg, 10k bindings, exact key.

    \b
    The shortest useful run (about 15 s):
      rtroute bench sidecar --scenario 1-queue -n 5000 --repeat 1
    """
    import dataclasses

    from rtroute.bench.sidecar import SCENARIOS_BY_NAME, json_rows, run

    scenarios = [SCENARIOS_BY_NAME[name] for name in scenario_names or SCENARIOS_BY_NAME]
    if messages is not None:
        scenarios = [dataclasses.replace(s, messages=messages) for s in scenarios]
    rows = run(uri, scenarios=scenarios, echo=click.echo, prefetch=prefetch, repeat=repeat,
               management_uri=management_uri)
    _save(json_path, "sidecar", {"prefetch": prefetch, "repeat": repeat,
                                 "scenarios": [s.label for s in scenarios]},
          json_rows(rows), uri=uri)


@bench.command("shards")
@uri_option
@management_option
@click.option("--replicas", "replica_counts", multiple=True, type=click.IntRange(1, 16),
              help="Replica counts to measure (repeatable).  [default: 1, 2, 3]")
@click.option("--shards", default=4, show_default=True, type=click.IntRange(1, 64),
              help="Ingress shards of the exchange.")
@click.option("-n", "--messages", default=60_000, show_default=True, type=click.IntRange(1))
@click.option("--prefetch", default=1000, show_default=True, type=click.IntRange(1, 65535),
              help="Each shard's prefetch window.")
@click.option("--repeat", default=3, show_default=True, type=click.IntRange(1, 50),
              help="Runs per replica count; the table shows the median run.")
@json_option
def bench_shards(uri: str, management_uri: str | None, replica_counts: tuple[int, ...],
                 shards: int, messages: int, prefetch: int, repeat: int,
                 json_path: str | None) -> None:
    """Sharded ingress: 1, 2, 3 sidecar replicas on one exchange (needs the broker's
    rabbitmq_consistent_hash_exchange plugin): rate, messages and CPU per replica."""
    from rtroute.bench.shards import json_rows, run

    counts = replica_counts or (1, 2, 3)
    rows = run(uri, management_uri, counts, shards, messages, prefetch, repeat, click.echo)
    _save(json_path, "shards", {"replicas": list(counts), "shards": shards,
                                "messages": messages, "prefetch": prefetch, "repeat": repeat},
          json_rows(rows), uri=uri)


@bench.command("confirms")
@uri_option
@click.option("--persistent", is_flag=True, help="delivery_mode 2 (the broker fsyncs).")
@json_option
def bench_confirms(uri: str, persistent: bool, json_path: str | None) -> None:
    """Transactions vs synchronous confirms vs windowed confirms, in one run."""
    from rtroute.bench.confirms import json_rows, run

    rows = run(uri, persistent=persistent, echo=click.echo)
    _save(json_path, "confirms", {"persistent": persistent}, json_rows(rows), uri=uri)


@bench.command("publish")
@uri_option
@management_option
@plugin_option
@shape_repeat_option
@click.option("--no-sidecar", is_flag=True, help="Leave the sidecar column out.")
@scale_option
@shape_bindings_option
@click.option("--bindings-type", default="auto", show_default=True,
              type=click.Choice(["auto", "topic", "direct"]),
              help="Type of NAME.bindings (auto: what rtroute declares on this broker, "
                   "direct from RabbitMQ 4, which indexes direct routing; topic before).")
@click.option("--visibility", is_flag=True,
              help="Also measure bind/unbind -> seen by a running publisher (20 trials).")
@click.option("--scenario", "scenarios", multiple=True,
              type=click.Choice(["literal", "star", "trailing-hash", "leading-hash",
                                 "fanout-10", "fanout-100", "varied-literal", "varied-star",
                                 "varied-fanout-10", "header-per-message", "mixed", "one-key",
                                 "varied"]),
              help="Only this scenario (repeatable; default: all), e.g. many --repeat runs "
                   "of one key shape; one-key: the six one-key shapes, varied: the five of "
                   "real traffic (many keys in turn, a header per message).")
@json_option
def bench_publish(uri: str, management_uri: str | None, plugin_uri: str | None, repeat: int,
                  no_sidecar: bool, scale: float, bindings: int, bindings_type: str,
                  visibility: bool, scenarios: tuple[str, ...], json_path: str | None) -> None:
    """Publisher-side routing vs a native topic exchange, the sidecar and the plugin: 10k
    bindings; 1, 10, 100 queues/msg; literal, *, trailing # and leading # keys; then real
    traffic: many keys in turn, a header changing per message, a mixed stream."""
    import dataclasses

    from rtroute.bench.publish import (
        SHAPES,
        VARIED_SHAPES,
        json_rows,
        measure_visibility,
        resolve_bindings_type,
        run,
    )

    shapes = [dataclasses.replace(s, messages=max(100, int(s.messages * scale)))
              for s in _chosen(SHAPES, VARIED_SHAPES, scenarios)]
    bindings_type = resolve_bindings_type(uri, bindings_type)
    rows = run(uri, shapes, echo=click.echo, repeat=repeat, management_uri=management_uri,
               plugin_uri=plugin_uri, sidecar=not no_sidecar, bindings=bindings,
               bindings_type=bindings_type)
    extra = {"visibility": measure_visibility(uri, management_uri, echo=click.echo)} \
        if visibility else None
    _save(json_path, "publish", {"repeat": repeat, "scale": scale, "bindings": bindings,
                                 "scenarios": [s.name for s in shapes],
                                 "bindings_type": bindings_type,
                                 "plugin": plugin_uri is not None}, json_rows(rows), uri=uri,
          extra=extra)


@bench.command("proxy")
@uri_option
@management_option
@plugin_option
@shape_repeat_option
@scale_option
@shape_bindings_option
@click.option("--scenario", "scenarios", multiple=True,
              type=click.Choice(["literal", "star", "trailing-hash", "leading-hash",
                                 "fanout-10", "varied-literal", "varied-star",
                                 "varied-fanout-10", "header-per-message", "mixed", "one-key",
                                 "varied"]),
              help="Only this scenario (repeatable; default: all); one-key: the five one-key "
                   "shapes, varied: the five of real traffic.")
@click.option("--broker-pid", type=click.IntRange(min=0), default=0,
              help="The broker's process on this machine: also report its CPU per message "
                   "on each path (from /proc; the purges between runs included).")
@json_option
def bench_proxy(uri: str, management_uri: str | None, plugin_uri: str | None, repeat: int,
                scale: float, bindings: int, scenarios: tuple[str, ...], broker_pid: int,
                json_path: str | None) -> None:
    """Publishing through `rtroute proxy` to x-rtopic vs straight to a native topic exchange
    (and the plugin): 10k bindings; 1 and 10 queues/msg; then real traffic: many keys in
    turn, a header changing per message, a mixed stream."""
    import dataclasses

    from rtroute.bench.proxy import SHAPES, json_rows, run
    from rtroute.bench.publish import VARIED_SHAPES

    shapes = [dataclasses.replace(s, messages=max(100, int(s.messages * scale)))
              for s in _chosen(SHAPES, VARIED_SHAPES, scenarios)]
    rows = run(uri, shapes, echo=click.echo, repeat=repeat, management_uri=management_uri,
               plugin_uri=plugin_uri, bindings=bindings, broker_pid=broker_pid)
    _save(json_path, "proxy", {"repeat": repeat, "scale": scale, "bindings": bindings,
                               "scenarios": [s.name or s.label for s in shapes],
                               "plugin": plugin_uri is not None}, json_rows(rows), uri=uri)


def _chosen(one_key: list, varied: list, names: tuple[str, ...]) -> list:
    """The shapes ``names`` asks for (all without names; ``one-key`` and ``varied`` name
    groups), in the table's order."""
    if not names:
        return one_key + varied
    return [s for s in one_key if "one-key" in names or s.name in names] + \
        [s for s in varied if "varied" in names or s.name in names]


@bench.command("proxy-isolation")
@uri_option
@management_option
@click.option("--seconds", default=3.0, show_default=True, type=click.FloatRange(0.5, 60),
              help="How long each confirm rate is measured.")
@click.option("--bindings", default=20_000, show_default=True, type=click.IntRange(100),
              help="Bindings of the x-rtopic exchange ('#' matches all).")
@click.option("--queues", default=100, show_default=True, type=click.IntRange(1, 1000),
              help="Queues the bindings are spread over (each '#' message reaches all).")
@click.option("--client-in-flight", "in_flight", default=None, type=click.IntRange(1),
              metavar="KEYS", help="The proxy's --client-in-flight (its default if not given).")
@click.option("--rounds", default=1, show_default=True, type=click.IntRange(1, 50),
              help="Pairs of rates (alone, then beside the '#' client) measured back to back; "
                   "the median of their ratios is reported.")
@json_option
def bench_proxy_isolation(uri: str, management_uri: str | None, seconds: float, bindings: int,
                          queues: int, in_flight: int | None, rounds: int,
                          json_path: str | None) -> None:
    """Can one client take `rtroute proxy` from the others? A confirm rate alone and beside a
    client publishing '#' over 20,000 bindings as fast as it can; a new client's connect time,
    /readyz's answer time and SIGTERM's stop time under that load."""
    from rtroute.bench.proxy_isolation import json_rows, run

    figures = run(uri, management_uri, seconds, echo=click.echo, bindings=bindings,
                  queues=queues, in_flight=in_flight, rounds=rounds)
    _save(json_path, "proxy-isolation", {"seconds": seconds, "bindings": bindings,
                                         "queues": queues, "client_in_flight": in_flight,
                                         "rounds": rounds},
          json_rows(figures), uri=uri)


@bench.command("scale")
@uri_option
@management_option
@click.option("--bindings", "sizes", default="1000,10000,100000", show_default=True,
              metavar="N,N,...", help="Bindings of the x-rtopic exchange, one run per N.")
@click.option("--queues", default=100, show_default=True, type=click.IntRange(1, 10_000),
              help="Queues the bindings are spread over.")
@click.option("--timeout", default=120.0, show_default=True, type=click.FloatRange(1, 3600),
              help="Seconds a process may take to route its first publish ('never' after).")
@click.option("--idle", default=0.0, show_default=True, type=click.FloatRange(0, 3600),
              help="Seconds each process idles after its first route while the broker's CPU "
                   "is read (a broker on this machine; 0: not measured).")
@json_option
def bench_scale(uri: str, management_uri: str | None, sizes: str, queues: int, timeout: float,
                idle: float, json_path: str | None) -> None:
    """Start to first routed publish and RSS of `rtroute proxy` and of the sidecar over an
    x-rtopic exchange of N bindings (made with one definitions import in the vhost of --uri:
    use one other than '/'), and when /readyz first said 200.

    \b
    Example:
      rtroute bench scale --uri amqp://guest:guest@127.0.0.1:5674/scale \\
          --management-uri http://127.0.0.1:15674/ --bindings 1000,10000,100000
    """
    from rtroute.bench.scale import json_rows, run

    try:
        counts = [int(part) for part in sizes.split(",") if part.strip()]
    except ValueError:
        raise click.BadParameter(f"expected N,N,... (whole numbers), got {sizes!r}",
                                 param_hint="--bindings") from None
    if not counts or min(counts) < 1:
        raise click.BadParameter(f"expected N,N,... of at least 1, got {sizes!r}",
                                 param_hint="--bindings")
    rows = run(uri, management_uri, counts, queues=queues, timeout=timeout, echo=click.echo,
               idle=idle)
    _save(json_path, "scale", {"bindings": counts, "queues": queues, "timeout": timeout,
                               "idle": idle}, json_rows(rows), uri=uri)


@bench.command("load")
@routing_options()
@load_options(count_default=10_000)
def bench_load(uri: str, exchange: str, routing_key: str, cc: tuple, bcc_alias: tuple,
               bcc: tuple, persistent: bool, route_locally: bool, management_uri: str | None,
               delivery: str, published_key_header: str, count: int, size: int,
               rate: float | None, window: int) -> None:
    """A load generator: publish N messages with windowed publisher confirms; print the rate
    and the confirm latency (as `rtroute publish -n N`).

    \b
    Examples:
      rtroute bench load --exchange logs --routing-key '#.error' -n 100000
      rtroute bench load --exchange logs --routing-key '*.app1.#' --rate 2000 --persistent
      rtroute bench load --exchange logs --routing-key '*.app1.#' --route-locally --bcc audit.all
    """
    run_load(uri, exchange, routing_key, count, size, rate, window, cc, bcc_alias, bcc,
             persistent, route_locally, management_uri, delivery, published_key_header)


@bench.command("chart")
@click.argument("reports", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False))
@click.option("--out", "out_dir", default="docs/charts", show_default=True,
              type=click.Path(file_okay=False), help="Directory for the PNG files.")
def bench_chart(reports: tuple, out_dir: str) -> None:
    """Draw the performance page's figures (PNG) from the JSON of `rtroute bench ... --json FILE`."""
    try:
        import matplotlib
    except ImportError:
        raise click.ClickException(
            "rtroute bench chart needs matplotlib: pip install 'rtroute[bench]'") from None
    matplotlib.use("Agg")
    from rtroute.bench.charts import draw
    from rtroute.bench.report import read_report

    try:
        loaded = [read_report(path) for path in reports]
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    written = draw(loaded, Path(out_dir), echo=click.echo)
    if not written:
        raise click.ClickException("nothing to draw in these reports")

