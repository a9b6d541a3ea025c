"""vLLM's per-step statistics into Triton's metrics port under the names our engine uses.

vLLM exports its `vllm:*` metrics through prometheus_client in its own process; inside Triton
that registry is nobody's, so a stat logger of ours (vLLM's StatLoggerBase, as Triton's vLLM
backend does) hands each step's SchedulerStats/IterationStats to LlmMetrics, which writes them
as the Python backend's custom metrics with the same families, labels and buckets as the native
engine (llm/metrics.py): one dashboard and one set of alert rules for both engines.
"""

from __future__ import annotations

from vllm.config import VllmConfig
from vllm.v1.metrics.loggers import StatLoggerBase

from llm.metrics import LlmMetrics
from llm.vllm_engine.convert import finished_timings, load_of, step_stats, token_latencies


def triton_stat_logger(metrics: LlmMetrics) -> type[StatLoggerBase]:
    """A StatLoggerBase class (vLLM's logger factory: (vllm_config, engine_index) -> logger)
    writing into `metrics`."""

    class TritonStatLogger(StatLoggerBase):
        def __init__(self, vllm_config: VllmConfig, engine_index: int = 0) -> None:
            self.vllm_config = vllm_config

        def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx: int = 0) -> None:
            blocks = self.vllm_config.cache_config.num_gpu_blocks or 0  # set once the KV cache is allocated
            step = step_stats(scheduler_stats, iteration_stats, blocks)
            if step is not None:
                metrics.on_step(step)
            elif (load := load_of(scheduler_stats, blocks)) is not None:
                metrics.set_load(*load)
            if iteration_stats is not None:
                for finished in iteration_stats.finished_requests:
                    metrics.on_finished(finished_timings(finished))
                metrics.on_token_latencies(*token_latencies(iteration_stats))

        def log_engine_initialized(self) -> None:
            pass

    return TritonStatLogger
