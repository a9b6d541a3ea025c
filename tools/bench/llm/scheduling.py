"""Two scheduler experiments on the real engine, in process (the EngineLoop and its thread,
no Triton: what they compare is the scheduler's choice, which the server only wraps).

`python -m tools.bench.llm.scheduling prefix` — TTFT of requests that share a ~500-token
system prompt, one at a time, with prefix caching on and then off.
`python -m tools.bench.llm.scheduling priority` — TTFT of interactive requests (priority 0)
arriving while a queue of batch requests (priority 10) saturates `max_num_seqs`, under
policy `fcfs` and then `priority` (which preempts a batch sequence for an interactive one).
Each prints one line per run with the percentiles; the figures in docs/llm.md come from here.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from llm.contract import EngineConfig, GenerationRequest, RequestOutput, RequestTimings, SamplingParams, SchedulerConfig, StepStats
from llm.engine.executor import LlamaExecutor
from llm.loop import EngineLoop
from llm.tokenizer import LlmTokenizer

CHECKPOINT = Path("model_repository/llm/1")
SYSTEM_TEXT = (
    "You are a careful assistant for a company that sells bicycles, spare parts and repairs. "
    "Answer in short sentences, name the part and its price when you know them, never invent "
    "an order number, and ask one clarifying question when the request is ambiguous. "
)


@dataclass
class Collector:
    """The loop's observer: timings of finished requests and the step counts that matter here."""

    timings: dict[str, RequestTimings] = field(default_factory=dict)
    preemptions: int = 0
    cache_queries: int = 0
    cache_hits: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    finished: threading.Condition = field(default_factory=threading.Condition)

    def on_step(self, stats: StepStats) -> None:
        with self.lock:
            self.preemptions += stats.preemptions
            self.cache_queries += stats.prefix_cache_queries
            self.cache_hits += stats.prefix_cache_hits

    def on_finished(self, timings: RequestTimings) -> None:
        with self.finished:
            self.timings[timings.request_id] = timings
            self.finished.notify_all()

    def wait_for(self, request_ids: list[str], timeout_s: float = 600.0) -> None:
        with self.finished:
            if not self.finished.wait_for(lambda: all(r in self.timings for r in request_ids), timeout_s):
                raise TimeoutError(f"{sum(r in self.timings for r in request_ids)}/{len(request_ids)} requests finished")


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def make_loop(config: SchedulerConfig, kv_cache_bytes: int) -> tuple[EngineLoop, LlmTokenizer, Collector]:
    tokenizer = LlmTokenizer.from_folder(CHECKPOINT)
    collector = Collector()
    engine_config = EngineConfig(kv_cache_bytes=kv_cache_bytes)
    loop = EngineLoop.launch(lambda: LlamaExecutor.from_checkpoint(CHECKPOINT, engine_config), config, tokenizer, observer=collector)
    return loop, tokenizer, collector


def ignore(_: RequestOutput) -> None:
    pass


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def describe(values: list[float]) -> str:
    ms = [v * 1000 for v in values]
    spread = f"p90 {percentile(ms, 0.9):.0f} ms, p99 {percentile(ms, 0.99):.0f} ms, max {max(ms):.0f} ms"
    return f"p50 {statistics.median(ms):.0f} ms, {spread} (n={len(ms)})"


def prefix_run(caching: bool, requests: int, system_tokens: int) -> list[float]:
    config = SchedulerConfig(enable_prefix_caching=caching)
    loop, tokenizer, collector = make_loop(config, 64 * 2**20)
    try:
        system = (tokenizer.encode(SYSTEM_TEXT) * (system_tokens // 40 + 1))[:system_tokens]
        ttfts = []
        for index in range(requests + 1):  # the first fills the cache (and warms up): not counted
            question = tokenizer.encode(f"Question {index}: how much is a new chain for bike model {index * 7}?")
            request_id = f"prefix-{index}"
            params = SamplingParams(max_tokens=4, temperature=0.0, ignore_eos=True)
            loop.submit(GenerationRequest(request_id, system + question, params, time.monotonic()), ignore)
            collector.wait_for([request_id])
            if index:
                ttfts.append(collector.timings[request_id].ttft_s)
        print(
            f"prefix caching {'on ' if caching else 'off'}: {len(system)}-token shared system prompt, TTFT {describe(ttfts)}; "
            f"cache hits {collector.cache_hits}/{collector.cache_queries} prompt tokens",
            flush=True,
        )
        return ttfts
    finally:
        loop.stop()


def priority_run(policy: str, batch: int, batch_tokens: int, interactive: int, gap_s: float, max_num_seqs: int) -> list[float]:
    config = SchedulerConfig(policy=policy, max_num_seqs=max_num_seqs)
    loop, _, collector = make_loop(config, 64 * 2**20)
    rng = random.Random(0)
    try:
        batch_ids = []
        for index in range(batch):
            prompt = [rng.randrange(1000, 40000) for _ in range(100)]
            params = SamplingParams(max_tokens=batch_tokens, temperature=0.0, ignore_eos=True, priority=10)
            batch_ids.append(f"batch-{index}")
            loop.submit(GenerationRequest(batch_ids[-1], prompt, params, time.monotonic()), ignore)
        time.sleep(gap_s)  # the batch fills the running set first
        chat_ids = []
        for index in range(interactive):
            prompt = [rng.randrange(1000, 40000) for _ in range(30)]
            params = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True, priority=0)
            chat_ids.append(f"chat-{index}")
            loop.submit(GenerationRequest(chat_ids[-1], prompt, params, time.monotonic()), ignore)
            time.sleep(gap_s)
        collector.wait_for(chat_ids + batch_ids)
        ttfts = [collector.timings[r].ttft_s for r in chat_ids]
        batch_e2e = [collector.timings[r].e2e_s for r in batch_ids]
        print(
            f"policy {policy:8}: interactive TTFT {describe(ttfts)}; batch end-to-end p50 {statistics.median(batch_e2e):.1f} s; "
            f"preemptions {collector.preemptions}",
            flush=True,
        )
        return ttfts
    finally:
        loop.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=("prefix", "priority"))
    parser.add_argument("--requests", type=int, default=12, help="prefix: measured requests per run")
    parser.add_argument("--system-tokens", type=int, default=500)
    parser.add_argument("--batch", type=int, default=12, help="priority: batch requests queued at the start")
    parser.add_argument("--batch-tokens", type=int, default=32, help="priority: tokens each batch request generates")
    parser.add_argument("--interactive", type=int, default=10, help="priority: interactive requests, one every --gap-s")
    parser.add_argument("--gap-s", type=float, default=0.4)
    parser.add_argument("--max-num-seqs", type=int, default=4)
    args = parser.parse_args(argv)
    print(f"{cpu_name()}, {os.cpu_count()} cores, torch {torch.__version__}, {torch.get_num_threads()} threads", flush=True)
    if args.experiment == "prefix":
        off = prefix_run(False, args.requests, args.system_tokens)
        on = prefix_run(True, args.requests, args.system_tokens)
        print(f"TTFT p50 off/on: {statistics.median(off) / statistics.median(on):.1f}x")
    else:
        fcfs = priority_run("fcfs", args.batch, args.batch_tokens, args.interactive, args.gap_s, args.max_num_seqs)
        prio = priority_run("priority", args.batch, args.batch_tokens, args.interactive, args.gap_s, args.max_num_seqs)
        print(f"interactive TTFT p99 fcfs/priority: {percentile(fcfs, 0.99) / percentile(prio, 0.99):.1f}x")


if __name__ == "__main__":
    main()
