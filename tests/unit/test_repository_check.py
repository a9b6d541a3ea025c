"""The launcher refuses to start a repository whose artifacts are not exported."""

from __future__ import annotations

import shutil

from tools.paths import MODEL_REPOSITORY
from tools.repo.artifacts import missing_artifacts


def copy_configs(destination) -> None:
    for model in ("tokenizer", "encoder", "embed"):
        (destination / model / "1").mkdir(parents=True)
        shutil.copy(MODEL_REPOSITORY / model / "config.pbtxt", destination / model)
        for source in (MODEL_REPOSITORY / model / "1").glob("*.py"):  # committed code: model.py and its modules
            shutil.copy(source, destination / model / "1")


def test_unexported_repository_lists_onnx_model_and_tokenizer_file(tmp_path) -> None:
    copy_configs(tmp_path)
    missing = {str(path.relative_to(tmp_path)) for path in missing_artifacts(tmp_path)}
    assert missing == {"encoder/1/model.onnx", "tokenizer/1/tokenizer.json"}


def test_exported_repository_lacks_nothing(tmp_path) -> None:
    copy_configs(tmp_path)
    (tmp_path / "encoder" / "1" / "model.onnx").write_bytes(b"x")
    (tmp_path / "tokenizer" / "1" / "tokenizer.json").write_text("{}")
    assert missing_artifacts(tmp_path) == []
