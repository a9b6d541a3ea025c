"""The cost model the simulator runs on: execution time per batch size and padded length.

Each step of the `embed` pipeline (tokenizer, encoder) has one table per instance count,
measured on a server (`calibrate`) or written by hand. Between measured points the time
is interpolated linearly in batch size and in length (piecewise-linear, no curve shape
assumed), beyond them extrapolated from the last two points: DNN execution time is
close to linear in rows and tokens on a CPU, and flat-then-linear on a GPU, both of
which a table captures without a formula. Noise is kept as quantiles of the relative
residual (measured / table - 1), so simulated executions vary as measured ones did.
The format is documented in docs/simulate.md.
"""

from __future__ import annotations

import bisect
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = "triton-batcher-cost-model/1"
STEPS = ("tokenizer", "encoder")


class CostModelError(ValueError):
    """A cost model file that is missing, unreadable or inconsistent."""


def _segment(points: list[int], x: float) -> tuple[int, int, float]:
    """Indices of the two points bracketing x (the last two beyond either end) and x's weight."""
    if len(points) == 1:
        return 0, 0, 0.0
    j = min(max(bisect.bisect_right(points, x), 1), len(points) - 1)
    i = j - 1
    return i, j, (x - points[i]) / (points[j] - points[i])


@dataclass(frozen=True)
class Grid:
    """Milliseconds per execution at each (batch size, padded length) measured."""

    batch_sizes: list[int]
    lengths: list[int]
    execution_ms: list[list[float]]  # [batch index][length index]

    def __post_init__(self) -> None:
        if not self.batch_sizes or not self.lengths:
            raise CostModelError("a cost table needs at least one batch size and one length")
        for name, axis in (("batch_sizes", self.batch_sizes), ("lengths", self.lengths)):
            if any(not isinstance(v, int) or v < 1 for v in axis) or sorted(set(axis)) != list(axis):
                raise CostModelError(f"{name} must be increasing positive integers, got {axis}")
        if len(self.execution_ms) != len(self.batch_sizes) or any(len(row) != len(self.lengths) for row in self.execution_ms):
            raise CostModelError(f"execution_ms must be {len(self.batch_sizes)} rows of {len(self.lengths)} values (batch x length)")
        for row in self.execution_ms:
            for value in row:
                if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                    raise CostModelError(f"execution_ms values must be positive numbers, got {value!r}")

    def at(self, batch: int, length: int) -> float:
        """Interpolated (or extrapolated) milliseconds; never below a tenth of the smallest entry."""
        bi, bj, bw = _segment(self.batch_sizes, batch)
        li, lj, lw = _segment(self.lengths, length)
        t = self.execution_ms

        def along_length(row: list[float]) -> float:
            return row[li] + (row[lj] - row[li]) * lw

        low, high = along_length(t[bi]), along_length(t[bj])
        floor = 0.1 * min(min(row) for row in t)
        return max(floor, low + (high - low) * bw)

    def to_dict(self) -> dict:
        return {"batch_sizes": self.batch_sizes, "lengths": self.lengths, "execution_ms": self.execution_ms}

    @classmethod
    def from_dict(cls, values: dict, where: str) -> Grid:
        try:
            return cls(
                [int(v) if float(v) == int(v) else v for v in values["batch_sizes"]],
                [int(v) if float(v) == int(v) else v for v in values["lengths"]],
                [[float(v) for v in row] for row in values["execution_ms"]],
            )
        except KeyError as exc:
            raise CostModelError(f"{where}: missing field {exc}") from None
        except (TypeError, ValueError) as exc:
            if isinstance(exc, CostModelError):
                raise CostModelError(f"{where}: {exc}") from None
            raise CostModelError(f"{where}: not a table of numbers ({exc})") from None


@dataclass(frozen=True)
class StepCost:
    """One pipeline step: a table per instance count (instances share the machine's cores)."""

    by_instances: dict[int, Grid]

    def grid(self, instances: int) -> Grid:
        """The table measured with this many instances, else the nearest count measured
        (a hand-written or partial model may hold only one)."""
        if instances in self.by_instances:
            return self.by_instances[instances]
        return self.by_instances[min(self.by_instances, key=lambda n: (abs(n - instances), n))]


@dataclass(frozen=True)
class Overheads:
    """Per-request milliseconds outside the steps' executions (they occupy no instance):
    frontend and request parsing before the first step, the ensemble's hand-off between
    steps, the response back to the client. Measured as client latency minus the steps'
    queue and compute times from Triton's statistics."""

    frontend_ms: float = 0.5
    handoff_ms: float = 0.1
    response_ms: float = 0.5
    cache_hit_ms: float = 0.3  # a response cache hit: lookup and response, no step runs
    client_ms: float = 0.0  # closed loop: the load generator's time per answer before the next send, on its one thread


@dataclass(frozen=True)
class Stall:
    """Triton 2.51's priority-queue stall (README, "The priority-queue tax"): with priority
    levels or queue policies, a request that arrives while every instance of its model is
    busy and one of them is between its response and its release does not wake the
    batcher; it waits until an arrival finds a free instance, or the batcher's idle wait ends."""

    idle_wait_ms: float = 500.0
    release_gap_ms: float = 0.3  # response sent -> instance released


