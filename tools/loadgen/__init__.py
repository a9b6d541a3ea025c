"""Loadgen: perf_analyzer-style measurement of one load level on the load driver (tools/load).

`run_load(target, traffic, measurement)` drives one level (closed-loop concurrency or
open-loop arrivals) and returns a `LoadResult`: the engine's results over steady windows
and the server's own batching figures over the same windows.
"""

from tools.load.requests import Target, embed_target, encoder_target, mixed_target
from tools.load.results import LatencySummary
from tools.loadgen.measure import Measurement, run_load
from tools.loadgen.report import LoadResult
from tools.loadgen.traffic import Traffic

__all__ = ["LatencySummary", "LoadResult", "Measurement", "Target", "Traffic", "embed_target", "encoder_target", "mixed_target", "run_load"]
