"""The LLM tuner's SLO, space and order, and the capacity planner, on hand-made cost models."""

from __future__ import annotations

import pytest

from llm.contract import SchedulerConfig
from tools.load.llm.figures import LevelFigures
from tools.simulate.llm.capacity import plan_capacity
from tools.simulate.llm.engine_sim import EngineShape, RequestShape
from tools.simulate.llm.predict import LevelPlan
from tools.simulate.llm.slo import LlmSlo
from tools.simulate.llm.step_cost import FEATURES, StepCostModel
from tools.tune.llm.space import LlmSpace, label, score


def figures(ttft_p99=500.0, tpot_p99=50.0, goodput=1.0, tokens=100.0, requests=10, completed=10) -> LevelFigures:
    return LevelFigures(
        requests=requests,
        completed=completed,
        outcomes={"ok": completed},
        duration_s=10.0,
        output_tokens_per_s=tokens,
        requests_per_s=completed / 10,
        goodput_rps=goodput,
        good_share=None,
        ttft_p50_ms=None,
        ttft_p99_ms=ttft_p99,
        tpot_p50_ms=None,
        tpot_p99_ms=tpot_p99,
        itl_p99_ms=None,
        e2e_p50_ms=None,
        mean_tokens_in=None,
        mean_tokens_out=None,
    )


def test_an_slo_reads_seconds_and_milliseconds():
    assert LlmSlo.parse("ttft_p99=1s,tpot_p99=100ms") == LlmSlo(1.0, 0.1)
    assert LlmSlo.parse("tpot_p99=0.25") == LlmSlo(1.0, 0.25)
    with pytest.raises(ValueError, match="ttft_p99=1s"):
        LlmSlo.parse("ttft=1s")


def test_a_level_meets_the_slo_only_inside_both_percentiles_with_every_request_completed():
    slo = LlmSlo(1.0, 0.1)
    assert slo.met_by(figures())
    assert not slo.met_by(figures(ttft_p99=1001.0))
    assert not slo.met_by(figures(tpot_p99=101.0))
    assert not slo.met_by(figures(completed=9))


def test_candidates_meeting_the_slo_outrank_faster_ones_that_miss_it_and_then_goodput_decides():
    slo = LlmSlo(1.0, 0.1)
    inside_slow = figures(goodput=0.5, tokens=50.0)
    inside_fast = figures(goodput=0.8, tokens=80.0)
    outside_fast = figures(ttft_p99=3000.0, goodput=0.9, tokens=200.0)
    ranked = sorted([outside_fast, inside_slow, inside_fast], key=lambda f: score(f, slo), reverse=True)
    assert ranked == [inside_fast, inside_slow, outside_fast]


def test_the_space_leaves_out_budgets_below_the_sequence_cap_and_chunks_above_the_budget():
    space = LlmSpace(max_num_seqs=(4, 64), max_num_batched_tokens=(32, 128), long_prefill_token_threshold=(64,), max_wait_ms=(0.0,))
    candidates = list(space.candidates())
    # (4, 32): chunk 64 > 32; (64, 32) and (64, 128)... 128 >= 64 keeps (64, 128); (4, 128) kept
    assert [(c["max_num_seqs"], c["max_num_batched_tokens"]) for c in candidates] == [("4", "128"), ("64", "128")]
    assert label(candidates[0]) == "seqs=4 budget=128 chunk=64 policy=fcfs wait_ms=0"


TEN_MS_PLUS = StepCostModel(dict(zip(FEATURES, (0.010, 0.0, 0.002, 0.0, 0.0))))  # 10 ms + 2 ms per decoding sequence


def plan(rate: float, slo: LlmSlo, num_blocks: int = 256, headroom: float = 0.2):
    shapes = [RequestShape(16, 8)]
    return plan_capacity(
        TEN_MS_PLUS, SchedulerConfig(), EngineShape(num_blocks=num_blocks), shapes, rate, slo, LevelPlan(10.0, 10.0), headroom, 16, 100
    )


