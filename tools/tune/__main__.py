"""`python -m tools.tune`: the batching config with the most throughput inside a p99 SLO.

Candidates (max_batch_size, preferred sizes, max_queue_delay_microseconds, instance
count) derive from the config the server runs (read from the server, so a GPU/TensorRT
server keeps its own); each is reloaded live with a config override, the traffic is
driven (closed-loop concurrencies or open-loop rates, optional priority mix), and
client latencies plus the server's batching statistics are recorded. The server's
config is loaded back at the end, also after Ctrl-C or an error. The winner is written
as a config.pbtxt; a report folder keeps every trial, plots and a checkpoint.

Examples:
  python -m tools.tune --model encoder --p99-ms 150
  python -m tools.tune --model encoder --p99-ms 100 --rate 40,80 --strategy grid --delays-us 0,2000,8000
  python -m tools.tune --model encoder --p99-ms 80 --objective mixed --priority-mix 1:0.2,2:0.8 --apply
  python -m tools.tune --model encoder --p99-ms 250 --strategy model-guided   # simulate all, measure the top 3 (docs/simulate.md)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import sys
from dataclasses import dataclass, field
from pathlib import Path

from tools.cli.arguments import number_list
from tools.cli.exit_status import run_reporting_errors
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.cli.settings import settings_from
from tools.load.requests import TOKEN_IDS, RequestSettings, Target, input_kind, request_factory
from tools.loadgen.cli_args import (
    add_load_arguments,
    check_load_arguments,
    measurement_from_args,
    request_settings_from_args,
    traffics_from_args,
)
from tools.loadgen.curve import encoder_batch, knee, measure_curve
from tools.loadgen.measure import Measurement, run_load
from tools.loadgen.report import format_ms
from tools.loadgen.traffic import Traffic
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.artifacts import ensemble_batch_floor
from tools.repo.candidate import Candidate, apply_candidate, candidate_of
from tools.repo.model_config import (
    CONFIG_NAME,
    ModelConfig,
    changed_fields,
    format_config,
    has_priority_queues,
    load_config,
    rewrite_config,
    save_config,
)
from tools.serve.admin_key import add_admin_key_arguments, resolve_admin_key
from tools.serve.interrupts import signals_interrupt
from tools.serve.server_session import Endpoints, triton_endpoints
from tools.simulate.batcher import BatcherSpec
from tools.simulate.cost_model import CostModel
from tools.simulate.workload import Lengths
from tools.triton_client import TritonError
from tools.tune import guided
from tools.tune.objectives import OBJECTIVES
from tools.tune.report import plot_trials, write_trials
from tools.tune.session import Checkpoint, Trial, Tuner, best_trial
from tools.tune.space import SearchSpace
from tools.tune.strategies import Listed, make_strategy, triton_default

log = logging.getLogger("tune")

PREFERRED_DEFAULT = "none,half"
SERVER_CONFIG = "server-config.pbtxt"  # in the report folder: the config the server ran before the sweep
CHECKPOINT = "checkpoint.json"


@dataclass(frozen=True)
class TuneSettings:
    """The command line as typed values; built once in `run()`, read by everything below."""

    model: str  # the model whose config is tuned
    load_model: str  # the model the traffic is sent to (the ensemble serving `model`, by default)
    p99_ms: float
    objective: str
    requests: RequestSettings  # what each request carries; the served load model's config says texts or token ids
    traffics: list[Traffic]
    measurement: Measurement
    protocol: str
    seq_len: int  # tokens per row of the batch curve
    url: str | None = None  # a running server, or None to start a local one
    grpc_url: str | None = None
    admin_key: str | None = None
    space: Path | None = None  # YAML search space
    max_batch_sizes: list[int] | None = None
    delays_us: list[int] | None = None
    preferred: str = PREFERRED_DEFAULT
    instances: list[int] = field(default_factory=lambda: [1, 2])
    priority_queues: str = "auto"
    priority_mix: bool = False  # the traffic carries a priority mix
    strategy: str = "hill-climb"
    cost_model: str = "auto"  # model-guided: a cost model file, auto or calibrate (tools/tune/guided.py)
    top: int = 3  # model-guided: candidates measured live besides the control
    max_trials: int = 14
    confirm: int = 3
    resume: bool = False
    report_dir: Path = REPO_ROOT / "reports" / "tune"
    output: Path | None = None
    apply: bool = False
    plots: bool = True


def settings_from_args(args: argparse.Namespace) -> TuneSettings:
    """Typed settings from the parsed command line (ValueError names a bad option)."""
    load_model = args.load_model or default_load_model(args.model)
    # The batch curve is measured at the traffic's length: texts through the ensemble pad
    # to 16-48 tokens; direct encoder traffic uses --seq-len (128 as in Model Analyzer's run).
    seq_len = args.seq_len or (32 if load_model != args.model else 128)
    return settings_from(
        TuneSettings,
        args,
        load_model=load_model,
        requests=request_settings_from_args(args, seq_len),
        traffics=traffics_from_args(args),
        measurement=measurement_from_args(args, models=(args.model,)),
        seq_len=seq_len,
        admin_key=resolve_admin_key(args.admin_key_file, args.admin_key),
        priority_mix=bool(args.priority_mix),
        report_dir=args.report_dir or REPO_ROOT / "reports" / f"tune-{args.model}",
        plots=not args.no_plots,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.tune", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--p99-ms", type=float, required=True, help="latency SLO: p99 in milliseconds")
    parser.add_argument("--objective", choices=OBJECTIVES, default="throughput-slo")
    add_load_arguments(parser, default_model="encoder", default_concurrency="1,4,16")
    parser.add_argument("--load-model", default=None, help="model the traffic is sent to (default: the ensemble serving --model)")
    add_admin_key_arguments(parser)
    parser.set_defaults(warmup=1.0, window=2.0, max_windows=4, seq_len=None)
    space = parser.add_argument_group("search space (default: derived from the model's measured batch curve)")
    space.add_argument("--space", type=Path, default=None, help="YAML file with max_batch_sizes, delays_us, preferred_styles, instances")
    space.add_argument("--max-batch-sizes", type=lambda t: number_list(t, int), default=None)
    space.add_argument("--delays-us", type=lambda t: number_list(t, int), default=None)
    space.add_argument(
        "--preferred",
        default=PREFERRED_DEFAULT,
        help="preferred-size styles: none, max, half, or sizes like 4+8 (default %(default)s, plus the knee)",
    )
    space.add_argument("--instances", type=lambda t: number_list(t, int), default=[1, 2], help="instance counts (default 1,2)")
    space.add_argument(
        "--priority-queues",
        choices=("auto", "keep", "try-without"),
        default="auto",
        help="keep the committed priority levels and queue policies in every candidate, or also try configs without them "
        "(an unbounded single queue; Triton 2.51 serves that faster at low load). auto: keep them when the traffic has a "
        "--priority-mix or the objective is mixed, else try both",
    )
    search = parser.add_argument_group("search")
    search.add_argument(
        "--strategy",
        choices=("hill-climb", "grid", "model-guided"),
        default="hill-climb",
        help="model-guided: simulate a fine space, measure only the --top few and Triton's default",
    )
    search.add_argument(
        "--cost-model",
        default="auto",
        help="model-guided: a cost model JSON, `calibrate` (a quick one on the server being tuned) or `auto` "
        "(the shipped measured one when this CPU matches it, else calibrate; default)",
    )
    search.add_argument("--top", type=int, default=3, help="model-guided: candidates measured live (default %(default)s)")
    search.add_argument("--max-trials", type=int, default=14, help="hill-climb budget (default %(default)s)")
    search.add_argument("--confirm", type=int, default=3, help="re-measure this many best configs; each keeps its worse run (default 3)")
    search.add_argument("--resume", action="store_true", help="reuse trials from the report folder's checkpoint")
    output = parser.add_argument_group("output")
    output.add_argument("--report-dir", type=Path, default=None, help="default reports/tune-<model>")
    output.add_argument("--output", type=Path, default=None, help="winner config path (default <report-dir>/config.pbtxt)")
    output.add_argument("--apply", action="store_true", help="also write the winner into model_repository/<model>/config.pbtxt")
    output.add_argument("--no-plots", action="store_true")
    add_verbosity_flags(parser)
    return parser


def search_space(settings: TuneSettings, http_url: str, base: ModelConfig) -> SearchSpace:
    styles = tuple(s.strip() for s in settings.preferred.split(",") if s.strip())
    if settings.space:
        import yaml

        values = yaml.safe_load(settings.space.read_text()) or {}
        values.setdefault("preferred_styles", styles)
        values["preferred_styles"] = tuple(values["preferred_styles"])
        return SearchSpace(**values)
    sizes, delays = settings.max_batch_sizes, settings.delays_us
    if settings.strategy == "model-guided":  # simulating is cheap: a fine space, no live batch curve
        sizes = sizes or [size for size in guided.FINE_MAX_BATCH_SIZES if size <= base.max_batch_size] or [base.max_batch_size]
        delays = delays or guided.FINE_DELAYS_US
        styles = styles if settings.preferred != PREFERRED_DEFAULT else tuple(guided.FINE_PREFERRED.split(","))
    if sizes is None or delays is None:
        derived_sizes, derived_delays, knee_size = derive_space(settings, http_url, base)
        sizes, delays = sizes or derived_sizes, delays or derived_delays
        if knee_size and settings.preferred == PREFERRED_DEFAULT:
            styles = (*styles, str(knee_size), f"{knee_size}+{knee_size * 2}")
    floor, ensembles = ensemble_batch_floor(MODEL_REPOSITORY, settings.model)
    allowed = [size for size in sizes if size >= floor]
    if len(allowed) < len(sizes):
        log.info(
            "max_batch_size below %d left out: ensemble(s) %s send up to that many rows per request to %s; "
            "smaller executed batches are explored through preferred sizes",
            floor,
            ", ".join(ensembles),
            settings.model,
        )
    if not allowed:
        allowed = [floor]
    return SearchSpace(
        allowed, delays, styles, settings.instances, priority_queue_options(settings) if has_priority_queues(base) else [False]
    )


def priority_queue_options(settings: TuneSettings) -> list[bool]:
    """Which priority-queue settings candidates may take; see --priority-queues."""
    if settings.priority_queues == "keep":
        return [True]
    if settings.priority_queues == "try-without":
        return [False, True]
    needed = bool(settings.priority_mix) or settings.objective == "mixed"
    return [True] if needed else [False, True]


def derive_space(settings: TuneSettings, http_url: str, base: ModelConfig) -> tuple[list[int], list[int], int]:
    """Batch sizes around the knee of the measured curve; delays as fractions of one
    knee-sized execution (waiting longer than a batch takes rarely pays)."""
    base_max_batch = base.max_batch_size
    if input_kind(base) != TOKEN_IDS:  # a text model: no token-id curve to measure
        return [4, 8, 16, 32], [0, 1000, 4000, 10000], 0
    sizes = [b for b in (1, 2, 4, 8, 16, 32, 64) if b <= base_max_batch]
    log.info("measuring the batch curve of %s at %d tokens (batch sizes %s)", settings.model, settings.seq_len, sizes)
    point = knee(measure_curve(http_url, settings.model, encoder_batch(settings.seq_len), sizes))
    log.info("knee: batch %d (%.1f ms per execution)", point.batch_size, point.execution_ms)
    candidates = sorted({max(1, point.batch_size // 2), point.batch_size, point.batch_size * 2, base_max_batch})
    execution_us = point.execution_ms * 1000
    delays = sorted({0, *(round(execution_us * f / 100.0) * 100 for f in (0.1, 0.25, 0.5, 1.0))})
    return candidates, delays, point.batch_size


def default_load_model(model: str) -> str:
    """Drive load through the ensemble that serves the model (the path users call), so
    tokenisation and padding shape the batches as in production; the model itself when no
    ensemble uses it. Direct calls also miss a Triton 2.51 stall: with priority levels or
    queue policies, a request sent straight to a Python-backend model at low concurrency
    sometimes waits ~500 ms (README, "The priority-queue tax")."""
    _, ensembles = ensemble_batch_floor(MODEL_REPOSITORY, model)
    return ensembles[0] if ensembles else model


def confirm_finalists(tuner: Tuner, trials: list[Trial], count: int) -> list[Trial]:
    """Re-measure the `count` best configs once and rank them by their worse run."""
    unique = list({t.candidate: t for t in trials}.values())
    finalists = sorted((t for t in unique if t.score.feasible), key=lambda t: t.score.value, reverse=True)[:count]
    if finalists:
        log.info("confirming the %d best configs with a second run each (a config keeps its worse run)", len(finalists))
    confirmed = {}
    for trial in finalists:
        confirmed[trial.candidate] = tuner.confirm(trial)
        s = confirmed[trial.candidate].score
        state = f"{s.throughput_rps:.1f} req/s p99 {s.p99_ms:.1f} ms" if s.feasible else f"infeasible ({s.reason})"
        print(f"[confirm ] {trial.candidate.key:34} first run {trial.score.throughput_rps:.1f} req/s -> kept {state}", flush=True)
    return [confirmed.get(t.candidate, t) for t in unique]


def progress_line(index: int, trial: Trial, best: Trial | None) -> None:
    s = trial.score
    state = f"{s.throughput_rps:7.1f} req/s p99 {s.p99_ms:7.1f} ms" if s.feasible else f"infeasible ({s.reason or trial.error})"
    running = f"best {best.candidate.key} {best.score.throughput_rps:.1f} req/s" if best else "no feasible config yet"
    print(f"[trial {index:2d}] {trial.candidate.key:34} {state:40} ({trial.seconds:4.0f} s) | {running}", flush=True)


def run_tuning(settings: TuneSettings) -> int:
    report_dir = settings.report_dir
    with triton_endpoints(settings.url, settings.grpc_url, explicit_control=True, admin_key=settings.admin_key) as endpoints:
        # Candidates derive from what the server runs (a GPU/TensorRT server runs its own
        # config, not the committed CPU one), and exactly that is loaded back at the end.
        control = endpoints.client
        base = control.config(settings.model)
        target = request_factory(control.config(settings.load_model), settings.requests)  # texts or token ids: the server says
        try:  # reloading its own config leaves the server as it was, and is refused up front without model control
            control.load(settings.model, base)
        except TritonError as exc:
            if not exc.reloads_refused:
                raise
            log.error(
                "the server at %s is not in explicit model-control mode; start it with --model-control-mode explicit", endpoints.http_url
            )
            return 2
        report_dir.mkdir(parents=True, exist_ok=True)
        saved = report_dir / SERVER_CONFIG
        save_config(base, saved)
        log.info("base: the config %s runs on %s (saved to %s)", settings.model, endpoints.http_url, saved)
        hint = f"load {saved} by hand (POST /v2/repository/models/{settings.model}/load with it as the config override)"
        with signals_interrupt(), control.restoring(settings.model, base, hint):
            try:
                trials = sweep(settings, endpoints, base, target)
            except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM/SIGHUP turned into tools.serve.interrupts.Interrupted
                log.warning("interrupted: trials so far are kept in %s; rerun with --resume to continue", report_dir / CHECKPOINT)
                return getattr(exc, "code", 130)
    return write_outputs(settings, base, trials)


def sweep(settings: TuneSettings, endpoints: Endpoints, base: ModelConfig, target: Target) -> list[Trial]:
    """The starting config first, then what the strategy proposes, then the confirmations."""
    space = search_space(settings, endpoints.http_url, base)
    log.info(
        "search space: max_batch_size %s, delays %s us, preferred %s, instances %s, priority queues %s",
        space.max_batch_sizes,
        space.delays_us,
        space.preferred_styles,
        space.instances,
        " or ".join("with" if q else "without" for q in space.priority_queues),
    )
    identity = {
        "model": settings.model,
        "p99_ms": settings.p99_ms,
        "objective": settings.objective,
        "traffic": [t.label() for t in settings.traffics],
        "target": target.describe,
        "protocol": settings.protocol,
        "space": space.to_dict(),
        "base": config_digest(base),
    }
    checkpoint = Checkpoint(settings.report_dir / CHECKPOINT, identity)
    if settings.resume:
        log.info("resuming: %d trials from %s", checkpoint.load(), checkpoint.path)

    def measure() -> list:
        url = endpoints.url_for(settings.protocol)
        return [
            run_load(target, traffic, settings.measurement, url, settings.protocol, endpoints.http_url) for traffic in settings.traffics
        ]

    tuner = Tuner(
        base, measure, lambda config: endpoints.client.load(settings.model, config), settings.p99_ms, settings.objective, checkpoint
    )
    baseline = candidate_of(base)
    plan = guided_plan(settings, endpoints, base, space) if settings.strategy == "model-guided" else None
    strategy = Listed(plan.to_measure) if plan else make_strategy(settings.strategy, space, baseline, settings.max_trials)
    log.info(
        "%s search, objective %s, SLO p99 <= %g ms, traffic: %s",
        strategy.name,
        settings.objective,
        settings.p99_ms,
        ", ".join(t.label() for t in settings.traffics),
    )
    started = tuner.evaluate(baseline)
    progress_line(0, started, best_trial([started]))
    strategy.record(baseline, started.score)
    trials = confirm_finalists(tuner, tuner.run(strategy, progress_line, [started]), settings.confirm)
    if plan:
        print(f"predicted ({plan.source}) vs measured:\n{plan.finish(trials, settings.report_dir / 'guided.json')}", flush=True)
    return trials


def guided_plan(settings: TuneSettings, endpoints: Endpoints, base: ModelConfig, space: SearchSpace) -> guided.GuidedPlan:
    """Simulate the whole space under the sweep's traffic (tools/tune/guided.py)."""
    from tools.machine import cpu_description
    from tools.simulate.calibrate import calibrate

    def quick_calibration():
        grid = guided.QUICK_GRID
        log.info(
            "calibrating a cost model on this server (batch sizes %s, lengths %s, instances %s)",
            grid["batches"],
            grid["lengths"],
            space.instances,
        )
        return calibrate(endpoints, grid["batches"], grid["lengths"], space.instances, grid["max_tokens"], grid["repeats"])

    cost, source = guided.choose_cost_model(settings.cost_model, cpu_description(), quick_calibration)
    through_ensemble = settings.load_model != settings.model
    tokenizer = BatcherSpec.from_config(endpoints.client.config("tokenizer")) if through_ensemble else None
    if settings.requests.length_mix is not None:
        lengths = Lengths("mixed", mix=settings.requests.length_mix)
    else:
        lengths = Lengths("samples") if through_ensemble else Lengths("fixed", settings.seq_len)
    pipeline = guided.Pipeline(cost, base, tokenizer, lengths)
    return guided.plan_guided(
        pipeline,
        source,
        space.candidates(),
        triton_default(space),
        candidate_of(base),
        settings.traffics,
        settings.p99_ms,
        settings.objective,
        settings.top,
    )


