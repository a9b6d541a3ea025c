"""One config under one load level, simulated: tools.bench.llm's figures plus the engine's view."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llm.contract import SchedulerConfig
from tools.bench.llm.driver import Schedule, level_label
from tools.load.llm.figures import LevelFigures, Slo
from tools.simulate.llm.engine_sim import NO_OVERHEADS, EngineShape, EngineSimulation, Overheads, RequestShape
from tools.simulate.llm.step_cost import StepCostModel


@dataclass(frozen=True)
class LevelPlan:
    """How long a level sends and drains, and its arrival seed (as tools.bench.llm runs it)."""

    seconds: float = 60.0
    drain_s: float = 30.0
    seed: int = 0
    first_request: int = 0  # where in the workload the level starts (tools.bench.llm.driver)


@dataclass(frozen=True)
class LlmPrediction:
    label: str
    figures: LevelFigures
    steps: int
    preemptions: int
    mean_running: float
    peak_kv_blocks: int
    mean_waiting: float = 0.0
    mean_kv_usage: float = 0.0
    mean_adapters: float = 0.0  # distinct LoRA adapters per step

    def to_dict(self) -> dict:
        return {
            "level": self.label,
            **self.figures.as_dict(),
            "steps": self.steps,
            "preemptions": self.preemptions,
            "mean_running": round(self.mean_running, 2),
            "peak_kv_blocks": self.peak_kv_blocks,
            "mean_waiting": round(self.mean_waiting, 2),
            "mean_kv_usage": round(self.mean_kv_usage, 4),
            "mean_adapters": round(self.mean_adapters, 2),
        }


def predict_level(
    cost: StepCostModel,
    config: SchedulerConfig,
    engine: EngineShape,
    requests: Sequence[RequestShape],
    schedule: Schedule,
    level: LevelPlan,
    slo: Slo,
    overheads: Overheads = NO_OVERHEADS,
) -> LlmPrediction:
    result = EngineSimulation(cost, config, engine, requests, level.seconds, level.drain_s, overheads, level.seed, level.first_request).run(
        schedule
    )
    return LlmPrediction(
        level_label(schedule),
        result.figures(slo),
        result.steps,
        result.preemptions,
        result.mean_running,
        result.peak_kv_blocks,
        result.mean_waiting,
        result.mean_kv_usage,
        result.mean_adapters,
    )
