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
from tools.repo.artifacts import pin_environment
from tools.repo.model_config import custom_configs, load_config, save_config
from tools.serve.llm.engine import CONFIG_NAMES


def repository_with_adapters(
    root: Path, adapters: Mapping[str, Path], source: Path = MODEL_REPOSITORY, vllm_parameters: Mapping[str, str] | None = None
) -> Path:
    """`root`/models: `llm`'s configs copied (the vLLM one with its environment made absolute and
    `vllm_parameters` set, e.g. enable_lora), its version folder's files linked, and `adapters`
    (name -> folder) listed. Returns the repository's path."""
    model = source / LLM_MODEL
    version = root / "models" / LLM_MODEL / "1"
    version.mkdir(parents=True)
    shutil.copy(model / "config.pbtxt", version.parent / "config.pbtxt")
    for name, path in custom_configs(model).items():
        config = load_config(path)
        pin_environment(config, model)
        if name == CONFIG_NAMES["vllm"]:
            for key, value in (vllm_parameters or {}).items():
                config.parameters[key].string_value = value
        (version.parent / "configs").mkdir(exist_ok=True)
        save_config(config, version.parent / "configs" / path.name)
    for item in (model / "1").iterdir():
        if item.name not in (ADAPTER_LIST, "__pycache__"):
            (version / item.name).symlink_to(item.resolve())
    add_to_list(version / ADAPTER_LIST, adapters)
    return root / "models"
