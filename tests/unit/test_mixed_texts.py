"""The mixed-length workload: exact token counts in the model's own tokenizer, shares, uniqueness (no server)."""

from __future__ import annotations

import argparse
from collections import Counter

import pytest
from tokenizers import Tokenizer

from tests.unit import fake_tritonclient
from tools.load.mixed_texts import DEFAULT_TOKENIZER, LONG, SHORT, LengthMix, MixedTexts, parse_token_range
from tools.load.requests import mixed_target
from tools.loadgen.cli_args import add_load_arguments, target_from_args

pytestmark = pytest.mark.skipif(not DEFAULT_TOKENIZER.is_file(), reason="needs the exported tokenizer.json (make export)")


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(DEFAULT_TOKENIZER))
    tokenizer.no_padding()
    tokenizer.no_truncation()
    return tokenizer


def test_every_text_has_exactly_its_announced_token_count(tokenizer: Tokenizer) -> None:
    texts = MixedTexts(LengthMix(chinese_share=0.5), seed=4)
    for index in range(600):
        text = texts.request(index)
        assert len(tokenizer.encode(text.text).ids) == text.tokens, text


def test_classes_follow_the_asked_shares_and_ranges() -> None:
    mix = LengthMix(passage_share=0.3, short_tokens=(5, 30), long_tokens=(100, 256), chinese_share=0.25)
    source = MixedTexts(mix, seed=1)
    texts = [source.request(i) for i in range(4000)]
    classes = Counter(text.length_class for text in texts)
    assert classes[LONG] / len(texts) == pytest.approx(0.3, abs=0.03)
    assert all(5 <= t.tokens <= 30 for t in texts if t.length_class == SHORT)
    assert all(100 <= t.tokens <= 256 for t in texts if t.length_class == LONG)
    chinese = sum(any("\u4e00" <= c <= "\u9fff" for c in t.text[3:]) for t in texts)
    assert chinese / len(texts) == pytest.approx(0.25, abs=0.03)
    assert sum(t.tokens for t in texts) / len(texts) == pytest.approx(mix.mean_tokens, rel=0.05)


def test_texts_are_unique_within_a_run_and_differ_between_runs() -> None:
    source = MixedTexts(seed=2)
    first = [source.request(i).text for i in range(3000)]
    assert len(set(first)) == len(first)
    again = MixedTexts(seed=2)
    assert again.request(0).text != first[0]  # a new nonce: earlier runs' cached answers never match


def test_the_same_seed_and_nonce_give_the_same_workload() -> None:
    a, b = MixedTexts(seed=3, nonce=11), MixedTexts(seed=3, nonce=11)
    assert [a.request(i) for i in range(50)] == [b.request(i) for i in range(50)]


@pytest.mark.parametrize(
    ("mix", "message"),
    [
        ({"passage_share": 1.5}, "passage share"),
        ({"short_tokens": (30, 5)}, "low <= high"),
        ({"short_tokens": (2, 10)}, "low <= high"),
    ],
)
def test_bad_mixes_are_refused(mix: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        LengthMix(**mix)


def test_lengths_beyond_the_models_limit_are_refused() -> None:
    with pytest.raises(ValueError, match="256-token limit"):
        MixedTexts(LengthMix(long_tokens=(100, 300)))


def test_token_ranges_parse_from_the_command_line() -> None:
    assert parse_token_range("5-30") == (5, 30)
    with pytest.raises(ValueError, match="LOW-HIGH"):
        parse_token_range("30")


EMBED_CONFIG = {"name": "embed", "input": [{"name": "TEXT", "data_type": "TYPE_STRING"}], "output": [{"name": "EMBEDDING"}]}
ENCODER_CONFIG = {
    "name": "encoder",
    "input": [{"name": "INPUT_IDS", "data_type": "TYPE_INT64"}, {"name": "ATTENTION_MASK", "data_type": "TYPE_INT64"}],
}


def test_the_load_generator_sends_mixed_texts_and_knows_each_class() -> None:
    parser = argparse.ArgumentParser()
    add_load_arguments(parser)
    target = target_from_args(parser.parse_args(["--texts", "mixed", "--passage-share", "0.5"]), EMBED_CONFIG)
    assert "50% 100-256 tokens" in target.describe
    classes = Counter()
    for index in range(400):
        target.make_inputs(fake_tritonclient, index)
        classes[target.request_class(index)[0]] += 1
    assert set(classes) == {SHORT, LONG}
    with pytest.raises(ValueError, match="takes token ids"):
        target_from_args(parser.parse_args(["--texts", "mixed", "--model", "encoder"]), ENCODER_CONFIG)


def test_a_second_run_of_the_same_target_sends_new_texts() -> None:
    """The engine numbers requests from 0 in every run; the response cache must still never answer."""
    target = mixed_target()
    sent = []
    for _run in range(2):
        for index in range(50):
            (tensor,) = target.make_inputs(fake_tritonclient, index)
            sent.append(tensor.array[0, 0])
            target.request_class(index)
    assert len(set(sent)) == 100
