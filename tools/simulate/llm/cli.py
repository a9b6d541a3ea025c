"""`python -m tools.simulate llm ...`: the step-level simulator of the `llm` model.

  calibrate  time the engine's steps on designed shapes (in this process; --engine vllm: vLLM's
             own engine in .venv-vllm, every step recorded) -> step cost JSON
  predict    simulate one config under one load level: TTFT, TPOT, ITL, tokens/s, goodput
  validate   predict and measure configs x levels on a real Triton; median errors per figure

Each command works on the native engine (config.pbtxt) or, with --engine vllm or a --config
whose parameters.engine is vllm, on vLLM's (configs/vllm.pbtxt, its knobs mapped onto our
scheduler: tools/simulate/llm/vllm_setup.py); the cost model must come from the same engine.

Examples:
  python -m tools.simulate llm calibrate --out build/simulate/llm-step-cost.json
  python -m tools.simulate llm calibrate --lora-adapters 8 --out build/simulate/llm-step-cost-lora.json
  python -m tools.simulate llm calibrate --engine vllm --quick        # -> build/simulate/llm-step-cost-vllm.json
  python -m tools.simulate llm validate --engine vllm --cases "max_num_seqs=16;max_num_seqs=4" --live-scale
  python -m tools.simulate llm predict --cost-model build/simulate/llm-step-cost.json --concurrency 8
  python -m tools.simulate llm predict --concurrency 16 --adapters 16 --popularity zipf --set max_loras=4
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
from tools.simulate.llm.engine_sim import Overheads
from tools.simulate.llm.predict import LevelPlan, LlmPrediction, predict_level
from tools.simulate.llm.setup import (
    DEFAULT_CHECKPOINT,
    ENGINE_COST_MODELS,
    ENGINES,
    AdapterMix,
    drawn_shapes,
    parse_overrides,
    read_knobs,
    resolve_engine,
    simulation_of,
)
from tools.simulate.llm.step_cost import StepCostModel

log = logging.getLogger("simulate.llm")

DEFAULT_COST_MODEL = ENGINE_COST_MODELS["native"]


def add_engine_arguments(parser: argparse.ArgumentParser, config_help: str) -> None:
    parser.add_argument(
        "--engine", choices=ENGINES, default=None, help="native or vllm (default: --config's parameters.engine, else native)"
    )
    parser.add_argument("--config", type=Path, default=None, help=config_help)
    parser.add_argument(
        "--cost-model", type=Path, default=None, help="step cost JSON (default: build/simulate/llm-step-cost[-vllm].json, per engine)"
    )


def load_cost_model(path: Path | None, engine: str) -> StepCostModel:
    """The engine's step cost model (its default file when `path` is None); refused when it was
    measured on the other engine: its milliseconds describe another program."""
    path = path or ENGINE_COST_MODELS[engine]
    if not path.is_file():
        flag = " --engine vllm" if engine == "vllm" else ""
        raise FileNotFoundError(f"no step cost model at {path}; run `python -m tools.simulate llm calibrate{flag} --out {path}`")
    cost = StepCostModel.load(path)
    if cost.engine_kind != engine:
        raise ValueError(f"{path} was measured on the {cost.engine_kind} engine, not {engine}: calibrate on {engine}")
    return cost


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("workload and level (as tools.bench.llm)")
    group.add_argument("--prompt-lengths", type=LengthRange.parse, default=LengthRange(32, 512), help="LOW-HIGH tokens (default 32-512)")
    group.add_argument("--output-lengths", type=LengthRange.parse, default=LengthRange(16, 128), help="LOW-HIGH tokens (default 16-128)")
    group.add_argument("--requests", type=int, default=500, help="size of the seeded workload (default %(default)s)")
    group.add_argument("--seed", type=int, default=0)
    group.add_argument("--seconds", type=float, default=60.0, help="sending time of a level (default %(default)s)")
    group.add_argument("--drain", type=float, default=30.0, help="seconds a level may drain (default %(default)s)")
    group.add_argument("--slo", type=Slo.parse, default=Slo(), help="ttft=SECONDS,tpot=SECONDS (default ttft=1,tpot=0.1)")
    group.add_argument("--request-overhead-ms", type=float, default=0.0, help="round trip outside the engine per request (default 0)")
    group.add_argument("--token-overhead-ms", type=float, default=0.0, help="engine-thread work per streamed token (default 0)")


def add_adapter_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("LoRA adapters (as tools.bench.llm.lora asks for them)")
    group.add_argument("--adapters", type=int, default=0, help="requests name one of N adapters (default 0: the base model)")
    group.add_argument(
        "--popularity", choices=("uniform", "zipf"), default="uniform", help="how the requests pick their adapter (default uniform)"
    )


def adapter_mix_of(args: argparse.Namespace) -> AdapterMix:
    return AdapterMix(args.adapters, args.popularity)


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
    c.add_argument("--engine", choices=ENGINES, default=None, help="native (default) or vllm (.venv-vllm: make vllm-venv)")
    c.add_argument("--config", type=Path, default=None, help="the config whose knobs the engine runs (default: the engine's committed one)")
    c.add_argument("--checkpoint", type=Path, default=None, help="exported checkpoint (make export; vllm: its hf/ folder)")
    c.add_argument("--dtype", default=None, help="native: the engine's dtype, or auto (default: --config's; vLLM's comes from --config)")
    c.add_argument("--weights", default=None, help="native: the weight format, dense, int8 or int4 (default: --config's)")
    c.add_argument("--threads", type=int, default=None, help="native: torch threads (default 0: torch's default, as the server)")
    c.add_argument("--quick", action="store_true", help="fewer shapes and rounds (about a minute)")
    c.add_argument(
        "--lora-adapters",
        type=int,
        default=0,
        help="native: serve N random rank-8 adapters and time steps with 1..N of them too (default 0: no LoRA shapes)",
    )
    c.add_argument(
        "--statistic", choices=("median", "min"), default="median", help="a shape's time over its rounds (default median: the typical step)"
    )
    c.add_argument("--out", type=Path, default=None, help="default: build/simulate/llm-step-cost.json (vllm: llm-step-cost-vllm.json)")
    add_verbosity_flags(c)

    p = commands.add_parser("predict", help="simulate one config under one load level")
    add_engine_arguments(p, "llm config.pbtxt (default: the engine's committed one)")
    p.add_argument("--set", dest="overrides", default="", help="knob overrides, e.g. max_num_seqs=8,policy=fcfs")
    load = p.add_mutually_exclusive_group(required=True)
    load.add_argument("--concurrency", type=int, help="closed-loop streams")
    load.add_argument("--rate", type=float, help="Poisson requests/s")
    add_workload_arguments(p)
    add_adapter_arguments(p)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    add_verbosity_flags(p)

    v = commands.add_parser("validate", help="predict and measure configs x levels on a real Triton")
    add_engine_arguments(v, "base llm config.pbtxt (default: the engine's committed one)")
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
        f"peak KV blocks {prediction.peak_kv_blocks}"
        + (f", {prediction.mean_adapters:.1f} LoRA adapters per step" if prediction.mean_adapters else ""),
    ]
    return "\n".join(lines)


def calibration_text(model: StepCostModel, seconds: float, out: Path) -> str:
    fit = model.fit
    lines = [
        model.describe(),
        f"  fit over {fit['samples']} shapes: median error {fit['median_rel_error']:.1%}, max {fit['max_rel_error']:.1%};"
        f" {model.machine.get('model')}; {seconds:.0f} s -> {out}",
    ]
    if fit.get("median_rel_error_by_kind"):
        kinds = ", ".join(f"{kind} {error:.1%} ({fit['shapes_by_kind'][kind]})" for kind, error in fit["median_rel_error_by_kind"].items())
        lines.append(f"  median error by kind (shapes): {kinds}")
    check = fit.get("vllm_elapsed_check")
    if check:
        lines.append(
            f"  recorded steps against vLLM's own iteration details (elapsed_ms) over {check['steps']} steps: median ratio "
            f"{check['median_ratio']:.3f}, {check['median_extra_ms']:.1f} ms more (the scheduler's own work), compositions agree: "
            f"{'yes' if check['composition_agrees'] else 'no'}"
        )
    return "\n".join(lines)


def run_calibrate(args: argparse.Namespace) -> int:
    engine, config = resolve_engine(args.engine, args.config)
    out = args.out or ENGINE_COST_MODELS[engine]
    started = time.perf_counter()
    if engine == "vllm":
        from tools.simulate.llm.vllm_calibrate import VllmDesign, measure_vllm

        if args.dtype is not None or args.threads is not None or args.weights is not None or args.lora_adapters:
            raise ValueError("--dtype, --weights, --threads and --lora-adapters are the native engine's; vLLM's come from --config's knobs")
        design = dataclasses.replace(VllmDesign.quick() if args.quick else VllmDesign(), statistic=args.statistic)
        model = measure_vllm(config, design, args.checkpoint)
    else:
        from tools.simulate.llm.calibrate import Design, measure

        if args.lora_adapters < 0:
            raise ValueError(f"--lora-adapters takes a count >= 0, got {args.lora_adapters}")
        design = Design.quick() if args.quick else Design()
        design = dataclasses.replace(design, statistic=args.statistic, lora_adapters=args.lora_adapters)
        _, engine_config = read_knobs(config)
        dtype, weights = args.dtype or engine_config.dtype, args.weights or engine_config.weights
        model = measure(args.checkpoint or DEFAULT_CHECKPOINT, design, dtype, args.threads or 0, weights)
    model.save(out)
    print(calibration_text(model, time.perf_counter() - started, out))
    return 0


def run_predict(args: argparse.Namespace) -> int:
    from llm.serving.knobs import parameters_from_pbtxt

    engine_name, config_path = resolve_engine(args.engine, args.config)
    cost = load_cost_model(args.cost_model, engine_name)
    overrides = parse_overrides(args.overrides, engine_name)
    config, engine = simulation_of({**parameters_from_pbtxt(config_path), **overrides})
    schedule = ClosedLoop(args.concurrency) if args.concurrency else Poisson(args.rate)
    shapes = adapter_mix_of(args).apply(drawn_shapes(args.prompt_lengths, args.output_lengths, args.requests, args.seed), args.seed)
    started = time.perf_counter()
    prediction = predict_level(cost, config, engine, shapes, schedule, level_of(args), args.slo, overheads_of(args))
    if args.json:
        print(
            json.dumps(
                {**prediction.to_dict(), "engine": engine_name, "config": vars(config), "wall_s": round(time.perf_counter() - started, 3)}
            )
        )
    else:
        print(prediction_table(prediction, f"{config_path} ({engine_name}) {overrides or ''} under {prediction.label}"))
    return 0


def _levels(concurrency: str, rates: str) -> list:
    closed = [ClosedLoop(int(c)) for c in concurrency.split(",") if c.strip()]
    return closed + [Poisson(float(r)) for r in rates.split(",") if r.strip()]


def run_validate(args: argparse.Namespace) -> int:
    from llm.serving.knobs import parameters_from_pbtxt
    from tools.bench.llm.levels import load_tokenizer
    from tools.load.llm.workload import Workload
    from tools.simulate.llm.live import live_server
    from tools.simulate.llm.validate import ValidationCase, validate

    engine, config = resolve_engine(args.engine, args.config)
    cost = load_cost_model(args.cost_model, engine)
    base = parameters_from_pbtxt(config)
    cases = [
        ValidationCase(parse_overrides(text, engine), schedule)
        for text in args.cases.split(";")
        for schedule in _levels(args.concurrency, args.rates)
    ]
    requests = Workload(args.prompt_lengths, args.output_lengths, args.requests, args.seed).build(load_tokenizer(args.tokenizer))
    with live_server(args.url, args.grpc_url, args.admin_key, vllm_config=config if engine == "vllm" else None) as server:
        result = validate(server, cost, base, cases, requests, level_of(args), args.slo, overheads_of(args), args.live_scale)
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
    lines = [f"engine: {result.get('engine', 'native')}"]
    lines.append(f"{'case':58s} {'role':8s} {'tok/s sim/live':>16s} {'TTFT p99 ms':>18s} {'TPOT p50 ms':>16s}")
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
    if result.get("reload_s"):
        reloads = result["reload_s"]
        unloads = [s for s in result.get("unload_s", []) if s is not None]
        slowest = f", the slowest unload {max(unloads):g} s" if unloads else ""
        lines.append(
            f"{len(reloads)} reload(s), {min(reloads):g}-{max(reloads):g} s{slowest}; stuck unloads: {result.get('stuck_unloads', 0)}"
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
