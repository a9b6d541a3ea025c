"""`python -m tools.plan` on the shipped synthetic cost model: a plan, and a clear error for an impossible SLO."""

from __future__ import annotations

import json

from tools.paths import REPO_ROOT
from tools.plan import run

SYNTHETIC = REPO_ROOT / "tools" / "simulate" / "cost_models" / "synthetic-gpu.json"


def test_plan_names_a_config_replicas_and_an_hpa_target(capsys):
    code = run(["--cost-model", str(SYNTHETIC), "--rate", "500", "--p99-ms", "100", "--max-replicas", "4", "--requests", "300", "--json"])
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    assert document["cost_model_kind"] == "synthetic"
    assert 1 <= document["replicas"] <= 4
    assert document["hpa_target_queue_ms"] is not None
    assert all(p99 <= 100 for p99 in document["p99_ms_per_class"].values())


def test_impossible_slo_is_a_clear_error(capsys, caplog):
    code = run(["--cost-model", str(SYNTHETIC), "--rate", "500", "--p99-ms", "0.5", "--max-replicas", "2", "--requests", "200"])
    assert code == 2
    assert "impossible SLO" in caplog.text
    assert "Traceback" not in capsys.readouterr().err


def test_plot_writes_the_frontier(tmp_path, capsys):
    out = tmp_path / "frontier.png"
    code = run(
        [
            "--cost-model",
            str(SYNTHETIC),
            "--rate",
            "500",
            "--p99-ms",
            "100",
            "--max-replicas",
            "2",
            "--requests",
            "150",
            "--json",
            "--plot",
            str(out),
        ]
    )
    assert code == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
