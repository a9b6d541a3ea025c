"""Model-guided tuning: rank a fine-grained space in simulation, measure only the top few.

Measuring one candidate live takes ~30 s here; simulating it under the same traffic takes
tens of milliseconds. So `tools.tune --strategy model-guided` simulates every candidate
of a fine space (delays in small steps, several preferred-size sets, instance counts,
priority queues on and off, max batch sizes) with a cost model, scores the predictions
with the tuner's objective, and measures live only the top few plus Triton's default
batcher (`dynamic_batching {}`) as a control. The report puts predicted beside measured
for each, so a wrong model shows itself in the same run.

Ranking runs in two stages: every candidate with a short simulation (`screen_requests`),
then the best `finalists` again with a longer one, so simulation noise in a short run
cannot put a lucky candidate on top.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools.paths import REPO_ROOT
from tools.repo.candidate import Candidate, apply_candidate
from tools.repo.model_config import ModelConfig
from tools.simulate.batcher import BatcherSpec
from tools.simulate.cost_model import CostModel
from tools.simulate.live_load import Traffic
from tools.simulate.predict import Prediction, predict
from tools.simulate.workload import Lengths, Workload
from tools.tune.objectives import OBJECTIVES, Score

log = logging.getLogger("tune")

FINE_DELAYS_US = [0, 250, 500, 1000, 2000, 3000, 4000, 6000, 8000, 10_000, 15_000, 20_000]
FINE_MAX_BATCH_SIZES = [8, 16, 32, 64]
FINE_PREFERRED = "none,half,max,4,8,16"
SHIPPED_MEASURED = REPO_ROOT / "tools" / "simulate" / "cost_models" / "measured-xeon-2core.json"
QUICK_GRID = {"batches": [1, 4, 16, 32], "lengths": [16, 32, 64], "max_tokens": 2048, "repeats": 3}


@dataclass(frozen=True)
class Ranked:
    candidate: Candidate
    score: Score  # predicted, in the tuner's objective
    predictions: list[Prediction]  # one per traffic level


def predicted_score(predictions: list[Prediction], p99_ms: float, objective: str = "throughput-slo") -> Score:
    """The tuner's objective (tools/tune/objectives.py) applied to predictions: a level
    with rejections, timeouts or no answer is not clean; p99 decides feasibility."""
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVES}")
    if not predictions:
        return Score(False, float("-inf"), 0.0, None, "not simulated")

    def p99(p: Prediction) -> float | None:
        if objective == "mixed":
            interactive = p.per_priority.get(1)
            return interactive.p99_ms if interactive else None
        return p.p99_ms

    clean = [p for p in predictions if p.p99_ms is not None and not p.rejected and not p.timeouts]
    feasible = clean if objective == "throughput-first" else [p for p in clean if p99(p) is not None and p99(p) <= p99_ms]
    worst = max((p.p99_ms for p in predictions if p.p99_ms is not None), default=None)
    if not feasible:
        return Score(False, float("-inf"), 0.0, worst, f"predicted p99 above {p99_ms:g} ms at every level")
    if objective == "latency-first":
        if len(feasible) < len(predictions):
            return Score(False, float("-inf"), 0.0, worst, "SLO missed at some level")
        mean_p99 = sum(p.p99_ms for p in predictions) / len(predictions)
        return Score(True, -mean_p99, max(p.throughput_rps for p in predictions), mean_p99)
    if objective == "throughput-slo":
        mean = sum(p.throughput_rps for p in feasible) / len(predictions)
        worst_p99 = max(p.p99_ms for p in feasible)
        return Score(True, mean - 1e-3 * worst_p99, mean, worst_p99)
    best = max(feasible, key=lambda p: (p.throughput_rps, -p.p99_ms))
    return Score(True, best.throughput_rps - 1e-3 * best.p99_ms, best.throughput_rps, best.p99_ms)


@dataclass(frozen=True)
class Pipeline:
    """What one simulation needs besides the candidate: the cost model, the base encoder
    config the candidate is applied to, the tokenizer step (None: requests go straight to
    the encoder) and the text lengths."""

    cost: CostModel
    base: ModelConfig
    tokenizer: BatcherSpec | None
    lengths: Lengths = field(default_factory=Lengths)

    def predict(self, candidate: Candidate, traffic: Traffic, requests: int) -> Prediction:
        encoder = BatcherSpec.from_config(apply_candidate(self.base, candidate))
        steps = [("tokenizer", self.tokenizer), ("encoder", encoder)] if self.tokenizer else [("encoder", encoder)]
        return predict(self.cost, steps, Workload(traffic, requests, self.lengths))


def rank(
    pipeline: Pipeline,
    candidates: list[Candidate],
    traffics: list[Traffic],
    p99_ms: float,
    objective: str = "throughput-slo",
    screen_requests: int = 400,
    requests: int = 2000,
    finalists: int = 16,
) -> list[Ranked]:
    """Candidates best first by predicted score; the top `finalists` from a longer simulation."""
    if not candidates:
        raise ValueError("nothing to rank: the search space is empty")
    if not traffics:
        raise ValueError("the traffic has no load levels: give --concurrency or --rate")

    def simulate(candidate: Candidate, count: int) -> Ranked:
        predictions = [pipeline.predict(candidate, traffic, count) for traffic in traffics]
        return Ranked(candidate, predicted_score(predictions, p99_ms, objective), predictions)

    unique = list(dict.fromkeys(candidates))
    screened = sorted((simulate(c, screen_requests) for c in unique), key=order)
    refined = sorted((simulate(r.candidate, requests) for r in screened[:finalists]), key=order)
    return refined + screened[finalists:]


def order(ranked: Ranked) -> tuple:
    """Best first; ties go to the simpler config (shorter delay, fewer instances, smaller batch)."""
    c = ranked.candidate
    return (-ranked.score.value, c.delay_us, c.instances, c.max_batch_size, len(c.preferred), c.priority_queues)


def behaviour(ranked: Ranked) -> tuple:
    """What the simulation saw a candidate do. Configs that behave identically (e.g. any
    preferred sizes at delay 0 under light load) are one choice: measuring two is a waste."""
    return tuple((p.throughput_rps, p.p99_ms, tuple(sorted(p.batch_histogram.items()))) for p in ranked.predictions)


def top_candidates(ranked: list[Ranked], count: int) -> list[Candidate]:
    """The `count` best predicted-feasible candidates of distinct behaviour (the best
    infeasible ones when none is feasible); the simplest of identical ones (ranked first)."""
    feasible = [r for r in ranked if r.score.feasible] or ranked
    chosen: dict[tuple, Candidate] = {}
    for r in feasible:
        chosen.setdefault(behaviour(r), r.candidate)
        if len(chosen) == count:
            break
    return list(chosen.values())


def cpu_matches(cost: CostModel, cpu: dict) -> bool:
    """A measured cost model describes this machine when CPU model, core count and vector flags agree."""
    measured = cost.measured_on.get("cpu") or {}
    same = all(measured.get(key) == cpu.get(key) for key in ("model", "cores"))
    return cost.kind == "measured" and same and sorted(measured.get("flags") or []) == sorted(cpu.get("flags") or [])


def choose_cost_model(option: str, cpu: dict, calibrate) -> tuple[CostModel, str]:
    """The cost model for a guided tune, and where it came from. `option`: a file, `auto`
    (the shipped measured model when it was measured on this kind of CPU, else `calibrate`)
    or `calibrate` (a quick calibration on the server being tuned; `calibrate()` runs it)."""
    if option not in ("auto", "calibrate"):
        return CostModel.load(Path(option)), f"the cost model {option}"
    if option == "auto":
        shipped = CostModel.load(SHIPPED_MEASURED)
        if cpu_matches(shipped, cpu):
            return shipped, f"the shipped cost model {SHIPPED_MEASURED.name} (measured on this CPU model)"
        other = (shipped.measured_on.get("cpu") or {}).get("model")
        log.info("the shipped cost model was measured on another CPU (%s): calibrating this one", other)
    started = time.perf_counter()
    cost = calibrate()
    return cost, f"a quick calibration of this server ({time.perf_counter() - started:.0f} s)"


def comparison(ranked: list[Ranked], measured: dict[Candidate, Score], control: Candidate, baseline: Candidate) -> list[dict]:
    """Predicted beside measured for every candidate measured live, best measured first."""
    position = {r.candidate: index for index, r in enumerate(ranked)}
    rows = []
    for candidate, score in measured.items():
        if candidate not in position:
            continue
        r = ranked[position[candidate]]
        rows.append(
            {
                "key": candidate.key,
                "role": role(candidate, control, baseline, position[candidate] + 1),
                "predicted": {"feasible": r.score.feasible, "throughput_rps": r.score.throughput_rps, "p99_ms": r.score.p99_ms},
                "measured": {"feasible": score.feasible, "throughput_rps": score.throughput_rps, "p99_ms": score.p99_ms},
                "throughput_error": relative(r.score.throughput_rps, score.throughput_rps),
            }
        )
    return sorted(rows, key=lambda row: -row["measured"]["throughput_rps"])


def role(candidate: Candidate, control: Candidate, baseline: Candidate, place: int) -> str:
    if candidate == control:
        return f"control: dynamic_batching {{}} (#{place})"
    return f"the server's config (#{place})" if candidate == baseline else f"predicted #{place}"


def relative(predicted: float, measured: float) -> float | None:
    return None if not measured else (predicted - measured) / measured


def format_comparison(rows: list[dict]) -> str:
    def figures(values: dict) -> str:
        if not values["feasible"]:
            return f"{'infeasible':>24}"
        return f"{values['throughput_rps']:7.1f} req/s p99 {values['p99_ms'] or 0:6.1f} ms"

    lines = [f"{'config':36} {'role':30} {'predicted':>24}   {'measured':>24}   error"]
    for row in rows:
        error = row["throughput_error"]
        text = f"{error:+.0%}" if error is not None else "-"
        lines.append(f"{row['key']:36} {row['role']:30} {figures(row['predicted'])}   {figures(row['measured'])}   {text}")
    return "\n".join(lines)


def write_report(path: Path, source: str, ranked: list[Ranked], rows: list[dict], seconds: float) -> None:
    document = {
        "cost_model": source,
        "simulated": len(ranked),
        "simulation_s": round(seconds, 1),
        "ranking": [{"key": r.candidate.key, "predicted": r.score.__dict__} for r in ranked[:20]],
        "predicted_vs_measured": rows,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=1, default=str))


@dataclass
class GuidedPlan:
    """The ranking of one guided tune and what it sends to be measured live."""

    ranked: list[Ranked]
    source: str  # where the cost model came from
    simulation_s: float
    top: list[Candidate]
    control: Candidate  # Triton's default batcher, measured beside the top few
    baseline: Candidate  # the server's config, measured first by every sweep

    @property
    def to_measure(self) -> list[Candidate]:
        return list(dict.fromkeys([*self.top, self.control]))

    def finish(self, trials: list, path: Path) -> str:
        """Predicted vs measured for every candidate measured (trials: tools.tune.session.Trial,
        a confirmed trial after its first run); written to `path`, returned as a table."""
        measured = {t.candidate: t.score for t in trials}
        rows = comparison(self.ranked, measured, self.control, self.baseline)
        write_report(path, self.source, self.ranked, rows, self.simulation_s)
        return format_comparison(rows)


def plan_guided(
    pipeline: Pipeline,
    source: str,
    candidates: list[Candidate],
    control: Candidate,
    baseline: Candidate,
    traffics: list[Traffic],
    p99_ms: float,
    objective: str,
    top: int,
) -> GuidedPlan:
    """Rank `candidates` and pick the top few besides the control and the server's config
    (`baseline`), which are measured anyway and ranked too, so their predictions are reported."""
    started = time.perf_counter()
    log.info("simulating %d candidates x %d traffic levels on %s", len(candidates), len(traffics), source)
    ranked = rank(pipeline, [*candidates, control, baseline], traffics, p99_ms, objective)
    seconds = time.perf_counter() - started
    best = top_candidates([r for r in ranked if r.candidate not in (control, baseline)], top)
    log.info(
        "simulated in %.1f s; measuring live the top %d (%s) and the control %s",
        seconds,
        len(best),
        ", ".join(c.key for c in best),
        control.key,
    )
    return GuidedPlan(ranked, source, seconds, best, control, baseline)
