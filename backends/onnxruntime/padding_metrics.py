"""Padding waste counted where it is computed: Triton custom metrics from the backend.

Triton's own statistics say how many requests an execution joined, not how many of the
tokens it computed were padding. The backend knows both (the attention mask's sum is
the real text, rows x padded length is what ran), and publishes them as counters on
Triton's metrics port (`pb_utils.MetricFamily`, verified on Triton 2.51), so the
benchmark and Prometheus/Grafana read the same figures:

    waste = rate(ort_tokens_padding_total) / rate(ort_tokens_real_total)

Instances of one model share the counters (same name and labels), so the figures are
per model and version. The family names are the one source of truth for readers
(tools/bench/lengths.py imports them from here).
"""

from __future__ import annotations

import numpy as np

REAL_TOKENS = "ort_tokens_real_total"
PADDING_TOKENS = "ort_tokens_padding_total"
ROWS = "ort_rows_total"
RUNS = "ort_session_runs_total"
RAGGED_EXECUTIONS = "ort_ragged_executions_total"

DESCRIPTIONS = {
    REAL_TOKENS: "Real tokens (attention-mask sum) the ONNX Runtime backend computed",
    PADDING_TOKENS: "Padding tokens the ONNX Runtime backend computed (rows x padded length - real tokens)",
    ROWS: "Rows (sequences) the ONNX Runtime backend computed",
    RUNS: "ONNX Runtime session runs (a ragged execution may split into several)",
    RAGGED_EXECUTIONS: "Executions that joined requests of different shapes (ragged batches)",
}


class PaddingCounters:
    """The counters of one model instance. `pb_utils` is passed in (the backend's module, or
    a fake in tests); a Triton without custom metrics leaves the counters off."""

    def __init__(self, pb_utils, labels: dict[str, str]) -> None:
        family_type = getattr(pb_utils, "MetricFamily", None)
        self.enabled = family_type is not None
        self._families = {}
        self._metrics = {}
        if not self.enabled:
            return
        for name, description in DESCRIPTIONS.items():
            family = family_type(name=name, description=description, kind=family_type.COUNTER)
            self._families[name] = family  # a metric lives only as long as its family object
            self._metrics[name] = family.Metric(labels=labels)

    def record_run(self, mask: np.ndarray) -> None:
        """One session run over `mask` ([rows, padded length]). A run without one real token
        is Triton's warm-up (zero data), not traffic, and is left out."""
        real = int(np.count_nonzero(mask))
        if not self.enabled or real == 0:
            return
        rows, width = mask.shape[0], mask.shape[1] if mask.ndim > 1 else 1
        self._metrics[REAL_TOKENS].increment(real)
        self._metrics[PADDING_TOKENS].increment(rows * width - real)
        self._metrics[ROWS].increment(rows)
        self._metrics[RUNS].increment(1)

    def record_execution(self, shapes: list[tuple[int, ...]]) -> None:
        """One execute() call over requests of these input shapes."""
        if self.enabled and len(set(shapes)) > 1:
            self._metrics[RAGGED_EXECUTIONS].increment(1)
