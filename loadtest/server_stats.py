"""Did batching happen? Triton's own counters over the load window, per model."""

from __future__ import annotations

from dataclasses import dataclass

from tools.loadgen.report import format_ms
from tools.triton_client import TritonClient
from tools.triton_client.stats import ModelStats

MODELS = ("embed", "tokenizer", "encoder")


@dataclass
class PipelineCounters:
    """Settled statistics of the pipeline's models at one moment (before or after a run)."""

    http_url: str
    models: tuple[str, ...]
    stats: dict[str, ModelStats]

    @classmethod
    def take(cls, http_url: str, models: tuple[str, ...] = MODELS) -> PipelineCounters:
        client = TritonClient(http_url)
        return cls(http_url, models, {model: client.settled_statistics(model) for model in models})

    def __sub__(self, earlier: PipelineCounters) -> dict[str, ModelStats]:
        return {model: self.stats[model] - earlier.stats[model] for model in self.models}


def format_deltas(deltas: dict[str, ModelStats]) -> str:
    lines = ["Triton statistics over the run (statistics API deltas):"]
    lines.append(
        f"  {'model':10} {'requests':>8} {'failed':>6} {'execs':>6} {'avg batch':>9} {'queue ms':>9} {'compute ms':>10} {'cache hit':>9}"
    )
    for model, stats in deltas.items():
        lines.append(
            f"  {model:10} {stats.requests:8d} {stats.failures:6d} {stats.executions:6d} {format_ms(stats.average_batch_size, '.2f'):>9}"
            f" {format_ms(stats.average_queue_ms):>9} {format_ms(stats.average_compute_ms):>10} {stats.cache_hits:9d}"
        )
    for model, stats in deltas.items():
        if stats.batch_executions:
            histogram = " ".join(f"{size}:{count}" for size, count in sorted(stats.batch_executions.items()))
            lines.append(f"  {model} executed batch sizes (size:executions): {histogram}")
    lines.append("  (queue/compute ms are per successful request; an ensemble reports its steps' sum)")
    return "\n".join(lines)
