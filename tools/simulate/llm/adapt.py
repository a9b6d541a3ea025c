"""The LLM controller (tools/adapt/llm/control.py) against every static setting of the same
space, in the step-level simulator: `python -m tools.simulate.llm.adapt` (`make sim-adapt-llm`).

The simulator (tools/simulate/llm) drives the real llm/scheduler with the step cost model's
times; the controller observes a window every `window_s` simulated seconds from the records
so far and sets the scheduler's step limits through `Scheduler.set_step_limits`, the call the
live channel makes. Every run sees the same seeded trace, so the rows differ only by policy.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from llm.contract import SchedulerConfig
from llm.scheduler import Scheduler
from tools.adapt.llm.control import LlmController, LlmDecision, LlmLaw, LlmSetting
from tools.adapt.llm.report import row, table, write_json
from tools.adapt.llm.windows import window_from_records
from tools.load.llm.figures import LevelFigures
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LengthRange
from tools.load.schedules import Gamma
from tools.paths import REPO_ROOT
from tools.simulate.llm.engine_sim import NO_OVERHEADS, EngineShape, EngineSimulation, Overheads, RequestShape
from tools.simulate.llm.predict import LevelPlan
from tools.simulate.llm.setup import drawn_shapes, engine_shape, parse_overrides, read_knobs
from tools.simulate.llm.slo import LlmSlo
from tools.simulate.llm.step_cost import StepCostModel


@dataclass(frozen=True)
class SimRow:
    label: str
    figures: LevelFigures
    changes: int = 0
    final: LlmSetting | None = None


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
        return EngineSimulation(
            self.cost, config, self.engine, self.requests, level.seconds, level.drain_s, self.overheads, level.seed, level.first_request
        )


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


SHIPPED_COST_MODEL = REPO_ROOT / "tools" / "simulate" / "cost_models" / "llm-epyc-2core-1thread.json"


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.simulate.llm.adapt", description=__doc__)
    parser.add_argument("--cost-model", type=Path, default=SHIPPED_COST_MODEL)
    parser.add_argument("--overrides", type=parse_overrides, default={"enable_prefix_caching": "false"},
                        help="simulated knobs (default: prefix caching off: the simulated prompts are all alike)")  # fmt: skip
    parser.add_argument("--rate", type=float, default=0.25, help="mean arrivals per second (default %(default)s)")
    parser.add_argument("--burstiness", type=float, default=0.25, help="gamma shape; < 1 is burstier than Poisson (default %(default)s)")
    parser.add_argument("--prompt-lengths", type=LengthRange.parse, default=LengthRange(32, 512))
    parser.add_argument("--output-lengths", type=LengthRange.parse, default=LengthRange(16, 128))
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=1200.0)
    parser.add_argument("--drain", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budgets", type=_ints, default=[64, 128, 256, 512, 1024], help="the static settings' budgets")
    parser.add_argument("--waits", type=_floats, default=[0.0], help="the static settings' max-wait values in ms")
    parser.add_argument("--slo", type=LlmSlo.parse, default=LlmSlo(10.0, 0.6), help="ttft_p99=10s,tpot_p99=600ms (default)")
    parser.add_argument("--default-budget", type=int, default=512, help="where the controller starts and drifts back to")
    parser.add_argument("--min-budget", type=int, default=64)
    parser.add_argument("--max-budget", type=int, default=1024)
    parser.add_argument("--window", type=float, default=20.0, help="simulated seconds per window (default %(default)s)")
    parser.add_argument("--min-samples", type=int, default=2)
    parser.add_argument("--confirm-windows", type=int, default=2)
    parser.add_argument("--min-interval", type=float, default=30.0)
    parser.add_argument("--json", type=Path, default=None, help="write the rows and decisions here")
    return parser


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    scheduler, engine = read_knobs(overrides=args.overrides)
    shapes = drawn_shapes(args.prompt_lengths, args.output_lengths, args.requests, args.seed)
    setup = SimSetup(StepCostModel.load(args.cost_model), scheduler, engine_shape(engine), shapes, Gamma(args.rate, args.burstiness),
                     LevelPlan(args.seconds, args.drain, args.seed), args.slo)  # fmt: skip
    law = LlmLaw(args.slo.ttft_p99_s, args.slo.tpot_p99_s, default=LlmSetting(args.default_budget, 0.0), min_budget=args.min_budget,
                 max_budget=args.max_budget, min_samples=args.min_samples, confirm_windows=args.confirm_windows,
                 min_interval_s=args.min_interval)  # fmt: skip
    rows = [row(r.label, r.figures, r.changes, r.final) for r in (run_static(setup, s) for s in space(args.budgets, args.waits))]
    controlled, decisions = run_controlled(setup, law, args.window)
    rows.append(row(controlled.label, controlled.figures, controlled.changes, controlled.final))
    print(
        table(rows, f"simulated: gamma {args.rate:g} req/s, burstiness {args.burstiness:g}, {args.seconds:g} s; SLO {args.slo.describe()}")
    )
    arguments = {k: v if isinstance(v, int | float | list | dict) else str(v) for k, v in vars(args).items()}
    write_json(args.json, {"rows": rows, "decisions": [d.to_dict() for d in decisions], "args": arguments})
    return 0


if __name__ == "__main__":
    sys.exit(run())
