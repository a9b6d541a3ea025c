"""`python -m tools.simulate adapt`: tools.adapt's control law evaluated inside the simulator.

On this CPU batching gains too little for the controller to ever raise the delay, so its
behaviour where batching pays could only be shown in unit tests. Here the same
`Controller` (tools/adapt/control.py) watches simulated windows of the encoder's
figures (busy share, queue and compute time, batch size, failures: what
tools/adapt/observe.py reads from Triton's statistics) and changes the simulated
batcher's delay, a reload taking `reload_s` to take effect (the old delay serves until
then). The trace is `make bench-adapt`'s: Poisson arrivals stepping through low and peak
phases (tools/adapt/replay.py, seed 0), rates from the cost model's batch-1 capacity
unless given, token ids of `seq_len` sent straight to the encoder. The same trace is
simulated against every static delay of a grid; per phase, the report gives the delays
the controller ran and everyone's SLO attainment (share of the requests sent in the phase
answered within the SLO; failures miss).
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

import numpy as np

from tools.adapt.control import Controller, ControlSettings, Observation
from tools.adapt.replay import TracePhase, phase_trace
from tools.repo.model_config import ModelConfig
from tools.simulate.batcher import BatcherSpec
from tools.simulate.cost_model import CostModel
from tools.simulate.discrete_event import OK, SimRequest, Simulation

STATIC_DELAYS_US = (0, 1000, 2000, 4000, 6000, 8000, 10_000, 15_000, 20_000)


@dataclass(frozen=True)
class AdaptSimSettings:
    p99_ms: float = 150.0  # make bench-adapt's ADAPT_P99_MS
    seq_len: int = 128
    low_rate: float | None = None  # None: 25% of the batch-1 capacity, as bench-adapt
    peak_rate: float | None = None  # None: 75% of it
    phase_s: float = 15.0
    pattern: tuple[str, ...] = ("low", "peak", "low", "peak")
    static_delays_us: tuple[int, ...] = STATIC_DELAYS_US
    control_window_s: float = 2.0  # bench-adapt's --control-window
    min_interval_s: float = 6.0  # bench-adapt's --min-interval
    reload_s: float = 2.0  # a reload's time to take effect (measured ~2 s on this CPU)
    min_delay_us: int = 0  # the controller's floor (tools.adapt --min-delay-us): a standby delay kept while quiet
    seed: int = 0

    def __post_init__(self) -> None:
        if not self.p99_ms > 0:
            raise ValueError(f"impossible SLO: --p99-ms must be above 0, got {self.p99_ms:g}")
        if self.seq_len < 1 or not self.phase_s > 0 or not self.pattern:
            raise ValueError("--seq-len must be >= 1, --phase-s above 0 and --pattern non-empty")
        unknown = sorted(set(self.pattern) - {"low", "peak"})
        if unknown:
            raise ValueError(f"--pattern names phases low and peak only, got {unknown}")
        for option, rate in (("--low-rate", self.low_rate), ("--peak-rate", self.peak_rate)):
            if rate is not None and not rate > 0:
                raise ValueError(f"{option} must be above 0 req/s, got {rate:g}")
        if not self.static_delays_us or min(self.static_delays_us) < 0:
            raise ValueError("--delays-us must list delays >= 0")
        if not self.control_window_s > 0 or self.min_interval_s < 0 or self.reload_s < 0:
            raise ValueError("--control-window must be above 0, --min-interval and --reload-s not negative")
        if self.min_delay_us < 0:
            raise ValueError(f"--min-delay-us must not be negative, got {self.min_delay_us}")


@dataclass
class TraceRun:
    """One simulated replay: every request, and the delay the batcher ran from when."""

    requests: list[SimRequest]
    delays: list[tuple[float, int]]  # (from ms, delay us)
    decisions: list = field(default_factory=list)

    def delay_at(self, t_ms: float) -> int:
        current = self.delays[0][1]
        for start, delay in self.delays:
            if start <= t_ms:
                current = delay
        return current


def capacity(cost: CostModel, spec: BatcherSpec, seq_len: int) -> tuple[float, float]:
    """Batch-1 rows/s of all instances, and the batching gain (best rows/s over batch-1 rows/s)."""
    one = cost.execution_ms("encoder", 1, seq_len, spec.instances)
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64, 128) if b <= spec.max_batch_size]
    best = max(b / cost.execution_ms("encoder", b, seq_len, spec.instances) for b in sizes)
    return 1000.0 / one * spec.instances, best * one


def observe(sim: Simulation, requests: list[SimRequest], start: float, end: float, instances: int) -> Observation:
    """The window [start, end) as tools/adapt/observe.py reads it from Triton's statistics:
    requests answered by the encoder, their mean queue and compute time, executions' busy share."""
    executions = [e for e in sim.executions if start <= e.ended < end]
    busy_ms = sum(e.ended - e.started for e in executions)
    rows = sum(e.rows for e in executions)
    compute = sum((e.ended - e.started) * e.rows for e in executions)
    answered = [r for r in requests if start <= r.done < end]
    ok = [r for r in answered if r.outcome == OK and "encoder" in r.queue_ms]
    seconds = (end - start) / 1000.0
    return Observation(
        window_s=seconds,
        requests=rows,
        busy=busy_ms / (end - start) / max(1, instances),
        queue_ms=float(np.mean([r.queue_ms["encoder"] for r in ok])) if ok else None,
        compute_ms=compute / rows if rows else None,
        batch_size=rows / len(executions) if executions else None,
        rejected=sum(1 for r in answered if r.outcome != OK),
    )


