"""`python -m tools.plan`: the batching config and replica count for a target traffic and SLO.

Simulates (tools/simulate) every candidate encoder config of a small space (delays,
preferred sizes, instance counts; the rest of the committed config kept) on the cost
model, splitting the traffic evenly over n replicas, and finds for each config the
fewest replicas whose p99 stays inside the SLO at the target rate plus headroom. The
pick is the config needing the fewest replicas, then the lowest p99 at the target rate.
The HPA target is the encoder's mean queue time per request at that load: scale out
when the measured queue time rises above it (tools/observe/prometheus_rule.py names the metric).

Examples:
  python -m tools.plan --cost-model tools/simulate/cost_models/synthetic-gpu.json --rate 2000 --p99-ms 50
  python -m tools.plan --cost-model build/simulate/cost-model.json --rate 150 --p99-ms 250 --priority-mix 1:0.2,2:0.8
  python -m tools.plan --model llm --rate 2 --slo ttft_p99=2s,tpot_p99=150ms   # the LLM (tools/simulate/llm/capacity.py)
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import sys
from dataclasses import dataclass
from pathlib import Path

from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.paths import MODEL_REPOSITORY
from tools.repo.candidate import Candidate, apply_candidate
from tools.repo.model_config import has_priority_queues
from tools.simulate.batcher import BatcherSpec
from tools.simulate.cli import model_settings, read_config
from tools.simulate.live_load import Traffic, parse_priority_mix
from tools.simulate.plots import plot_frontier
from tools.simulate.predict import Prediction, predict
from tools.simulate.workload import Workload

log = logging.getLogger("plan")

DELAYS_US = (0, 2000, 5000, 10_000)
PREFERRED = ((), (8,))
INSTANCES = (1, 2)
FRONTIER_SHARES = (0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0)  # of the plan's rate per replica, for --plot


@dataclass(frozen=True)
class Plan:
    candidate: Candidate
    replicas: int
    at_target: Prediction  # per replica, at the target rate / replicas
    with_headroom: Prediction  # per replica, at the target rate plus headroom / replicas


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.plan", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cost-model", type=Path, required=True)
    parser.add_argument("--config", type=Path, default=MODEL_REPOSITORY / "encoder" / "config.pbtxt", help="base encoder config")
    parser.add_argument("--tokenizer-config", type=Path, default=MODEL_REPOSITORY / "tokenizer" / "config.pbtxt")
    parser.add_argument("--rate", type=float, required=True, help="target requests/s over all replicas")
    parser.add_argument("--burst-rate", type=float, default=0.0, help="bursty: alternate --rate and this rate (total)")
    parser.add_argument("--burst-period", type=float, default=4.0)
    parser.add_argument("--priority-mix", default="")
    parser.add_argument("--lengths", default="samples", help="samples, mixed or fixed:N")
    parser.add_argument("--p99-ms", type=float, required=True, help="SLO: p99 latency of every priority class")
    parser.add_argument("--headroom", type=float, default=0.3, help="extra load the replicas must absorb (default %(default)s)")
    parser.add_argument("--max-replicas", type=int, default=32)
    parser.add_argument("--requests", type=int, default=2000, help="requests per simulation (default %(default)s)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument(
        "--plot", type=Path, default=None, help="also write a p99-vs-rate-per-replica plot of every config that meets the SLO (PNG)"
    )
    parser.set_defaults(pipeline="embed", stall="auto", cache_hit_rate=0.0, seed=0)
    add_verbosity_flags(parser)
    return parser


def worst_p99(prediction: Prediction) -> float | None:
    values = [c.p99_ms for c in prediction.per_priority.values()]
    if not values or any(v is None for v in values) or prediction.rejected or prediction.timeouts:
        return None
    return max(values)


def plan(args: argparse.Namespace) -> int:
    if not args.rate > 0 or args.headroom < 0 or args.max_replicas < 1 or args.requests < 1:
        raise ValueError("--rate must be above 0, --headroom >= 0, --max-replicas and --requests >= 1")
    if not args.p99_ms > 0:
        raise ValueError(f"impossible SLO: --p99-ms must be above 0, got {args.p99_ms:g}")
    settings = model_settings(args)
    base = read_config(args.config)
    mix = parse_priority_mix(args.priority_mix)
    keep_queues = has_priority_queues(base)

    def simulate(candidate: Candidate, total_rate: float, replicas: int) -> Prediction:
        spec = BatcherSpec.from_config(apply_candidate(base, candidate))
        burst = {"burst_rate": args.burst_rate / replicas, "burst_period_s": args.burst_period} if args.burst_rate else {}
        traffic = Traffic(rate=total_rate / replicas, priority_mix=mix, **burst)
        return predict(settings.cost, settings.steps(spec), Workload(traffic, args.requests, settings.lengths), stall=settings.stall)

    def meets(candidate: Candidate, replicas: int) -> Prediction | None:
        prediction = simulate(candidate, args.rate * (1 + args.headroom), replicas)
        p99 = worst_p99(prediction)
        return prediction if p99 is not None and p99 <= args.p99_ms else None

    plans = []
    for delay in DELAYS_US:
        for preferred in PREFERRED:
            for instances in INSTANCES:
                candidate = Candidate(base.max_batch_size, preferred, delay, instances, keep_queues)
                if not meets(candidate, args.max_replicas):
                    continue
                low, high = 1, args.max_replicas  # fewest replicas that meet the SLO: binary search
                while low < high:
                    middle = (low + high) // 2
                    low, high = (low, middle) if meets(candidate, middle) else (middle + 1, high)
                plans.append(Plan(candidate, low, simulate(candidate, args.rate, low), meets(candidate, low)))
    if not plans:
        floor = simulate(Candidate(base.max_batch_size, (), 0, 1, keep_queues), 1.0, 1)
        raise ValueError(
            f"impossible SLO: no config meets p99 <= {args.p99_ms:g} ms with up to {args.max_replicas} replicas "
            f"(one request alone already takes p99 {floor.p99_ms:.1f} ms on this cost model)"
        )
    best = min(plans, key=lambda p: (p.replicas, worst_p99(p.at_target) or float("inf")))
    report(best, plans, args, settings.cost.kind)
    if args.plot is not None:
        # a common grid around the chosen per-replica rate: each curve crosses the SLO at its config's capacity
        target = args.rate / best.replicas
        rates = [round(target * share, 3) for share in FRONTIER_SHARES]
        curves = {f"{p.candidate.key} ({p.replicas} replicas)": [(r, worst_p99(simulate(p.candidate, r, 1))) for r in rates] for p in plans}
        label = " (SYNTHETIC cost model)" if settings.cost.kind == "synthetic" else ""
        log.info(plot_frontier(curves, args.p99_ms, args.plot, f"predicted p99 per config{label}"))
    return 0


def report(best: Plan, plans: list[Plan], args: argparse.Namespace, kind: str) -> None:
    c, at = best.candidate, best.at_target
    document = {
        "cost_model": str(args.cost_model),
        "cost_model_kind": kind,
        "config": c.to_dict(),
        "config_key": c.key,
        "replicas": best.replicas,
        "instances_per_replica": c.instances,
        "per_replica_rate": args.rate / best.replicas,
        "p99_ms_per_class": {str(level): figures.p99_ms for level, figures in at.per_priority.items()},
        "p99_ms_with_headroom": worst_p99(best.with_headroom),
        "hpa_target_queue_ms": at.encoder_queue_ms,
        "avg_batch": at.avg_batch,
        "frontier": [{"config_key": p.candidate.key, "replicas": p.replicas, "p99_ms": worst_p99(p.at_target)} for p in plans],
    }
    if args.json:
        print(json.dumps(document))
        return
    label = " (SYNTHETIC cost model: a what-if, not a measurement)" if kind == "synthetic" else ""
    print(f"plan for {args.rate:g} req/s, p99 <= {args.p99_ms:g} ms, headroom {args.headroom:.0%}{label}")
    print(f"  config: {c.key} (max_batch_size {c.max_batch_size}, preferred {list(c.preferred) or 'none'}, delay {c.delay_us} us)")
    print(f"  replicas: {best.replicas} x {c.instances} encoder instance(s), {args.rate / best.replicas:.1f} req/s each")
    classes = ", ".join(
        f"{'default' if level == 0 else level}: {f.p99_ms:.1f} ms" for level, f in sorted(at.per_priority.items()) if f.p99_ms
    )
    print(f"  expected p99 per class at the target: {classes}; avg encoder batch {at.avg_batch or 0:.2f}")
    if at.encoder_queue_ms is not None:
        print(f"  HPA target: encoder queue time {at.encoder_queue_ms:.2f} ms per request (scale out above it)")
    print(f"  {len(plans)} configs meet the SLO within {args.max_replicas} replicas; fewest replicas per config:")
    for p in sorted(plans, key=lambda p: (p.replicas, worst_p99(p.at_target) or 0))[:8]:
        print(f"    {p.candidate.key:40} {p.replicas:3d} replicas, p99 {worst_p99(p.at_target) or 0:.1f} ms")


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--model=llm" in argv or any(a == "--model" and b == "llm" for a, b in itertools.pairwise(argv)):
        from tools.simulate.llm.capacity import run as run_llm  # the LLM's replicas, KV memory and scaling signal

        return run_llm(argv)
    args = build_parser().parse_args(argv)
    configure_logging(args)
    return run_reporting_errors(lambda: plan(args), log)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
