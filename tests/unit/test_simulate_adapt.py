"""tools.adapt's control law inside the simulator (tools/simulate/adapt_sim.py): what it
does on a bursty trace where batching pays, and bad input (exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.model_config import load_config, without_priority_queues
from tools.simulate.__main__ import run
from tools.simulate.adapt_sim import AdaptSimSettings, evaluate, render
from tools.simulate.cost_model import CostModel

SYNTHETIC = REPO_ROOT / "tools" / "simulate" / "cost_models" / "synthetic-gpu.json"
BASE = without_priority_queues(load_config(MODEL_REPOSITORY / "encoder"))


def short_trace(**overrides) -> AdaptSimSettings:
    """A short low -> peak -> low trace; the peak is 6x the batch-1 capacity of the flat curve."""
    settings = dict(
        p99_ms=10.0,
        low_rate=200.0,
        peak_rate=5000.0,
        phase_s=12.0,
        pattern=("low", "peak", "low"),
        static_delays_us=(0, 2000),
        control_window_s=1.0,
        min_interval_s=2.0,
        reload_s=0.5,
    )
    return AdaptSimSettings(**{**settings, **overrides})


@pytest.fixture(scope="module")
def result() -> dict:
    return evaluate(CostModel.load(SYNTHETIC), BASE, short_trace())


def test_the_controller_holds_no_delay_when_quiet_and_raises_it_under_a_peak_where_batching_pays(result):
    first_low, peak = result["phases"][:2]
    assert result["batching_gain"] > 1.2
    assert first_low["controller_delay"]["max_us"] == 0
    assert peak["controller_delay"]["max_us"] > 0
    assert peak["controller_asked"].get("up", 0) > 0


def test_a_floor_keeps_a_standby_delay_while_quiet_and_the_peak_starts_without_a_collapse(result):
    floored = evaluate(CostModel.load(SYNTHETIC), BASE, short_trace(min_delay_us=1000))
    assert floored["start_delay_us"] == 1000
    for row in floored["phases"]:
        assert row["controller_delay"]["min_us"] >= 1000, row["phase"]
    peak = lambda run: run["phases"][1]["runs"]["controller"]["attainment"]  # noqa: E731
    assert peak(floored) > peak(result), "without the floor the first seconds of the peak run at delay 0"


def test_every_static_delay_and_the_controller_are_scored_per_phase_and_overall(result):
    assert [row["phase"] for row in result["phases"]] == ["low", "peak", "low", "whole trace"]
    for row in result["phases"]:
        assert set(row["runs"]) == {"static 0 us", "static 2000 us", "controller"}
        assert all(0.0 <= figures["attainment"] <= 1.0 for figures in row["runs"].values())
    assert result["best_static"] in ("static 0 us", "static 2000 us")
    text = render(result)
    assert "SYNTHETIC" in text and "whole trace" in text


def test_the_subcommand_writes_json(tmp_path: Path, capsys):
    out = tmp_path / "adapt.json"
    code = run(
        ["adapt", "--cost-model", str(SYNTHETIC), "--phase-s", "2", "--pattern", "low,peak", "--delays-us", "0,4000", "--json", str(out)]
    )
    assert code == 0
    assert json.loads(out.read_text())["phases"][-1]["phase"] == "whole trace"
    assert "controller" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--p99-ms", "0"], "impossible SLO"),
        (["--pattern", "low,noon"], "--pattern"),
        (["--delays-us", "0,x"], "--delays-us"),
        (["--peak-rate", "-5"], "--peak-rate"),
        (["--min-delay-us", "-1"], "--min-delay-us"),
    ],
)
def test_bad_input_is_a_clear_error_with_exit_2(arguments, message, caplog, capsys):
    code = run(["adapt", "--cost-model", str(SYNTHETIC), "--phase-s", "1", *arguments])
    assert code == 2
    assert message in caplog.text
    assert "Traceback" not in capsys.readouterr().err


def test_a_missing_cost_model_is_a_clear_error(tmp_path: Path, caplog):
    assert run(["adapt", "--cost-model", str(tmp_path / "none.json")]) == 2
    assert "none.json" in caplog.text
