"""Decide whether the exported artifacts are up to date, and detect damaged ones.

The manifest records fingerprints of the source model files, the export settings and
every artifact written. `make export` is a no-op only when all of them still match,
so a changed model, a changed setting or a truncated model.onnx all trigger a re-export.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

MANIFEST_NAME = "export_manifest.json"
# Settings that exports made before they were recorded had implicitly: such an export
# still counts as up to date for them (an fp32 export is not redone for the new field).
IMPLICIT_SETTINGS = {"precision": "fp32"}


def file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def sources_digest(files: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        digest.update(file_digest(path).encode())
    return digest.hexdigest()


@dataclass
class ExportManifest:
    source_model: str
    source_digest: str
    settings: dict
    artifacts: dict[str, str] = field(default_factory=dict)  # path relative to the repository -> sha256
    parity: dict = field(default_factory=dict)
    quality: dict = field(default_factory=dict)  # the quality gate's figures (reduced precision only)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2, ensure_ascii=False) + "\n")

    @classmethod
    def load(cls, path: Path) -> ExportManifest | None:
        try:
            return cls(**json.loads(path.read_text()))
        except (FileNotFoundError, json.JSONDecodeError, TypeError):
            return None


def stale_reasons(manifest: ExportManifest | None, expected: ExportManifest, repository: Path) -> list[str]:
    """Why a re-export is needed (empty: up to date). `expected` carries no artifacts yet."""
    if manifest is None:
        return ["no export manifest"]
    reasons = []
    if manifest.source_digest != expected.source_digest:
        reasons.append(f"source model changed ({expected.source_model})")
    recorded, wanted = {**IMPLICIT_SETTINGS, **manifest.settings}, {**IMPLICIT_SETTINGS, **expected.settings}
    if recorded != wanted:
        changed = sorted(key for key in recorded.keys() | wanted.keys() if recorded.get(key) != wanted.get(key))
        if "precision" in changed:  # settings that only one precision has follow from it
            changed = [key for key in changed if key in recorded and key in wanted]
        reasons.append(f"export settings changed ({', '.join(f'{key}: {recorded.get(key)} -> {wanted.get(key)}' for key in changed)})")
    for relative, digest in manifest.artifacts.items():
        path = repository / relative
        if not path.is_file():
            reasons.append(f"{relative} is missing")
        elif file_digest(path) != digest:
            reasons.append(f"{relative} differs from what was exported (damaged or edited)")
    return reasons
