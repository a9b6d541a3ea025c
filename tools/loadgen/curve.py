"""The model's own batch-size curve, measured on the server, to seed the search space.

One request of b rows at a time (no queueing; a counted closed loop of the load driver), read back as compute time per execution
from the statistics API. The knee is the smallest batch size whose rows/s is within
10% of the best; preferred sizes and delays are proposed around it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np

from tools.load.driver import drive
from tools.load.outcomes import OK
from tools.load.requests import Target, token_tensors
from tools.load.schedules import ClosedLoop, Phase
from tools.load.triton import TritonSender
from tools.triton_client.stats import ModelStats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CurvePoint:
    batch_size: int
    execution_ms: float
    rows_per_s: float


def _requests(http_url: str, model: str, make_batch, size: int, count: int) -> None:
    """`count` requests of `size` rows, one at a time, on the load driver; any failure raises."""
    target = Target(model, (), lambda module, index: make_batch(module, size))
    run = drive(TritonSender(http_url, target, "http"), [Phase(ClosedLoop(1, requests=count), 3600.0)])
    failed = [r for r in run.records if r.outcome != OK]
    if failed:
        raise RuntimeError(f"batch curve of {model}: a request of {size} rows failed ({failed[0].outcome}: {failed[0].message})")


def measure_curve(http_url: str, model: str, make_batch, batch_sizes: list[int], repeats: int = 3) -> list[CurvePoint]:
    points = []
    for size in batch_sizes:
        _requests(http_url, model, make_batch, size, 1)  # first run of a shape may pay one-time costs
        before = ModelStats.settled(http_url, model)
        _requests(http_url, model, make_batch, size, repeats)
        delta = ModelStats.settled(http_url, model) - before
        execution_ms = delta.compute_ns / max(1, delta.requests) / 1e6
        points.append(CurvePoint(size, execution_ms, size / (execution_ms / 1000.0)))
        log.info("curve: batch %3d -> %.1f ms per execution, %.0f rows/s", size, execution_ms, points[-1].rows_per_s)
    return points


def knee(points: list[CurvePoint], within: float = 0.10) -> CurvePoint:
    best = max(point.rows_per_s for point in points)
    return min((p for p in points if p.rows_per_s >= (1 - within) * best), key=lambda p: p.batch_size)


def encoder_batch(sequence_length: int):
    rng = np.random.default_rng(0)

    def make(module, size: int) -> list:
        return token_tensors(module, rng.integers(1000, 30_000, size=(size, sequence_length), dtype=np.int64))

    return make
