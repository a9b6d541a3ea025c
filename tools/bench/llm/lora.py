"""`python -m tools.bench.llm.lora` (`make bench-lora`): heterogeneous batching measured. The
`llm` model serves random LoRA adapters (rank 8) and one seeded streaming load asks for them
with uniform or Zipf popularity; three ways of serving it, side by side on one server:

- mixed: requests for different adapters share every step (`max_loras` = the adapters);
- one adapter per step: `max_loras` = 1, what a model instance per adapter gives (each step's
  batch holds one adapter's requests only);
- base: the same requests without adapters, the ceiling.

    python -m tools.bench.llm.lora --quick
    python -m tools.bench.llm.lora --adapters 1,4,16 --popularity uniform,zipf --concurrency 16,32

Writes reports/bench-lora/ (JSON and Markdown, the CPU named beside the table).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import logging
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import numpy as np

from llm.artifacts import CONFIG_FILE
from llm.engine.checkpoint import LlamaDims
from tools.bench.llm.levels import Plan, level_entry, load_tokenizer, measure_target
from tools.bench.llm.lora_report import BASE, MIXED, NATIVE, ONE_PER_STEP, VLLM, write_report
from tools.bench.llm.targets import apply_mode, parse_knob_overrides
from tools.cli.arguments import number_list
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.contract import LLM_MODEL
from tools.load.llm.clients import TritonStreamClient
from tools.load.llm.figures import Slo
from tools.load.llm.workload import LengthRange, LlmRequest, Workload, mean_lengths
from tools.lora.random_adapters import PEFT_DEFAULT_MODULES, parse_modules, write_adapter
from tools.lora.repository import repository_with_adapters
from tools.machine import cpu_description
from tools.paths import BUILD_DIR, MODEL_REPOSITORY, REPO_ROOT
from tools.repo.model_config import load_config

log = logging.getLogger("tools.bench.llm.lora")

POPULARITY = ("uniform", "zipf")
FULL = Plan(concurrency=(16, 32), rates=(), seconds=30.0, drain_s=20.0, warmup_s=10.0)
QUICK = Plan(concurrency=(16,), rates=(), seconds=20.0, drain_s=15.0, warmup_s=10.0)
RANK = 8


@dataclasses.dataclass(frozen=True)
class Variant:
    """One way of serving one popularity mix: what the report's rows are."""

    way: str  # BASE, MIXED or ONE_PER_STEP
    adapters: int  # how many adapters the load asks for (0: base)
    popularity: str  # uniform | zipf ("" for base)
    engine: str = NATIVE  # NATIVE (ours) or VLLM (vLLM's engine in Triton, enable_lora)

    @property
    def name(self) -> str:
        served = BASE if self.way == BASE else f"{self.way}, {self.adapters} adapters, {self.popularity}"
        return served if self.engine == NATIVE else f"vLLM {served}"

    @property
    def max_loras(self) -> int:
        return 1 if self.way == ONE_PER_STEP else max(self.adapters, 1)


def variants(adapter_counts: Sequence[int], popularity: Sequence[str], engines: Sequence[str] = (NATIVE,)) -> list[Variant]:
    """Per engine, base once; per count and popularity, mixed and (ours) one per step (one
    adapter: one way, and its popularity cannot matter). vLLM's engine is measured mixed and
    base, its LoRA on (enable_lora) for both."""
    chosen = []
    for engine in engines:
        chosen.append(Variant(BASE, 0, "", engine))
        for count in adapter_counts:
            for mix in popularity[:1] if count == 1 else popularity:
                chosen.append(Variant(MIXED, count, mix, engine))
                if count > 1 and engine == NATIVE:
                    chosen.append(Variant(ONE_PER_STEP, count, mix))
    return chosen


def adapter_shares(count: int, popularity: str) -> np.ndarray:
    """Each adapter's share of the requests: equal, or Zipf's 1/rank (s = 1)."""
    weights = np.ones(count) if popularity == "uniform" else 1.0 / np.arange(1, count + 1)
    return weights / weights.sum()


