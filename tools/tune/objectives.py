"""How a trial is scored. A trial holds one load result per traffic level.

Presets for the three common situations:
- `throughput-slo` (default): the mean throughput over all levels, a level whose p99
  misses the SLO counting as zero. A config is judged under the whole traffic the user
  described: one that wins only at the busiest level (e.g. by holding every request for
  a long delay) loses to one that also serves the quiet levels fast.
- `latency-first` (chat): the lowest mean p99 over the levels, if all meet the SLO.
- `throughput-first` (offline bulk): the most throughput at any error-free level.
- `mixed`: priority-1 p99 meets the SLO at a level; the most total throughput there.
A level with errors other than none never counts as feasible, and neither does a level
with no successful request: it has no p99 (None), which is no value, not 0 ms.
"""

from __future__ import annotations

from dataclasses import dataclass

from tools.loadgen.report import LoadResult

OBJECTIVES = ("throughput-slo", "latency-first", "throughput-first", "mixed")


@dataclass(frozen=True)
class Score:
    feasible: bool
    value: float  # larger is better
    throughput_rps: float
    p99_ms: float | None  # None: no level had a successful request (always a number when feasible)
    reason: str = ""


def _clean(result: LoadResult) -> bool:
    return result.sent > 0 and result.latency.p99_ms is not None and result.error_count == 0 and result.late_sends <= 0.01 * result.sent


def _meets(result: LoadResult, p99_ms: float, objective: str) -> bool:
    latency = result.latency
    if objective == "mixed":
        interactive = result.per_priority.get(1)
        latency = interactive.latency if interactive is not None else None
    return latency is not None and latency.p99_ms is not None and latency.p99_ms <= p99_ms


def _worst_p99(results: list[LoadResult]) -> float | None:
    """The highest p99 among levels that have one."""
    return max((r.latency.p99_ms for r in results if r.latency.p99_ms is not None), default=None)


def score(results: list[LoadResult], p99_ms: float, objective: str = "throughput-slo") -> Score:
    if objective not in OBJECTIVES:
        raise ValueError(f"unknown objective {objective!r}; choose from {OBJECTIVES}")
    if not results:
        return Score(False, float("-inf"), 0.0, None, "not measured")
    clean = [r for r in results if _clean(r)]
    if objective == "throughput-first":
        feasible = clean
    else:
        feasible = [r for r in clean if _meets(r, p99_ms, objective)]
    if not feasible:
        reason = "errors, late sends or no successful request at every level" if not clean else f"p99 above {p99_ms:g} ms at every level"
        return Score(False, float("-inf"), 0.0, _worst_p99(results), reason)
    if objective == "latency-first":
        if len(feasible) < len(results):
            return Score(False, float("-inf"), 0.0, _worst_p99(results), "SLO missed at some level")
        mean_p99 = sum(r.latency.p99_ms for r in results) / len(results)
        best = max(results, key=lambda r: r.throughput_rps)
        return Score(True, -mean_p99, best.throughput_rps, mean_p99)
    if objective == "throughput-slo":
        mean = sum(r.throughput_rps for r in feasible) / len(results)
        worst_p99 = max(r.latency.p99_ms for r in feasible)
        missed = len(results) - len(feasible)
        reason = f"p99 above {p99_ms:g} ms at {missed} of {len(results)} levels (counted as 0 req/s)" if missed else ""
        # near-ties are decided by latency: a small bonus for a lower worst p99
        return Score(True, mean - 1e-3 * worst_p99, mean, worst_p99, reason)
    best = max(feasible, key=lambda r: (r.throughput_rps, -r.latency.p99_ms))
    return Score(True, best.throughput_rps - 1e-3 * best.latency.p99_ms, best.throughput_rps, best.latency.p99_ms)
