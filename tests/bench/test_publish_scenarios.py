"""`rtroute bench publish --scenario`: the names the CLI offers are the benchmark's shapes."""
from __future__ import annotations

from click.testing import CliRunner

from rtroute.bench.commands import bench_publish
from rtroute.bench.publish import SCENARIOS, SHAPES


def test_every_shape_has_a_distinct_scenario_name_the_cli_offers():
    option = next(p for p in bench_publish.params if p.name == "scenarios")
    assert list(option.type.choices) == SCENARIOS == [s.name for s in SHAPES]
    assert len(set(SCENARIOS)) == len(SHAPES) and all(SCENARIOS)


def test_an_unknown_scenario_is_a_usage_error_naming_the_choices():
    result = CliRunner().invoke(bench_publish, ["--scenario", "stars"])
    assert result.exit_code == 2
    assert "'stars' is not one of" in result.output and "'star'" in result.output
