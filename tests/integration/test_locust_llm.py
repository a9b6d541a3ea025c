"""A few seconds of real locust LLM users streaming from the real Triton serving `llm`,
through `python -m loadtest.run --workload llm`: TTFT, ITL and whole requests are locust
requests, and the SLO verdict judges them."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest

from loadtest.verdict import LLM_ITL_SLO_MS, LLM_TTFT_SLO_MS
from tools.load.llm.figures import Slo
from tools.paths import REPO_ROOT

pytestmark = pytest.mark.integration
MAX_TOKENS = 8


def stats_rows(report_dir: Path) -> dict[tuple[str, str], dict[str, str]]:
    with (report_dir / "locust_stats.csv").open() as handle:
        return {(row["Type"], row["Name"]): row for row in csv.DictReader(handle)}


@pytest.fixture(scope="module")
def llm_run(llm_triton, tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    options = llm_triton.options
    report_dir = tmp_path_factory.mktemp("loadtest-llm")
    command = [sys.executable, "-m", "loadtest.run", "--workload", "llm", "--no-start", "--run-time", "10", "--users", "2"]
    command += ["--wait-ms", "0", "--llm-max-tokens", str(MAX_TOKENS), "--report-dir", str(report_dir)]
    command += ["--triton-http-url", options.http_url, "--triton-grpc-url", options.grpc_url]
    # Generous SLOs: this test checks the machinery, not this (shared, noisy) machine's speed.
    command += ["--slo-ttft-p99-ms", "60000", "--slo-itl-p99-ms", "60000"]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=180)
    return completed, report_dir


def test_the_llm_users_record_ttft_itl_and_whole_requests(llm_run) -> None:
    completed, report_dir = llm_run
    assert completed.returncode == 0, completed.stdout + completed.stderr
    rows = stats_rows(report_dir)
    counts = {name: int(rows[("http-stream", f"llm/{name}")]["Request Count"]) for name in ("ttft", "itl", "e2e")}
    e2e = rows[("http-stream", "llm/e2e")]
    assert counts["e2e"] > 0 and int(e2e["Failure Count"]) == 0, rows
    assert counts["ttft"] == counts["e2e"], "every successful stream has exactly one first token"
    # Each stream has at most MAX_TOKENS tokens, so at most MAX_TOKENS - 1 gaps; greedy answers
    # to these prompts are longer than a token.
    assert counts["e2e"] <= counts["itl"] <= counts["e2e"] * (MAX_TOKENS - 1), counts
    ttft_p50, e2e_p50 = float(rows[("http-stream", "llm/ttft")]["50%"]), float(e2e["50%"])
    assert 0 < ttft_p50 <= e2e_p50


def test_the_llm_run_writes_reports_and_a_passing_verdict(llm_run) -> None:
    completed, report_dir = llm_run
    for name in ("report.html", "locust_stats.csv", "locust_success_latency.csv", "verdict.txt"):
        assert (report_dir / name).is_file(), name
    assert "VERDICT: PASS" in completed.stdout
    assert "llm/ttft" in completed.stdout and "llm/itl" in completed.stdout


def test_the_llm_verdict_fails_when_ttft_misses_its_slo(llm_run) -> None:
    _, report_dir = llm_run
    command = [sys.executable, "-m", "loadtest.verdict", str(report_dir / "locust"), "--slo-ttft-p99-ms", "0.001"]
    command += ["--slo-itl-p99-ms", "60000"]
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert completed.returncode == 1, completed.stdout
    ttft_line = next(line for line in completed.stdout.splitlines() if "llm/ttft" in line)
    assert "FAIL: p99" in ttft_line and "VERDICT: FAIL" in completed.stdout


def test_the_llm_users_default_slo_is_the_llm_benchmarks() -> None:
    assert (Slo().ttft_s, Slo().tpot_s) == (LLM_TTFT_SLO_MS / 1000.0, LLM_ITL_SLO_MS / 1000.0)


def test_each_locustfile_offers_only_its_own_users() -> None:
    """The web UI (no user classes named) starts every user of the file: the LLM's file must
    not bring the embedding users along, nor the embedding file the LLM's."""

    def users(locustfile: str) -> set[str]:
        command = [sys.executable, "-m", "locust", "-f", locustfile, "--list"]
        listed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=True).stdout
        return set(listed.split("Available Users:", 1)[1].split())

    assert users("loadtest/llm/locustfile.py") == {"LlmStreamUser"}
    assert "LlmStreamUser" not in users("loadtest/locustfile.py")
