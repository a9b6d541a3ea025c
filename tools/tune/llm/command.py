"""Model-guided tuning of the `llm` model's scheduler for a TTFT/TPOT SLO, on either engine.

Simulates every candidate of the space (tools/simulate/llm: the real scheduler on a step cost
model measured on this CPU) under the level to tune for, measures the top few and the
config's own knobs live on a Triton (tools.bench.llm's driver and client), and picks the
best measured by the SLO's order (tools/tune/llm/space.py). `--strategy grid` measures every
candidate instead (the baseline the model-guided pick is judged against: make bench-tune-llm). Prints predicted beside measured,
writes a report, and with --apply writes the winner into the config's parameters through the
protobuf schema (its comment header kept).

The engine: `--engine vllm` tunes vLLM's knobs in configs/vllm.pbtxt (max_num_seqs,
max_num_batched_tokens, long_prefill_token_threshold, policy; vLLM has no max-wait), with a
step cost model recorded on vLLM's own engine and every candidate loaded live as a vLLM config
override; `--config FILE` tunes that file, on the engine its parameters.engine names. Neither:
the native engine and config.pbtxt.

    python -m tools.tune --model llm --slo ttft_p99=1s,tpot_p99=100ms --concurrency 8
    python -m tools.tune --model llm --slo ttft_p99=2s,tpot_p99=150ms --rate 0.5 --top 3 --apply
    python -m tools.tune --model llm --strategy grid --max-num-seqs 4,8 --max-num-batched-tokens 64,256
    python -m tools.tune --model llm --engine vllm --quick --cost-model calibrate --apply
    python -m tools.tune --model llm --adapters 16 --popularity zipf --concurrency 16 --simulate-only

With `--adapters N` the workload's requests name N random LoRA adapters (uniform or Zipf
popularity, as tools.bench.llm.lora draws them), `max_loras` joins the searched knobs, and a
local Triton serves those adapters (a `--url` server must list them under the same names).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from tools.bench.llm.driver import level_label
from tools.cli.arguments import number_list, parse_settings
from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import add_verbosity_flags
from tools.cli.settings import settings_from
from tools.load.llm.figures import LevelFigures
from tools.load.llm.workload import LengthRange
from tools.load.schedules import ClosedLoop, Poisson
from tools.paths import REPO_ROOT
from tools.simulate.llm.predict import LevelPlan
from tools.simulate.llm.setup import DEFAULT_CHECKPOINT, ENGINE_COST_MODELS, ENGINES, AdapterMix, resolve_engine, shapes_of
from tools.simulate.llm.step_cost import StepCostModel
from tools.tune.llm.simulated_space import Simulated, SimulatedSpace
from tools.tune.llm.space import LlmSlo, LlmSpace, label, score

if TYPE_CHECKING:
    from tools.simulate.llm.live import LiveServer
    from tools.simulate.llm.live_scale import LiveScale

log = logging.getLogger("tune.llm")

AXES: dict[str, type] = {
    "max_num_seqs": int,
    "max_num_batched_tokens": int,
    "long_prefill_token_threshold": int,
    "max_wait_ms": float,
    "max_loras": int,  # searched only when the workload names adapters (--adapters)
}
STRATEGIES = ("model-guided", "grid")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.tune --model llm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--model", choices=("llm",), required=True)
    parser.add_argument(
        "--engine",
        choices=ENGINES,
        default=None,
        help="native (config.pbtxt) or vllm (configs/vllm.pbtxt); default: --config's parameters.engine, else native",
    )
    parser.add_argument("--slo", type=LlmSlo.parse, default=LlmSlo(), help="ttft_p99=1s,tpot_p99=100ms (default)")
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--concurrency", type=int, default=None, help="closed-loop streams to tune for (default 8)")
    load.add_argument("--rate", type=float, default=None, help="Poisson requests/s to tune for")
    parser.add_argument(
        "--config", type=Path, default=None, help="the llm config (base of every candidate; --apply target; default: the engine's)"
    )
    parser.add_argument(
        "--cost-model",
        default="auto",
        help="step cost JSON, `calibrate` (one now) or auto (build/simulate/llm-step-cost[-vllm].json, else calibrate)",
    )
    parser.add_argument(
        "--calibrate-threads",
        type=int,
        default=0,
        help="the native engine's torch threads in a calibration run now (0: torch's default; 1 on a crowded machine)",
    )
    parser.add_argument("--top", type=int, default=3, help="predicted best candidates measured live (default %(default)s)")
    parser.add_argument(
        "--strategy",
        choices=STRATEGIES,
        default="model-guided",
        help="model-guided: simulate all, measure the top few (default); grid: measure every candidate live",
    )
    parser.add_argument(
        "--tie-break-rounds",
        type=int,
        default=1,
        help="model-guided: rounds of a head-to-head rematch among the measured candidates within one request of the best "
        "(0: none; default %(default)s)",
    )
    parser.add_argument(
        "--tie-break-seconds", type=float, default=None, help="sending time of a tie-break level (default: twice --seconds)"
    )
    parser.add_argument("--quick", action="store_true", help="a smaller space, 20 s levels, the top 2: make tune-llm QUICK=1")
    space = parser.add_argument_group("the search space (comma lists replace one axis of the default or --quick space)")
    for knob, kind in AXES.items():
        space.add_argument(f"--{knob.replace('_', '-')}", default=None, metavar=kind.__name__.upper() + ",...")
    parser.add_argument("--prompt-lengths", type=LengthRange.parse, default=LengthRange(32, 512))
    parser.add_argument("--output-lengths", type=LengthRange.parse, default=LengthRange(16, 128))
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--adapters",
        type=int,
        default=0,
        help="requests name one of N random LoRA adapters (tools.bench.llm.lora's; served by a local Triton), "
        "and max_loras is searched (default 0: the base model)",
    )
    parser.add_argument("--popularity", choices=("uniform", "zipf"), default="uniform", help="how requests pick their adapter")
    parser.add_argument("--seconds", type=float, default=None, help="sending time per measured level (default 40; quick 20)")
    parser.add_argument("--drain", type=float, default=None, help="drain limit per level (default 40; quick 30)")
    parser.add_argument("--url", default=None, help="a running Triton in explicit model-control mode (default: start a local one)")
    parser.add_argument("--grpc-url", default=None)
    parser.add_argument("--admin-key", default=None)
    parser.add_argument("--tokenizer", type=Path, default=DEFAULT_CHECKPOINT / "tokenizer.json")
    parser.add_argument("--report-dir", type=Path, default=REPO_ROOT / "reports" / "tune-llm")
    parser.add_argument("--simulate-only", action="store_true", help="print the predicted ranking; measure nothing (no server)")
    parser.add_argument(
        "--live-scale",
        action="store_true",
        help="scale the cost model to the config's measured TPOT p50 (measured first) and simulate again before choosing",
    )
    parser.add_argument("--apply", action="store_true", help="write the winner into --config")
    parser.add_argument(
        "--output", type=Path, default=None, help="write the winner's config here (default: only with --apply, into --config)"
    )
    add_verbosity_flags(parser)
    return parser


def choose_cost_model(
    option: str, quick: bool, threads: int = 0, engine: str = "native", config: Path | None = None, lora_adapters: int = 0
) -> tuple[StepCostModel, str]:
    """The step cost model of `engine`: a file, the engine's default file (auto), or one
    calibrated now (native: in process, with `lora_adapters` random adapters' steps too; vllm:
    vLLM's engine under `config`'s knobs). A model measured on the other engine is refused."""
    default = ENGINE_COST_MODELS[engine]
    if option not in ("auto", "calibrate"):
        model, source = StepCostModel.load(Path(option)), option
    elif option == "auto" and default.is_file():
        model, source = StepCostModel.load(default), str(default)
    else:
        log.info("calibrating the %s engine's step cost model on this CPU (%s design)", engine, "quick" if quick else "full")
        if engine == "vllm":
            from tools.simulate.llm.vllm_calibrate import VllmDesign, measure_vllm

            model = measure_vllm(config, VllmDesign.quick() if quick else VllmDesign())
        else:
            from tools.simulate.llm.calibrate import Design, measure
            from tools.simulate.llm.setup import read_knobs

            _, served = read_knobs(config) if config is not None else read_knobs()  # the format the config serves
            design = replace(Design.quick() if quick else Design(), lora_adapters=lora_adapters)
            model = measure(DEFAULT_CHECKPOINT, design, served.dtype, threads=threads, weights=served.weights)
        model.save(default)
        return model, f"calibrated now ({default})"
    if model.engine_kind != engine:
        raise ValueError(f"the cost model {source} was measured on the {model.engine_kind} engine; this tune is on {engine}")
    if engine == "native" and config is not None:
        _warn_on_another_format(model, config, source)
    if lora_adapters and "lora" not in model.engine:
        log.warning(
            "the cost model %s was measured without LoRA adapters: adapted rows cost the simulation nothing, so max_loras ranks "
            "on the scheduler alone (--cost-model calibrate measures them, or python -m tools.simulate llm calibrate --lora-adapters N)",
            source,
        )
    return model, source


def _warn_on_another_format(model: StepCostModel, config: Path, source: str) -> None:
    """A model measured on another weight format or dtype prices the config's steps wrongly; the
    live levels run the model's format (tools.simulate.llm.live.engine_parameters), so say so."""
    from llm.engine.precision import resolve_dtype
    from tools.simulate.llm.setup import read_knobs

    _, served = read_knobs(config)
    measured = (model.engine.get("weights", "dense"), model.engine.get("dtype", "float32"))
    if measured != (served.weights, resolve_dtype(served.dtype, served.device)):
        log.warning(
            "the cost model %s was measured with weights %s, dtype %s; %s serves weights %s, dtype %s: the live levels run the "
            "model's format (calibrate again with --cost-model calibrate to tune the config's)",
            source, *measured, config, served.weights, served.dtype,
        )  # fmt: skip


