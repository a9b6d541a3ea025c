"""A model repository without some of its models, as a folder of links.

Triton in `none` control mode loads every folder of its repository. The embedding tools and
the test suite's servers have no use for the LLM (seconds to load, over a gigabyte of KV cache
preallocated), so they serve a view of the committed repository that leaves it out.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path


def repository_without(repository: Path, excluded: Collection[str], folder: Path) -> Path:
    """`folder` filled with a link to each model folder of `repository` not in `excluded`."""
    folder.mkdir(parents=True, exist_ok=True)
    for model_dir in sorted(repository.iterdir()):
        if model_dir.is_dir() and model_dir.name not in excluded:
            (folder / model_dir.name).symlink_to(model_dir.resolve(), target_is_directory=True)
    return folder
