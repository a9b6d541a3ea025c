"""In-process baselines around the same ONNX Runtime session that Triton serves.

The raw batch curve is the ceiling (no RPC, no queue). The naive batcher is the
"queue + thread + timeout" pattern most tutorials show; in-process it pays no RPC,
serialisation or process hop, so on a CPU it bounds the cost of serving from below.
"""

from __future__ import annotations

import asyncio
import os
import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools.contract import TOKEN_INPUTS as INPUT_NAMES
from tools.load.driver import Prepared, drive
from tools.load.mix import Request
from tools.load.results import LatencySummary
from tools.load.schedules import Phase
from tools.loadgen.traffic import Traffic


def open_session(model_path: Path, threads: int | None = None):
    """A CPU session with `threads` intra-op threads (default: OMP_NUM_THREADS, or every core)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0) or (os.cpu_count() or 1)
    return ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])


def token_batch(batch_size: int, sequence_length: int, seed: int = 0) -> dict[str, np.ndarray]:
    ids = np.random.default_rng(seed).integers(1000, 30_000, size=(batch_size, sequence_length), dtype=np.int64)
    return dict(zip(INPUT_NAMES, (ids, np.ones_like(ids))))


@dataclass(frozen=True)
class RawCurvePoint:
    batch_size: int
    rows_per_s: float
    execution_ms: float


def raw_curve(session, sequence_length: int, batch_sizes: list[int], min_seconds: float = 1.0) -> list[RawCurvePoint]:
    points = []
    for size in batch_sizes:
        feeds = token_batch(size, sequence_length)
        session.run(None, feeds)
        runs, started = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - started) < min_seconds or runs < 2:
            session.run(None, feeds)
            runs += 1
        points.append(RawCurvePoint(size, size * runs / elapsed, elapsed / runs * 1000))
    return points


class NaiveBatcher:
    """One worker thread: take the first request, wait up to `timeout_s` for more (up to
    `max_batch`), run them as one batch, resolve each request's future. A batch that fails
    (the session raises, or returns another number of rows) fails each of its requests
    with that error, as ray serve's batcher does; the worker lives on for the next one."""

    def __init__(self, session, max_batch: int, timeout_s: float) -> None:
        self.session, self.max_batch, self.timeout_s = session, max_batch, timeout_s
        self.requests: queue.Queue = queue.Queue()
        self.batches: list[int] = []
        self.worker = threading.Thread(target=self._serve, daemon=True)
        self.worker.start()

    def submit(self, feeds: dict[str, np.ndarray]) -> Future:
        future: Future = Future()
        self.requests.put((feeds, future))
        return future

    def close(self) -> None:
        self.requests.put(None)
        self.worker.join(timeout=10)

    def _serve(self) -> None:
        while (first := self.requests.get()) is not None:
            batch = [first]
            deadline = time.perf_counter() + self.timeout_s
            while len(batch) < self.max_batch and (remaining := deadline - time.perf_counter()) > 0:
                try:
                    item = self.requests.get(timeout=remaining)
                except queue.Empty:
                    break
                if item is None:
                    self.requests.put(None)
                    break
                batch.append(item)
            try:
                joined = {name: np.concatenate([feeds[name] for feeds, _ in batch]) for name in batch[0][0]}
                outputs = self.session.run(None, joined)[0]
                if len(outputs) != len(batch):
                    raise RuntimeError(f"the session returned {len(outputs)} rows for a batch of {len(batch)} requests")
            except Exception as exc:  # every request of the batch fails with it; the worker serves on
                for _, future in batch:
                    future.set_exception(exc)
                continue
            self.batches.append(len(batch))
            for row, (_, future) in enumerate(batch):
                future.set_result(outputs[row : row + 1])


@dataclass(frozen=True)
class InProcessResult:
    label: str
    throughput_rps: float
    latency: LatencySummary
    average_batch: float


class NaiveSender:
    """The load driver's Sender for the in-process batcher: every request one row of token ids."""

    def __init__(self, batcher: NaiveBatcher, sequence_length: int) -> None:
        self.batcher, self.feeds = batcher, token_batch(1, sequence_length)

    async def open(self) -> None:
        pass

    async def close(self) -> None:
        pass

    def prepare(self, request: Request) -> Prepared:
        return Prepared(request, "naive batcher", self.feeds)

    async def send(self, prepared: Prepared) -> None:
        await asyncio.wrap_future(self.batcher.submit(prepared.payload))


def drive_naive(
    batcher: NaiveBatcher, sequence_length: int, traffic: Traffic, warmup_s: float = 1.0, seconds: float = 6.0
) -> InProcessResult:
    """One load level (closed or open loop) on the load driver; the warm-up is not counted."""
    run = drive(NaiveSender(batcher, sequence_length), [Phase(traffic.schedule(), warmup_s + seconds)], traffic.mix(), seed=traffic.seed)
    results = run.results(warmup_s, warmup_s + seconds)
    batch_sizes = batcher.batches[len(batcher.batches) // 4 :] or [0]
    return InProcessResult(traffic.label(), results.throughput_rps, results.latency, float(np.mean(batch_sizes)))
