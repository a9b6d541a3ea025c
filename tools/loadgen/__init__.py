"""perf_analyzer-style load for Triton: closed-loop concurrency and open-loop arrivals.

`run_load(target, traffic, measurement)` drives one load level and returns a
`LoadResult` with client latencies, outcomes per priority class and the server's own
batching figures over the same window.
"""

from tools.loadgen.measure import Measurement, run_load
from tools.loadgen.report import LatencySummary, LoadResult
from tools.loadgen.targets import Target, embed_target, encoder_target, mixed_target
from tools.loadgen.traffic import Traffic

__all__ = ["LatencySummary", "LoadResult", "Measurement", "Target", "Traffic", "embed_target", "encoder_target", "mixed_target", "run_load"]
