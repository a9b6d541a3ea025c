"""What one live reload costs the requests in flight: failures and the latency blip.

Steady open-loop load runs while the delay is reloaded a few times; requests whose
lifetime overlaps a reload are compared with the rest of the same run.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import numpy as np

from tools.adaptive.replay import Records, replay
from tools.loadgen.report import OK
from tools.loadgen.targets import Target


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
    return summarise(records, intervals)


def summarise(records: Records, intervals: list[tuple[float, float]]) -> dict:
    sent = np.asarray(records.sent_s)
    done = sent + np.asarray(records.latency_s)
    ok = np.asarray([o == OK for o in records.outcome], dtype=bool)
    during = np.zeros(len(sent), dtype=bool)
    for began, ended in intervals:
        during |= (sent < ended) & (done > began)

    def figures(mask: np.ndarray) -> dict:
        ms = np.asarray(records.latency_s)[mask & ok] * 1000.0
        if not len(ms):  # no successful request: no latency figures (None), not missing keys
            return {"requests": int(mask.sum()), "failed": int((mask & ~ok).sum()), "mean_ms": None, "p50_ms": None, "p99_ms": None,
                    "max_ms": None}  # fmt: skip
        return {"requests": int(mask.sum()), "failed": int((mask & ~ok).sum()), "mean_ms": round(float(ms.mean()), 1),
                "p50_ms": round(float(np.percentile(ms, 50)), 1), "p99_ms": round(float(np.percentile(ms, 99)), 1),
                "max_ms": round(float(ms.max()), 1)}  # fmt: skip

    return {
        "reload_seconds": [round(b - a, 2) for a, b in intervals],
        "during_reload": figures(during),
        "outside_reload": figures(~during),
        "failed_total": int((~ok).sum()),
    }
