"""LoRA adapters in the LLM step simulator and tuner: the step cost's adapter terms, the
calibration's adapted shapes, `max_loras` enforced by the real scheduler, and the knob searched."""

from __future__ import annotations

import contextlib
import dataclasses
import json

import pytest

from llm.contract import ScheduledChunk, SchedulerConfig
from tools.bench.llm.lora import MIXED, Variant, with_adapters
from tools.load.llm.figures import LevelFigures
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LlmRequest
from tools.load.schedules import ClosedLoop
from tools.repo.model_config import load_config
from tools.simulate.llm import live
from tools.simulate.llm.calibrate import NO_ADAPTER, Design, chunks_of
from tools.simulate.llm.engine_sim import EngineShape, EngineSimulation, RequestShape
from tools.simulate.llm.predict import LevelPlan
from tools.simulate.llm.setup import AdapterMix, shapes_of
from tools.simulate.llm.slo import LlmSlo
from tools.simulate.llm.step_cost import FEATURES, StepCostModel, StepShape
from tools.tune.llm import command
from tools.tune.llm.simulated_space import SimulatedSpace
from tools.tune.llm.space import LlmSpace, label

# 10 ms a step, 2 ms per decoding sequence, 1 ms per adapted row, 5 ms per distinct adapter
LORA_COST = StepCostModel(
    {**dict.fromkeys(FEATURES, 0.0), "intercept": 0.010, "decode_seqs": 0.002, "lora_rows": 0.001, "lora_adapters": 0.005}
)


def test_a_step_shape_counts_the_rows_that_carry_an_adapter_and_the_distinct_adapters():
    chunks = [
        ScheduledChunk(0, [5], 10, (0,), True, adapter_slot=0),  # a decode on adapter 0
        ScheduledChunk(1, [6], 20, (1, 2), True, adapter_slot=0),  # another on adapter 0
        ScheduledChunk(2, [7], 30, (3, 4), True, adapter_slot=2),  # one on adapter 2
        ScheduledChunk(3, [1, 2, 3, 4], 0, (5,), True, adapter_slot=2),  # a prompt on adapter 2: 4 rows
        ScheduledChunk(4, [8], 40, (6, 7, 8), True),  # the base model
    ]
    shape = StepShape.of(chunks)
    assert (shape.lora_rows, shape.lora_adapters) == (3 + 4, 2)
    assert (shape.decode_seqs, shape.prefill_tokens) == (4, 4)
    assert StepShape.of(chunks[4:]) == StepShape(0, 1, 41)  # no adapter: no LoRA terms


def test_the_fit_recovers_known_coefficients_including_the_lora_terms():
    truth = StepCostModel(
        {
            "intercept": 0.030,
            "prefill_tokens": 0.0012,
            "decode_seqs": 0.003,
            "kv_tokens": 0.000002,
            "prefill_pairs": 0.0004,
            "multi_row": 0.020,
            "lora_rows": 0.0003,
            "lora_adapters": 0.0006,
        }
    )
    layouts = Design(lora_adapters=8).steps()  # the calibration's own design, adapted shapes included
    shapes = [StepShape.of(chunks_of(layout)) for layout in layouts]
    assert any(s.lora_adapters > 1 for s in shapes) and any(s.lora_rows and s.lora_rows < s.decode_seqs for s in shapes)
    fitted = StepCostModel.fitted(shapes, [truth.seconds(s) for s in shapes])
    for name in FEATURES:
        assert fitted.coefficients[name] == pytest.approx(truth.coefficients[name], rel=1e-6, abs=1e-12), name
    assert fitted.fit["max_rel_error"] < 1e-6


def test_a_fit_without_adapted_steps_gives_the_lora_terms_zero_and_needs_no_shapes_for_them():
    truth = StepCostModel({**dict.fromkeys(FEATURES, 0.0), "intercept": 0.01, "decode_seqs": 0.002, "prefill_tokens": 0.001})
    shapes = [StepShape(0, 1, 10), StepShape(0, 4, 40), StepShape(0, 16, 160), StepShape(64, 0, 64), StepShape(8, 2, 30, 0.1)]
    shapes.append(StepShape(128, 0, 128, 8.0))
    fitted = StepCostModel.fitted(shapes, [truth.seconds(s) for s in shapes])  # 6 shapes, 8 features, 2 never seen
    assert fitted.coefficients["lora_rows"] == fitted.coefficients["lora_adapters"] == 0.0


