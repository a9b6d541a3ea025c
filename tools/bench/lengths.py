"""`python -m tools.bench.lengths` (`make bench-lengths`): padding policies on mixed-length traffic.

Real embedding traffic mixes short queries with long passages, and Triton's batcher
joins only equal shapes, so the padding policy decides how much of the compute is
padding. One run, one local server, the policies applied by live config reloads
(tools/repo/length_policy.py: batch, buckets, ragged), each measured on the same mixed
workload (tools/load/mixed_texts.py) at closed-loop concurrencies and at one Poisson
rate derived from the first policy's measured capacity. Reported side by side:
requests/s, useful (real) tokens/s, padding waste from the server's own counters
(padding / real tokens computed), p50/p99 per length class (and per priority with a
priority mix), Triton's average executed encoder batch and rows per session run, and the
packing efficiency: useful tokens/s over the raw engine's best padded tokens/s measured
in the same run (in-process ONNX Runtime at full batches, as one session with every core
and as one single-thread session per encoder instance, before and after the served runs).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from tools.bench.in_process import open_session, token_batch
from tools.bench.lengths_report import render_markdown
from tools.cli.arguments import number_list, parse_settings
from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import add_verbosity_flags
from tools.load.mixed_texts import LengthMix
from tools.loadgen import Measurement, Traffic, mixed_target, run_load
from tools.loadgen.cli_args import length_mix_from_args
from tools.loadgen.report import format_ms
from tools.loadgen.traffic import parse_priority_mix
from tools.machine import cpu_line, describe_cpu
from tools.observe.padding_waste import PaddingCounts
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.instances import instance_count
from tools.repo.length_policy import POLICIES, policy_configs
from tools.repo.model_config import load_config
from tools.serve.server_session import triton_endpoints

log = logging.getLogger("bench-lengths")

RAW_SHAPES = ((32, 16), (32, 64), (32, 128), (8, 64), (2, 128))  # (batch, length): full batches, and smaller ones


def parallel_tokens_per_s(sessions: list, batch: int, length: int, seconds: float) -> float:
    """Padded tokens/s of these sessions running the same full batch side by side, one
    thread each (ONNX Runtime releases the GIL), as Triton's instances do."""
    feeds = token_batch(batch, length)
    for session in sessions:
        session.run(None, feeds)
    runs = [0] * len(sessions)
    deadline = time.perf_counter() + seconds

    def loop(slot: int) -> None:
        while time.perf_counter() < deadline or runs[slot] == 0:
            sessions[slot].run(None, feeds)
            runs[slot] += 1

    started = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(slot,)) for slot in range(len(sessions))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(runs) * batch * length / (time.perf_counter() - started)


def raw_engine_points(model_path: Path, instances: int, seconds: float, previous: list[dict] | None = None) -> list[dict]:
    """The in-process engine's padded tokens/s at a few batch shapes, as one session with
    every core and as one single-thread session per encoder instance (on a busy machine
    the second is up to 2x faster: threads of one run wait for each other). With
    `previous`, the better of two measurements per point (before and after the served
    runs): the ceiling is the best the engine reached in this run."""
    layouts = {"1 session, all cores": [open_session(model_path)]}
    if instances > 1:
        layouts[f"{instances} sessions, 1 thread each"] = [open_session(model_path, threads=1) for _ in range(instances)]
    points = []
    for layout, sessions in layouts.items():
        for batch, length in RAW_SHAPES:
            tokens_per_s = parallel_tokens_per_s(sessions, batch, length, seconds)
            log.info("raw engine, %s: batch %d x %d tokens: %.0f padded tokens/s", layout, batch, length, tokens_per_s)
            if previous:
                tokens_per_s = max(tokens_per_s, previous[len(points)]["tokens_per_s"])
            points.append({"layout": layout, "batch_size": batch, "length": length, "tokens_per_s": tokens_per_s})
    return points


