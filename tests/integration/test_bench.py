"""`make bench`'s harness on a tiny configuration: it runs and writes a well-formed report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.paths import REPO_ROOT

pytestmark = pytest.mark.integration


def test_tiny_benchmark_writes_markdown_and_json(tmp_path) -> None:
    """No `--rate`: the Poisson rate is derived from the raw engine measured in the same run
    (40% of its best), so the open-loop traffic stays under capacity on any machine."""
    command = [
        sys.executable,
        "-m",
        "tools.bench",
        "--target",
        "encoder",
        "--seq-len",
        "16",
        "--concurrency",
        "2",
        "--batch-sizes",
        "1,4",
        "--window",
        "0.6",
        "--max-windows",
        "3",
        "--warmup",
        "0.3",
        "--configs",
        "mixed,tuner-winner,naive",
        "--winner",
        str(tmp_path / "absent.pbtxt"),
        "--out",
        str(tmp_path),
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert [p["batch_size"] for p in report["raw_engine"]] == [1, 4]
    assert all(p["rows_per_s"] > 0 for p in report["raw_engine"])
    rate = report["settings"]["poisson_rate"]
    assert rate == max(1.0, round(0.4 * max(p["rows_per_s"] for p in report["raw_engine"])))
    poisson = f"poisson {rate:g} req/s"
    assert report["pairs"] == {"mixed": {"preset": "mixed preset (committed)", "twin": "mixed: no dynamic batching"}}
    assert set(report["served"]) == {"mixed preset (committed)", "mixed: no dynamic batching"}
    for results in report["served"].values():
        assert [r["traffic"] for r in results] == ["concurrency 2", poisson]
        assert all(r["throughput_rps"] > 0 and r["outcomes"] == {"ok": r["sent"]} for r in results)
    assert [r["label"] for r in report["naive_batcher"]] == ["concurrency 2", poisson]
    assert report["cpu"]["model"] and report["cpu"]["cores"] >= 1
    markdown = (tmp_path / "report.md").read_text()
    assert "| mixed: no dynamic batching | concurrency 2 |" in markdown
    assert "| mixed | concurrency 2 |" in markdown, "the preset's level-by-level comparison"
    assert "- **mixed: " in markdown and "no batching" in markdown, "one verdict line per preset"
    assert f"Machine: {report['cpu']['model']}" in markdown and "**One run**" in markdown
    assert "no tuner winner" in result.stderr


def test_an_unknown_config_is_refused_before_anything_starts() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "tools.bench", "--configs", "mixed,fastest"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    assert "unknown fastest" in result.stderr and "Traceback" not in result.stderr
    assert "raw engine" not in result.stderr
