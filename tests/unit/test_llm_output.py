"""Output processing: incremental text, held-back UTF-8, stop strings, finish reasons."""

from __future__ import annotations

from llm.contract import SamplingParams
from llm.output import IncrementalDetokenizer, OutputState
from tests.unit.llm_fakes import EOS, ByteTokenizer, FakeTokenizer


def state(tokenizer=None, prompt=(), **params) -> OutputState:
    tokenizer = tokenizer or FakeTokenizer()
    return OutputState(SamplingParams(**params), frozenset({EOS}), IncrementalDetokenizer(tokenizer, list(prompt)))


def feed(output: OutputState, tokens: list[int]) -> tuple[list[str], str | None]:
    deltas = []
    for token in tokens:
        result = output.add_token(token)
        deltas.append(result.new_text)
        if result.finish_reason:
            return deltas, result.finish_reason
    return deltas, None


class CountingTokenizer(FakeTokenizer):
    def __init__(self) -> None:
        self.longest = 0

    def decode(self, ids, skip_special_tokens=True) -> str:
        self.longest = max(self.longest, len(ids))
        return super().decode(ids, skip_special_tokens)


def test_each_token_yields_its_text() -> None:
    deltas, reason = feed(state(max_tokens=3), [5, 6, 7])
    assert deltas == ["<5>", "<6>", "<7>"] and reason == "length"


def test_an_incomplete_utf8_character_is_held_back_until_complete() -> None:
    euro = list("€".encode())  # three bytes, three tokens
    deltas, _ = feed(state(ByteTokenizer(), prompt=list(b"ab"), max_tokens=10), [*euro, ord("!")])
    assert deltas == ["", "", "€", "!"]


def test_the_detokenizer_decodes_a_window_not_the_whole_output() -> None:
    tokenizer = CountingTokenizer()
    feed(state(tokenizer, prompt=list(range(1, 30)), max_tokens=500), [3] * 400)
    assert tokenizer.longest <= 8


def test_a_stop_string_spanning_tokens_cuts_the_output_before_it() -> None:
    deltas, reason = feed(state(stop=("<7><8>",), max_tokens=10), [5, 6, 7, 8, 9])
    assert reason == "stop"
    assert "".join(deltas) == "<5><6>"


def test_text_that_may_start_a_stop_string_is_held_back_then_released() -> None:
    deltas, reason = feed(state(stop=("<7><8>",), max_tokens=10), [5, 7, 9])
    assert deltas == ["<5>", "", "<7><9>"] and reason is None


def test_held_back_text_is_flushed_at_the_length_limit() -> None:
    deltas, reason = feed(state(stop=("<7><8>",), max_tokens=2), [5, 7])
    assert "".join(deltas) == "<5><7>" and reason == "length"


def test_eos_stops_without_text() -> None:
    deltas, reason = feed(state(max_tokens=10), [5, EOS, 6])
    assert deltas == ["<5>", ""] and reason == "stop"


def test_ignore_eos_keeps_generating_to_max_tokens() -> None:
    _, reason = feed(state(max_tokens=3, ignore_eos=True), [5, EOS, 6])
    assert reason == "length"


def test_before_min_tokens_neither_eos_nor_a_stop_string_ends_the_output() -> None:
    output = state(max_tokens=10, min_tokens=3, stop=("<6>",))
    deltas, reason = feed(output, [6, EOS, 5])
    assert reason is None and "".join(deltas) == "<6><5>"
    _, reason = feed(output, [6])
    assert reason == "stop"
