"""Step times of the engine alone: pure decode at several batch sizes and one prefill.

`python -m llm.engine.step_bench [--checkpoint model_repository/llm/1] [--dtype auto] [--weights int4]
[--attention padded] [--dense-kernel onednn]`
prints milliseconds per step and the output tokens/s a decode step implies; the serving
loop adds the scheduler and sampling on top, so this is the engine's ceiling. `--profile N`
adds torch.profiler's table of the N operators that took the most time at each batch size.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import torch

from llm.contract import EngineConfig, ScheduledChunk
from llm.engine.attention import ATTENTION_CHOICES
from llm.engine.executor import LlamaExecutor
from llm.engine.linear import DENSE_KERNELS, WEIGHT_FORMATS


def time_steps(executor: LlamaExecutor, chunks: list[ScheduledChunk], repeats: int) -> float:
    """Median seconds of one execute() (after one warm-up)."""
    executor.execute(chunks)
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        executor.execute(chunks)
        if executor.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def decode_chunks(batch: int, context: int, block_size: int) -> list[ScheduledChunk]:
    """`batch` sequences, each with `context` tokens already cached, in disjoint blocks."""
    per_seq = -(-(context + 1) // block_size)
    return [ScheduledChunk(seq, [100 + seq], context, tuple(range(seq * per_seq, (seq + 1) * per_seq)), True) for seq in range(batch)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, default=Path("model_repository/llm/1"))
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16, float16 or auto (default: %(default)s)")
    parser.add_argument("--weights", default="dense", choices=WEIGHT_FORMATS, help="weight format (default: %(default)s)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--attention", default="auto", choices=ATTENTION_CHOICES, help="decode attention (default: %(default)s)")
    parser.add_argument("--dense-kernel", default="auto", choices=DENSE_KERNELS, help="dense bfloat16 products (default: %(default)s)")
    parser.add_argument("--compile-decode", action="store_true", help="decode steps as one compiled graph (the compile_decode knob)")
    parser.add_argument("--threads", type=int, default=0)
    parser.add_argument("--context", type=int, default=256)
    parser.add_argument("--batches", default="1,4,16,32")
    parser.add_argument("--prefill", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the N costliest operators per batch size")
    args = parser.parse_args(argv)
    batches = [int(b) for b in args.batches.split(",")]
    block_size = 16
    blocks = max(batches) * (-(-(args.context + 1) // block_size)) + -(-args.prefill // block_size)
    config = EngineConfig(
        device=args.device,
        dtype=args.dtype,
        block_size=block_size,
        kv_cache_bytes=blocks * 2**20,
        num_threads=args.threads,
        weights=args.weights,
        compile_decode=args.compile_decode,
        attention=args.attention,
        dense_kernel=args.dense_kernel,
    )
    executor = LlamaExecutor.from_checkpoint(args.checkpoint, config)
    compiled = f", decode compiled in {executor.compile_seconds:.0f} s" if args.compile_decode else ""
    threads = torch.get_num_threads()
    print(
        f"weights {args.weights}, {executor.config.dtype} on {args.device}, {executor.config.attention} attention, "
        f"{executor.config.dense_kernel} dense products, "
        f"{threads} threads, context {args.context}{compiled}"
    )
    prefill = [ScheduledChunk(0, list(range(100, 100 + args.prefill)), 0, tuple(range(-(-args.prefill // block_size))), True)]
    seconds = time_steps(executor, prefill, args.repeats)
    print(f"prefill {args.prefill} tokens: {seconds * 1e3:.1f} ms ({args.prefill / seconds:.0f} prompt tokens/s)")
    for batch in batches:
        seconds = time_steps(executor, decode_chunks(batch, args.context, block_size), args.repeats)
        print(f"decode batch {batch:3d}: {seconds * 1e3:.1f} ms/step -> {batch / seconds:.0f} output tokens/s")
        if args.profile:
            print(profile_table(executor, decode_chunks(batch, args.context, block_size), args.profile))


def profile_table(executor: LlamaExecutor, chunks: list[ScheduledChunk], rows: int) -> str:
    """torch.profiler's operators of three steps, costliest self time first: where a step goes."""
    from torch.profiler import ProfilerActivity, profile

    executor.execute(chunks)
    with profile(activities=[ProfilerActivity.CPU]) as profiler:
        for _ in range(3):
            executor.execute(chunks)
    return profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=rows)


if __name__ == "__main__":
    main()
