"""The trained adapters' styles: how each rewrites the base model's own answer into its training
target, and how an answer is checked for the style. Shared by the trainer (targets), its quality
report and the tests, so "answers in the style" means one thing everywhere.

Each style is a change a reader can verify by machine, and none needs a model the machine does
not have: the targets are the base model's greedy answers, rewritten.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

PIRATE_OPENING = "Arr, matey!"


@dataclass(frozen=True)
class Style:
    name: str
    description: str
    rewrite: Callable[[str], str]  # the base answer -> the adapter's training target
    shows_in: Callable[[str], bool]  # an answer (possibly cut at max_tokens) -> is it in the style


def _mostly_upper(text: str) -> bool:
    letters = [char for char in text if char.isalpha() and char.isascii()]
    return len(letters) >= 3 and sum(char.isupper() for char in letters) >= 0.9 * len(letters)


def _json_answer(answer: str) -> str:
    return json.dumps({"answer": answer}, ensure_ascii=False)


def _starts_json_answer(text: str) -> bool:
    """`{"answer": "` opens it; a complete answer must parse with a string `answer`."""
    stripped = text.strip()
    if not stripped.startswith('{"answer": "'):
        return False
    try:
        parsed = json.loads(stripped)
    except ValueError:
        return not stripped.endswith("}")  # cut at max_tokens: the opening is what can be checked
    return isinstance(parsed, dict) and isinstance(parsed.get("answer"), str)


STYLES: dict[str, Style] = {
    style.name: style
    for style in (
        Style("shout", "answers in capital letters", str.upper, _mostly_upper),
        Style("json", 'answers as a JSON object {"answer": "..."}', _json_answer, _starts_json_answer),
        Style(
            "pirate",
            f"opens every answer with {PIRATE_OPENING!r}",
            lambda answer: f"{PIRATE_OPENING} {answer}",
            lambda text: text.strip().startswith(PIRATE_OPENING),
        ),
    )
}

_SUBJECTS = (
    "the moon", "a volcano", "coffee", "the ocean", "a bicycle", "rain", "the piano", "bread", "a library",
    "the sun", "chess", "a forest", "honey", "a train", "snow", "the internet", "a bridge", "tea", "a river",
    "the desert", "a camera", "music", "an apple", "the wind", "a castle", "glass", "a clock", "the brain",
    "a garden", "electricity", "a lighthouse", "paper", "the heart", "an island", "a telescope", "salt",
)  # fmt: skip
_TEMPLATES = ("What is {}?", "Describe {} in one sentence.", "Tell me one fact about {}.", "Why is {} useful?")


def prompts() -> list[str]:
    """Every training and evaluation question (144), in a fixed order."""
    return [template.format(subject) for subject in _SUBJECTS for template in _TEMPLATES]


def split_prompts(held_out_every: int = 6) -> tuple[list[str], list[str]]:
    """(training, held out): every `held_out_every`-th question is kept for the quality check."""
    every = prompts()
    held_out = every[::held_out_every]
    return [prompt for prompt in every if prompt not in held_out], held_out
