"""Search strategies, driven by a fake measurement function (no server)."""

from __future__ import annotations

import pytest

from tools.repo.candidate import Candidate, apply_candidate, candidate_of
from tools.repo.instances import core_budget, machine_cores, with_instances
from tools.tune.objectives import Score
from tools.tune.space import SearchSpace, preferred_options
from tools.tune.strategies import GridSearch, HillClimb


def drive(strategy, measure) -> list[Candidate]:
    measured = []
    while batch := strategy.next_candidates():
        for candidate in batch:
            assert candidate not in measured, "a candidate is never measured twice"
            measured.append(candidate)
            strategy.record(candidate, measure(candidate))
    return measured


def peak_at(mbs: int, delay: int):
    def measure(candidate: Candidate) -> Score:
        value = 100 - abs(candidate.max_batch_size - mbs) - abs(candidate.delay_us - delay) / 100 - len(candidate.preferred)
        return Score(True, value, value, 10.0)

    return measure


SPACE = SearchSpace(max_batch_sizes=[1, 2, 4, 8, 16, 32], delays_us=[0, 500, 1000, 2000, 4000, 8000], preferred_styles=("none", "half"))


def test_grid_measures_every_candidate_once() -> None:
    measured = drive(GridSearch(SPACE), peak_at(8, 1000))
    assert sorted(measured) == sorted(SPACE.candidates())
    assert len(measured) == len(set(measured))


def test_hill_climb_finds_the_peak_of_a_smooth_surface_with_fewer_trials() -> None:
    measured = drive(HillClimb(SPACE, start=Candidate(1, (), 8000), max_trials=60), peak_at(8, 1000))
    best = max(measured, key=lambda c: peak_at(8, 1000)(c).value)
    assert (best.max_batch_size, best.delay_us, best.preferred) == (8, 1000, ())
    assert len(measured) < len(SPACE.candidates())


def test_hill_climb_stops_at_its_trial_budget() -> None:
    assert len(drive(HillClimb(SPACE, max_trials=5), peak_at(32, 0))) == 5


def test_hill_climb_steps_over_a_one_step_dip() -> None:
    def dip(candidate: Candidate) -> Score:
        values = {1: 50, 2: 40, 4: 70, 8: 60, 16: 55, 32: 50}
        return Score(True, values[candidate.max_batch_size] - candidate.delay_us / 1e4, 0, 0)

    measured = drive(HillClimb(SPACE, start=Candidate(1, (), 0)), dip)
    assert Candidate(4, (), 0) in measured


def test_hill_climb_leaves_an_infeasible_start() -> None:
    def feasible_only_small(candidate: Candidate) -> Score:
        if candidate.max_batch_size > 4:
            return Score(False, float("-inf"), 0, 100)
        return Score(True, candidate.max_batch_size, candidate.max_batch_size, 1)

    measured = drive(HillClimb(SPACE, start=Candidate(32, (), 8000)), feasible_only_small)
    assert any(c.max_batch_size <= 4 for c in measured)


def test_preferred_sizes_never_exceed_max_batch_size() -> None:
    for candidate in SearchSpace([1, 3, 8, 64], [0], ("none", "max", "half")).candidates():
        assert all(1 <= size <= candidate.max_batch_size for size in candidate.preferred)


def test_unknown_preferred_style_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown preferred-size style"):
        preferred_options(8, ("quarter",))


def test_candidate_applies_to_the_committed_encoder_config_consistently() -> None:
    from tools.paths import MODEL_REPOSITORY
    from tools.repo.model_config import batching_problems, load_config

    base = load_config(MODEL_REPOSITORY / "encoder")
    config = apply_candidate(base, Candidate(4, (2, 4), 750, 2))
    assert config.max_batch_size == 4
    assert list(config.dynamic_batching.preferred_batch_size) == [2, 4]
    assert config.dynamic_batching.max_queue_delay_microseconds == 750
    assert config.instance_group[0].count == 2
    assert config.parameters["intra_op_thread_count"].string_value == "1", "one thread per instance, as committed"
    assert all(w.batch_size <= 4 for w in config.model_warmup)
    assert config.dynamic_batching.priority_levels == base.dynamic_batching.priority_levels
    assert batching_problems(config) == []
    assert candidate_of(config) == Candidate(4, (2, 4), 750, 2)


def test_inconsistent_candidate_is_refused_before_loading() -> None:
    from tools.paths import MODEL_REPOSITORY
    from tools.repo.model_config import load_config

    with pytest.raises(ValueError, match="preferred_batch_size 8 is outside"):
        apply_candidate(load_config(MODEL_REPOSITORY / "encoder"), Candidate(4, (8,), 0))


