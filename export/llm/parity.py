"""The LLM parity gate: our engine's greedy tokens against transformers'.

Our side runs the way serving does, minus the scheduler: every step is one `execute()` over
all sequences (prompt chunks through the paged KV cache while other sequences already decode,
blocks handed out as sequences grow, so tables interleave), greedy argmax. The reference is
one transformers forward per prompt over the prompt plus our tokens (teacher forcing): our
tokens equal transformers' greedy tokens exactly when, at every position, our token is
transformers' argmax after the same prefix, and it costs one forward instead of 32 steps.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import torch

from export.errors import ParityError
from llm.contract import ScheduledChunk, StepExecutor


@dataclass
class GreedyRun:
    tokens: list[list[int]]  # new tokens per prompt
    logits: list[torch.Tensor]  # [new tokens, vocabulary] per prompt: the logits each token was picked from
    steps: int
    seconds: float


def greedy_generate(executor: StepExecutor, prompts: Sequence[Sequence[int]], new_tokens: int, chunk_tokens: int) -> GreedyRun:
    """All prompts at once, `chunk_tokens` of prompt per sequence and step, then batched decodes."""
    started = time.perf_counter()
    tables: list[list[int]] = [[] for _ in prompts]
    next_block = 0
    fed = [0] * len(prompts)  # tokens of each sequence in the KV cache
    tokens: list[list[int]] = [[] for _ in prompts]
    logits: list[list[torch.Tensor]] = [[] for _ in prompts]
    steps = 0
    while any(len(generated) < new_tokens for generated in tokens):
        chunks, order = [], []
        for seq, prompt in enumerate(prompts):
            if len(tokens[seq]) >= new_tokens:
                continue
            if fed[seq] < len(prompt):
                chunk = list(prompt[fed[seq] : fed[seq] + chunk_tokens])
            else:
                chunk = [tokens[seq][-1]]
            end = fed[seq] + len(chunk)
            while len(tables[seq]) * executor.block_size < end:
                if next_block >= executor.num_blocks:
                    raise ParityError(f"the gate's KV cache ({executor.num_blocks} blocks) is too small")
                tables[seq].append(next_block)
                next_block += 1
            sample = end >= len(prompt)
            chunks.append(ScheduledChunk(seq, chunk, fed[seq], tuple(tables[seq]), sample))
            if sample:
                order.append(seq)
            fed[seq] = end
        step_logits = executor.execute(chunks)
        steps += 1
        for row, seq in enumerate(order):
            logits[seq].append(step_logits[row])
            tokens[seq].append(int(step_logits[row].argmax()))
    return GreedyRun(tokens, [torch.stack(rows) for rows in logits], steps, time.perf_counter() - started)


def reference_logits(hf_model, prompt: Sequence[int], generated: Sequence[int]) -> torch.Tensor:
    """transformers' logits [len(generated), vocabulary] after the prompt and each prefix of `generated`."""
    ids = torch.tensor([list(prompt) + list(generated[:-1])])
    with torch.no_grad():
        return hf_model(ids, logits_to_keep=len(generated)).logits[0].float()


@dataclass
class LlmParityReport:
    dtype: str
    prompt_tokens: list[int]
    new_tokens: int
    top1_agreement: float  # share of positions where our token is the reference's argmax
    min_agreement: float
    max_abs_logit_diff: float | None  # over every generated position (None: the engine returns no logits)
    last_step_max_abs_diff: float | None  # the last position of every prompt
    mismatches: list[dict] = field(default_factory=list)  # the first few: prompt, position, ours, reference, reference's margin
    steps: int = 0
    engine_s: float = 0.0
    reference_s: float = 0.0
    weights: str = "dense"  # the engine's weight format (llm.engine.linear)

    @property
    def passed(self) -> bool:
        return self.top1_agreement >= self.min_agreement

    def summary(self) -> str:
        logits = (
            "no logits to compare"
            if self.max_abs_logit_diff is None
            else f"max |logit diff| {self.max_abs_logit_diff:.2e} (last step {self.last_step_max_abs_diff:.2e})"
        )
        weights = "" if self.weights == "dense" else f" with {self.weights} weights"
        return (
            f"{self.dtype}{weights}: top-1 agreement {self.top1_agreement:.1%} (needs {self.min_agreement:.0%}) over "
            f"{len(self.prompt_tokens)} prompts x {self.new_tokens} tokens (prompts of {min(self.prompt_tokens)}-"
            f"{max(self.prompt_tokens)} tokens), {logits}; engine {self.engine_s:.1f} s{f' in {self.steps} steps' if self.steps else ''}, "
            f"transformers {self.reference_s:.1f} s"
        )

    def as_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def check_llm_parity(
    executor: StepExecutor,
    hf_model,
    prompts: Sequence[Sequence[int]],
    dtype: str,
    min_agreement: float,
    new_tokens: int = 32,
    chunk_tokens: int = 128,
    raise_below: bool = True,
    weights: str = "dense",
) -> LlmParityReport:
    """Raises ParityError (with the report's figures) when agreement is below `min_agreement`,
    unless `raise_below` is off (then the report says passed=False)."""
    run = greedy_generate(executor, prompts, new_tokens, chunk_tokens)
    return judge_greedy_tokens(
        hf_model, prompts, run.tokens, dtype, min_agreement, run.logits, run.steps, run.seconds, raise_below, weights
    )


def judge_greedy_tokens(
    hf_model,
    prompts: Sequence[Sequence[int]],
    tokens: Sequence[Sequence[int]],
    dtype: str,
    min_agreement: float,
    logits: Sequence[torch.Tensor] | None = None,
    steps: int = 0,
    engine_s: float = 0.0,
    raise_below: bool = True,
    weights: str = "dense",
) -> LlmParityReport:
    """An engine's greedy `tokens` per prompt against transformers' argmax after the same prefixes;
    with the engine's `logits` the differences are reported too (an engine that returns only
    tokens, such as vLLM, leaves them None). Raises ParityError below `min_agreement` when
    `raise_below`."""
    started = time.perf_counter()
    agree = total = 0
    max_diff = last_diff = None if logits is None else 0.0
    mismatches: list[dict] = []
    for index, (prompt, ours) in enumerate(zip(prompts, tokens)):
        reference = reference_logits(hf_model, prompt, ours)
        if logits is not None:
            diff = (logits[index] - reference).abs()
            max_diff, last_diff = max(max_diff, float(diff.max())), max(last_diff, float(diff[-1].max()))
        best = reference.topk(2, dim=-1)
        for position, token in enumerate(ours):
            total += 1
            if token == int(best.indices[position, 0]):
                agree += 1
            elif len(mismatches) < 5:
                margin = float(best.values[position, 0] - reference[position, token])
                mismatches.append(
                    {"prompt": index, "position": position, "ours": token, "reference": int(best.indices[position, 0]), "margin": margin}
                )
    report = LlmParityReport(
        dtype=dtype,
        prompt_tokens=[len(prompt) for prompt in prompts],
        new_tokens=max(len(ours) for ours in tokens),
        top1_agreement=agree / total,
        min_agreement=min_agreement,
        max_abs_logit_diff=max_diff,
        last_step_max_abs_diff=last_diff,
        mismatches=mismatches,
        steps=steps,
        engine_s=engine_s,
        reference_s=time.perf_counter() - started,
        weights=weights,
    )
    if raise_below and not report.passed:
        raise ParityError(f"LLM parity gate failed: {report.summary()}; first mismatches: {mismatches}")
    return report
