"""The files `python -m export` writes into the LLM's version folder.

Torch-free on purpose: the repository check (`tools/repo/artifacts.py`) lists them without
importing the engine.
"""

from __future__ import annotations

import json
from pathlib import Path

CONFIG_FILE = "llm_config.json"  # the model's dimensions (llm.engine.checkpoint.LlamaDims)
WEIGHTS_FILE = "model.safetensors"  # fused weights under our tensor names
TOKENIZER_FILE = "tokenizer.json"
TOKENIZER_CONFIG_FILE = "tokenizer_config.json"  # special tokens (transformers' save_pretrained layout)
CHAT_TEMPLATE_FILE = "chat_template.jinja"
REQUIRED_FILES = (CONFIG_FILE, WEIGHTS_FILE, TOKENIZER_FILE, TOKENIZER_CONFIG_FILE)

# The Hugging Face-format checkpoint vLLM serves (bfloat16, from the same GGUF), in a folder of its
# own inside the version folder, with its own manifest: `make export` writes it behind vLLM's gate.
HF_FOLDER = "hf"
HF_REQUIRED_FILES = ("config.json", "model.safetensors", TOKENIZER_FILE, TOKENIZER_CONFIG_FILE)

# What `make export` records beside the checkpoint (export.manifest.MANIFEST_NAME), with the parity
# gate's figures per served format: the engine refuses a format whose gate did not pass.
MANIFEST_FILE = "export_manifest.json"
# The formats the export gates, by name -> (weights, dtype of the gate's run). The quantised formats
# are gated once, with bfloat16 activations (the coarser of the two float dtypes they run in).
GATED_FORMATS = {
    "dense-float32": ("dense", "float32"),
    "dense-bfloat16": ("dense", "bfloat16"),
    "int8": ("int8", "bfloat16"),
    "int4": ("int4", "bfloat16"),
}


def gated_format(weights: str, dtype: str) -> str | None:
    """The gate's name for the format the engine serves with these knobs (None: not gated)."""
    name = f"dense-{dtype}" if weights == "dense" else weights
    return name if name in GATED_FORMATS else None


def gate_refusal(folder: Path, weights: str, dtype: str) -> str | None:
    """Why the version folder's export does not vouch for this format (None: its gate passed)."""
    name = gated_format(weights, dtype)
    if name is None:
        return None
    path = Path(folder) / MANIFEST_FILE
    try:
        parity = json.loads(path.read_text()).get("parity", {})
        figures = parity.get(name)
        if figures is None and name == f"dense-{parity.get('dtype')}":  # an export from before the per-format gate
            figures = parity
    except (OSError, ValueError, AttributeError):
        figures = None
    served = f"weights {weights} (dtype {dtype})"
    if not isinstance(figures, dict):
        return f"{path} has no parity gate figures for {served}: run `make export` to check and record them"
    if not figures.get("passed"):
        return (
            f"{served} failed the export's parity gate (top-1 agreement {figures.get('top1_agreement')}, needs "
            f"{figures.get('min_agreement')}; {path}): choose another format, or fix it and run `make export`"
        )
    return None
