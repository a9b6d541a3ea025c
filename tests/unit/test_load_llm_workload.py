"""The seeded LLM workload and the per-request figures: no server, a word-level tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from tools.load.llm.figures import LevelFigures, Slo
from tools.load.llm.records import CUT, StreamRecord
from tools.load.llm.workload import LengthRange, PromptSetWorkload, SharedPrefixWorkload, Tokenizer, Workload, mean_lengths, shipped_prompts


def word_tokenizer() -> Tokenizer:
    """One token per whitespace-separated word: counts are exact and easy to check."""
    vocabulary: dict[str, int] = {}
    words: list[str] = []

    def encode(text: str) -> list[int]:
        ids = []
        for word in text.split():
            if word not in vocabulary:
                vocabulary[word] = len(words)
                words.append(word)
            ids.append(vocabulary[word])
        return ids

    return Tokenizer(encode, lambda ids: " ".join(words[i] for i in ids))


def test_the_same_seed_draws_the_same_requests_and_another_seed_others() -> None:
    first = Workload(LengthRange(32, 1024), LengthRange(16, 256), count=50, seed=3).build(word_tokenizer())
    again = Workload(LengthRange(32, 1024), LengthRange(16, 256), count=50, seed=3).build(word_tokenizer())
    other = Workload(LengthRange(32, 1024), LengthRange(16, 256), count=50, seed=4).build(word_tokenizer())
    assert first == again
    assert [r.max_tokens for r in first] != [r.max_tokens for r in other]


def test_prompts_and_outputs_have_the_drawn_lengths_inside_their_ranges() -> None:
    requests = Workload(LengthRange(32, 1024), LengthRange(16, 256), count=200, seed=0).build(word_tokenizer())
    assert all(32 <= r.prompt_tokens <= 1024 and len(r.prompt.split()) == r.prompt_tokens for r in requests)
    assert all(16 <= r.max_tokens <= 256 for r in requests)
    prompt_mean, output_mean = mean_lengths(requests)
    assert 32 < prompt_mean < 1024 and 16 < output_mean < 256
    # log-uniform: short requests are the common case, the median sits well below the middle of the range
    assert np.median([r.prompt_tokens for r in requests]) < (32 + 1024) / 2


def test_every_prompt_starts_with_its_own_index_so_no_prefix_is_shared() -> None:
    requests = Workload(LengthRange(40, 40), LengthRange(16, 16), count=20, seed=0).build(word_tokenizer())
    assert [r.prompt.split()[:2] for r in requests] == [["Request", f"{i}."] for i in range(20)]
    assert len({r.prompt for r in requests}) == 20


@pytest.mark.parametrize(("text", "expected"), [("32-1024", LengthRange(32, 1024)), ("64", LengthRange(64, 64))])
def test_a_length_range_parses_from_low_high_or_one_number(text: str, expected: LengthRange) -> None:
    assert LengthRange.parse(text) == expected


@pytest.mark.parametrize("text", ["0-10", "20-10", "ten", "-5"])
def test_an_impossible_length_range_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        LengthRange.parse(text)


def record(sent: float, times: list[float], outcome: str = "ok", end: float | None = None) -> StreamRecord:
    r = StreamRecord(0, sent, outcome=outcome)
    for t in times:
        r.add_tokens(t, 1)
    r.end_s = end if end is not None else (times[-1] if times and outcome == "ok" else None)
    return r


def test_ttft_tpot_and_itl_come_from_the_token_times() -> None:
    r = record(1.0, [1.5, 1.6, 1.8, 2.1])
    assert r.ttft_s == pytest.approx(0.5)
    assert r.tpot_s == pytest.approx((2.1 - 1.5) / 3)
    assert r.itl_s == pytest.approx([0.1, 0.2, 0.3])


def test_a_response_carrying_several_tokens_counts_each_of_them() -> None:
    r = StreamRecord(0, 0.0)
    r.add_tokens(0.5, 1)
    r.add_tokens(1.0, 3)
    assert r.tokens_out == 4 and r.itl_s == pytest.approx([0.5, 0.0, 0.0])
    assert r.tpot_s == pytest.approx(0.5 / 3)


def test_goodput_counts_only_completed_requests_that_met_every_objective() -> None:
    slo = Slo(ttft_s=1.0, tpot_s=0.1)
    records = [
        record(0.0, [0.5, 0.55, 0.6]),  # good
        record(0.0, [1.5, 1.55]),  # TTFT too long
        record(0.0, [0.2, 0.5, 0.8]),  # TPOT 0.3 s
        record(0.0, [0.3, 0.35], outcome=CUT),  # fast, but never finished
        record(0.0, [0.1]),  # one token: no TPOT, TTFT decides
    ]
    figures = LevelFigures.of(records, duration_s=10.0, slo=slo)
    assert figures.goodput_rps == pytest.approx(2 / 10.0)
    assert figures.good_share == pytest.approx(2 / 5)
    assert figures.completed == 4 and figures.outcomes == {"ok": 4, CUT: 1}
    assert figures.output_tokens_per_s == pytest.approx(11 / 10.0)  # the cut request's tokens were delivered


def test_a_level_without_answers_has_no_latency_figures_rather_than_zeros() -> None:
    figures = LevelFigures.of([record(0.0, [], outcome="error")], duration_s=5.0, slo=Slo())
    assert figures.ttft_p99_ms is None and figures.tpot_p50_ms is None and figures.itl_p99_ms is None
    assert figures.goodput_rps == 0.0 and figures.output_tokens_per_s == 0.0


def test_an_slo_parses_from_seconds_and_refuses_unknown_objectives() -> None:
    assert Slo.parse("ttft=0.5,tpot=0.05") == Slo(0.5, 0.05)
    assert Slo.parse("tpot=0.2") == Slo(1.0, 0.2)
    with pytest.raises(ValueError, match="ttft"):
        Slo.parse("e2e=3")


# --- the prompt set and the shared-prefix workload ------------------------------------------


def test_the_shipped_prompt_set_is_read_without_comments_and_sent_each_once_before_any_repeats() -> None:
    prompts = shipped_prompts()
    assert len(prompts) >= 30 and not any(p.startswith("#") for p in prompts)
    requests = PromptSetWorkload(LengthRange(4, 8), count=len(prompts) + 5, seed=1).build(word_tokenizer())
    first_round = [r.prompt for r in requests[: len(prompts)]]
    assert sorted(first_round) == sorted(prompts)
    assert all(r.prompt_tokens == len(r.prompt.split()) and 4 <= r.max_tokens <= 8 for r in requests)


def test_every_shared_prefix_request_starts_with_the_same_system_prompt_of_the_asked_length() -> None:
    tokenizer = word_tokenizer()
    requests = SharedPrefixWorkload(60, LengthRange(4, 8), count=12, seed=2).build(tokenizer)
    prefixes = {r.prompt.split("\n\nQuestion: ")[0] for r in requests}
    assert len(prefixes) == 1 and len(tokenizer.encode(prefixes.pop())) == 60
    assert len({r.prompt for r in requests}) == 12  # the questions differ
    assert SharedPrefixWorkload(60, LengthRange(4, 8), count=12, seed=2).build(tokenizer) == requests
