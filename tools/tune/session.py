"""The tuning loop: propose, apply live, measure, feed back, checkpoint.

Every finished trial is appended to a checkpoint file at once; an interrupted sweep
(Ctrl-C) resumes from it and measures only what is missing.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tools.loadgen.report import LoadResult
from tools.repo.candidate import Candidate, apply_candidate
from tools.repo.model_config import ModelConfig
from tools.triton_client import TritonError
from tools.tune.objectives import Score, score
from tools.tune.strategies import Strategy

log = logging.getLogger("tune")


@dataclass
class Trial:
    candidate: Candidate
    score: Score
    results: list[dict] = field(default_factory=list)  # LoadResult.to_dict() per traffic level
    error: str = ""
    seconds: float = 0.0
    runs: int = 1  # measurements behind the score (a confirmed trial keeps its worst run)

    def to_dict(self) -> dict:
        return {
            "candidate": self.candidate.to_dict(),
            "key": self.candidate.key,
            "score": self.score.__dict__,
            "results": self.results,
            "error": self.error,
            "seconds": self.seconds,
            "runs": self.runs,
        }

    @classmethod
    def from_dict(cls, values: dict) -> Trial:
        candidate, score = Candidate.from_dict(values["candidate"]), Score(**values["score"])
        return cls(candidate, score, values["results"], values["error"], values["seconds"], values.get("runs", 1))


class Checkpoint:
    """Trials measured so far, keyed by the sweep's settings so a changed sweep starts over."""

    def __init__(self, path: Path, settings: dict) -> None:
        self.path = path
        self.settings = json.loads(json.dumps(settings))  # compared with what JSON gives back
        self.trials: dict[Candidate, Trial] = {}

    def load(self) -> int:
        if not self.path.is_file():
            return 0
        document = json.loads(self.path.read_text())
        if document.get("settings") != self.settings:
            log.warning("checkpoint %s was made with other settings; starting over", self.path)
            return 0
        for values in document["trials"]:
            trial = Trial.from_dict(values)
            self.trials[trial.candidate] = trial
        return len(self.trials)

    def add(self, trial: Trial) -> None:
        self.trials[trial.candidate] = trial
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_suffix(".tmp")
        temporary.write_text(json.dumps({"settings": self.settings, "trials": [t.to_dict() for t in self.trials.values()]}, indent=1))
        temporary.replace(self.path)


@dataclass
class Tuner:
    base: ModelConfig
    measure: Callable[[], list[LoadResult]]  # drives every traffic level against the loaded config
    apply: Callable[[ModelConfig], None]  # loads a config on the server (raises TritonError)
    p99_ms: float
    objective: str
    checkpoint: Checkpoint

    def evaluate(self, candidate: Candidate) -> Trial:
        if candidate in self.checkpoint.trials:
            return self.checkpoint.trials[candidate]
        started = time.perf_counter()
        try:
            config = apply_candidate(self.base, candidate)
            self.apply(config)
            results = self.measure()
            trial = Trial(candidate, score(results, self.p99_ms, self.objective), [r.to_dict() for r in results])
        except (TritonError, ValueError) as exc:
            trial = Trial(candidate, Score(False, float("-inf"), 0.0, None, "failed to load"), error=str(exc))
        trial.seconds = time.perf_counter() - started
        self.checkpoint.add(trial)
        return trial

    def confirm(self, trial: Trial) -> Trial:
        """Measure a finalist again and keep its worse run: a rare stall or a quiet moment
        on a shared machine can make one run look better than the config is."""
        if trial.runs > 1 or trial.error:
            return trial
        del self.checkpoint.trials[trial.candidate]
        again = self.evaluate(trial.candidate)
        worse = again if again.score.value < trial.score.value else trial
        confirmed = Trial(trial.candidate, worse.score, worse.results, worse.error, trial.seconds + again.seconds, trial.runs + 1)
        self.checkpoint.add(confirmed)
        return confirmed

    def run(self, strategy: Strategy, progress: Callable[[int, Trial, Trial | None], None], done: list[Trial] | None = None) -> list[Trial]:
        """Measure what the strategy proposes; `done` (e.g. the committed config) counts
        for the running best and is returned with the new trials."""
        done = list(done or [])
        while batch := strategy.next_candidates():
            for candidate in batch:
                trial = self.evaluate(candidate)
                strategy.record(candidate, trial.score)
                done.append(trial)
                progress(len(done) - 1, trial, best_trial(done))
        return done


def best_trial(trials: list[Trial]) -> Trial | None:
    feasible = [t for t in trials if t.score.feasible]
    return max(feasible, key=lambda t: t.score.value) if feasible else None
