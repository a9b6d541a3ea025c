"""What one live reload costs the requests in flight: failures and the latency blip.

Steady open-loop load runs while the delay is reloaded a few times; requests whose
lifetime overlaps a reload are compared with the rest of the same run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from tools.adapt.replay import replay
from tools.load.driver import Record
from tools.load.outcomes import OK
from tools.load.requests import Target
from tools.load.results import LatencySummary


def measure_reload_cost(
    target: Target, arrivals: np.ndarray, url: str, reload: Callable[[int], None], delays_us: list[int], at_s: list[float]
) -> dict:
    """Replay `arrivals` while `reload(delay)` runs at each offset in `at_s`; figures in ms."""
    intervals: list[tuple[float, float]] = []
    start = threading.Event()

    def reloader() -> None:
        start.wait()
        t0 = time.perf_counter()
        for offset, delay in zip(at_s, delays_us):
            time.sleep(max(0.0, t0 + offset - time.perf_counter()))
            began = time.perf_counter() - t0
            reload(delay)
            intervals.append((began, time.perf_counter() - t0))

    thread = threading.Thread(target=reloader, daemon=True)
    thread.start()
    start.set()  # both clocks start together (within a few ms)
    records = replay(target, arrivals, url)
    thread.join()
    return summarise(records.records, intervals)


def summarise(records: list[Record], intervals: list[tuple[float, float]]) -> dict:
    def overlaps(record: Record) -> bool:
        return any(record.sent_s < ended and record.done_s > began for began, ended in intervals)

    def figures(chosen: list[Record]) -> dict:
        latency = LatencySummary.of([r.latency_s for r in chosen if r.outcome == OK]).rounded(1)
        failed = sum(1 for r in chosen if r.outcome != OK)
        return {"requests": len(chosen), "failed": failed} | {k: latency[k] for k in ("mean_ms", "p50_ms", "p99_ms", "max_ms")}

    return {
        "reload_seconds": [round(b - a, 2) for a, b in intervals],
        "during_reload": figures([r for r in records if overlaps(r)]),
        "outside_reload": figures([r for r in records if not overlaps(r)]),
        "failed_total": sum(1 for r in records if r.outcome != OK),
    }
