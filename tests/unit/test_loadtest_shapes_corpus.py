"""Load profiles as functions of time, and the request-text sampler (no server)."""

from __future__ import annotations

import random

import pytest

from loadtest.corpus import TextSampler, load_corpus
from loadtest.profiles import PROFILES, ShapeParams, burst, step, tick_at, wave

PARAMS = ShapeParams(users=40, spawn_rate=40, run_time_s=60, burst_every_s=15, burst_length_s=5)


def test_every_shape_stops_at_run_time() -> None:
    for profile in PROFILES.values():
        assert tick_at(profile, 59.9, PARAMS) is not None
        assert tick_at(profile, 60.0, PARAMS) is None


def test_step_climbs_in_four_steps_to_the_peak() -> None:
    users = [step(t, PARAMS) for t in (0, 15, 30, 45, 59)]
    assert users == [10, 20, 30, 40, 40]


def test_burst_spikes_to_the_peak_over_a_quarter_base() -> None:
    users = [burst(t, PARAMS) for t in (0, 4.9, 5, 14.9, 15, 21)]
    assert users == [40, 40, 10, 10, 40, 10]


def test_wave_runs_from_a_tenth_to_the_peak_and_back() -> None:
    assert [wave(t, PARAMS) for t in (0, 30, 60)] == [4, 40, 4]


def test_corpus_mixes_lengths_and_languages() -> None:
    passages = load_corpus()
    assert {p.length for p in passages} == {"short", "long"}
    assert {"en", "zh"} <= {p.language for p in passages}


def test_repeat_share_controls_how_many_requests_repeat() -> None:
    sampler = TextSampler(load_corpus(), repeat_share=0.3, rng=random.Random(7))
    pool = sampler.pool("short", 1)
    requests = [sampler.sample("short") for _ in range(2000)]
    repeated = sum(request in pool for request in requests)
    assert 0.25 < repeated / len(requests) < 0.35
    unique = [r[0] for r in requests if r not in pool]
    assert len(set(unique)) == len(unique)  # never a cache hit by accident


def test_bulk_requests_carry_the_requested_number_of_texts() -> None:
    sampler = TextSampler(load_corpus(), repeat_share=0.5, rng=random.Random(1))
    assert all(len(sampler.sample("long", 4)) == 4 for _ in range(50))


def test_repeat_share_outside_unit_interval_is_refused() -> None:
    with pytest.raises(ValueError, match="repeat_share"):
        TextSampler(load_corpus(), repeat_share=1.5)