def test_a_cost_model_saved_before_the_lora_features_still_loads_with_them_at_zero(tmp_path):
    path = tmp_path / "old.json"
    old = {name: 0.001 for name in FEATURES if not name.startswith("lora_")}
    path.write_text(json.dumps({"kind": "llm-step-cost", "coefficients": old}))
    cost = StepCostModel.load(path)
    assert cost.coefficients["lora_rows"] == cost.coefficients["lora_adapters"] == 0.0
    assert cost.seconds(StepShape(0, 4, 40, lora_rows=4, lora_adapters=2)) == cost.seconds(StepShape(0, 4, 40))


def test_the_default_calibration_times_no_adapted_step_and_lora_adapters_adds_them():
    assert len(list(Design().steps())) == 33  # the default design's wall time is as before
    assert all(adapter == NO_ADAPTER for layout in Design().steps() for _, _, adapter in layout)
    adapted = list(Design(lora_adapters=4).lora_steps())
    counts = {len({a for _, _, a in layout if a != NO_ADAPTER}) for layout in adapted}
    assert counts == {1, 4}  # one adapter and as many as asked, so the fit tells rows from adapters
    assert any(any(a == NO_ADAPTER for _, _, a in layout) for layout in adapted)  # half-adapted steps
    assert len(list(dataclasses.replace(Design.quick(), lora_adapters=4).lora_steps())) == 8  # --quick: few


def simulate_adapters(max_loras: int, adapters: int = 4, streams: int = 8):
    requests = [RequestShape(16, 8, f"random-{index % adapters}") for index in range(40)]
    config = SchedulerConfig(max_num_seqs=16, max_num_batched_tokens=256, long_prefill_token_threshold=256, max_loras=max_loras)
    return EngineSimulation(LORA_COST, config, EngineShape(num_blocks=256), requests, seconds=2.0, drain_s=10.0).run(ClosedLoop(streams))


def test_max_loras_one_runs_fewer_rows_per_step_than_max_loras_four_with_four_adapters():
    one, four = simulate_adapters(max_loras=1), simulate_adapters(max_loras=4)
    assert one.mean_adapters == pytest.approx(1.0)  # the real scheduler's cap: one adapter per step
    assert 1.0 < four.mean_adapters <= 4.0
    assert one.mean_running < four.mean_running
    assert sum(r.tokens_out for r in one.records) < sum(r.tokens_out for r in four.records)


def test_adapted_rows_and_distinct_adapters_lengthen_the_simulated_step():
    base = [RequestShape(16, 4)]
    one = [RequestShape(16, 4, "random-0")]
    config = SchedulerConfig(max_loras=4)

    def token_times(requests):
        run = EngineSimulation(LORA_COST, config, EngineShape(num_blocks=64), requests, seconds=0.001, drain_s=10.0).run(ClosedLoop(1))
        return run.records[0].token_times

    # the prompt: 10 ms (+ 16 rows x 1 ms + 5 ms adapted); each decode: 12 ms (+ 1 + 5 ms adapted)
    assert token_times(base) == pytest.approx([0.010, 0.022, 0.034, 0.046])
    assert token_times(one) == pytest.approx([0.031, 0.049, 0.067, 0.085])


def test_an_adapter_mix_names_the_adapters_the_lora_benchmark_sends_for_the_same_seed():
    requests = [LlmRequest(i, f"p{i}", 32, 4) for i in range(200)]
    sent = with_adapters(requests, Variant(MIXED, 4, "zipf"), [f"random-{i}" for i in range(4)], seed=3)
    simulated = AdapterMix(4, "zipf").apply(shapes_of(requests), seed=3)
    assert [s.lora_name for s in simulated] == [r.lora_name for r in sent]
    assert shapes_of(sent) == simulated
    names = [s.lora_name for s in simulated]
    assert names.count("random-0") > names.count("random-3")  # Zipf: the first adapter most popular
    assert AdapterMix().apply(shapes_of(requests), seed=3) == shapes_of(requests)
    with pytest.raises(ValueError, match="popularity"):
        AdapterMix(4, "pareto")


