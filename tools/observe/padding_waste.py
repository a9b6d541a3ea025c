"""Read the padding counters our ONNX Runtime backend publishes on Triton's metrics port.

The backend counts, per model, the real tokens (attention-mask sum) and the padding
tokens it computed, its rows and session runs, and the executions that joined requests
of different shapes (backends/onnxruntime/padding_metrics.py). Like the statistics
API, the counters are cumulative; a measurement subtracts two snapshots.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, fields

from backends.onnxruntime import padding_metrics as names
from tools.triton_client import MetricSample, fetch_metrics


@dataclass(frozen=True)
class PaddingCounts:
    real_tokens: float = 0.0
    padding_tokens: float = 0.0
    rows: float = 0.0
    runs: float = 0.0
    ragged_executions: float = 0.0

    @classmethod
    def from_samples(cls, samples: list[MetricSample], model: str) -> PaddingCounts:
        exported = {
            names.REAL_TOKENS: "real_tokens",
            names.PADDING_TOKENS: "padding_tokens",
            names.ROWS: "rows",
            names.RUNS: "runs",
            names.RAGGED_EXECUTIONS: "ragged_executions",
        }
        by_name = {name.removesuffix("_total"): field for name, field in exported.items()}  # counters by family name
        values = dict.fromkeys(by_name.values(), 0.0)
        for name, labels, value in samples:
            if name in by_name and labels.get("model") == model:
                values[by_name[name]] += value
        return cls(**values)

    @classmethod
    def fetch(cls, metrics_url: str, model: str = "encoder") -> PaddingCounts:
        return cls.from_samples(fetch_metrics(metrics_url), model)

    @classmethod
    def settled(cls, metrics_url: str, model: str = "encoder", quiet_s: float = 0.2, timeout_s: float = 10.0) -> PaddingCounts:
        """Counters once they stop moving: a Python backend's metric updates travel to Triton
        apart from its responses, so a read right after a response can miss them. The last
        read if they never pause for `quiet_s` within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        latest = cls.fetch(metrics_url, model)
        while time.monotonic() < deadline:
            time.sleep(quiet_s)
            previous, latest = latest, cls.fetch(metrics_url, model)
            if latest == previous:
                break
        return latest

    def __sub__(self, earlier: PaddingCounts) -> PaddingCounts:
        return PaddingCounts(**{f.name: getattr(self, f.name) - getattr(earlier, f.name) for f in fields(self)})

    @property
    def waste(self) -> float | None:
        """Padding tokens computed per real token (None: nothing real was computed)."""
        return self.padding_tokens / self.real_tokens if self.real_tokens else None

    @property
    def rows_per_run(self) -> float | None:
        return self.rows / self.runs if self.runs else None
