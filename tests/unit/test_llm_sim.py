"""The LLM step cost model and the step-level simulator, against hand-computed figures."""

from __future__ import annotations

import json

import pytest

from llm.contract import ScheduledChunk, SchedulerConfig
from llm.core import EngineCore
from tools.load.llm.figures import Slo
from tools.load.schedules import ClosedLoop
from tools.simulate.llm.engine_sim import EngineShape, EngineSimulation, Overheads, RequestShape, kv_bytes_per_token, num_blocks_for
from tools.simulate.llm.step_cost import FEATURES, StepCostModel, StepShape

TEN_MS = StepCostModel({name: (0.010 if name == "intercept" else 0.0) for name in FEATURES})


def model(intercept=0.0, prefill=0.0, decode=0.0, kv=0.0, pairs=0.0) -> StepCostModel:
    return StepCostModel(dict(zip(FEATURES, (intercept, prefill, decode, kv, pairs))))


def test_a_step_shape_counts_prefill_tokens_decodes_kv_positions_and_prefill_pairs():
    decode = ScheduledChunk(0, [5], 10, (0,), True)  # one token after 10 cached: a decode
    prefill = ScheduledChunk(1, [1, 2, 3, 4], 0, (1,), True)
    shape = StepShape.of([decode, prefill])
    assert shape == StepShape(prefill_tokens=4, decode_seqs=1, kv_tokens=11 + 4, prefill_pairs=4 * (0 + 2.5) / 1000)


def test_a_first_prompt_token_alone_is_a_prefill_not_a_decode():
    assert StepShape.of([ScheduledChunk(0, [7], 0, (0,), True)]) == StepShape(1, 0, 1, 0.001)


def test_the_predicted_step_time_is_the_linear_sum_of_its_features():
    cost = model(intercept=0.002, prefill=0.0001, decode=0.001, kv=0.000001, pairs=0.00001)
    # 2 ms + 100 x 0.1 ms + 4 x 1 ms + 1000 x 1 us + 50 x 10 us = 2 + 10 + 4 + 1 + 0.5 ms
    assert cost.seconds(StepShape(100, 4, 1000, 50.0)) == pytest.approx(0.0175)


def test_the_fit_recovers_the_coefficients_that_generated_the_times():
    truth = model(intercept=0.005, prefill=0.0004, decode=0.002, kv=0.00001, pairs=0.0003)
    shapes = [
        StepShape(p, d, kv, p * p / 2000)
        for p, d, kv in [(16, 0, 16), (256, 0, 256), (0, 1, 100), (0, 8, 4000), (0, 32, 900), (64, 4, 600), (128, 0, 900)]
    ]
    fitted = StepCostModel.fitted(shapes, [truth.seconds(s) for s in shapes])
    for name in FEATURES:
        assert fitted.coefficients[name] == pytest.approx(truth.coefficients[name], rel=1e-6, abs=1e-12)
    assert fitted.fit["max_rel_error"] < 1e-6


def test_the_fit_never_gives_a_feature_a_negative_cost():
    shapes = [
        StepShape(0, 1, 10),
        StepShape(0, 2, 20),
        StepShape(0, 4, 40),
        StepShape(0, 8, 80),
        StepShape(10, 0, 10),
        StepShape(20, 0, 20),
    ]
    seconds = [0.010, 0.009, 0.008, 0.007, 0.012, 0.014]  # decodes that get cheaper: noise, not a rule
    fitted = StepCostModel.fitted(shapes, seconds)
    assert min(fitted.coefficients.values()) >= 0.0


def test_a_cost_model_survives_a_round_trip_through_json_and_other_files_are_refused(tmp_path):
    path = tmp_path / "cost.json"
    cost = model(intercept=0.003, decode=0.001)
    cost.save(path)
    assert StepCostModel.load(path).coefficients == cost.coefficients
    other = tmp_path / "encoder.json"
    other.write_text(json.dumps({"steps": {}}))
    with pytest.raises(ValueError, match="not an LLM step cost model"):
        StepCostModel.load(other)


