"""The LLM controller in the step-level simulator: its changes reach the real scheduler."""

from __future__ import annotations

from tools.adapt.llm.control import LlmLaw, LlmSetting
from tools.load.llm.workload import LengthRange
from tools.load.schedules import Gamma
from tools.simulate.llm.adapt import SHIPPED_COST_MODEL, SimSetup, run_controlled, run_static
from tools.simulate.llm.predict import LevelPlan
from tools.simulate.llm.setup import drawn_shapes, engine_shape, read_knobs
from tools.simulate.llm.slo import LlmSlo
from tools.simulate.llm.step_cost import StepCostModel


def setup(slo: LlmSlo) -> SimSetup:
    scheduler, engine = read_knobs(overrides={"enable_prefix_caching": "false"})
    shapes = drawn_shapes(LengthRange(32, 512), LengthRange(16, 64), 100, 0)
    return SimSetup(
        StepCostModel.load(SHIPPED_COST_MODEL), scheduler, engine_shape(engine), shapes, Gamma(0.2, 0.25), LevelPlan(300, 120), slo
    )


def test_an_unreachable_tpot_slo_drives_the_simulated_budget_to_its_minimum():
    law = LlmLaw(10.0, 0.05, min_samples=1, confirm_windows=1, min_interval_s=0.0)
    row, decisions = run_controlled(setup(LlmSlo(10.0, 0.05)), law, window_s=10.0)
    assert row.final == LlmSetting(64, 0.0) and row.changes == 3  # 512 -> 256 -> 128 -> 64
    assert all(d.window.tpot_p99_s is None or d.window.tpot_p99_s > 0.05 for d in decisions if d.changed)


def test_a_controller_that_never_moves_matches_the_static_default_exactly():
    slo = LlmSlo(1000.0, 1000.0)  # always inside: it only drifts toward the default, where it already is
    row, _ = run_controlled(setup(slo), LlmLaw(1000.0, 1000.0), window_s=10.0)
    static = run_static(setup(slo), LlmSetting(512, 0.0))
    assert row.changes == 0 and row.figures == static.figures
