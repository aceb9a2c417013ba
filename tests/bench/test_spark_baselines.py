"""The fair Spark baselines (a Python dict trie as a row UDF, a pandas UDF and in mapInArrow)
route exactly as the native core does; `rtroute bench spark --json` reports them."""
from __future__ import annotations

import os

import pytest
from click.testing import CliRunner

pa = pytest.importorskip("pyarrow")
pytest.importorskip("pandas")
pytest.importorskip("numpy")

from rtroute.bench.report import read_report
from rtroute.bench.spark import (
    BASELINES,
    NATIVE,
    RowRouter,
    benchmark_bindings,
    generate_archive,
    pandas_router,
    route_batches_with,
)
from rtroute.cli import main
from rtroute.spark.batches import BatchRouter, RoutePlan, fingerprint

BINDINGS = benchmark_bindings(200)


@pytest.fixture(scope="module")
def batch(tmp_path_factory):
    import pyarrow.parquet as pq

    directory = tmp_path_factory.mktemp("archive")
    generate_archive(directory, 1_500, BINDINGS, files=1)
    table = pq.read_table(directory)
    # rows the job must refuse, as the native path does: a null key, headers of the wrong type
    extra = pa.table({"id": pa.array([10_000, 10_001, 10_002], pa.int64()),
                      "routing_key": pa.array([None, "a.b", "a.*"], pa.string()),
                      "headers": pa.array(['{"CC": "a.b"}', "[1]", '{"BCC": ["#"]}']),
                      "body": pa.array([b"", b"", b""], pa.binary())})
    return pa.concat_tables([table, extra.cast(table.schema)]).combine_chunks().to_batches()[0]


def _routes(batch: pa.RecordBatch) -> list[tuple]:
    """(id, destinations, delivered headers sorted, error) per row."""
    return [(r["id"], r["destinations"],
             None if r["delivered_headers"] is None else sorted(r["delivered_headers"]),
             r["error"]) for r in batch.to_pylist()]


def test_row_and_pandas_and_arrow_baselines_route_as_native(batch):
    expected = _routes(BatchRouter("rtopic", BINDINGS).route_batch(batch))
    digest = fingerprint("rtopic", BINDINGS)

    row = RowRouter(BINDINGS, digest, "dict trie")
    by_row = [row(k, h) for k, h in zip(batch.column("routing_key").to_pylist(),
                                        batch.column("headers").to_pylist())]
    routed = batch.append_column("destinations", pa.array([r[0] for r in by_row],
                                                          pa.list_(pa.string())))
    routed = routed.append_column("delivered_headers", pa.array(
        [None if r[1] is None else list(r[1].items()) for r in by_row],
        pa.map_(pa.string(), pa.string())))
    routed = routed.append_column("error", pa.array([r[2] for r in by_row], pa.string()))
    assert _routes(routed) == expected

    frame = pandas_router(BINDINGS, digest)(batch.column("routing_key").to_pandas(),
                                            batch.column("headers").to_pandas())
    assert [None if d is None else list(d) for d in frame["destinations"]] == \
        [e[1] for e in expected]
    assert list(frame["error"]) == [e[3] for e in expected]

    plan = RoutePlan(kind="rtopic", fingerprint=digest, bindings=BINDINGS)
    (arrow,) = route_batches_with(iter([batch]), plan, "dict trie")
    assert _routes(arrow) == expected
    assert any(e[3] for e in expected) and any(e[1] for e in expected)  # both kinds occur


def test_spark_report_checks_every_shape_against_native(tmp_path):
    if os.environ.get("RTROUTE_REQUIRE_SPARK") != "1":
        pytest.importorskip("pyspark", reason="pip install 'rtroute[spark]'")
    path = tmp_path / "spark.json"
    result = CliRunner().invoke(main, [
        "bench", "spark", "--messages", "1500", "--bindings", "200", "--master", "local[1]",
        "--repeats", "1", "--reference-sample", "100", "--native-row-sample", "100",
        "--json", str(path)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "every baseline routed the 1,500 rows as the native core" in result.output
    report = read_report(path)
    rows = {r["baseline"]: r for r in report["rows"]}
    assert set(rows) >= {NATIVE, *(name for name, _ in BASELINES)}
    for name, shape in BASELINES:
        assert rows[name]["shape"] == shape and rows[name]["role"] == "baseline"
        assert rows[name]["unit"] == "rows/s" and rows[name]["ratio"] > 0
    assert rows["row UDF + reference matcher"]["role"] == "footnote"
    assert report["parameters"]["spark"]

