"""`python -m tools.adapt`: retune the batching delay live against a p99 SLO as traffic changes.

Every --window seconds the model's statistics are differenced (arrival rate, busy time,
queue and compute time, executed batch size, rejections) and the control law in
tools/adapt/control.py decides whether `max_queue_delay_microseconds` should move.
A change is applied with the model-control load API (a config override; only the delay
changes), never while another reload is in flight; a failed reload keeps the last good
config. Every decision is logged with its reason and figures. See docs/adapt.md.

Examples:
  python -m tools.adapt --model encoder --p99-ms 150 --url localhost:8000 --admin-key-file key
  python -m tools.adapt --model encoder --p99-ms 150 --url localhost:8000 --dry-run -v
  python -m tools.adapt --model llm live|bench ...   # the LLM (tools/adapt/llm/cli.py)
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import signal
import sys
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from tools.adapt.control import Controller, ControlSettings
from tools.adapt.live import LiveController
from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.cli.settings import settings_from
from tools.contract import GRPC_PORT
from tools.load.requests import TOKEN_IDS, input_kind
from tools.loadgen.curve import encoder_batch, measure_curve
from tools.repo.model_config import ModelConfig
from tools.serve.admin_key import add_admin_key_arguments, resolve_admin_key
from tools.serve.server_session import triton_endpoints

log = logging.getLogger("adapt")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.adapt", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--p99-ms", type=float, required=True, help="latency SLO: p99 in milliseconds")
    parser.add_argument("--model", default="encoder")
    parser.add_argument("--url", default=None, help="HTTP host:port of a Triton in explicit model-control mode (default: start one)")
    parser.add_argument("--grpc-url", default=None, help=f"its gRPC host:port (default: same host, port {GRPC_PORT})")
    add_admin_key_arguments(parser)
    parser.add_argument("--dry-run", action="store_true", help="log what would change; reload nothing")
    parser.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    parser.add_argument("--window", type=float, default=2.0, help="seconds per observation window (default %(default)s)")
    parser.add_argument("--decisions-json", type=Path, default=None, help="write every decision and reload here at exit")
    law = parser.add_argument_group("control law (docs/adapt.md)")
    defaults = ControlSettings(p99_ms=1.0)
    law.add_argument("--min-delay-us", type=int, default=defaults.min_delay_us)
    law.add_argument("--max-delay-us", type=int, default=defaults.max_delay_us)
    law.add_argument("--step-up-us", type=int, default=defaults.step_up_us, help="additive increase (default %(default)s)")
    law.add_argument("--decrease-factor", type=float, default=defaults.decrease_factor, help="multiplicative decrease")
    law.add_argument("--max-step-us", type=int, default=defaults.max_step_us)
    law.add_argument("--busy-high", type=float, default=defaults.busy_high, help="utilisation that asks for more delay")
    law.add_argument("--busy-low", type=float, default=defaults.busy_low, help="utilisation that asks for less delay")
    law.add_argument("--confirm-windows", type=int, default=defaults.confirm_windows, help="windows in a row before a move")
    law.add_argument("--min-interval", type=float, default=defaults.min_interval_s, help="seconds between changes")
    law.add_argument(
        "--min-gain",
        type=float,
        default=defaults.min_gain,
        help="raise the delay only if batching gains at least this (best/batch-1 rows/s)",
    )
    law.add_argument("--tail-factor", type=float, default=defaults.tail_factor, help="p99 estimate = mean server latency x this")
    law.add_argument(
        "--batching-gain", type=float, default=None, help="best/batch-1 rows/s of the model; default: measured once at start (encoder)"
    )
    law.add_argument("--seq-len", type=int, default=128, help="tokens per row for that measurement")
    add_verbosity_flags(parser)
    return parser


@dataclass(frozen=True)
class AdaptSettings:
    """The command line as typed values; built once in `run()`, read by everything below."""

    model: str
    law: ControlSettings  # its batching_gain and max_batch_size are filled in from the server
    batching_gain: float | None  # None: measure it at start
    seq_len: int  # tokens per row for that measurement
    url: str | None = None
    grpc_url: str | None = None
    admin_key: str | None = None
    dry_run: bool = False
    duration_s: float | None = None
    window_s: float = 2.0
    decisions_json: Path | None = None


def settings_from_args(args: argparse.Namespace) -> AdaptSettings:
    law = ControlSettings(
        p99_ms=args.p99_ms,
        min_delay_us=args.min_delay_us,
        max_delay_us=args.max_delay_us,
        step_up_us=args.step_up_us,
        decrease_factor=args.decrease_factor,
        max_step_us=args.max_step_us,
        busy_high=args.busy_high,
        busy_low=args.busy_low,
        confirm_windows=args.confirm_windows,
        min_interval_s=args.min_interval,
        tail_factor=args.tail_factor,
        min_gain=args.min_gain,
    )
    admin_key = resolve_admin_key(args.admin_key_file, args.admin_key)
    return settings_from(AdaptSettings, args, law=law, admin_key=admin_key, duration_s=args.duration, window_s=args.window)


def measured_gain(http_url: str, config: ModelConfig, seq_len: int) -> float:
    """Best rows/s over batch-1 rows/s, from a few single requests (the tuner's curve); the
    law's default for a model that takes texts, whose curve needs no token-id batches."""
    if input_kind(config) != TOKEN_IDS:
        return ControlSettings(p99_ms=1.0).batching_gain
    sizes = [b for b in (1, 4, 8) if b <= config.max_batch_size]
    points = measure_curve(http_url, config.name, encoder_batch(seq_len), sizes, repeats=2)
    return max(p.rows_per_s for p in points) / points[0].rows_per_s


def run_controller(settings: AdaptSettings) -> int:
    with triton_endpoints(settings.url, settings.grpc_url, explicit_control=True, admin_key=settings.admin_key) as endpoints:
        control = endpoints.client
        problem = control.model_control_problem()
        if problem and not settings.dry_run:
            log.error("%s", problem)
            return 2
        if problem:
            log.warning("dry run: %s", problem)
        base = control.config(settings.model)
        if not base.HasField("dynamic_batching"):
            log.error("%s has no dynamic_batching section; there is no delay to adapt", settings.model)
            return 2
        gain = settings.batching_gain
        if gain is None:
            gain = measured_gain(endpoints.http_url, base, settings.seq_len)
            log.info("batching gain of %s at %d tokens: %.2fx", settings.model, settings.seq_len, gain)
        law = replace(settings.law, batching_gain=gain, max_batch_size=base.max_batch_size)
        delay = base.dynamic_batching.max_queue_delay_microseconds
        live = LiveController(control, settings.model, base, Controller(law, delay), settings.window_s, settings.dry_run)
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set()) if threading.current_thread() is threading.main_thread() else None
        log.info(
            "adapting %s (delay now %d us) to p99 <= %g ms%s; windows of %g s",
            settings.model,
            delay,
            settings.law.p99_ms,
            " (dry run)" if settings.dry_run else "",
            settings.window_s,
        )
        try:
            live.run(stop, settings.duration_s)
        except KeyboardInterrupt:
            stop.set()
            log.info("stopped")
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
            write_decisions(settings.decisions_json, live, delay)
        print(summary_line(live, delay), flush=True)
        return 1 if any(not r.ok for r in live.reloads) else 0


