"""Capacity planning for the `llm` model: replicas, KV memory per replica, and when to scale.

For a target rate (requests/s over every replica, Poisson, split evenly) and a TTFT/TPOT p99
SLO, the simulator (the real scheduler on the step cost model) finds:
- the fewest replicas whose per-replica share, plus headroom, meets the SLO;
- one replica's capacity: the highest Poisson rate that still meets it (bisection);
- the KV memory a replica uses at that capacity (its peak blocks x bytes per block), against
  the `kv_cache_bytes` it preallocates;
- the signal to scale on: KV usage when the cache is what runs out first (preemptions at the
  capacity, or a peak above 90 % of the blocks); else the waiting requests when requests
  queue at the capacity; else the running sequences (the SLO breaks because steps grow with
  the batch before anything queues). Its threshold is the signal's mean over steps at 80 %
  of the capacity, the margin left to start a replica. The loop's snapshot (running,
  waiting, KV blocks) is what the server's gauges export.

    python -m tools.plan --model llm --rate 2 --slo ttft_p99=2s,tpot_p99=150ms
"""

from __future__ import annotations

import argparse
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

from tools.cli.arguments import parse_settings
from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import add_verbosity_flags
from tools.cli.settings import settings_from
from tools.load.llm.workload import LengthRange
from tools.load.schedules import Poisson
from tools.simulate.llm.cli import DEFAULT_COST_MODEL
from tools.simulate.llm.engine_sim import EngineShape, RequestShape, kv_bytes_per_token
from tools.simulate.llm.predict import LevelPlan, LlmPrediction, predict_level
from tools.simulate.llm.setup import DEFAULT_CONFIG, DTYPE_BYTES, checkpoint_dims, drawn_shapes, engine_shape, parse_overrides, read_knobs
from tools.simulate.llm.slo import LlmSlo
from tools.simulate.llm.step_cost import StepCostModel

log = logging.getLogger("plan.llm")

SIGNAL_SHARE = 0.8  # the scaling threshold is read at this share of one replica's capacity
# The server's gauges (llm/metrics.py, vLLM's names) for each signal.
SIGNAL_METRICS = {
    "kv_cache_usage": "vllm:kv_cache_usage_perc",
    "waiting_requests": "vllm:num_requests_waiting",
    "running_sequences": "vllm:num_requests_running",
}


@dataclass(frozen=True)
class CapacityPlan:
    replicas: int
    per_replica_rate: float
    replica_capacity_rps: float
    at_target: dict
    kv_bytes_used_peak: int
    kv_bytes_configured: int
    signal: str
    threshold: float

    def to_dict(self) -> dict:
        return {key: getattr(self, key) for key in self.__dataclass_fields__}


