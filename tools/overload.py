"""`python -m tools.overload`: what an overload looks like with bounded, per-level queues.

Starts a local Triton on a copy of the repository whose encoder queues hold
`--queue` requests per priority level, drives an open-loop rate well above capacity
with a priority mix, and reports per level: accepted/rejected counts and the latency
of accepted requests. Every request sent is reconciled with the server's statistics.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.loadgen import Measurement, Traffic, embed_target, run_load
from tools.local_triton import LocalTriton, ServerOptions, free_ports
from tools.logsetup import add_verbosity_flags, configure_logging
from tools.paths import BUILD_DIR, REPO_ROOT
from tools.policy_repository import copy_repository, set_queue_policy
from tools.stats import ModelStats

log = logging.getLogger("overload")


def bounded_repository(destination: Path, queue: int, level2_timeout_us: int = 0) -> Path:
    """Tokenizer and encoder queues of `queue` requests per level (both steps of the
    ensemble: a bound only at the encoder lets the backlog pile up in the tokenizer's
    queue instead). Level 1 (interactive) ignores per-request timeouts; level 2 (bulk,
    the default) honours them and may have a default timeout."""

    def bound(config) -> None:
        set_queue_policy(config, None, queue, default_timeout_us=level2_timeout_us, allow_override=True)
        set_queue_policy(config, 1, queue, default_timeout_us=0, allow_override=False)

    return copy_repository(destination, {"tokenizer": bound, "encoder": bound})


def start_policy_server(repository: Path, log_path: Path) -> LocalTriton:
    http, grpc, metrics = free_ports(3)
    options = ServerOptions(model_repository=repository, http_port=http, grpc_port=grpc, metrics_port=metrics, exit_timeout_s=5)
    return LocalTriton(options, log_path=log_path).start()


@dataclass
class LevelRow:
    level: int
    sent: int
    ok: int
    rejected: int
    timeout: int
    other_errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float


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


def run_overload(server: LocalTriton, rate: float, seconds: float, mix: dict[int, float], seed: int = 0) -> OverloadResult:
    """One open-loop overload; latencies cover the whole run after a 1 s warm-up."""
    options = server.options
    models = ("embed",)
    before = {model: ModelStats.settled(options.http_url, model) for model in models}
    traffic = Traffic(rate=rate, priority_mix=mix, seed=seed)
    windows = max(1, round((seconds - 1.0) / 1.0))
    measurement = Measurement(warmup_s=1.0, window_s=1.0, stable_windows=windows, max_windows=windows, server_models=())
    result = run_load(embed_target(seed=seed), traffic, measurement, options.grpc_url, "grpc", options.http_url)
    delta = {model: ModelStats.settled(options.http_url, model) - before[model] for model in models}
    levels = []
    for level, cls in sorted(result.per_priority.items()):
        outcomes = cls.outcomes
        errors = sum(v for k, v in outcomes.items() if k not in ("ok", "rejected", "timeout"))
        counts = (outcomes.get("ok", 0), outcomes.get("rejected", 0), outcomes.get("timeout", 0), errors)
        latency = (round(cls.latency.p50_ms, 1), round(cls.latency.p99_ms, 1), round(cls.latency.max_ms, 1))
        levels.append(LevelRow(level, cls.sent, *counts, *latency))
    ok = result.run_outcomes.get("ok", 0)
    # Each request has exactly one outcome on the client, the server's successes match
    # the client's, and the server saw every failure (a rejection inside a step is not
    # in the step's own statistics, and the ensemble counts it twice).
    failed = result.run_sent - ok
    answered = sum(result.run_outcomes.values()) == result.run_sent
    reconciled = answered and delta["embed"].requests == ok and delta["embed"].failures == 2 * failed
    outcomes = dict(result.run_outcomes)
    return OverloadResult(rate, seconds, result.run_sent, outcomes, levels, delta["embed"].requests, delta["embed"].failures, reconciled)


def markdown_table(results: list[OverloadResult]) -> str:
    lines = [
        "| run | offered (req/s) | level | sent | ok | rejected | timeout | other errors | p50 ok (ms) | p99 ok (ms) | max ok (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for number, result in enumerate(results, start=1):
        for row in result.levels:
            lines.append(f"| {number} | {result.rate:g} | {row.level} | {row.sent} | {row.ok} | {row.rejected} | {row.timeout} | "
                         f"{row.other_errors} | {row.p50_ms} | {row.p99_ms} | {row.max_ms} |")  # fmt: skip
    return "\n".join(lines)


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.overload", description=__doc__)
    parser.add_argument("--rate", type=float, default=400.0, help="offered load, req/s (well above capacity)")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--queue", type=int, default=16, help="encoder max_queue_size per priority level")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "reports" / "reliability" / "overload")
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    repository = bounded_repository(BUILD_DIR / "overload-repository", args.queue)
    args.output.mkdir(parents=True, exist_ok=True)
    results = []
    with start_policy_server(repository, args.output / "triton.log") as server:
        for number in range(args.runs):
            results.append(run_overload(server, args.rate, args.seconds, {1: 0.2, 2: 0.8}, seed=number))
            log.info("run %d: %s", number + 1, results[-1].outcomes)
    (args.output / "overload.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    table = markdown_table(results)
    (args.output / "overload.md").write_text(table + "\n")
    print(table)
    return 0 if all(r.reconciled for r in results) else 1


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