def simulate(config: SchedulerConfig, requests, seconds: float, streams: int, cost: StepCostModel = TEN_MS, **kwargs):
    sim = EngineSimulation(cost, config, EngineShape(num_blocks=64), requests, seconds=seconds, drain_s=10.0, **kwargs)
    return sim.run(ClosedLoop(streams))


def test_one_stream_gets_a_token_per_step_and_sends_its_next_request_when_the_last_ends():
    # prefill step -> token 1 at 10 ms, decodes -> tokens 2 and 3 at 20 and 30 ms; the next
    # request leaves at 30 ms (before the 35 ms level end) and ends at 60 ms; then none leaves.
    result = simulate(SchedulerConfig(), [RequestShape(8, 3)], seconds=0.035, streams=1)
    first, second = result.records
    assert first.token_times == pytest.approx([0.01, 0.02, 0.03])
    assert second.sent_s == pytest.approx(0.03)
    assert second.token_times == pytest.approx([0.04, 0.05, 0.06])
    figures = result.figures(Slo(ttft_s=1.0, tpot_s=1.0))
    assert figures.duration_s == pytest.approx(0.06)
    assert figures.output_tokens_per_s == pytest.approx(6 / 0.06)
    assert figures.ttft_p50_ms == pytest.approx(10.0)
    assert figures.tpot_p50_ms == pytest.approx(10.0)


def test_continuous_batching_shares_steps_while_one_at_a_time_makes_the_second_stream_wait():
    requests = [RequestShape(8, 3)]
    batched = simulate(SchedulerConfig(mode="iteration"), requests, seconds=0.001, streams=2)
    serial = simulate(SchedulerConfig(mode="none"), requests, seconds=0.001, streams=2)
    assert [r.ttft_s for r in batched.records] == pytest.approx([0.01, 0.01])
    assert [r.ttft_s for r in serial.records] == pytest.approx([0.01, 0.04])  # after the first's 3 steps


def test_a_token_budget_splits_a_long_prompt_into_chunks_one_step_each():
    # 100 prompt tokens under a 32-token chunk: ceil(100/32) = 4 prefill steps before the first token
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32, long_prefill_token_threshold=32)
    result = simulate(config, [RequestShape(100, 2)], seconds=0.001, streams=1)
    assert result.records[0].ttft_s == pytest.approx(0.04)
    assert result.steps == 5


def test_requests_of_equal_length_never_share_prompt_blocks_so_each_pays_its_whole_prefill():
    # 64-token prompts under prefix caching (on by default): the second request, sent when the
    # first ends, still needs its 64-token prefill step (10 ms + 64 ms) before its first token.
    cost = model(intercept=0.01, prefill=0.001)
    result = simulate(SchedulerConfig(), [RequestShape(64, 1)], seconds=0.075, streams=1, cost=cost)
    first, second = result.records[:2]
    assert first.ttft_s == pytest.approx(0.074)
    assert second.ttft_s == pytest.approx(0.074)


def test_step_time_follows_the_cost_model_of_the_planned_shape():
    cost = model(intercept=0.001, prefill=0.001, decode=0.002)
    # prefill of 10 tokens: 1 + 10 = 11 ms; each decode: 1 + 2 = 3 ms
    result = simulate(SchedulerConfig(), [RequestShape(10, 3)], seconds=0.001, streams=1, cost=cost)
    assert result.records[0].token_times == pytest.approx([0.011, 0.014, 0.017])


def test_request_overhead_delays_the_first_token_by_the_round_trip_and_per_token_work_lengthens_steps():
    result = simulate(
        SchedulerConfig(), [RequestShape(8, 2)], seconds=0.001, streams=1, overheads=Overheads(request_s=0.004, per_token_s=0.001)
    )
    # in at 2 ms, steps of 11 ms, each token back 2 ms later
    assert result.records[0].token_times == pytest.approx([0.002 + 0.011 + 0.002, 0.002 + 0.022 + 0.002])


def test_requests_still_streaming_after_the_drain_are_cut():
    sim = EngineSimulation(TEN_MS, SchedulerConfig(), EngineShape(num_blocks=64), [RequestShape(8, 100)], seconds=0.001, drain_s=0.5)
    (record,) = sim.run(ClosedLoop(1)).records
    assert record.outcome == "cut"
    assert record.tokens_out == 50