def plan_capacity(
    cost: StepCostModel,
    config,
    engine: EngineShape,
    shapes: list[RequestShape],
    rate: float,
    slo: LlmSlo,
    level: LevelPlan,
    headroom: float = 0.2,
    max_replicas: int = 64,
    bytes_per_block: int = 0,
) -> CapacityPlan:
    def at(per_replica: float) -> LlmPrediction:
        return predict_level(cost, config, engine, shapes, Poisson(per_replica), level, slo.per_request())

    def meets(prediction: LlmPrediction) -> bool:
        return slo.met_by(prediction.figures)

    low, high = 0.0, max(rate * (1 + headroom), 0.05)
    while meets(at(high)) and high < 1e4:  # grow until the SLO breaks
        low, high = high, high * 2
    for _ in range(8):  # bisect to within about 1 % of the range
        middle = (low + high) / 2
        low, high = (middle, high) if meets(at(middle)) else (low, middle)
    capacity = low
    if capacity <= 0:
        raise ValueError("no rate meets the SLO on one replica: the SLO is below the time of a lone request")
    replicas = next((n for n in range(1, max_replicas + 1) if meets(at(rate * (1 + headroom) / n))), max_replicas)
    at_target = at(rate / replicas)
    near = at(capacity * SIGNAL_SHARE)
    at_capacity = at(capacity)
    kv_bound = at_capacity.preemptions > 0 or at_capacity.peak_kv_blocks > 0.9 * engine.num_blocks
    if kv_bound:
        signal, threshold = "kv_cache_usage", near.mean_kv_usage
    elif at_capacity.mean_waiting >= 1.0:
        signal, threshold = "waiting_requests", near.mean_waiting
    else:  # nothing queues before the SLO breaks: the batch itself (step time) is what grows
        signal, threshold = "running_sequences", near.mean_running
    return CapacityPlan(
        replicas=replicas,
        per_replica_rate=round(rate / replicas, 4),
        replica_capacity_rps=round(capacity, 4),
        at_target=at_target.to_dict(),
        kv_bytes_used_peak=at_capacity.peak_kv_blocks * bytes_per_block,
        kv_bytes_configured=engine.num_blocks * bytes_per_block,
        signal=signal,
        threshold=round(threshold, 3),
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.plan --model llm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=("llm",), required=True)
    parser.add_argument("--rate", type=float, required=True, help="target requests/s over every replica (Poisson)")
    parser.add_argument("--slo", default="ttft_p99=1s,tpot_p99=100ms", help="ttft_p99=1s,tpot_p99=100ms (default)")
    parser.add_argument("--headroom", type=float, default=0.2, help="extra share of the rate each plan must carry (default 0.2)")
    parser.add_argument("--cost-model", type=Path, default=DEFAULT_COST_MODEL)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG)
    parser.add_argument("--set", dest="overrides", type=parse_overrides, default={}, help="knob overrides, e.g. max_num_seqs=8")
    parser.add_argument("--prompt-lengths", type=LengthRange.parse, default=LengthRange(32, 512))
    parser.add_argument("--output-lengths", type=LengthRange.parse, default=LengthRange(16, 128))
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--seconds", type=float, default=120.0, help="simulated seconds per level (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    add_verbosity_flags(parser)
    return parser


@dataclass(frozen=True)
class CapacitySettings:
    """The command line as typed values; build_parser()'s options, checked."""

    rate: float  # target requests/s over every replica (Poisson)
    slo: LlmSlo
    headroom: float  # extra share of the rate each plan must carry
    cost_model: Path
    config: Path
    overrides: dict[str, str]  # knob overrides (--set)
    prompt_lengths: LengthRange
    output_lengths: LengthRange
    requests: int
    seconds: float  # simulated seconds per level
    seed: int
    json: Path | None

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> CapacitySettings:
        """ValueError names the option it refuses."""
        try:
            slo = LlmSlo.parse(args.slo)
        except ValueError as exc:
            raise ValueError(f"--slo: {exc}") from None
        if not 0 < args.rate < math.inf:
            raise ValueError(f"--rate must be a number of requests/s above 0, got {args.rate:g}")
        if not 0 <= args.headroom < math.inf:
            raise ValueError(f"--headroom must be a share of at least 0, got {args.headroom:g}")
        if not 0 < args.seconds < math.inf:
            raise ValueError(f"--seconds must be a number above 0, got {args.seconds:g}")
        if args.requests < 1:
            raise ValueError(f"--requests must be at least 1, got {args.requests}")
        return settings_from(cls, args, slo=slo)


def run_plan(settings: CapacitySettings) -> int:
    slo = settings.slo
    cost = StepCostModel.load(settings.cost_model)
    config, engine_config = read_knobs(settings.config, settings.overrides)
    engine = engine_shape(engine_config)
    per_block = kv_bytes_per_token(checkpoint_dims(), DTYPE_BYTES[engine_config.dtype]) * engine.block_size
    shapes = drawn_shapes(settings.prompt_lengths, settings.output_lengths, settings.requests, settings.seed)
    level = LevelPlan(seconds=settings.seconds, drain_s=settings.seconds, seed=settings.seed)
    plan = plan_capacity(cost, config, engine, shapes, settings.rate, slo, level, settings.headroom, bytes_per_block=per_block)
    f = plan.at_target
    mib = 2**20
    print(f"{settings.rate:g} req/s, {slo.describe()}, headroom {settings.headroom:.0%}; cost model: {cost.machine.get('model', '?')}")
    print(
        f"  replicas: {plan.replicas} ({plan.per_replica_rate:g} req/s each;"
        f" one replica meets the SLO up to {plan.replica_capacity_rps:g} req/s)"
    )
    print(
        f"  per replica at the target: TTFT p99 {f['ttft_p99_ms']} ms, TPOT p99 {f['tpot_p99_ms']} ms,"
        f" {f['output_tokens_per_s']} output tokens/s"
    )
    print(
        f"  KV memory per replica: {plan.kv_bytes_used_peak / mib:.0f} MiB used at peak at capacity, "
        f"{plan.kv_bytes_configured / mib:.0f} MiB preallocated (kv_cache_bytes)"
    )
    print(
        f"  scale on {plan.signal} ({SIGNAL_METRICS[plan.signal]}) above {plan.threshold:g}"
        f" (its mean at {SIGNAL_SHARE:.0%} of one replica's capacity)"
    )
    if settings.json:
        settings.json.parent.mkdir(parents=True, exist_ok=True)
        settings.json.write_text(
            json.dumps({"rate": settings.rate, "slo": vars(slo), **plan.to_dict(), "metric": SIGNAL_METRICS[plan.signal]}, indent=1)
        )
    return 0


def run(argv: list[str]) -> int:
    settings = parse_settings(build_parser(), argv, CapacitySettings.from_cli_args)
    return run_reporting_errors(lambda: run_plan(settings), log)
