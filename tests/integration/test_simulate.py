"""`python -m tools.simulate calibrate` end to end on the real local Triton (its own server),
then `predict` on the model it wrote: a few points only, no figure depends on the machine."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.simulate.cost_model import CostModel

pytestmark = pytest.mark.integration


def test_calibrate_writes_a_cost_model_that_predict_runs_on(tmp_path) -> None:
    out = tmp_path / "cost.json"
    command = [
        sys.executable,
        "-m",
        "tools.simulate",
        "calibrate",
        "--out",
        str(out),
        "--batch-sizes",
        "1,2",
        "--lengths",
        "16",
        "--instances",
        "1",
        "--repeats",
        "1",
        "--no-plot",
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    model = CostModel.load(out)
    grid = model.steps["encoder"].grid(1)
    assert grid.batch_sizes == [1, 2] and grid.lengths == [16]
    assert all(value > 0 for row in grid.execution_ms for value in row)
    assert model.kind == "measured"
    assert model.measured_on["software"]["triton"], "the server's version is recorded"
    assert model.measured_on["cpu"]["model"]
    predict = [
        sys.executable,
        "-m",
        "tools.simulate",
        "predict",
        "--cost-model",
        str(out),
        "--config",
        str(MODEL_REPOSITORY / "encoder" / "config.pbtxt"),
        "--concurrency",
        "4",
        "--requests",
        "500",
        "--json",
    ]
    answer = subprocess.run(predict, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert answer.returncode == 0, answer.stderr[-3000:]
    assert json.loads(answer.stdout)["throughput_rps"] > 0
