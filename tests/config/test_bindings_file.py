"""Binding files (`rtroute route`, the Spark job): shapes, errors with lines, hostile input."""
from __future__ import annotations

import os

import pytest

from rtroute.config import bindings_file
from rtroute.config.bindings_file import BindingsFileError, load_bindings


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_json_and_toml_give_the_same_pairs(tmp_path):
    as_json = write(tmp_path, "b.json", '{"A": "a.b", "B": ["c", "d.e"]}')
    as_toml = write(tmp_path, "b.toml", 'A = "a.b"\nB = ["c", "d.e"]\n')
    expected = [("A", "a.b"), ("B", "c"), ("B", "d.e")]
    assert load_bindings(as_json) == expected
    assert load_bindings(as_toml) == expected


def test_a_bindings_table_and_toml_under_another_extension(tmp_path):
    path = write(tmp_path, "b.conf", '[bindings]\nA = "x.y"\n')
    assert load_bindings(path) == [("A", "x.y")]


def test_a_json_syntax_error_names_the_line(tmp_path):
    path = write(tmp_path, "b.json", '{\n"A": "x",\n"B": ]\n}')
    with pytest.raises(BindingsFileError, match=r"b\.json:3: invalid JSON"):
        load_bindings(path)


def test_a_wrong_shape_names_the_destination(tmp_path):
    path = write(tmp_path, "b.json", '{"A": 3}')
    with pytest.raises(BindingsFileError, match="destination 'A'.*got int"):
        load_bindings(path)


def test_deep_nesting_is_an_error_with_its_line_not_a_recursion_error(tmp_path):
    path = write(tmp_path, "b.json", "[" * 100_000)
    with pytest.raises(BindingsFileError, match=r"b\.json:1: .*nested more than"):
        load_bindings(path)
    path = write(tmp_path, "b.toml", "A = " + "[" * 5_000)
    with pytest.raises(BindingsFileError, match=r"b\.toml:1: .*nested more than"):
        load_bindings(path)


def test_a_dotted_key_of_thousands_of_parts_is_refused(tmp_path):
    path = write(tmp_path, "b.toml", ".".join(["k"] * 24_000) + ' = "x"\n')
    with pytest.raises(BindingsFileError, match="more than 16 parts"):
        load_bindings(path)


def test_an_oversized_file_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "big.toml"
    with open(path, "wb") as handle:  # sparse: nothing is written, the size is what counts
        handle.truncate(bindings_file.MAX_TOML_BYTES + 1)
    read = []
    monkeypatch.setattr(type(path), "read_text", lambda *a, **k: read.append(1) or "")
    with pytest.raises(BindingsFileError, match="larger than 16 MiB; write large binding"):
        load_bindings(path)
    assert read == []
    assert os.path.getsize(path) > bindings_file.MAX_TOML_BYTES


def test_not_utf8_is_a_clear_error(tmp_path):
    path = tmp_path / "b.json"
    path.write_bytes(b'{"A": "\xff"}')
    with pytest.raises(BindingsFileError, match="cannot read"):
        load_bindings(path)


@pytest.mark.parametrize(("text", "message"), [
    ("", "the file is empty"), ("  \n", "the file is empty"),
    ("# only a comment\n", "no bindings in it"), ("{}", "no bindings in it")])
def test_a_file_without_bindings_is_an_error_not_every_key_unroutable(tmp_path, text, message):
    path = write(tmp_path, "b.json" if text == "{}" else "b.toml", text)
    with pytest.raises(BindingsFileError, match=message):
        load_bindings(path)


def test_empty_standard_input_says_docker_run_needs_dash_i():
    """The Dockerfile's example pipes the bindings in: without ``docker run -i`` the
    container's stdin is empty, and ``rtroute route`` printed "(unroutable...)" with exit 0."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "rtroute.cli", "route", "--bindings",
                             "/dev/stdin", "a.b"], stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 1
    assert "the file is empty (nothing came on standard input: `docker run` passes it only " \
        "with -i)" in result.stderr
