"""Simulated traffic is the load driver's traffic: same arrival schedules, same text lengths."""

from __future__ import annotations

import numpy as np
import pytest

from tools.simulate.live_load import LengthMix, MixedTexts, Phase, Traffic, arrivals, sample_lengths
from tools.simulate.workload import Lengths, Workload


def test_open_loop_arrivals_are_the_load_drivers_schedule():
    traffic = Traffic(rate=50.0, seed=3)
    simulated = Workload(traffic, requests=200).arrivals_ms()
    assert len(simulated) == 200
    np.testing.assert_allclose(simulated / 1000.0, arrivals([Phase(traffic.schedule(), 10.0)], traffic.seed)[:200])


def test_a_trace_cycles_to_the_requested_count():
    workload = Workload(Traffic(trace=(0.0, 0.5, 1.0)), requests=7)
    np.testing.assert_allclose(workload.arrivals_ms(), [0, 500, 1000, 1000, 1500, 2000, 2000])


def test_bursty_traffic_sends_faster_in_its_burst_half():
    arrivals = Workload(Traffic(rate=10.0, burst_rate=100.0, burst_period_s=2.0), requests=2_000).arrivals_ms() / 1000.0
    in_burst = ((arrivals % 2.0) >= 1.0).mean()
    assert in_burst == pytest.approx(100 / 110, abs=0.05)


def test_mixed_lengths_are_drawn_as_the_load_driver_draws_its_texts():
    texts = MixedTexts(LengthMix(), seed=0, nonce=0)
    expected = [texts.request(i).tokens for i in range(50)]
    assert Lengths("mixed").tokens(50).tolist() == expected


def test_sample_lengths_cycle_in_the_load_drivers_order():
    assert Lengths("samples").tokens(10).tolist() == [*sample_lengths(), *sample_lengths()][:10]


@pytest.mark.parametrize("text", ["fixed:0", "fixed:x", "long"])
def test_bad_length_specs_name_the_problem(text: str):
    with pytest.raises(ValueError, match=r"fixed|samples, mixed"):
        Lengths.parse(text)