def with_adapters(requests: Sequence[LlmRequest], variant: Variant, names: Sequence[str], seed: int) -> list[LlmRequest]:
    """The workload's requests, each naming an adapter drawn from the variant's popularity
    (seeded: the mixed and one-per-step runs of a mix send the same requests)."""
    if variant.way == BASE:
        return list(requests)
    rng = np.random.default_rng(seed)
    drawn = rng.choice(variant.adapters, size=len(requests), p=adapter_shares(variant.adapters, variant.popularity))
    return [dataclasses.replace(request, lora_name=names[int(index)]) for request, index in zip(requests, drawn)]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tools.bench.llm.lora", description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--engines", default=NATIVE, help=f"{NATIVE} (ours), {VLLM} (vLLM's engine in Triton, enable_lora) or both (default {NATIVE})"
    )
    parser.add_argument("--quick", action="store_true", help="16 adapters, uniform, 16 streams, 20 s levels (~6 min)")
    parser.add_argument("--adapters", default=None, help="adapter counts (default 1,4,16; quick 16)")
    parser.add_argument("--popularity", default=None, help="uniform, zipf or both (default both; quick uniform)")
    parser.add_argument("--concurrency", default=None, help="closed-loop streams per level (default 16,32; quick 16)")
    parser.add_argument("--seconds", type=float, default=None, help="scored sending time per level (default 30; quick 20)")
    parser.add_argument("--warmup", type=float, default=None, help="seconds of each level's load before its scored window (default 10)")
    parser.add_argument("--prompt-lengths", type=LengthRange.parse, default=LengthRange(32, 1024), help="prompt tokens, LOW-HIGH")
    parser.add_argument("--output-lengths", type=LengthRange.parse, default=LengthRange(16, 256), help="output tokens, LOW-HIGH")
    parser.add_argument(
        "--target-modules",
        type=parse_modules,
        default=PEFT_DEFAULT_MODULES,
        help="projections the adapters adapt: all, or e.g. q_proj,v_proj (PEFT's default)",
    )
    parser.add_argument("--requests", type=int, default=1000, help="size of the seeded workload")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--slo", type=Slo.parse, default=Slo.parse("ttft=3,tpot=0.3"), help="per-request objectives in seconds")
    parser.add_argument("--set", dest="overrides", type=parse_knob_overrides, default={}, help="our engine's knobs, KNOB=VALUE,...")
    parser.add_argument("--tokenizer", type=Path, default=MODEL_REPOSITORY / LLM_MODEL / "1" / "tokenizer.json")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "bench-lora")
    add_verbosity_flags(parser)
    return parser


@dataclasses.dataclass(frozen=True)
class LoraBenchSettings:
    """What one run measures, read from the command line once (`from_cli_args`)."""

    plan: Plan
    counts: tuple[int, ...]  # how many adapters each mix asks for
    mixes: tuple[str, ...]  # popularity: uniform and/or zipf
    engines: tuple[str, ...]  # NATIVE and/or VLLM
    target_modules: tuple[str, ...]
    prompt_lengths: LengthRange
    output_lengths: LengthRange
    requests: int
    seed: int
    slo: Slo
    overrides: dict[str, str]
    tokenizer: Path
    quick: bool

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> LoraBenchSettings:
        """ValueError naming the option that cannot work."""
        base = QUICK if args.quick else FULL
        concurrency = tuple(number_list(args.concurrency, int, "--concurrency")) if args.concurrency else base.concurrency
        warmup_s = base.warmup_s if args.warmup is None else args.warmup
        plan = dataclasses.replace(base, concurrency=concurrency, seconds=args.seconds or base.seconds, warmup_s=warmup_s)
        counts = tuple(number_list(args.adapters, int, "--adapters")) if args.adapters else ((16,) if args.quick else (1, 4, 16))
        mixes = tuple(part.strip() for part in (args.popularity or ("uniform" if args.quick else ",".join(POPULARITY))).split(","))
        if unknown := sorted(set(mixes) - set(POPULARITY)):
            raise ValueError(f"--popularity: unknown {unknown[0]!r}; choose from {', '.join(POPULARITY)}")
        if any(count < 1 for count in counts):
            raise ValueError("--adapters: counts are at least 1")
        engines = tuple(part.strip() for part in args.engines.split(",") if part.strip())
        if unknown := sorted(set(engines) - {NATIVE, VLLM}) or not engines:
            raise ValueError(f"--engines: unknown {unknown[0] if unknown else args.engines!r}; choose from {NATIVE}, {VLLM}")
        return cls(
            plan, counts, mixes, engines, args.target_modules, args.prompt_lengths, args.output_lengths, args.requests, args.seed, args.slo,
            args.overrides, args.tokenizer, args.quick,
        )  # fmt: skip


