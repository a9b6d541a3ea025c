"""Loadgen's measurement: one load level on the engine (tools/load), read in steady windows.

Like perf_analyzer, a warm-up is discarded and fixed windows are measured until the
last few agree (throughput and p99 within `stability`) or a window budget runs out; the
server's statistics are read at every window boundary, so its batching figures cover
exactly the measured windows.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

import numpy as np

from tools.load.driver import LoadDriver, Record, run_until_complete
from tools.load.outcomes import OK
from tools.load.requests import Target
from tools.load.results import Results, format_ms, percentile
from tools.load.schedules import Phase
from tools.load.triton import TritonSender
from tools.loadgen.report import LoadResult, ServerWindow
from tools.loadgen.traffic import Traffic
from tools.triton_client.stats import ModelStats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Measurement:
    warmup_s: float = 2.0
    window_s: float = 4.0
    stable_windows: int = 3
    max_windows: int = 8
    stability: float = 0.10
    server_models: tuple[str, ...] = ()  # models whose statistics are reported (deltas)

    def __post_init__(self) -> None:
        if self.warmup_s < 0:
            raise ValueError(f"the warm-up (--warmup) cannot be negative, got {self.warmup_s:g} s")
        if self.window_s <= 0:
            raise ValueError(f"a measurement window (--window) must last more than 0 s, got {self.window_s:g}")
        if self.max_windows < 1 or self.stable_windows < 1:
            raise ValueError(f"at least one measurement window is needed (--max-windows), got {self.max_windows}")
        if self.stability <= 0:
            raise ValueError(f"the allowed spread (--stability) must be above 0, got {self.stability:g}")

    @property
    def budget_s(self) -> float:
        return self.warmup_s + self.window_s * self.max_windows + 1.0


def window_figures(records: list[Record], start: float, end: float) -> tuple[float, float | None]:
    """Throughput and p99 (None: nothing succeeded) of the requests that completed in [start, end)."""
    inside = [r.latency_s for r in records if r.outcome == OK and start <= r.done_s < end]
    return len(inside) / (end - start), percentile(inside, 99)


def is_stable(figures: list[tuple[float, float | None]], count: int, tolerance: float) -> bool:
    if len(figures) < count or any(p99 is None for _, p99 in figures[-count:]):
        return False
    recent = np.asarray(figures[-count:], dtype=float)
    if (recent[:, 0] <= 0).any():
        return False
    means = recent.mean(axis=0)
    return bool((np.abs(recent - means) <= tolerance * means).all())


class _Windows:
    """Runs the engine and cuts its records into windows until they are stable."""

    def __init__(self, target: Target, traffic: Traffic, measurement: Measurement, url: str, protocol: str, stats_url: str) -> None:
        self.target, self.traffic, self.measurement, self.protocol, self.stats_url = target, traffic, measurement, protocol, stats_url
        phases = [Phase(traffic.schedule(), measurement.budget_s)]
        self.engine = LoadDriver(TritonSender(url, target, protocol), phases, traffic.mix(), seed=traffic.seed)

    async def snapshot(self) -> dict[str, ModelStats]:
        loop = asyncio.get_running_loop()
        models = self.measurement.server_models
        stats = await asyncio.gather(*(loop.run_in_executor(None, ModelStats.fetch, self.stats_url, m) for m in models))
        return dict(zip(models, stats))

    async def run(self) -> LoadResult:
        m, engine = self.measurement, self.engine
        stop = asyncio.Event()
        driving = asyncio.create_task(engine.run(stop))
        try:
            ready = asyncio.create_task(engine.ready.wait())
            await asyncio.wait([ready, driving], return_when=asyncio.FIRST_COMPLETED)
            ready.cancel()
            if driving.done():
                driving.result()  # the run could not start: its error
            await asyncio.sleep(m.warmup_s)
            boundaries = [engine.now()]
            snapshots = [await self.snapshot()]
            figures: list[tuple[float, float | None]] = []
            while len(figures) < m.max_windows and not driving.done():
                await asyncio.sleep(max(0.0, boundaries[-1] + m.window_s - engine.now()))
                boundaries.append(engine.now())
                snapshots.append(await self.snapshot())
                figures.append(window_figures(engine.records, boundaries[-2], boundaries[-1]))
                throughput, p99 = figures[-1]
                log.debug("window %d: %.1f req/s, p99 %s ms", len(figures), throughput, format_ms(None if p99 is None else p99 * 1000))
                if is_stable(figures, m.stable_windows, m.stability):
                    break
        except BaseException:
            driving.cancel()  # a failed statistics snapshot (or a cancel) ends the run: nothing may keep sending
            await asyncio.gather(driving, return_exceptions=True)
            raise
        stop.set()
        run = await driving
        used = min(m.stable_windows, len(figures))
        start, end = boundaries[-1 - used], boundaries[-1]
        measured = run.results(start, end)
        whole = Results.of(run.records, run.seconds)
        return LoadResult(
            traffic=self.traffic.label(),
            target=self.target.describe,
            protocol=self.protocol,
            measured_s=end - start,
            windows=len(figures),
            stable=is_stable(figures, m.stable_windows, m.stability),
            sent=measured.sent,
            outcomes=measured.outcomes,
            throughput_rps=measured.throughput_rps,
            rows_per_s=measured.rows_per_s,
            latency=measured.latency,
            per_priority=measured.per_priority,
            late_sends=run.late_sends,
            max_send_lag_ms=run.max_lag_s * 1000.0,
            server={name: ServerWindow.of(snapshots[-1][name] - snapshots[-1 - used][name]) for name in snapshots[-1]},
            run_sent=run.sent,
            run_outcomes=whole.outcomes,
            run_per_priority=whole.per_priority,
            open_loop=not self.traffic.closed_loop,
            per_length_class=measured.per_label if self.target.request_class else {},
            useful_tokens_per_s=measured.useful_tokens_per_s,
        )


def run_load(
    target: Target,
    traffic: Traffic,
    measurement: Measurement,
    url: str,
    protocol: str = "grpc",
    stats_url: str | None = None,
) -> LoadResult:
    """Drive one load level against a running server and measure it (blocking)."""
    stats_url = stats_url or url
    if measurement.server_models and protocol == "grpc" and stats_url == url:
        raise ValueError("server statistics are read over HTTP: pass stats_url (host:http_port)")
    return run_until_complete(_Windows(target, traffic, measurement, url, protocol, stats_url).run())


def measure_capacity(target: Target, url: str, protocol: str = "grpc", stats_url: str | None = None, concurrency: int = 8) -> float:
    """Successful requests per second under a closed loop of `concurrency` clients: what this
    server sustains for this traffic on this machine now. Open-loop rates meant to be "below"
    or "above" capacity derive from it, since machines differ several-fold in speed."""
    measurement = Measurement(warmup_s=1.0, window_s=2.0, stable_windows=3, max_windows=5, stability=0.15)
    result = run_load(target, Traffic(concurrency=concurrency), measurement, url, protocol, stats_url)
    if result.error_count or result.throughput_rps <= 0:
        raise RuntimeError(f"capacity of {target.model} could not be measured: outcomes {result.outcomes} in {result.measured_s:.1f} s")
    return result.throughput_rps
