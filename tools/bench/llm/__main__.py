"""`python -m tools.bench.llm` (`make bench-llm`): the `llm` model's three scheduler modes, our
engine in this process with no server (`engine-loop`), the `llm` model on vLLM's engine, vLLM's
own OpenAI server and llama.cpp's llama-server under one seeded streaming load, written to
reports/bench-llm/.

Each target runs every level in turn (closed loop at each concurrency, then Poisson at each
rate), after two unmeasured warm-up requests. Without `--url` a local Triton is started
with only `llm` loaded (explicit model control); with `--url` the server's own `llm` is
reloaded per mode and its config restored at the end. `--rounds N` measures every target N
times, the order reversed every other round, and reports each figure's median
(tools/bench/llm/rounds.py).

    python -m tools.bench.llm --quick
    python -m tools.bench.llm --targets iteration,llama-server --concurrency 1,16 --rates 0.5
    python -m tools.bench.llm --targets iteration,vllm,vllm-server --concurrency 1,4,16,32 --rates ''
    python -m tools.bench.llm --targets iteration,engine-loop --concurrency 16 --rates '' --rounds 3

"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from llm.artifacts import HF_FOLDER
from tools.bench.llm.in_process import ENGINE_LOOP, EngineLoopTarget
from tools.bench.llm.levels import Plan, level_entry, load_tokenizer, measure_target
from tools.bench.llm.report import write_report
from tools.bench.llm.rounds import merge_rounds, round_order
from tools.bench.llm.targets import (
    LLAMA_SERVER,
    MODEL,
    MODES,
    VLLM,
    VLLM_CONFIG,
    VLLM_SERVER,
    EngineVariant,
    LlamaServerTarget,
    ModeTarget,
    Target,
    VllmServerTarget,
    VllmTarget,
    check_model_control,
    check_variants,
    parse_variant,
)
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.load.llm.figures import Slo
from tools.load.llm.workload import LengthRange, Workload, gguf_path, mean_lengths
from tools.machine import cpu_description
from tools.paths import BUILD_DIR, MODEL_REPOSITORY, REPO_ROOT, VLLM_PYTHON
from tools.triton_client import TritonClient

log = logging.getLogger("bench-llm")

# The SLO the committed config is sized for on a 2-core CPU (docs/llm.md): a step of 16 decodes
# and a 64-token prompt chunk takes ~0.25 s there, so 300 ms per output token is attainable at
# 16 streams, and 3 s covers a 1,024-token prompt prefilled in 80-token steps.
DEFAULT_SLO = Slo(ttft_s=3.0, tpot_s=0.3)

TARGET_NAMES = (*MODES, ENGINE_LOOP, VLLM, VLLM_SERVER, LLAMA_SERVER)
TRITON_TARGETS = (*MODES, VLLM)
DEFAULT_LLAMA_SERVER = BUILD_DIR / "llama.cpp" / "bin" / "llama-server"


# Full: 4 closed + 3 Poisson levels of (20 s warm-up + 45 s + at most 30 s of drain) per target, four targets: ~45 min here.
FULL = Plan(concurrency=(1, 4, 16, 32), rates=(0.25, 0.5, 1.0), seconds=45.0, drain_s=30.0, warmup_s=20.0)
QUICK = Plan(concurrency=(1, 16), rates=(0.5,), seconds=20.0, drain_s=15.0, warmup_s=10.0)


def _numbers(text: str, kind: type) -> tuple:
    try:
        values = tuple(kind(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if any(value <= 0 for value in values):
        raise argparse.ArgumentTypeError(f"every level must be above 0, got {text!r}")
    return values


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a whole number above 0, got {text!r}")
    return value


def _variant(text: str) -> EngineVariant:
    try:
        return parse_variant(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.llm", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"short levels: streams {QUICK.concurrency}, Poisson {QUICK.rates} req/s, {QUICK.seconds:g} s each",
    )
    parser.add_argument(
        "--targets",
        default=None,
        help=f"comma-separated, of {', '.join(TARGET_NAMES)} (default: all; llama-server only when built: `make llama-server`)",
    )
    parser.add_argument(
        "--concurrency", type=lambda t: _numbers(t, int), help="closed-loop streams per level (default: 1,4,16,32; quick 1,16)"
    )
    parser.add_argument(
        "--rates", type=lambda t: _numbers(t, float), help="Poisson rates in req/s (default: 0.25,0.5,1; quick 0.5); '' for none"
    )
    parser.add_argument("--seconds", type=float, help="sending time per level (default 45; quick 20)")
    parser.add_argument("--drain", type=float, help="seconds a level may drain before the rest is cut (default 30; quick 15)")
    parser.add_argument(
        "--warmup",
        type=float,
        help="seconds of each level's load before its scored window: requests sent then are served, not scored (default 20; quick 10)",
    )
    parser.add_argument(
        "--prompt-lengths", type=LengthRange.parse, default=LengthRange(32, 1024), help="prompt tokens, LOW-HIGH (default 32-1024)"
    )
    parser.add_argument(
        "--output-lengths", type=LengthRange.parse, default=LengthRange(16, 256), help="output tokens, LOW-HIGH (default 16-256)"
    )
    parser.add_argument("--requests", type=int, default=1000, help="size of the seeded workload (each level starts at its own part of it)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--rounds",
        type=_positive,
        default=1,
        help="measure every target this many times, the order reversed every other round; each figure the median of "
        "the rounds' (default 1; 2 or 3 where the machine drifts, see tools/bench/llm/rounds.py)",
    )
    parser.add_argument("--slo", type=Slo.parse, default=DEFAULT_SLO, help="per-request objectives in seconds (default ttft=3,tpot=0.3)")
    parser.add_argument("--url", help="a running Triton (host:http_port) in explicit model-control mode; default: start one")
    parser.add_argument("--grpc-url", help="its gRPC host:port (default: the HTTP port + 1)")
    parser.add_argument("--admin-key", help="the running server's model-control key, if restricted")
    parser.add_argument(
        "--vllm-python",
        type=Path,
        default=VLLM_PYTHON,
        help="vllm-server: the interpreter with vLLM (default: .venv-vllm's; a GPU host's own)",
    )
    parser.add_argument(
        "--vllm-config", type=Path, default=VLLM_CONFIG, help="vllm-server: the config whose knobs it runs (default: configs/vllm.pbtxt)"
    )
    parser.add_argument("--llama-server", type=Path, default=DEFAULT_LLAMA_SERVER, help="the binary (make llama-server)")
    parser.add_argument("--llama-parallel", type=int, default=16, help="llama-server --parallel (default 16: llm's max_num_seqs)")
    parser.add_argument("--llama-context", type=int, default=32768, help="llama-server --ctx-size, unified across slots")
    parser.add_argument(
        "--set",
        dest="variants",
        type=_variant,
        action="append",
        help="knobs of our engine for its targets (the modes and engine-loop), e.g. weights=int4,dtype=auto; "
        "repeat as LABEL[@STREAMS]:KNOBS to measure each set as targets of its own, e.g. "
        "--set int4@1:weights=int4,dtype=auto --set bf16@16,32:dtype=auto (a variant with streams runs only those closed-loop levels)",
    )
    parser.add_argument("--llama-threads", type=int, default=os.cpu_count() or 2, help="llama-server --threads (default: the CPUs)")
    parser.add_argument(
        "--tokenizer",
        type=Path,
        default=MODEL_REPOSITORY / MODEL / "1" / "tokenizer.json",
        help="for sizing prompts (fallback: the GGUF's)",
    )
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "bench-llm")
    parser.add_argument(
        "--append",
        type=Path,
        help="an earlier bench-llm.json of the same workload and plan: add this run's targets to it (a second invocation)",
    )
    add_verbosity_flags(parser)
    return parser


def plan_of(args: argparse.Namespace) -> Plan:
    base = QUICK if args.quick else FULL
    return Plan(
        concurrency=base.concurrency if args.concurrency is None else args.concurrency,
        rates=base.rates if args.rates is None else args.rates,
        seconds=base.seconds if args.seconds is None else args.seconds,
        drain_s=base.drain_s if args.drain is None else args.drain,
        warmup_s=base.warmup_s if args.warmup is None else args.warmup,
    )


def variant_plan(plan: Plan, variant: EngineVariant) -> Plan:
    """The plan's levels a variant runs: all, or only its closed-loop stream counts."""
    if variant.concurrency is None:
        return plan
    return dataclasses.replace(plan, concurrency=variant.concurrency, rates=())


