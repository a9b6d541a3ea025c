"""`python -m tools.adaptive.evaluate` (`make bench-adapt`): static configs vs the controller.

One run, one server, one trace: Poisson arrivals stepping low -> peak -> low -> peak (a
compressed day with bursts), with rates set from the encoder's measured batch-1
capacity unless given. The same trace is replayed against every static delay of a
small set that includes the committed one, then against the controller starting from
the committed config, and last against the first static delay again: the difference
between its two replays is the drift over the run, the noise floor of the comparison.
The best static delay per phase kind (low, peak) is picked in hindsight from the same
run: the strongest static baselines there can be. The reload cost is measured first
under steady load. Report: reports/adapt/.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

from tools.adaptive.control import Controller, ControlSettings
from tools.adaptive.live import LiveController, with_delay
from tools.adaptive.reload_cost import measure_reload_cost
from tools.adaptive.replay import Phase, Records, phase_trace, replay, windows
from tools.adaptive.report import phase_summary, render_markdown
from tools.admin_key import add_admin_key_arguments, key_from_args
from tools.command import run_reporting_errors
from tools.loadgen.cli_args import number_list
from tools.loadgen.targets import encoder_target
from tools.logsetup import add_verbosity_flags, configure_logging
from tools.model_config import has_priority_queues, without_priority_queues
from tools.paths import REPO_ROOT
from tools.server_session import triton_endpoints
from tools.triton_client import TritonError
from tools.tuning.curve import encoder_batch, measure_curve

log = logging.getLogger("bench-adapt")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.adaptive.evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--p99-ms", type=float, default=150.0, help="SLO (default %(default)s)")
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--low-rate", type=float, default=None, help="req/s in low phases (default: 25%% of batch-1 capacity)")
    parser.add_argument("--peak-rate", type=float, default=None, help="req/s in peak phases (default: 75%% of batch-1 capacity)")
    parser.add_argument("--phase-s", type=float, default=15.0, help="seconds per phase (default %(default)s)")
    parser.add_argument("--pattern", default="low,peak,low,peak", help="phase order (default %(default)s)")
    parser.add_argument(
        "--delays-us", type=lambda t: number_list(t, int), default=[0, 10_000], help="static delays besides the committed one"
    )
    parser.add_argument("--window", type=float, default=5.0, help="seconds per reported window")
    parser.add_argument("--control-window", type=float, default=2.0, help="the controller's observation window")
    parser.add_argument("--min-interval", type=float, default=6.0, help="the controller's seconds between changes")
    parser.add_argument(
        "--keep-priority-queues",
        action="store_true",
        help="evaluate with the committed priority levels and queue policies (default: without; see the report)",
    )
    parser.add_argument("--report-dir", type=Path, default=REPO_ROOT / "reports" / "adapt")
    parser.add_argument("--url", default=None)
    parser.add_argument("--grpc-url", default=None)
    add_admin_key_arguments(parser)
    add_verbosity_flags(parser)
    return parser


def replay_static(endpoints, base, delay: int, target, arrivals) -> Records:
    endpoints.client.load("encoder", with_delay(base, delay))
    time.sleep(1.0)
    return replay(target, arrivals, endpoints.grpc_url)


def replay_controlled(endpoints, base, settings: ControlSettings, target, arrivals, window_s: float) -> tuple[Records, LiveController]:
    endpoints.client.load("encoder", base)
    time.sleep(1.0)
    live = LiveController(endpoints.client, "encoder", base, Controller(settings, base.dynamic_batching.max_queue_delay_microseconds),
                          window_s)  # fmt: skip
    stop = threading.Event()
    thread = threading.Thread(target=live.run, args=(stop,), name="adapt", daemon=True)
    thread.start()
    try:
        records = replay(target, arrivals, endpoints.grpc_url)
    finally:
        stop.set()
        thread.join()
    return records, live


def evaluate(args: argparse.Namespace) -> int:
    target = encoder_target(args.seq_len)
    with triton_endpoints(args.url, args.grpc_url, explicit_control=True, admin_key=key_from_args(args)) as endpoints:
        served = endpoints.client.config("encoder")
        base = served if args.keep_priority_queues else without_priority_queues(served)
        committed = base.dynamic_batching.max_queue_delay_microseconds
        # batch 1 twice (first and last): the first executions after a start run cold
        curve = measure_curve(endpoints.http_url, "encoder", encoder_batch(args.seq_len), [1, 4, 8, 1], repeats=4)
        per_instance = max(p.rows_per_s for p in curve if p.batch_size == 1)
        gain = max(p.rows_per_s for p in curve) / per_instance
        # the curve runs one request at a time, on one instance; the others serve in parallel
        instances = sum(group.count or 1 for group in base.instance_group) or 1
        capacity = per_instance * instances
        low = args.low_rate or round(0.25 * capacity, 1)
        peak = args.peak_rate or round(0.75 * capacity, 1)
        rates = {"low": low, "peak": peak}
        phases = [Phase(name, rates[name], args.phase_s) for name in args.pattern.split(",")]
        arrivals = phase_trace(phases)
        total = sum(p.seconds for p in phases)
        log.info("capacity %.0f rows/s at batch 1 (%d instance(s)), gain %.2fx; trace %s, %d arrivals over %g s", capacity, instances, gain,
                 " -> ".join(f"{p.name} {p.rate:g}/s" for p in phases), len(arrivals), total)  # fmt: skip
        args.report_dir.mkdir(parents=True, exist_ok=True)
        (args.report_dir / "trace.txt").write_text("\n".join(f"{t:.6f}" for t in arrivals) + "\n")

        log.info("reload cost: steady %g req/s, 3 reloads", low)
        steady = phase_trace([Phase("steady", low, 16.0)], seed=7)
        cost = measure_reload_cost(target, steady, endpoints.grpc_url,
                                   lambda d: endpoints.client.load("encoder", with_delay(base, d)),
                                   [0, committed, 0], [4.0, 8.0, 12.0])  # fmt: skip
        log.info("reload cost: %s", cost)

        runs: dict[str, Records] = {}
        labels: dict[str, str] = {}
        for delay in sorted({committed, *args.delays_us}):
            name = f"static {delay} us"
            labels[name] = "committed" if delay == committed else "static"
            log.info("replaying the trace against %s", name)
            runs[name] = replay_static(endpoints, base, delay, target, arrivals)
        settings = ControlSettings(p99_ms=args.p99_ms, batching_gain=gain, min_interval_s=args.min_interval,
                                   max_batch_size=base.max_batch_size)  # fmt: skip
        log.info("replaying the trace against the controller (starting at %d us)", committed)
        runs["controller"], live = replay_controlled(endpoints, base, settings, target, arrivals, args.control_window)
        labels["controller"] = "adaptive"
        first = min([*args.delays_us, committed])
        repeat = f"static {first} us (repeat)"
        log.info("replaying the trace against %s, to measure the drift over the run", repeat)
        runs[repeat], labels[repeat] = replay_static(endpoints, base, first, target, arrivals), "repeat"
        try:
            endpoints.client.load("encoder", served)
        except TritonError as exc:
            log.error("could not restore the committed config: %s", exc)

    results = {
        "settings": {"p99_ms": args.p99_ms, "seq_len": args.seq_len, "phases": [asdict(p) for p in phases], "window_s": args.window,
                     "committed_delay_us": committed, "priority_queues": has_priority_queues(base), "control": asdict(settings),
                     "arrivals": len(arrivals)},
        "curve": [asdict(p) for p in curve],
        "reload_cost": cost,
        "runs": {name: {"label": labels[name], "windows": [asdict(w) for w in windows(records, total, args.window, args.p99_ms)],
                        "phases": phase_summary(records, phases, args.p99_ms), "max_send_lag_ms": round(records.max_lag_s * 1000, 1)}
                 for name, records in runs.items()},
        "controller": {"decisions": [d.to_dict() for d in live.decisions], "reloads": [r.to_dict() for r in live.reloads]},
    }  # fmt: skip
    (args.report_dir / "results.json").write_text(json.dumps(results, indent=1))
    markdown = render_markdown(results)
    (args.report_dir / "report.md").write_text(markdown)
    print(markdown)
    print(f"report: {args.report_dir / 'report.md'}")
    return 1 if any(not r.ok for r in live.reloads) else 0  # shed requests under overload are results, not errors


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    return run_reporting_errors(lambda: evaluate(args), log)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