def config_digest(config: ModelConfig) -> str:
    """Names the starting config in the checkpoint: trials measured from another one are not reused."""
    return hashlib.sha256(format_config(config).encode()).hexdigest()[:16]


def write_outputs(settings: TuneSettings, base: ModelConfig, trials: list[Trial]) -> int:
    unique = list({t.candidate: t for t in trials}.values())
    winner = best_trial(unique)
    write_trials(unique, settings.report_dir, settings.model)
    report_dir = settings.report_dir
    plots = plot_trials(unique, winner, report_dir, settings.model, settings.p99_ms) if settings.plots else []
    summary = {
        "model": settings.model,
        "p99_ms": settings.p99_ms,
        "objective": settings.objective,
        "trials": len(unique),
        "failed_to_load": sum(1 for t in unique if t.error),
        "winner": winner.to_dict() if winner else None,
        "baseline": unique[0].to_dict() if unique else None,
        "baseline_config": SERVER_CONFIG,
    }
    with_queues = best_trial([t for t in unique if t.candidate.priority_queues])
    if winner and not winner.candidate.priority_queues:
        summary["best_with_priority_queues"] = with_queues.to_dict() if with_queues else None
    (report_dir / "summary.json").write_text(json.dumps(summary, indent=1))
    log.info("report: %s (%s)", report_dir, ", ".join(p.name for p in [report_dir / "trials.csv", *plots]))
    if winner is None:
        log.error("no candidate met p99 <= %g ms at any traffic level; relax the SLO or lower the load", settings.p99_ms)
        return 1
    config = apply_candidate(base, winner.candidate)  # the server's config with the winner's batching
    output = settings.output or report_dir / "config.pbtxt"
    output.parent.mkdir(parents=True, exist_ok=True)
    save_config(config, output)
    started = unique[0]
    print(
        f"winner: {winner.candidate.key}: {winner.score.throughput_rps:.1f} req/s at p99 {format_ms(winner.score.p99_ms)} ms "
        f"(the server's config: {started.score.throughput_rps:.1f} req/s, p99 {format_ms(started.score.p99_ms)} ms)"
    )
    print(f"winner config written to {output}")
    if not winner.candidate.priority_queues:
        log.warning(
            "the winner has no priority levels or queue policies: request priorities are ignored and the queue is "
            "unbounded. Need them? Rerun with --priority-queues keep%s",
            queues_hint(with_queues),
        )
    if settings.apply:
        # Only the batching fields go into the committed file: the server may run another
        # form of the model (a GPU variant) whose other fields do not belong there.
        apply_winner(MODEL_REPOSITORY / settings.model / CONFIG_NAME, winner.candidate)
    return 0


