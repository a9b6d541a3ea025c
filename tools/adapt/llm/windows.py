"""Observation windows for the LLM controller: TTFT/TPOT p99 over one window of time.

From streaming records (the simulator's, or a client's): TTFT of the requests whose first
token arrived in the window; TPOT of each stream over its tokens inside the window (the
mean gap between them, as vLLM's TPOT but windowed, so a long stream reports while it
runs). From the server's Prometheus histograms: the p99 of the window's bucket increments
(TTFT, and the inter-token latency standing in for TPOT), the upper bound of the bucket
that holds it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from tools.adapt.llm.control import LlmWindow
from tools.load.llm.records import StreamRecord


def _p99(values: Sequence[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def window_from_records(records: Iterable[StreamRecord], start_s: float, end_s: float, waiting: float) -> LlmWindow:
    ttft: list[float] = []
    tpot: list[float] = []
    for record in records:
        times = record.token_times
        if not times or times[-1] < start_s:
            continue
        if start_s <= times[0] < end_s:
            ttft.append(times[0] - record.sent_s)
        inside = [t for t in times if start_s <= t < end_s]
        if len(inside) >= 2:
            tpot.append((inside[-1] - inside[0]) / (len(inside) - 1))
    return LlmWindow(_p99(ttft), _p99(tpot), waiting, len(ttft))


def histogram_p99(before: Mapping[float, float], after: Mapping[float, float]) -> tuple[float | None, int]:
    """p99 of the observations between two snapshots of a cumulative histogram
    ({upper bound: count}, +inf included) and their number."""
    bounds = sorted(after)
    deltas = [after[b] - before.get(b, 0.0) for b in bounds]
    total = deltas[-1] if deltas else 0.0
    if total <= 0:
        return None, 0
    for bound, count in zip(bounds, deltas):
        if count >= 0.99 * total:
            return (bound if bound != float("inf") else bounds[-2] if len(bounds) > 1 else None), int(total)
    return None, int(total)
