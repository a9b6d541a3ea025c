"""The LLM tuner's restricted spaces and grid strategy options, and the pick-versus-grid
benchmark's comparison, on hand-made reports."""

from __future__ import annotations

import pytest

from tools.tune.llm.command import LlmTuneSettings, build_parser
from tools.tune.llm.space import LlmSpace
from tools.tune.llm.versus_grid import _without_option, compare, grid_prediction_errors


def settings(*argv: str) -> LlmTuneSettings:
    return LlmTuneSettings.from_cli_args(build_parser().parse_args(["--model", "llm", *argv]))


def test_axes_given_on_the_command_line_replace_those_of_the_space_and_keep_the_rest():
    chosen = settings("--max-num-seqs", "4,8", "--max-num-batched-tokens", "64,256,512", "--long-prefill-token-threshold", "64,256")
    assert chosen.space.max_num_seqs == (4, 8)
    assert chosen.space.max_wait_ms == LlmSpace().max_wait_ms  # not given: the default space's
    # per seqs: budget 64 takes chunk 64 only (a chunk above the budget is left out), 256 and
    # 512 take both: 5; times 2 seqs and 3 waits
    assert len(list(chosen.space.candidates())) == 5 * 2 * 3
    assert chosen.strategy == "model-guided"


def test_quick_is_the_base_the_axes_replace():
    chosen = settings("--quick", "--max-wait-ms", "0", "--strategy", "grid")
    assert chosen.space == LlmSpace.quick().with_axes(max_wait_ms=[0.0])
    assert chosen.strategy == "grid"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--max-num-seqs", "0"), "positive"),
        (("--max-wait-ms", "-1"), ">= 0"),
        (("--max-num-seqs", "64", "--max-num-batched-tokens", "32"), "no valid candidate"),
    ],
)
def test_a_space_that_cannot_be_searched_is_refused_with_the_reason(argv, message):
    with pytest.raises(ValueError, match=message):
        settings(*argv)


def test_an_unknown_axis_is_refused():
    with pytest.raises(ValueError, match="no such knob"):
        LlmSpace().with_axes(max_num_sequences=[4])


def row(parameters: dict, goodput: float, meets: bool = True, tokens: float = 50.0, predicted_tokens: float = 50.0, role="grid") -> dict:
    measured = {"goodput_rps": goodput, "output_tokens_per_s": tokens, "ttft_p99_ms": 1000.0, "tpot_p99_ms": 200.0, "tpot_p50_ms": 150.0}
    predicted = {**measured, "output_tokens_per_s": predicted_tokens}
    return {"parameters": parameters, "measured": measured, "predicted": predicted, "meets_slo": meets, "role": role}


A, B, C, CONFIG = ({"max_num_seqs": str(n)} for n in (4, 8, 16, 32))


def test_the_pick_is_judged_against_the_grids_best_inside_the_grids_run_and_across_runs():
    guided = {"winner": B, "measured": [row(B, 0.80), row(A, 0.70), row(CONFIG, 0.5)], "wall_s": 200.0}
    grid = {"simulated": 4, "measured": [row(A, 0.74), row(B, 0.78), row(C, 0.60, meets=False), row(CONFIG, 0.5)], "wall_s": 800.0}
    result = compare(guided, grid)
    assert result["candidates"] == 3
    assert result["grid_best"]["parameters"] == B
    assert result["pick_in_grid"]["rank"] == 1
    assert result["wall_ratio"] == 0.25
    assert result["goal"] == {
        "goodput_at_least_grid_best_same_run": True,
        "goodput_at_least_grid_best_across_runs": True,  # 0.80 in its own run >= 0.78
        "goodput_at_least_grid_best_rematch": None,  # the pick is the grid's best: nothing to settle
        "within_a_third_of_the_grid_wall_time": True,
    }


def test_a_pick_below_the_grids_best_or_too_slow_misses_the_goals():
    guided = {"winner": A, "measured": [row(A, 0.70), row(CONFIG, 0.5)], "wall_s": 400.0}
    # C has the most goodput but misses the SLO: B, meeting it, is the grid's best
    grid = {"simulated": 4, "measured": [row(A, 0.72), row(B, 0.78), row(C, 0.90, meets=False), row(CONFIG, 0.5)], "wall_s": 800.0}
    result = compare(guided, grid)
    assert result["grid_best"]["parameters"] == B
    assert result["pick_in_grid"]["rank"] == 2
    assert not any(result["goal"].values())


def test_the_grid_run_replaces_the_cost_model_option_in_either_spelling():
    assert _without_option(["--quick", "--cost-model", "calibrate", "--seed", "1"], "--cost-model") == ["--quick", "--seed", "1"]
    assert _without_option(["--cost-model=auto", "--quick"], "--cost-model") == ["--quick"]


def test_the_simulators_error_over_the_grid_leaves_out_the_anchor_its_scale_came_from():
    grid = {
        "measured": [
            row(A, 0.7, predicted_tokens=55.0),  # +10 %
            row(B, 0.7, predicted_tokens=40.0),  # -20 %
            row(C, 0.7, predicted_tokens=50.0),  # 0
            row(CONFIG, 0.7, predicted_tokens=500.0, role="config, anchor"),  # +900 %, the level the model was scaled to
        ]
    }
    errors = grid_prediction_errors(grid)
    assert errors["output_tokens_per_s"] == {"median_abs_error": 0.1, "goal": 0.1, "met": True, "rows": 3}
    assert errors["tpot_p50_ms"]["median_abs_error"] == 0.0
    # the rows a live scale re-predicted also carry the model as calibrated: judged apart
    grid["measured"][0]["predicted_as_calibrated"] = {**grid["measured"][0]["predicted"], "output_tokens_per_s": 75.0}  # +50 %
    unscaled = grid_prediction_errors(grid, "predicted_as_calibrated")
    assert unscaled["output_tokens_per_s"] == {"median_abs_error": 0.5, "goal": 0.1, "met": False, "rows": 1}
