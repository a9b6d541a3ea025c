"""One short end-to-end tune on the real local Triton (explicit model control)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.instances import core_budget
from tools.repo.model_config import batching_problems, load_config

pytestmark = pytest.mark.integration


def test_a_tiny_grid_sweep_writes_a_report_and_a_loadable_winner(tmp_path) -> None:
    command = [
        sys.executable,
        "-m",
        "tools.tune",
        "--model",
        "encoder",
        "--p99-ms",
        "5000",
        "--seq-len",
        "32",
        "--strategy",
        "grid",
        "--max-batch-sizes",
        "32",
        "--delays-us",
        "0,3000",
        "--preferred",
        "8",
        "--instances",
        "1",
        "--priority-queues",
        "try-without",
        "--confirm",
        "1",
        "--concurrency",
        "4",
        "--warmup",
        "0.3",
        "--window",
        "1",
        "--max-windows",
        "3",
        "--report-dir",
        str(tmp_path),
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "winner:" in result.stdout
    assert result.stdout.count("[trial") >= 4  # the committed config plus 4 candidates (one may equal it)
    assert result.stdout.count("[confirm ]") == 1, "the best config was measured a second time"

    trials = json.loads((tmp_path / "trials.json").read_text())
    assert all(not trial["error"] for trial in trials), "every candidate loaded live"
    assert {"trials.csv", "summary.json", "config.pbtxt", "latency_vs_throughput.png", "winner_batch_sizes.png"} <= {
        p.name for p in tmp_path.iterdir()
    }
    winner = load_config(tmp_path / "config.pbtxt")
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert winner.dynamic_batching.max_queue_delay_microseconds == summary["winner"]["candidate"]["delay_us"]
    assert batching_problems(winner) == []
    instances = summary["winner"]["candidate"]["instances"]  # 1 or 2, or the committed count if its baseline won
    assert [group.count for group in winner.instance_group] == [instances]
    threads = max(1, core_budget(load_config(MODEL_REPOSITORY / "encoder")) // instances)
    assert winner.parameters["intra_op_thread_count"].string_value == str(threads), "the committed cores, shared out"
    with_queues = summary["winner"]["candidate"]["priority_queues"]
    assert (winner.dynamic_batching.priority_levels == 2) == with_queues
    assert winner.dynamic_batching.HasField("default_queue_policy") == with_queues
    assert {trial["candidate"]["priority_queues"] for trial in trials} == {True, False}, "both queue settings were tried"
    assert sum(trial["runs"] == 2 for trial in trials) == 1, "exactly the one finalist has two runs"


def test_tuning_a_server_without_explicit_model_control_is_refused(triton) -> None:
    command = [sys.executable, "-m", "tools.tune", "--model", "encoder", "--p99-ms", "100", "--url", triton.http_url]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2
    assert "explicit model-control mode" in result.stderr


def test_model_guided_measures_the_top_and_the_default_and_reports_predicted_vs_measured(tmp_path) -> None:
    cost_model = REPO_ROOT / "tools" / "simulate" / "cost_models" / "measured-xeon-2core.json"
    command = [
        sys.executable,
        "-m",
        "tools.tune",
        "--model",
        "encoder",
        "--p99-ms",
        "5000",
        "--strategy",
        "model-guided",
        "--cost-model",
        str(cost_model),
        "--top",
        "2",
        "--delays-us",
        "0,2000",
        "--instances",
        "1",
        "--priority-queues",
        "try-without",
        "--confirm",
        "1",
        "--concurrency",
        "4",
        "--warmup",
        "0.3",
        "--window",
        "1",
        "--max-windows",
        "3",
        "--report-dir",
        str(tmp_path),
        "--no-plots",
    ]
    result = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("[trial") == 4, "the server's config, the top 2 and the control"
    report = json.loads((tmp_path / "guided.json").read_text())
    assert report["simulated"] >= 12
    rows = report["predicted_vs_measured"]
    assert len(rows) == 4
    assert any(row["role"].startswith("control: dynamic_batching {}") for row in rows)
    assert all(row["measured"]["throughput_rps"] > 0 and row["predicted"]["throughput_rps"] > 0 for row in rows)
    assert "predicted" in result.stdout and "winner:" in result.stdout
