"""`python -m tools.reliability.overload`: what an overload looks like with bounded, per-level queues.

Starts a local Triton on a copy of the repository whose tokenizer and encoder queues
hold `--queue` requests per priority level, measures its capacity (closed loop), drives
an open-loop rate (on the load driver, tools/load) several times above it with a priority mix, and reports per level
over the whole run: accepted/rejected counts and the latency of accepted requests.
Every request sent is reconciled with the server's statistics.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.cli.arguments import parse_settings
from tools.cli.logsetup import add_verbosity_flags
from tools.load.driver import drive
from tools.load.mix import RequestMix
from tools.load.outcomes import OK, REJECTED, SHED, TIMEOUT
from tools.load.requests import embed_target
from tools.load.results import Results, format_ms
from tools.load.schedules import Phase, Poisson
from tools.load.triton import TritonSender
from tools.loadgen.measure import measure_capacity
from tools.paths import BUILD_DIR, REPO_ROOT
from tools.ports import free_ports
from tools.repo.policy_repository import copy_repository, set_queue_policy
from tools.serve.local_triton import LocalTriton, ServerOptions, TritonStartError
from tools.triton_client.stats import ModelStats

log = logging.getLogger("overload")


def bounded_repository(destination: Path, queue: int, level2_timeout_us: int = 0) -> Path:
    """Tokenizer and encoder queues of `queue` requests per level (both steps of the
    ensemble: a bound only at the encoder lets the backlog pile up in the tokenizer's
    queue instead). Level 1 (interactive) ignores per-request timeouts; level 2 (bulk,
    the default) honours them and may have a default timeout."""

    def bound(config) -> None:
        set_queue_policy(config, None, queue, default_timeout_us=level2_timeout_us, allow_override=True)
        # every level explicitly: a committed per-level policy would otherwise override the default one
        for level in range(2, config.dynamic_batching.priority_levels + 1):
            set_queue_policy(config, level, queue, default_timeout_us=level2_timeout_us, allow_override=True)
        set_queue_policy(config, 1, queue, default_timeout_us=0, allow_override=False)

    return copy_repository(destination, {"tokenizer": bound, "encoder": bound})


def start_policy_server(repository: Path, log_path: Path) -> LocalTriton:
    http, grpc, metrics = free_ports(3)
    options = ServerOptions(model_repository=repository, http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_s=5)
    return LocalTriton(options, log_path=log_path).start()


OVERLOAD_FACTOR = 4.0  # offered load over measured capacity: far beyond what batching can absorb on a CPU
MIX = {1: 0.2, 2: 0.8}
CAPACITY_CLIENTS = 8  # closed-loop clients measuring capacity: every instance busy, within the queue bound


@dataclass
class LevelRow:
    """One priority level over the whole run. Latencies are of successful requests: None when none succeeded."""

    level: int
    sent: int
    ok: int
    rejected: int
    timeout: int
    other_errors: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None


@dataclass
class OverloadResult:
    rate: float
    seconds: float
    sent: int
    outcomes: dict[str, int]
    levels: list[LevelRow]
    server_success: int  # embed's success count over the run
    server_failures: int  # embed's failure count: Triton 2.51 counts a rejected ensemble request twice
    reconciled: bool
    capacity_rps: float | None = None  # measured closed-loop capacity the rate was derived from (None: --rate given)

    def describe(self) -> str:
        counts = ", ".join(f"{count} {outcome}" for outcome, count in sorted(self.outcomes.items()))
        check = "agree" if self.reconciled else "do NOT agree"
        return (
            f"{self.sent} sent in {self.seconds:g} s at {self.rate:g} req/s: {counts}; the server's statistics "
            f"({self.server_success} ok, {self.server_failures} failures) {check}"
        )


def overload_rate(server: LocalTriton, factor: float = OVERLOAD_FACTOR) -> tuple[float, float]:
    """An offered rate `factor` times the capacity measured on this server now, and that capacity."""
    options = server.options
    capacity = measure_capacity(embed_target(), options.grpc_url, "grpc", options.http_url, concurrency=CAPACITY_CLIENTS)
    return round(factor * capacity, 1), capacity


def run_overload(server: LocalTriton, rate: float, seconds: float, mix: dict[int, float], seed: int = 0) -> OverloadResult:
    """One open-loop overload on the load driver. Counts and latencies cover every request of
    the run: no warm-up is discarded, since an overload is about what happens to each request."""
    options = server.options
    before = ModelStats.settled(options.http_url, "embed")
    sender = TritonSender(options.grpc_url, embed_target(seed=seed))
    run = drive(sender, [Phase(Poisson(rate), seconds)], RequestMix(priorities=mix, seed=seed), seed=seed)
    delta = ModelStats.settled(options.http_url, "embed") - before
    results = Results.of(run.records, seconds)
    levels = []
    for level, cls in results.per_priority.items():
        outcomes = cls.outcomes
        errors = sum(v for k, v in outcomes.items() if k not in (OK, *SHED))
        counts = (outcomes.get(OK, 0), outcomes.get(REJECTED, 0), outcomes.get(TIMEOUT, 0), errors)
        latency = cls.latency.rounded(1)
        levels.append(LevelRow(level, cls.sent, *counts, latency["p50_ms"], latency["p99_ms"], latency["max_ms"]))
    ok = results.outcomes.get(OK, 0)
    # Each request has exactly one outcome on the client, the levels add up to the totals,
    # the server's successes match the client's, and the server saw every failure (a
    # rejection inside a step is not in the step's own statistics, and the ensemble counts it twice).
    failed = run.sent - ok
    answered = len(run.records) == run.sent == sum(row.sent for row in levels)
    reconciled = answered and delta.requests == ok and delta.failures == 2 * failed
    return OverloadResult(rate, seconds, run.sent, results.outcomes, levels, delta.requests, delta.failures, reconciled)


def markdown_table(results: list[OverloadResult]) -> str:
    """One table, every figure over the whole run; then per run the totals the levels add up
    to and whether the server's own statistics agree."""
    lines = [
        "| run | offered (req/s) | level | sent | ok | rejected | timeout | other errors | p50 ok (ms) | p99 ok (ms) | max ok (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for number, result in enumerate(results, start=1):
        for row in result.levels:
            latency = " | ".join(format_ms(value) for value in (row.p50_ms, row.p99_ms, row.max_ms))
            lines.append(
                f"| {number} | {result.rate:g} | {row.level} | {row.sent} | {row.ok} | {row.rejected} | {row.timeout} | "
                f"{row.other_errors} | {latency} |"
            )
    lines.append("")
    capacity = results[0].capacity_rps if results else None
    if capacity is not None:
        lines.append(
            f"- offered rate: {results[0].rate:g} req/s = {results[0].rate / capacity:.1f} x the capacity measured first "
            f"({capacity:.1f} req/s, closed loop of {CAPACITY_CLIENTS} clients)"
        )
    lines += [f"- run {number}: {result.describe()}" for number, result in enumerate(results, start=1)]
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.reliability.overload", description=__doc__)
    parser.add_argument(
        "--rate", type=float, default=None, help=f"offered load, req/s (default: {OVERLOAD_FACTOR:g} x the capacity measured first)"
    )
    parser.add_argument("--seconds", type=float, default=8.0, help="per run (default %(default)s)")
    parser.add_argument("--queue", type=int, default=16, help="tokenizer and encoder max_queue_size per priority level")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "reports" / "reliability" / "overload")
    add_verbosity_flags(parser)
    return parser


