"""A model repository serving `llm` with LoRA adapters: a folder of links to the exported
checkpoint plus a multi_lora.json of its own, so the committed repository is never touched
(the benchmark's random adapters and the tests' broken ones stay in their run's folder)."""

from __future__ import annotations

import shutil
from collections.abc import Mapping
from pathlib import Path

from llm.adapters import ADAPTER_LIST
from tools.contract import LLM_MODEL
from tools.lora.random_adapters import add_to_list
from tools.paths import MODEL_REPOSITORY


def repository_with_adapters(root: Path, adapters: Mapping[str, Path], source: Path = MODEL_REPOSITORY) -> Path:
    """`root`/models: `llm`'s config copied, its version folder's files linked, and `adapters`
    (name -> folder) listed. Returns the repository's path."""
    model = source / LLM_MODEL
    version = root / "models" / LLM_MODEL / "1"
    version.mkdir(parents=True)
    shutil.copy(model / "config.pbtxt", version.parent / "config.pbtxt")
    for item in (model / "1").iterdir():
        if item.name not in (ADAPTER_LIST, "__pycache__"):
            (version / item.name).symlink_to(item.resolve())
    add_to_list(version / ADAPTER_LIST, adapters)
    return root / "models"
