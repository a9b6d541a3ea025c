"""Arrival schedules of the load generator (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from tools.loadgen.report import LatencySummary, classify_error
from tools.loadgen.traffic import Traffic, load_trace, parse_priority_mix


def test_poisson_arrivals_have_the_asked_rate_and_exponential_gaps() -> None:
    arrivals = Traffic(rate=200, seed=3).arrivals(60.0)
    gaps = np.diff(arrivals)
    assert len(arrivals) == pytest.approx(12_000, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, abs=0.05)  # exponential: cv = 1


def test_constant_arrivals_are_evenly_spaced() -> None:
    gaps = np.diff(Traffic(rate=50, distribution="constant").arrivals(2.0))
    np.testing.assert_allclose(gaps, 0.02)


def test_bursty_traffic_alternates_low_and_high_rates() -> None:
    arrivals = Traffic(rate=20, burst_rate=200, burst_period_s=2.0, seed=1).arrivals(40.0)
    in_burst = (arrivals % 2.0) >= 1.0
    assert in_burst.sum() / (~in_burst).sum() == pytest.approx(10, rel=0.2)


def test_a_trace_is_replayed_and_cycled(tmp_path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("# offsets\n0.0\n0.5\n0.75\n1.0\n")
    arrivals = Traffic(trace=load_trace(trace)).arrivals(2.5)
    np.testing.assert_allclose(arrivals, [0.0, 0.5, 0.75, 1.0, 1.0, 1.5, 1.75, 2.0, 2.0])


def test_bad_trace_line_is_named(tmp_path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("0.1\nsoon\n")
    with pytest.raises(ValueError, match=r"trace\.txt:2: 'soon'"):
        load_trace(trace)


def test_priority_mix_is_drawn_in_the_asked_shares() -> None:
    priorities = Traffic(concurrency=1, priority_mix=parse_priority_mix("1:0.2,2:0.8")).priorities(10_000)
    assert (priorities == 1).mean() == pytest.approx(0.2, abs=0.02)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({}, "either a concurrency"),
        ({"concurrency": 4, "rate": 10}, "either a concurrency"),
        ({"rate": 10, "priority_mix": {1: 0.5}}, "add up to 1"),
        ({"rate": 10, "burst_rate": 50}, "burst_period_s"),
    ],
)
def test_inconsistent_traffic_is_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Traffic(**kwargs)


def test_errors_are_classified_by_triton_message() -> None:
    assert classify_error("in ensemble 'embed', Exceeds maximum queue size") == "rejected"
    assert classify_error("Request timeout expired") == "timeout"
    assert classify_error("unexpected inference output") == "error"


def test_percentiles_are_in_milliseconds() -> None:
    summary = LatencySummary.of(np.linspace(0.001, 0.100, 100))
    assert summary.p50_ms == pytest.approx(50.5, abs=0.6)
    assert summary.max_ms == pytest.approx(100.0)
