"""Split one ragged execution into session runs that compute as little padding as pays.

With `allow_ragged_batch` on the encoder's inputs, Triton hands one execute() call
requests of different lengths. Padding them all to the longest makes a 10-token query
pay for a 250-token passage; running each alone pays the per-run overhead (and loses
the batching gain) every time. Between the two: sort the rows by real length and cut
the sorted sequence into contiguous sub-runs, choosing the cuts by dynamic programming
over a cost curve `cost(rows, length) = per_run + rows * length * (per_token +
per_token_pair * length)` (the last term is attention's quadratic share). With costs
that grow with the longest row, some optimal split is contiguous in sorted order, so
the DP over prefixes is exact. Sub-runs go shortest first, so cheap requests are not
held behind expensive ones.

The curve is calibrated at load (or pinned by config parameters) and then refitted from
the served runs themselves (CostTracker): only the ratio of per-run to per-token cost
moves the plan, and a short calibration on a busy machine can get it badly wrong.

Pure numpy and standard library: the backend imports it, and the unit tests too.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

# (rows, length) shapes timed at initialize(): small and large batches at short and long
# lengths, so per-run, per-token and quadratic terms are all identifiable (~1 s on a 2-core CPU).
CALIBRATION_SHAPES = ((1, 16), (8, 16), (1, 128), (4, 128), (1, 256))


@dataclass(frozen=True)
class RunCostModel:
    """Seconds one session run costs, as fitted terms."""

    per_run_s: float
    per_token_s: float
    per_token_pair_s: float = 0.0

    def __post_init__(self) -> None:
        if min(self.per_run_s, self.per_token_s, self.per_token_pair_s) < 0 or self.per_run_s + self.per_token_s <= 0:
            raise ValueError(f"cost terms must be non-negative and not all zero: {self}")

    def cost(self, rows: int, length: int) -> float:
        return self.per_run_s + rows * length * (self.per_token_s + self.per_token_pair_s * length)

    @classmethod
    def fit(cls, samples: Sequence[tuple[int, int, float]]) -> RunCostModel:
        """Least squares on (rows, length, seconds) samples with every term >= 0: of the
        fits over each subset of terms, the best one whose terms are all non-negative
        (a noisy machine can otherwise make the small quadratic term negative)."""
        if len(samples) < 2:
            raise ValueError("fitting the cost curve needs at least 2 samples")
        rows = np.array([s[0] for s in samples], dtype=float)
        length = np.array([s[1] for s in samples], dtype=float)
        seconds = np.array([s[2] for s in samples], dtype=float)
        columns = np.stack([np.ones_like(rows), rows * length, rows * length * length], axis=1)
        best: tuple[float, np.ndarray] | None = None
        for size in (3, 2, 1):
            for subset in itertools.combinations(range(3), size):
                if 0 not in subset and 1 not in subset:
                    continue  # a curve needs a per-run or a per-token term
                coefficients, *_ = np.linalg.lstsq(columns[:, subset], seconds, rcond=None)
                if (coefficients < 0).any():
                    continue
                residual = float(np.sum((columns[:, subset] @ coefficients - seconds) ** 2))
                if best is None or residual < best[0] - 1e-18:
                    terms = np.zeros(3)
                    terms[list(subset)] = coefficients
                    best = (residual, terms)
        if best is None:
            raise ValueError(f"no non-negative cost curve fits {list(samples)}")
        return cls(*(float(t) for t in best[1]))

    @classmethod
    def from_parameters(cls, parameters: dict[str, str]) -> RunCostModel | None:
        """Terms pinned in the config (`split_cost_per_run_us`, `split_cost_per_token_us`,
        optional `split_cost_per_token_pair_ns`); None when not given (calibrate_run_cost instead)."""
        run, token = parameters.get("split_cost_per_run_us"), parameters.get("split_cost_per_token_us")
        if run is None and token is None:
            return None
        if run is None or token is None:
            raise ValueError("give both split_cost_per_run_us and split_cost_per_token_us, or neither (calibrate_run_cost)")
        try:
            pair = float(parameters.get("split_cost_per_token_pair_ns", "0"))
            return cls(float(run) * 1e-6, float(token) * 1e-6, pair * 1e-9)
        except ValueError as exc:
            raise ValueError(f"split cost parameters: {exc}") from None

    @property
    def break_even_tokens(self) -> float:
        """Padding tokens one run is worth: the ratio that decides every split."""
        return self.per_run_s / self.per_token_s if self.per_token_s else math.inf

    def describe(self) -> str:
        return (
            f"per run {self.per_run_s * 1e6:.0f} us, per token {self.per_token_s * 1e6:.2f} us, "
            f"per token pair {self.per_token_pair_s * 1e9:.3f} ns (a run is worth {self.break_even_tokens:.0f} padding tokens)"
        )


def calibrate_run_cost(
    run: Callable[[int, int], object],
    shapes: Sequence[tuple[int, int]] = CALIBRATION_SHAPES,
    rounds: int = 3,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[RunCostModel, list[tuple[int, int, float]]]:
    """Time `run(rows, length)` at each shape (after one untimed run each) and fit the curve.
    Shapes are interleaved round by round, so a burst of load from other processes hits
    all of them alike, and the fastest round counts: other processes only ever add time."""
    for rows, length in shapes:
        run(rows, length)
    fastest = dict.fromkeys(shapes, math.inf)
    for _ in range(rounds):
        for shape in shapes:
            started = clock()
            run(*shape)
            fastest[shape] = min(fastest[shape], clock() - started)
    samples = [(rows, length, fastest[(rows, length)]) for rows, length in shapes]
    return RunCostModel.fit(samples), samples


def fit_trimmed(samples: Sequence[tuple[int, int, float]], keep: float = 0.8) -> RunCostModel:
    """Fit, drop the samples the fit most underestimates (runs slowed by other work on the
    machine: contention only adds time), fit again on the `keep` share left."""
    first = RunCostModel.fit(samples)
    residuals = [seconds - first.cost(rows, length) for rows, length, seconds in samples]
    kept = [sample for _, sample in sorted(zip(residuals, samples), key=lambda pair: pair[0])]
    return RunCostModel.fit(kept[: max(2, int(len(kept) * keep))])


class CostTracker:
    """The curve the planner uses: the initial one (calibrated at load, or pinned in the
    config), refitted from the runs actually served when `adaptive`. A calibration of a
    second on a busy machine can be far off (measured: a per-run cost 40x the per-token
    one instead of ~10x, which makes the planner join everything); hundreds of served
    runs of varied shapes, trimmed of the ones slowed by contention, correct it."""

    def __init__(self, initial: RunCostModel, adaptive: bool = True, window: int = 512, refit_every: int = 64, min_samples: int = 32):
        self.model = initial
        self.adaptive = adaptive
        self.window, self.refit_every, self.min_samples = window, refit_every, min_samples
        self.samples: list[tuple[int, int, float]] = []
        self._since_refit = 0

    def observe(self, rows: int, length: int, seconds: float) -> bool:
        """Record one served run; True when this refitted the curve."""
        if not self.adaptive:
            return False
        self.samples.append((rows, length, seconds))
        del self.samples[: -self.window]
        self._since_refit += 1
        if self._since_refit < self.refit_every or len(self.samples) < self.min_samples:
            return False
        self._since_refit = 0
        if len({s[0] for s in self.samples}) < 2 or len({s[1] for s in self.samples}) < 2:
            return False  # one shape only: per-run and per-token costs cannot be told apart
        try:
            self.model = fit_trimmed(self.samples)
        except ValueError:
            return False
        return True


def row_lengths(mask: np.ndarray) -> np.ndarray:
    """Real length of each row of an attention mask: one past its last attended position,
    at least 1 (so a fully masked row still occupies a column)."""
    mask = np.asarray(mask)
    if mask.ndim != 2:
        raise ValueError(f"an attention mask is [rows, length], got shape {mask.shape}")
    if mask.shape[1] == 0:
        return np.ones(mask.shape[0], dtype=np.int64)
    attended = mask != 0
    last = mask.shape[1] - np.argmax(attended[:, ::-1], axis=1)
    return np.where(attended.any(axis=1), last, 1).astype(np.int64)


def plan_runs(lengths: Sequence[int], cost: RunCostModel, max_rows: int = 0) -> list[list[int]]:
    """Row indices grouped into session runs, shortest run first, minimising the summed
    cost (each run padded to its longest row). `max_rows` > 0 caps rows per run. On a
    tie the plan with fewer, larger runs wins."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    sorted_lengths = [int(lengths[i]) for i in order]
    count = len(order)
    best = [0.0] + [math.inf] * count
    cut = [0] * (count + 1)
    for end in range(1, count + 1):
        first = max(0, end - max_rows) if max_rows > 0 else 0
        for start in range(first, end):
            total = best[start] + cost.cost(end - start, sorted_lengths[end - 1])
            if total < best[end] * (1 - 1e-12):
                best[end], cut[end] = total, start
    runs = []
    end = count
    while end:
        runs.append(order[cut[end] : end])
        end = cut[end]
    return runs[::-1]


