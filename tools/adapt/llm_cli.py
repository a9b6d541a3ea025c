"""`python -m tools.adapt --model llm {live,bench}`: the LLM's token budget and max-wait moved
live against a TTFT/TPOT p99 SLO (docs/adapt.md, "The LLM"). The simulated evaluation sits
in the simulator's layer: `python -m tools.simulate.llm.adapt`.

  live   control a running server through the live control request (needs its key)
  bench  start a local Triton with `llm`, replay one bursty gamma trace against a few static
         settings (set through the same channel) and the controller

Examples:
  python -m tools.adapt --model llm live --grpc-url localhost:8001 --metrics-url localhost:8002 --key-file KEY --slo ttft=10,tpot=0.6
  python -m tools.adapt --model llm bench --rate 0.3 --seconds 120 --json reports/adapt-llm/live.json
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from tools.adapt.llm_control import LlmController, LlmLaw, LlmSetting
from tools.cli.arguments import parse_settings
from tools.cli.logsetup import add_verbosity_flags
from tools.load.llm.figures import Slo
from tools.load.llm.workload import LengthRange

log = logging.getLogger("adapt.llm")


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _law_arguments(parser: argparse.ArgumentParser) -> None:
    law = parser.add_argument_group("control law (tools/adapt/llm_control.py)")
    law.add_argument(
        "--slo", type=Slo.parse, default=Slo(ttft_s=10.0, tpot_s=0.6), help="ttft=SECONDS,tpot=SECONDS, p99s (default 10, 0.6)"
    )
    law.add_argument("--default-budget", type=int, default=512, help="where the controller starts and drifts back to (the config's)")
    law.add_argument("--min-budget", type=int, default=64)
    law.add_argument("--max-budget", type=int, default=1024)
    law.add_argument("--window", type=float, default=10.0, help="seconds per observation window (default %(default)s)")
    law.add_argument("--min-samples", type=int, default=2, help="TTFT samples a window needs (default %(default)s)")
    law.add_argument("--confirm-windows", type=int, default=2)
    law.add_argument("--min-interval", type=float, default=20.0, help="seconds between changes (default %(default)s)")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.adapt --model llm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--model", choices=["llm"], default="llm")
    add_verbosity_flags(parser)
    commands = parser.add_subparsers(dest="command", required=True)
    live = commands.add_parser("live", help="control a running server")
    live.add_argument("--grpc-url", required=True)
    live.add_argument("--metrics-url", required=True, help="host:port of Triton's metrics endpoint")
    live.add_argument("--key-file", type=Path, default=None, help="the control key (default: $LLM_CONTROL_KEY)")
    live.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    live.add_argument("--dry-run", action="store_true", help="decide and log; change nothing")
    _law_arguments(live)
    bench = commands.add_parser("bench", help="static settings vs the controller on a local Triton")
    trace = bench.add_argument_group("trace")
    trace.add_argument("--rate", type=float, default=0.3, help="mean arrivals per second (default %(default)s)")
    trace.add_argument("--burstiness", type=float, default=0.25, help="gamma shape; < 1 is burstier than Poisson (default %(default)s)")
    trace.add_argument("--prompt-lengths", type=LengthRange.parse, default=LengthRange(32, 512))
    trace.add_argument("--output-lengths", type=LengthRange.parse, default=LengthRange(16, 64))
    trace.add_argument("--requests", type=int, default=500)
    trace.add_argument("--seconds", type=float, default=120.0)
    trace.add_argument("--deadline", type=float, default=180.0, help="a request still streaming this long after its send is cut")
    trace.add_argument("--seed", type=int, default=0)
    trace.add_argument("--budgets", type=_ints, default=[64, 256, 1024], help="the static settings' budgets")
    trace.add_argument("--json", type=Path, default=None, help="write the rows and decisions here")
    _law_arguments(bench)
    return parser


@dataclass(frozen=True)
class ControlSettings:
    """The control law's options, shared by `live` and `bench`."""

    slo: Slo
    law: LlmLaw
    window_s: float  # seconds per observation window

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> ControlSettings:
        """ValueError names the option it refuses."""
        if not 0 < args.window < math.inf:
            raise ValueError(f"--window must be a number of seconds above 0, got {args.window:g}")
        if not 0 < args.min_budget <= args.default_budget <= args.max_budget:
            raise ValueError(
                "--min-budget, --default-budget and --max-budget must satisfy 0 < min <= default <= max, got "
                f"{args.min_budget}, {args.default_budget}, {args.max_budget}"
            )
        if args.confirm_windows < 1:
            raise ValueError(f"--confirm-windows must be at least 1, got {args.confirm_windows}")
        law = LlmLaw(
            args.slo.ttft_s,
            args.slo.tpot_s,
            default=LlmSetting(args.default_budget, 0.0),
            min_budget=args.min_budget,
            max_budget=args.max_budget,
            min_samples=args.min_samples,
            confirm_windows=args.confirm_windows,
            min_interval_s=args.min_interval,
        )
        return cls(args.slo, law, args.window)


