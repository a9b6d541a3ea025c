"""Scoring trials under each objective preset, and resuming from a checkpoint."""

from __future__ import annotations

from tools.loadgen.report import ClassResult, LatencySummary, LoadResult
from tools.repo.candidate import Candidate
from tools.tune.objectives import score
from tools.tune.session import Checkpoint, Trial, Tuner
from tools.tune.space import SearchSpace
from tools.tune.strategies import GridSearch


def result(throughput: float, p99: float, errors: int = 0, interactive_p99: float | None = None) -> LoadResult:
    outcomes = {"ok": 100} | ({"rejected": errors} if errors else {})
    classes = {}
    if interactive_p99 is not None:
        classes[1] = ClassResult(20, {"ok": 20}, LatencySummary(count=20, p99_ms=interactive_p99), throughput * 0.2)
    return LoadResult(
        "t",
        "target",
        "grpc",
        10.0,
        3,
        True,
        100 + errors,
        outcomes,
        throughput,
        throughput,
        LatencySummary(count=100, p99_ms=p99),
        classes,
        0,
        0.0,
    )


def test_throughput_within_the_slo_is_averaged_over_all_levels() -> None:
    s = score([result(50, 20), result(120, 45), result(200, 90)], p99_ms=50)
    assert s.feasible and s.throughput_rps == (50 + 120 + 0) / 3
    assert s.p99_ms == 45
    assert "1 of 3 levels" in s.reason


def test_a_config_fast_at_every_level_beats_one_that_only_wins_the_busiest() -> None:
    steady = score([result(130, 10), result(190, 80)], p99_ms=250)
    delayed = score([result(80, 15), result(230, 100)], p99_ms=250)
    assert steady.value > delayed.value


def test_throughput_first_takes_the_best_level() -> None:
    assert score([result(50, 20), result(200, 900)], 50, "throughput-first").throughput_rps == 200


def test_levels_with_errors_never_count() -> None:
    s = score([result(300, 10, errors=3)], p99_ms=50)
    assert not s.feasible
    assert "errors" in s.reason


def test_slo_missed_everywhere_is_infeasible_with_the_reason() -> None:
    s = score([result(100, 80), result(150, 120)], p99_ms=50)
    assert not s.feasible and "p99 above 50" in s.reason


def test_latency_first_prefers_lower_latency_over_throughput() -> None:
    fast = score([result(100, 10), result(110, 20)], 50, "latency-first")
    busy = score([result(150, 30), result(200, 40)], 50, "latency-first")
    assert fast.value > busy.value


def test_throughput_first_ignores_the_slo_but_not_errors() -> None:
    assert score([result(500, 900)], 50, "throughput-first").throughput_rps == 500
    assert not score([result(500, 900, errors=1)], 50, "throughput-first").feasible


def test_mixed_objective_judges_priority_one_latency_only() -> None:
    assert score([result(200, 400, interactive_p99=40)], 50, "mixed").feasible
    assert not score([result(200, 30, interactive_p99=60)], 50, "mixed").feasible


def test_interrupted_sweep_resumes_without_measuring_again(tmp_path) -> None:
    from tools.paths import MODEL_REPOSITORY
    from tools.repo.model_config import load_config

    space = SearchSpace([32], [0, 1000, 2000])
    measured: list[int] = []

    def tuner(checkpoint: Checkpoint) -> Tuner:
        def measure() -> list[LoadResult]:
            measured.append(1)
            if len(measured) == 2:
                raise KeyboardInterrupt
            return [result(100 + len(measured), 10)]

        return Tuner(load_config(MODEL_REPOSITORY / "encoder"), measure, lambda config: None, 50, "throughput-slo", checkpoint)

    settings = {"space": space.to_dict()}
    first = Checkpoint(tmp_path / "checkpoint.json", settings)
    try:
        tuner(first).run(GridSearch(space), lambda *a: None)
    except KeyboardInterrupt:
        pass
    assert len(first.trials) == 1

    resumed = Checkpoint(tmp_path / "checkpoint.json", settings)
    assert resumed.load() == 1
    trials = tuner(resumed).run(GridSearch(space), lambda *a: None)
    assert [t.candidate for t in trials] == space.candidates()
    # one kept before the interrupt, the interrupted one, then every other candidate once
    assert len(measured) == 2 + len(space.candidates()) - 1


def test_checkpoint_of_another_sweep_is_ignored(tmp_path) -> None:
    Checkpoint(tmp_path / "c.json", {"p99_ms": 50}).add(Trial(Candidate(8, (), 0), score([result(1, 1)], 50)))
    assert Checkpoint(tmp_path / "c.json", {"p99_ms": 80}).load() == 0


def test_a_confirmed_finalist_keeps_its_worse_run(tmp_path) -> None:
    from tools.paths import MODEL_REPOSITORY
    from tools.repo.model_config import load_config

    runs = iter([[result(200, 100)], [result(200, 600)]])  # the second run meets a stall
    tuner = Tuner(
        load_config(MODEL_REPOSITORY / "encoder"),
        lambda: next(runs),
        lambda config: None,
        250,
        "throughput-slo",
        Checkpoint(tmp_path / "c.json", {}),
    )
    first = tuner.evaluate(Candidate(32, (), 0))
    assert first.score.feasible
    confirmed = tuner.confirm(first)
    assert confirmed.runs == 2 and not confirmed.score.feasible
    assert tuner.confirm(confirmed) is confirmed, "a confirmed trial is not measured a third time"
    assert Checkpoint(tmp_path / "c.json", {}).load() == 1
