"""The parity gate's prompts: English, Chinese, code, arithmetic, and one of about 1,000 tokens
(so chunked prefill across many KV blocks is part of what is checked)."""

from __future__ import annotations

import random

SHORT_PROMPTS = (
    "What is the capital of France? Answer in one sentence.",
    "Write a haiku about the sea.",
    "请用两句话介绍一下长城。",
    "Write a Python function that returns the n-th Fibonacci number.",
    "def quicksort(items):\n    # finish this function\n",
    "Explain in three sentences why the sky is blue.",
    "List three uses of a paperclip.",
)


def long_prompt(seed: int = 19, items: int = 42) -> str:
    """A made-up inventory of about 1,000 tokens followed by a question about it."""
    rng = random.Random(seed)
    fruits = ["apples", "pears", "plums", "cherries", "lemons", "figs", "melons", "grapes", "oranges", "peaches"]
    places = ["north shelf", "cold room", "front counter", "back store", "loading bay", "upper rack"]
    lines = [
        f"Item {i}: {rng.randint(2, 400)} {rng.choice(fruits)} in the {rng.choice(places)}, delivered on day {rng.randint(1, 30)}."
        for i in range(1, items + 1)
    ]
    return "Here is the inventory of a small shop.\n" + "\n".join(lines) + "\nWhich fruit appears most often in the inventory?"


def parity_prompts() -> tuple[str, ...]:
    return (*SHORT_PROMPTS, long_prompt())
