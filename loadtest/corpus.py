"""Request texts: a small multilingual corpus, sampled per request, with a share of repeats.

A load test that sends the same few strings measures the response cache, not the model;
one that never repeats hides the cache. So each request is either a repeat, drawn from a
small fixed pool of requests (cache hits after the first time), or made unique by a
counter suffix (always a cache miss, so the model really runs).
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field
from pathlib import Path

CORPUS_PATH = Path(__file__).resolve().parent / "data" / "corpus.tsv"
LENGTHS = ("short", "long")


@dataclass(frozen=True)
class Passage:
    length: str  # "short" (a query) or "long" (a paragraph, truncated to the model's 128 tokens)
    language: str
    text: str


def load_corpus(path: Path = CORPUS_PATH) -> list[Passage]:
    """Rows of `length<TAB>language<TAB>text`; lines starting with '#' are comments."""
    passages = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3 or parts[0] not in LENGTHS or not parts[2].strip():
            raise ValueError(f"{path}:{number}: expected 'short|long<TAB>language<TAB>text'")
        passages.append(Passage(*parts))
    return passages


@dataclass
class TextSampler:
    """Draws the texts of one request. `repeat_share` of the requests come verbatim from a
    pool of `pool_size` fixed requests per (length, count); the rest are unique."""

    passages: list[Passage]
    repeat_share: float = 0.2
    pool_size: int = 8
    rng: random.Random = field(default_factory=random.Random)
    _pools: dict[tuple[str, int], list[list[str]]] = field(default_factory=dict, init=False)
    _counter: itertools.count = field(default_factory=itertools.count, init=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.repeat_share <= 1.0:
            raise ValueError(f"repeat_share must lie in [0, 1], got {self.repeat_share}")
        if self.pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        for length in LENGTHS:
            if not any(p.length == length for p in self.passages):
                raise ValueError(f"the corpus has no {length!r} texts")

    def _choose(self, rng: random.Random, length: str, count: int) -> list[str]:
        candidates = [p.text for p in self.passages if p.length == length]
        return [rng.choice(candidates) for _ in range(count)]

    def pool(self, length: str, count: int) -> list[list[str]]:
        """The repeated requests: seeded, so every user process repeats the same ones."""
        key = (length, count)
        if key not in self._pools:
            seeded = random.Random(f"{length}-{count}")
            self._pools[key] = [self._choose(seeded, length, count) for _ in range(self.pool_size)]
        return self._pools[key]

    def sample(self, length: str, count: int = 1) -> list[str]:
        if count < 1:
            raise ValueError("a request needs at least one text")
        if self.rng.random() < self.repeat_share:
            return list(self.rng.choice(self.pool(length, count)))
        unique = f"{self.rng.getrandbits(32):08x}-{next(self._counter)}"
        return [f"{text} [{unique}]" for text in self._choose(self.rng, length, count)]