def measure_level(policy: str, traffic: Traffic, target, measurement: Measurement, endpoints) -> dict:
    before = PaddingCounts.settled(endpoints.metrics_url)
    result = run_load(target, traffic, measurement, endpoints.grpc_url, "grpc", endpoints.http_url)
    counts = PaddingCounts.settled(endpoints.metrics_url) - before  # counters of the last responses land after them
    row = result.to_dict()
    row["policy"] = policy
    row["padding"] = {**counts.__dict__, "waste": counts.waste, "rows_per_run": counts.rows_per_run}
    if result.server["embed"].cache_hits:
        log.warning(
            "%s %s: %d response-cache hits; the workload should send unique texts",
            policy,
            result.traffic,
            result.server["embed"].cache_hits,
        )
    short, long = result.per_length_class.get("short"), result.per_length_class.get("long")
    log.info(
        "%-8s %-18s %6.1f req/s %7s useful tok/s  waste %s  p99 short %s / long %s ms  encoder batch %s%s",
        policy,
        result.traffic,
        result.throughput_rps,
        format_ms(result.useful_tokens_per_s, ".0f"),
        format_ms(counts.waste, ".0%"),
        format_ms(short.latency.p99_ms if short else None, ".0f"),
        format_ms(long.latency.p99_ms if long else None, ".0f"),
        format_ms(result.server["encoder"].average_batch_size, ".2f"),
        f", {result.error_count} errors" if result.error_count else "",
    )
    return row


def run_bench(settings: LengthsBenchSettings) -> int:
    started = time.perf_counter()
    cpu = describe_cpu()
    log.info("%s", cpu_line(cpu))
    mix, priority_mix = settings.mix, settings.priority_mix
    target = mixed_target(mix)
    encoder = load_config(MODEL_REPOSITORY / "encoder")
    measurement = Measurement(settings.warmup_s, settings.window_s, 3, settings.max_windows, 0.10, ("embed", "tokenizer", "encoder"))

    instances = instance_count(encoder)
    model_path = MODEL_REPOSITORY / "encoder" / "1" / "model.onnx"
    log.info("[1/3] raw engine: padded tokens/s in process")
    raw_points = raw_engine_points(model_path, instances, settings.window_s / 2)

    log.info("[2/3] policies %s on %s", ", ".join(settings.policies), target.describe)
    rows: list[dict] = []
    rate = settings.rate
    with triton_endpoints(None, explicit_control=True) as endpoints:
        for number, policy in enumerate(settings.policies, start=1):
            tokenizer_config, encoder_config = policy_configs(MODEL_REPOSITORY, policy)
            endpoints.client.load("encoder", encoder_config)
            endpoints.client.load("tokenizer", tokenizer_config)
            log.info("policy %d/%d: %s (loaded; %.0f s so far)", number, len(settings.policies), policy, time.perf_counter() - started)
            closed = [
                measure_level(policy, Traffic(concurrency=c, priority_mix=priority_mix), target, measurement, endpoints)
                for c in settings.concurrency
            ]
            rows += closed
            if rate is None and settings.rate_fraction > 0:
                capacity = max(row["throughput_rps"] for row in closed)
                rate = round(settings.rate_fraction * capacity, 1)
                log.info(
                    "Poisson rate for every policy: %.1f req/s (%.0f%% of %s's best closed-loop %.1f req/s)",
                    rate,
                    settings.rate_fraction * 100,
                    policy,
                    capacity,
                )
            if rate:
                rows.append(measure_level(policy, Traffic(rate=rate, seed=7, priority_mix=priority_mix), target, measurement, endpoints))

    log.info("[3/3] raw engine again (the best of both measurements counts)")
    raw_points = raw_engine_points(model_path, instances, settings.window_s / 2, raw_points)
    raw = {"points": raw_points, "best_tokens_per_s": max(p["tokens_per_s"] for p in raw_points)}
    report = {
        "cpu": cpu,
        "settings": {
            "workload": target.describe,
            "mean_tokens": mix.mean_tokens,
            "policies": list(settings.policies),
            "concurrency": list(settings.concurrency),
            "poisson_rate": rate,
            "rate_fraction": settings.rate_fraction,
            "priority_mix": {str(k): v for k, v in priority_mix.items()},
            "warmup_s": settings.warmup_s,
            "window_s": settings.window_s,
            "max_windows": settings.max_windows,
            "encoder": {"max_batch_size": encoder.max_batch_size, "instances": instances},
        },
        "raw_engine": raw,
        "rows": rows,
        "seconds": time.perf_counter() - started,
    }
    settings.out.mkdir(parents=True, exist_ok=True)
    (settings.out / "report.json").write_text(json.dumps(report, indent=1))
    markdown = render_markdown(report)
    (settings.out / "report.md").write_text(markdown)
    print(markdown)
    log.info("wrote %s and %s in %.0f s", settings.out / "report.md", settings.out / "report.json", report["seconds"])
    return 0


