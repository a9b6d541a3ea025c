"""Building our kernel libraries (llm.engine.kernels.build): failures reported, stale libraries
never loaded, and no process-wide side effect from the flags."""

from __future__ import annotations

import pytest
import torch

from llm.engine.kernels import build
from llm.engine.kernels.load import KernelUnavailable, load_kernels


@pytest.fixture(scope="module")
def kernel():
    try:
        load_kernels("paged_attention", torch.device("cpu"))
    except KernelUnavailable as error:
        pytest.skip(str(error))


def test_a_failing_compiler_is_reported_with_its_output(monkeypatch, tmp_path):
    monkeypatch.setattr(build, "BUILD_DIR", tmp_path)
    monkeypatch.setenv("CXX", "false")
    with pytest.raises(build.KernelBuildError, match="compiling paged_attention failed"):
        build.build("paged_attention")
    assert list(tmp_path.iterdir()) == []  # no half-written library left behind


def test_a_library_is_keyed_by_its_source_and_rebuilt_when_that_changes(monkeypatch, tmp_path):
    """A changed kernel source must never load the old library (a stale .so would be silently wrong)."""
    source = tmp_path / "src"
    source.mkdir()
    (source / "paged_attention.cpp").write_text("// one version\n")
    monkeypatch.setattr(build, "SOURCE_DIR", source)
    monkeypatch.setattr(build, "BUILD_DIR", tmp_path / "out")
    first = build.library_path("paged_attention")
    (source / "paged_attention.cpp").write_text("// another version\n")
    assert build.library_path("paged_attention") != first


def test_loading_a_library_keeps_denormal_floats(kernel):
    """Built with -ffast-math and linked with it, a library flushes denormals to zero for the
    whole process (gcc's crtfastmath.o); the build keeps that flag to compiling."""
    smallest = torch.tensor(1e-45, dtype=torch.float32)
    assert smallest.item() > 0 and (smallest * 1.0).item() > 0
