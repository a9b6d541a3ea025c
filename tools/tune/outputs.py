"""What a finished sweep leaves: the report, the winner's config and, with --apply, the committed config changed."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from tools.loadgen.report import format_ms
from tools.paths import MODEL_REPOSITORY
from tools.repo.candidate import Candidate, apply_candidate
from tools.repo.model_config import (
    CONFIG_NAME,
    ModelConfig,
    changed_fields,
    load_config,
    rewrite_config,
    save_config,
)
from tools.tune.report import SERVER_CONFIG, plot_trials, write_trials
from tools.tune.session import Trial, best_trial
from tools.tune.settings import TuneSettings

log = logging.getLogger("tune")


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