def test_a_candidate_without_priority_queues_drops_levels_and_policies_only() -> None:
    from tools.paths import MODEL_REPOSITORY
    from tools.repo.model_config import batching_problems, load_config

    base = load_config(MODEL_REPOSITORY / "encoder")
    config = apply_candidate(base, Candidate(32, (8,), 0, 1, priority_queues=False))
    batcher = config.dynamic_batching
    assert batcher.priority_levels == 0 and batcher.default_priority_level == 0
    assert not batcher.HasField("default_queue_policy") and len(batcher.priority_queue_policy) == 0
    assert list(batcher.preferred_batch_size) == [8]
    assert len(config.model_warmup) == len(base.model_warmup)
    assert batching_problems(config) == []
    assert candidate_of(config) == Candidate(32, (8,), 0, 1, priority_queues=False)
    assert candidate_of(base).priority_queues


def test_hill_climb_tries_dropping_the_priority_queues_when_the_space_allows_it() -> None:
    space = SearchSpace([8, 16, 32], [0, 1000, 4000], ("none",), [1], priority_queues=[True, False])

    def cheaper_without(candidate: Candidate) -> Score:
        value = peak_at(16, 1000)(candidate).value + (0 if candidate.priority_queues else 5)
        return Score(True, value, value, 10.0)

    measured = drive(HillClimb(space, start=Candidate(32, (), 4000), max_trials=30), cheaper_without)
    assert Candidate(16, (), 1000, 1, priority_queues=False) in measured
    assert any(c.priority_queues for c in measured) and not all(c.priority_queues for c in measured)


def test_the_key_marks_only_candidates_without_priority_queues() -> None:
    assert Candidate(8, (4, 8), 1000, 2).key == "mbs8-pref4+8-delay1000-inst2"
    assert Candidate(8, (), 0, 1, priority_queues=False).key == "mbs8-prefnone-delay0-inst1-noprio"
    assert Candidate.from_dict(Candidate(8, (), 0, 1, False).to_dict()) == Candidate(8, (), 0, 1, False)
    assert Candidate.from_dict({"max_batch_size": 8, "preferred": [], "delay_us": 0}).priority_queues, "old checkpoints load"


def test_hill_climb_measures_its_seeds_first_and_climbs_from_the_best_start() -> None:
    from tools.tune.strategies import triton_default

    space = SearchSpace([32], [0, 1000, 2000, 4000, 8000], ("none", "8"), [1, 2], priority_queues=[True, False])
    seed = triton_default(space)
    assert seed == Candidate(32, (), 0, 1, priority_queues=False)
    measured = drive(HillClimb(space, start=Candidate(32, (8,), 8000, 2), max_trials=12, seeds=(seed,)), peak_at(32, 0))
    assert measured[:2] == [Candidate(32, (8,), 8000, 2), seed]
    first_neighbours = measured[2:7]
    assert all(c.delay_us <= 2000 for c in first_neighbours), "the climb starts next to the better seed, not the far start"


def test_candidates_keep_the_base_core_budget_and_state_threads_per_instance() -> None:
    """Explicit thread counts: the native backend would give each instance every core otherwise."""
    from tools.paths import MODEL_REPOSITORY
    from tools.repo.model_config import load_config, parse_config

    base = load_config(MODEL_REPOSITORY / "encoder")
    budget = core_budget(base)
    stated = base.instance_group[0].count * int(base.parameters["intra_op_thread_count"].string_value)
    assert budget == min(stated, machine_cores()), "instances x threads, at most the cores there are"
    threads = {n: apply_candidate(base, Candidate(32, (8,), 0, n)).parameters["intra_op_thread_count"].string_value for n in (1, 2, 4)}
    assert threads == {1: str(budget), 2: str(budget // 2), 4: str(max(1, budget // 4))}
    unset = parse_config("name: 'e' platform: 'onnxruntime_onnx' max_batch_size: 8 instance_group { count: 3 kind: KIND_CPU }")
    assert core_budget(unset) == machine_cores(), "a base that does not say: this machine's cores"
    assert with_instances(unset, 2, budget=7).parameters["intra_op_thread_count"].string_value == "3"


def test_models_not_on_onnx_runtime_get_no_thread_parameter() -> None:
    from tools.paths import MODEL_REPOSITORY
    from tools.repo.model_config import load_config

    tokenizer = with_instances(load_config(MODEL_REPOSITORY / "tokenizer"), 2)
    assert tokenizer.instance_group[0].count == 2
    assert "intra_op_thread_count" not in tokenizer.parameters
