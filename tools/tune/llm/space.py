"""The scheduler knobs searched and the order of candidates under an SLO (tools/simulate/llm/slo.py).

A candidate meets the SLO when its level's TTFT p99 and TPOT p99 are inside the targets and
no request failed; among those the most goodput wins (DistServe's: requests meeting both
targets themselves, per second), then output tokens/s. Candidates missing the SLO rank
below every one that meets it, by goodput, then by how far the worse percentile misses.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from tools.load.llm.figures import LevelFigures
from tools.simulate.llm.slo import LlmSlo


def score(figures: LevelFigures, slo: LlmSlo) -> tuple:
    """Larger is better (for sorted(..., reverse=True))."""
    meets = slo.met_by(figures)
    return (meets, figures.goodput_rps, figures.output_tokens_per_s if meets else -slo.overshoot(figures))


@dataclass(frozen=True)
class LlmSpace:
    max_num_seqs: tuple[int, ...] = (2, 4, 8, 16, 32)
    max_num_batched_tokens: tuple[int, ...] = (64, 128, 256, 512, 1024)
    long_prefill_token_threshold: tuple[int, ...] = (32, 64, 128, 256, 512)
    policy: tuple[str, ...] = ("fcfs",)  # priority ranks like fcfs when no request sets a priority
    max_wait_ms: tuple[float, ...] = (0.0, 50.0, 200.0)  # empty: not a knob of the engine (vLLM has none)
    engine: str = "native"  # vllm: long_prefill_token_threshold 0 is "no cap" (the budget), no max-wait
    max_loras: tuple[int, ...] = ()  # empty: not searched (a workload without adapters: for_adapters)

    @classmethod
    def quick(cls) -> LlmSpace:
        return cls(
            max_num_seqs=(2, 4, 8, 16),
            max_num_batched_tokens=(64, 128, 256, 512),
            long_prefill_token_threshold=(64, 128, 256),
            max_wait_ms=(0.0, 100.0),
        )

    @classmethod
    def vllm(cls, quick: bool = False) -> LlmSpace:
        """vLLM's knobs. Every new max_num_batched_tokens costs a torch.compile at the reload
        (~75 s on 2 cores, ~35 s once cached), so the budgets are few."""
        if quick:
            return cls((4, 8, 16), (256, 512), (0, 64), max_wait_ms=(), engine="vllm")
        return cls((2, 4, 8, 16, 32), (128, 256, 512, 1024), (0, 64, 128, 256), max_wait_ms=(), engine="vllm")

    @classmethod
    def for_engine(cls, engine: str, quick: bool = False) -> LlmSpace:
        if engine == "vllm":
            return cls.vllm(quick)
        return cls.quick() if quick else cls()

    def for_adapters(self, adapters: int, quick: bool = False) -> LlmSpace:
        """This space with `max_loras` searched when the workload names `adapters` adapters: from
        1 (one adapter per step, what an instance per adapter gives) up to all of them at once,
        by doubling (quick: 1, the middle and all). A cap above the count acts as the count, so
        none is tried. Without adapters the knob changes nothing and is not searched."""
        if adapters < 1:
            return self
        if quick:
            values = {1, max(1, adapters // 2), adapters}
        else:
            values = {2**power for power in range(adapters.bit_length()) if 2**power < adapters} | {adapters}
        return dataclasses.replace(self, max_loras=tuple(sorted(values)))

    @property
    def knobs(self) -> tuple[str, ...]:
        """The config parameters a candidate sets."""
        names = ("max_num_seqs", "max_num_batched_tokens", "long_prefill_token_threshold", "policy", "max_wait_ms")
        names = names if self.engine == "native" else names[:-1]
        return (*names, "max_loras") if self.max_loras else names

    def with_axes(self, **axes: Sequence) -> LlmSpace:
        """This space with the given axes replaced (`--max-num-seqs 4,8` and the like); an
        empty axis keeps this space's values."""
        unknown = set(axes) - set(self.knobs)
        if unknown:
            raise ValueError(f"no such knob in the {self.engine} engine's search space: {', '.join(sorted(unknown))}")
        return dataclasses.replace(self, **{name: tuple(values) for name, values in axes.items() if values})

    def candidates(self) -> Iterator[dict[str, str]]:
        """Every valid combination as config `parameters` (a chunk larger than the budget is
        the budget: such duplicates are left out, and on vLLM a chunk of the whole budget too,
        which is its 0; the budget must cover one token per sequence)."""
        waits: tuple[float | None, ...] = self.max_wait_ms if self.engine == "native" else (None,)
        loras: tuple[int | None, ...] = self.max_loras or (None,)
        for seqs, budget, chunk, policy, wait, adapters in itertools.product(
            self.max_num_seqs, self.max_num_batched_tokens, self.long_prefill_token_threshold, self.policy, waits, loras
        ):
            if budget < seqs or chunk > budget or (self.engine == "vllm" and chunk == budget):
                continue
            candidate = {
                "max_num_seqs": str(seqs),
                "max_num_batched_tokens": str(budget),
                "long_prefill_token_threshold": str(chunk),
                "policy": policy,
            }
            if wait is not None:
                candidate["max_wait_ms"] = f"{wait:g}"
            if adapters is not None:
                candidate["max_loras"] = str(adapters)
            yield candidate


def label(parameters: Mapping[str, str]) -> str:
    short = {
        "max_num_seqs": "seqs",
        "max_num_batched_tokens": "budget",
        "long_prefill_token_threshold": "chunk",
        "max_wait_ms": "wait_ms",
        "max_loras": "loras",
    }
    return " ".join(f"{short.get(k, k)}={v}" for k, v in parameters.items() if k in short or k == "policy")
