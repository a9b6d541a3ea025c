"""Per-window observations from Triton's statistics API (cumulative counters, differenced).

Busy time comes from `batch_stats`, which Triton keeps per execution (not per request),
so the sum of their compute times is exactly how long the instance executed. A reload
creates the model anew and resets every counter; a window whose counters went backwards
is therefore dropped and the next snapshot becomes the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.adapt.control import Observation
from tools.observe.stats import ModelStats
from tools.triton_client import TritonClient


@dataclass(frozen=True)
class WindowCounters:
    """One model's cumulative counters at `at_s`; two of them bound an observation window."""

    at_s: float
    stats: ModelStats
    busy_ns: int


def busy_ns(document: dict) -> int:
    """Nanoseconds the model spent executing (input + infer + output, per execution)."""
    total = 0
    for version in document.get("model_stats", []):
        for batch in version.get("batch_stats", []):
            total += sum(int(batch.get(key, {}).get("ns", 0)) for key in ("compute_input", "compute_infer", "compute_output"))
    return total


def take_window_counters(client: TritonClient, model: str, at_s: float) -> WindowCounters:
    document = client.statistics_document(model)
    return WindowCounters(at_s, ModelStats.from_document(document), busy_ns(document))


def observation(earlier: WindowCounters, later: WindowCounters, instances: int = 1) -> Observation | None:
    """The window between two snapshots, or None when the counters were reset in between.
    An idle window is a window too (its averages are None): idleness is a reason to cut the delay."""
    delta = later.stats - earlier.stats
    busy = later.busy_ns - earlier.busy_ns
    seconds = later.at_s - earlier.at_s
    if seconds <= 0 or busy < 0 or min(delta.requests, delta.executions, delta.failures, delta.queue_ns) < 0:
        return None
    return Observation(
        window_s=seconds,
        requests=delta.requests,
        busy=busy / 1e9 / seconds / max(1, instances),
        queue_ms=delta.average_queue_ms,
        compute_ms=delta.average_compute_ms,
        batch_size=delta.average_batch_size,
        rejected=delta.failures,
    )
