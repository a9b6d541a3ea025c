"""Predict and measure the same configs and levels; the simulator's errors per figure.

Each row is one (config, level): the live figures from a real Triton, the simulated ones
from the same requests, arrivals and level length, and the relative error of each figure
(predicted / measured - 1). The summary is the median absolute error per figure, against
the goals (`GOALS`, Vidur's): throughput within 10 %, TTFT p99 and TPOT p50 within 20 %, close
enough to rank configs by simulation before measuring the few best live.
"""

from __future__ import annotations

import dataclasses
import logging
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tools.bench.llm.driver import Schedule, level_label
from tools.load.llm.figures import LevelFigures, Slo
from tools.load.llm.workload import LlmRequest
from tools.simulate.llm.engine_sim import NO_OVERHEADS, Overheads
from tools.simulate.llm.live import LiveServer
from tools.simulate.llm.predict import LevelPlan, LlmPrediction, predict_level
from tools.simulate.llm.setup import shapes_of
from tools.simulate.llm.step_cost import StepCostModel

log = logging.getLogger(__name__)

GOALS = {"output_tokens_per_s": 0.10, "ttft_p99_ms": 0.20, "tpot_p50_ms": 0.20}


def relative_error(predicted: float | None, measured: float | None) -> float | None:
    if predicted is None or measured is None or measured == 0:
        return None
    return round(predicted / measured - 1.0, 4)


def compare(predicted: LevelFigures, measured: LevelFigures) -> dict[str, float | None]:
    return {name: relative_error(getattr(predicted, name), getattr(measured, name)) for name in GOALS}


def summarize(rows: Sequence[Mapping], key: str = "errors") -> dict:
    """Median |error| per figure over the rows that have one, and whether it meets its goal."""
    summary = {}
    for name, goal in GOALS.items():
        errors = [abs(row[key][name]) for row in rows if row.get(key, {}).get(name) is not None]
        median = round(statistics.median(errors), 4) if errors else None
        summary[name] = {"median_abs_error": median, "goal": goal, "met": median is not None and median <= goal, "rows": len(errors)}
    return summary


@dataclass(frozen=True)
class ValidationCase:
    overrides: Mapping[str, str]  # scheduler knobs changed from the base config
    schedule: Schedule

    def label(self) -> str:
        knobs = ",".join(f"{k}={v}" for k, v in self.overrides.items()) or "base config"
        return f"{knobs} @ {level_label(self.schedule)}"


def validate(
    server: LiveServer,
    cost: StepCostModel,
    base_parameters: Mapping[str, str],
    cases: Sequence[ValidationCase],
    requests: Sequence[LlmRequest],
    level: LevelPlan,
    slo: Slo,
    overheads: Overheads = NO_OVERHEADS,
    live_scale: bool = False,
) -> dict:
    """`base_parameters`: the config's (either engine: parameters.engine decides how each case
    is simulated). With `live_scale`, the first case is the anchor: measured first, the cost
    model scaled to its TPOT p50 (tools/simulate/llm/live_scale.py), and the summary counts
    only the held-out cases after it, predicted with the scaled model."""
    from llm.serving.knobs import engine_of
    from tools.simulate.llm.live import engine_parameters
    from tools.simulate.llm.live_scale import scale_to
    from tools.simulate.llm.setup import simulation_of

    if live_scale and len(cases) < 2:
        raise ValueError("a live-scaled validation needs two cases or more: the first is the anchor, the rest are held out")
    base_parameters = {**base_parameters, **engine_parameters(cost.engine)}
    shapes = shapes_of(requests)

    def simulate(model: StepCostModel, case: ValidationCase, level: LevelPlan) -> LlmPrediction:
        config, engine = simulation_of({**base_parameters, **case.overrides})
        return predict_level(model, config, engine, shapes, case.schedule, level, slo, overheads)

    rows, scale, calibrated, first = [], None, cost, 0
    for index, case in enumerate(cases):
        server.apply({**base_parameters, **case.overrides})
        level_here = dataclasses.replace(level, first_request=first)  # no prompt an earlier level left in the prefix cache
        measured = server.measure(requests, case.schedule, level_here, slo)
        first = (first + server.last_sent) % len(requests)
        predicted = simulate(cost, case, level_here)  # the anchor's before scaling, the held-out ones' after
        role = "held out" if live_scale else "case"
        if live_scale and index == 0:
            role = "anchor"
            scale = scale_to(cost, lambda model, anchor=case, at=level_here: simulate(model, anchor, at).figures, measured, case.label())
            if scale is not None:
                cost = cost.scaled(scale.factor, anchor=scale.anchor)
        row = {
            "case": case.label(),
            "role": role,
            "overrides": dict(case.overrides),
            "level": level_label(case.schedule),
            "first_request": level_here.first_request,
            "predicted": predicted.to_dict(),
            "measured": measured.as_dict(),
            "errors": compare(predicted.figures, measured),
            "load_average": server.last_load_average,  # other processes' load slows the live engine, not the simulated one
        }
        if scale is not None and role == "held out":  # the same measurement against the model as calibrated
            unscaled = simulate(calibrated, case, level_here)
            row["predicted_as_calibrated"] = unscaled.to_dict()
            row["errors_as_calibrated"] = compare(unscaled.figures, measured)
        log.info("%s (%s): %s", case.label(), role, row["errors"])
        rows.append(row)
    judged = [row for row in rows if row["role"] != "anchor"]
    result = {
        "rows": rows,
        "summary": summarize(judged),
        "live_scale": None if scale is None else scale.as_dict(),
        "stuck_unloads": server.stuck_unloads,  # reloads whose old instance never unloaded
        "reload_s": server.reload_s,
        "unload_s": server.unload_s,  # each reload's unload time; null: never unloaded
        "engine": engine_of(base_parameters),
    }
    if scale is not None:
        result["summary_as_calibrated"] = summarize(judged, "errors_as_calibrated")
    return result
