"""`python -m tools.simulate llm ...`: the step-level simulator of the `llm` model.

  calibrate  time the engine's steps on designed shapes (in this process) -> step cost JSON
  predict    simulate one config under one load level: TTFT, TPOT, ITL, tokens/s, goodput
  validate   predict and measure configs x levels on a real Triton; median errors per figure

Examples:
  python -m tools.simulate llm calibrate --out build/simulate/llm-step-cost.json
  python -m tools.simulate llm predict --cost-model build/simulate/llm-step-cost.json --concurrency 8
  python -m tools.simulate llm predict --cost-model build/simulate/llm-step-cost.json --rate 0.5 \\
      --set max_num_seqs=4,max_num_batched_tokens=128 --slo ttft=1,tpot=0.1 --json
  python -m tools.simulate llm validate --cost-model build/simulate/llm-step-cost.json \\
      --cases "max_num_seqs=16;max_num_seqs=4,max_num_batched_tokens=128" --concurrency 4 --rates 0.5 \\
      --json reports/simulate/llm-validation.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from pathlib import Path

from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.load.llm.figures import Slo
from tools.load.llm.workload import LengthRange
from tools.load.schedules import ClosedLoop, Poisson
from tools.paths import REPO_ROOT
from tools.simulate.llm.engine_sim import Overheads
from tools.simulate.llm.predict import LevelPlan, LlmPrediction, predict_level
from tools.simulate.llm.setup import DEFAULT_CHECKPOINT, DEFAULT_CONFIG, drawn_shapes, engine_shape, parse_overrides, read_knobs
from tools.simulate.llm.step_cost import StepCostModel

log = logging.getLogger("simulate.llm")

DEFAULT_COST_MODEL = REPO_ROOT / "build" / "simulate" / "llm-step-cost.json"


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("workload and level (as tools.llmbench)")
    group.add_argument("--prompt-lengths", type=LengthRange.parse, default=LengthRange(32, 512), help="LOW-HIGH tokens (default 32-512)")
    group.add_argument("--output-lengths", type=LengthRange.parse, default=LengthRange(16, 128), help="LOW-HIGH tokens (default 16-128)")
    group.add_argument("--requests", type=int, default=500, help="size of the seeded workload (default %(default)s)")
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--seconds", type=float, default=60.0, help="sending time of a level (default %(default)s)")
    group.add_argument("--drain", type=float, default=30.0, help="seconds a level may drain (default %(default)s)")
    group.add_argument("--slo", type=Slo.parse, default=Slo(), help="ttft=SECONDS,tpot=SECONDS (default ttft=1,tpot=0.1)")
    group.add_argument("--request-overhead-ms", type=float, default=0.0, help="round trip outside the engine per request (default 0)")
    group.add_argument("--token-overhead-ms", type=float, default=0.0, help="engine-thread work per streamed token (default 0)")


def overheads_of(args: argparse.Namespace) -> Overheads:
    return Overheads(request_s=args.request_overhead_ms / 1000.0, per_token_s=args.token_overhead_ms / 1000.0)


def level_of(args: argparse.Namespace) -> LevelPlan:
    return LevelPlan(seconds=args.seconds, drain_s=args.drain, seed=args.seed)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.simulate llm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)

    c = commands.add_parser("calibrate", help="time engine steps on designed shapes and fit the step cost model")
    c.add_argument("--checkpoint", type=Path, default=DEFAULT_CHECKPOINT, help="exported checkpoint (make export)")
    c.add_argument("--dtype", default="float32")
    c.add_argument("--threads", type=int, default=0, help="torch threads (default 0: torch's default, as the server)")
    c.add_argument("--quick", action="store_true", help="fewer shapes and rounds (about a minute)")
    c.add_argument(
        "--statistic", choices=("median", "min"), default="median", help="a shape's time over its rounds (default median: the typical step)"
    )
    c.add_argument("--out", type=Path, default=DEFAULT_COST_MODEL)
    add_verbosity_flags(c)

    p = commands.add_parser("predict", help="simulate one config under one load level")
    p.add_argument("--cost-model", type=Path, default=DEFAULT_COST_MODEL)
    p.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="llm config.pbtxt (default: committed)")
    p.add_argument("--set", dest="overrides", type=parse_overrides, default={}, help="knob overrides, e.g. max_num_seqs=8,policy=fcfs")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=int, help="closed-loop streams")
    load.add_argument("--rate", type=float, help="Poisson requests/s")
    add_workload_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_verbosity_flags(p)

    v = commands.add_parser("validate", help="predict and measure configs x levels on a real Triton")
    v.add_argument("--cost-model", type=Path, default=DEFAULT_COST_MODEL)
    v.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="base llm config.pbtxt (default: committed)")
    v.add_argument("--cases", default="max_num_seqs=16;max_num_seqs=4,max_num_batched_tokens=128", help="';'-separated override sets")
    v.add_argument("--concurrency", default="4", help="closed-loop levels, comma list ('' for none)")
    v.add_argument("--rates", default="0.5", help="Poisson levels in req/s, comma list ('' for none)")
    v.add_argument("--url", default=None, help="a running Triton in explicit model-control mode (default: start a local one)")
    v.add_argument("--grpc-url", default=None)
    v.add_argument("--admin-key", default=None)
    v.add_argument("--tokenizer", type=Path, default=DEFAULT_CHECKPOINT / "tokenizer.json")
    v.add_argument("--json", type=Path, default=None, help="write the rows and the summary here")
    v.add_argument(
        "--live-scale",
        action="store_true",
        help="the first case is an anchor: scale the cost model to its TPOT p50, judge the others (held out) both ways",
    )
    add_workload_arguments(v)
    add_verbosity_flags(v)
    return parser


def prediction_table(prediction: LlmPrediction, title: str) -> str:
    f = prediction.figures
    lines = [
        title,
        f"  output tokens/s {f.output_tokens_per_s:.1f}, completed {f.completed}/{f.requests} in {f.duration_s:.1f} s,"
        f" goodput {f.goodput_rps:.3f} req/s",
        f"  TTFT p50 {f.ttft_p50_ms} ms, p99 {f.ttft_p99_ms} ms; TPOT p50 {f.tpot_p50_ms} ms, p99 {f.tpot_p99_ms} ms;"
        f" ITL p99 {f.itl_p99_ms} ms",
        f"  {prediction.steps} steps, {prediction.mean_running:.1f} sequences per step, {prediction.preemptions} preemptions, "
        f"peak KV blocks {prediction.peak_kv_blocks}",
    ]
    return "\n".join(lines)


def run_calibrate(args: argparse.Namespace) -> int:
    from tools.simulate.llm.calibrate import Design, measure

    started = time.perf_counter()
    design = dataclasses.replace(Design.quick() if args.quick else Design(), statistic=args.statistic)
    model = measure(args.checkpoint, design, args.dtype, args.threads)
    model.save(args.out)
    print(
        f"{model.describe()}\n  fit over {model.fit['samples']} shapes: median error {model.fit['median_rel_error']:.1%}, "
        f"max {model.fit['max_rel_error']:.1%}; {model.machine.get('model')}; {time.perf_counter() - started:.0f} s -> {args.out}"
    )
    return 0


def run_predict(args: argparse.Namespace) -> int:
    cost = StepCostModel.load(args.cost_model)
    config, engine = read_knobs(args.config, args.overrides)
    schedule = ClosedLoop(args.concurrency) if args.concurrency else Poisson(args.rate)
    shapes = drawn_shapes(args.prompt_lengths, args.output_lengths, args.requests, args.seed)
    started = time.perf_counter()
    prediction = predict_level(cost, config, engine_shape(engine), shapes, schedule, level_of(args), args.slo, overheads_of(args))
    if args.json:
        print(json.dumps({**prediction.to_dict(), "config": vars(config), "wall_s": round(time.perf_counter() - started, 3)}))
    else:
        print(prediction_table(prediction, f"{args.config} {args.overrides or ''} under {prediction.label}"))
    return 0


def _levels(concurrency: str, rates: str) -> list:
    closed = [ClosedLoop(int(c)) for c in concurrency.split(",") if c.strip()]
    return closed + [Poisson(float(r)) for r in rates.split(",") if r.strip()]


def run_validate(args: argparse.Namespace) -> int:
    from llm.serving.knobs import parameters_from_pbtxt
    from tools.llmbench.__main__ import load_tokenizer
    from tools.load.llm.workload import Workload
    from tools.simulate.llm.live import live_server
    from tools.simulate.llm.validate import ValidationCase, validate

    cost = StepCostModel.load(args.cost_model)
    base = parameters_from_pbtxt(args.config)
    _, engine = read_knobs(args.config)
    cases = [
        ValidationCase(parse_overrides(text), schedule)
        for text in args.cases.split(";")
        for schedule in _levels(args.concurrency, args.rates)
    ]
    requests = Workload(args.prompt_lengths, args.output_lengths, args.requests, args.seed).build(load_tokenizer(args.tokenizer))
    with live_server(args.url, args.grpc_url, args.admin_key) as server:
        result = validate(
            server, cost, base, engine_shape(engine), cases, requests, level_of(args), args.slo, overheads_of(args), args.live_scale
        )
    print(validation_table(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps({"cost_model": cost.to_dict() | {"fit": {k: v for k, v in cost.fit.items() if k != "steps"}}, **result}, indent=1)
        )
    return 0


def _figure(figures: dict, name: str) -> str:
    value = figures.get(name)
    return "-" if value is None else f"{value:g}"


def validation_table(result: dict) -> str:
    lines = [f"{'case':58s} {'role':8s} {'tok/s sim/live':>16s} {'TTFT p99 ms':>18s} {'TPOT p50 ms':>16s}"]
    for row in result["rows"]:
        p, m = row["predicted"], row["measured"]
        cells = [f"{_figure(p, n)}/{_figure(m, n)}" for n in ("output_tokens_per_s", "ttft_p99_ms", "tpot_p50_ms")]
        lines.append(f"{row['case'][:58]:58s} {row.get('role', ''):8s} {cells[0]:>16s} {cells[1]:>18s} {cells[2]:>16s}")
    scale = result.get("live_scale")
    if scale:
        lines.append(
            f"live scale {scale['factor']:.3f} from the anchor {scale['anchor']} (TPOT p50 measured {scale['measured_tpot_p50_ms']:g} ms,"
            f" predicted {scale['predicted_tpot_p50_ms']:g} ms unscaled); the medians count the held-out cases only"
        )
    unscaled = result.get("summary_as_calibrated", {})
    for name, item in result["summary"].items():
        median = "-" if item["median_abs_error"] is None else f"{item['median_abs_error']:.0%}"
        line = f"median |error| of {name}: {median} (goal <= {item['goal']:.0%}: {'met' if item['met'] else 'not met'})"
        if unscaled.get(name, {}).get("median_abs_error") is not None:
            line += f"; {unscaled[name]['median_abs_error']:.0%} with the model as calibrated"
        lines.append(line)
    return "\n".join(lines)


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    handlers = {"calibrate": run_calibrate, "predict": run_predict, "validate": run_validate}
    return run_reporting_errors(lambda: handlers[args.command](args), log)