def test_a_rate_one_replica_carries_with_headroom_needs_one_replica():
    result = plan(rate=1.0, slo=LlmSlo(1.0, 0.1))
    assert result.replicas == 1
    assert result.replica_capacity_rps >= 1.0 * 1.2


def test_replicas_are_the_fewest_whose_share_plus_headroom_fits_one_replicas_capacity():
    slo = LlmSlo(0.2, 0.05)
    one = plan(rate=1.0, slo=slo)
    many = plan(rate=one.replica_capacity_rps * 3, slo=slo)
    assert many.replicas >= 3
    assert many.replica_capacity_rps * many.replicas >= one.replica_capacity_rps * 3 * 1.2 * 0.97  # bisection tolerance


def test_a_cache_too_small_for_the_load_makes_kv_usage_the_signal():
    # 3 blocks of 16 tokens: one 24-token sequence needs 2, so a second one preempts or waits
    result = plan(rate=1.0, slo=LlmSlo(5.0, 1.0), num_blocks=3)
    assert result.signal == "kv_cache_usage"
    assert 0.0 < result.threshold <= 1.0
    assert result.kv_bytes_configured == 3 * 100


def test_live_runs_pin_the_engine_threads_and_dtype_the_cost_model_was_measured_with():
    from tools.simulate.llm.live import engine_parameters

    assert engine_parameters({"threads": 1, "dtype": "float32"}) == {"num_threads": "1", "dtype": "float32"}
    assert engine_parameters({"threads": 2, "dtype": "bfloat16", "weights": "int4", "attention": "paged"}) == {
        "num_threads": "2",
        "dtype": "bfloat16",
        "weights": "int4",
        "attention": "paged",
    }
    assert engine_parameters({}) == {}


def test_the_winner_is_written_into_the_config_parameters_keeping_the_header(tmp_path):
    from tools.repo.model_config import load_config
    from tools.simulate.llm.setup import DEFAULT_CONFIG
    from tools.tune.llm.command import write_winner

    out = tmp_path / "config.pbtxt"
    write_winner(DEFAULT_CONFIG, {"max_num_seqs": "4", "max_wait_ms": "50"}, out)
    written = load_config(out)
    assert written.parameters["max_num_seqs"].string_value == "4"
    assert written.parameters["max_wait_ms"].string_value == "50"
    assert written.parameters["mode"].string_value == load_config(DEFAULT_CONFIG).parameters["mode"].string_value
    assert out.read_text().startswith("#")


def test_tools_tune_hands_model_llm_to_the_llm_tuner(monkeypatch):
    import tools.tune.llm.command as command
    from tools.tune.__main__ import run

    seen = []
    monkeypatch.setattr(command, "run", lambda argv: seen.append(argv) or 0)
    assert run(["--model", "llm", "--simulate-only"]) == 0
    assert seen == [["--model", "llm", "--simulate-only"]]


def test_a_cost_model_of_another_weight_format_than_the_config_serves_is_named_in_a_warning(tmp_path, caplog):
    from llm.engine.precision import resolve_dtype
    from tools.simulate.llm.setup import DEFAULT_CONFIG, read_knobs
    from tools.tune.llm.command import choose_cost_model

    int4 = tmp_path / "int4.json"
    StepCostModel({name: 0.01 for name in FEATURES}, engine={"dtype": "bfloat16", "weights": "int4"}).save(int4)  # not the committed format
    with caplog.at_level("WARNING"):
        model, _ = choose_cost_model(str(int4), quick=True, engine="native", config=DEFAULT_CONFIG)
    assert model.engine["weights"] == "int4"
    assert "measured with weights int4, dtype bfloat16" in caplog.text and "the live levels run the model's format" in caplog.text

    caplog.clear()
    _, served = read_knobs(DEFAULT_CONFIG)
    same = tmp_path / "same.json"  # measured on what the committed config serves: no warning
    engine = {"dtype": resolve_dtype(served.dtype, served.device), "weights": served.weights}
    StepCostModel({name: 0.01 for name in FEATURES}, engine=engine).save(same)
    with caplog.at_level("WARNING"):
        choose_cost_model(str(same), quick=True, engine="native", config=DEFAULT_CONFIG)
    assert "measured with weights" not in caplog.text
