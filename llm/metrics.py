"""Prometheus metrics for the LLM, through the Python backend's custom metrics
(`pb_utils.MetricFamily`), named as vLLM names them where vLLM has a name.

The engine thread only enqueues: every metric call of the Python backend is a round trip to
the Triton process, and one finished 256-token request observes 255 inter-token gaps, so a
writer thread makes the calls (as Triton's vLLM backend does). `pb_utils` is injected, so the
module imports nothing from Triton and runs under tests/unit/fake_pb_utils.py.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from types import ModuleType

from llm.contract import RequestTimings, StepStats

# vLLM's buckets (vllm/v1/metrics/loggers.py) where vLLM has the metric.
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5]
REQUEST_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0]
TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192]
SEQ_BUCKETS = [1, 2, 4, 8, 16, 32, 64, 128, 256]

# name -> (kind, description, buckets for a histogram)
FAMILIES: dict[str, tuple[str, str, list[float] | None]] = {
    "vllm:time_to_first_token_seconds": ("HISTOGRAM", "Time from arrival to the first output token.", TTFT_BUCKETS),
    "vllm:inter_token_latency_seconds": ("HISTOGRAM", "Time between consecutive output tokens of a request.", ITL_BUCKETS),
    "vllm:e2e_request_latency_seconds": ("HISTOGRAM", "Time from arrival to the last output token.", REQUEST_BUCKETS),
    "vllm:request_queue_time_seconds": ("HISTOGRAM", "Time from arrival to the first scheduled step.", REQUEST_BUCKETS),
    "vllm:request_prompt_tokens": ("HISTOGRAM", "Prompt tokens per finished request.", TOKEN_BUCKETS),
    "vllm:request_generation_tokens": ("HISTOGRAM", "Generated tokens per finished request.", TOKEN_BUCKETS),
    "vllm:iteration_tokens_total": ("HISTOGRAM", "Tokens per engine step (prefill tokens + decode sequences).", TOKEN_BUCKETS),
    "llm:step_prefill_tokens": ("HISTOGRAM", "Prefill tokens per engine step (the step composition).", TOKEN_BUCKETS),
    "llm:step_decode_sequences": ("HISTOGRAM", "Decoding sequences per engine step (the step composition).", SEQ_BUCKETS),
    "vllm:num_requests_running": ("GAUGE", "Requests with a sequence in the running batch.", None),
    "vllm:num_requests_waiting": ("GAUGE", "Requests waiting to be scheduled.", None),
    "vllm:kv_cache_usage_perc": ("GAUGE", "KV-cache usage (fraction of blocks in use; 1 means full).", None),
    "vllm:num_preemptions_total": ("COUNTER", "Sequences preempted (KV blocks freed, recomputed later).", None),
    "vllm:prefix_cache_queries_total": ("COUNTER", "Prompt tokens looked up in the prefix cache (hit rate = hits / queries).", None),
    "vllm:prefix_cache_hits_total": ("COUNTER", "Prompt tokens found in the prefix cache (their prefill skipped).", None),
    "vllm:prompt_tokens_total": ("COUNTER", "Prompt tokens of finished requests.", None),
    "vllm:generation_tokens_total": ("COUNTER", "Generated tokens of finished requests.", None),
    "vllm:request_success_total": ("COUNTER", "Finished requests, by finish reason (stop, length, abort, timeout, error).", None),
    "vllm:lora_requests_info": ("GAUGE", "Running and waiting LoRA adapters (labels); the value is when they were last seen.", None),
    "llm:lora_prompt_tokens_total": ("COUNTER", "Prompt tokens of finished requests, by LoRA adapter.", None),
    "llm:lora_generation_tokens_total": ("COUNTER", "Generated tokens of finished requests, by LoRA adapter.", None),
}
# Families whose labels vary (finish reason, adapter): one metric per label set, made on first use.
LABELLED = frozenset(
    {"vllm:request_success_total", "vllm:lora_requests_info", "llm:lora_prompt_tokens_total", "llm:lora_generation_tokens_total"}
)


class LlmMetrics:
    """A LoopObserver writing the families above, labelled with the model and version."""

    def __init__(self, pb_utils: ModuleType, labels: Mapping[str, str], background: bool = True, idle_refresh_s: float = 0.2) -> None:
        family_class = pb_utils.MetricFamily
        self._logger = getattr(pb_utils, "Logger", None)
        self.failures = 0
        self._labels = dict(labels)
        self._families = {
            name: family_class(name=name, description=description, kind=getattr(family_class, kind))
            for name, (kind, description, _) in FAMILIES.items()
        }
        self._metrics = {}
        for name, (_, _, buckets) in FAMILIES.items():
            if name in LABELLED:
                continue
            family = self._families[name]
            self._metrics[name] = family.Metric(labels=self._labels, buckets=buckets) if buckets else family.Metric(labels=self._labels)
        self._labelled: dict[tuple[str, tuple[tuple[str, str], ...]], object] = {}
        self._lora_info: tuple[str, ...] | None = None
        self._snapshot: Callable[[], dict] | None = None
        self._load: tuple[int, int, float] | None = None
        self._idle_refresh_s = idle_refresh_s
        self._queue: queue.SimpleQueue[Callable[[], None] | None] | None = None
        self._thread: threading.Thread | None = None
        if background:
            self._queue = queue.SimpleQueue()
            self._thread = threading.Thread(target=self._write, name="llm-metrics", daemon=True)
            self._thread.start()

    # LoopObserver (called on the engine thread)
    def on_step(self, stats: StepStats) -> None:
        self._submit(lambda: self._record_step(stats))

    def on_finished(self, timings: RequestTimings) -> None:
        self._submit(lambda: self._record_finished(timings))

    def on_token_latencies(self, ttfts: Sequence[float], gaps: Sequence[float]) -> None:
        """Times to first token and inter-token gaps as an engine reports them per step (vLLM)
        rather than per finished request (our RequestTimings)."""
        if ttfts or gaps:
            self._submit(lambda: self._record_token_latencies(ttfts, gaps))

    def set_load(self, running: int, waiting: int, kv_blocks_used: int, kv_blocks_total: int) -> None:
        """The gauges, from a step's stats or from the loop's snapshot when it goes idle."""
        self._submit(lambda: self._record_load(running, waiting, kv_blocks_used, kv_blocks_total))

    def watch(self, snapshot: Callable[[], dict]) -> None:
        """Refresh the gauges from `snapshot` (EngineLoop.snapshot) whenever nothing was queued
        for `idle_refresh_s`: a step reports the load before it retires its finished requests,
        so after the last step of a burst only the snapshot shows the slots and blocks freed."""
        self._snapshot = snapshot

    def close(self, timeout_s: float = 5.0) -> None:
        """Write what is queued, then stop the writer thread."""
        if self._queue is not None and self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout_s)
            self._queue = self._thread = None

    # recording (on the writer thread, or inline without one)
    def _record_step(self, stats: StepStats) -> None:
        m = self._metrics
        m["llm:step_prefill_tokens"].observe(stats.prefill_tokens)
        m["llm:step_decode_sequences"].observe(stats.decode_seqs)
        m["vllm:iteration_tokens_total"].observe(stats.prefill_tokens + stats.decode_seqs)
        if stats.preemptions:
            m["vllm:num_preemptions_total"].increment(stats.preemptions)
        if stats.prefix_cache_queries:
            m["vllm:prefix_cache_queries_total"].increment(stats.prefix_cache_queries)
        if stats.prefix_cache_hits:
            m["vllm:prefix_cache_hits_total"].increment(stats.prefix_cache_hits)
        self._record_load(stats.running, stats.waiting, stats.kv_blocks_used, stats.kv_blocks_total)
        self._record_adapters(stats)

    def _record_adapters(self, stats: StepStats) -> None:
        """vLLM's lora_requests_info: one series per (running, waiting) set of adapters, set to the
        time it was last seen; written only when adapters are in use and the sets change."""
        labels = {
            "max_lora": str(stats.max_loras),
            "running_lora_adapters": ",".join(stats.running_adapters),
            "waiting_lora_adapters": ",".join(stats.waiting_adapters),
        }
        key = (labels["running_lora_adapters"], labels["waiting_lora_adapters"])
        if key == self._lora_info or (self._lora_info is None and not any(key)):
            return
        self._lora_info = key
        self._metric("vllm:lora_requests_info", labels).set(stats.started)

    def _metric(self, name: str, labels: Mapping[str, str]):
        """The metric of family `name` for these extra labels, made on first use."""
        key = (name, tuple(sorted(labels.items())))
        if key not in self._labelled:
            self._labelled[key] = self._families[name].Metric(labels={**self._labels, **labels})
        return self._labelled[key]

    def _record_load(self, running: int, waiting: int, kv_blocks_used: int, kv_blocks_total: int) -> None:
        load = (running, waiting, kv_blocks_used / kv_blocks_total if kv_blocks_total else 0.0)
        if load == self._load:
            return  # every set is a round trip to Triton; an idle server polls this often
        self._load = load
        m = self._metrics
        m["vllm:num_requests_running"].set(load[0])
        m["vllm:num_requests_waiting"].set(load[1])
        m["vllm:kv_cache_usage_perc"].set(load[2])

    def _record_token_latencies(self, ttfts: Sequence[float], gaps: Sequence[float]) -> None:
        for ttft in ttfts:
            self._metrics["vllm:time_to_first_token_seconds"].observe(ttft)
        for gap in gaps:
            self._metrics["vllm:inter_token_latency_seconds"].observe(gap)

    def _record_finished(self, timings: RequestTimings) -> None:
        m = self._metrics
        if timings.queue_s is not None:
            m["vllm:request_queue_time_seconds"].observe(timings.queue_s)
        if timings.ttft_s is not None:
            m["vllm:time_to_first_token_seconds"].observe(timings.ttft_s)
        for gap in timings.inter_token_s:
            m["vllm:inter_token_latency_seconds"].observe(gap)
        m["vllm:e2e_request_latency_seconds"].observe(timings.e2e_s)
        m["vllm:request_prompt_tokens"].observe(timings.prompt_tokens)
        m["vllm:request_generation_tokens"].observe(timings.output_tokens)
        if timings.prompt_tokens:
            m["vllm:prompt_tokens_total"].increment(timings.prompt_tokens)
        if timings.output_tokens:
            m["vllm:generation_tokens_total"].increment(timings.output_tokens)
        self._metric("vllm:request_success_total", {"finished_reason": timings.finish_reason or "unknown"}).increment(1)
        if timings.lora_name is not None:
            adapter = {"lora_name": timings.lora_name}
            if timings.prompt_tokens:
                self._metric("llm:lora_prompt_tokens_total", adapter).increment(timings.prompt_tokens)
            if timings.output_tokens:
                self._metric("llm:lora_generation_tokens_total", adapter).increment(timings.output_tokens)

    def _submit(self, record: Callable[[], None]) -> None:
        if self._queue is None:
            record()
        else:
            self._queue.put(record)

    def _refresh(self) -> None:
        if self._snapshot is not None:
            self._record_load(**self._snapshot())

    def _write(self) -> None:
        while True:
            try:
                record = self._queue.get(timeout=self._idle_refresh_s)
            except queue.Empty:
                record = self._refresh
            if record is None:
                return
            try:
                record()
            except Exception as exc:  # a metric must never stop the writer (nor the engine): say so once
                self.failures += 1
                if self.failures == 1 and self._logger is not None:
                    self._logger.log_error(f"llm metrics: recording failed ({exc!r}); later failures are counted only")
