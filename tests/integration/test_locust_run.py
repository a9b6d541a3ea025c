"""A few seconds of real locust load against the real Triton, through `python -m loadtest.run`."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from tools.paths import REPO_ROOT
from tools.serve.local_triton import ServerOptions

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def short_run(triton: ServerOptions, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    report_dir = tmp_path_factory.mktemp("loadtest")
    command = [sys.executable, "-m", "loadtest.run", "--no-start", "--run-time", "5", "--users", "4", "--report-dir", str(report_dir)]
    command += ["--triton-http-url", triton.http_url, "--triton-grpc-url", triton.grpc_url, "--interactive-weight", "1"]
    # Generous SLOs: this test checks the machinery, not this (shared, noisy) machine's speed.
    command += ["--slo-interactive-p95-ms", "20000", "--slo-interactive-p99-ms", "20000", "--slo-bulk-p95-ms", "30000"]
    command += ["--slo-bulk-p99-ms", "30000"]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    return completed, report_dir


def test_headless_run_records_requests_of_every_user_class(short_run) -> None:
    completed, report_dir = short_run
    assert completed.returncode == 0, completed.stdout + completed.stderr
    with (report_dir / "locust_stats.csv").open() as handle:
        rows = {(row["Type"], row["Name"]): int(row["Request Count"]) for row in csv.DictReader(handle)}
    for key in (("http", "embed/interactive"), ("grpc", "embed/interactive"), ("http", "embed/bulk"), ("grpc", "embed/bulk")):
        assert rows.get(key, 0) > 0, rows


def test_reports_and_verdict_are_written(short_run) -> None:
    completed, report_dir = short_run
    for name in ("report.html", "locust_stats.csv", "locust_failures.csv", "locust_success_latency.csv", "verdict.txt"):
        assert (report_dir / name).is_file(), name
    assert "VERDICT: PASS" in completed.stdout
    assert "encoder executed batch sizes" in completed.stdout


def test_verdict_fails_with_an_impossibly_tight_slo(short_run) -> None:
    _, report_dir = short_run
    command = [sys.executable, "-m", "loadtest.verdict", str(report_dir / "locust"), "--slo-interactive-p95-ms", "0.001"]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 1, completed.stdout
    assert "VERDICT: FAIL" in completed.stdout
