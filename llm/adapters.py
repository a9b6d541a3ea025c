"""The LoRA adapters a model serves: the version folder's multi_lora.json (name -> folder), as
Triton's vLLM backend reads it. Apart from llm.engine.lora so that readers of the list (the
gateway, the tools) need no torch."""

from __future__ import annotations

import json
from pathlib import Path

ADAPTER_LIST = "multi_lora.json"  # in the model version folder: {"name": "adapter folder"}


class AdapterError(ValueError):
    """An adapter cannot be used with this model; the message names the adapter and the reason."""


def read_adapter_list(path: Path) -> dict[str, Path]:
    """The adapters a model serves, by name; a relative folder is relative to the list's folder."""
    try:
        listed = json.loads(path.read_text())
    except ValueError as error:
        raise AdapterError(f"{path} is not JSON: {error}") from error
    if not isinstance(listed, dict) or not all(isinstance(name, str) and isinstance(folder, str) for name, folder in listed.items()):
        raise AdapterError(f'{path} must map adapter names to folders: {{"name": "path/to/adapter"}}')
    if any(not name.strip() for name in listed):
        raise AdapterError(f"{path} names an adapter with an empty name")
    return {name: (path.parent / folder).resolve() for name, folder in listed.items()}
