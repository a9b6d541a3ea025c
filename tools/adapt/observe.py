"""Per-window observations from Triton's statistics API (cumulative counters, differenced).

Busy time is ModelStats.busy_ns (tools/triton_client/stats.py: the one parse of the
statistics document), summed per execution, so it is how long the instances executed. A reload
creates the model anew and resets every counter; a window whose counters went backwards
is therefore dropped and the next snapshot becomes the baseline.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.adapt.control import Observation
from tools.triton_client import TritonClient
from tools.triton_client.stats import ModelStats


@dataclass(frozen=True)
class WindowCounters:
    """One model's cumulative counters at `at_s`; two of them bound an observation window."""

    at_s: float
    stats: ModelStats


def take_window_counters(client: TritonClient, model: str, at_s: float) -> WindowCounters:
    return WindowCounters(at_s, client.statistics(model))


def observation(earlier: WindowCounters, later: WindowCounters, instances: int = 1) -> Observation | None:
    """The window between two snapshots, or None when the counters were reset in between.
    An idle window is a window too (its averages are None): idleness is a reason to cut the delay."""
    delta = later.stats - earlier.stats
    seconds = later.at_s - earlier.at_s
    if seconds <= 0 or min(delta.busy_ns, delta.requests, delta.executions, delta.failures, delta.queue_ns) < 0:
        return None
    return Observation(
        window_s=seconds,
        requests=delta.requests,
        busy=delta.busy_ns / 1e9 / seconds / max(1, instances),
        queue_ms=delta.average_queue_ms,
        compute_ms=delta.average_compute_ms,
        batch_size=delta.average_batch_size,
        rejected=delta.failures,
    )
