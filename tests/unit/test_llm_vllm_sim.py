"""The simulator of a vLLM config: its knobs mapped onto our scheduler, vLLM's lone-request chunk
rule, and the step cost model fitted from vLLM's recorded steps (records made by hand here; the
integration test records the real engine)."""

from __future__ import annotations

import json

import pytest

from llm.serving.knobs import parameters_from_pbtxt
from tools.load.schedules import ClosedLoop
from tools.simulate.llm.engine_sim import EngineShape, EngineSimulation, RequestShape
from tools.simulate.llm.setup import DEFAULT_CONFIG, VLLM_CONFIG, resolve_engine, simulation_of
from tools.simulate.llm.step_cost import FEATURES, StepCostModel, StepShape
from tools.simulate.llm.vllm_calibrate import (
    VllmDesign,
    calibration_parameters,
    elapsed_check,
    fit_recorded,
    step_seconds,
    step_shape,
)

VLLM = parameters_from_pbtxt(VLLM_CONFIG)
SMOLLM2 = {"num_layers": 30, "num_kv_heads": 3, "head_dim": 64, "max_position_embeddings": 8192}


def test_a_vllm_config_runs_our_scheduler_iteration_level_without_waiting_and_no_chunk_cap_is_the_budget():
    config, engine = simulation_of({**VLLM, "max_num_seqs": "8", "max_num_batched_tokens": "256"}, SMOLLM2)
    assert (config.mode, config.max_wait_ms, config.max_num_seqs, config.max_num_batched_tokens) == ("iteration", 0.0, 8, 256)
    assert config.long_prefill_token_threshold == 256  # vLLM's 0: no cap below the budget
    capped, _ = simulation_of({**VLLM, "long_prefill_token_threshold": "64"}, SMOLLM2)
    assert capped.long_prefill_token_threshold == 64
    assert engine.policy == "vllm"


def test_a_vllm_config_has_the_kv_blocks_vllm_allocates_from_kv_cache_bytes_in_bfloat16():
    # 1 GiB / (128 tokens x 2 (K, V) x 30 layers x 3 heads x 64 dims x 2 bytes) = 364 blocks, as vLLM reports
    _, engine = simulation_of(VLLM, SMOLLM2)
    assert (engine.num_blocks, engine.block_size) == (364, 128)
    _, half = simulation_of({**VLLM, "kv_cache_bytes": str(2**29), "block_size": "64"}, SMOLLM2)
    assert (half.num_blocks, half.block_size) == (364, 64)


def test_a_vllm_config_that_lets_vllm_size_its_cache_is_refused_by_the_simulator():
    with pytest.raises(ValueError, match="kv_cache_bytes"):
        simulation_of({**VLLM, "kv_cache_bytes": "0"}, SMOLLM2)


def test_the_engine_comes_from_the_flag_or_from_the_configs_parameters_and_the_two_must_agree():
    assert resolve_engine(None, None) == ("native", DEFAULT_CONFIG)
    assert resolve_engine("vllm", None) == ("vllm", VLLM_CONFIG)
    assert resolve_engine(None, VLLM_CONFIG) == ("vllm", VLLM_CONFIG)
    with pytest.raises(ValueError, match="vllm engine"):
        resolve_engine("native", VLLM_CONFIG)


TEN_MS = StepCostModel(dict(zip(FEATURES, (0.010, 0.0, 0.0, 0.0, 0.0))))


def chunks_of_first_request(policy: str, streams: int) -> list[int]:
    """Steps until the first request's first token, with a 64-token chunk cap and a 512 budget."""
    config, _ = simulation_of({**VLLM, "long_prefill_token_threshold": "64"}, SMOLLM2)
    engine = EngineShape(num_blocks=364, block_size=128, policy=policy)
    result = EngineSimulation(TEN_MS, config, engine, [RequestShape(300, 2)], seconds=0.001, drain_s=5.0).run(ClosedLoop(streams))
    return [round(record.ttft_s / 0.010) for record in result.records]


def test_vllm_lifts_the_chunk_cap_for_a_lone_request_and_keeps_it_when_two_are_in():
    assert chunks_of_first_request("vllm", 1) == [1]  # 300 tokens in one chunk of the budget
    assert chunks_of_first_request("native", 1) == [5]  # ceil(300 / 64)
    assert chunks_of_first_request("vllm", 2) == [5, 5]  # both capped: 64 + 64 a step


def test_an_engine_shape_names_a_known_policy():
    with pytest.raises(ValueError, match="policy"):
        EngineShape(num_blocks=4, policy="sglang")


def test_a_recorded_step_reads_decodes_past_the_prompt_and_chunks_after_computed_context():
    # one decode at context 64, a fresh 64-token prompt, a 128-token chunk after 512 computed tokens
    shape = step_shape({"chunks": [[1, 64, 64], [64, 0, 64], [128, 512, 640]]})
    assert shape == StepShape.of_pieces([(1, 64, True), (64, 0, False), (128, 512, False)])
    assert (shape.decode_seqs, shape.prefill_tokens, shape.kv_tokens) == (1, 192, 65 + 64 + 640)
    assert shape.prefill_pairs == pytest.approx((64 * 32.5 + 128 * (512 + 64.5)) / 1000)
    # a one-token chunk of a prompt (its last token after a cached prefix) is a prefill, not a decode
    assert step_shape({"chunks": [[1, 255, 256]]}).decode_seqs == 0


