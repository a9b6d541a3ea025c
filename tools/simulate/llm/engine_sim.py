"""The `llm` model's engine on a simulated clock: the real engine core, a modelled step time.

llm.core.EngineCore is pure (no thread, the clock passed in), so this drives the very code
the server runs (one source of truth for intake, the policy of llm/scheduler, outputs and
finish reasons) with an executor whose step takes the cost model's seconds on the simulated
clock instead of running the model (`SimExecutor`). Requests arrive as tools.bench.llm's
driver sends them (the same seeded Poisson offsets, or N closed-loop streams sending the next
request when the last one ended, from the same place in the workload), are taken in at the
start of the next step as EngineLoop does, and generate exactly `max_tokens` tokens (the
benchmark ignores EOS). Each request becomes a StreamRecord, so the figures (TTFT, TPOT, ITL,
goodput) are tools.bench.llm's own definitions, not a second copy. A request may name a LoRA
adapter: the scheduler then admits it under its own `max_loras`, and each adapter gets a slot
of its own (as every listed adapter is resident in the engine), so the step's shape counts its
adapted rows and distinct adapters.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from llm.contract import (
    GenerationRequest,
    RequestOutput,
    RequestTimings,
    SamplingParams,
    ScheduledChunk,
    SchedulerConfig,
    StepStats,
)
from llm.core import EngineCore
from llm.scheduler import Scheduler
from tools.bench.llm.driver import Schedule
from tools.load.llm.figures import LevelFigures, Slo
from tools.load.llm.records import CUT, StreamRecord
from tools.load.schedules import ClosedLoop
from tools.simulate.llm.step_cost import StepCostModel, StepShape
from tools.simulate.llm.vllm_policy import VllmScheduler

SCHEDULERS: dict[str, type[Scheduler]] = {"native": Scheduler, "vllm": VllmScheduler}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
FILLER_TOKEN = 100  # token values do not change a step's cost
FIRST_PROMPT_TOKEN = 1000  # each request's own first token (modulo PROMPT_TOKEN_SPAN)
PROMPT_TOKEN_SPAN = 40_000


def prompt_token_ids(index: int, length: int) -> list[int]:
    """A prompt no other request shares a block with: the benchmark's prompts are distinct
    texts, and with prefix caching on, equal prompts would skip their prefill in simulation."""
    return [FIRST_PROMPT_TOKEN + index % PROMPT_TOKEN_SPAN] + [FILLER_TOKEN] * (length - 1)


@dataclass(frozen=True)
class RequestShape:
    """What the simulator needs of a request: its prompt and output lengths in tokens, and the
    LoRA adapter it names (None: the base model)."""

    prompt_tokens: int
    max_tokens: int
    lora_name: str | None = None


@dataclass(frozen=True)
class EngineShape:
    """The engine facts the scheduler sees (EngineConfig and the checkpoint decide them)."""

    num_blocks: int
    block_size: int = 16
    max_model_len: int = 8192
    policy: str = "native"  # whose step planning: native (llm/scheduler) or vllm (tools/simulate/llm/vllm_policy.py)

    def __post_init__(self) -> None:
        if self.policy not in SCHEDULERS:
            raise ValueError(f"an engine's policy is one of {', '.join(SCHEDULERS)}, got {self.policy!r}")


@dataclass(frozen=True)
class Overheads:
    """Time outside the engine's step, which the step cost model does not see.

    `request_s`: from the client's send to the engine's intake (gRPC, the Python backend,
    tokenizing) plus the last response's way back; `per_token_s`: the engine thread's work
    per streamed token (detokenizing, the response callback), added to the step."""

    request_s: float = 0.0
    per_token_s: float = 0.0


NO_OVERHEADS = Overheads()


@dataclass
class SimResult:
    records: list[StreamRecord]
    duration_s: float
    steps: int
    preemptions: int
    mean_running: float  # sequences per step, averaged over steps
    peak_kv_blocks: int
    mean_waiting: float = 0.0  # requests waiting after a step's plan, averaged over steps
    mean_kv_usage: float = 0.0  # share of the KV blocks in use after a step's plan, averaged over steps
    mean_adapters: float = 0.0  # distinct LoRA adapters per step, averaged over steps

    def figures(self, slo: Slo) -> LevelFigures:
        return LevelFigures.of(self.records, self.duration_s, slo)


@dataclass
class _Open:
    record: StreamRecord
    stream: int | None  # closed loop: the stream that sends the next request when this one ends


class SimClock:
    """The simulated time: what the engine core reads wherever the server reads time.monotonic."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class SimExecutor:
    """A StepExecutor that runs no model: a step takes the cost model's seconds (plus the
    per-token overhead) on the simulated clock, and every sampled row's next token is FILLER_TOKEN."""

    eos_token_ids: frozenset[int] = frozenset()  # the benchmark ignores EOS

    def __init__(
        self, engine: EngineShape, adapter_slots: dict[str, int], cost: StepCostModel, overheads: Overheads, clock: SimClock
    ) -> None:
        self.block_size, self.num_blocks, self.max_model_len = engine.block_size, engine.num_blocks, engine.max_model_len
        self.adapter_slots = adapter_slots
        self.cost, self.overheads, self.clock = cost, overheads, clock
        self._priced: tuple[Sequence[ScheduledChunk], float] = ((), 0.0)

    def price(self, chunks: Sequence[ScheduledChunk]) -> tuple[StepShape, float]:
        """The step of `chunks`: its shape and how long it takes (kept for its `execute`)."""
        shape = StepShape.of(chunks)
        seconds = self.cost.seconds(shape) + self.overheads.per_token_s * sum(chunk.sample for chunk in chunks)
        self._priced = (chunks, seconds)
        return shape, seconds

    def execute(self, chunks: Sequence[ScheduledChunk]) -> torch.Tensor:
        priced_chunks, seconds = self._priced
        if priced_chunks is not chunks:
            _, seconds = self.price(chunks)
        self.clock.now += seconds
        logits = torch.zeros(sum(chunk.sample for chunk in chunks), FILLER_TOKEN + 1)
        logits[:, FILLER_TOKEN] = 1.0
        return logits


