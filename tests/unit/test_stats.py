"""ModelStats: deltas of Triton's cumulative counters, and waiting for late-recorded requests."""

from __future__ import annotations

import pytest

from tools.triton_client import TritonClient
from tools.triton_client.stats import ModelStats


def document(success: int, batches: dict[int, int]) -> dict:
    rows = sum(size * count for size, count in batches.items())
    return {
        "model_stats": [
            {
                "inference_count": rows,
                "execution_count": sum(batches.values()),
                "inference_stats": {"success": {"count": success}},
                "batch_stats": [{"batch_size": size, "compute_infer": {"count": count}} for size, count in batches.items()],
            }
        ]
    }


def test_delta_subtracts_counters_and_drops_unchanged_batch_sizes() -> None:
    earlier = ModelStats.from_document(document(3, {1: 1, 2: 1}))
    later = ModelStats.from_document(document(9, {1: 1, 2: 1, 4: 1}))
    delta = later - earlier
    assert delta.requests == 6
    assert delta.batch_executions == {4: 1}
    assert delta.average_batch_size == pytest.approx(4.0)


def test_settled_waits_until_a_late_recorded_request_shows_up(monkeypatch) -> None:
    """Triton can record a request's statistics after its response: the first read lags."""
    reads = iter([document(5, {1: 5}), document(6, {1: 6}), document(6, {1: 6})])
    monkeypatch.setattr(TritonClient, "statistics_document", lambda self, model: next(reads))
    assert TritonClient("host:1").settled_statistics("encoder", quiet_s=0.0).requests == 6


def test_settled_gives_up_after_its_timeout_on_steady_traffic(monkeypatch) -> None:
    counter = iter(range(1, 10_000))
    monkeypatch.setattr(TritonClient, "statistics_document", lambda self, model: document(next(counter), {}))
    latest = TritonClient("host:1").settled_statistics("encoder", quiet_s=0.01, timeout_s=0.05)
    assert latest.requests > 1