def engine_loop_target(variant: EngineVariant) -> EngineLoopTarget:
    return EngineLoopTarget(overrides=variant.knobs, name=variant.target_name(ENGINE_LOOP))


def selected_targets(text: str) -> list[str]:
    names = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in names if name not in TARGET_NAMES]
    if unknown or not names:
        raise ValueError(f"unknown target(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(TARGET_NAMES)}")
    return names


@contextlib.contextmanager
def triton_control(args: argparse.Namespace) -> Iterator[tuple[TritonClient, str]]:
    """(model-control client, gRPC URL) of the server whose `llm` is measured."""
    from tools.contract import grpc_url_beside
    from tools.ports import free_ports
    from tools.serve.admin_key import headers_for
    from tools.serve.local_triton import LocalTriton, ServerOptions

    if args.url:
        control = TritonClient(args.url, headers_for(args.admin_key))
        check_model_control(control)
        with control.restoring(MODEL, control.config(MODEL), hint=f"reload {MODEL} through the model-control API"):
            yield control, args.grpc_url or grpc_url_beside(args.url)
        return
    http, grpc, metrics = free_ports(3)
    options = ServerOptions(http_port=http, grpc_port=grpc, metrics_port=metrics, model_control_mode="explicit", load_models=(MODEL,))
    with LocalTriton(options, log_path=BUILD_DIR / f"triton-bench-llm-{http}.log").start() as server:
        yield server.client, options.grpc_url


