"""The rematch of close candidates: its order, its pairing of requests and its pooled verdict."""

from __future__ import annotations

import pytest

from tools.load.llm.records import StreamRecord
from tools.simulate.llm.predict import LevelPlan
from tools.simulate.llm.slo import LlmSlo
from tools.tune.llm.rematch import close_contenders, rematch, round_orders, verdict
from tools.tune.llm.versus_grid import compare

SLO = LlmSlo(ttft_p99_s=1.0, tpot_p99_s=0.1)
FAST, SLOW = {"max_num_seqs": "8"}, {"max_num_seqs": "4"}


def record(ttft_s: float, tpot_s: float, tokens: int = 3) -> StreamRecord:
    times = [ttft_s + k * tpot_s for k in range(tokens)]
    return StreamRecord(0, 0.0, token_times=times, end_s=times[-1], tokens_in=10, tokens_out=tokens)


def test_rounds_turn_the_order_round_abba_for_two():
    assert round_orders(2, 4) == [[0, 1], [1, 0], [0, 1], [1, 0]]
    assert round_orders(3, 2) == [[0, 1, 2], [2, 1, 0]]
    with pytest.raises(ValueError, match="at least one"):
        round_orders(2, 0)


def test_each_round_gives_every_contender_the_same_requests_and_starts_past_the_last_rounds():
    calls = []
    sent = {"8": 5, "4": 7}

    def measure_level(knobs, level):
        calls.append((knobs["max_num_seqs"], level.first_request, level.seconds))
        if knobs == FAST:  # three good requests a level
            return [record(0.2, 0.05) for _ in range(3)], 10.0, sent["8"]
        return [record(0.2, 0.05), record(0.2, 0.05), record(0.5, 0.2)], 10.0, sent["4"]  # one misses TPOT

    results = rematch([SLOW, FAST], measure_level, LevelPlan(seconds=60.0, first_request=100), rounds=2, slo=SLO)
    # ABBA; round 2 starts where round 1's furthest level stopped (100 + 7)
    assert calls == [("4", 100, 60.0), ("8", 100, 60.0), ("8", 107, 60.0), ("4", 107, 60.0)]
    assert [len(result.records) for result in results] == [6, 6]
    assert [result.duration_s for result in results] == [20.0, 20.0]

    rows = verdict(results, SLO)
    fast, slow = rows
    assert fast["parameters"] == FAST and fast["meets_slo"]
    assert fast["pooled"]["goodput_rps"] == 0.3  # 6 good over 20 s
    assert fast["goodput_gap"] == 0.0
    assert fast["one_request_share"] == pytest.approx(1 / 6, abs=1e-4)
    assert not slow["meets_slo"]  # the pooled TPOT p99 is 200 ms
    assert slow["pooled"]["goodput_rps"] == 0.2  # 4 good over 20 s
    assert slow["goodput_gap"] == pytest.approx(-1 / 3, abs=1e-4)
    assert [level["round"] for level in slow["levels"]] == [1, 2]
    assert [level["first_request"] for level in slow["levels"]] == [100, 107]


def test_the_rematch_decides_the_goal_when_the_pick_is_not_the_grids_best():
    def row(parameters, goodput):
        measured = {"goodput_rps": goodput, "output_tokens_per_s": 30.0, "ttft_p99_ms": 900.0, "tpot_p99_ms": 90.0, "tpot_p50_ms": 80.0}
        return {"parameters": parameters, "measured": measured, "predicted": measured, "meets_slo": True, "role": "grid"}

    guided = {"winner": FAST, "measured": [row(FAST, 0.50)], "wall_s": 100.0}
    grid = {"simulated": 3, "measured": [row(SLOW, 0.56), row(FAST, 0.55)], "wall_s": 600.0}

    def rematch_rows(pick_goodput: float, best_goodput: float) -> list[dict]:
        rows = [
            {"parameters": FAST, "pooled": {"goodput_rps": pick_goodput}, "one_request_share": 0.03},
            {"parameters": SLOW, "pooled": {"goodput_rps": best_goodput}, "one_request_share": 0.03},
        ]
        return sorted(rows, key=lambda row: row["pooled"]["goodput_rps"], reverse=True)

    assert compare(guided, grid)["goal"]["goodput_at_least_grid_best_rematch"] is None  # no rematch ran
    won = compare(guided, grid, rematch_rows(0.57, 0.55))
    assert won["goal"]["goodput_at_least_grid_best_same_run"] is False
    assert won["goal"]["goodput_at_least_grid_best_rematch"] is True
    assert won["rematch"]["pick_first"]
    assert won["rematch"]["pick_goodput_gap"] == pytest.approx(0.57 / 0.55 - 1, abs=1e-4)  # against the grid's best, not itself
    lost = compare(guided, grid, rematch_rows(0.53, 0.55))
    assert lost["goal"]["goodput_at_least_grid_best_rematch"] is False
    assert lost["rematch"]["pick_goodput_gap"] == pytest.approx(0.53 / 0.55 - 1, abs=1e-4)


def measured_row(parameters: dict, good: int, duration_s: float, meets: bool = True) -> dict:
    figures = {
        "requests": good, "completed": good, "outcomes": {"ok": good}, "duration_s": duration_s,
        "output_tokens_per_s": 40.0, "requests_per_s": good / duration_s, "goodput_rps": good / duration_s, "good_share": 1.0,
        "ttft_p50_ms": 500.0, "ttft_p99_ms": 900.0 if meets else 2000.0, "tpot_p50_ms": 50.0, "tpot_p99_ms": 80.0,
        "itl_p99_ms": 90.0, "e2e_p50_ms": 3000.0, "mean_tokens_in": 100.0, "mean_tokens_out": 50.0,
    }  # fmt: skip
    return {"parameters": parameters, "label": str(parameters), "measured": figures, "meets_slo": meets}


def test_the_contenders_are_the_rows_within_one_request_of_the_leader_on_its_side_of_the_slo():
    leader = measured_row({"max_num_seqs": "8"}, good=20, duration_s=28.0)  # 0.714/s: one request is 5 %
    close = measured_row({"max_num_seqs": "16"}, good=20, duration_s=29.0)  # 0.690/s: 3.4 % below
    far = measured_row({"max_num_seqs": "4"}, good=16, duration_s=28.0)  # 20 % below
    missing = measured_row({"max_num_seqs": "32"}, good=20, duration_s=28.0, meets=False)  # as much goodput, misses the SLO
    contenders = close_contenders([far, close, missing, leader], SLO)
    assert [row["parameters"] for row in contenders] == [leader["parameters"], close["parameters"]]
    assert close_contenders([leader, far], SLO) == [leader]  # nothing to settle
    crowd = [measured_row({"max_num_seqs": str(n)}, good=20, duration_s=28.0 + n / 100) for n in range(1, 6)]
    assert len(close_contenders(crowd, SLO, limit=3)) == 3