@dataclass(frozen=True)
class LiveSettings:
    """`live`: a running server to control."""

    grpc_url: str
    metrics_url: str  # host:port of Triton's metrics endpoint
    key_file: Path | None  # None: $LLM_CONTROL_KEY
    duration_s: float | None  # None (or 0): until Ctrl-C
    dry_run: bool
    control: ControlSettings

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> LiveSettings:
        return cls(args.grpc_url, args.metrics_url, args.key_file, args.duration, args.dry_run, ControlSettings.from_cli_args(args))


@dataclass(frozen=True)
class BenchSettings:
    """`bench`: the trace the static settings and the controller are replayed on."""

    rate: float  # mean arrivals per second
    burstiness: float  # gamma shape
    prompt_lengths: LengthRange
    output_lengths: LengthRange
    requests: int
    seconds: float
    deadline_s: float  # a request still streaming this long after its send is cut
    seed: int
    budgets: list[int]  # the static settings' budgets
    json: Path | None
    control: ControlSettings
    command_line: dict  # every option as given, recorded in the JSON report

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> BenchSettings:
        """ValueError names the option it refuses."""
        for option, value in (("--rate", args.rate), ("--burstiness", args.burstiness), ("--seconds", args.seconds)):
            if not 0 < value < math.inf:
                raise ValueError(f"{option} must be a number above 0, got {value:g}")
        if args.requests < 1:
            raise ValueError(f"--requests must be at least 1, got {args.requests}")
        command_line = {k: v if isinstance(v, int | float | list) else str(v) for k, v in vars(args).items()}
        return cls(
            args.rate,
            args.burstiness,
            args.prompt_lengths,
            args.output_lengths,
            args.requests,
            args.seconds,
            args.deadline,
            args.seed,
            args.budgets,
            args.json,
            ControlSettings.from_cli_args(args),
            command_line,
        )


def _key(path: Path | None) -> str:
    key = path.read_text().strip() if path else os.environ.get("LLM_CONTROL_KEY", "")
    if not key:
        raise SystemExit("a control key is needed: --key-file or $LLM_CONTROL_KEY (the server's LLM_CONTROL_KEY)")
    return key


def run_live(settings: LiveSettings) -> int:
    from tools.adapt.llm_live import ControlChannel, MetricWindows, control_loop

    channel = ControlChannel(settings.grpc_url, _key(settings.key_file))
    stop = threading.Event()
    if settings.duration_s:
        threading.Timer(settings.duration_s, stop.set).start()
    try:
        law = settings.control.law
        if not settings.dry_run:
            log.info("starting from %s: the server answered %s", law.default, channel.set(**asdict(law.default)))
        windows = MetricWindows(f"http://{settings.metrics_url}/metrics")
        decisions = control_loop(LlmController(law), channel, windows, settings.control.window_s, stop, settings.dry_run)
    except KeyboardInterrupt:
        return 0
    finally:
        stop.set()
        channel.close()
    log.info("%d windows, %d change(s)", len(decisions), sum(d.changed for d in decisions))
    return 0


def run(argv: list[str] | None = None) -> int:
    settings = parse_settings(
        build_parser(), argv, lambda args: (LiveSettings if args.command == "live" else BenchSettings).from_cli_args(args)
    )
    if isinstance(settings, LiveSettings):
        return run_live(settings)
    from tools.adapt.llm_bench import run_bench

    return run_bench(settings)


if __name__ == "__main__":
    sys.exit(run())