def run_bench(args: argparse.Namespace) -> dict:
    plan = plan_of(args)
    names = selected_targets(args.targets or ",".join(TARGET_NAMES))
    if args.targets is None and not args.llama_server.is_file():
        names.remove(LLAMA_SERVER)
        log.info("llama-server is not built (%s): measuring without it; `make llama-server` adds it (about an hour)", args.llama_server)
    if LLAMA_SERVER in names and not args.llama_server.is_file():
        raise FileNotFoundError(f"no llama-server at {args.llama_server}; build it with `make llama-server`")
    cpu = cpu_description()
    load_average = round(os.getloadavg()[0], 2)
    workload = Workload(args.prompt_lengths, args.output_lengths, args.requests, args.seed)
    requests = workload.build(load_tokenizer(args.tokenizer))
    mean_prompt, mean_output = mean_lengths(requests)
    log.info("workload: %s; mean prompt %.0f, mean output %.0f tokens", workload.describe(), mean_prompt, mean_output)
    variants = args.variants or [EngineVariant()]
    check_variants(variants)
    rounds: list[list[dict]] = []
    described: dict[str, dict] = {}
    with contextlib.ExitStack() as stack:
        targets: list[Target | EngineLoopTarget] = []
        plans: dict[str, Plan] = {}  # a variant's targets run its levels only
        if any(name in TRITON_TARGETS for name in names):
            control, grpc_url = stack.enter_context(triton_control(args))
            base = control.config(MODEL)  # every variant's knobs go on top of the config the run starts from
            for name in names:
                if name in MODES:
                    for variant in variants:
                        targets.append(ModeTarget(name, control, grpc_url, variant=variant, base=base))
                        plans[targets[-1].name] = variant_plan(plan, variant)
                        if name == "iteration" and ENGINE_LOOP in names:  # its twin in process right after it:
                            targets.append(engine_loop_target(variant))  # the pair lies minutes apart, not a round
                            plans[targets[-1].name] = variant_plan(plan, variant)
                elif name == VLLM:
                    targets.append(VllmTarget(control, grpc_url))
        if ENGINE_LOOP in names and not any(isinstance(target, EngineLoopTarget) for target in targets):
            for variant in variants:
                targets.append(engine_loop_target(variant))
                plans[targets[-1].name] = variant_plan(plan, variant)
        if VLLM_SERVER in names:
            targets.append(VllmServerTarget(MODEL_REPOSITORY / MODEL / "1" / HF_FOLDER, args.vllm_config, args.vllm_python))
        if LLAMA_SERVER in names:
            targets.append(LlamaServerTarget(args.llama_server, gguf_path(), args.llama_parallel, args.llama_context, args.llama_threads))
        for round_index in range(args.rounds):
            entries: list[dict] = []
            for target in round_order(targets, round_index):
                log.info("measuring %s%s", target.name, f" (round {round_index + 1} of {args.rounds})" if args.rounds > 1 else "")
                with target.serving() as client:
                    runs = asyncio.run(measure_target(client, requests, plans.get(target.name, plan), args.seed))
                    described.setdefault(target.name, {"name": target.name, "description": target.describe(), "protocol": client.name})
                entries += [level_entry(target.name, *run, slo=args.slo) for run in runs]
            rounds.append(entries)
    order = {target.name: index for index, target in enumerate(targets)}
    levels = sorted(merge_rounds(rounds), key=lambda level: order[level["target"]])  # stable: each target's levels in plan order
    return {
        "date": datetime.now().isoformat(timespec="seconds"),
        "cpu": cpu,
        "load_average": load_average,
        "runs": args.rounds,
        "workload": {
            "description": workload.describe(),
            "prompt_lengths": str(args.prompt_lengths),
            "output_lengths": str(args.output_lengths),
            "seed": args.seed,
            "mean_prompt_tokens": mean_prompt,
            "mean_output_tokens": mean_output,
        },
        "slo": args.slo.describe(),
        "slo_ttft_s": args.slo.ttft_s,
        "slo_tpot_s": args.slo.tpot_s,
        "settings": {
            "concurrency": list(plan.concurrency),
            "rates": list(plan.rates),
            "seconds": plan.seconds,
            "drain_s": plan.drain_s,
            "warmup_s": plan.warmup_s,
            "quick": args.quick,
        },
        "targets": [described[target.name] for target in targets],
        "levels": levels,
    }


