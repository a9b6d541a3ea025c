"""Search strategies behind one two-method interface (as in Model Analyzer):
`next_candidates()` proposes what to measure next (empty: done) and
`record(candidate, score)` feeds the measurement back."""

from __future__ import annotations

from typing import Protocol

from tools.repo.candidate import Candidate
from tools.tune.objectives import Score
from tools.tune.space import SearchSpace, preferred_options


class Strategy(Protocol):
    name: str

    def next_candidates(self) -> list[Candidate]: ...

    def record(self, candidate: Candidate, score: Score) -> None: ...


class GridSearch:
    """Every candidate of the space, once."""

    name = "grid"

    def __init__(self, space: SearchSpace) -> None:
        self.pending = space.candidates()

    def next_candidates(self) -> list[Candidate]:
        batch, self.pending = self.pending, []
        return batch

    def record(self, candidate: Candidate, score: Score) -> None:
        pass


class Listed:
    """The given candidates, once each, in order: model-guided tuning measures the top few
    of a simulated ranking (tools/tune/guided.py) and a control."""

    name = "model-guided"

    def __init__(self, candidates: list[Candidate]) -> None:
        self.pending = list(dict.fromkeys(candidates))

    def next_candidates(self) -> list[Candidate]:
        batch, self.pending = self.pending, []
        return batch

    def record(self, candidate: Candidate, score: Score) -> None:
        pass


