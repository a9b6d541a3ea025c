"""Measure the engine's step time on a designed set of step shapes and fit the step cost model.

Runs `LlamaExecutor.execute` plus greedy sampling in this process (what one engine-loop step
costs, without Triton), on pure prefills, pure decodes at several batch sizes and context
lengths, and mixed steps, so every feature of the model varies on its own somewhere.
A few minutes on a 2-core CPU; the JSON names the CPU. With `lora_adapters` N > 0 the engine
also serves N random rank-8 adapters (tools.bench.llm.lora's, in a temporary folder) and
the design adds steps whose rows carry them: 1 to N adapters over all or half of a step's rows,
so the fit sees `lora_rows` and `lora_adapters` vary apart.
"""

from __future__ import annotations

import logging
import random
import statistics
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from llm.contract import EngineConfig, SamplingParams, ScheduledChunk
from tools.machine import describe_cpu
from tools.simulate.llm.step_cost import StepCostModel, StepShape

log = logging.getLogger(__name__)

BLOCK_SIZE = 16
NO_ADAPTER = -1  # llm.engine.lora.NO_ADAPTER, without importing torch here


@dataclass(frozen=True)
class Design:
    prefills: tuple[int, ...] = (16, 64, 128, 256, 512)  # prompt tokens from an empty cache
    continued: tuple[tuple[int, int], ...] = ((128, 512), (256, 768), (256, 1536))  # (chunk, cached context)
    decode_batches: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    decode_contexts: tuple[int, ...] = (64, 512, 1536)
    mixed: tuple[tuple[int, int, int], ...] = ((4, 256, 64), (8, 256, 128), (16, 512, 256), (8, 1024, 256))  # decodes, context, prefill
    # decodes, context, then a prompt's later chunk after its cached part: what a small token
    # budget makes of every long prompt (in the loop on the 2-core EPYC such steps ran 1.48x
    # a design without them predicted, decode-only steps 1.32x)
    mixed_continued: tuple[tuple[int, int, int, int], ...] = ((8, 256, 56, 256), (4, 512, 120, 128), (8, 512, 248, 512))
    repeats: int = 4  # rounds over every shape
    lora_adapters: int = 0  # random adapters served for the LoRA shapes below; 0: none, no LoRA shapes
    lora_decodes: tuple[int, ...] = (1, 4, 16, 32)  # decode batches whose rows carry adapters
    lora_context: int = 256  # cached tokens of each LoRA decode
    lora_prefills: tuple[int, ...] = (64, 256)  # prompts of one adapter from an empty cache
    lora_mixed: tuple[tuple[int, int], ...] = ((8, 128),)  # adapted decodes at lora_context plus an adapted prompt
    statistic: str = "median"  # of a shape's rounds: median (the typical step, what serving sees) or min (the undisturbed one)

    @classmethod
    def quick(cls) -> Design:
        return cls(
            prefills=(32, 128, 512),
            continued=((256, 768),),
            decode_batches=(1, 4, 16, 32),
            decode_contexts=(64, 1024),
            mixed=((8, 256, 128), (16, 512, 256)),
            mixed_continued=((8, 256, 56, 256), (8, 512, 248, 512)),
            repeats=3,
            lora_decodes=(4, 16),
            lora_prefills=(128,),
        )

    def steps(self) -> Iterator[list[tuple[int, int, int]]]:
        """Each step as (chunk length, cached context, adapter slot or NO_ADAPTER) per sequence."""
        for length in self.prefills:
            yield [(length, 0, NO_ADAPTER)]
        for length, context in self.continued:
            yield [(length, context, NO_ADAPTER)]
        for batch in self.decode_batches:
            for context in self.decode_contexts:
                yield [(1, context, NO_ADAPTER)] * batch
        for decodes, context, prefill in self.mixed:
            yield [(1, context, NO_ADAPTER)] * decodes + [(prefill, 0, NO_ADAPTER)]
        for decodes, context, chunk, cached in self.mixed_continued:
            yield [(1, context, NO_ADAPTER)] * decodes + [(chunk, cached, NO_ADAPTER)]
        yield from self.lora_steps()

    def lora_steps(self) -> Iterator[list[tuple[int, int, int]]]:
        """Steps whose rows carry adapters: each decode batch all on one adapter, spread over as
        many adapters as it has rows (up to lora_adapters), and half of it adapted; prompts of
        one adapter; adapted decodes beside an adapted prompt."""
        if self.lora_adapters < 1:
            return
        context = self.lora_context
        for batch in self.lora_decodes:
            for adapters in sorted({1, min(batch, self.lora_adapters)}):
                yield [(1, context, row % adapters) for row in range(batch)]
            if batch >= 2:
                yield [(1, context, 0 if row < batch // 2 else NO_ADAPTER) for row in range(batch)]
        for length in self.lora_prefills:
            yield [(length, 0, 0)]
        for decodes, prefill in self.lora_mixed:
            yield [(1, context, row % self.lora_adapters) for row in range(decodes)] + [(prefill, 0, 0)]


def chunks_of(step: list[tuple[int, int, int]]) -> list[ScheduledChunk]:
    """Disjoint blocks per sequence, every chunk sampled (as a decode or a prompt's last chunk)."""
    chunks, next_block = [], 0
    for seq_id, (length, context, adapter) in enumerate(step):
        blocks = -(-(context + length) // BLOCK_SIZE)
        table = tuple(range(next_block, next_block + blocks))
        next_block += blocks
        tokens = [100 + (seq_id + i) % 1000 for i in range(length)]
        chunks.append(ScheduledChunk(seq_id, tokens, context, table, True, adapter_slot=adapter))
    return chunks


def blocks_needed(design: Design) -> int:
    return max(sum(-(-(c + n) // BLOCK_SIZE) for n, c, _ in step) for step in design.steps())


def serve_random_adapters(executor, count: int, folder: Path) -> dict:
    """`count` random adapters as tools.bench.llm.lora serves them, written into `folder` and
    loaded into `executor`, one slot each (what a served multi_lora.json gives). The kernel
    reads every part of a fused projection up to the adapter's rank whatever it targets, so the
    projections adapted do not change a step's cost; the rank does. Returns what the cost model
    records of them."""
    from tools.bench.llm.lora import RANK
    from tools.simulate.llm.setup import AdapterMix

    refused = executor.load_adapters(AdapterMix(count).write(folder, executor.dims))
    if refused:
        raise RuntimeError(f"random adapters refused by the engine: {refused}")
    return {"adapters": count, "rank": RANK}


def measure(checkpoint: Path, design: Design, dtype: str = "float32", threads: int = 0, weights: str = "dense") -> StepCostModel:
    """Load and time the engine on a thread of its own, as the server's engine loop runs it: on
    the 2-core EPYC a step ran 15-25% slower from a second thread than from the main one (one
    run each: 4 decodes 114-124 ms against 91-95 ms, torch's OpenMP teams per calling thread)."""
    result: list[StepCostModel] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            result.append(_measure(checkpoint, design, dtype, threads, weights))
        except BaseException as exc:  # re-raised on the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run, name="llm-calibration", daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return result[0]


def _measure(checkpoint: Path, design: Design, dtype: str, threads: int, weights: str) -> StepCostModel:
    """The step cost of one weight format and dtype (`auto` resolved on this CPU): a model
    fitted on one format prices another's steps wrongly (int4 decodes ran 2.4x faster than
    bfloat16 ones at one sequence and 1.4x slower at 32 on the AMX Xeon)."""
    from llm.engine.executor import LlamaExecutor
    from llm.engine.precision import resolve_dtype
    from tools.simulate.llm.engine_sim import kv_bytes_per_token
    from tools.simulate.llm.setup import DTYPE_BYTES, checkpoint_dims

    blocks = blocks_needed(design)
    dtype = resolve_dtype(dtype, "cpu")
    per_block = kv_bytes_per_token(checkpoint_dims(checkpoint), DTYPE_BYTES[dtype]) * BLOCK_SIZE
    config = EngineConfig(dtype=dtype, block_size=BLOCK_SIZE, kv_cache_bytes=(blocks + 1) * per_block, num_threads=threads, weights=weights)
    executor = LlamaExecutor.from_checkpoint(checkpoint, config)
    if executor.num_blocks < blocks:
        raise RuntimeError(f"the calibration KV cache holds {executor.num_blocks} blocks, {blocks} needed")
    with tempfile.TemporaryDirectory(prefix="llm-calibration-adapters-") as folder:
        lora = serve_random_adapters(executor, design.lora_adapters, Path(folder)) if design.lora_adapters else None
        return _fit(executor, design, checkpoint, dtype, weights, lora)


def _fit(executor, design: Design, checkpoint: Path, dtype: str, weights: str, lora: dict | None) -> StepCostModel:
    import torch

    from llm.sampling import Sampler, SamplingRow

    sampler = Sampler(frozenset(executor.eos_token_ids))
    greedy = SamplingParams(max_tokens=1, temperature=0.0)

    def step(chunks: list[ScheduledChunk]) -> float:
        started = time.perf_counter()
        logits = executor.execute(chunks)
        sampler.sample(logits, [SamplingRow(greedy, 0, None) for _ in chunks])
        return time.perf_counter() - started

    layouts = [chunks_of(layout) for layout in design.steps()]
    for chunks in layouts:
        step(chunks)  # warm-up
    if design.statistic not in ("median", "min"):
        raise ValueError(f"statistic must be median or min, got {design.statistic!r}")
    times: list[list[float]] = [[] for _ in layouts]
    order = random.Random(0)
    for round_ in range(design.repeats):  # rounds over every shape in a shuffled order: a burst of
        indices = list(range(len(layouts)))  # another process's load spoils one sample, not a shape
        order.shuffle(indices)
        for index in indices:
            times[index].append(step(layouts[index]))
        log.info("round %d of %d done", round_ + 1, design.repeats)
    pick = statistics.median if design.statistic == "median" else min
    best = [pick(samples) for samples in times]
    shapes = [StepShape.of(chunks) for chunks in layouts]
    seconds = best
    engine = {
        "checkpoint": str(checkpoint),
        "dtype": dtype,
        "weights": weights,
        "attention": executor.config.attention,  # auto resolved: the paged kernel or padded SDPA
        "dense_kernel": executor.config.dense_kernel,  # auto resolved: our AMX products or oneDNN's
        "threads": torch.get_num_threads(),
        "block_size": BLOCK_SIZE,
        "statistic": design.statistic,
    }
    if lora is not None:
        engine["lora"] = lora
    model = StepCostModel.fitted(shapes, seconds, machine=describe_cpu(), engine=engine)
    samples = [{**vars(s), "seconds": round(t, 6), "predicted": round(model.seconds(s), 6)} for s, t in zip(shapes, seconds)]
    return StepCostModel(model.coefficients, model.machine, model.engine, {**model.fit, "steps": samples})
