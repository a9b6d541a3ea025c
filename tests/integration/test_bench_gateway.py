"""`make bench-gateway` on a tiny setting: it runs, checks parity, and writes its report."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.bench.gateway.client import Row
from tools.bench.gateway.report import ratio_lines, render
from tools.paths import REPO_ROOT

pytestmark = pytest.mark.integration


def test_tiny_gateway_benchmark_writes_markdown_and_json(tmp_path) -> None:
    command = [
        sys.executable,
        "-m",
        "tools.bench.gateway",
        "--concurrency",
        "2",
        "--seconds",
        "1",
        "--warmup",
        "0.3",
        "--infinity-venv",
        str(tmp_path / "no-venv"),
        "--out",
        str(tmp_path),
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["targets"] == ["gateway (OpenAI API -> gRPC)", "Triton HTTP/JSON"]
    assert all(row["requests"] > 0 and row["errors"] == 0 for row in report["rows"])
    assert min(report["min_cosine_to_first"].values()) >= 0.9999
    assert "not installed" in report["left_out"]["infinity-emb 0.0.78"]
    markdown = (tmp_path / "report.md").read_text()
    assert "| gateway (OpenAI API -> gRPC) | 2 |" in markdown and "Triton HTTP/JSON, req/s: x" in markdown
    assert "Triton HTTP/JSON, p99: x" in markdown


def test_a_target_without_answers_shows_no_latency_and_no_ratio() -> None:
    report = {
        "date": "today",
        "cpu": {"model": "cpu", "cores": 2, "flags": []},
        "load_before": 0.0,
        "load_after": 0.0,
        "concurrency": [1],
        "seconds": 1.0,
        "warmup_s": 0.0,
        "texts_per_request": 1,
        "left_out": {},
        "targets": ["a", "b"],
        "min_cosine_to_first": {"a": 1.0, "b": 1.0},
        "rows": [Row("a", 1, 10, 0, 1.0, 10.0, 5.0, 9.0).__dict__, Row("b", 1, 0, 4, 1.0, 0.0, None, None).__dict__],
    }
    markdown = render(report)
    assert "| b | 1 | 0.0 | - | - | - | 4 |" in markdown
    assert "- a / b, req/s: - at 1" in markdown
    assert "- a / b, p99: - at 1" in markdown


def test_the_report_compares_p99_with_each_other_target_at_every_level() -> None:
    rows = [Row("gw", 1, 100, 0, 1.0, 50.0, 10.0, 30.0, 40.0), Row("triton", 1, 100, 0, 1.0, 52.0, 9.0, 20.0, 25.0)]
    lines = ratio_lines(rows, ["gw", "triton"], [1])
    assert lines == ["- gw / triton, req/s: x0.96 at 1", "- gw / triton, p99: x1.50 at 1"]