class HillClimb:
    """Steepest ascent over the space's axes from the best of a start point and seeds.

    Neighbours differ in one axis by one or two steps (two, so one flat or noisy step
    does not end the climb); a climb ends when no neighbour beats the current point by
    more than `min_gain` (a plateau). Then it restarts from the point farthest from
    everything measured, `restarts` times, and always while nothing feasible has been
    found (a climb that starts deep in SLO breach must not give up there), so one
    local optimum does not decide the answer. `max_trials` bounds the whole search."""

    name = "hill-climb"

    def __init__(
        self,
        space: SearchSpace,
        start: Candidate | None = None,
        min_gain: float = 0.02,
        max_trials: int = 16,
        restarts: int = 1,
        seeds: tuple[Candidate, ...] = (),
    ) -> None:
        self.space = space
        self.restarts = restarts
        self.min_gain = min_gain
        self.max_trials = max_trials
        self.scores: dict[Candidate, Score] = {}
        self.current = self._snap(start) if start else self._middle()
        # further start points, measured first; the climb begins at the best of them all
        self.seeds = list(dict.fromkeys(self._snap(seed) for seed in seeds))
        self.finished = False

    def _middle(self) -> Candidate:
        mbs = self.space.max_batch_sizes[len(self.space.max_batch_sizes) // 2]
        delay = self.space.delays_us[len(self.space.delays_us) // 2]
        preferred = preferred_options(mbs, self.space.preferred_styles)[0]
        return Candidate(mbs, preferred, delay, self.space.instances[0], self.space.priority_queues[-1])

    def _snap(self, candidate: Candidate) -> Candidate:
        """The nearest point of the space (so the committed config can be the start)."""

        def nearest(values: list[int], value: int) -> int:
            return min(values, key=lambda v: (abs(v - value), v))

        mbs = nearest(self.space.max_batch_sizes, candidate.max_batch_size)
        options = preferred_options(mbs, self.space.preferred_styles)
        preferred = next((p for p in options if p == candidate.preferred), options[0])
        queues = candidate.priority_queues if candidate.priority_queues in self.space.priority_queues else self.space.priority_queues[-1]
        delay, instances = nearest(self.space.delays_us, candidate.delay_us), nearest(self.space.instances, candidate.instances)
        return Candidate(mbs, preferred, delay, instances, queues)

    def neighbours(self, point: Candidate) -> list[Candidate]:
        space, found = self.space, []
        axes = {"mbs": space.max_batch_sizes, "delay": space.delays_us, "inst": space.instances, "queues": space.priority_queues}
        position = {"mbs": point.max_batch_size, "delay": point.delay_us, "inst": point.instances, "queues": point.priority_queues}
        for axis, values in axes.items():
            index = values.index(position[axis])
            for step in (-2, -1, 1, 2):
                if 0 <= index + step < len(values):
                    moved = dict(position, **{axis: values[index + step]})
                    options = preferred_options(moved["mbs"], space.preferred_styles)
                    style = self._style_index(point)
                    preferred = options[min(style, len(options) - 1)]
                    found.append(Candidate(moved["mbs"], preferred, moved["delay"], moved["inst"], moved["queues"]))
        for preferred in preferred_options(point.max_batch_size, space.preferred_styles):
            if preferred != point.preferred:
                found.append(Candidate(point.max_batch_size, preferred, point.delay_us, point.instances, point.priority_queues))
        return list(dict.fromkeys(found))

    def _style_index(self, point: Candidate) -> int:
        options = preferred_options(point.max_batch_size, self.space.preferred_styles)
        return options.index(point.preferred) if point.preferred in options else 0

    def _better(self, a: Candidate, b: Candidate) -> bool:
        new, old = self.scores[a].value, self.scores[b].value
        if old == float("-inf"):
            return new > old
        return new > old + self.min_gain * abs(old)

    def next_candidates(self) -> list[Candidate]:
        budget = self.max_trials - len(self.scores)
        if self.finished or budget <= 0:
            return []
        if self.current not in self.scores:
            return [self.current]
        if self.seeds:
            unmeasured = [seed for seed in self.seeds if seed not in self.scores]
            if unmeasured:
                return unmeasured[:budget]
            self.current = max([self.current, *self.seeds], key=lambda c: self.scores[c].value)
            self.seeds = []
        around = self.neighbours(self.current)
        unmeasured = [n for n in around if n not in self.scores]
        if unmeasured:
            return unmeasured[:budget]
        best = max(around, key=lambda c: self.scores[c].value, default=self.current)
        if best != self.current and self._better(best, self.current):
            self.current = best
            return self.next_candidates()
        feasible_found = any(score.feasible for score in self.scores.values())
        restart = self._farthest_unmeasured() if (self.restarts > 0 or not feasible_found) else None
        if restart is None:
            self.finished = True  # a plateau: no neighbour is clearly better
            return []
        self.restarts -= 1
        self.current = restart
        return [restart]

    def _coordinates(self, candidate: Candidate) -> tuple[float, ...]:
        space = self.space

        def position(values: list[int], value: int) -> float:
            nearest = min(range(len(values)), key=lambda i: abs(values[i] - value))  # off-space points (the baseline)
            return nearest / max(1, len(values) - 1)

        return (
            position(space.max_batch_sizes, candidate.max_batch_size),
            position(space.delays_us, candidate.delay_us),
            position(space.instances, candidate.instances),
            float(candidate.priority_queues) if len(space.priority_queues) > 1 else 0.0,
        )

    def _farthest_unmeasured(self) -> Candidate | None:
        measured = [self._coordinates(c) for c in self.scores]
        unmeasured = [c for c in self.space.candidates() if c not in self.scores]

        def distance(candidate: Candidate) -> float:
            point = self._coordinates(candidate)
            return min(sum((a - b) ** 2 for a, b in zip(point, other)) for other in measured)

        return max(unmeasured, key=lambda c: (distance(c), c), default=None)

    def record(self, candidate: Candidate, score: Score) -> None:
        self.scores[candidate] = score


def triton_default(space: SearchSpace) -> Candidate:
    """Where Triton's own tuning guide starts: `dynamic_batching {}` (no delay, no preferred
    sizes; close to Model Analyzer's pick here), one instance, without priority queues if the
    space allows it."""
    return Candidate(space.max_batch_sizes[-1], (), space.delays_us[0], space.instances[0], space.priority_queues[0])


def make_strategy(name: str, space: SearchSpace, start: Candidate | None, max_trials: int) -> Strategy:
    if name == "grid":
        return GridSearch(space)
    if name == "hill-climb":
        return HillClimb(space, start, max_trials=max_trials, seeds=(triton_default(space),))
    raise ValueError(f"unknown strategy {name!r} (grid, hill-climb)")
