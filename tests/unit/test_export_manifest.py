"""`make export` is a no-op only while sources, settings and artifacts all still match."""

from __future__ import annotations

from export.manifest import ExportManifest, file_digest, stale_reasons


def exported(tmp_path) -> ExportManifest:
    artifact = tmp_path / "encoder" / "1" / "model.onnx"
    artifact.parent.mkdir(parents=True)
    artifact.write_bytes(b"graph")
    manifest = ExportManifest("model", "digest-a", {"opset": 17})
    manifest.artifacts = {"encoder/1/model.onnx": file_digest(artifact)}
    manifest.save(tmp_path / "manifest.json")
    return ExportManifest.load(tmp_path / "manifest.json")


def test_matching_export_is_up_to_date(tmp_path) -> None:
    assert stale_reasons(exported(tmp_path), ExportManifest("model", "digest-a", {"opset": 17}), tmp_path) == []


def test_missing_manifest_means_export(tmp_path) -> None:
    assert stale_reasons(ExportManifest.load(tmp_path / "none.json"), ExportManifest("m", "d", {}), tmp_path) == ["no export manifest"]


def test_changed_source_or_settings_means_export(tmp_path) -> None:
    manifest = exported(tmp_path)
    reasons = stale_reasons(manifest, ExportManifest("model", "digest-b", {"opset": 18}), tmp_path)
    assert len(reasons) == 2
    assert "source model changed" in reasons[0]
    assert "settings changed" in reasons[1]


def test_truncated_artifact_is_detected(tmp_path) -> None:
    manifest = exported(tmp_path)
    (tmp_path / "encoder" / "1" / "model.onnx").write_bytes(b"gra")
    assert stale_reasons(manifest, ExportManifest("model", "digest-a", {"opset": 17}), tmp_path) == [
        "encoder/1/model.onnx differs from what was exported (damaged or edited)"
    ]


def test_deleted_artifact_is_detected(tmp_path) -> None:
    manifest = exported(tmp_path)
    (tmp_path / "encoder" / "1" / "model.onnx").unlink()
    assert stale_reasons(manifest, ExportManifest("model", "digest-a", {"opset": 17}), tmp_path) == ["encoder/1/model.onnx is missing"]
