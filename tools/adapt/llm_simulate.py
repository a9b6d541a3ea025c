"""The LLM controller against every static setting of the same space, in the step-level simulator.

The simulator (tools/simulate/llm) drives the real llm/scheduler with the step cost model's
times; the controller observes a window every `window_s` simulated seconds from the records
so far and sets the scheduler's step limits through `Scheduler.set_step_limits`, the call the
live channel makes. Every run sees the same seeded trace, so the rows differ only by policy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from llm.contract import SchedulerConfig
from llm.scheduler import Scheduler
from tools.adapt.llm_control import LlmController, LlmDecision, LlmLaw, LlmSetting
from tools.adapt.llm_windows import window_from_records
from tools.llmbench.figures import LevelFigures
from tools.load.llm.records import StreamRecord
from tools.load.schedules import Gamma
from tools.simulate.llm.engine_sim import NO_OVERHEADS, EngineShape, EngineSimulation, Overheads, RequestShape
from tools.simulate.llm.predict import LevelPlan
from tools.simulate.llm.slo import LlmSlo
from tools.simulate.llm.step_cost import StepCostModel


@dataclass(frozen=True)
class SimRow:
    label: str
    figures: LevelFigures
    changes: int = 0
    final: LlmSetting | None = None

    def to_dict(self) -> dict:
        return {"config": self.label, "changes": self.changes, "final": None if self.final is None else dataclasses.asdict(self.final),
                **self.figures.as_dict()}  # fmt: skip


@dataclass(frozen=True)
class SimSetup:
    cost: StepCostModel
    config: SchedulerConfig  # the served config: every knob but the two the controller moves
    engine: EngineShape
    requests: Sequence[RequestShape]
    schedule: Gamma
    level: LevelPlan
    slo: LlmSlo
    overheads: Overheads = NO_OVERHEADS

    def simulation(self, setting: LlmSetting) -> EngineSimulation:
        config = Scheduler.with_step_limits(self.config, **dataclasses.asdict(setting))
        level = self.level
        return EngineSimulation(self.cost, config, self.engine, self.requests, level.seconds, level.drain_s, self.overheads, level.seed)


def run_static(setup: SimSetup, setting: LlmSetting) -> SimRow:
    result = setup.simulation(setting).run(setup.schedule)
    label = f"static budget {setting.max_num_batched_tokens}, max-wait {setting.max_wait_ms:g} ms"
    return SimRow(label, result.figures(setup.slo.per_request()), final=setting)


def run_controlled(setup: SimSetup, law: LlmLaw, window_s: float) -> tuple[SimRow, list[LlmDecision]]:
    controller = LlmController(law)
    decisions: list[LlmDecision] = []
    state = {"window_start": 0.0, "waiting": [], "setting": controller.setting}

    def on_step(end: float, scheduler: Scheduler, records: list[StreamRecord]) -> None:
        state["waiting"].append(len(scheduler.waiting))
        if end - state["window_start"] < window_s:
            return
        waiting = sum(state["waiting"]) / len(state["waiting"])
        window = window_from_records(records, state["window_start"], end, waiting)
        decision = controller.observe(window, end)
        decisions.append(decision)
        if decision.changed:
            scheduler.set_step_limits(**dataclasses.asdict(decision.setting))
        state["window_start"], state["waiting"] = end, []

    result = setup.simulation(controller.setting).run(setup.schedule, on_step=on_step)
    changes = sum(d.changed for d in decisions)
    label = f"controller (from budget {law.default.max_num_batched_tokens}, max-wait {law.default.max_wait_ms:g} ms)"
    return SimRow(label, result.figures(setup.slo.per_request()), changes, controller.setting), decisions


def space(budgets: Sequence[int], waits_ms: Sequence[float]) -> list[LlmSetting]:
    return [LlmSetting(b, w) for b in budgets for w in waits_ms]