def step(start: float, seconds: float, chunks: list, busy_after: bool = True, elapsed_ms: float | None = None) -> dict:
    record = {"started": start, "ended": start + seconds, "scheduled_s": 0.0001, "busy_after": busy_after, "chunks": chunks}
    if elapsed_ms is not None:
        record["vllm_elapsed_ms"] = elapsed_ms
        record["vllm_ctx_tokens"] = sum(c for c, s, p in chunks if s < p)
    return record


def test_a_steps_seconds_run_to_the_next_step_while_the_engine_is_busy_and_to_its_own_end_otherwise():
    steps = [
        step(0.0, 0.040, [[1, 64, 64]]),  # the next starts 2 ms after its end: 42 ms
        step(0.042, 0.040, [[1, 65, 64]], busy_after=False),  # the engine then waited: 40 ms
        step(1.000, 0.050, [[1, 66, 64]]),  # the last: 50 ms
    ]
    assert step_seconds(steps) == pytest.approx([0.042, 0.040, 0.050])


def synthetic_records(truth: StepCostModel) -> dict:
    """Steps of many shapes timed by `truth`, each shape twice (one round 10 % slow), back to back."""
    layouts = [[[n, 0, n]] for n in (16, 64, 128, 256, 512)]
    layouts += [[[256, 512, 768]], [[512, 1024, 1536]]]
    layouts += [[[1, c, c]] * b for b in (1, 2, 4, 8, 16) for c in (64, 512)]
    layouts += [[[1, 256, 256]] * 8 + [[128, 0, 128]], [[1, 128, 128]] * 4 + [[384, 0, 384]]]
    steps, now = [], 0.0
    for slow in (1.0, 1.1, 1.0):
        for chunks in layouts:
            seconds = truth.seconds(step_shape({"chunks": chunks})) * slow
            steps.append(step(now, seconds - 0.0005, chunks, elapsed_ms=(seconds - 0.0015) * 1000))
            now += seconds
    steps[-1]["busy_after"] = False
    return {"steps": steps, "vllm": "0.32.0", "knobs": {"dtype": "bfloat16", "block_size": 128, "enforce_eager": False}, "kv_blocks": 364}


def test_the_fit_on_recorded_steps_recovers_the_engines_costs_and_says_it_was_vllm():
    truth = StepCostModel(dict(zip(FEATURES, (0.030, 0.0003, 0.0006, 1e-6, 0.0002, 0.002))))
    model = fit_recorded(synthetic_records(truth))
    assert model.engine_kind == "vllm"
    assert (model.engine["dtype"], model.engine["block_size"], model.engine["vllm"]) == ("bfloat16", 128, "0.32.0")
    assert model.fit["median_rel_error"] < 0.01  # the median of three rounds is the undisturbed time
    assert model.fit["samples"] == len(synthetic_records(truth)["steps"]) // 3
    assert set(model.fit["median_rel_error_by_kind"]) == {"prefill", "decode", "mixed"}
    for name in ("intercept", "prefill_tokens", "decode_seqs"):
        assert model.coefficients[name] == pytest.approx(truth.coefficients[name], rel=0.05)


def test_the_recorded_times_are_checked_against_vllms_own_iteration_details():
    steps = [step(0.0, 0.041, [[64, 0, 64]], elapsed_ms=40.0), step(0.05, 0.0205, [[1, 64, 64]], elapsed_ms=20.0)]
    check = elapsed_check(steps)
    assert check["steps"] == 2 and check["composition_agrees"]
    assert check["median_extra_ms"] == pytest.approx(0.75)
    assert check["median_ratio"] == pytest.approx((1.025 + 1.025) / 2)
    steps[0]["vllm_ctx_tokens"] = 63
    assert not elapsed_check(steps)["composition_agrees"]
    assert elapsed_check([step(0.0, 0.04, [[1, 64, 64]])]) is None


def test_a_vllm_cost_model_survives_json_and_a_native_one_is_refused_for_vllm(tmp_path):
    from tools.simulate.llm.cli import load_cost_model

    truth = StepCostModel(dict(zip(FEATURES, (0.030, 0.0003, 0.0006, 1e-6, 0.0002, 0.002))))
    path = tmp_path / "vllm.json"
    fit_recorded(synthetic_records(truth)).save(path)
    assert load_cost_model(path, "vllm").engine_kind == "vllm"
    native = tmp_path / "native.json"
    truth.save(native)
    assert json.loads(native.read_text()).get("engine") == {}
    with pytest.raises(ValueError, match="native engine"):
        load_cost_model(native, "vllm")


def test_the_design_shares_a_prompt_prefix_where_a_chunk_must_follow_cached_context():
    design = VllmDesign.tiny()
    cached = next(s for s in design.scenarios() if "cached" in s["name"])
    first, second = (wave[0] for wave in cached["waves"])
    assert first["seed"] == second["seed"] and second["prompt"] == first["prompt"] + 64
    mixed = next(s for s in design.scenarios() if "+" in s["name"])
    assert len(mixed["waves"][0]) == 4 and mixed["waves"][1][0]["prompt"] == 128
    assert calibration_parameters(VLLM, design)["max_num_seqs"] == "16"  # the config's 16 already holds 4 + 1
    assert calibration_parameters(VLLM, VllmDesign())["max_num_seqs"] == "32"


def test_live_runs_on_vllm_pin_the_dtype_block_size_and_compilation_the_cost_model_was_measured_with():
    from tools.simulate.llm.live import engine_parameters

    measured = {"engine": "vllm", "dtype": "bfloat16", "block_size": 128, "enforce_eager": False, "threads": None}
    assert engine_parameters(measured) == {"dtype": "bfloat16", "block_size": "128", "enforce_eager": "false"}