def policy_list(text: str) -> list[str]:
    policies = [item.strip() for item in text.split(",") if item.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise argparse.ArgumentTypeError(f"policies must be a comma list of {', '.join(POLICIES)}; got {text!r}")
    return policies


def positive_list(text: str) -> list[int]:
    values = number_list(text, int)
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give positive concurrencies, e.g. 16,64")
    return values


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.lengths", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--policies", type=policy_list, default=list(POLICIES), help="comma list (default: all, batch first)")
    parser.add_argument("--concurrency", type=positive_list, default=[16, 64], help="closed-loop levels (default 16,64)")
    parser.add_argument("--rate", type=float, default=None, help="Poisson rate in req/s (default: --rate-fraction of capacity)")
    parser.add_argument(
        "--rate-fraction",
        type=float,
        default=0.7,
        help="Poisson rate as a share of the first policy's best closed-loop throughput (0: no Poisson level)",
    )
    parser.add_argument("--passage-share", type=float, default=0.3, help="share of passages (default %(default)s)")
    parser.add_argument("--short-tokens", default="5-30", help="query length range in tokens (default %(default)s)")
    parser.add_argument("--long-tokens", default="100-256", help="passage length range in tokens (default %(default)s)")
    parser.add_argument("--priority-mix", default="", help="e.g. 1:0.2,2:0.8: p50/p99 per priority level too")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds discarded per level (default %(default)s)")
    parser.add_argument("--window", type=float, default=4.0, help="seconds per measurement window (default %(default)s)")
    parser.add_argument("--max-windows", type=int, default=4, help="windows per level at most (default %(default)s)")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "bench-lengths")
    add_verbosity_flags(parser)
    return parser


@dataclass(frozen=True)
class LengthsBenchSettings:
    """build_parser()'s options as typed values, checked."""

    policies: list[str]
    concurrency: list[int]  # closed-loop levels
    rate: float | None  # Poisson req/s; None: rate_fraction of the first policy's best closed-loop throughput
    rate_fraction: float
    mix: LengthMix
    priority_mix: dict[int, float]
    warmup_s: float
    window_s: float
    max_windows: int
    out: Path

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> LengthsBenchSettings:
        """ValueError names a refused option."""
        if args.rate is not None and args.rate <= 0:
            raise ValueError("--rate must be > 0")
        if not 0 <= args.rate_fraction <= 2:
            raise ValueError("--rate-fraction must be within 0..2")
        if args.warmup < 0 or args.window <= 0 or args.max_windows < 1:
            raise ValueError("--warmup must be >= 0, --window > 0 and --max-windows >= 1")
        priority_mix = parse_priority_mix(args.priority_mix)
        Traffic(concurrency=1, priority_mix=priority_mix)  # the mix's own rules
        return cls(
            args.policies,
            args.concurrency,
            args.rate,
            args.rate_fraction,
            length_mix_from_args(args),
            priority_mix,
            args.warmup,
            args.window,
            args.max_windows,
            args.out,
        )


def parse_args(argv: list[str] | None) -> LengthsBenchSettings:
    return parse_settings(build_parser(), argv, LengthsBenchSettings.from_cli_args)


def run(argv: list[str] | None = None) -> int:
    settings = parse_args(argv)
    return run_reporting_errors(lambda: run_bench(settings), log)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