@dataclass(frozen=True)
class OverloadSettings:
    rate: float | None  # offered req/s; None: OVERLOAD_FACTOR x the capacity measured first
    seconds: float  # per run
    queue: int  # tokenizer and encoder max_queue_size per priority level
    runs: int
    output: Path

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> OverloadSettings:
        """Refuse out-of-range options before the server starts (ValueError names the option)."""
        if args.rate is not None and not 0 < args.rate < math.inf:
            raise ValueError(f"--rate must be a number above 0 req/s, got {args.rate:g}")
        if not 1 <= args.seconds < math.inf:
            raise ValueError(f"--seconds must be at least 1, got {args.seconds:g}")
        if args.queue < 1:
            raise ValueError(f"--queue must be at least 1, got {args.queue}")
        if args.runs < 1:
            raise ValueError(f"--runs must be at least 1, got {args.runs}")
        return cls(args.rate, args.seconds, args.queue, args.runs, args.output)


def run(argv: list[str] | None = None) -> int:
    settings = parse_settings(build_parser(), argv, OverloadSettings.from_cli_args)
    repository = bounded_repository(BUILD_DIR / "overload-repository", settings.queue)
    settings.output.mkdir(parents=True, exist_ok=True)
    results = []
    try:
        with start_policy_server(repository, settings.output / "triton.log") as server:
            rate, capacity = settings.rate, None
            if rate is None:
                log.info("measuring capacity (closed loop, %d clients)", CAPACITY_CLIENTS)
                rate, capacity = overload_rate(server)
                log.info("capacity %.1f req/s: offering %g req/s (%g x)", capacity, rate, OVERLOAD_FACTOR)
            for number in range(settings.runs):
                result = run_overload(server, rate, settings.seconds, MIX, seed=number)
                result.capacity_rps = capacity
                results.append(result)
                log.info("run %d/%d: %s", number + 1, settings.runs, result.describe())
    except (TritonStartError, RuntimeError) as exc:
        log.error("%s", exc)
        return 1
    (settings.output / "overload.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    table = markdown_table(results)
    (settings.output / "overload.md").write_text(table + "\n")
    print(table)
    if not all(r.reconciled for r in results):
        log.error("the client's counts and the server's statistics disagree in some run (see above)")
        return 1
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
