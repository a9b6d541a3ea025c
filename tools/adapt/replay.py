"""Replay one open-loop arrival trace on the load driver and window its records afterwards.

Comparing configs on a trace that changes needs the raw per-request records (the engine's
`Run`), cut by the trace's own clock into windows and phases after the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from tools.load import driver, schedules
from tools.load.driver import Record, Run
from tools.load.outcomes import OK
from tools.load.requests import Target
from tools.load.results import Results
from tools.load.triton import TritonSender


@dataclass(frozen=True)
class TracePhase:
    """A named stretch of Poisson arrivals ('low', 'peak') of the adaptive benchmark's trace."""

    name: str
    rate: float
    seconds: float

    def schedule_phase(self) -> schedules.Phase:
        return schedules.Phase(schedules.Poisson(self.rate), self.seconds, self.name)


def phase_trace(phases: Sequence[TracePhase], seed: int = 0) -> np.ndarray:
    """Poisson arrivals whose rate steps through the phases (a compressed day with bursts)."""
    return schedules.arrivals([phase.schedule_phase() for phase in phases], seed)


def phase_of(phases: Sequence[TracePhase], t: float) -> int:
    return schedules.phase_index([phase.schedule_phase() for phase in phases], t)


def replay(target: Target, arrivals: np.ndarray, url: str, protocol: str = "grpc") -> Run:
    """Send every arrival at its offset (blocking) and return the per-request records."""
    trace = schedules.Trace(tuple(float(t) for t in arrivals), cycle=False)
    phase = schedules.Phase(trace, float(arrivals[-1]) + 1e-6 if len(arrivals) else 1e-6)
    return driver.drive(TritonSender(url, target, protocol), [phase])


def slo_figures(records: Sequence[Record], seconds: float, slo_ms: float) -> dict:
    """Counts, SLO attainment and latency of some requests. With nothing sent there is no
    attainment, and with nothing answered no latency: those figures are None."""
    results = Results.of(records, seconds)
    within = sum(1 for r in records if r.outcome == OK and r.latency_s * 1000.0 <= slo_ms)
    return {
        "sent": results.sent,
        "failed": results.failed,
        "attainment": within / results.sent if results.sent else None,
        "throughput_rps": results.throughput_rps,
        "mean_ms": results.latency.mean_ms,
        "p99_ms": results.latency.p99_ms,
    }


@dataclass(frozen=True)
class WindowFigures:
    """One window of a replay (slo_figures of the requests sent in it)."""

    start_s: float
    sent: int
    failed: int
    attainment: float | None  # share of the requests sent in the window answered within the SLO (failures miss)
    throughput_rps: float  # successful requests per second
    mean_ms: float | None
    p99_ms: float | None


def slo_window_figures(records: Sequence[Record], start: float, end: float, slo_ms: float) -> WindowFigures:
    chosen = [r for r in records if start <= r.sent_s < end]
    return WindowFigures(start, **slo_figures(chosen, end - start, slo_ms))


def windows(records: Sequence[Record], total_s: float, window_s: float, slo_ms: float) -> list[WindowFigures]:
    edges = np.arange(0.0, total_s, window_s)
    return [slo_window_figures(records, float(a), float(min(a + window_s, total_s)), slo_ms) for a in edges]
