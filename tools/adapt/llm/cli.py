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
import os
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from tools.adapt.llm.control import LlmController
from tools.adapt.llm.settings import BenchSettings, LiveSettings
from tools.cli.arguments import parse_settings
from tools.cli.logsetup import add_verbosity_flags
from tools.load.llm.figures import Slo
from tools.load.llm.workload import LengthRange

log = logging.getLogger("adapt.llm")


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _law_arguments(parser: argparse.ArgumentParser) -> None:
    law = parser.add_argument_group("control law (tools/adapt/llm/control.py)")
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


def _key(path: Path | None) -> str:
    key = path.read_text().strip() if path else os.environ.get("LLM_CONTROL_KEY", "")
    if not key:
        raise SystemExit("a control key is needed: --key-file or $LLM_CONTROL_KEY (the server's LLM_CONTROL_KEY)")
    return key


def run_live(settings: LiveSettings) -> int:
    from tools.adapt.llm.live import ControlChannel, MetricWindows, control_loop

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
    from tools.adapt.llm.bench import run_bench

    return run_bench(settings)


if __name__ == "__main__":
    sys.exit(run())
