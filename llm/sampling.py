"""Next tokens from a step's logits: greedy, temperature, top-k, top-p, seeds, min_tokens.

One pass over the whole batch (one sort, one softmax); the random draw is the exponential
race (argmax of p / E with E ~ Exp(1), equivalent to sampling from p), so every row's noise
can come from its own generator: a seeded request draws from a `torch.Generator` seeded once
for it and consumes exactly one vocabulary-sized draw per token, so its text does not depend
on what else shares its steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from llm.contract import SamplingParams


@dataclass
class SamplingRow:
    """What the sampler needs about one sequence this step."""

    params: SamplingParams
    num_output_tokens: int  # generated so far (min_tokens suppresses EOS below it)
    generator: torch.Generator | None = None  # set for a seeded request


def make_generator(params: SamplingParams) -> torch.Generator | None:
    """One generator per seeded request, made at submission and kept for its whole life."""
    if params.seed is None:
        return None
    generator = torch.Generator(device="cpu")
    generator.manual_seed(params.seed)
    return generator


class Sampler:
    def __init__(self, eos_token_ids: frozenset[int]) -> None:
        self.eos_token_ids = sorted(eos_token_ids)

    def sample(self, logits: torch.Tensor, rows: Sequence[SamplingRow]) -> list[int]:
        """One token per row of `logits` [rows, vocabulary]."""
        if logits.shape[0] != len(rows):
            raise ValueError(f"{logits.shape[0]} logit rows for {len(rows)} sequences")
        if not rows:
            return []
        logits = logits.detach().to(device="cpu", dtype=torch.float32).clone()
        self._suppress_eos(logits, rows)
        greedy = torch.tensor([row.params.temperature == 0 for row in rows])
        if bool(greedy.all()):
            return logits.argmax(dim=-1).tolist()
        temperature = torch.tensor([row.params.temperature or 1.0 for row in rows]).unsqueeze(1)
        logits = self._top_k_top_p(logits / temperature, rows)
        probs = torch.softmax(logits, dim=-1)
        noise = self._exponential_noise(probs, rows)
        sampled = (probs / noise).argmax(dim=-1)
        return torch.where(greedy, logits.argmax(dim=-1), sampled).tolist()

    def _suppress_eos(self, logits: torch.Tensor, rows: Sequence[SamplingRow]) -> None:
        """Below min_tokens a row cannot end: its EOS logits become -inf."""
        if not self.eos_token_ids:
            return
        early = [i for i, row in enumerate(rows) if row.num_output_tokens < row.params.min_tokens]
        if early:
            logits[torch.tensor(early).unsqueeze(1), torch.tensor(self.eos_token_ids).unsqueeze(0)] = float("-inf")

    @staticmethod
    def _top_k_top_p(logits: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
        top_k = [row.params.top_k for row in rows]
        top_p = [row.params.top_p for row in rows]
        if all(k <= 0 for k in top_k) and all(p >= 1.0 for p in top_p):
            return logits
        vocabulary = logits.shape[-1]
        ordered, order = logits.sort(dim=-1, descending=True)
        rank = torch.arange(vocabulary).unsqueeze(0)
        k = torch.tensor([k if k > 0 else vocabulary for k in top_k]).unsqueeze(1)
        drop = rank >= k
        probs = torch.softmax(ordered.masked_fill(drop, float("-inf")), dim=-1)
        before = probs.cumsum(dim=-1) - probs  # mass of the strictly better tokens
        drop |= before >= torch.tensor(top_p).unsqueeze(1)  # the best token is always kept
        ordered = ordered.masked_fill(drop, float("-inf"))
        return torch.empty_like(logits).scatter_(-1, order, ordered)

    @staticmethod
    def _exponential_noise(probs: torch.Tensor, rows: Sequence[SamplingRow]) -> torch.Tensor:
        noise = torch.empty_like(probs).exponential_()
        for i, row in enumerate(rows):
            if row.generator is not None and row.params.temperature != 0:
                noise[i].exponential_(generator=row.generator)
        return noise
