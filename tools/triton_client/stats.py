"""Server-side batching figures from Triton's statistics API, as deltas over a window.

Triton's counters are cumulative since load; a measurement takes a snapshot before and
after the load and subtracts, so earlier traffic (warm-up, other tests) never leaks in.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelStats:
    """Cumulative counters of one model (summed over versions)."""

    requests: int = 0  # successful inference requests
    failures: int = 0
    inferences: int = 0  # rows inferred (a batch of n rows counts n)
    executions: int = 0  # model executions (one per batch)
    queue_ns: int = 0
    compute_ns: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    # nanoseconds the model executed (input + infer + output per execution, from `batch_stats`,
    # which Triton keeps per execution, not per request): how long the instances were busy
    busy_ns: int = 0
    batch_executions: dict[int, int] = field(default_factory=dict)  # executed batch size -> executions

    @classmethod
    def from_document(cls, document: dict) -> ModelStats:
        stats = cls()
        for version in document.get("model_stats", []):
            inference = version.get("inference_stats", {})
            stats.requests += int(inference.get("success", {}).get("count", 0))
            stats.failures += int(inference.get("fail", {}).get("count", 0))
            stats.inferences += int(version.get("inference_count", 0))
            stats.executions += int(version.get("execution_count", 0))
            stats.queue_ns += int(inference.get("queue", {}).get("ns", 0))
            stats.compute_ns += sum(
                int(inference.get(key, {}).get("ns", 0)) for key in ("compute_input", "compute_infer", "compute_output")
            )
            stats.cache_hits += int(inference.get("cache_hit", {}).get("count", 0))
            stats.cache_misses += int(inference.get("cache_miss", {}).get("count", 0))
            for batch in version.get("batch_stats", []):
                size = int(batch["batch_size"])
                count = int(batch.get("compute_infer", {}).get("count", 0))
                stats.batch_executions[size] = stats.batch_executions.get(size, 0) + count
                stats.busy_ns += sum(int(batch.get(key, {}).get("ns", 0)) for key in ("compute_input", "compute_infer", "compute_output"))
        return stats

    @classmethod
    def fetch(cls, http_url: str, model: str) -> ModelStats:
        """Shorthand for `TritonClient(http_url).statistics(model)`."""
        from tools.triton_client import TritonClient  # the client returns this type

        return TritonClient(http_url).statistics(model)

    @classmethod
    def settled(cls, http_url: str, model: str, quiet_s: float = 0.2, timeout_s: float = 10.0) -> ModelStats:
        """Shorthand for `TritonClient(http_url).settled_statistics(model)`: counters once a
        request recorded after its response has shown up."""
        from tools.triton_client import TritonClient

        return TritonClient(http_url).settled_statistics(model, quiet_s, timeout_s)

    def __sub__(self, earlier: ModelStats) -> ModelStats:
        sizes = set(self.batch_executions) | set(earlier.batch_executions)
        histogram = {s: self.batch_executions.get(s, 0) - earlier.batch_executions.get(s, 0) for s in sorted(sizes)}
        return ModelStats(
            requests=self.requests - earlier.requests,
            failures=self.failures - earlier.failures,
            inferences=self.inferences - earlier.inferences,
            executions=self.executions - earlier.executions,
            queue_ns=self.queue_ns - earlier.queue_ns,
            compute_ns=self.compute_ns - earlier.compute_ns,
            cache_hits=self.cache_hits - earlier.cache_hits,
            cache_misses=self.cache_misses - earlier.cache_misses,
            busy_ns=self.busy_ns - earlier.busy_ns,
            batch_executions={s: n for s, n in histogram.items() if n},
        )

    @property
    def average_batch_size(self) -> float | None:
        """Rows per execution: 1.0 means the dynamic batcher joined nothing; None: nothing ran."""
        return self.inferences / self.executions if self.executions else None

    @property
    def average_queue_ms(self) -> float | None:
        return self.queue_ns / self.requests / 1e6 if self.requests else None

    @property
    def average_compute_ms(self) -> float | None:
        """Per request: each request of a batch is charged the batch's compute time; None: no request."""
        return self.compute_ns / self.requests / 1e6 if self.requests else None
