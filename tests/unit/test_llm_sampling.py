"""The sampler: greedy, temperature, top-k, top-p, per-request seeds, min_tokens."""

from __future__ import annotations

import torch

from llm.contract import SamplingParams
from llm.sampling import Sampler, SamplingRow, make_generator

EOS = 0


def row(**params) -> SamplingRow:
    p = SamplingParams(**params)
    return SamplingRow(p, num_output_tokens=0, generator=make_generator(p))


def test_temperature_zero_is_argmax() -> None:
    logits = torch.tensor([[0.0, 1.0, 3.0, 2.0], [5.0, 1.0, 0.0, 0.0]])
    assert Sampler(frozenset()).sample(logits, [row(temperature=0), row(temperature=0)]) == [2, 0]


def test_top_k_one_is_greedy_at_any_temperature() -> None:
    logits = torch.randn(8, 50, generator=torch.Generator().manual_seed(0))
    tokens = Sampler(frozenset()).sample(logits, [row(temperature=2.0, top_k=1) for _ in range(8)])
    assert tokens == logits.argmax(dim=-1).tolist()


def test_top_k_draws_only_among_the_k_best() -> None:
    logits = torch.randn(1, 50, generator=torch.Generator().manual_seed(1)).repeat(200, 1)
    tokens = Sampler(frozenset()).sample(logits, [row(temperature=5.0, top_k=3) for _ in range(200)])
    assert set(tokens) <= set(logits[0].topk(3).indices.tolist())
    assert len(set(tokens)) == 3


def test_top_p_keeps_the_smallest_set_reaching_p() -> None:
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = probs.log().repeat(300, 1)
    tokens = Sampler(frozenset()).sample(logits, [row(top_p=0.75) for _ in range(300)])
    assert set(tokens) == {0, 1}


def test_sampling_follows_the_distribution() -> None:
    probs = torch.tensor([0.7, 0.2, 0.1])
    torch.manual_seed(3)
    tokens = Sampler(frozenset()).sample(probs.log().repeat(3000, 1), [row() for _ in range(3000)])
    share = torch.bincount(torch.tensor(tokens), minlength=3) / 3000
    assert torch.allclose(share, probs, atol=0.04)


def test_a_seeded_request_draws_the_same_tokens_whatever_shares_its_steps() -> None:
    sampler = Sampler(frozenset())
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(2))

    def draws(batch_rows: list[SamplingRow]) -> list[int]:
        """Ten steps; the seeded request is row 0."""
        return [sampler.sample(logits[: len(batch_rows)], batch_rows)[0] for _ in range(10)]

    alone = draws([row(temperature=1.5, seed=42)])
    crowded = draws([row(temperature=1.5, seed=42), row(temperature=1.0), row(temperature=0.7, seed=7), row(temperature=0)])
    assert alone == crowded
    assert draws([row(temperature=1.5, seed=43)]) != alone


def test_below_min_tokens_eos_cannot_be_sampled() -> None:
    logits = torch.tensor([[9.0, 1.0, 0.0], [9.0, 1.0, 0.0]])
    early = SamplingRow(SamplingParams(temperature=0, min_tokens=2), num_output_tokens=1)
    due = SamplingRow(SamplingParams(temperature=0, min_tokens=2), num_output_tokens=2)
    assert Sampler(frozenset({EOS})).sample(logits, [early, due]) == [1, EOS]


def test_a_nucleus_wider_than_the_candidates_is_still_exact() -> None:
    logits = torch.zeros(400, 1000)  # flat: top_p 0.5 keeps 500 tokens, far more than the candidates
    logits[:, 500:] = -1.0  # the better half
    tokens = Sampler(frozenset()).sample(-logits, [row(top_p=0.5) for _ in range(400)])
    assert all(t >= 500 for t in tokens) and len(set(tokens)) > 100


def test_top_k_then_top_p_renormalise_over_the_k_best() -> None:
    probs = torch.tensor([0.4, 0.3, 0.2, 0.1])  # top_k 2 -> 0.57 / 0.43: top_p 0.5 keeps only the best
    tokens = Sampler(frozenset()).sample(probs.log().repeat(200, 1), [row(top_k=2, top_p=0.5) for _ in range(200)])
    assert set(tokens) == {0}
