"""`python -m tools.adapt --model llm {simulate,live,bench}`: the LLM's token budget and max-wait
moved live against a TTFT/TPOT p99 SLO (docs/adapt.md, "The LLM").

  simulate  the controller vs every static setting of the space, in the step-level simulator
            (the real scheduler, the shipped step cost model), one seeded bursty gamma trace
  live      control a running server through the live control request (needs its key)
  bench     start a local Triton with `llm`, replay one bursty gamma trace against a few
            static settings (set through the same channel) and the controller

Examples:
  python -m tools.adapt --model llm simulate --rate 0.25 --slo ttft_p99=10s,tpot_p99=600ms
  python -m tools.adapt --model llm live --grpc-url localhost:8001 --metrics-url localhost:8002 --key-file KEY --slo ...
  python -m tools.adapt --model llm bench --rate 0.5 --seconds 90 --out reports/adapt-llm
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import threading
from dataclasses import asdict
from pathlib import Path

from tools.adapt.llm_control import LlmController, LlmLaw, LlmSetting
from tools.adapt.llm_simulate import SimRow, SimSetup, run_controlled, run_static, space
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.llmbench.figures import LevelFigures
from tools.llmbench.workload import LengthRange
from tools.load.schedules import Gamma
from tools.paths import REPO_ROOT
from tools.simulate.llm.predict import LevelPlan
from tools.simulate.llm.setup import drawn_shapes, engine_shape, parse_overrides, read_knobs
from tools.simulate.llm.slo import LlmSlo
from tools.simulate.llm.step_cost import StepCostModel

log = logging.getLogger("adapt.llm")

SHIPPED_COST_MODEL = REPO_ROOT / "tools" / "simulate" / "cost_models" / "llm-epyc-2core-1thread.json"


def _ints(text: str) -> list[int]:
    return [int(v) for v in text.split(",") if v.strip()]


def _floats(text: str) -> list[float]:
    return [float(v) for v in text.split(",") if v.strip()]


def _law_arguments(parser: argparse.ArgumentParser) -> None:
    law = parser.add_argument_group("control law (tools/adapt/llm_control.py)")
    defaults = LlmLaw(1.0, 0.1)
    law.add_argument("--slo", type=LlmSlo.parse, default=LlmSlo(10.0, 0.6), help="ttft_p99=10s,tpot_p99=600ms (default)")
    law.add_argument("--default-budget", type=int, default=512, help="the budget to drift back to (the config's)")
    law.add_argument("--min-budget", type=int, default=64)
    law.add_argument("--max-budget", type=int, default=1024)
    law.add_argument("--window", type=float, default=20.0, help="seconds per observation window (default %(default)s)")
    law.add_argument("--min-samples", type=int, default=2, help="TTFT samples a window needs (default %(default)s)")
    law.add_argument("--confirm-windows", type=int, default=defaults.confirm_windows)
    law.add_argument("--min-interval", type=float, default=30.0, help="seconds between changes (default %(default)s)")


def _workload_arguments(parser: argparse.ArgumentParser, seconds: float, drain: float) -> None:
    group = parser.add_argument_group("trace")
    group.add_argument("--rate", type=float, default=0.25, help="mean arrivals per second (default %(default)s)")
    group.add_argument("--burstiness", type=float, default=0.25, help="gamma shape; < 1 is burstier than Poisson (default %(default)s)")
    group.add_argument("--prompt-lengths", type=LengthRange.parse, default=LengthRange(32, 512))
    group.add_argument("--output-lengths", type=LengthRange.parse, default=LengthRange(16, 128))
    group.add_argument("--requests", type=int, default=500)
    group.add_argument("--seconds", type=float, default=seconds)
    group.add_argument("--drain", type=float, default=drain)
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--budgets", type=_ints, default=[64, 128, 256, 512, 1024], help="the static settings' budgets")
    group.add_argument("--waits", type=_floats, default=[0.0], help="the static settings' max-wait values in ms")
    group.add_argument("--json", type=Path, default=None, help="write the rows and decisions here")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.adapt --model llm", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--model", choices=["llm"], default="llm")
    commands = parser.add_subparsers(dest="command", required=True)
    sim = commands.add_parser("simulate", help="controller vs static settings in the step-level simulator")
    sim.add_argument("--cost-model", type=Path, default=SHIPPED_COST_MODEL)
    sim.add_argument("--overrides", type=parse_overrides, default={"enable_prefix_caching": "false"},
                     help="knobs of the simulated config (default: prefix caching off, see docs/adapt.md)")  # fmt: skip
    _workload_arguments(sim, 1200.0, 300.0)
    _law_arguments(sim)
    live = commands.add_parser("live", help="control a running server")
    live.add_argument("--grpc-url", required=True)
    live.add_argument("--metrics-url", required=True, help="host:port of Triton's metrics endpoint")
    live.add_argument("--key-file", type=Path, default=None, help="the control key (default: $LLM_CONTROL_KEY)")
    live.add_argument("--duration", type=float, default=None, help="seconds to run (default: until Ctrl-C)")
    live.add_argument("--dry-run", action="store_true")
    _law_arguments(live)
    bench = commands.add_parser("bench", help="static settings vs the controller on a local Triton")
    _workload_arguments(bench, 90.0, 60.0)
    _law_arguments(bench)
    add_verbosity_flags(parser)
    return parser


def law_of(args: argparse.Namespace) -> LlmLaw:
    return LlmLaw(
        args.slo.ttft_p99_s,
        args.slo.tpot_p99_s,
        default=LlmSetting(args.default_budget, 0.0),
        min_budget=args.min_budget,
        max_budget=args.max_budget,
        min_samples=args.min_samples,
        confirm_windows=args.confirm_windows,
        min_interval_s=args.min_interval,
    )


def table(rows: list[dict], title: str) -> str:
    lines = [f"### {title}", "", "| config | goodput req/s | within SLO | TTFT p99 ms | TPOT p99 ms | tokens/s | changes | final budget |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for row in rows:
        f: dict = row["figures"]
        share = "-" if f["good_share"] is None else f"{100 * f['good_share']:.1f}%"
        final = row["final"]["max_num_batched_tokens"] if row.get("final") else "-"
        lines.append(
            f"| {row['config']} | {f['goodput_rps']:.3f} | {share} | {f['ttft_p99_ms'] or 0:.0f} | {f['tpot_p99_ms'] or 0:.0f}"
            f" | {f['output_tokens_per_s']:.1f} | {row.get('changes', 0)} | {final} |"
        )
    return "\n".join(lines)


def _row(label: str, figures: LevelFigures, changes: int = 0, final: LlmSetting | None = None) -> dict:
    return {"config": label, "figures": figures.as_dict(), "changes": changes, "final": None if final is None else asdict(final)}


def _sim_row(row: SimRow) -> dict:
    return _row(row.label, row.figures, row.changes, row.final)


def run_simulate(args: argparse.Namespace) -> int:
    scheduler, engine = read_knobs(overrides=args.overrides)
    shapes = drawn_shapes(args.prompt_lengths, args.output_lengths, args.requests, args.seed)
    setup = SimSetup(StepCostModel.load(args.cost_model), scheduler, engine_shape(engine), shapes, Gamma(args.rate, args.burstiness),
                     LevelPlan(args.seconds, args.drain, args.seed), args.slo)  # fmt: skip
    rows = [_sim_row(run_static(setup, setting)) for setting in space(args.budgets, args.waits)]
    controlled, decisions = run_controlled(setup, law_of(args), args.window)
    rows.append(_sim_row(controlled))
    title = f"simulated: gamma {args.rate:g} req/s, burstiness {args.burstiness:g}, {args.seconds:g} s; SLO {args.slo.describe()}"
    print(table(rows, title))
    _write(args.json, {"rows": rows, "decisions": [d.to_dict() for d in decisions], "args": _args_dict(args)})
    return 0


def _args_dict(args: argparse.Namespace) -> dict:
    return {k: (str(v) if isinstance(v, Path | LengthRange | LlmSlo) else v) for k, v in vars(args).items() if k != "func"}


def _write(path: Path | None, document: dict) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=1, default=str) + "\n")


def _key(path: Path | None) -> str:
    key = path.read_text().strip() if path else os.environ.get("LLM_CONTROL_KEY", "")
    if not key:
        raise SystemExit("a control key is needed: --key-file or $LLM_CONTROL_KEY (the server's LLM_CONTROL_KEY)")
    return key


def run_live(args: argparse.Namespace) -> int:
    from tools.adapt.llm_live import ControlChannel, MetricWindows, control_loop

    channel = ControlChannel(args.grpc_url, _key(args.key_file))
    stop = threading.Event()
    if args.duration:
        threading.Timer(args.duration, stop.set).start()
    try:
        law = law_of(args)
        if not args.dry_run:
            log.info("starting from %s: %s", law.default, channel.set(**asdict(law.default)))
        windows = MetricWindows(f"http://{args.metrics_url}/metrics")
        decisions = control_loop(LlmController(law), channel, windows, args.window, stop, args.dry_run)
    except KeyboardInterrupt:
        return 0
    finally:
        channel.close()
    log.info("%d windows, %d change(s)", len(decisions), sum(d.changed for d in decisions))
    return 0


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    if args.command == "simulate":
        return run_simulate(args)
    if args.command == "live":
        return run_live(args)
    from tools.adapt.llm_bench import run_bench

    return run_bench(args, law_of(args))


if __name__ == "__main__":
    sys.exit(run())
