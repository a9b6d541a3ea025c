"""Replay one open-loop arrival trace and keep every request's (send time, latency, outcome).

The load generator's engine summarises steady windows; comparing configs on a trace
that changes needs the raw records, windowed afterwards by the trace's own clock. The
same pieces are reused: the loadgen targets, its error classification, its aio clients.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tools.loadgen.measure import REQUEST_DEADLINE_S, _aio_module
from tools.loadgen.report import OK, LatencySummary, classify_error
from tools.loadgen.targets import Target


@dataclass(frozen=True)
class Phase:
    name: str
    rate: float
    seconds: float


@dataclass
class Records:
    sent_s: list[float] = field(default_factory=list)  # offset from the trace start
    latency_s: list[float] = field(default_factory=list)
    outcome: list[str] = field(default_factory=list)
    max_lag_s: float = 0.0

    def add(self, sent: float, latency: float, outcome: str) -> None:
        self.sent_s.append(sent)
        self.latency_s.append(latency)
        self.outcome.append(outcome)


def phase_trace(phases: Sequence[Phase], seed: int = 0) -> np.ndarray:
    """Poisson arrivals whose rate steps through the phases (a compressed day with bursts)."""
    rng = np.random.default_rng(seed)
    offsets, start = [], 0.0
    for phase in phases:
        t = start
        while True:
            t += rng.exponential(1.0 / phase.rate)
            if t >= start + phase.seconds:
                break
            offsets.append(t)
        start += phase.seconds
    return np.asarray(offsets)


def phase_of(phases: Sequence[Phase], t: float) -> int:
    start = 0.0
    for index, phase in enumerate(phases):
        if t < start + phase.seconds:
            return index
        start += phase.seconds
    return len(phases) - 1


async def _replay(target: Target, arrivals: np.ndarray, url: str, protocol: str) -> Records:
    module = _aio_module(protocol)
    client = module.InferenceServerClient(url, **({"conn_limit": 4096} if protocol == "http" else {}))
    records = Records()
    outputs = [module.InferRequestedOutput(name) for name in target.outputs]
    tasks: set[asyncio.Task] = set()

    async def send(index: int, offset: float) -> None:
        inputs = target.make_inputs(module, index)
        started = time.perf_counter()
        try:
            await asyncio.wait_for(client.infer(target.model, inputs, outputs=outputs), REQUEST_DEADLINE_S)
            outcome = OK
        except asyncio.TimeoutError:
            outcome = "client_deadline"
        except Exception as exc:  # InferenceServerException and transport errors alike count as failures
            message = exc.message() if hasattr(exc, "message") and callable(exc.message) else str(exc)
            outcome = classify_error(message or type(exc).__name__)
        records.add(offset, time.perf_counter() - started, outcome)

    try:
        t0 = time.perf_counter()
        for index, offset in enumerate(arrivals):
            delay = t0 + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            records.max_lag_s = max(records.max_lag_s, time.perf_counter() - t0 - offset)
            task = asyncio.create_task(send(index, float(offset)))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        await asyncio.gather(*list(tasks), return_exceptions=True)
    finally:
        await client.close()
    return records


def replay(target: Target, arrivals: np.ndarray, url: str, protocol: str = "grpc") -> Records:
    """Send every arrival at its offset (blocking) and return the per-request records."""
    return asyncio.run(_replay(target, arrivals, url, protocol))


@dataclass(frozen=True)
class WindowFigures:
    """One window of a replay. With nothing sent there is no attainment, and with nothing
    answered no latency: those figures are None, never 1.0 or 0 ms."""

    start_s: float
    sent: int
    failed: int
    attainment: float | None  # share of the requests sent in the window answered within the SLO (failures miss)
    throughput_rps: float  # successful requests per second
    mean_ms: float | None
    p99_ms: float | None


def window_figures(records: Records, start: float, end: float, slo_ms: float) -> WindowFigures:
    sent = np.asarray(records.sent_s)
    chosen = (sent >= start) & (sent < end)
    latency_ms = np.asarray(records.latency_s)[chosen] * 1000.0
    ok = np.asarray([o == OK for o in records.outcome], dtype=bool)[chosen]
    count = int(chosen.sum())
    good = latency_ms[ok]
    summary = LatencySummary.of(good / 1000.0)
    return WindowFigures(
        start_s=start,
        sent=count,
        failed=int(count - ok.sum()),
        attainment=float(((good <= slo_ms).sum()) / count) if count else None,
        throughput_rps=float(ok.sum() / (end - start)),
        mean_ms=summary.mean_ms,
        p99_ms=summary.p99_ms,
    )


def windows(records: Records, total_s: float, window_s: float, slo_ms: float) -> list[WindowFigures]:
    edges = np.arange(0.0, total_s, window_s)
    return [window_figures(records, float(a), float(min(a + window_s, total_s)), slo_ms) for a in edges]