def run_bench(settings: LoraBenchSettings) -> dict:
    plan, counts, mixes = settings.plan, settings.counts, settings.mixes
    checkpoint = MODEL_REPOSITORY / LLM_MODEL / "1"
    if not (checkpoint / CONFIG_FILE).is_file():
        raise FileNotFoundError(f"{checkpoint / CONFIG_FILE} is missing: run `make export` first")
    workload = Workload(settings.prompt_lengths, settings.output_lengths, settings.requests, settings.seed)
    requests = workload.build(load_tokenizer(settings.tokenizer))
    mean_prompt, mean_output = mean_lengths(requests)
    dims = LlamaDims.from_json((checkpoint / CONFIG_FILE).read_text())
    names = [f"random-{index}" for index in range(max(counts))]
    chosen = variants(counts, mixes, settings.engines)
    log.info("%d ways of serving, %d levels each: %s", len(chosen), len(plan.concurrency), "; ".join(v.name for v in chosen))
    levels = []
    with tempfile.TemporaryDirectory(prefix="bench-lora-", dir=BUILD_DIR if BUILD_DIR.is_dir() else None) as work:
        root = Path(work)
        made = {
            name: write_adapter(root / "adapters" / name, dims, seed, RANK, 2.0 * RANK, settings.target_modules)
            for seed, name in enumerate(names)
        }
        repository = repository_with_adapters(root, made)
        levels = asyncio.run(measure_all(repository, root, chosen, requests, names, settings))
    return {
        "date": datetime.now().isoformat(timespec="seconds"),
        "cpu": cpu_description(),
        "load_average": round(os.getloadavg()[0], 2),
        "workload": {"description": workload.describe(), "mean_prompt_tokens": mean_prompt, "mean_output_tokens": mean_output},
        "adapters": {"rank": RANK, "counts": list(counts), "popularity": list(mixes), "target_modules": list(settings.target_modules)},
        "engines": list(settings.engines),
        "slo": settings.slo.describe(),
        "settings": {**dataclasses.asdict(plan), "overrides": settings.overrides, "quick": settings.quick},
        "variants": [dataclasses.asdict(v) | {"name": v.name, "max_loras": v.max_loras} for v in chosen],
        "levels": levels,
    }


async def measure_all(
    repository: Path,
    root: Path,
    chosen: Sequence[Variant],
    requests: Sequence[LlmRequest],
    names: Sequence[str],
    settings: LoraBenchSettings,
) -> list[dict]:
    from tools.ports import free_ports
    from tools.serve.local_triton import LocalTriton, ServerOptions

    http, grpc, metrics = free_ports(3)
    options = ServerOptions(
        model_repository=repository,
        http_port=http,
        grpc_port=grpc,
        metrics_port=metrics,
        model_control_mode="explicit",
        load_models=(LLM_MODEL,),
    )
    levels = []
    with LocalTriton(options, log_path=root / "triton.log").start() as server:
        for variant in chosen:
            if variant.engine == NATIVE:
                overrides = {**settings.overrides, "max_loras": str(variant.max_loras)}
                apply_mode(server.client, "iteration", LLM_MODEL, overrides)
            else:
                serve_on_vllm(server.client, repository, variant.max_loras)
            asked = with_adapters(requests, variant, names, settings.seed)
            runs = await measure_target(TritonStreamClient(options.grpc_url, LLM_MODEL), asked, settings.plan, settings.seed)
            for schedule, records, duration_s, late, load in runs:
                entry = level_entry(variant.name, schedule, records, duration_s, late, load, settings.slo)
                levels.append(
                    {**entry, "way": variant.way, "adapters": variant.adapters, "popularity": variant.popularity, "engine": variant.engine}
                )
    return levels


def serve_on_vllm(client, repository: Path, max_loras: int) -> None:
    """`llm` on vLLM's engine (the repository's configs/vllm.pbtxt, environment pinned) with
    LoRA on and `max_loras` adapters per step; a reload unless it runs so already."""
    config = load_config(repository / LLM_MODEL / "configs" / "vllm.pbtxt")
    config.parameters["enable_lora"].string_value = "true"
    config.parameters["max_loras"].string_value = str(max_loras)
    if client.model_ready(LLM_MODEL) and client.config(LLM_MODEL).parameters == config.parameters:
        return
    started = time.monotonic()
    client.reload(LLM_MODEL, config)
    log.info("%s reloaded on vLLM (enable_lora, max_loras %d) in %.1f s", LLM_MODEL, max_loras, time.monotonic() - started)


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    try:
        report = run_bench(LoraBenchSettings.from_cli_args(args))
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        log.error("%s", exc)
        return 2
    print("\n".join(str(path) for path in write_report(report, args.out)))
    return 0


if __name__ == "__main__":
    sys.exit(run())
