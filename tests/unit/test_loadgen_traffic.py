"""Loadgen's load levels map onto the engine's schedules and mixes (no server)."""

from __future__ import annotations

import pytest

from tools.load.schedules import Bursty, ClosedLoop, Constant, Poisson, Trace
from tools.loadgen.traffic import Traffic, load_trace, parse_priority_mix


@pytest.mark.parametrize(
    "traffic, schedule, label",
    [
        (Traffic(concurrency=4), ClosedLoop(4), "concurrency 4"),
        (Traffic(rate=40), Poisson(40), "poisson 40 req/s"),
        (Traffic(rate=40, distribution="constant"), Constant(40), "constant 40 req/s"),
        (Traffic(rate=20, burst_rate=200, burst_period_s=2.0), Bursty(20, 200, 2.0), "bursty 20/200 req/s every 2 s"),
        (Traffic(trace=(0.0, 0.5)), Trace((0.0, 0.5)), "trace (2 arrivals)"),
    ],
)
def test_each_load_level_is_one_engine_schedule(traffic: Traffic, schedule, label: str) -> None:
    assert traffic.schedule() == schedule
    assert traffic.label() == label


def test_a_trace_file_is_read_with_comments(tmp_path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("# offsets\n0.0\n0.5\n0.75\n1.0\n")
    assert load_trace(trace) == (0.0, 0.5, 0.75, 1.0)


def test_bad_trace_line_is_named(tmp_path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("0.1\nsoon\n")
    with pytest.raises(ValueError, match=r"trace\.txt:2: 'soon'"):
        load_trace(trace)


def test_the_priority_mix_and_timeout_become_the_engine_mix() -> None:
    mix = Traffic(concurrency=1, priority_mix=parse_priority_mix("1:0.2,2:0.8"), timeout_us=300, seed=5).mix()
    assert (mix.priorities, mix.timeout_us, mix.seed) == ({1: 0.2, 2: 0.8}, 300, 5)


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
