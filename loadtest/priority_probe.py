"""`python -m loadtest.priority_probe`: does request priority (and the queue timeout) reach
the models inside the `embed` ensemble?

Identical requests, half at priority 1 and half at priority 2, keep a model saturated
from closed-loop clients (the load driver, tools/load). If the scheduler that holds the queue honours the priority,
priority-1 requests overtake and their latency stays far below priority 2's. Run it
against `encoder` directly (the control: priority certainly applies there) and against
`embed` (the ensemble: applies only if it is passed on). `--timeout-us` adds a queue
timeout to the priority-2 requests; a "Request timeout expired" rejection shows it
reached a composing model's queue policy.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from tools.contract import DEFAULT_HTTP_URL
from tools.load.driver import Run, drive
from tools.load.mix import RequestMix
from tools.load.outcomes import OK
from tools.load.requests import RequestSettings, fetch_model_config, request_factory
from tools.load.results import Results, format_ms
from tools.load.schedules import ClosedLoop, Phase
from tools.load.triton import TritonSender

ENCODER_TOKENS = 32  # a model that takes token ids is sent ready ids of this length
A, B = "A", "B"


def probe(url: str, model: str, threads: int, seconds: float, priorities: tuple[int, int], timeout_us: int) -> Run:
    """Closed-loop clients on the load driver over HTTP; each request is class A or B (half each)."""
    config = fetch_model_config(url, model)  # texts or token ids: the served config says
    targets = {}
    for name, priority, timeout in ((A, priorities[0], None), (B, priorities[1], timeout_us or None)):
        target = request_factory(config, RequestSettings(seq_len=ENCODER_TOKENS))
        target.priority, target.timeout_us = priority, timeout
        targets[name] = target
    sender = TritonSender(url, targets, "http")
    run = drive(sender, [Phase(ClosedLoop(threads), seconds)], RequestMix(kinds={A: 0.5, B: 0.5}), deadline_s=60.0)
    return run


def format_outcomes(model: str, run: Run, priorities: tuple[int, int], seconds: float) -> str:
    lines = [f"model {model}: {'class':16} {'ok':>6} {'req/s':>6} {'p50 ms':>7} {'p95 ms':>7} {'p99 ms':>7}  failures"]
    results = Results.of(run.records, seconds)
    for (kind, cls), priority in zip(sorted(results.per_kind.items()), priorities):
        latency = cls.latency
        p50, p95, p99 = (format_ms(value, ".0f") for value in (latency.p50_ms, latency.p95_ms, latency.p99_ms))
        errors = Counter(r.message for r in run.records if r.kind == kind and r.outcome != OK)
        failures = "; ".join(f"{count} x {message}" for message, count in errors.items()) or "-"
        label = f"priority {priority} ({kind})"
        lines.append(
            f"{'':{len(model) + 7}} {label:16} {latency.count:6d} {cls.throughput_rps:6.1f} {p50:>7} {p95:>7} {p99:>7}  {failures}"
        )
    return "\n".join(lines)


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m loadtest.priority_probe", description=__doc__)
    parser.add_argument("--url", default=DEFAULT_HTTP_URL, help="Triton HTTP host:port (default: %(default)s)")
    parser.add_argument("--models", nargs="+", default=["encoder", "embed"], choices=("encoder", "embed"))
    parser.add_argument(
        "--threads", type=int, default=32, help="closed-loop clients; each request is class A or B, half each (default: %(default)s)"
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="per model (default: %(default)s)")
    parser.add_argument("--priorities", type=int, nargs=2, default=(1, 2), help="class A and class B (default: 1 2)")
    parser.add_argument("--timeout-us", type=int, default=0, help="queue timeout on class B requests (default: none)")
    args = parser.parse_args(argv)
    for model in args.models:
        run = probe(args.url, model, args.threads, args.seconds, tuple(args.priorities), args.timeout_us)
        print(format_outcomes(model, run, tuple(args.priorities), args.seconds), flush=True)
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