def test_kv_blocks_follow_the_checkpoint_dimensions():
    smollm2 = {"num_layers": 30, "num_kv_heads": 3, "head_dim": 64}
    assert kv_bytes_per_token(smollm2) == 2 * 30 * 3 * 64 * 4  # 46,080 bytes in float32
    assert num_blocks_for(2**30, 16, kv_bytes_per_token(smollm2)) == 2**30 // (46_080 * 16)


def test_validation_reports_the_median_absolute_error_per_figure_against_its_goal():
    from tools.simulate.llm.validate import relative_error, summarize

    assert relative_error(110.0, 100.0) == pytest.approx(0.10)
    assert relative_error(1.0, None) is None
    rows = [
        {"errors": {"output_tokens_per_s": 0.05, "ttft_p99_ms": -0.30, "tpot_p50_ms": None}},
        {"errors": {"output_tokens_per_s": -0.08, "ttft_p99_ms": 0.10, "tpot_p50_ms": 0.15}},
        {"errors": {"output_tokens_per_s": 0.20, "ttft_p99_ms": 0.50, "tpot_p50_ms": -0.05}},
    ]
    summary = summarize(rows)
    assert summary["output_tokens_per_s"] == {"median_abs_error": 0.08, "goal": 0.10, "met": True, "rows": 3}
    assert summary["ttft_p99_ms"]["median_abs_error"] == 0.30 and not summary["ttft_p99_ms"]["met"]
    assert summary["tpot_p50_ms"]["median_abs_error"] == pytest.approx(0.10) and summary["tpot_p50_ms"]["rows"] == 2


def test_a_step_of_two_rows_or_more_pays_the_multi_row_jump_and_one_row_does_not():
    cost = StepCostModel({**dict.fromkeys(FEATURES, 0.0), "intercept": 0.028, "multi_row": 0.020})
    assert cost.seconds(StepShape(0, 1, 100)) == pytest.approx(0.028)  # one decode: the matrix-vector path
    assert cost.seconds(StepShape(0, 2, 200)) == pytest.approx(0.048)  # two decodes: 28 + 20 ms
    assert cost.seconds(StepShape(1, 0, 1, 0.001)) == pytest.approx(0.028)  # a one-token prompt is one row too


def test_a_cost_model_saved_before_the_multi_row_feature_still_loads_with_it_at_zero(tmp_path):
    path = tmp_path / "old.json"
    old = {name: 0.001 for name in FEATURES if name != "multi_row"}
    path.write_text(json.dumps({"kind": "llm-step-cost", "coefficients": old}))
    assert StepCostModel.load(path).coefficients["multi_row"] == 0.0


def test_a_level_starting_further_on_in_the_workload_simulates_those_requests_as_the_live_driver_sends_them():
    # request 1 of the workload (100 prompt tokens, 4 chunks of 32) first, then request 0 (8 tokens, one step)
    config = SchedulerConfig(max_num_seqs=4, max_num_batched_tokens=32, long_prefill_token_threshold=32)
    requests = [RequestShape(8, 2), RequestShape(100, 2)]
    result = simulate(config, requests, seconds=0.055, streams=1, first_request=1)
    first, second = result.records[:2]
    assert (first.tokens_in, second.tokens_in) == (100, 8)
    assert first.ttft_s == pytest.approx(0.04)
    assert second.ttft_s == pytest.approx(0.01)


def test_the_simulator_runs_the_servers_engine_core_so_a_request_ends_with_its_finish_reason(monkeypatch):
    """One source of truth for the step: intake, outputs and finish reasons are EngineCore's."""
    added: list[str] = []
    real_add = EngineCore.add_request
    monkeypatch.setattr(EngineCore, "add_request", lambda core, request: (added.append(request.request_id), real_add(core, request)))
    result = simulate(SchedulerConfig(), [RequestShape(8, 3)], seconds=0.035, streams=1)
    assert added == ["0", "1"]
    assert [r.finish_reason for r in result.records] == ["length", "length"]