def replay(
    cost: CostModel,
    spec: BatcherSpec,
    arrivals_s: np.ndarray,
    settings: AdaptSimSettings,
    law: ControlSettings | None = None,
) -> TraceRun:
    """The trace against `spec` (static), or with a Controller changing its delay (`law`)."""
    sim = Simulation(cost, [("encoder", spec)], seed=settings.seed, stall=None)
    requests = [SimRequest(i, float(t) * 1000.0, tokens=settings.seq_len) for i, t in enumerate(arrivals_s)]
    for request in requests:
        sim.push(request.sent, sim.arrive, request)
    run = TraceRun(requests, [(0.0, spec.delay_us)])
    if law is not None:
        controller = Controller(law, spec.delay_us)
        window_ms = settings.control_window_s * 1000.0
        end_ms = float(arrivals_s[-1]) * 1000.0 if len(arrivals_s) else 0.0

        def reloaded(now: float, delay_us: int) -> None:
            step = sim.steps[0]
            step.spec = dataclasses.replace(step.spec, delay_us=delay_us)
            controller.reload_finished(True)
            run.delays.append((now, delay_us))
            sim.schedule(now, 0)

        def window(now: float) -> None:
            decision = controller.observe(observe(sim, requests, now - window_ms, now, spec.instances), now / 1000.0)
            run.decisions.append(decision)
            if decision.changed:
                sim.push(now + settings.reload_s * 1000.0, reloaded, decision.after_us)
            if now + window_ms <= end_ms:
                sim.push(now + window_ms, window)

        sim.push(window_ms, window)
    sim.run()
    return run


def attainment(run: TraceRun, start_ms: float, end_ms: float, p99_ms: float) -> dict:
    """SLO attainment, p99 and failures of the requests sent in [start, end)."""
    chosen = [r for r in run.requests if start_ms <= r.sent < end_ms]
    latencies = np.asarray([r.done - r.sent for r in chosen if r.outcome == OK])
    within = int((latencies <= p99_ms).sum()) if len(latencies) else 0
    return {
        "sent": len(chosen),
        "attainment": within / len(chosen) if chosen else None,
        "p99_ms": float(np.percentile(latencies, 99)) if len(latencies) else None,
        "failed": len(chosen) - len(latencies),
    }


def delays_in(run: TraceRun, start_ms: float, end_ms: float) -> dict:
    """The delays the batcher ran during [start, end): time-weighted mean, lowest, highest."""
    edges = sorted({start_ms, end_ms, *(t for t, _ in run.delays if start_ms < t < end_ms)})
    spans = [(b - a, run.delay_at(a)) for a, b in itertools.pairwise(edges)]
    total = sum(span for span, _ in spans) or 1.0
    values = [delay for _, delay in spans]
    return {"mean_us": sum(span * delay for span, delay in spans) / total, "min_us": min(values), "max_us": max(values)}


