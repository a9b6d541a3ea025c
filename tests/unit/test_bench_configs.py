"""The configs the benchmark compares (derived from the committed configs), the order it measures them in, its verdicts."""

from __future__ import annotations

import pytest

from tools.bench.__main__ import Group, measure_groups, model_analyzer_pick, parse_configs, preset_group, preset_row, without_batching
from tools.bench.render import LevelComparison, compare_levels, verdict_line
from tools.loadgen import Traffic
from tools.paths import MODEL_REPOSITORY
from tools.repo.instances import core_budget
from tools.repo.model_config import ModelConfig, batching_problems, has_priority_queues, load_config
from tools.repo.presets import PRESETS, preset_configs


def test_model_analyzer_pick_is_the_default_batcher_on_one_instance_held_to_batches_of_8() -> None:
    base = load_config(MODEL_REPOSITORY / "encoder")
    pick = model_analyzer_pick(base, batch_floor=32)
    assert [group.count for group in pick.instance_group] == [1]
    assert pick.parameters["intra_op_thread_count"].string_value == str(core_budget(base)), "the one instance gets all the committed cores"
    assert pick.max_batch_size == 32 and list(pick.dynamic_batching.preferred_batch_size) == [8]
    assert pick.dynamic_batching.max_queue_delay_microseconds == 0
    assert not has_priority_queues(pick)
    assert batching_problems(pick) == []
    assert model_analyzer_pick(base, batch_floor=0).max_batch_size == 8


def test_without_batching_keeps_everything_but_the_batcher() -> None:
    base = load_config(MODEL_REPOSITORY / "encoder")
    plain = without_batching(base)
    assert not plain.HasField("dynamic_batching")
    assert plain.instance_group == base.instance_group and plain.max_batch_size == base.max_batch_size


def test_a_preset_is_compared_with_its_own_encoder_and_tokenizer_without_the_batcher() -> None:
    group = preset_group("chat")
    preset, twin = group.encoders[preset_row("chat")], group.encoders[group.twin]
    assert not twin.HasField("dynamic_batching") and preset.HasField("dynamic_batching")
    assert twin.instance_group == preset.instance_group
    assert twin.parameters["intra_op_thread_count"] == preset.parameters["intra_op_thread_count"]
    assert group.tokenizer == preset_configs(PRESETS["chat"])["tokenizer"]


def test_configs_option_keeps_the_canonical_order_and_names_unknown_entries() -> None:
    assert parse_configs("naive,mixed") == ["mixed", "naive"]
    assert parse_configs("mixed,model-analyzer", no_model_analyzer=True) == ["mixed"]
    with pytest.raises(ValueError, match="unknown fast"):
        parse_configs("mixed,fast")
    with pytest.raises(ValueError, match="nothing given"):
        parse_configs(" , ")


def test_a_preset_and_its_twin_take_turns_level_by_level_in_alternating_order() -> None:
    calls: list[str] = []
    group = Group(ModelConfig(name="tokenizer"), {"A": ModelConfig(name="a"), "B": ModelConfig(name="b")}, preset="x", twin="B")
    levels = [Traffic(concurrency=1), Traffic(concurrency=4)]

    def load(model: str, config: ModelConfig) -> bool:
        calls.append(f"load {config.name}")
        return True

    def measure(name: str, traffic: Traffic) -> dict:
        calls.append(f"{name} {traffic.concurrency}")
        return {"traffic": traffic.label()}

    served = measure_groups([group], levels, 2, measure, load)
    measured = [c for c in calls if not c.startswith("load")]
    assert measured == ["A 1", "B 1", "B 4", "A 4", "A 1", "B 1", "B 4", "A 4"]
    assert calls[0] == "load tokenizer" and all(calls[i].startswith("load") for i in range(1, len(calls), 2)), "reloaded before each"
    assert [r["round"] for r in served["A"]] == [1, 1, 2, 2]


def test_a_config_that_fails_to_load_has_no_results_and_the_rest_still_run() -> None:
    group = Group(ModelConfig(name="tokenizer"), {"A": ModelConfig(name="a"), "B": ModelConfig(name="b")}, preset="x", twin="B")
    other = Group(ModelConfig(name="tokenizer"), {"C": ModelConfig(name="c")})
    served = measure_groups(
        [group, other],
        [Traffic(concurrency=1)],
        1,
        lambda name, traffic: {"traffic": traffic.label()},
        lambda model, config: config.name != "a",
    )
    assert served["A"] == [] and len(served["B"]) == 1 and len(served["C"]) == 1


def level(throughput_ratio: float, p99_ratio: float, errors: int = 0) -> LevelComparison:
    return LevelComparison("concurrency 4", 100 * throughput_ratio, 100.0, 50 * p99_ratio, 50.0, throughput_ratio, p99_ratio, errors, 0)


@pytest.mark.parametrize(
    ("throughput_ratio", "p99_ratio", "errors", "verdict"),
    [
        (1.00, 1.00, 0, "ties"),
        (0.95, 1.15, 0, "ties"),
        (0.85, 0.90, 0, "loses"),
        (1.05, 1.30, 0, "loses"),
        (1.20, 1.00, 0, "beats"),
        (1.00, 0.50, 0, "beats"),
        (1.20, 0.50, 3, "loses"),
    ],
)
def test_a_level_is_lost_only_beyond_the_noise_margins(throughput_ratio: float, p99_ratio: float, errors: int, verdict: str) -> None:
    assert level(throughput_ratio, p99_ratio, errors).verdict() == verdict


def test_the_verdict_line_says_beats_or_ties_only_when_no_level_loses() -> None:
    assert "beats or ties no batching at every level" in verdict_line("mixed", [level(1.2, 1.0), level(1.0, 1.0)])
    assert "beats no batching at every level" in verdict_line("bulk", [level(1.2, 1.0)])
    lost = verdict_line("chat", [level(1.2, 1.0), level(0.5, 2.0)])
    assert "**chat: loses to no batching at concurrency 4**" in lost and "throughput x0.50, p99 x2.00" in lost


def test_rounds_are_paired_by_level_and_averaged_as_ratios() -> None:
    def result(traffic: str, rps: float, p99: float, round_: int) -> dict:
        return {"traffic": traffic, "round": round_, "throughput_rps": rps, "latency": {"p99_ms": p99}, "outcomes": {"ok": 1}}

    preset = [result("c1", 100, 10, 1), result("c1", 50, 10, 2)]
    twin = [result("c1", 50, 20, 1), result("c1", 100, 20, 2)]
    (only,) = compare_levels(preset, twin)
    assert only.throughput_ratio == pytest.approx((2.0 + 0.5) / 2) and only.p99_ratio == pytest.approx(0.5)
    assert only.rps == only.twin_rps == 75
    assert only.ratio_cell() == "x1.25 (2.00, 0.50)", "each round's ratio shows the noise"
