"""Which sentence-transformers folders the export accepts, and the errors for the rest."""

from __future__ import annotations

import json
import shutil

import pytest

from export.source_model import SourceModelError, default_model_dir, inspect_model


def test_default_model_is_minilm_with_mean_pooling_and_normalisation() -> None:
    model = inspect_model(default_model_dir())
    assert (model.pooling, model.normalize, model.max_seq_length, model.dimension) == ("mean", True, 256, 384)


def test_missing_folder_is_named(tmp_path) -> None:
    with pytest.raises(SourceModelError, match="does not exist"):
        inspect_model(tmp_path / "nowhere")


def test_folder_without_modules_json_is_not_a_sentence_transformers_model(tmp_path) -> None:
    with pytest.raises(SourceModelError, match=r"modules\.json is missing"):
        inspect_model(tmp_path)


def test_unsupported_pooling_is_refused(tmp_path) -> None:
    model_dir = tmp_path / "model"
    shutil.copytree(default_model_dir(), model_dir, ignore=shutil.ignore_patterns("*.safetensors"))
    pooling = model_dir / "1_Pooling" / "config.json"
    settings = json.loads(pooling.read_text())
    settings.update(pooling_mode_mean_tokens=False, pooling_mode_max_tokens=True)
    pooling.write_text(json.dumps(settings))
    with pytest.raises(SourceModelError, match="unsupported pooling"):
        inspect_model(model_dir)
