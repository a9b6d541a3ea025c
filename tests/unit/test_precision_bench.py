"""`python -m tools.bench.precision`: paired ratios, the report's CPU line, and its fp32 precondition."""

from __future__ import annotations

import pytest

from export.manifest import ExportManifest
from tools.bench.precision import SHAPES, CpuInfo, fp32_source, render_markdown, run, summarise


def samples(fp32: list[float], int8: list[float]) -> dict[str, dict[str, list[float]]]:
    return {"fp32": {f"b{b}s{s}": fp32 for b, s in SHAPES}, "int8-dynamic": {f"b{b}s{s}": int8 for b, s in SHAPES}}


def test_speed_ups_are_paired_per_round_so_drift_cancels() -> None:
    # the machine slows down 2x in round 2; a variant 1.5x faster in every round stays 1.5x
    summary = summarise(samples([100.0, 50.0, 100.0], [150.0, 75.0, 150.0]))["int8-dynamic"]["b1s32"]
    assert summary["median_ratio_to_fp32"] == pytest.approx(1.5)
    assert summary["min_ratio_to_fp32"] == pytest.approx(1.5) and summary["max_ratio_to_fp32"] == pytest.approx(1.5)
    assert summary["median_rows_per_s"] == 150.0 and summary["min_rows_per_s"] == 75.0


def test_the_report_names_the_cpu_and_its_int8_instructions() -> None:
    cpu = CpuInfo("Some CPU", 2, ("avx2",))
    report = {
        "date": "today",
        "cpu": {"model": cpu.model, "cores": 2, "flags": list(cpu.flags), "int8_instructions": cpu.int8_instructions},
        "onnxruntime": "1.x",
        "threads": 1,
        "rounds": 3,
        "seconds": 0.5,
        "speed": summarise(samples([100.0, 50.0, 100.0], [150.0, 75.0, 150.0])),
        "quality": {},
    }
    text = render_markdown(report)
    assert "CPU: Some CPU, 2 cores" in text and "no VNNI/AMX" in text
    assert "x1.50 [1.50-1.50]" in text
    assert CpuInfo("x", 2, ("avx512_vnni",)).int8_instructions == "avx512_vnni"


def test_the_comparison_refuses_to_start_from_an_int8_export(tmp_path, caplog) -> None:
    version = tmp_path / "encoder" / "1"
    version.mkdir(parents=True)
    (version / "model.onnx").write_bytes(b"graph")
    ExportManifest("m", "d", {"precision": "int8"}).save(version / "export_manifest.json")
    with pytest.raises(ValueError, match="is a int8 export"):
        fp32_source(tmp_path)
    assert run(["--repository", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "PRECISION=fp32" in caplog.text
    assert run(["--variants", "int4"]) == 2
    assert "unknown variant(s) int4" in caplog.text