def write_winner(config_path: Path, parameters: Mapping[str, str], out: Path) -> None:
    from tools.repo.model_config import load_config, rewrite_config

    config = load_config(config_path)
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    if out != config_path and not out.exists():
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(config_path.read_text())  # the header comments come along
    rewrite_config(config, out)


def _cells(figures: Mapping) -> str:
    def ms(name: str) -> str:
        return "-" if figures.get(name) is None else f"{figures[name]:.0f}"

    return f"{figures['output_tokens_per_s']:6.1f} {figures['goodput_rps']:6.3f} {ms('ttft_p99_ms'):>7s} {ms('tpot_p99_ms'):>6s}"


def comparison_table(rows: list[dict]) -> str:
    head = f"{'candidate':62s} {'role':22s} | {'predicted: tok/s good/s TTFT99 TPOT99':38s} | measured: tok/s good/s TTFT99 TPOT99"
    lines = [head]
    for row in rows:
        measured = _cells(row["measured"]) if row.get("measured") else "(not measured)"
        lines.append(f"{row['label'][:62]:62s} {row['role']:22s} | {_cells(row['predicted']):38s} | {measured}")
    return "\n".join(lines)


@dataclass(frozen=True)
class LlmTuneSettings:
    """The command line as typed values, with --quick's defaults resolved."""

    slo: LlmSlo
    schedule: ClosedLoop | Poisson  # the load tuned for: --rate's Poisson, else --concurrency's closed loop
    level: LevelPlan  # sending and drain time per measured level, and its seed
    engine: str  # native or vllm: whose knobs, cost model and live config
    config: Path  # the llm config (config.pbtxt, configs/vllm.pbtxt): base of every candidate
    cost_model: str  # a step cost JSON, `calibrate` or `auto`
    calibrate_threads: int
    top: int  # predicted best candidates measured live (model-guided)
    strategy: str  # model-guided or grid (every candidate measured live)
    quick: bool
    space: LlmSpace  # the candidates: the default or --quick space with the axes given replaced
    prompt_lengths: LengthRange
    output_lengths: LengthRange
    requests: int
    seed: int
    adapters: AdapterMix  # the LoRA adapters the workload's requests name (none: the base model)
    url: str | None  # a running Triton, or None to start a local one
    grpc_url: str | None
    admin_key: str | None
    tokenizer: Path
    report_dir: Path
    simulate_only: bool
    live_scale: bool  # scale the cost model to the config's measured level before ranking
    tie_break_rounds: int  # model-guided: rematch rounds among the measured candidates one level cannot tell apart
    tie_break_seconds: float  # sending time of a tie-break level
    winner_output: Path | None  # where the winner's config is written: --output, else --config with --apply

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> LlmTuneSettings:
        """ValueError names the option it refuses."""
        if args.concurrency is not None and args.concurrency < 1:
            raise ValueError(f"--concurrency must be at least 1, got {args.concurrency}")
        if args.rate is not None and not 0 < args.rate < math.inf:
            raise ValueError(f"--rate must be a number of requests/s above 0, got {args.rate:g}")
        if args.requests < 1:
            raise ValueError(f"--requests must be at least 1, got {args.requests}")
        if args.tie_break_rounds < 0 or (args.tie_break_seconds is not None and args.tie_break_seconds <= 0):
            raise ValueError("--tie-break-rounds takes a count >= 0 and --tie-break-seconds a time above 0")
        level = LevelPlan(
            seconds=args.seconds or (20.0 if args.quick else 40.0), drain_s=args.drain or (30.0 if args.quick else 40.0), seed=args.seed
        )
        engine, config = resolve_engine(args.engine, args.config)
        axes = {knob: number_list(getattr(args, knob), kind, f"--{knob.replace('_', '-')}") for knob, kind in AXES.items()}
        if engine == "vllm":
            if axes.pop("max_wait_ms"):
                raise ValueError("--max-wait-ms: vLLM's scheduler never waits for company (no such knob on the vllm engine)")
            if any(value < 0 for value in axes["long_prefill_token_threshold"]):
                raise ValueError("--long-prefill-token-threshold takes numbers >= 0 on vLLM (0: no cap below the budget)")
        elif any(value <= 0 for value in axes["long_prefill_token_threshold"]) or any(value < 0 for value in axes["max_wait_ms"]):
            raise ValueError("--long-prefill-token-threshold takes positive numbers, --max-wait-ms milliseconds >= 0")
        if any(value <= 0 for knob in ("max_num_seqs", "max_num_batched_tokens", "max_loras") for value in axes[knob]):
            raise ValueError("--max-num-seqs, --max-num-batched-tokens and --max-loras take positive numbers")
        adapters = AdapterMix(args.adapters, args.popularity)
        if adapters.adapters and engine == "vllm":
            raise ValueError("--adapters: the vllm engine's step cost model has no LoRA terms; tune adapters on the native engine")
        if axes["max_loras"] and not adapters.adapters:
            raise ValueError("--max-loras is searched only for a workload with adapters (--adapters N)")
        space = LlmSpace.for_engine(engine, args.quick).for_adapters(adapters.adapters, args.quick)
        space = space.with_axes(**{knob: values for knob, values in axes.items() if values})
        if next(space.candidates(), None) is None:
            raise ValueError("the search space has no valid candidate (each needs budget >= seqs and chunk <= budget)")
        return settings_from(
            cls,
            args,
            engine=engine,
            config=config,
            space=space,
            adapters=adapters,
            schedule=Poisson(args.rate) if args.rate else ClosedLoop(args.concurrency or 8),
            level=level,
            top=min(args.top, 2) if args.quick and args.top == 3 else args.top,
            tie_break_seconds=args.tie_break_seconds or 2 * level.seconds,
            winner_output=args.output or (config if args.apply else None),
        )


