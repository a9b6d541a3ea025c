"""A throw-away copy of the model repository with different queue policies.

Overload and timeout behaviour is shown on a server whose queues are small enough to
fill in a few seconds; the committed repository is never edited for that. Artifacts
are linked, not copied (the ONNX file is ~90 MB); configs go through the protobuf schema.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

from tools.paths import MODEL_REPOSITORY
from tools.repo.model_config import ModelConfig, load_config, save_config


def copy_repository(destination: Path, edits: dict[str, Callable[[ModelConfig], None]], source: Path = MODEL_REPOSITORY) -> Path:
    """Copy `source` to `destination` (files of version folders as symlinks) and apply
    `edits[model](config)` to each named model's config."""
    if destination.exists():
        shutil.rmtree(destination)
    for model_dir in sorted(p for p in source.iterdir() if (p / "config.pbtxt").is_file()):
        target = destination / model_dir.name
        target.mkdir(parents=True)
        for item in model_dir.iterdir():
            if item.is_dir():
                (target / item.name).mkdir()
                for file in (f for f in item.iterdir() if f.is_file()):
                    (target / item.name / file.name).symlink_to(file.resolve())
        config = load_config(model_dir)
        if model_dir.name in edits:
            edits[model_dir.name](config)
        save_config(config, target / "config.pbtxt")
    return destination


def set_queue_policy(
    config: ModelConfig, level: int | None, max_queue_size: int, default_timeout_us: int = 0, allow_override: bool = True
) -> None:
    """Level None: the default policy (every level without its own); else `priority_queue_policy[level]`."""
    batcher = config.dynamic_batching
    policy = batcher.default_queue_policy if level is None else batcher.priority_queue_policy[level]
    policy.timeout_action = policy.REJECT
    policy.max_queue_size = max_queue_size
    policy.default_timeout_microseconds = default_timeout_us
    policy.allow_timeout_override = allow_override
