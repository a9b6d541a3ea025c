"""The sweep against a server: reload each candidate, measure, confirm the finalists, restore the server's config."""

from __future__ import annotations

import hashlib
import logging

from tools.load.requests import Target, request_factory
from tools.loadgen.measure import run_load
from tools.repo.candidate import candidate_of
from tools.repo.model_config import (
    ModelConfig,
    format_config,
    save_config,
)
from tools.serve.interrupts import signals_interrupt
from tools.serve.server_session import Endpoints, triton_endpoints
from tools.simulate.batcher import BatcherSpec
from tools.simulate.workload import Lengths
from tools.triton_client import TritonError
from tools.tune import guided
from tools.tune.derive import search_space
from tools.tune.outputs import write_outputs
from tools.tune.report import CHECKPOINT, SERVER_CONFIG
from tools.tune.session import Checkpoint, Trial, Tuner, best_trial
from tools.tune.settings import TuneSettings
from tools.tune.space import SearchSpace
from tools.tune.strategies import Listed, make_strategy, triton_default

log = logging.getLogger("tune")


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
