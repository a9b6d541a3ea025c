"""Every candidate of the LLM tuner's space simulated under one level, and the ones to measure.

One object holds what stays fixed during a tune (the config's parameters, the engine, the
workload's request lengths, the level and the SLO), so the tuner can simulate the space
again with a rescaled step cost model (tools/simulate/llm/live_scale.py) in one call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from tools.bench.llm.driver import Schedule
from tools.load.llm.figures import LevelFigures
from tools.simulate.llm.engine_sim import RequestShape
from tools.simulate.llm.predict import LevelPlan, predict_level
from tools.simulate.llm.setup import simulation_of
from tools.simulate.llm.slo import LlmSlo
from tools.simulate.llm.step_cost import StepCostModel
from tools.tune.llm.space import score

Simulated = list[tuple[dict, LevelFigures]]  # (knobs, predicted figures), the config's own first


@dataclass(frozen=True)
class SimulatedSpace:
    base: Mapping[str, str]  # the config's parameters (either engine): every candidate changes some of them
    default: dict  # the config's own values of the tuned knobs
    shapes: Sequence[RequestShape]
    schedule: Schedule
    level: LevelPlan
    slo: LlmSlo

    def figures(self, cost: StepCostModel, knobs: Mapping[str, str]) -> LevelFigures:
        config, engine = simulation_of({**self.base, **knobs})
        return predict_level(cost, config, engine, self.shapes, self.schedule, self.level, self.slo.per_request()).figures

    def simulate(self, cost: StepCostModel, candidates: Iterable[dict]) -> Simulated:
        return [(knobs, self.figures(cost, knobs)) for knobs in [self.default, *candidates]]

    def ranked(self, simulated: Simulated) -> Simulated:
        """The candidates, the config's own left out, best predicted first by the SLO's order."""
        return sorted(simulated[1:], key=lambda item: score(item[1], self.slo), reverse=True)

    def to_measure(self, simulated: Simulated, strategy: str, top: int) -> list[tuple[dict, LevelFigures, str]]:
        """(knobs, predicted, role) of the candidates to measure besides the config: all of
        them for the grid, the `top` best predicted for model-guided."""
        if strategy == "grid":
            return [(knobs, figures, "grid") for knobs, figures in simulated[1:] if knobs != self.default]
        return pick_top(self.ranked(simulated), self.default, simulated[0][1], top)


def pick_top(ranked: Simulated, default: dict, default_figures: LevelFigures, top: int) -> list:
    """The `top` best predicted candidates other than the config, skipping any predicted to
    behave exactly as one already chosen (or as the config): measuring it adds nothing."""
    chosen: list[tuple[dict, LevelFigures, str]] = []
    seen = [default_figures]
    for parameters, figures in ranked:
        if len(chosen) == top:
            break
        if parameters != default and figures not in seen:
            chosen.append((parameters, figures, f"top {len(chosen) + 1}"))
            seen.append(figures)
    return chosen
