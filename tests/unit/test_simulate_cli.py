"""`python -m tools.simulate`: the predict contract, the cost model format, and bad input
(a clear error naming the problem, exit status 2, never a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.simulate.__main__ import run
from tools.simulate.configs import load_entries
from tools.simulate.cost_model import CostModel, Grid

COST = {
    "format": "triton-batcher-cost-model/1",
    "kind": "synthetic",
    "steps": {
        "encoder": {"1": {"batch_sizes": [1, 32], "lengths": [16, 128], "execution_ms": [[2.0, 8.0], [20.0, 150.0]]}},
        "tokenizer": {"1": {"batch_sizes": [1, 32], "lengths": [16], "execution_ms": [[0.5], [3.0]]}},
    },
}


@pytest.fixture
def cost_file(tmp_path: Path) -> Path:
    path = tmp_path / "cost.json"
    path.write_text(json.dumps(COST))
    return path


def test_grid_is_piecewise_linear_in_batch_and_length_and_extrapolates():
    grid = Grid([1, 3], [10, 20], [[1.0, 2.0], [3.0, 6.0]])
    assert grid.at(1, 10) == 1.0
    assert grid.at(2, 15) == pytest.approx((1.5 + 4.5) / 2)
    assert grid.at(5, 10) == pytest.approx(5.0)  # beyond the table: the last segment continued


def test_cost_model_round_trips_through_json(cost_file: Path, tmp_path: Path):
    model = CostModel.load(cost_file)
    model.save(tmp_path / "again.json")
    assert CostModel.load(tmp_path / "again.json") == model


def test_predict_json_contract(cost_file: Path, capsys):
    config = MODEL_REPOSITORY / "encoder" / "config.pbtxt"
    code = run(["predict", "--cost-model", str(cost_file), "--config", str(config), "--concurrency", "8", "--requests", "2000", "--json"])
    assert code == 0
    document = json.loads(capsys.readouterr().out)
    for key in ("throughput_rps", "p50_ms", "p99_ms", "avg_batch"):
        assert isinstance(document[key], float)
    assert document["throughput_rps"] > 0


def test_predict_open_loop_with_priorities_reports_each_class(cost_file: Path, capsys):
    argv = ["predict", "--cost-model", str(cost_file), "--rate", "100", "--distribution", "poisson", "--priority-mix", "1:0.3,2:0.7"]
    assert run([*argv, "--requests", "2000", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document["per_priority"]) == {"1", "2"}


def test_shipped_validation_configs_parse_and_cover_the_space():
    entries = load_entries(REPO_ROOT / "tools" / "simulate" / "validation-configs.yaml")
    assert len(entries) >= 8
    assert any(not e.dynamic_batching for e in entries)
    assert {e.instance_count for e in entries} == {1, 2}
    assert max(e.max_queue_delay_microseconds for e in entries) >= 20_000
    assert any(e.preferred_batch_size for e in entries)


def bad(argv: list[str], capsys) -> str:
    code = run(argv)
    captured = capsys.readouterr()
    assert code == 2
    assert "Traceback" not in captured.err + captured.out
    return captured.err + captured.out


def test_missing_cost_model_is_a_clear_error(tmp_path: Path, capsys, caplog):
    bad(["predict", "--cost-model", str(tmp_path / "none.json"), "--concurrency", "1"], capsys)
    assert "cannot read the cost model" in caplog.text


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("{not json", "is not JSON"),
        (json.dumps({"format": "other"}), "'format' must be"),
        (
            json.dumps({**COST, "steps": {"encoder": {"1": {"batch_sizes": [1, 2], "lengths": [8], "execution_ms": [[1.0]]}}}}),
            "execution_ms must be",
        ),
        (
            json.dumps({**COST, "steps": {"encoder": {"1": {"batch_sizes": [2, 1], "lengths": [8], "execution_ms": [[1.0], [2.0]]}}}}),
            "increasing",
        ),
        (json.dumps({**COST, "steps": {"encoder": {"1": {"batch_sizes": [1], "lengths": [8], "execution_ms": [[-1.0]]}}}}), "positive"),
    ],
)
def test_malformed_cost_model_is_a_clear_error(tmp_path: Path, content: str, problem: str, capsys, caplog):
    path = tmp_path / "cost.json"
    path.write_text(content)
    bad(["predict", "--cost-model", str(path), "--concurrency", "1"], capsys)
    assert problem in caplog.text


def test_unrepresentable_config_is_a_clear_error(cost_file: Path, capsys, caplog):
    bad(
        ["predict", "--cost-model", str(cost_file), "--config", str(MODEL_REPOSITORY / "embed" / "config.pbtxt"), "--concurrency", "1"],
        capsys,
    )
    assert "is an ensemble" in caplog.text


def test_traffic_with_no_requests_is_a_clear_error(cost_file: Path, capsys, caplog):
    bad(["predict", "--cost-model", str(cost_file)], capsys)
    assert "the traffic has no requests" in caplog.text
    bad(["predict", "--cost-model", str(cost_file), "--concurrency", "4", "--requests", "0"], capsys)
    assert "--requests 0" in caplog.text


def test_bad_configs_file_is_a_clear_error(cost_file: Path, tmp_path: Path, capsys, caplog):
    configs = tmp_path / "configs.yaml"
    configs.write_text("configs:\n  - {name: a, max_queue_delay: 5}\n")
    bad(
        ["validate", "--cost-model", str(cost_file), "--configs", str(configs), "--concurrency", "1", "--json", str(tmp_path / "o.json")],
        capsys,
    )
    assert "unknown fields ['max_queue_delay']" in caplog.text