def run_tune(settings: LlmTuneSettings) -> int:
    from llm.serving.knobs import parameters_from_pbtxt

    started = time.monotonic()
    base = parameters_from_pbtxt(settings.config)
    cost, source = choose_cost_model(
        settings.cost_model, settings.quick, settings.calibrate_threads, settings.engine, settings.config, settings.adapters.adapters
    )
    requests = settings.adapters.apply(workload_requests(settings), settings.seed)  # as tools.bench.llm.lora's load names them
    default = {key: base[key] for key in settings.space.knobs if key in base}
    space = SimulatedSpace(base, default, shapes_of(requests), settings.schedule, settings.level, settings.slo)
    simulated = space.simulate(cost, settings.space.candidates())
    sim_s = time.monotonic() - started
    log.info("simulated %d candidates in %.1f s with %s", len(simulated), sim_s, source)
    if settings.simulate_only:
        chosen = [*space.to_measure(simulated, settings.strategy, settings.top), (default, simulated[0][1], "config")]
        rows = [{"label": label(p), "role": role, "predicted": f.as_dict()} for p, f, role in chosen]
        print(
            f"{settings.engine} engine: {len(simulated)} candidates simulated in {sim_s:.1f} s under {level_label(settings.schedule)}; "
            f"SLO {settings.slo.describe()}"
        )
        print(comparison_table(rows))
        return 0
    live = measure_live(settings, space, cost, simulated, requests)
    rows, live_scale, simulated = live.rows, live.live_scale, live.simulated
    slo = settings.slo
    best = max(rows, key=lambda row: score(LevelFigures(**row["measured"]), slo))
    if live.tie_break:  # the rematch's winner among the candidates one level could not tell apart
        best = next(row for row in rows if row["parameters"] == live.tie_break[0]["parameters"])
    best["role"] += ", winner"
    print(
        f"{settings.strategy} on the {settings.engine} engine: {len(simulated)} candidates simulated ({sim_s:.1f} s), {len(rows)} "
        f"measured under {level_label(settings.schedule)}; SLO {slo.describe()}"
    )
    print(comparison_table(rows))
    if live_scale is not None:
        print(
            f"predictions scaled by {live_scale.factor:.3f}, fitted to the config's measured TPOT p50 "
            f"({live_scale.measured_tpot_p50_ms:g} ms; {live_scale.predicted_tpot_p50_ms:g} ms predicted unscaled)"
        )
    if live.tie_break:
        print(f"tie-break ({settings.tie_break_rounds} round(s) of {settings.tie_break_seconds:g} s levels, pooled):")
        for row in live.tie_break:
            pooled = row["pooled"]
            figures = f"goodput {pooled['goodput_rps']:.3f}/s, {pooled['output_tokens_per_s']:.1f} tok/s"
            print(f"  {row['label']}: {figures}, {pooled['requests']} requests")
    if live.reload_s:
        unloads = [s for s in live.unload_s if s is not None]
        slowest = f", the slowest unload {max(unloads):g} s" if unloads else ""
        print(f"{len(live.reload_s)} reload(s) of {settings.engine}: {min(live.reload_s):g}-{max(live.reload_s):g} s each{slowest}")
    if live.stuck_unloads:
        print(f"{live.stuck_unloads} reload(s) left the old instance loaded (docs/llm.md, Known issues)")
    print(f"winner: {best['label']} ({'meets' if best['meets_slo'] else 'misses'} the SLO)")
    settings.report_dir.mkdir(parents=True, exist_ok=True)
    report = {
        "strategy": settings.strategy,
        "engine": settings.engine,
        "config": str(settings.config),
        "slo": vars(slo),
        "level": {"schedule": level_label(settings.schedule), **vars(settings.level)},
        "cost_model": source,
        "machine": cost.machine,
        "simulated": len(simulated),
        "simulate_s": round(sim_s, 2),
        "live_scale": None if live_scale is None else live_scale.as_dict(),
        "stuck_unloads": live.stuck_unloads,
        "reload_s": live.reload_s,
        "unload_s": live.unload_s,
        "tie_break": live.tie_break,
        "wall_s": round(time.monotonic() - started, 1),
        "ranking": [{"label": label(p), "parameters": p, "predicted": f.as_dict()} for p, f in space.ranked(simulated)[:20]],
        "measured": rows,
        "winner": best["parameters"],
    }
    (settings.report_dir / "tune-llm.json").write_text(json.dumps(report, indent=1))
    target = settings.winner_output
    if target is not None:
        write_winner(settings.config, best["parameters"], target)
        print(f"wrote the winner's parameters into {target}")
    return 0