class SplitExecution:
    """The rows of one execute() call (several requests, each [rows, width] per input),
    planned into sub-runs; collects each sub-run's outputs and says when a request is
    complete, so its response can leave before the longer sub-runs have run."""

    def __init__(self, requests: Sequence[dict[str, np.ndarray]], mask_name: str, cost: RunCostModel, max_rows: int = 0) -> None:
        self.requests = list(requests)
        self.owner: list[tuple[int, int]] = []  # flat row -> (request position, row in it)
        lengths: list[int] = []
        for position, arrays in enumerate(self.requests):
            request_lengths = row_lengths(arrays[mask_name])
            self.owner += [(position, row) for row in range(len(request_lengths))]
            lengths += request_lengths.tolist()
        self.lengths = lengths
        self.runs = plan_runs(lengths, cost, max_rows)
        self._missing = [len(arrays[mask_name]) for arrays in self.requests]
        self._outputs: list[list[np.ndarray | None]] = [[None] * count for count in self._missing]

    def requests_in(self, run: list[int]) -> set[int]:
        return {self.owner[flat][0] for flat in run}

    def feeds(self, run: list[int], inputs: Sequence[tuple[str, type]]) -> dict[str, np.ndarray]:
        """Each input for this run's rows, cut or zero-padded to the run's longest real length."""
        width = max(self.lengths[flat] for flat in run)
        feeds = {}
        for name, dtype in inputs:
            joined = np.zeros((len(run), width), dtype=dtype)
            for slot, flat in enumerate(run):
                position, row = self.owner[flat]
                source = self.requests[position][name][row, :width]
                joined[slot, : len(source)] = source
            feeds[name] = joined
        return feeds

    def store(self, run: list[int], outputs: Sequence[np.ndarray]) -> list[int]:
        """Keep this run's output rows; the request positions it completed."""
        completed = []
        for slot, flat in enumerate(run):
            position, row = self.owner[flat]
            self._outputs[position][row] = [output[slot] for output in outputs]
            self._missing[position] -= 1
            if self._missing[position] == 0:
                completed.append(position)
        return completed

    def outputs(self, position: int) -> list[np.ndarray]:
        """One array per model output, rows in the request's own order."""
        rows = self._outputs[position]
        return [np.stack([row[index] for row in rows]) for index in range(len(rows[0]))]
