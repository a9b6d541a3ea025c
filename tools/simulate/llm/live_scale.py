"""One factor on the step cost model, fitted from a level measured live in the same run.

The calibration times engine steps in isolation; live, the same steps run inside the serving
loop on a machine whose speed drifts (on the 2-core EPYC the loop's steps ran 1.10-1.40x the
calibration from one run to the next, in process; the same config measured 24-54 % apart in
two tuner runs an hour apart). A simulator that is right about the order of configs but off
by that factor misjudges every absolute SLO. So with `--live-scale` the tuner and `validate`
measure one level (the config's own knobs) first, scale every coefficient so the simulated
TPOT p50 of that level matches the measured one, and predict the other configs with the
scaled model. Opt-in: the anchor brings its own error along (docs/simulate.md, four runs).

TPOT p50 is the figure to match: it is the typical decode step, set by the step time under
every load (throughput is not: below capacity an open loop's throughput is its arrival rate).
In a closed loop without overheads the simulation is time-scale free, so TPOT scales exactly
with the factor and one update lands; a few fixed-point updates settle the rest.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from tools.load.llm.figures import LevelFigures
from tools.simulate.llm.step_cost import StepCostModel

log = logging.getLogger(__name__)

FACTOR_RANGE = (0.2, 5.0)  # beyond it the anchor level says more about the machine than the model
UPDATES = 4
TOLERANCE = 0.01  # relative TPOT p50 difference at which the fit stops


@dataclass(frozen=True)
class LiveScale:
    factor: float
    anchor: str  # the measured level the factor was fitted on
    measured_tpot_p50_ms: float
    predicted_tpot_p50_ms: float  # before scaling
    fitted_tpot_p50_ms: float  # with the factor

    def as_dict(self) -> dict:
        return {
            "factor": round(self.factor, 4),
            "anchor": self.anchor,
            "measured_tpot_p50_ms": self.measured_tpot_p50_ms,
            "predicted_tpot_p50_ms": self.predicted_tpot_p50_ms,
            "fitted_tpot_p50_ms": self.fitted_tpot_p50_ms,
        }


def fit_live_scale(
    cost: StepCostModel, simulate: Callable[[StepCostModel], LevelFigures], measured: LevelFigures, anchor: str
) -> LiveScale:
    """The factor for `cost` that makes `simulate` (the anchor's config and level, simulated)
    give the measured TPOT p50, or the closest of the factors tried (1 among them, so scaling
    never moves the anchor further off). ValueError when the anchor level decoded nothing."""
    target = measured.tpot_p50_ms
    if not target:
        raise ValueError(f"the anchor level {anchor!r} measured no TPOT (no request decoded two tokens): nothing to scale on")
    low, high = FACTOR_RANGE
    factor, first, best = 1.0, None, None  # best: (factor, its TPOT p50), the closest to the target so far
    for _ in range(UPDATES):
        figures = simulate(cost.scaled(factor) if factor != 1.0 else cost)
        if not figures.tpot_p50_ms:
            raise ValueError(f"the simulated anchor level {anchor!r} decoded nothing: check its workload and level length")
        current = figures.tpot_p50_ms
        first = current if first is None else first
        if best is None or abs(current - target) < abs(best[1] - target):
            best = (factor, current)
        following = min(max(factor * target / current, low), high)
        if abs(current / target - 1.0) <= TOLERANCE or following == factor:
            break
        factor = following
    fitted, fitted_tpot = best
    if fitted in FACTOR_RANGE:
        log.warning("the live scale hit its bound %.1f: the live level ran far from the calibration; recalibrate on this machine", fitted)
    return LiveScale(fitted, anchor, target, first, fitted_tpot)


def scale_to(
    cost: StepCostModel, simulate: Callable[[StepCostModel], LevelFigures], measured: LevelFigures, anchor: str
) -> LiveScale | None:
    """fit_live_scale, logged; None (the model left as calibrated, with a warning) when the
    anchor level gives nothing to fit on."""
    try:
        scale = fit_live_scale(cost, simulate, measured, anchor)
    except ValueError as exc:
        log.warning("predicting with the cost model as calibrated: %s", exc)
        return None
    log.info(
        "live scale %.3f from %s (TPOT p50 %.0f ms measured, %.0f ms predicted unscaled)",
        scale.factor,
        anchor,
        scale.measured_tpot_p50_ms,
        scale.predicted_tpot_p50_ms,
    )
    return scale
