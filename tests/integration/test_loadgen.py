"""The load generator against the real local Triton: counts reconcile with the server."""

from __future__ import annotations

import pytest

from tools.loadgen import Measurement, Traffic, embed_target, encoder_target, run_load
from tools.stats import ModelStats

pytestmark = pytest.mark.integration

QUICK = Measurement(warmup_s=0.5, window_s=1.0, stable_windows=3, max_windows=4, server_models=("embed", "encoder"))


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


def test_open_loop_poisson_keeps_its_rate_over_http(triton) -> None:
    result = run_load(embed_target(), Traffic(rate=25, seed=7), QUICK, triton.http_url, "http", triton.http_url)
    assert result.throughput_rps == pytest.approx(25, rel=0.4)
    assert result.late_sends <= 0.05 * result.run_sent
    assert result.run_outcomes == {"ok": result.run_sent}


def test_priority_mix_is_reported_per_class(triton) -> None:
    traffic = Traffic(concurrency=4, priority_mix={1: 0.3, 2: 0.7})
    result = run_load(embed_target(), traffic, QUICK, triton.grpc_url, "grpc", triton.http_url)
    assert set(result.per_priority) == {1, 2}
    assert result.per_priority[1].sent < result.per_priority[2].sent
    assert all(c.latency.count > 0 for c in result.per_priority.values())


def test_encoder_target_reports_executed_batches(triton) -> None:
    measurement = Measurement(0.5, 1.0, 3, 3, 0.5, ("encoder",))
    result = run_load(encoder_target(32), Traffic(concurrency=8), measurement, triton.grpc_url, "grpc", triton.http_url)
    assert result.server["encoder"].average_batch_size > 1.0
    assert sum(result.server["encoder"].batch_executions.values()) == result.server["encoder"].executions
