"""Command-line options shared by predict and validate, turned into typed settings here."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from tools.paths import MODEL_REPOSITORY
from tools.repo.model_config import ModelConfig, load_config
from tools.simulate.batcher import BatcherSpec
from tools.simulate.cost_model import CostModel
from tools.simulate.live_load import Traffic, load_trace, parse_priority_mix
from tools.simulate.workload import Lengths

STALL_CHOICES = ("auto", "on", "off")


def add_model_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model")
    group.add_argument("--cost-model", type=Path, required=True, help="cost model JSON (from `calibrate`, or written by hand)")
    group.add_argument(
        "--tokenizer-config",
        type=Path,
        default=MODEL_REPOSITORY / "tokenizer" / "config.pbtxt",
        help="the tokenizer step's config (default: the committed one)",
    )
    group.add_argument(
        "--pipeline",
        choices=("embed", "encoder"),
        default="embed",
        help="embed: tokenizer then encoder, as clients call it (default); encoder: requests go to the encoder directly",
    )
    group.add_argument(
        "--stall",
        choices=STALL_CHOICES,
        default="auto",
        help="Triton 2.51's priority-queue stall: auto (batchers with priority queues, as 2.51 does), on (every batcher: a what-if), off",
    )
    group.add_argument("--cache-hit-rate", type=float, default=0.0, help="share of requests the response cache answers (default 0)")
    group.add_argument("--seed", type=int, default=0)


def add_traffic_arguments(parser: argparse.ArgumentParser, lists: bool) -> None:
    group = parser.add_argument_group("traffic (closed loop: --concurrency; open loop: --rate or --trace)")
    kind = str if lists else int
    group.add_argument("--concurrency", type=kind, default=None, help="closed-loop clients" + (" (comma list)" if lists else ""))
    group.add_argument(
        "--rate", type=str if lists else float, default=None, help="open-loop requests/s" + (" (comma list)" if lists else "")
    )
    group.add_argument("--distribution", choices=("poisson", "constant"), default="poisson")
    group.add_argument("--burst-rate", type=float, default=0.0, help="bursty: alternate --rate and this rate")
    group.add_argument("--burst-period", type=float, default=4.0, help="bursty: seconds per low+high cycle")
    group.add_argument("--trace", type=Path, default=None, help="file of arrival offsets in seconds, one per line")
    group.add_argument("--priority-mix", default="", help="e.g. 1:0.2,2:0.8 (default: the model's default level)")
    group.add_argument("--timeout-us", type=int, default=None, help="per-request queue timeout (applies below the level's default)")
    group.add_argument("--lengths", default="samples", help="text lengths: samples (the load driver's texts), mixed, or fixed:N")


def traffic_of(concurrency: int | None, rate: float | None, args: argparse.Namespace) -> Traffic:
    """One load level from the shared options (ValueError naming the option)."""
    if args.trace and (rate or concurrency):
        raise ValueError("--trace replays its own arrival times: give it without --rate or --concurrency")
    if rate is not None and concurrency is not None:
        raise ValueError("give --concurrency (closed loop) or --rate (open loop), not both")
    if concurrency is not None and concurrency < 1:
        raise ValueError(f"--concurrency must be at least 1, got {concurrency}")
    if rate is not None and not rate > 0:
        raise ValueError(f"--rate must be above 0 req/s, got {rate:g}")
    if args.burst_rate < 0 or args.burst_period <= 0:
        raise ValueError("--burst-rate must not be negative and --burst-period must be above 0")
    if args.burst_rate and rate is None:
        raise ValueError("--burst-rate alternates with --rate: give --rate too")
    if args.timeout_us is not None and args.timeout_us < 0:
        raise ValueError(f"--timeout-us cannot be negative, got {args.timeout_us}")
    common = {"priority_mix": parse_priority_mix(args.priority_mix), "timeout_us": args.timeout_us, "seed": args.seed}
    if args.trace:
        return Traffic(trace=load_trace(args.trace), **common)
    if rate is not None:
        burst = {"burst_rate": args.burst_rate, "burst_period_s": args.burst_period} if args.burst_rate else {}
        return Traffic(rate=rate, distribution=args.distribution, **burst, **common)
    if concurrency is None:
        raise ValueError("the traffic has no requests: give --concurrency N, --rate R or --trace FILE")
    return Traffic(concurrency=concurrency, **common)


@dataclass(frozen=True)
class ModelSettings:
    cost: CostModel
    tokenizer: BatcherSpec
    pipeline: str
    stall: bool | None  # None: auto
    cache_hit_rate: float
    seed: int
    lengths: Lengths

    def steps(self, encoder: BatcherSpec) -> list[tuple[str, BatcherSpec]]:
        if self.pipeline == "encoder":
            return [("encoder", encoder)]
        if "tokenizer" not in self.cost.steps:
            raise ValueError("the cost model has no tokenizer table: give one, or simulate --pipeline encoder")
        return [("tokenizer", self.tokenizer), ("encoder", encoder)]


def model_settings(args: argparse.Namespace) -> ModelSettings:
    cost = CostModel.load(args.cost_model)
    tokenizer = BatcherSpec.from_config(read_config(args.tokenizer_config)) if args.pipeline == "embed" else BatcherSpec()
    stall = {"auto": None, "on": True, "off": False}[args.stall]
    return ModelSettings(cost, tokenizer, args.pipeline, stall, args.cache_hit_rate, args.seed, Lengths.parse(args.lengths))


def read_config(path: Path) -> ModelConfig:
    path = Path(path)
    if not path.exists():
        raise ValueError(f"config {path} not found")
    return load_config(path)
