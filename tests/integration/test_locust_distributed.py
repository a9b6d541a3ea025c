"""Locust run distributed (`--processes 2`) against the real Triton: the master's verdict
sees the workers' successful requests, the calls still in flight as the run ends among them."""

from __future__ import annotations

import csv
import subprocess
import sys

import pytest

from tools.paths import REPO_ROOT
from tools.serve.local_triton import ServerOptions
from tools.triton_client import TritonClient

pytestmark = pytest.mark.integration


# Both user classes; then only bulk users with 32 texts each, so 8 users keep calls of a second
# or more in flight as the run ends (whose results reach the master only after locust's own
# 0.5 s wait for final reports: loadtest/final_reports.py).
LOADS = {
    "mixed": ["--users", "4", "--interactive-weight", "1"],
    "slow calls at the end": ["--users", "8", "--interactive-weight", "0", "--bulk-texts", "32"],
}


@pytest.mark.parametrize("load", list(LOADS.values()), ids=list(LOADS))
def test_a_run_with_worker_processes_judges_every_successful_request(triton: ServerOptions, tmp_path, load: list[str]) -> None:
    command = [sys.executable, "-m", "loadtest.run", "--no-start", "--run-time", "6", "--report-dir", str(tmp_path), *load]
    command += ["--triton-http-url", triton.http_url, "--triton-grpc-url", triton.grpc_url]
    # Generous SLOs: this test checks the machinery, not this (shared, noisy) machine's speed.
    command += ["--slo-interactive-p95-ms", "20000", "--slo-interactive-p99-ms", "20000", "--slo-bulk-p95-ms", "30000"]
    command += ["--slo-bulk-p99-ms", "30000", "--", "--processes", "2"]
    client = TritonClient(triton.http_url)
    before = client.settled_statistics("embed")
    completed = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=180)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    served = client.settled_statistics("embed") - before
    assert "VERDICT: PASS" in completed.stdout

    with (tmp_path / "locust_stats.csv").open() as handle:
        succeeded = {
            (r["Type"], r["Name"]): int(r["Request Count"]) - int(r["Failure Count"])
            for r in csv.DictReader(handle)
            if r["Name"] != "Aggregated"
        }
    with (tmp_path / "locust_success_latency.csv").open() as handle:
        recorded = {(r["Type"], r["Name"]): int(r["Count"]) for r in csv.DictReader(handle)}
    assert sum(succeeded.values()) > 0
    # Users finish their call in flight when the run ends: the server answered exactly the
    # requests locust counted, none cut off (a cut gRPC call can crash Triton 2.51).
    assert served.requests == sum(succeeded.values()) and served.failures == 0
    # The samples travel in the same worker reports as locust's counters: they match exactly.
    assert recorded == {key: count for key, count in succeeded.items() if count}