@dataclass(frozen=True)
class CostModel:
    steps: dict[str, StepCost]
    overheads: Overheads = Overheads()
    noise_quantiles: list[float] = field(default_factory=lambda: [0.0])  # relative residuals, evenly spaced quantiles 0..1
    stall: Stall = Stall()
    kind: str = "measured"  # or "synthetic": never to be presented as a measurement
    measured_on: dict = field(default_factory=dict)  # hardware, software, date
    extra: dict = field(default_factory=dict)  # anything else calibrate recorded (kept on save)

    def execution_ms(self, step: str, batch: int, length: int, instances: int) -> float:
        return self.steps[step].grid(instances).at(batch, length)

    def noise_factor(self, u: float) -> float:
        """Multiplier for one execution, u uniform in [0, 1): interpolated between quantiles."""
        q = self.noise_quantiles
        if len(q) == 1:
            return max(0.05, 1.0 + q[0])
        position = u * (len(q) - 1)
        i = min(int(position), len(q) - 2)
        return max(0.05, 1.0 + q[i] + (q[i + 1] - q[i]) * (position - i))

    def to_dict(self) -> dict:
        return {
            "format": FORMAT,
            "kind": self.kind,
            "measured_on": self.measured_on,
            "steps": {name: {str(n): grid.to_dict() for n, grid in sorted(step.by_instances.items())} for name, step in self.steps.items()},
            "overheads_ms": {
                "frontend": self.overheads.frontend_ms,
                "handoff": self.overheads.handoff_ms,
                "response": self.overheads.response_ms,
                "cache_hit": self.overheads.cache_hit_ms,
                "client": self.overheads.client_ms,
            },
            "noise": {"relative_residual_quantiles": self.noise_quantiles},
            "stall": {"idle_wait_ms": self.stall.idle_wait_ms, "release_gap_ms": self.stall.release_gap_ms},
            **({"calibration": self.extra} if self.extra else {}),
        }

    @classmethod
    def from_dict(cls, document: object, where: str = "cost model") -> CostModel:
        if not isinstance(document, dict):
            raise CostModelError(f"{where}: expected a JSON object, got {type(document).__name__}")
        if document.get("format") != FORMAT:
            raise CostModelError(f"{where}: field 'format' must be {FORMAT!r}, got {document.get('format')!r}")
        kind = document.get("kind", "measured")
        if kind not in ("measured", "synthetic"):
            raise CostModelError(f"{where}: 'kind' must be 'measured' or 'synthetic', got {kind!r}")
        raw_steps = document.get("steps")
        if not isinstance(raw_steps, dict) or "encoder" not in raw_steps:
            raise CostModelError(f"{where}: 'steps' must hold at least an 'encoder' table (and usually 'tokenizer')")
        steps = {}
        for name, tables in raw_steps.items():
            if name not in STEPS:
                raise CostModelError(f"{where}: unknown step {name!r} (known: {', '.join(STEPS)})")
            if not isinstance(tables, dict) or not tables:
                raise CostModelError(f"{where}: steps.{name} must map instance counts to tables")
            grids = {}
            for count, table in tables.items():
                if not str(count).isdigit() or int(count) < 1:
                    raise CostModelError(f"{where}: steps.{name}: instance count {count!r} is not a positive integer")
                if not isinstance(table, dict):
                    raise CostModelError(f"{where}: steps.{name}.{count} must be an object")
                grids[int(count)] = Grid.from_dict(table, f"{where}: steps.{name}.{count}")
            steps[name] = StepCost(grids)
        try:
            overheads = Overheads(**{f"{k}_ms": float(v) for k, v in document.get("overheads_ms", {}).items()})
            quantiles = [float(v) for v in document.get("noise", {}).get("relative_residual_quantiles", [0.0])]
            stall = Stall(**{k: float(v) for k, v in document.get("stall", {}).items()})
        except (TypeError, ValueError, AttributeError) as exc:
            raise CostModelError(f"{where}: overheads_ms, noise or stall malformed ({exc})") from None
        if any(v < 0 or not math.isfinite(v) for v in vars(overheads).values()):
            raise CostModelError(f"{where}: overheads must be non-negative milliseconds")
        if not quantiles or sorted(quantiles) != quantiles or quantiles[0] <= -1:
            raise CostModelError(f"{where}: noise quantiles must be increasing and above -1, got {quantiles}")
        return cls(steps, overheads, quantiles, stall, kind, dict(document.get("measured_on", {})), dict(document.get("calibration", {})))

    @classmethod
    def load(cls, path: Path) -> CostModel:
        path = Path(path)
        try:
            text = path.read_text()
        except OSError as exc:
            raise CostModelError(f"cannot read the cost model {path}: {exc.strerror or exc}") from None
        try:
            document = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CostModelError(f"{path} is not JSON: {exc}") from None
        return cls.from_dict(document, str(path))

    def save(self, path: Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(self.to_dict(), indent=1)
        # Lists of numbers on one line, so a table reads as rows (and can be edited by hand).
        text = re.sub(r"\[\s+([^\[\]{}\"]*?)\s+\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text)
        path.write_text(text + "\n")
