"""The load generator against the real local Triton: counts reconcile with the server.

Open-loop rates are a fraction of the capacity measured on the same server, so the tests
hold on machines of any speed; shares of randomly drawn classes are checked within
binomial bounds."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from tools.loadgen import Measurement, Traffic, embed_target, encoder_target, run_load
from tools.loadgen.measure import measure_capacity
from tools.paths import REPO_ROOT
from tools.triton_client import TritonError
from tools.triton_client.stats import ModelStats

pytestmark = pytest.mark.integration

QUICK = Measurement(warmup_s=0.5, window_s=1.0, stable_windows=3, max_windows=4, server_models=("embed", "encoder"))


@pytest.fixture(scope="module")
def capacity(triton) -> float:
    """Closed-loop req/s of embed_target on this server now."""
    return measure_capacity(embed_target(), triton.grpc_url, "grpc", triton.http_url)


def loadgen(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tools.loadgen", *argv], cwd=REPO_ROOT, capture_output=True, text=True, timeout=280)


def test_closed_loop_counts_match_the_servers_statistics(triton) -> None:
    before = ModelStats.settled(triton.http_url, "embed")
    result = run_load(embed_target(), Traffic(concurrency=4), QUICK, triton.grpc_url, "grpc", triton.http_url)
    served = ModelStats.settled(triton.http_url, "embed") - before
    assert result.run_sent > 0
    assert result.run_outcomes == {"ok": result.run_sent}, "every request got exactly one outcome"
    assert served.requests == result.run_sent
    assert result.throughput_rps > 0
    assert 0 < result.latency.p50_ms <= result.latency.p99_ms
    assert result.server["embed"].requests > 0


def test_open_loop_poisson_keeps_its_rate_over_http(triton, capacity) -> None:
    rate = round(capacity / 4, 1)  # the client shares the cores, and HTTP costs it more than gRPC
    measurement = Measurement(warmup_s=0.5, window_s=2.0, stable_windows=3, max_windows=3, server_models=("embed",))
    result = run_load(embed_target(), Traffic(rate=rate, seed=7), measurement, triton.http_url, "http", triton.http_url)
    expected = rate * result.measured_s
    assert abs(result.sent - expected) <= 4 * math.sqrt(expected) + 2, f"{result.sent} sent, {expected:.0f} expected (Poisson)"
    assert result.late_sends <= 0.05 * result.run_sent
    assert result.run_outcomes == {"ok": result.run_sent}
    assert result.throughput_rps * result.measured_s == pytest.approx(result.sent, abs=1e-6)


def test_priority_mix_is_reported_per_class(triton) -> None:
    traffic = Traffic(concurrency=4, priority_mix={1: 0.3, 2: 0.7})
    result = run_load(embed_target(), traffic, QUICK, triton.grpc_url, "grpc", triton.http_url)
    assert set(result.per_priority) == set(result.run_per_priority) == {1, 2}
    assert sum(c.sent for c in result.per_priority.values()) == result.sent
    assert sum(c.sent for c in result.run_per_priority.values()) == result.run_sent
    share = result.run_per_priority[1].sent / result.run_sent
    assert abs(share - 0.3) <= 4 * math.sqrt(0.3 * 0.7 / result.run_sent), f"level-1 share {share:.2f} of {result.run_sent}"
    assert all(c.latency.count == c.outcomes.get("ok", 0) > 0 for c in result.per_priority.values())


def test_encoder_target_reports_executed_batches(triton) -> None:
    measurement = Measurement(0.5, 1.0, 3, 3, 0.5, ("encoder",))
    result = run_load(encoder_target(32), Traffic(concurrency=8), measurement, triton.grpc_url, "grpc", triton.http_url)
    assert result.server["encoder"].average_batch_size > 1.0
    assert sum(result.server["encoder"].batch_executions.values()) == result.server["encoder"].executions


def test_a_failing_statistics_snapshot_stops_every_sender(triton) -> None:
    """The statistics of an unknown model answer 400 mid-run: the run must end with that
    error, and no sender may keep firing afterwards (closed-loop senders once did: a hang)."""
    measurement = Measurement(0.5, 0.5, 3, 3, server_models=("nosuch",))
    with pytest.raises(TritonError, match="nosuch"):  # a hang here fails through the suite's per-test timeout
        run_load(embed_target(model="nosuch"), Traffic(concurrency=8), measurement, triton.grpc_url, "grpc", triton.http_url)


def test_an_unknown_model_is_refused_up_front_with_a_message(triton) -> None:
    done = loadgen("--model", "nosuch", "--url", triton.http_url, "--grpc-url", triton.grpc_url, "--concurrency", "2")
    assert done.returncode == 2, done.stderr
    assert "model 'nosuch' is not ready on the server" in done.stderr
    assert "Traceback" not in done.stderr


def test_a_model_that_cannot_take_the_requests_is_refused_naming_its_inputs(triton) -> None:
    done = loadgen("--model", "tokenizer", "--url", triton.http_url, "--grpc-url", triton.grpc_url, "--concurrency", "2")
    assert done.returncode == 2, done.stderr
    assert "model 'tokenizer' has inputs ['TEXT']" in done.stderr and "EMBEDDING" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_terminal_shows_classes_percentiles_late_sends_and_batches(triton, capacity) -> None:
    rate = f"{capacity / 2:.1f}"
    done = loadgen(
        "--url",
        triton.http_url,
        "--grpc-url",
        triton.grpc_url,
        "--rate",
        rate,
        "--priority-mix",
        "1:0.3,2:0.7",
        "--warmup",
        "0.5",
        "--window",
        "1",
        "--max-windows",
        "3",
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "sends late by > 10 ms:" in done.stdout
    header = next(line for line in lines if line.split()[:2] == ["class", "sent"])
    assert header.split()[2:11] == ["ok", "rejected", "timeout", "other", "p50", "p90", "p95", "p99", "max"]
    assert {line.split()[0] + line.split()[1] for line in lines if line.strip().startswith("priority")} == {"priority1", "priority2"}
    encoder = next(line for line in lines if line.strip().startswith("encoder"))
    histogram = encoder.split()[8:]
    assert histogram and all(":" in cell for cell in histogram), encoder
    assert "whole run, warm-up included:" in done.stdout