class TokenText:
    """A Decoder with one character per token, so every sampled token is an output of its own."""

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return "x" * len(ids)


class _StepFigures:
    """The observer that sums what SimResult averages over steps, read after each step's commit
    (before its finished requests free their blocks)."""

    def __init__(self) -> None:
        self.steps = self.preemptions = self.peak = self.waiting_sum = 0
        self.kv_sum = 0.0

    def on_step(self, stats: StepStats) -> None:
        self.steps += 1
        self.preemptions += stats.preemptions
        self.peak = max(self.peak, stats.kv_blocks_used)
        self.waiting_sum += stats.waiting
        self.kv_sum += stats.kv_blocks_used / stats.kv_blocks_total

    def on_finished(self, timings: RequestTimings) -> None:
        pass


class EngineSimulation:
    """One load level, as tools.bench.llm.driver.LevelDriver runs it, on a simulated engine."""

    def __init__(
        self,
        cost: StepCostModel,
        config: SchedulerConfig,
        engine: EngineShape,
        requests: Sequence[RequestShape],
        seconds: float,
        drain_s: float,
        overheads: Overheads = NO_OVERHEADS,
        seed: int = 0,
        first_request: int = 0,
    ) -> None:
        if not requests:
            raise ValueError("a simulation needs at least one request shape")
        if seconds <= 0 or drain_s < 0:
            raise ValueError(f"a level lasts > 0 s and drains >= 0 s, got {seconds:g} and {drain_s:g}")
        self.cost, self.config, self.engine = cost, config, engine
        self.requests, self.seconds, self.drain_s = requests, seconds, drain_s
        self.overheads, self.seed, self.first_request = overheads, seed, first_request

    def run(self, schedule: Schedule, on_step: Callable[[float, Scheduler, list[StreamRecord]], None] | None = None) -> SimResult:
        """`on_step(end, scheduler, records)` after every step (tools.adapt's controller
        observes and sets the scheduler's step limits there)."""
        clock = SimClock()
        names = dict.fromkeys(shape.lora_name for shape in self.requests if shape.lora_name is not None)
        executor = SimExecutor(self.engine, {name: slot for slot, name in enumerate(names)}, self.cost, self.overheads, clock)
        scheduler = SCHEDULERS[self.engine.policy](
            self.config, block_size=self.engine.block_size, num_blocks=self.engine.num_blocks, max_model_len=self.engine.max_model_len
        )
        figures = _StepFigures()
        core = EngineCore(executor, self.config, TokenText(), figures, clock=clock, scheduler=scheduler)
        limit = self.seconds + self.drain_s
        records: list[StreamRecord] = []
        arrivals: list[tuple[float, int, int | None]] = []  # (time the engine sees it, record index, stream)
        open_: dict[str, _Open] = {}
        latency = self.overheads.request_s / 2  # half on the way in, half on the way back

        def send(at: float, stream: int | None) -> None:
            index = len(records)
            record = StreamRecord(index, at)
            records.append(record)
            heapq.heappush(arrivals, (at + latency, index, stream))

        def answer(outputs: Sequence[RequestOutput], at: float) -> None:
            for output in outputs:
                item = open_[output.request_id]
                if output.new_token_ids:
                    item.record.add_tokens(at + latency, len(output.new_token_ids))
                if output.finished:
                    del open_[output.request_id]
                    item.record.end_s = at + latency
                    item.record.finish_reason = output.finish_reason
                    done = at + 2 * latency  # the client's clock: the last answer arrived
                    if item.stream is not None and done < self.seconds:
                        send(done, item.stream)

        if isinstance(schedule, ClosedLoop):
            for stream in range(schedule.concurrency):
                send(0.0, stream)
        else:
            for offset in schedule.offsets(self.seconds, np.random.default_rng(self.seed)):
                send(float(offset), None)

        running_sum, adapters_sum = 0, 0
        while clock.now < limit:
            now = clock.now
            while arrivals and arrivals[0][0] <= now:
                _, index, stream = heapq.heappop(arrivals)
                shape = self.requests[(self.first_request + index) % len(self.requests)]
                request = GenerationRequest(
                    str(index),
                    prompt_token_ids(index, shape.prompt_tokens),
                    SamplingParams(max_tokens=shape.max_tokens, temperature=0, ignore_eos=True, lora_name=shape.lora_name),
                    records[index].sent_s + latency,
                )
                try:
                    core.check_request(request)
                except ValueError as exc:
                    records[index].outcome, records[index].message = "error", str(exc)
                    records[index].end_s = records[index].sent_s + 2 * latency
                    continue
                records[index].tokens_in = shape.prompt_tokens
                open_[request.request_id] = _Open(records[index], stream)
                core.add_request(request)
            answer(core.expire(now), now)
            scheduled = core.schedule(now)
            if scheduled.empty:
                wake = scheduler.next_step_time(now)
                upcoming = [t for t in (wake, arrivals[0][0] if arrivals else None) if t is not None and t > now]
                if not upcoming:
                    break
                clock.now = min(upcoming)
                continue
            shape, seconds = executor.price(scheduled.chunks)
            end = now + seconds
            if end > limit:
                clock.now = limit
                break
            outputs = core.execute(scheduled)
            running_sum += len(scheduled.seqs)
            adapters_sum += shape.lora_adapters
            answer(outputs, end)
            if on_step is not None:
                on_step(end, scheduler, records)
        for item in open_.values():
            item.record.outcome, item.record.message = CUT, f"still streaming {self.drain_s:g} s after the level's end"
        for _, index, _ in arrivals:
            if records[index].end_s is None and records[index].outcome != CUT:
                records[index].outcome = CUT
        answered = [r.end_s for r in records if r.end_s is not None]
        last = min(max(answered, default=0.0), limit) if not open_ and not arrivals else limit
        steps = figures.steps
        return SimResult(
            records=records,
            duration_s=max(last, self.seconds),
            steps=steps,
            preemptions=figures.preemptions,
            mean_running=running_sum / steps if steps else 0.0,
            peak_kv_blocks=figures.peak,
            mean_waiting=figures.waiting_sum / steps if steps else 0.0,
            mean_kv_usage=figures.kv_sum / steps if steps else 0.0,
            mean_adapters=adapters_sum / steps if steps else 0.0,
        )


def kv_bytes_per_token(checkpoint_config: dict, dtype_bytes: int = 4) -> int:
    """K and V of one position over every layer (llm_config.json's dimensions)."""
    c = checkpoint_config
    return 2 * c["num_layers"] * c["num_kv_heads"] * c["head_dim"] * dtype_bytes


def num_blocks_for(kv_cache_bytes: int, block_size: int, bytes_per_token: int) -> int:
    """What PagedKVCache preallocates from the `kv_cache_bytes` knob."""
    return math.floor(kv_cache_bytes / (bytes_per_token * block_size))
