"""Mixed-length traffic: short queries and long passages, as retrieval (RAG) sends them.

Each request is a query (default 5-30 tokens, 70%) or a passage (default 100-256
tokens, 30%), counted in the model's own tokens (the exported tokenizer.json, [CLS] and
[SEP] included), English or Chinese. Texts are built to an exact token count from units
whose token counts are known (words and punctuation of real sentences; one token per
Chinese character), so no text is tokenized per request. Every text starts with a
marker that encodes a per-run nonce plus the request's index, so no two texts of a run
(or, in practice, of two runs) are equal and the response cache never answers.
Each request knows its length class, so results are reported per class.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools.paths import MODEL_REPOSITORY

DEFAULT_TOKENIZER = MODEL_REPOSITORY / "tokenizer" / "1" / "tokenizer.json"
SHORT, LONG = "short", "long"

ENGLISH = """
Dynamic batching joins requests that arrive close together into one execution of the model.
The queue delay bounds how long a request waits for others before its batch leaves.
Retrieval systems embed a short question and compare it with passages cut from long documents.
A passage of a few hundred words costs far more to encode than a question of ten words.
Where is the nearest train station, and how long does the walk take from the museum?
The committee met on Tuesday to review the budget for the new library and the park.
Researchers measured the river's temperature every hour for three years and found a slow rise.
Customers can return any item within thirty days if they keep the original receipt.
The recipe calls for two cups of flour, a pinch of salt and warm water mixed slowly.
Latency matters for interactive search, while throughput matters for indexing a large archive.
Our servers answer most requests in a few milliseconds, but long documents take longer.
She walked along the coast at sunrise and counted the boats returning from the night's work.
Modern processors run many small matrix products in parallel when the batch is large enough.
The report explains how the city plans to reduce traffic during the summer festival.
Please send the signed contract back to our office before the end of the month.
"""

CHINESE = """
动态批处理把几乎同时到达的请求合并成一次模型执行，从而提高吞吐量。
检索系统先把用户的简短问题编码成向量，再与长文档切分出的段落进行比较。
今天天气很好，我们去公园散步吧，顺便看看湖边新开的咖啡店。
机器学习模型的推理服务需要低延迟和高吞吐量，两者之间常常需要权衡。
这份报告介绍了城市在夏季节日期间减少交通拥堵的计划和具体措施。
研究人员三年来每小时测量一次河水温度，发现水温在缓慢上升。
请在月底之前把签好的合同寄回我们的办公室，谢谢你的配合。
一段几百字的文章编码起来比十个字的问题要慢得多，所以排队的方式很重要。
"""


@dataclass(frozen=True)
class LengthMix:
    """Share of passages, the token range of each class, and the share of Chinese texts."""

    passage_share: float = 0.3
    short_tokens: tuple[int, int] = (5, 30)
    long_tokens: tuple[int, int] = (100, 256)
    chinese_share: float = 0.25

    def __post_init__(self) -> None:
        if not 0.0 <= self.passage_share <= 1.0:
            raise ValueError(f"passage share must be within 0..1, got {self.passage_share}")
        if not 0.0 <= self.chinese_share <= 1.0:
            raise ValueError(f"Chinese share must be within 0..1, got {self.chinese_share}")
        for name, (low, high) in (("short", self.short_tokens), ("long", self.long_tokens)):
            if not 5 <= low <= high:
                raise ValueError(f"{name} token range {low}-{high} must satisfy 5 <= low <= high ([CLS], [SEP] and a 3-token marker)")

    @property
    def mean_tokens(self) -> float:
        return (1 - self.passage_share) * sum(self.short_tokens) / 2 + self.passage_share * sum(self.long_tokens) / 2

    def describe(self) -> str:
        short, long = self.short_tokens, self.long_tokens
        return (
            f"{1 - self.passage_share:.0%} {short[0]}-{short[1]} tokens, {self.passage_share:.0%} {long[0]}-{long[1]} tokens, "
            f"{self.chinese_share:.0%} Chinese"
        )


def parse_token_range(text: str) -> tuple[int, int]:
    """'5-30' -> (5, 30)."""
    low, sep, high = text.partition("-")
    try:
        if not sep:
            raise ValueError
        return int(low), int(high)
    except ValueError:
        raise ValueError(f"token range {text!r} is not LOW-HIGH, e.g. 5-30") from None


@dataclass(frozen=True)
class MixedText:
    text: str
    tokens: int  # [CLS] and [SEP] included
    length_class: str


MARKER_UNITS = 3  # 1000**3 distinct markers per language
_BASE = 1000


class MixedTexts:
    """Deterministic per (seed, index); unique per nonce and index."""

    def __init__(self, mix: LengthMix = LengthMix(), tokenizer_path: Path = DEFAULT_TOKENIZER, seed: int = 0, nonce: int | None = None):
        from tokenizers import Tokenizer

        path = Path(tokenizer_path)
        if not path.is_file():
            raise ValueError(f"tokenizer file {path} not found; run `make export`")
        tokenizer = Tokenizer.from_file(str(path))
        limit = (tokenizer.truncation or {}).get("max_length")
        if limit and max(mix.short_tokens[1], mix.long_tokens[1]) > limit:
            raise ValueError(f"token ranges {mix.short_tokens}, {mix.long_tokens} exceed the model's {limit}-token limit")
        tokenizer.no_padding()
        tokenizer.no_truncation()
        self.mix = mix
        self.nonce = secrets.randbelow(_BASE**MARKER_UNITS) if nonce is None else nonce
        self.units = {"en": _english_units(tokenizer), "zh": _chinese_units()}
        self.markers = {"en": _english_markers(tokenizer), "zh": [chr(0x4E00 + i) for i in range(_BASE)]}
        self.separator = {"en": " ", "zh": ""}
        self.seed = seed

    def request(self, index: int) -> MixedText:
        rng = np.random.default_rng([self.seed, index])
        is_long = rng.random() < self.mix.passage_share
        low, high = self.mix.long_tokens if is_long else self.mix.short_tokens
        tokens = int(rng.integers(low, high + 1))
        language = "zh" if rng.random() < self.mix.chinese_share else "en"
        units = self.units[language]
        value = (self.nonce + index) % _BASE**MARKER_UNITS
        parts = [self.markers[language][(value // _BASE**k) % _BASE] for k in range(MARKER_UNITS)]
        budget = tokens - 2 - MARKER_UNITS
        position = int(rng.integers(len(units)))
        while budget > 0:
            text, count = units[position % len(units)]
            if count <= budget:
                parts.append(text)
                budget -= count
            position += 1
        return MixedText(self.separator[language].join(parts), tokens, LONG if is_long else SHORT)


def _count(tokenizer, text: str) -> int:
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def _english_units(tokenizer) -> list[tuple[str, int]]:
    """Words and punctuation of the sample sentences with their token counts; the stream
    has one-token units throughout, so any budget can be filled exactly."""
    words = ENGLISH.replace(",", " ,").replace(".", " .").replace("?", " ?").split()
    units = [(word, _count(tokenizer, word)) for word in words]
    if not any(count == 1 for _, count in units):
        raise ValueError("the tokenizer splits every sample word; cannot build exact lengths")
    return [(word, count) for word, count in units if count >= 1]


def _chinese_units() -> list[tuple[str, int]]:
    """One token per character: the tokenizer isolates every CJK character and punctuation."""
    return [(char, 1) for char in CHINESE if not char.isspace()]


def _english_markers(tokenizer) -> list[str]:
    """1000 whole words of the vocabulary (each one token, being in the vocabulary)."""
    vocabulary = tokenizer.get_vocab()
    words = sorted(word for word in vocabulary if word.isascii() and word.isalpha() and word.islower() and 4 <= len(word) <= 8)
    if len(words) < _BASE:
        raise ValueError("the tokenizer's vocabulary has too few whole words for unique markers")
    step = len(words) // _BASE
    return words[::step][:_BASE]
