"""The `rtroute` command: thin wrappers that parse arguments and call one function each."""
from __future__ import annotations

import json
import sys

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="rtroute")
def main() -> None:
    """rtroute: reverse-topic exchanges, CC/BCC, shovels and diverts beside an unmodified RabbitMQ."""


@main.command()
@click.option("--bindings", "bindings_path", required=True, type=click.Path(dir_okay=False),
              help="TOML or JSON file mapping each destination to its binding key(s).")
@click.option("--kind", type=click.Choice(["rtopic", "topic", "direct", "fanout"]),
              default="rtopic", show_default=True, help="Exchange semantics to route with.")
@click.option("--cc", multiple=True, metavar="KEY", help="Add a CC routing key (repeatable).")
@click.option("--bcc", multiple=True, metavar="KEY", help="Add a BCC routing key (repeatable).")
@click.option("--json", "as_json", is_flag=True, help="Print destinations and headers as JSON.")
@click.argument("routing_key")
def route(bindings_path: str, kind: str, cc: tuple, bcc: tuple, as_json: bool,
          routing_key: str) -> None:
    """Print the destinations a publish with ROUTING_KEY (plus CC/BCC) reaches.

    \b
    Example:
      rtroute route --bindings examples/bindings.toml '*.app1.mod1.info' --cc 'server2.#'
    """
    from rtroute.bindings_file import BindingsFileError, load_bindings
    from rtroute.routing import make_exchange

    try:
        exchange = make_exchange(kind)
        for destination, key in load_bindings(bindings_path):
            exchange.bind(destination, key)
        headers = {}
        if cc:
            headers["CC"] = list(cc)
        if bcc:
            headers["BCC"] = list(bcc)
        result = exchange.route(routing_key, headers=headers or None)
    except (BindingsFileError, TypeError, ValueError) as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        click.echo(json.dumps({"destinations": sorted(result.destinations),
                               "headers": result.headers}))
    else:
        for destination in sorted(result.destinations):
            click.echo(destination)
        if not result.destinations:
            click.echo("(unroutable: no destination matched)", err=True)


@main.group("config")
def config_group() -> None:
    """Configuration files (rtroute.toml)."""


@config_group.command("check")
@click.argument("path", type=click.Path(dir_okay=False))
def config_check(path: str) -> None:
    """Validate PATH; print each problem as FILE:LINE: message (exit status 1 on error)."""
    from rtroute.config import ConfigError, load

    try:
        config = load(path)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"{path}: OK ({len(config.exchanges)} exchanges, {len(config.diverts)} diverts, "
               f"{len(config.shovels)} shovels)")


@main.group()
def bench() -> None:
    """Benchmarks: each measures rtroute against a baseline in the same run."""


@bench.command("match")
@click.option("--bindings", "sizes", multiple=True, type=click.IntRange(1),
              help="Binding-set size (repeatable). [default: 1000, 100000, 1000000]")
@click.option("--queries", default=20, show_default=True, type=click.IntRange(1),
              help="Queries per shape and implementation.")
@click.option("--scan-limit", default=100_000, show_default=True,
              help="Run reference.py (a full scan) only up to this many bindings.")
def bench_match(sizes: tuple, queries: int, scan_limit: int) -> None:
    """Native core vs reference.py, a Python dict trie, marisa-trie and a naive regex scan."""
    from rtroute.bench.match import run

    run(sizes=sizes or (1_000, 100_000, 1_000_000), scan_limit=scan_limit, queries=queries,
        echo=click.echo)


@bench.command("selector")
@click.option("--evaluations", default=200_000, show_default=True, type=click.IntRange(1))
def bench_selector(evaluations: int) -> None:
    """Compiled selectors vs a straightforward AST interpreter (evaluations/s)."""
    from rtroute.bench.selector import run

    run(evaluations=evaluations, echo=click.echo)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