def summary_line(live: LiveController, start_delay_us: int) -> str:
    """What happened to the server's delay; a dry run changed nothing, so it says so."""
    changes = [d for d in live.decisions if d.changed]
    failed = [r for r in live.reloads if not r.ok]
    if live.dry_run:
        would = f"; the law would have ended at {live.controller.delay_us} us" if changes else ""
        return (
            f"dry run: {len(live.decisions)} windows, {len(changes)} change(s) proposed, none applied; "
            f"delay unchanged at {start_delay_us} us{would}"
        )
    return (
        f"{len(live.decisions)} windows, {len(changes)} change(s), {len(failed)} failed reload(s); delay now {live.controller.delay_us} us"
    )


def write_decisions(path: Path | None, live: LiveController, start_delay_us: int) -> None:
    """`final_delay_us` is the server's delay at the end (a dry run leaves it where it was);
    `law_final_delay_us` is where the law ended, applied or not."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    final = start_delay_us if live.dry_run else live.controller.delay_us
    document = {
        "decisions": [d.to_dict() for d in live.decisions],
        "reloads": [r.to_dict() for r in live.reloads],
        "final_delay_us": final,
        "law_final_delay_us": live.controller.delay_us,
        "dry_run": live.dry_run,
    }
    path.write_text(json.dumps(document, indent=1))


def run(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "--model=llm" in argv or any(a == "--model" and b == "llm" for a, b in itertools.pairwise(argv)):
        from tools.adapt.llm.cli import run as run_llm  # the LLM's token budget and max-wait: tools/adapt/llm/

        return run_llm(argv)
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(args)
    return run_reporting_errors(lambda: run_controller(settings_from_args(args)), log)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
