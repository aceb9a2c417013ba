"""`rtroute config check --bindings FILE`: a bindings file (as `rtroute route` and `rtroute spark`
read it) is checked like rtroute.toml, with the file in every message."""
from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from rtroute.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def check(*args: str):
    return CliRunner().invoke(main, ["config", "check", *args])


def test_the_example_bindings_file_is_ok_with_its_counts():
    done = check("--bindings", str(EXAMPLES / "bindings.toml"))
    assert done.exit_code == 0, done.output
    assert done.output.strip().endswith("OK (6 bindings, 6 destinations, rtopic)")


def test_a_json_file_with_a_list_of_keys_per_destination(tmp_path):
    path = tmp_path / "b.json"
    path.write_text('{"audit": ["#", "x.y"], "eu": "orders.eu"}')
    done = check("--bindings", str(path), "--kind", "topic")
    assert done.exit_code == 0, done.output
    assert "OK (3 bindings, 2 destinations, topic)" in done.output


def test_a_value_of_the_wrong_type_is_one_line_naming_the_file_and_the_destination(tmp_path):
    path = tmp_path / "b.toml"
    path.write_text('A = "k"\nB = 5\n')
    done = check("--bindings", str(path))
    assert done.exit_code == 1
    assert str(path) in done.output and "'B'" in done.output and "Traceback" not in done.output


def test_without_the_flag_a_bindings_file_is_read_as_rtroute_toml_and_refused():
    done = check(str(EXAMPLES / "bindings.toml"))
    assert done.exit_code == 1  # its destinations are unknown keys of rtroute.toml
