"""`python -m tools.adapt.evaluate` (`make bench-adapt`): static configs vs the controller.

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
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.adapt.control import Controller, ControlSettings
from tools.adapt.live import LiveController, with_delay
from tools.adapt.reload_cost import measure_reload_cost
from tools.adapt.replay import TracePhase, phase_trace, replay, windows
from tools.adapt.report import phase_summary, render_markdown
from tools.cli.arguments import number_list
from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.cli.settings import settings_from
from tools.load.driver import Run
from tools.load.requests import RequestSettings, request_factory
from tools.loadgen.curve import CurvePoint, encoder_batch, measure_curve
from tools.paths import REPO_ROOT
from tools.repo.instances import instance_count
from tools.repo.model_config import ModelConfig, has_priority_queues, without_priority_queues
from tools.serve.admin_key import add_admin_key_arguments, resolve_admin_key
from tools.serve.server_session import triton_endpoints
from tools.triton_client import TritonError

log = logging.getLogger("bench-adapt")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.adapt.evaluate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
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


@dataclass(frozen=True)
class EvaluateSettings:
    """The command line as typed values; built once in `run()`, read by everything below."""

    p99_ms: float = 150.0
    seq_len: int = 128
    low_rate: float | None = None  # None: 25% of the measured batch-1 capacity
    peak_rate: float | None = None  # None: 75% of it
    phase_s: float = 15.0
    pattern: tuple[str, ...] = ("low", "peak", "low", "peak")
    delays_us: tuple[int, ...] = (0, 10_000)  # static delays besides the committed one
    window_s: float = 5.0  # per reported window
    control_window_s: float = 2.0
    min_interval_s: float = 6.0
    keep_priority_queues: bool = False
    report_dir: Path = REPO_ROOT / "reports" / "adapt"
    url: str | None = None
    grpc_url: str | None = None
    admin_key: str | None = None

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> EvaluateSettings:
        return settings_from(
            cls,
            args,
            pattern=tuple(args.pattern.split(",")),
            delays_us=tuple(args.delays_us),
            window_s=args.window,
            control_window_s=args.control_window,
            min_interval_s=args.min_interval,
            admin_key=resolve_admin_key(args.admin_key_file, args.admin_key),
        )


def replay_static(endpoints, base, delay: int, target, arrivals) -> Run:
    endpoints.client.load("encoder", with_delay(base, delay))
    time.sleep(1.0)
    return replay(target, arrivals, endpoints.grpc_url)


def replay_controlled(endpoints, base, law: ControlSettings, target, arrivals, window_s: float) -> tuple[Run, LiveController]:
    endpoints.client.load("encoder", base)
    time.sleep(1.0)
    controller = Controller(law, base.dynamic_batching.max_queue_delay_microseconds)
    live = LiveController(endpoints.client, "encoder", base, controller, window_s)
    stop = threading.Event()
    thread = threading.Thread(target=live.run, args=(stop,), name="adapt", daemon=True)
    thread.start()
    try:
        records = replay(target, arrivals, endpoints.grpc_url)
    finally:
        stop.set()
        thread.join()
    return records, live


@dataclass(frozen=True)
class Capacity:
    """The encoder's batch curve on this server now, and what it implies for the trace."""

    curve: list[CurvePoint]
    rows_per_s: float  # at batch 1, all instances together
    instances: int
    gain: float  # best rows/s over batch-1 rows/s


def measure_batch_capacity(http_url: str, base: ModelConfig, seq_len: int) -> Capacity:
    # batch 1 twice (first and last): the first executions after a start run cold
    curve = measure_curve(http_url, "encoder", encoder_batch(seq_len), [1, 4, 8, 1], repeats=4)
    per_instance = max(p.rows_per_s for p in curve if p.batch_size == 1)
    # the curve runs one request at a time, on one instance; the others serve in parallel
    instances = instance_count(base)
    return Capacity(curve, per_instance * instances, instances, max(p.rows_per_s for p in curve) / per_instance)


def phase_rates(settings: EvaluateSettings, capacity: Capacity) -> dict[str, float]:
    """Requests/s of the low and peak phases: given, or a quarter and three quarters of capacity."""
    return {
        "low": settings.low_rate or round(0.25 * capacity.rows_per_s, 1),
        "peak": settings.peak_rate or round(0.75 * capacity.rows_per_s, 1),
    }