def evaluate(cost: CostModel, base: ModelConfig, settings: AdaptSimSettings) -> dict:
    """Every static delay and the controller over the same trace, per phase and overall."""
    spec = BatcherSpec.from_config(base)
    if not spec.dynamic:
        raise ValueError("the encoder config has no dynamic_batching: there is no delay to control")
    rows_per_s, gain = capacity(cost, spec, settings.seq_len)
    rates = {"low": settings.low_rate or round(0.25 * rows_per_s, 1), "peak": settings.peak_rate or round(0.75 * rows_per_s, 1)}
    phases = [TracePhase(name, rates[name], settings.phase_s) for name in settings.pattern]
    arrivals = phase_trace(phases, seed=settings.seed)
    if not len(arrivals):
        raise ValueError("the trace has no requests: raise the rates or --phase-s")
    law = ControlSettings(
        p99_ms=settings.p99_ms,
        batching_gain=gain,
        min_interval_s=settings.min_interval_s,
        max_batch_size=spec.max_batch_size,
        min_delay_us=settings.min_delay_us,
        max_delay_us=max(ControlSettings.max_delay_us, settings.min_delay_us),
    )
    runs = {f"static {d} us": replay(cost, dataclasses.replace(spec, delay_us=d), arrivals, settings) for d in settings.static_delays_us}
    start_delay = max(spec.delay_us, settings.min_delay_us)  # tools.adapt starts inside its bounds too
    runs["controller"] = replay(cost, dataclasses.replace(spec, delay_us=start_delay), arrivals, settings, law)
    bounds, start = [], 0.0
    for phase in phases:
        bounds.append((phase.name, phase.rate, start * 1000.0, (start + phase.seconds) * 1000.0))
        start += phase.seconds
    total = (0.0, start * 1000.0 + 1e-6)
    table = []
    for name, rate, a, b in [*bounds, ("whole trace", None, *total)]:
        row = {"phase": name, "rate_rps": rate, "controller_delay": delays_in(runs["controller"], a, b)}
        asked = [d.direction for d in runs["controller"].decisions if a <= d.at_s * 1000.0 < b]
        row["controller_asked"] = {direction: asked.count(direction) for direction in sorted(set(asked))}
        row["runs"] = {label: attainment(run, a, b, settings.p99_ms) for label, run in runs.items()}
        table.append(row)
    overall = table[-1]["runs"]
    statics = {label: figures["attainment"] or 0.0 for label, figures in overall.items() if label != "controller"}
    best_static = max(statics, key=lambda label: (statics[label], -int(label.split()[1])))
    controller = overall["controller"]["attainment"] or 0.0
    changes = [d.to_dict() for d in runs["controller"].decisions if d.changed]
    return {
        "cost_model_kind": cost.kind,
        "settings": dataclasses.asdict(settings),
        "instances": spec.instances,
        "start_delay_us": start_delay,
        "batch1_capacity_rps": rows_per_s,
        "batching_gain": gain,
        "requests": len(arrivals),
        "phases": table,
        "best_static": best_static,
        "controller_beats_every_static": all(controller > value for value in statics.values()),
        "controller_minus_best_static": controller - statics[best_static],
        "changes": changes,
        "decisions": [d.to_dict() for d in runs["controller"].decisions],
    }


def render(result: dict) -> str:
    """The per-phase table: the controller's delays and attainment beside every static delay."""
    labels = [label for label in result["phases"][0]["runs"] if label != "controller"]
    synthetic = " (SYNTHETIC cost model: a what-if, not a measurement)" if result["cost_model_kind"] == "synthetic" else ""
    head = (
        f"tools.adapt's control law in simulation{synthetic}: {result['requests']} requests, "
        f"batch-1 capacity {result['batch1_capacity_rps']:.0f} req/s, batching gain {result['batching_gain']:.2f}x, "
        f"SLO p99 {result['settings']['p99_ms']:g} ms; cells: SLO attainment (p99 ms)"
    )
    lines = [head, "", "| phase | rate | controller delay (mean, range); windows asking | controller | " + " | ".join(labels) + " |"]
    lines.append("|" + "---|" * (4 + len(labels)))
    for row in result["phases"]:
        d = row["controller_delay"]
        rate = "" if row["rate_rps"] is None else f"{row['rate_rps']:g}/s"
        asked = ", ".join(f"{direction} {count}" for direction, count in row["controller_asked"].items())
        delay = f"{d['mean_us'] / 1000:.1f} ms ({d['min_us'] / 1000:g}-{d['max_us'] / 1000:g}); {asked or '-'}"
        cells = [cell(row["runs"]["controller"])] + [cell(row["runs"][label]) for label in labels]
        lines.append(f"| {row['phase']} | {rate} | {delay} | " + " | ".join(cells) + " |")
    verdict = "beats" if result["controller_beats_every_static"] else "does not beat"
    lines += [
        "",
        f"the controller {verdict} every static delay over the whole trace "
        f"(best static: {result['best_static']}, controller minus it: {result['controller_minus_best_static']:+.1%}); "
        f"{len(result['changes'])} delay changes",
    ]
    return "\n".join(lines)


def cell(figures: dict) -> str:
    value, p99 = figures["attainment"], figures["p99_ms"]
    return "-" if value is None else f"{value:.1%}" + ("" if p99 is None else f" ({p99:.0f})")
