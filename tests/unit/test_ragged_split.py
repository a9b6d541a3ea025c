"""The ragged split of our ONNX Runtime backend: cost curve, DP plan, row assembly (no server)."""

from __future__ import annotations

import numpy as np
import pytest

from backends.onnxruntime.ragged import CostTracker, RunCostModel, SplitExecution, calibrate_run_cost, plan_runs, row_lengths

# 10 units per run, 1 unit per token: small numbers that make the hand-computed costs readable.
UNIT = RunCostModel(per_run_s=10.0, per_token_s=1.0)


def test_two_queries_and_two_passages_split_into_a_short_and_a_long_run() -> None:
    # together: 10 + 4 * 100 = 410; [2, 3] + [100, 100]: (10 + 2 * 3) + (10 + 2 * 100) = 226;
    # [2], [3], [100, 100]: 12 + 13 + 210 = 235
    assert plan_runs([2, 3, 100, 100], UNIT) == [[0, 1], [2, 3]]


def test_runs_come_shortest_first_and_name_the_original_rows() -> None:
    assert plan_runs([100, 2, 100, 3], UNIT) == [[1, 3], [0, 2]]


def test_rows_of_close_lengths_stay_in_one_run_when_a_split_costs_more_than_the_padding() -> None:
    # together: 10 + 3 * 12 = 46; [10] + [11, 12]: 20 + 34 = 54
    assert plan_runs([10, 11, 12], UNIT) == [[0, 1, 2]]


def test_a_large_per_run_cost_keeps_everything_in_one_run() -> None:
    gpu_like = RunCostModel(per_run_s=1000.0, per_token_s=1.0)
    # together: 1000 + 2 * 100 = 1200; apart: 1002 + 1100 = 2102
    assert plan_runs([2, 100], gpu_like) == [[0, 1]]


def test_the_quadratic_term_prices_long_rows_higher() -> None:
    # linear, per run 30: together 30 + 2 * 40 = 110, apart (30 + 20) + (30 + 40) = 120 -> together
    assert plan_runs([20, 40], RunCostModel(30.0, 1.0)) == [[0, 1]]
    # plus 0.05 per token pair: together 30 + 2 * 40 * (1 + 2) = 270,
    # apart (30 + 20 * (1 + 1)) + (30 + 40 * (1 + 2)) = 70 + 150 = 220 -> apart
    assert plan_runs([20, 40], RunCostModel(30.0, 1.0, 0.05)) == [[0], [1]]


def test_equal_costs_prefer_fewer_runs() -> None:
    # together: 10 + 2 * 10 = 30; apart: 20 + 20 = 40; [5, 15]: together 10 + 30 = 40, apart 15 + 25 = 40 (tie)
    assert plan_runs([5, 15], UNIT) == [[0, 1]]


def test_max_rows_caps_every_run() -> None:
    runs = plan_runs([8] * 5, UNIT, max_rows=2)
    assert sorted(len(run) for run in runs) == [1, 2, 2]
    assert sorted(i for run in runs for i in run) == [0, 1, 2, 3, 4]


def test_an_empty_execution_has_no_runs() -> None:
    assert plan_runs([], UNIT) == []


def test_row_lengths_are_one_past_the_last_attended_position() -> None:
    mask = np.array([[1, 1, 1, 0, 0], [1, 0, 0, 0, 0], [1, 1, 1, 1, 1], [0, 0, 0, 0, 0]])
    assert row_lengths(mask).tolist() == [3, 1, 5, 1]


def test_fit_recovers_known_terms_and_never_goes_negative() -> None:
    truth = RunCostModel(0.002, 0.0002, 2e-7)
    samples = [(rows, length, truth.cost(rows, length)) for rows, length in ((1, 16), (8, 16), (1, 128), (4, 128), (1, 256))]
    fitted = RunCostModel.fit(samples)
    assert fitted.per_run_s == pytest.approx(truth.per_run_s, rel=1e-6)
    assert fitted.per_token_s == pytest.approx(truth.per_token_s, rel=1e-6)
    assert fitted.per_token_pair_s == pytest.approx(truth.per_token_pair_s, rel=1e-6)
    # long rows measured faster per token than short ones (noise): no negative attention term
    noisy = [(1, 16, 0.004), (8, 16, 0.02), (1, 128, 0.02), (4, 128, 0.07), (1, 256, 0.03)]
    assert min(RunCostModel.fit(noisy).per_token_pair_s, RunCostModel.fit(noisy).per_run_s) >= 0


