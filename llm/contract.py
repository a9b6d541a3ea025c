"""The seam between the scheduler and the engine, and between the engine loop and its callers.

The scheduler decides which tokens of which sequences run in a step and owns the KV block
allocation (a pure-Python free list); the engine owns the KV tensors and turns a step plan
into next-token logits; the sampler turns logits into tokens; the engine core (llm/core.py)
ties them together into a step, and the loop runs that step on one thread. Each side is
testable without the other (a fake executor for the scheduler).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # only an annotation: a tool that reads the knobs must not pay for importing torch
    import torch


@dataclass(frozen=True)
class SamplingParams:
    """Per-request sampling, with the field names of vLLM's `SamplingParams` (what Triton's
    vLLM backend reads from `sampling_parameters`)."""

    max_tokens: int = 16
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0  # in (0, 1]
    top_k: int = 0  # 0: off
    seed: int | None = None  # a seeded request samples the same tokens whatever shares its steps
    stop: tuple[str, ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0
    priority: int = 0  # lower value = served first (vLLM's convention); Triton does not pass its own priority to Python models
    queue_timeout_ms: float | None = None  # ours, not vLLM's: a request not scheduled within this long after arrival fails ("timeout")
    lora_name: str | None = None  # the LoRA adapter to generate with (the key Triton's vLLM backend reads); None: the base model


@dataclass(frozen=True)
class ScheduledChunk:
    """The tokens one sequence feeds through the model in one step."""

    seq_id: int
    token_ids: Sequence[int]  # a prefill chunk, or the one token of a decode
    start_position: int  # position of token_ids[0] = tokens of this sequence already in the KV cache
    block_table: Sequence[int]  # the sequence's KV blocks, covering start_position + len(token_ids)
    sample: bool  # the chunk ends at the sequence's last known token: return its next-token logits
    adapter_slot: int = -1  # the executor's LoRA slot of the sequence's adapter (llm.engine.lora); -1: the base model


class StepExecutor(Protocol):
    """Runs one step: one forward over the flat batch of every chunk's tokens."""

    block_size: int  # tokens per KV block
    num_blocks: int  # KV blocks preallocated
    max_model_len: int  # context window (positions)
    eos_token_ids: frozenset[int]
    adapter_slots: Mapping[str, int]  # LoRA adapter name -> its slot (ScheduledChunk.adapter_slot); empty: none

    def execute(self, chunks: Sequence[ScheduledChunk]) -> torch.Tensor:
        """Logits [number of chunks with sample=True, vocabulary] (float32), in chunk order."""
        ...


@dataclass(frozen=True)
class GenerationRequest:
    request_id: str
    prompt_token_ids: Sequence[int]
    params: SamplingParams
    arrival_time: float  # time.monotonic() when the request reached the server


@dataclass(frozen=True)
class RequestOutput:
    """What the loop hands to a request's callback after a step that produced text for it,
    and once more (finished=True) at the end; every request gets exactly one finished output."""

    request_id: str
    new_text: str
    new_token_ids: Sequence[int]
    finished: bool
    finish_reason: str | None = None  # "stop" (EOS or a stop string), "length", "abort" (cancelled), "timeout" (queue_timeout_ms), "error"
    num_prompt_tokens: int = 0
    num_output_tokens: int = 0
    error: str | None = None


@dataclass(frozen=True)
class StepStats:
    """The composition of one executed step, for metrics and the simulator."""

    started: float  # time.monotonic()
    duration_s: float
    prefill_tokens: int
    decode_seqs: int
    kv_tokens_attended: int
    running: int
    waiting: int
    kv_blocks_used: int
    kv_blocks_total: int
    preemptions: int  # in this step
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache by the sequences admitted in this step
    prefix_cache_hits: int = 0  # of those, tokens found cached (their prefill skipped)
    running_adapters: tuple[str, ...] = ()  # LoRA adapters of the running sequences, sorted
    waiting_adapters: tuple[str, ...] = ()  # LoRA adapters of the waiting sequences, sorted
    max_loras: int = 0  # the scheduler's cap on running adapters


@dataclass(frozen=True)
class RequestTimings:
    """A finished request's latencies (seconds), measured inside the server; None: no sample."""

    request_id: str
    queue_s: float | None  # arrival to first scheduled
    ttft_s: float | None  # arrival to first output token
    e2e_s: float
    inter_token_s: Sequence[float] = field(default_factory=tuple)
    prompt_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str | None = None
    lora_name: str | None = None  # the LoRA adapter it ran on (None: the base model)


class LoopObserver(Protocol):
    def on_step(self, stats: StepStats) -> None: ...
    def on_finished(self, timings: RequestTimings) -> None: ...


