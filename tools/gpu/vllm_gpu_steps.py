"""The Python steps of tools/gpu/vllm_check.sh, the vLLM GPU check (docker/README.md, "The vLLM
GPU path"). Run from the repository root with it on PYTHONPATH, on a GPU host whose packages are
unknown: each step imports only what it needs, so `env` works with nothing but Python.

    python3 tools/gpu/vllm_gpu_steps.py env --out env.json
    python3 tools/gpu/vllm_gpu_steps.py stand-in --meta DIR --out DIR
    python3 tools/gpu/vllm_gpu_steps.py knobs --out vllm-gpu.pbtxt
    python3 tools/gpu/vllm_gpu_steps.py parity --checkpoint DIR --out parity.json

`knobs` and `parity` take the LLM's vLLM knobs as the vllm-gpu variant serves them
(tools/repo/variant.py: configs/vllm.pbtxt with VLLM_ON_GPU), so the gate and the benchmark run
the engine that NVIDIA's container runs. The parity gate is the export's (export/llm/vllm_export.py):
vLLM's greedy tokens, every prompt at once, against transformers' float32 argmax after the same
prefix, at the bfloat16 bar; here vLLM runs on CUDA and transformers on the CPU, both on the
bfloat16 weights of the checkpoint, so the gate measures the GPU engine, not the export.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import platform
import shutil
import sys
import time
from pathlib import Path

log = logging.getLogger("vllm-gpu-check")

# Packages the steps use, in the order the check reports them: name -> what needs it.
PACKAGES = {
    "torch": "parity, stand-in",
    "transformers": "parity, stand-in",
    "tokenizers": "bench (prompt sizes)",
    "vllm": "parity, bench, calibrate",
    "tritonclient": "knobs, parity, bench, calibrate (config protobuf; the bench's imports)",
    "rapidjson": "bench (tritonclient.http)",
    "aiohttp": "bench (the OpenAI stream client)",
    "matplotlib": "bench (the report's plot)",
}
DISTRIBUTIONS = {"rapidjson": "python-rapidjson"}  # import name -> distribution, where they differ
STAND_IN_NOTE = "STAND-IN.txt"  # marks a checkpoint with random weights: timings hold, parity does not


def distribution_version(name: str) -> str:
    from importlib import metadata

    try:
        return metadata.version(DISTRIBUTIONS.get(name, name))
    except metadata.PackageNotFoundError:
        return "unknown"


def package_versions() -> dict[str, str | None]:
    """Each package's version, or None when it does not import (its error logged)."""
    found: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            module = importlib.import_module(name)
        except Exception as exc:  # a broken install is as absent as a missing one
            log.info("%s does not import: %s", name, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
            found[name] = None
            continue
        found[name] = str(getattr(module, "__version__", "") or distribution_version(name))
    return found


def environment() -> dict:
    versions = package_versions()
    report: dict = {"python": sys.version.split()[0], "executable": sys.executable, "machine": platform.machine(), "packages": versions}
    if versions["torch"]:
        import torch

        report["torch_cuda"] = torch.version.cuda
        report["cuda_available"] = torch.cuda.is_available()
        if torch.cuda.is_available():
            properties = torch.cuda.get_device_properties(0)
            report["gpu"] = {
                "name": properties.name,
                "memory_gib": round(properties.total_memory / 2**30, 1),
                "capability": list(torch.cuda.get_device_capability(0)),
            }
    return report


def write_stand_in(meta: Path, out: Path, seed: int = 0) -> Path:
    """A checkpoint of the LLM's architecture and tokenizer with random bfloat16 weights, for a
    host the real one cannot reach (the checkpoint is 270 MB; a device call carries 64 MiB)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from llm.artifacts import HF_REQUIRED_FILES

    torch.manual_seed(seed)
    config = AutoConfig.from_pretrained(meta)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    for path in sorted(meta.iterdir()):
        if path.is_file() and not (out / path.name).exists():
            shutil.copy2(path, out / path.name)
    (out / STAND_IN_NOTE).write_text(f"Random weights (seed {seed}) in the architecture of {meta}/config.json: timings only.\n")
    missing = [name for name in HF_REQUIRED_FILES if not (out / name).is_file()]
    if missing:
        raise FileNotFoundError(f"{meta} lacks {', '.join(missing)} for a stand-in checkpoint")
    return out


def gpu_parameters() -> dict[str, str]:
    from tools.paths import MODEL_REPOSITORY
    from tools.repo.variant import vllm_gpu_parameters

    return vllm_gpu_parameters(MODEL_REPOSITORY / "llm")


def write_knobs(out: Path) -> Path:
    """configs/vllm.pbtxt as the GPU serves it, for `python -m tools.bench.llm --vllm-config`."""
    from tools.paths import MODEL_REPOSITORY
    from tools.repo.model_config import format_config
    from tools.repo.variant import vllm_gpu_knob_config

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        "# The vllm-gpu variant's knobs (tools/gpu/vllm_gpu_steps.py knobs); do not edit.\n"
        + format_config(vllm_gpu_knob_config(MODEL_REPOSITORY / "llm"))
    )
    return out


def run_parity(checkpoint: Path) -> dict:
    """The export's gate on CUDA: a report dict; ParityError (export.errors) below the bar."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from export.llm.native_export import MIN_AGREEMENT, NEW_TOKENS, chat_prompts
    from export.llm.parity import judge_greedy_tokens
    from llm.vllm_engine.greedy import greedy_tokens

    parameters = gpu_parameters()
    prompts = chat_prompts(AutoTokenizer.from_pretrained(checkpoint))
    log.info("vLLM: %d prompts x %d greedy tokens on CUDA, knobs %s", len(prompts), NEW_TOKENS, parameters)
    answer = greedy_tokens(checkpoint, parameters, prompts, NEW_TOKENS)
    log.info("vLLM %s answered in %.1f s; transformers float32 on the CPU checks every position", answer["vllm"], answer["seconds"])
    started = time.perf_counter()
    reference = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    dtype = parameters["dtype"]
    report = judge_greedy_tokens(reference, prompts, answer["tokens"], dtype, MIN_AGREEMENT[dtype], engine_s=float(answer["seconds"]))
    log.info("parity ok: %s (reference %.1f s)", report.summary(), time.perf_counter() - started)
    return {**report.as_dict(), "engine": "vllm", "vllm": answer["vllm"], "device": "cuda", "parameters": parameters}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tools/gpu/vllm_gpu_steps.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    steps = parser.add_subparsers(dest="step", required=True)
    steps.add_parser("env", help="Python, packages and the GPU as torch sees it (JSON)").add_argument("--out", type=Path, required=True)
    stand_in = steps.add_parser("stand-in", help="a random-weight checkpoint from config.json and tokenizer files")
    stand_in.add_argument("--meta", type=Path, required=True, help="folder with config.json and the tokenizer files of the checkpoint")
    stand_in.add_argument("--out", type=Path, required=True)
    stand_in.add_argument("--seed", type=int, default=0)
    steps.add_parser("knobs", help="the vllm-gpu variant's knobs as a config (pbtxt)").add_argument("--out", type=Path, required=True)
    parity = steps.add_parser("parity", help="vLLM's greedy tokens on CUDA vs transformers (JSON report)")
    parity.add_argument("--checkpoint", type=Path, required=True)
    parity.add_argument("--out", type=Path, required=True)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    try:
        if args.step == "env":
            args.out.write_text(json.dumps(environment(), indent=2) + "\n")
        elif args.step == "stand-in":
            write_stand_in(args.meta, args.out, args.seed)
        elif args.step == "knobs":
            write_knobs(args.out)
        else:
            stand_in = (args.checkpoint / STAND_IN_NOTE).is_file()
            try:
                report = {**run_parity(args.checkpoint), "stand_in": stand_in}
            except Exception as exc:
                args.out.write_text(json.dumps({"passed": False, "stand_in": stand_in, "error": str(exc)}, indent=2) + "\n")
                if stand_in and type(exc).__name__ == "ParityError":
                    log.warning("random weights disagree, as expected (near-equal logits): %s", exc)
                    return 0
                raise
            args.out.write_text(json.dumps(report, indent=2) + "\n")
    except Exception as exc:
        log.error("%s failed: %s", args.step, exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
