"""Model-guided tuning's simulation side (tools/tune/guided.py) on hand-written cost
models: which candidates it ranks first, what it sends to be measured, and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.candidate import Candidate
from tools.repo.model_config import load_config, without_priority_queues
from tools.simulate.cost_model import CostModel, CostModelError, Grid, StepCost
from tools.simulate.live_load import Traffic
from tools.simulate.predict import Prediction
from tools.simulate.workload import Lengths
from tools.tune import guided
from tools.tune.objectives import Score
from tools.tune.space import SearchSpace
from tools.tune.strategies import Listed

GPU = CostModel.load(REPO_ROOT / "tools" / "simulate" / "cost_models" / "synthetic-gpu.json")
CPU = CostModel({"encoder": StepCost({1: Grid([1, 32], [128], [[2.0], [64.0]])})}, kind="synthetic")  # linear: batching gains nothing
BASE = without_priority_queues(load_config(MODEL_REPOSITORY / "encoder"))


def ranked(cost: CostModel, space: SearchSpace, traffics: list[Traffic]) -> list[guided.Ranked]:
    pipeline = guided.Pipeline(cost, BASE, None, Lengths("fixed", 128))
    return guided.rank(pipeline, space.candidates(), traffics, 50, screen_requests=300, requests=800, finalists=6)


def prediction(throughput: float, p99: float | None, rejected: int = 0) -> Prediction:
    return Prediction(throughput, p99, p99, p99, 1.0, None, rejected, 0, 100)


def test_on_the_flat_gpu_curve_under_load_a_nonzero_delay_wins():
    # preferred size 4 is sent at once at delay 0 (Triton's rule), capping batches at 4;
    # a delay lets the batcher send the whole queue, which costs no more on a flat curve
    space = SearchSpace([32], [0, 2000, 5000], ("4",), [1], [False])
    result = ranked(GPU, space, [Traffic(rate=3000.0)])
    assert result[0].candidate.delay_us > 0
    at_zero = next(r for r in result if r.candidate.delay_us == 0)
    assert not at_zero.score.feasible, "batches of 4 cannot keep up with 3000 req/s"


def test_on_a_linear_cpu_curve_delay_zero_wins():
    space = SearchSpace([32], [0, 2000, 5000], ("none", "4"), [1], [False])
    result = ranked(CPU, space, [Traffic(concurrency=1), Traffic(concurrency=8)])
    assert result[0].candidate.delay_us == 0
    assert all(r.score.value <= result[0].score.value for r in result)


def test_identical_behaviour_is_measured_once_and_the_control_is_measured_besides_the_top():
    space = SearchSpace([32], [0, 2000], ("none", "max"), [1], [False])  # at delay 0, none and max batch alike
    pipeline = guided.Pipeline(CPU, BASE, None, Lengths("fixed", 128))
    control = Candidate(32, (), 0, 1, False)
    baseline = Candidate(32, (1, 4), 0, 2, False)
    plan = guided.plan_guided(pipeline, "test", space.candidates(), control, baseline, [Traffic(concurrency=4)], 500, "throughput-slo", 3)
    assert control not in plan.top and baseline not in plan.top
    behaviours = [guided.behaviour(next(r for r in plan.ranked if r.candidate == c)) for c in plan.top]
    assert len(set(behaviours)) == len(behaviours)
    assert plan.to_measure[-1] == control
    assert Listed(plan.to_measure).next_candidates() == plan.to_measure


def test_the_report_puts_predicted_beside_measured(tmp_path: Path):
    space = SearchSpace([32], [0], ("none",), [1], [False])
    pipeline = guided.Pipeline(CPU, BASE, None, Lengths("fixed", 128))
    control = Candidate(32, (), 0, 1, False)
    plan = guided.plan_guided(pipeline, "test", space.candidates(), control, control, [Traffic(concurrency=2)], 500, "throughput-slo", 1)

    class Trial:
        candidate, score = control, Score(True, 40.0, 40.0, 30.0)

    table = plan.finish([Trial()], tmp_path / "guided.json")
    document = json.loads((tmp_path / "guided.json").read_text())
    row = document["predicted_vs_measured"][0]
    assert row["measured"]["throughput_rps"] == 40.0
    assert row["throughput_error"] == pytest.approx((row["predicted"]["throughput_rps"] - 40.0) / 40.0)
    assert "control" in table


def test_predicted_score_counts_a_level_over_the_slo_as_zero_and_rejections_as_unclean():
    score = guided.predicted_score([prediction(100.0, 10.0), prediction(300.0, 90.0)], 50)
    assert score.feasible and score.throughput_rps == pytest.approx(50.0)
    assert not guided.predicted_score([prediction(100.0, 10.0, rejected=3)], 50).feasible
    with pytest.raises(ValueError, match="objective"):
        guided.predicted_score([prediction(1.0, 1.0)], 50, "fastest")


def test_auto_uses_the_shipped_model_only_on_its_own_cpu():
    shipped = CostModel.load(guided.SHIPPED_MEASURED)
    cpu = dict(shipped.measured_on["cpu"])
    calibrated = []
    cost, source = guided.choose_cost_model("auto", cpu, lambda: calibrated.append(1))
    assert cost.kind == "measured" and "shipped" in source and not calibrated
    _, source = guided.choose_cost_model("auto", {**cpu, "cores": 64}, lambda: CPU)
    assert "calibration" in source
    with pytest.raises(CostModelError):
        guided.choose_cost_model(str(REPO_ROOT / "no-such-cost-model.json"), cpu, lambda: CPU)


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--top", "0"], "--top"),
        (["--cost-model", "no-such-file.json"], "no-such-file.json"),
    ],
)
def test_bad_model_guided_arguments_exit_2_before_any_server_starts(arguments, message):
    # through `python -m tools.tune`, as users run it (the entry point may move into a package)
    command = [sys.executable, "-m", "tools.tune", "--model", "encoder", "--p99-ms", "100", "--strategy", "model-guided", *arguments]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr
