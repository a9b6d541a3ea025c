"""The LLM's lines of `make metrics`: what the `llm` model's Prometheus metrics (llm/metrics.py,
vLLM's names) say, cumulative since load or over a window between two readings.

Latency percentiles come from the histograms' buckets, interpolated within the bucket as
Prometheus' `histogram_quantile` does, so they are estimates bounded by the bucket edges.
"""

from __future__ import annotations

import math
from collections import defaultdict

from tools.triton_client import MetricSample

HISTOGRAMS = {
    "TTFT": "vllm:time_to_first_token_seconds",
    "ITL": "vllm:inter_token_latency_seconds",
    "e2e": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
}


def _by_model(samples: list[MetricSample]) -> dict[str, dict[tuple[str, tuple], float]]:
    models: dict[str, dict[tuple[str, tuple], float]] = defaultdict(dict)
    for name, labels, value in samples:
        if name.startswith(("vllm:", "llm:")) and "model" in labels:
            rest = tuple(sorted((k, v) for k, v in labels.items() if k not in ("model", "version")))
            models[labels["model"]][(name, rest)] = models[labels["model"]].get((name, rest), 0.0) + value
    return dict(models)


def _delta(later: dict, earlier: dict | None, gauges: frozenset[str]) -> dict:
    if earlier is None:
        return later
    return {key: value if key[0] in gauges else value - earlier.get(key, 0.0) for key, value in later.items()}


def quantile(values: dict[tuple[str, tuple], float], name: str, q: float) -> float | None:
    """Prometheus' histogram_quantile over the `le` buckets of `name`; None without samples."""
    buckets = sorted((float(dict(labels)["le"]), count) for (sample, labels), count in values.items() if sample == f"{name}_bucket")
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for upper, count in buckets:
        if count >= rank:
            if math.isinf(upper):
                return lower  # beyond the last finite edge: its lower bound, as Prometheus does
            return lower + (upper - lower) * (rank - below) / (count - below) if count > below else upper
        lower, below = upper, count
    return None


def _get(values: dict, name: str, **labels: str) -> float:
    wanted = set(labels.items())
    return sum(value for (sample, rest), value in values.items() if sample == name and wanted <= set(rest))


GAUGES = frozenset({"vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"})


def llm_rows(later: list[MetricSample], earlier: list[MetricSample] | None = None, seconds: float | None = None) -> list[dict]:
    """One row per model reporting LLM metrics; empty when none does."""
    before = _by_model(earlier) if earlier is not None else {}
    rows = []
    for model, values in sorted(_by_model(later).items()):
        v = _delta(values, before.get(model) if earlier is not None else None, GAUGES)
        finished = {dict(rest)["finished_reason"]: value for (sample, rest), value in v.items() if sample == "vllm:request_success"}
        generated = _get(v, "vllm:generation_tokens")
        steps = _get(v, "llm:step_prefill_tokens_count")
        row = {
            "model": model,
            "requests": int(sum(finished.values())),
            "finished (reason x n)": " ".join(f"{reason}x{int(n)}" for reason, n in sorted(finished.items()) if n) or "-",
            "out tok/s": generated / seconds if seconds else None,
            "prompt tok": int(_get(v, "vllm:prompt_tokens")),
            "out tok": int(generated),
        }
        for label, name in HISTOGRAMS.items():
            for q in (0.5, 0.99):
                value = quantile(v, name, q)
                row[f"{label} p{round(q * 100)} ms"] = None if value is None else value * 1000
        row.update(
            {
                "steps": int(steps),
                "prefill tok/step": _get(v, "llm:step_prefill_tokens_sum") / steps if steps else None,
                "decodes/step": _get(v, "llm:step_decode_sequences_sum") / steps if steps else None,
                "preempted": int(_get(v, "vllm:num_preemptions")),
                "running": int(_get(values, "vllm:num_requests_running")),
                "waiting": int(_get(values, "vllm:num_requests_waiting")),
                "KV used": _get(values, "vllm:kv_cache_usage_perc"),
            }
        )
        rows.append(row)
    return rows
