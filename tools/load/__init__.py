"""The one load driver: schedules, request mixes, a Sender, per-request records, results.

`LoadDriver(sender, phases, mix).run()` drives closed-loop (ClosedLoop) or open-loop
(Poisson, Gamma, Constant, Bursty, Trace) phases against any Sender (TritonSender for a real
server) and returns a Run: one Record per request, and `Run.results()` (Results) with
throughput, latency percentiles and outcome counts overall, per priority and per kind.
Loadgen, soak, overload, the adaptive replay and bench are configurations of it.
Streaming LLM load (tools.load.llm) runs on it too: a streaming client as the Sender, one
StreamRecord per request with every token's time.
"""

from tools.load.driver import LoadDriver, Prepared, Record, Run, Sender, drive
from tools.load.mix import Request, RequestMix
from tools.load.outcomes import classify
from tools.load.results import ClassResult, LatencySummary, Results, percentile
from tools.load.schedules import Bursty, ClosedLoop, Constant, Gamma, Phase, Poisson, Trace, arrivals

__all__ = [
    "Bursty",
    "ClassResult",
    "ClosedLoop",
    "Constant",
    "Gamma",
    "LatencySummary",
    "LoadDriver",
    "Phase",
    "Poisson",
    "Prepared",
    "Record",
    "Request",
    "RequestMix",
    "Results",
    "Run",
    "Sender",
    "Trace",
    "arrivals",
    "classify",
    "drive",
    "percentile",
]