def workload_requests(settings: LlmTuneSettings) -> list:
    """The seeded requests every level draws from (tokenized with the model's tokenizer)."""
    from tools.bench.llm.levels import load_tokenizer
    from tools.load.llm.workload import Workload

    workload = Workload(settings.prompt_lengths, settings.output_lengths, settings.requests, settings.seed)
    return workload.build(load_tokenizer(settings.tokenizer))


@dataclass
class LiveMeasurement:
    rows: list[dict]  # one per measured level: predicted beside measured
    live_scale: LiveScale | None
    simulated: Simulated  # the simulation the choice was made on (scaled with --live-scale)
    stuck_unloads: int  # reloads whose old instance never unloaded
    reload_s: list[float]  # each reload's wall time
    unload_s: list[float | None]  # each reload's unload time; None: never unloaded
    tie_break: list[dict] | None  # the rematch's verdict, best first (tools/tune/llm/rematch.py), when one ran


def measure_live(
    settings: LlmTuneSettings, space: SimulatedSpace, cost: StepCostModel, simulated: Simulated, requests: list
) -> LiveMeasurement:
    """Measure the candidates the strategy chooses and the config's own knobs. With
    --live-scale the config comes first, as the anchor the cost model is scaled to before the
    space is simulated again and the choice made; otherwise last. Model-guided, the measured
    candidates that one level cannot tell from the best then meet in a rematch on fresh
    requests (--tie-break-rounds)."""
    from tools.simulate.llm.live import engine_parameters, live_server
    from tools.simulate.llm.live_scale import scale_to
    from tools.tune.llm.rematch import close_contenders, live_levels, rematch, verdict

    engine_knobs = engine_parameters(cost.engine)  # measured on the engine the cost model describes
    per_request = settings.slo.per_request()
    rows: list[dict] = []
    live_scale = None
    as_calibrated = {label(knobs): figures for knobs, figures in simulated}  # before any scale
    sent: list[int] = []  # requests each level sent: a tie-break starts past all of them (no prefix-cache replay)
    tie_break = None

    def measure(server: LiveServer, knobs: dict, predicted: LevelFigures, role: str) -> LevelFigures:
        server.apply({**space.base, **engine_knobs, **knobs})
        measured = server.measure(requests, settings.schedule, settings.level, per_request)
        sent.append(server.last_sent)
        rows.append(
            {
                "label": label(knobs),
                "role": role,
                "parameters": knobs,
                "predicted": predicted.as_dict(),
                "measured": measured.as_dict(),
                "meets_slo": settings.slo.met_by(measured),
                "load_average": server.last_load_average,
            }
        )
        if live_scale is not None:  # the same measurement against the model as calibrated
            rows[-1]["predicted_as_calibrated"] = as_calibrated[label(knobs)].as_dict()
        log.info("%s (%s): measured %s", label(knobs), role, measured.as_dict())
        return measured

    vllm_config = settings.config if settings.engine == "vllm" else None
    with live_server(settings.url, settings.grpc_url, settings.admin_key, vllm_config, settings.adapters) as server:
        if settings.live_scale:
            anchor = measure(server, space.default, simulated[0][1], "config, anchor")
            anchor_label = f"{label(space.default)} @ {level_label(settings.schedule)}"
            live_scale = scale_to(cost, lambda model: space.figures(model, space.default), anchor, anchor_label)
            if live_scale is not None:
                simulated = space.simulate(cost.scaled(live_scale.factor, anchor=live_scale.anchor), settings.space.candidates())
        for knobs, predicted, role in space.to_measure(simulated, settings.strategy, settings.top):
            measure(server, knobs, predicted, role)
        if not settings.live_scale:  # last, as before: measured first, it read slow in 4 of 5 runs
            measure(server, space.default, simulated[0][1], "config")
        contenders = close_contenders(rows, settings.slo)
        if settings.strategy == "model-guided" and settings.tie_break_rounds and len(contenders) > 1:
            log.info("tie-break: %s within one request of each other", ", ".join(row["label"] for row in contenders))
            measure_level = live_levels(server, {**space.base, **engine_knobs}, requests, settings.schedule)
            level = replace(settings.level, seconds=settings.tie_break_seconds, first_request=max(sent))
            parameters = [row["parameters"] for row in contenders]
            tie_break = verdict(rematch(parameters, measure_level, level, settings.tie_break_rounds, settings.slo), settings.slo)
    reload_s = list(getattr(server, "reload_s", ()))  # a stand-in server may not time its reloads
    unload_s = list(getattr(server, "unload_s", ()))
    return LiveMeasurement(rows, live_scale, simulated, server.stuck_unloads, reload_s, unload_s, tie_break)


def run(argv: list[str]) -> int:
    settings = parse_settings(build_parser(), argv, LlmTuneSettings.from_cli_args)
    return run_reporting_errors(lambda: run_tune(settings), log)
