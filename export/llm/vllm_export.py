"""`python -m export`'s vLLM step: the same GGUF as a Hugging Face checkpoint (bfloat16) for vLLM,
into the LLM's version folder under `hf/`, behind a parity gate run on vLLM itself.

transformers dequantises the GGUF (as the native export does); `save_pretrained` refuses a
GGUF-quantised model, so a fresh model is built from its config without the quantisation
settings, given the dequantised weights and saved with the tokenizer and chat template. The
gate: vLLM's greedy tokens (in .venv-vllm, with the served config's knobs) on the prompts of the
native gate, each position checked against transformers' float32 argmax after the same prefix,
held to the bar bfloat16 is held to (90 % top-1 agreement). vLLM returns tokens, not logits, so
no logit difference is reported. A manifest makes a second run a no-op.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from export.errors import ExportError, ParityError
from export.llm.native_export import MIN_AGREEMENT, NEW_TOKENS, chat_prompts
from export.manifest import MANIFEST_NAME, ExportManifest, file_digest, stale_reasons
from llm.artifacts import HF_FOLDER
from tools.paths import VLLM_PYTHON

log = logging.getLogger("export.llm.vllm")

FORMAT_VERSION = 1
DTYPE = "bfloat16"
VLLM_CONFIG = Path("configs") / "vllm.pbtxt"  # in the LLM's model folder: the knobs the gate's engine is built with
# The knobs that change which tokens come out: a change re-runs the gate (batching knobs do not)
TOKEN_KNOBS = ("dtype", "device", "enforce_eager", "max_model_len")
GATE_TIMEOUT_S = 1800  # vLLM compiles the model first (about a minute on 2 cores)


@dataclass(frozen=True)
class VllmExportSettings:
    repository: Path
    model: str
    force: bool


def expected_manifest(gguf: Path, parameters: dict[str, str]) -> ExportManifest:
    return ExportManifest(
        source_model=str(gguf),
        source_digest=file_digest(gguf),
        settings={"format_version": FORMAT_VERSION, "dtype": DTYPE, "parity_new_tokens": NEW_TOKENS, "engine_parameters": parameters},
    )


def run_vllm_export(settings: VllmExportSettings) -> None:
    from export.llm.source import default_gguf
    from llm.serving.knobs import parameters_from_pbtxt

    model_dir = settings.repository / settings.model
    config = model_dir / VLLM_CONFIG
    if not config.is_file():
        log.warning("%s is missing: skipping the vLLM checkpoint (nothing would serve it)", config)
        return
    hf_dir = model_dir / "1" / HF_FOLDER
    manifest_path = hf_dir / MANIFEST_NAME
    gguf = default_gguf()
    parameters = {key: value for key, value in parameters_from_pbtxt(config).items() if key != "EXECUTION_ENV_PATH"}
    expected = expected_manifest(gguf, {key: parameters[key] for key in TOKEN_KNOBS if key in parameters})
    reasons = stale_reasons(ExportManifest.load(manifest_path), expected, settings.repository)
    if not reasons and not settings.force:
        log.info("vLLM checkpoint is up to date (%s); nothing to do", hf_dir)
        return
    if not VLLM_PYTHON.is_file():
        raise ExportError(f"the vLLM parity gate runs in .venv-vllm, which is missing ({VLLM_PYTHON}): `make vllm-venv`, or --skip-vllm")
    log.info("exporting the vLLM checkpoint because: %s", "; ".join(reasons) if reasons else "--force")
    expected.parity = export_hf_checkpoint(gguf, hf_dir, parameters)
    expected.artifacts = {
        str(path.relative_to(settings.repository)): file_digest(path) for path in sorted(hf_dir.iterdir()) if path.name != MANIFEST_NAME
    }
    expected.save(manifest_path)


def export_hf_checkpoint(gguf: Path, hf_dir: Path, parameters: dict[str, str]) -> dict:
    """Write the checkpoint into `hf_dir` once vLLM's tokens passed the gate; returns the gate's figures."""
    import torch
    from transformers import AutoModelForCausalLM

    from export.llm.parity import judge_greedy_tokens
    from export.llm.source import load_gguf

    started = time.perf_counter()
    log.info("[1/3] loading %s through transformers (dequantising)", gguf.name)
    source = load_gguf(gguf)
    config = source.model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # save_pretrained refuses a GGUF-quantised model
    hf_model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    hf_model.load_state_dict({name: tensor.to(torch.bfloat16) for name, tensor in source.model.state_dict().items()})
    hf_model.generation_config = source.model.generation_config
    hf_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=hf_dir.parent) as scratch_name:
        scratch = Path(scratch_name) / HF_FOLDER
        log.info("[2/3] writing the %s checkpoint and the tokenizer", DTYPE)
        hf_model.save_pretrained(str(scratch))
        source.tokenizer.save_pretrained(str(scratch))
        del hf_model

        log.info("[3/3] parity gate: vLLM's greedy tokens vs transformers (%d per prompt)", NEW_TOKENS)
        prompts = chat_prompts(source.tokenizer)
        answer = vllm_greedy_tokens(scratch, parameters, prompts, Path(scratch_name))
        report = judge_greedy_tokens(
            source.model, prompts, answer["tokens"], DTYPE, MIN_AGREEMENT[DTYPE], engine_s=float(answer["seconds"])
        )
        log.info("vLLM parity ok (vLLM %s): %s", answer["vllm"], report.summary())
        if hf_dir.exists():
            shutil.rmtree(hf_dir)  # with its manifest: an interrupted move leaves the export stale
        shutil.move(str(scratch), hf_dir)
    size_mb = sum(path.stat().st_size for path in hf_dir.iterdir()) / 1e6
    log.info("wrote the vLLM checkpoint into %s (%s, %.0f MB) in %.1f s", hf_dir, DTYPE, size_mb, time.perf_counter() - started)
    return {**report.as_dict(), "engine": "vllm", "vllm": answer["vllm"], "gate_s": round(time.perf_counter() - started, 1)}


def vllm_greedy_tokens(model: Path, parameters: dict[str, str], prompts: list[list[int]], scratch: Path) -> dict:
    """llm.vllm_engine.greedy in .venv-vllm: {"tokens": [...], "seconds": ..., "vllm": version}."""
    out = scratch / "vllm-tokens.json"
    request = json.dumps({"prompts": prompts, "new_tokens": NEW_TOKENS, "parameters": parameters})
    command = [str(VLLM_PYTHON), "-m", "llm.vllm_engine.greedy", "--model", str(model), "--out", str(out)]
    log_path = scratch / "vllm-gate.log"
    with open(log_path, "wb") as output:
        finished = subprocess.run(command, input=request.encode(), stdout=output, stderr=subprocess.STDOUT, timeout=GATE_TIMEOUT_S)
    if finished.returncode != 0 or not out.is_file():
        tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-25:])
        raise ParityError(f"vLLM could not run the parity gate (exit status {finished.returncode}):\n{tail}")
    return json.loads(out.read_text())