def apply_winner(path: Path, candidate: Candidate) -> None:
    """Write the winner's batching into a committed config (its header comments kept) and
    print each field it changed, old -> new."""
    committed = load_config(path)
    applied = apply_candidate(committed, candidate)
    changes = changed_fields(committed, applied)
    if changes:
        rewrite_config(applied, path)
    print(f"applied the winner's batching to {path}:" + ("" if changes else " no field changed"))
    for name, old, new in changes:
        print(f"  {name}: {'(unset)' if old is None else old} -> {'(unset)' if new is None else new}")


def queues_hint(best: Trial | None) -> str:
    if best is None:
        return ""
    s = best.score
    return f"; the best config with them here was {best.candidate.key}: {s.throughput_rps:.1f} req/s at p99 {format_ms(s.p99_ms)} ms"


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse out-of-range options before any server starts (ValueError names the option)."""
    if not args.p99_ms > 0:  # NaN too
        raise ValueError(f"--p99-ms is a latency SLO and must be above 0 ms, got {args.p99_ms:g}")
    if args.max_trials < 1:
        raise ValueError(f"--max-trials must be at least 1, got {args.max_trials}")
    if args.top < 1:
        raise ValueError(f"--top must be at least 1, got {args.top}")
    if args.strategy == "model-guided" and args.cost_model not in ("auto", "calibrate"):
        CostModel.load(Path(args.cost_model))  # a missing or malformed file is refused before any server starts
    if args.strategy == "model-guided" and args.model != "encoder" and args.cost_model in ("auto", "calibrate"):
        raise ValueError("--strategy model-guided calibrates the encoder only: give --cost-model FILE for another model")
    if args.confirm < 0:
        raise ValueError(f"--confirm cannot be negative, got {args.confirm}")
    for option, values, least in (
        ("--max-batch-sizes", args.max_batch_sizes, 1),
        ("--delays-us", args.delays_us, 0),
        ("--instances", args.instances, 1),
    ):
        if values is not None and (not values or min(values) < least):
            raise ValueError(f"{option} values must be at least {least}, got {values}")
    check_load_arguments(args)


def run(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        check_arguments(args)
    except ValueError as exc:
        parser.error(str(exc))
    configure_logging(args)
    return run_reporting_errors(lambda: run_tuning(settings_from_args(args)), log)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
