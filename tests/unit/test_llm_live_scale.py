"""The step cost model's live scale: hand-made simulations whose TPOT is a known function of
the scale, and the real simulator, whose closed loop is time-scale free."""

from __future__ import annotations

import dataclasses

import pytest

from llm.contract import SchedulerConfig
from tools.load.llm.figures import LevelFigures, Slo
from tools.load.schedules import ClosedLoop
from tools.simulate.llm.engine_sim import EngineShape, RequestShape
from tools.simulate.llm.live_scale import FACTOR_RANGE, TOLERANCE, fit_live_scale
from tools.simulate.llm.predict import LevelPlan, predict_level
from tools.simulate.llm.step_cost import FEATURES, StepCostModel, StepShape

COST = StepCostModel(dict(zip(FEATURES, (0.040, 0.001, 0.004, 0.0, 0.0, 0.010))))
DECODE_STEP = StepShape(decode_seqs=4, kv_tokens=400)  # 40 + 16 + 10 = 66 ms under COST


def figures(tpot_p50_ms: float | None) -> LevelFigures:
    return LevelFigures(
        requests=10,
        completed=10,
        outcomes={"ok": 10},
        duration_s=10.0,
        output_tokens_per_s=100.0,
        requests_per_s=1.0,
        goodput_rps=1.0,
        good_share=1.0,
        ttft_p50_ms=None,
        ttft_p99_ms=None,
        tpot_p50_ms=tpot_p50_ms,
        tpot_p99_ms=None,
        itl_p99_ms=None,
        e2e_p50_ms=None,
        mean_tokens_in=None,
        mean_tokens_out=None,
    )


def step_ms(model: StepCostModel) -> float:
    return model.seconds(DECODE_STEP) * 1000.0


def test_scaling_multiplies_every_coefficient_and_records_the_factor():
    scaled = COST.scaled(1.5, anchor="config @ 8 streams")
    assert step_ms(scaled) == pytest.approx(66.0 * 1.5)
    assert scaled.fit["live_scale"] == {"factor": 1.5, "anchor": "config @ 8 streams"}
    with pytest.raises(ValueError, match="positive"):
        COST.scaled(0.0)


def test_a_tpot_proportional_to_the_step_is_matched_in_one_update():
    calls = []

    def simulate(model):
        calls.append(model)
        return figures(step_ms(model))  # TPOT = the step: 66 ms at factor 1

    scale = fit_live_scale(COST, simulate, figures(99.0), "anchor")
    assert scale.factor == pytest.approx(1.5)
    assert (scale.predicted_tpot_p50_ms, scale.fitted_tpot_p50_ms) == (pytest.approx(66.0), pytest.approx(99.0))
    assert len(calls) == 2  # the unscaled model, then the scaled one, which lands


def test_a_tpot_with_a_fixed_part_converges_within_the_tolerance():
    # TPOT = 30 ms outside the step + the step: factor f gives 30 + 66 f; 129 ms needs f = 1.5
    scale = fit_live_scale(COST, lambda model: figures(30.0 + step_ms(model)), figures(129.0), "anchor")
    assert scale.fitted_tpot_p50_ms == pytest.approx(129.0, rel=TOLERANCE + 0.001)
    assert scale.factor == pytest.approx(1.5, rel=0.03)


def test_a_live_level_far_from_the_calibration_stops_at_the_bound():
    scale = fit_live_scale(COST, lambda model: figures(step_ms(model)), figures(66.0 * 50), "anchor")
    assert scale.factor == FACTOR_RANGE[1]


def test_an_anchor_level_without_a_tpot_is_refused_by_name():
    with pytest.raises(ValueError, match=r"config @ 2 streams.*no TPOT"):
        fit_live_scale(COST, lambda model: figures(66.0), figures(None), "config @ 2 streams")


def test_the_simulated_closed_loop_is_time_scale_free_so_the_fit_lands_on_the_real_simulator():
    engine = EngineShape(num_blocks=256)
    requests = [RequestShape(40, 20), RequestShape(90, 12), RequestShape(20, 30)]
    level = LevelPlan(seconds=20.0, drain_s=60.0)
    config = SchedulerConfig(max_num_seqs=2, max_num_batched_tokens=64, long_prefill_token_threshold=64)

    def simulate(model):
        return predict_level(model, config, engine, requests, ClosedLoop(2), level, Slo()).figures

    unscaled = simulate(COST).tpot_p50_ms
    scale = fit_live_scale(COST, simulate, dataclasses.replace(figures(None), tpot_p50_ms=unscaled * 1.3), "anchor")
    assert scale.factor == pytest.approx(1.3, rel=0.02)
    assert scale.fitted_tpot_p50_ms == pytest.approx(unscaled * 1.3, rel=TOLERANCE + 0.001)


def test_a_scale_that_moves_the_anchor_further_off_is_not_kept():
    # a simulation with a cliff: proportional up to 1.5, then 30 ms (say, the level's length
    # stops what it sends); a target of 120 ms sends the updates over the cliff, and the fit
    # keeps the closest factor it tried: 1, the model as calibrated
    def simulate(model):
        factor = step_ms(model) / 66.0
        return figures(66.0 * factor if factor <= 1.5 else 30.0)

    scale = fit_live_scale(COST, simulate, figures(120.0), "anchor")
    assert (scale.factor, scale.fitted_tpot_p50_ms) == (1.0, pytest.approx(66.0))
