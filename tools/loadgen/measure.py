"""The load engine: asyncio senders over tritonclient's aio clients.

Closed loop: N senders, each sending its next request when the last returns. Open
loop: requests leave at precomputed arrival times whatever the server does (each in
its own task), and a send later than 10 ms behind schedule is counted, so a client
that cannot keep up says so instead of silently lowering the load.
Like perf_analyzer, a warm-up is discarded and fixed windows are measured until the
last few agree (throughput and p99 within `stability`) or a window budget runs out.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import numpy as np

from tools.loadgen.report import (
    OK,
    LatencySummary,
    LoadResult,
    ServerWindow,
    classify_error,
    format_ms,
    summarise_classes,
    summarise_lengths,
)
from tools.loadgen.targets import Target
from tools.loadgen.traffic import Traffic
from tools.stats import ModelStats

log = logging.getLogger(__name__)

LATE_SEND_S = 0.010
REQUEST_DEADLINE_S = 120.0


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


@dataclass
class _Log:
    """One entry per request: when it was sent and finished, its outcome and class."""

    sent: list[float] = field(default_factory=list)
    done: list[float] = field(default_factory=list)
    outcome: list[str] = field(default_factory=list)
    priority: list[int] = field(default_factory=list)
    length_class: list[str] = field(default_factory=list)  # "" when the target has no classes
    tokens: list[int] = field(default_factory=list)
    late: int = 0
    max_lag: float = 0.0

    def add(self, sent: float, done: float, outcome: str, priority: int, length_class: str = "", tokens: int = 0) -> None:
        self.sent.append(sent)
        self.done.append(done)
        self.outcome.append(outcome)
        self.priority.append(priority)
        self.length_class.append(length_class)
        self.tokens.append(tokens)


def _aio_module(protocol: str):
    if protocol == "grpc":
        import tritonclient.grpc.aio as module
    elif protocol == "http":
        import tritonclient.http.aio as module
    else:
        raise ValueError(f"unknown protocol {protocol!r}")
    return module


def _window_figures(entries: _Log, start: float, end: float) -> tuple[float, float | None]:
    """Throughput and p99 (None: nothing succeeded) of the requests that completed in [start, end)."""
    done = np.asarray(entries.done)
    sent = np.asarray(entries.sent)
    ok = np.asarray([outcome == OK for outcome in entries.outcome], dtype=bool)
    inside = (done >= start) & (done < end) & ok
    if not inside.any():
        return 0.0, None
    return inside.sum() / (end - start), float(np.percentile(done[inside] - sent[inside], 99))


def _is_stable(figures: list[tuple[float, float | None]], count: int, tolerance: float) -> bool:
    if len(figures) < count or any(p99 is None for _, p99 in figures[-count:]):
        return False
    recent = np.asarray(figures[-count:], dtype=float)
    if (recent[:, 0] <= 0).any():
        return False
    means = recent.mean(axis=0)
    return bool((np.abs(recent - means) <= tolerance * means).all())


class _Engine:
    def __init__(self, target: Target, traffic: Traffic, measurement: Measurement, url: str, protocol: str, stats_url: str) -> None:
        self.target, self.traffic, self.measurement = target, traffic, measurement
        self.url, self.protocol, self.stats_url = url, protocol, stats_url
        self.module = _aio_module(protocol)
        self.entries = _Log()
        self.stop = asyncio.Event()
        self.tasks: set[asyncio.Task] = set()
        self.count = 0
        self.started = 0.0
        budget = measurement.warmup_s + measurement.window_s * measurement.max_windows + 1.0
        self.priorities = traffic.priorities(200_000)
        self.arrivals = None if traffic.closed_loop else traffic.arrivals(budget)

    async def send_one(self, client, priority: int) -> None:
        index = self.count
        self.count += 1
        inputs = self.target.make_inputs(self.module, index)
        outputs = [self.module.InferRequestedOutput(name) for name in self.target.outputs]
        started = time.perf_counter()
        try:
            call = client.infer(self.target.model, inputs, outputs=outputs, priority=int(priority), timeout=self.traffic.timeout_us)
            await asyncio.wait_for(call, REQUEST_DEADLINE_S)
            outcome = OK
        except asyncio.TimeoutError:
            outcome = "client_deadline"
        except Exception as exc:  # tritonclient raises InferenceServerException; transport errors too
            message = exc.message() if hasattr(exc, "message") and callable(exc.message) else str(exc)
            outcome = classify_error(message or type(exc).__name__)
        length_class, tokens = self.target.request_class(index) if self.target.request_class else ("", 0)
        self.entries.add(started, time.perf_counter(), outcome, int(priority), length_class, tokens)

    async def closed_loop_sender(self, client) -> None:
        while not self.stop.is_set():
            await self.send_one(client, self.priorities[self.count % len(self.priorities)])

    async def open_loop_scheduler(self, client, t0: float) -> None:
        for index, offset in enumerate(self.arrivals):
            delay = t0 + offset - time.perf_counter()
            if delay > 0:
                try:
                    await asyncio.wait_for(self.stop.wait(), delay)
                    return
                except asyncio.TimeoutError:
                    pass
            if self.stop.is_set():
                return
            lag = time.perf_counter() - (t0 + offset)
            if lag > LATE_SEND_S:
                self.entries.late += 1
            self.entries.max_lag = max(self.entries.max_lag, lag)
            task = asyncio.create_task(self.send_one(client, self.priorities[index % len(self.priorities)]))
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def snapshot(self) -> dict[str, ModelStats]:
        loop = asyncio.get_running_loop()
        models = self.measurement.server_models
        stats = await asyncio.gather(*(loop.run_in_executor(None, ModelStats.fetch, self.stats_url, m) for m in models))
        return dict(zip(models, stats))

    async def run(self) -> LoadResult:
        m = self.measurement
        kwargs = {"conn_limit": 4096} if self.protocol == "http" else {}
        client = self.module.InferenceServerClient(self.url, **kwargs)
        senders: list[asyncio.Task] = []
        try:
            self.started = t0 = time.perf_counter()
            if self.traffic.closed_loop:
                senders = [asyncio.create_task(self.closed_loop_sender(client)) for _ in range(self.traffic.concurrency)]
            else:
                senders = [asyncio.create_task(self.open_loop_scheduler(client, t0))]
            await asyncio.sleep(m.warmup_s)
            boundaries = [time.perf_counter()]
            snapshots = [await self.snapshot()]
            figures: list[tuple[float, float | None]] = []
            while len(figures) < m.max_windows:
                await asyncio.sleep(max(0.0, boundaries[-1] + m.window_s - time.perf_counter()))
                boundaries.append(time.perf_counter())
                snapshots.append(await self.snapshot())
                figures.append(_window_figures(self.entries, boundaries[-2], boundaries[-1]))
                throughput, p99 = figures[-1]
                log.debug("window %d: %.1f req/s, p99 %s ms", len(figures), throughput, format_ms(None if p99 is None else p99 * 1000))
                if _is_stable(figures, m.stable_windows, m.stability):
                    break
        except BaseException:
            # A failed statistics snapshot (or a cancel) ends the run: nothing may keep sending.
            for task in [*senders, *self.tasks]:
                task.cancel()
            raise
        finally:
            self.stop.set()
            await asyncio.gather(*senders, *list(self.tasks), return_exceptions=True)
            await client.close()
        stable = _is_stable(figures, m.stable_windows, m.stability)
        used = min(m.stable_windows, len(figures))
        return self.summarise(boundaries[-1 - used], boundaries[-1], len(figures), stable, snapshots[-1 - used], snapshots[-1])

    def summarise(self, start: float, end: float, windows: int, stable: bool, first: dict, last: dict) -> LoadResult:
        entries = self.entries
        sent = np.asarray(entries.sent)
        chosen = (sent >= start) & (sent < end)
        outcomes = [o for o, keep in zip(entries.outcome, chosen) if keep]
        latencies = (np.asarray(entries.done) - sent)[chosen]
        priorities = np.asarray(entries.priority)[chosen]
        ok = np.asarray([o == OK for o in outcomes], dtype=bool)
        seconds = end - start
        counts: dict[str, int] = {}
        for outcome in outcomes:
            counts[outcome] = counts.get(outcome, 0) + 1
        return LoadResult(
            traffic=self.traffic.label(),
            target=self.target.describe,
            protocol=self.protocol,
            measured_s=seconds,
            windows=windows,
            stable=stable,
            sent=int(chosen.sum()),
            outcomes=counts,
            throughput_rps=float(ok.sum() / seconds),
            rows_per_s=float(ok.sum() * self.target.rows_per_request / seconds),
            latency=LatencySummary.of(latencies[ok]) if len(ok) else LatencySummary(),
            per_priority=summarise_classes(priorities, outcomes, latencies, seconds),
            late_sends=entries.late,
            max_send_lag_ms=entries.max_lag * 1000.0,
            server={name: ServerWindow.of(last[name] - first[name]) for name in last},
            run_sent=self.count,
            run_outcomes={o: entries.outcome.count(o) for o in set(entries.outcome)},
            run_per_priority=summarise_classes(
                np.asarray(entries.priority), entries.outcome, np.asarray(entries.done) - np.asarray(entries.sent), end - self.started
            ),
            open_loop=not self.traffic.closed_loop,
            **self.length_figures(chosen, outcomes, latencies, seconds),
        )

    def length_figures(self, chosen: np.ndarray, outcomes: list[str], latencies: np.ndarray, seconds: float) -> dict:
        """Results per length class and useful (real) tokens/s, for targets that know them."""
        if not self.target.request_class:
            return {}
        labels = [label for label, keep in zip(self.entries.length_class, chosen) if keep]
        per_class, useful = summarise_lengths(labels, np.asarray(self.entries.tokens)[chosen], outcomes, latencies, seconds)
        return {"per_length_class": per_class, "useful_tokens_per_s": useful}


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
    return asyncio.run(_Engine(target, traffic, measurement, url, protocol, stats_url).run())


def measure_capacity(target: Target, url: str, protocol: str = "grpc", stats_url: str | None = None, concurrency: int = 8) -> float:
    """Successful requests per second under a closed loop of `concurrency` clients: what this
    server sustains for this traffic on this machine now. Open-loop rates meant to be "below"
    or "above" capacity derive from it, since machines differ several-fold in speed."""
    measurement = Measurement(warmup_s=1.0, window_s=2.0, stable_windows=3, max_windows=5, stability=0.15)
    result = run_load(target, Traffic(concurrency=concurrency), measurement, url, protocol, stats_url)
    if result.error_count or result.throughput_rps <= 0:
        raise RuntimeError(f"capacity of {target.model} could not be measured: outcomes {result.outcomes} in {result.measured_s:.1f} s")
    return result.throughput_rps
