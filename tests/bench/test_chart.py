"""`rtroute bench chart`: PNG figures from the JSON reports of `rtroute bench ... --json`."""
from __future__ import annotations

import sys

import pytest
from click.testing import CliRunner

from rtroute.bench.report import build_report, write_report
from rtroute.cli import main

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _fixture_reports(directory) -> list[str]:
    match_rows = [{"name": "native", "value": 0.5 * n / 1000, "unit": "µs/query",
                   "baseline": baseline, "baseline_value": 10.0, "ratio": 20.0 / n * 1000,
                   "ratio_means": "native speed-up", "bindings": n, "shape": shape}
                  for n in (1_000, 10_000) for shape in ("exact", "#.c.d")
                  for baseline in ("python dict trie", "marisa-trie")]
    match_rows.append({"name": "native (rt_memory)", "value": 60.0, "unit": "bytes/binding",
                       "bindings": 1_000, "kind": "memory"})
    sidecar_rows = [{"name": "sidecar", "value": 10_000.0 / q, "unit": "msg/s",
                     "baseline": "native topic exchange", "baseline_value": 20_000.0 / q,
                     "ratio": 0.5, "ratio_means": "rtroute / baseline", "scenario": f"{q} q",
                     "queues_per_message": q, "extra_bindings": 0, "exact": False}
                    for q in (1, 10, 100)]
    divert_rows = [{"name": "managed exchange + diverts", "value": 9_000.0, "unit": "msg/s",
                    "baseline": "native topic exchange", "baseline_value": 18_000.0,
                    "ratio": 0.5, "ratio_means": "rtroute / baseline", "diverts": d,
                    "copies": False} for d in (0, 1, 10)]
    spark_rows = [{"name": "arrow + native core", "value": 200_000.0, "unit": "rows/s",
                   "baseline": name, "baseline_value": rate, "ratio": 200_000.0 / rate,
                   "ratio_means": "native speed-up", "role": role}
                  for name, rate, role in (("arrow + native core", 200_000.0, "rtroute"),
                                           ("mapInArrow + dict trie", 90_000.0, "baseline"),
                                           ("row UDF + dict trie", 30_000.0, "baseline"),
                                           ("row UDF + reference matcher", 80.0, "footnote"))]
    confirms_rows = [{"name": "windowed", "value": 12_000.0, "unit": "msg/s",
                      "baseline": "transaction per message", "baseline_value": 1_500.0,
                      "ratio": 8.0, "ratio_means": "rtroute / baseline"}]
    paths = []
    for benchmark, rows, parameters in (
            ("match", match_rows, {"bindings": [1_000, 10_000]}),
            ("sidecar", sidecar_rows, {"repeat": 1}), ("divert", divert_rows, {}),
            ("spark", spark_rows, {"messages": 1_000, "bindings": 100, "master": "local[2]"}),
            ("confirms", confirms_rows, {})):
        path = directory / f"{benchmark}.json"
        write_report(path, build_report(benchmark, parameters, rows, broker="4.0.5"))
        paths.append(str(path))
    return paths


def test_chart_draws_a_png_per_benchmark(tmp_path):
    pytest.importorskip("matplotlib", reason="pip install 'rtroute[bench]'")
    out = tmp_path / "charts"
    result = CliRunner().invoke(main, ["bench", "chart", *_fixture_reports(tmp_path),
                                       "--out", str(out)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    names = {"match-speedup.png", "sidecar-ratio.png", "divert-ratio.png", "spark-shapes.png",
             "confirms-ratio.png"}
    assert {p.name for p in out.iterdir()} == names
    for name in names:
        data = (out / name).read_bytes()
        assert data.startswith(PNG_MAGIC) and len(data) < 150 * 1024, name
        assert f"{out / name}" in result.output


def test_chart_refuses_a_file_that_is_not_a_report(tmp_path):
    pytest.importorskip("matplotlib", reason="pip install 'rtroute[bench]'")
    path = tmp_path / "x.json"
    path.write_text('{"rows": []}')
    result = CliRunner().invoke(main, ["bench", "chart", str(path)])
    assert result.exit_code != 0 and "not an rtroute-bench/1 report" in result.output


def test_chart_without_matplotlib_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import fails
    result = CliRunner().invoke(main, ["bench", "chart", *_fixture_reports(tmp_path)])
    assert result.exit_code != 0 and "pip install 'rtroute[bench]'" in result.output