def evaluate(settings: EvaluateSettings) -> int:
    with triton_endpoints(settings.url, settings.grpc_url, explicit_control=True, admin_key=settings.admin_key) as endpoints:
        served = endpoints.client.config("encoder")
        target = request_factory(served, RequestSettings(seq_len=settings.seq_len))  # token ids: the served config says
        base = served if settings.keep_priority_queues else without_priority_queues(served)
        committed = base.dynamic_batching.max_queue_delay_microseconds
        capacity = measure_batch_capacity(endpoints.http_url, base, settings.seq_len)
        rates = phase_rates(settings, capacity)
        phases = [TracePhase(name, rates[name], settings.phase_s) for name in settings.pattern]
        arrivals = phase_trace(phases)
        log.info(
            "capacity %.0f rows/s at batch 1 (%d instance(s)), gain %.2fx; trace %s, %d arrivals over %g s",
            capacity.rows_per_s,
            capacity.instances,
            capacity.gain,
            " -> ".join(f"{p.name} {p.rate:g}/s" for p in phases),
            len(arrivals),
            sum(p.seconds for p in phases),
        )
        settings.report_dir.mkdir(parents=True, exist_ok=True)
        (settings.report_dir / "trace.txt").write_text("\n".join(f"{t:.6f}" for t in arrivals) + "\n")

        log.info("reload cost: steady %g req/s, 3 reloads", rates["low"])
        steady = phase_trace([TracePhase("steady", rates["low"], 16.0)], seed=7)

        def reload(delay: int) -> None:
            endpoints.client.load("encoder", with_delay(base, delay))

        cost = measure_reload_cost(target, steady, endpoints.grpc_url, reload, [0, committed, 0], [4.0, 8.0, 12.0])
        log.info("reload cost: %s", cost)

        runs: dict[str, Run] = {}
        labels: dict[str, str] = {}
        for delay in sorted({committed, *settings.delays_us}):
            name = f"static {delay} us"
            labels[name] = "committed" if delay == committed else "static"
            log.info("replaying the trace against %s", name)
            runs[name] = replay_static(endpoints, base, delay, target, arrivals)
        law = ControlSettings(
            p99_ms=settings.p99_ms, batching_gain=capacity.gain, min_interval_s=settings.min_interval_s, max_batch_size=base.max_batch_size
        )
        log.info("replaying the trace against the controller (starting at %d us)", committed)
        runs["controller"], live = replay_controlled(endpoints, base, law, target, arrivals, settings.control_window_s)
        labels["controller"] = "adaptive"
        first = min([*settings.delays_us, committed])
        repeat = f"static {first} us (repeat)"
        log.info("replaying the trace against %s, to measure the drift over the run", repeat)
        runs[repeat], labels[repeat] = replay_static(endpoints, base, first, target, arrivals), "repeat"
        try:
            endpoints.client.load("encoder", served)
        except TritonError as exc:
            log.error("could not restore the committed config: %s", exc)

    settings_document = {
        "p99_ms": settings.p99_ms,
        "seq_len": settings.seq_len,
        "phases": [asdict(p) for p in phases],
        "window_s": settings.window_s,
        "committed_delay_us": committed,
        "priority_queues": has_priority_queues(base),
        "control": asdict(law),
        "arrivals": len(arrivals),
    }
    results = {
        "settings": settings_document,
        "curve": [asdict(p) for p in capacity.curve],
        "reload_cost": cost,
        "runs": {name: run_document(run, labels[name], phases, settings) for name, run in runs.items()},
        "controller": {"decisions": [d.to_dict() for d in live.decisions], "reloads": [r.to_dict() for r in live.reloads]},
    }
    (settings.report_dir / "results.json").write_text(json.dumps(results, indent=1))
    markdown = render_markdown(results)
    (settings.report_dir / "report.md").write_text(markdown)
    print(markdown)
    print(f"report: {settings.report_dir / 'report.md'}")
    return 1 if any(not r.ok for r in live.reloads) else 0  # shed requests under overload are results, not errors


def run_document(run: Run, label: str, phases: list[TracePhase], settings: EvaluateSettings) -> dict:
    total = sum(p.seconds for p in phases)
    return {
        "label": label,
        "windows": [asdict(w) for w in windows(run.records, total, settings.window_s, settings.p99_ms)],
        "phases": phase_summary(run.records, phases, settings.p99_ms),
        "max_send_lag_ms": round(run.max_lag_s * 1000, 1),
    }


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    return run_reporting_errors(lambda: evaluate(EvaluateSettings.from_cli_args(args)), log)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
