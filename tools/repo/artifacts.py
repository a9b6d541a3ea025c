"""Which exported artifacts a model repository still lacks.

Conventions: an ONNX Runtime model needs its model file in each version folder; a
Python-backend model needs `model.py` plus every file named by a config parameter whose
key ends in `_file` (the tokenizer's `tokenizer_file`, for example).
"""

from __future__ import annotations

from pathlib import Path

from llm.artifacts import HF_FOLDER, HF_REQUIRED_FILES
from llm.artifacts import REQUIRED_FILES as LLM_FILES
from tools.repo.model_config import CONFIG_NAME, ModelConfig, load_config

DEFAULT_MODEL_FILES = {"onnxruntime_onnx": "model.onnx", "tensorrt_plan": "model.plan"}
LLM_MODEL = "llm"  # the Python model `python -m export` writes the LLM checkpoint into (its --llm default)


def required_files(config: ModelConfig) -> list[str]:
    if config.platform == "ensemble":
        return []
    if config.backend == "python":
        named = [value.string_value for key, value in config.parameters.items() if key.endswith("_file")]
        return ["model.py", *sorted(named)]
    default = DEFAULT_MODEL_FILES.get(config.platform or config.backend)
    return [config.default_model_filename or default] if default else []


def version_folders(model_dir: Path) -> list[Path]:
    return sorted(path for path in model_dir.iterdir() if path.is_dir() and path.name.isdigit())


def llm_files(config: ModelConfig) -> list[str]:
    """What the LLM's engine loads: our checkpoint, or (engine vllm) the Hugging Face one."""
    if "engine" in config.parameters and config.parameters["engine"].string_value == "vllm":
        return [f"{HF_FOLDER}/{name}" for name in HF_REQUIRED_FILES]
    return list(LLM_FILES)


def missing_artifacts(repository: Path, config_name: str | None = None) -> list[Path]:
    """Files the models of `repository` need and lack, each model read as Triton reads it when
    started with `--model-config-name=config_name`."""
    missing: list[Path] = []
    for model_dir in sorted(path for path in repository.iterdir() if (path / CONFIG_NAME).is_file()):
        config = load_config(model_dir, config_name)
        files = required_files(config) + (llm_files(config) if model_dir.name == LLM_MODEL and config.backend == "python" else [])
        versions = version_folders(model_dir)
        if files and not versions:
            missing.append(model_dir / "1")
        for version in versions:
            missing += [version / name for name in files if not (version / name).is_file()]
    return missing


def ensemble_batch_floor(repository: Path, model: str) -> tuple[int, list[str]]:
    """The smallest max_batch_size `model` may have: Triton refuses an ensemble whose
    max_batch_size exceeds a step's, so every ensemble using the model sets a floor."""
    floor, ensembles = 0, []
    for model_dir in sorted(path for path in repository.iterdir() if (path / CONFIG_NAME).is_file()):
        config = load_config(model_dir)
        if config.platform == "ensemble" and any(step.model_name == model for step in config.ensemble_scheduling.step):
            floor = max(floor, config.max_batch_size)
            ensembles.append(config.name)
    return floor, ensembles


EXECUTION_ENV_KEY = "EXECUTION_ENV_PATH"
MODEL_DIRECTORY_VARIABLE = "$$TRITON_MODEL_DIRECTORY"


def environment_path(config: ModelConfig, model_dir: Path) -> Path | None:
    """The folder a Python model's stub runs in (EXECUTION_ENV_PATH, Triton's variable resolved), or None."""
    if config.backend != "python" or EXECUTION_ENV_KEY not in config.parameters:
        return None
    text = config.parameters[EXECUTION_ENV_KEY].string_value.replace(MODEL_DIRECTORY_VARIABLE, str(Path(model_dir).resolve()))
    return Path(text).resolve()


def pin_environment(config: ModelConfig, model_dir: Path) -> None:
    """Make EXECUTION_ENV_PATH absolute, for a copy of the model that lives elsewhere (a preset,
    a variant): the committed path is relative to the model's own folder."""
    environment = environment_path(config, model_dir)
    if environment is not None:
        config.parameters[EXECUTION_ENV_KEY].string_value = str(environment)


def missing_environments(repository: Path, config_name: str | None = None) -> list[tuple[str, Path]]:
    """(model, environment) for each Python model whose EXECUTION_ENV_PATH (Triton's Python-backend
    parameter: the stub runs in that environment) names a folder without `bin/activate`."""
    missing = []
    for model_dir in sorted(path for path in repository.iterdir() if (path / CONFIG_NAME).is_file()):
        environment = environment_path(load_config(model_dir, config_name), model_dir)
        if environment is not None and not (environment / "bin" / "activate").is_file():
            missing.append((model_dir.name, environment))
    return missing