# What must match for two invocations to share one table: the same requests under the same load.
COMPARABLE = (("workload", "prompt_lengths"), ("workload", "output_lengths"), ("workload", "seed"), ("settings", None), ("slo", None))


def append_to(earlier: dict, report: dict) -> dict:
    """`earlier` with this run's targets and levels added; ValueError when the two runs did not
    send the same requests under the same plan and SLO (their figures would not compare)."""
    for section, key in COMPARABLE:
        mine, theirs = report[section], earlier.get(section)
        if key is not None:
            mine, theirs = mine[key], (theirs or {}).get(key)
        if section == "settings":
            mine, theirs = {**mine, "quick": None}, {**(theirs or {}), "quick": None}
        if mine != theirs:
            raise ValueError(f"cannot append: {section}{'.' + key if key else ''} differs ({theirs!r} there, {mine!r} here)")
    clash = {t["name"] for t in report["targets"]} & {t["name"] for t in earlier["targets"]}
    if clash:
        raise ValueError(f"cannot append: {', '.join(sorted(clash))} already measured there")
    invocation = {"date": report["date"], "load_average": report["load_average"], "targets": [t["name"] for t in report["targets"]]}
    return {
        **earlier,
        "targets": earlier["targets"] + report["targets"],
        "levels": earlier["levels"] + report["levels"],
        "appended": [*earlier.get("appended", []), invocation],
    }


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    try:
        earlier = json.loads(args.append.read_text()) if args.append else None
        report = run_bench(args)
        if earlier is not None:
            report = append_to(earlier, report)
    except (ValueError, FileNotFoundError, RuntimeError) as exc:
        log.error("%s", exc)
        return 2
    for path in write_report(report, args.out):
        print(path)
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