OutputCallback = Callable[[RequestOutput], None]


def check_request_fits(prompt_tokens: int, max_tokens: int, max_model_len: int, kv_cache_tokens: int | None = None) -> None:
    """Raise ValueError, naming the limit, for a request that could never run: the context
    window (vLLM's rule), and the KV cache where its size is given, must hold the prompt and
    every token it may generate. The one rule the Triton models (vLLM's engine sizes its own
    cache), the scheduler and so the engine loop and the simulator apply."""
    if prompt_tokens <= 0:
        raise ValueError("text_input encodes to no tokens: give a prompt")
    if max_tokens <= 0:
        raise ValueError(f"max_tokens must be positive, got {max_tokens}")
    if prompt_tokens >= max_model_len:
        raise ValueError(f"the prompt has {prompt_tokens} tokens; the context window (max_model_len) is {max_model_len}")
    if prompt_tokens + max_tokens > max_model_len:
        raise ValueError(
            f"the prompt ({prompt_tokens} tokens) plus max_tokens ({max_tokens}) exceed the context window "
            f"(max_model_len {max_model_len}); lower max_tokens to at most {max_model_len - prompt_tokens}"
        )
    if kv_cache_tokens is not None and prompt_tokens + max_tokens > kv_cache_tokens:
        raise ValueError(f"prompt + max_tokens = {prompt_tokens + max_tokens} tokens exceeds the KV cache ({kv_cache_tokens} tokens)")


@dataclass(frozen=True)
class SchedulerConfig:
    """The batching knobs. The defaults are the values we serve: `model_repository/llm/config.pbtxt`
    lists every knob of this class and EngineConfig under its field name, with these values
    (tests/unit/test_llm_serving_knobs.py fails when the two differ). Change a default here and
    in the config together, or override it in the config only for a deliberate variant."""

    mode: str = "iteration"  # iteration (continuous batching) | request (gather, run to completion) | none (one at a time)
    policy: str = "fcfs"  # fcfs | priority
    max_num_seqs: int = 16  # sequences in one step (request mode: the maximum batch)
    # 80 tokens (16 decodes + a 64-token prompt chunk at full batch): a step stays near 0.25 s on the
    # 2-core EPYC, so TPOT stays inside docs/llm.md's SLO (300 ms) under 16 streams.
    max_num_batched_tokens: int = 80  # tokens in one step (decodes count one each)
    long_prefill_token_threshold: int = 80  # a prompt's chunk per step (Sarathi-Serve's chunked prefill)
    max_wait_ms: float = 0.0  # how long a partly filled step (request mode: a partly filled batch) may wait for arrivals
    max_waiting: int = 256  # waiting requests beyond which a new one is rejected
    max_loras: int = 4  # distinct LoRA adapters among the running sequences (vLLM's max_loras); a request for another waits
    enable_prefix_caching: bool = True  # share full KV blocks of equal prefixes across requests (vLLM's name)


@dataclass(frozen=True)
class EngineConfig:
    device: str = "cpu"  # cpu | cuda
    dtype: str = "float32"  # float32 | bfloat16 | float16 | auto (bfloat16 where the hardware has a fast bf16 path: llm.engine.precision)
    weights: str = "dense"  # dense (in dtype) | int8 (per output channel) | int4 (per 32 inputs): weight-only, CPU (llm.engine.linear)
    attention: str = "auto"  # decode attention: paged (our C++ kernel, in place) | padded (gathered SDPA) | auto (llm.engine.attention)
    # dense bfloat16 products: amx (our AMX kernel) | onednn (torch's) | auto (amx where it runs: llm.engine.linear)
    dense_kernel: str = "auto"
    compile_decode: bool = False  # decode-only steps as one torch.compile'd graph (llm.engine.compiled_decode); compiles at load
    block_size: int = 16  # tokens per KV block
    kv_cache_bytes: int = 2**30  # KV memory budget, preallocated as blocks (1 GiB)
    max_model_len: int = 8192  # context window (SmolLM2: 8,192)
    num_threads: int = 0  # torch intra-op threads; 0: torch's default
    # drop to one thread while it steps faster (a busy machine) and come back (llm.engine.threads); float32
    # products may then round differently, so a request's tokens can depend on the machine's load
    adaptive_threads: bool = False
    # every row's bits independent of what shares its step (bfloat16 products in blocks of 32 rows on oneDNN,
    # llm.engine.linear; our AMX products always are); false: one oneDNN product per layer however wide the step
    batch_invariant: bool = True
    max_lora_rank: int = 16  # the largest LoRA rank an adapter may have (vLLM's max_lora_rank); the slots are this wide