def test_calibrate_interleaves_the_shapes_and_keeps_each_ones_fastest_round() -> None:
    truth = RunCostModel(0.001, 0.0001)
    clock_now = [0.0]
    calls = []

    def run(rows: int, length: int) -> None:
        calls.append((rows, length))
        disturbed = 4 <= len(calls) <= 6  # the whole first timed round runs on a busy machine
        clock_now[0] += truth.cost(rows, length) * (5.0 if disturbed else 1.0)

    shapes = ((1, 16), (8, 16), (1, 128))
    fitted, samples = calibrate_run_cost(run, shapes=shapes, rounds=3, clock=lambda: clock_now[0])
    assert calls == [*shapes, *shapes * 3]  # one untimed run each, then round after round
    assert [s[2] for s in samples] == pytest.approx([truth.cost(r, n) for r, n, _ in samples])
    assert fitted.per_token_s == pytest.approx(truth.per_token_s, rel=1e-6)


def test_the_tracker_corrects_a_bad_calibration_from_served_runs() -> None:
    truth = RunCostModel(0.0015, 0.00018)
    tracker = CostTracker(RunCostModel(0.03, 0.00005), refit_every=64)  # a busy-machine calibration: joins everything
    rng = np.random.default_rng(0)
    refits = 0
    for index in range(256):
        rows, length = int(rng.integers(1, 17)), int(rng.integers(5, 257))
        slowed = 3.0 if index % 10 == 0 else 1.0  # every tenth run shares the CPU with something else
        refits += tracker.observe(rows, length, truth.cost(rows, length) * slowed)
    assert refits == 4
    assert tracker.model.per_run_s == pytest.approx(truth.per_run_s, rel=0.05)
    assert tracker.model.per_token_s == pytest.approx(truth.per_token_s, rel=0.05)


def test_a_pinned_curve_is_never_refitted() -> None:
    pinned = RunCostModel(0.03, 0.00005)
    tracker = CostTracker(pinned, adaptive=False)
    for _ in range(200):
        tracker.observe(4, 100, 1.0)
    assert tracker.model == pinned


def test_runs_of_one_shape_cannot_tell_per_run_from_per_token_cost() -> None:
    start = RunCostModel(0.001, 0.0001)
    tracker = CostTracker(start, refit_every=8, min_samples=8)
    assert not any(tracker.observe(4, 64, 0.05) for _ in range(64))
    assert tracker.model == start


def test_cost_parameters_come_from_the_config_or_are_left_to_calibration() -> None:
    assert RunCostModel.from_parameters({}) is None
    pinned = RunCostModel.from_parameters({"split_cost_per_run_us": "1500", "split_cost_per_token_us": "0.2"})
    assert pinned == RunCostModel(0.0015, 2e-7)
    with pytest.raises(ValueError, match="both"):
        RunCostModel.from_parameters({"split_cost_per_run_us": "1500"})


def _request(lengths: list[int], width: int, first_id: int) -> dict[str, np.ndarray]:
    ids = np.zeros((len(lengths), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, :length] = np.arange(first_id, first_id + length)
        mask[row, :length] = 1
    return {"INPUT_IDS": ids, "ATTENTION_MASK": mask}


def _fake_model(feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Per row: the sum of its real ids and its real length (padding-independent, like pooling)."""
    mask = feeds["ATTENTION_MASK"]
    return [np.stack([(feeds["INPUT_IDS"] * mask).sum(axis=1), mask.sum(axis=1)], axis=1)]


def test_split_execution_returns_each_request_its_own_rows_whatever_the_runs() -> None:
    requests = [_request([3], 3, 100), _request([250, 5], 250, 200), _request([4], 4, 300), _request([240], 240, 400)]
    plan = SplitExecution(requests, "ATTENTION_MASK", UNIT)
    assert [sorted(plan.lengths[i] for i in run) for run in plan.runs] == [[3, 4, 5], [240, 250]]
    completed = []
    for run in plan.runs:
        feeds = plan.feeds(run, [("INPUT_IDS", np.int64), ("ATTENTION_MASK", np.int64)])
        assert feeds["INPUT_IDS"].shape == (len(run), max(plan.lengths[i] for i in run))
        completed.append(plan.store(run, _fake_model(feeds)))
    assert [sorted(c) for c in completed] == [[0, 2], [1, 3]]  # the short requests complete with the first run
    for position, request in enumerate(requests):
        np.testing.assert_array_equal(plan.outputs(position)[0], _fake_model(request)[0])
