"""The model's own batch-size curve, measured on the server, to seed the search space.

One request of b rows at a time (no queueing), read back as compute time per execution
from the statistics API. The knee is the smallest batch size whose rows/s is within
10% of the best; preferred sizes and delays are proposed around it.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import tritonclient.http as httpclient

from tools.load.requests import token_tensors
from tools.stats import ModelStats

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CurvePoint:
    batch_size: int
    execution_ms: float
    rows_per_s: float


def measure_curve(http_url: str, model: str, make_batch, batch_sizes: list[int], repeats: int = 3) -> list[CurvePoint]:
    client = httpclient.InferenceServerClient(http_url, network_timeout=120.0)
    points = []
    try:
        for size in batch_sizes:
            inputs = make_batch(httpclient, size)
            client.infer(model, inputs)  # first run of a shape may pay one-time costs
            before = ModelStats.settled(http_url, model)
            for _ in range(repeats):
                client.infer(model, inputs)
            delta = ModelStats.settled(http_url, model) - before
            execution_ms = delta.compute_ns / max(1, delta.requests) / 1e6
            points.append(CurvePoint(size, execution_ms, size / (execution_ms / 1000.0)))
            log.info("curve: batch %3d -> %.1f ms per execution, %.0f rows/s", size, execution_ms, points[-1].rows_per_s)
    finally:
        client.close()
    return points


def knee(points: list[CurvePoint], within: float = 0.10) -> CurvePoint:
    best = max(point.rows_per_s for point in points)
    return min((p for p in points if p.rows_per_s >= (1 - within) * best), key=lambda p: p.batch_size)


def encoder_batch(sequence_length: int):
    rng = np.random.default_rng(0)

    def make(module, size: int) -> list:
        return token_tensors(module, rng.integers(1000, 30_000, size=(size, sequence_length), dtype=np.int64))

    return make
