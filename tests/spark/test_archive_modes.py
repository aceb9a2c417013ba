"""Drained messages are private: Parquet files are created 0600 and the directories a drain
creates 0700 whatever the umask, unless ``--mode`` widens them. No broker needed."""
from __future__ import annotations

import os
import stat
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from rtroute.spark.archive import check_mode, directory_mode, drain, make_directory, write_part
from rtroute.spark.commands import spark as spark_group

ROW = {"routing_key": "a.b", "headers": None, "body": b"secret", "exchange": "x",
       "redelivered": False}


@pytest.fixture
def lax_umask():
    """The usual umask (022), under which a plain open() makes files world-readable."""
    old = os.umask(0o022)
    yield
    os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_parts_are_private_by_default_whatever_the_umask(tmp_path, lax_umask):
    part = write_part([ROW], tmp_path, "part-0.parquet")
    assert _mode(part) == 0o600
    assert pq.read_table(part).to_pylist()[0]["body"] == b"secret"


def test_a_wider_mode_is_set_exactly_even_under_a_strict_umask(tmp_path):
    old = os.umask(0o077)
    try:
        part = write_part([ROW], tmp_path, "part-0.parquet", mode=0o640)
    finally:
        os.umask(old)
    assert _mode(part) == 0o640


def test_a_file_in_the_way_of_the_temporary_name_is_never_overwritten(tmp_path):
    planted = tmp_path / ".part-0.parquet.tmp"
    planted.symlink_to(tmp_path / "elsewhere")
    with pytest.raises(FileExistsError):
        write_part([ROW], tmp_path, "part-0.parquet")
    assert not (tmp_path / "elsewhere").exists()


def test_directories_a_drain_creates_are_private(tmp_path, lax_umask):
    existing = _mode(tmp_path)
    out = tmp_path / "archive" / "2024-05-01"
    make_directory(out)
    assert _mode(tmp_path / "archive") == 0o700 and _mode(out) == 0o700
    assert _mode(tmp_path) == existing  # not the drain's to change
    wider = tmp_path / "shared" / "day"
    make_directory(wider, 0o640)
    assert _mode(wider) == 0o750 and _mode(tmp_path / "shared") == 0o750


def test_directory_mode_lets_each_reader_enter():
    assert directory_mode(0o600) == 0o700
    assert directory_mode(0o640) == 0o750
    assert directory_mode(0o644) == 0o755


@pytest.mark.parametrize("mode", [0o400, 0o200, 0o1600, -1])
def test_modes_without_owner_read_write_or_beyond_permissions_are_refused(mode):
    with pytest.raises(ValueError, match="file mode"):
        check_mode(mode)


def test_drain_refuses_a_bad_mode_before_connecting(tmp_path):
    with pytest.raises(ValueError, match="file mode"):
        drain("amqp://guest:guest@127.0.0.1:1/", "q", tmp_path / "out", mode=0o444)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("given", "message"), [
    ("rw", "is not an octal mode"),
    ("0400", "file mode must be"),
])
def test_cli_mode_option_is_checked(tmp_path, given, message):
    result = CliRunner().invoke(spark_group, [
        "drain", "--uri", "amqp://guest:guest@127.0.0.1:1/", "--queue", "q",
        "--out", str(tmp_path / "out"), "--mode", given])
    assert result.exit_code != 0
    assert message in result.output
