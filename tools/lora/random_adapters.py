"""`python -m tools.lora.random_adapters`: any number of random LoRA adapters of one rank, in
PEFT's files, for load tests (what they say is noise; what they cost is a real adapter's).

    python -m tools.lora.random_adapters --count 16 --rank 8 --out build/adapters \
        --list model_repository/llm/1/multi_lora.json

Each adapter targets the same projections of every layer (`--target-modules`: PEFT's default
for a Llama, q_proj and v_proj, or `all` seven), with the tensor names PEFT's `save_pretrained`
writes; `--list` adds them to a model's adapter list.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

import torch

from llm.adapters import ADAPTER_LIST
from llm.artifacts import CONFIG_FILE
from llm.engine.checkpoint import LlamaDims
from llm.engine.lora import CONFIG_NAME, PROJECTIONS, WEIGHTS_NAME, module_widths
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.paths import MODEL_REPOSITORY

log = logging.getLogger("tools.lora.random_adapters")

ALL_MODULES = tuple(module for modules in PROJECTIONS.values() for module in modules)
ATTENTION_MODULES = (*PROJECTIONS["qkv"], *PROJECTIONS["o"])
PEFT_DEFAULT_MODULES = ("q_proj", "v_proj")  # what PEFT's LoraConfig adapts in a Llama when not told


def parse_modules(text: str) -> tuple[str, ...]:
    """`all`, or a comma-separated list of the projections (q_proj, ..., down_proj)."""
    if text.strip() == "all":
        return ALL_MODULES
    modules = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(set(modules) - set(ALL_MODULES))
    if unknown or not modules:
        raise argparse.ArgumentTypeError(
            f"unknown projection {unknown[0] if unknown else text!r}: choose from all, {', '.join(ALL_MODULES)}"
        )
    return modules


def write_adapter(
    folder: Path, dims: LlamaDims, seed: int, rank: int, alpha: float, modules: tuple[str, ...] = ALL_MODULES, std: float = 0.02, **config
) -> Path:
    """One random adapter in PEFT's files; `config` adds adapter_config.json fields (e.g. use_rslora)."""
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    widths = module_widths(dims)
    tensors = {}
    for layer in range(dims.num_layers):
        for module in modules:
            width_in, width_out = widths[module]
            block = "self_attn" if module in ATTENTION_MODULES else "mlp"
            prefix = f"base_model.model.model.layers.{layer}.{block}.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, width_in, generator=generator) * std
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(width_out, rank, generator=generator) * std
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / WEIGHTS_NAME))
    settings = {"peft_type": "LORA", "r": rank, "lora_alpha": alpha, "target_modules": list(modules), "bias": "none", **config}
    (folder / CONFIG_NAME).write_text(json.dumps(settings, indent=2) + "\n")
    return folder


def add_to_list(adapter_list: Path, adapters: dict[str, Path]) -> None:
    """Add (or replace) `adapters` in a model's multi_lora.json, as paths relative to it."""
    listed = json.loads(adapter_list.read_text()) if adapter_list.is_file() else {}
    for name, folder in adapters.items():
        listed[name] = os.path.relpath(folder.resolve(), adapter_list.parent.resolve())
    adapter_list.parent.mkdir(parents=True, exist_ok=True)
    adapter_list.write_text(json.dumps(listed, indent=2) + "\n")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.lora.random_adapters", description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=4, help="how many adapters (default 4)")
    parser.add_argument("--rank", type=int, default=8, help="their rank (default 8)")
    parser.add_argument("--alpha", type=float, default=16.0, help="lora_alpha (default 16: scale alpha / rank)")
    parser.add_argument(
        "--target-modules",
        type=parse_modules,
        default=PEFT_DEFAULT_MODULES,
        help="projections adapted: all, or e.g. q_proj,v_proj (PEFT's default)",
    )
    parser.add_argument("--prefix", default="random", help="names are PREFIX-0, PREFIX-1, ... (default random)")
    parser.add_argument("--out", type=Path, default=Path("build/adapters"), help="where the adapter folders go")
    parser.add_argument("--checkpoint", type=Path, default=MODEL_REPOSITORY / "llm" / "1", help="the model they adapt (its config)")
    parser.add_argument("--list", type=Path, default=None, help=f"a {ADAPTER_LIST} to add them to (e.g. the checkpoint's)")
    parser.add_argument("--seed", type=int, default=0)
    add_verbosity_flags(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    if args.count < 1 or args.rank < 1:
        log.error("--count and --rank must be at least 1")
        return 2
    config = args.checkpoint / CONFIG_FILE
    if not config.is_file():
        log.error("%s is missing: run `make export` first (the adapters take the model's shapes from it)", config)
        return 2
    dims = LlamaDims.from_json(config.read_text())
    made = {}
    for index in range(args.count):
        name = f"{args.prefix}-{index}"
        made[name] = write_adapter(args.out / name, dims, args.seed + index, args.rank, args.alpha, args.target_modules)
        log.info("wrote %s (rank %d) to %s", name, args.rank, made[name])
    if args.list is not None:
        add_to_list(args.list, made)
        log.info("listed %d adapters in %s", len(made), args.list)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