def test_max_loras_is_searched_only_when_the_workload_names_adapters():
    space = LlmSpace.quick()
    assert "max_loras" not in space.knobs and all("max_loras" not in c for c in space.candidates())
    assert space.for_adapters(0) == space
    assert space.for_adapters(16).max_loras == (1, 2, 4, 8, 16)
    assert space.for_adapters(12).max_loras == (1, 2, 4, 8, 12)
    assert space.for_adapters(16, quick=True).max_loras == (1, 8, 16)
    searched = space.for_adapters(4)
    assert "max_loras" in searched.knobs
    assert {c["max_loras"] for c in searched.candidates()} == {"1", "2", "4"}
    assert label({"max_num_seqs": "8", "max_loras": "4"}) == "seqs=8 loras=4"


def test_the_simulated_space_ranks_every_adapter_at_once_above_one_adapter_per_step():
    requests = AdapterMix(8, "uniform").apply([RequestShape(32, 16)] * 100, seed=0)
    base = {"max_num_seqs": "16", "max_num_batched_tokens": "256", "long_prefill_token_threshold": "256", "max_loras": "4"}
    space = SimulatedSpace(base, {"max_loras": "4"}, requests, ClosedLoop(16), LevelPlan(seconds=20.0, drain_s=20.0), LlmSlo())
    candidates = [{"max_loras": "1"}, {"max_loras": "8"}]
    ranked = space.ranked(space.simulate(LORA_COST, candidates))
    assert [knobs["max_loras"] for knobs, _ in ranked] == ["8", "1"]
    assert ranked[0][1].output_tokens_per_s > ranked[1][1].output_tokens_per_s


def test_the_tuner_refuses_max_loras_without_adapters_and_adapters_on_vllm():
    parser = command.build_parser()
    with pytest.raises(ValueError, match="--max-loras"):
        command.LlmTuneSettings.from_cli_args(parser.parse_args(["--model", "llm", "--max-loras", "1,4"]))
    with pytest.raises(ValueError, match="--adapters"):
        command.LlmTuneSettings.from_cli_args(parser.parse_args(["--model", "llm", "--engine", "vllm", "--adapters", "4"]))
    settings = command.LlmTuneSettings.from_cli_args(parser.parse_args(["--model", "llm", "--adapters", "4", "--max-loras", "1,4"]))
    assert settings.space.max_loras == (1, 4) and settings.adapters == AdapterMix(4, "uniform")


class FakeServer:
    """Answers a level with `good` requests per max_loras; keeps what it was loaded with and sent."""

    def __init__(self, good: dict[str, int]) -> None:
        self.good, self.applied, self.sent = good, [], []
        self.stuck_unloads, self.last_load_average, self.last_sent = 0, None, 0

    def apply(self, parameters: dict) -> None:
        self.applied.append(dict(parameters))

    def measure_records(self, requests, schedule, level):
        self.sent.append(list(requests))
        count = self.good[self.applied[-1]["max_loras"]]
        return [StreamRecord(i, 0.0, token_times=[0.2, 0.25], end_s=0.25, tokens_in=32, tokens_out=2) for i in range(count)], level.seconds

    def measure(self, requests, schedule, level, slo):
        return LevelFigures.of(*self.measure_records(requests, schedule, level), slo)


def test_a_tune_with_adapters_sends_them_serves_them_and_writes_the_best_max_loras(tmp_path, monkeypatch):
    server, opened = FakeServer({"1": 5, "2": 10, "4": 20}), []
    monkeypatch.setattr(live, "live_server", lambda *args: opened.append(args) or contextlib.nullcontext(server))
    monkeypatch.setattr(command, "workload_requests", lambda settings: [LlmRequest(i, f"p{i}", 32, 2) for i in range(40)])
    LORA_COST.save(tmp_path / "cost.json")
    out = tmp_path / "config.pbtxt"
    argv = [
        *("--model", "llm", "--cost-model", str(tmp_path / "cost.json"), "--concurrency", "8", "--adapters", "4"),
        *("--max-num-seqs", "8", "--max-num-batched-tokens", "256", "--long-prefill-token-threshold", "256", "--max-wait-ms", "0"),
        *("--top", "2", "--tie-break-rounds", "0", "--report-dir", str(tmp_path), "--output", str(out), "-q"),
    ]
    assert command.run(argv) == 0
    assert opened[0][4] == AdapterMix(4, "uniform")  # the local server serves the workload's adapters
    assert {request.lora_name for request in server.sent[0]} == {f"random-{i}" for i in range(4)}
    assert all("max_loras" in parameters for parameters in server.applied)
    assert load_config(out).parameters["max_loras"].string_value == "4"
