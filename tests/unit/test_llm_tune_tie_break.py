"""The tuner's tie-break: candidates one level cannot tell apart meet again, and the rematch
decides the winner (a fake live server stands in for Triton; the integration tests run the
real one)."""

from __future__ import annotations

import contextlib
import json

from tools.load.llm.figures import LevelFigures
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LlmRequest
from tools.simulate.llm import live
from tools.simulate.llm.step_cost import FEATURES, StepCostModel
from tools.tune.llm import command

LEVEL_S = 20.0


def good_records(count: int) -> list[StreamRecord]:
    return [StreamRecord(i, 0.0, token_times=[0.2, 0.25, 0.3], end_s=0.3, tokens_in=64, tokens_out=3) for i in range(count)]


class FakeServer:
    """Good requests per level by max_num_seqs: `first` in the tuning levels, `again` in the tie-break's."""

    def __init__(self, first: dict[str, int], again: dict[str, int]) -> None:
        self.first, self.again = first, again
        self.seqs = None
        self.levels: list[tuple[str, int, float]] = []  # (max_num_seqs, first request, seconds)
        self.stuck_unloads = 0
        self.last_load_average = None
        self.last_sent = 0

    def apply(self, parameters: dict) -> None:
        self.seqs = parameters["max_num_seqs"]

    def measure_records(self, requests, schedule, level):
        self.levels.append((self.seqs, level.first_request, level.seconds))
        good = (self.again if level.seconds > LEVEL_S else self.first)[self.seqs]
        self.last_sent = good + 3
        return good_records(good), level.seconds

    def measure(self, requests, schedule, level, slo) -> LevelFigures:
        return LevelFigures.of(*self.measure_records(requests, schedule, level), slo)


def run_tune(tmp_path, monkeypatch, server: FakeServer, *extra: str) -> dict:
    monkeypatch.setattr(live, "live_server", lambda *args: contextlib.nullcontext(server))
    monkeypatch.setattr(command, "workload_requests", lambda settings: [LlmRequest(i, f"p{i}", 64, 3) for i in range(40)])
    cost = tmp_path / "cost.json"
    StepCostModel({name: (0.010 if name == "intercept" else 0.0) for name in FEATURES}).save(cost)
    argv = [
        *("--model", "llm", "--slo", "ttft_p99=1s,tpot_p99=100ms", "--cost-model", str(cost), "--concurrency", "2"),
        *("--max-num-seqs", "8", "--max-num-batched-tokens", "64", "--long-prefill-token-threshold", "64", "--max-wait-ms", "0"),
        *("--top", "1", "--seconds", str(LEVEL_S), "--report-dir", str(tmp_path), "-q", *extra),
    ]
    assert command.run(argv) == 0
    return json.loads((tmp_path / "tune-llm.json").read_text())


def test_a_close_race_goes_to_a_rematch_on_fresh_requests_and_its_winner_wins(tmp_path, monkeypatch):
    # one level: the config (16 slots) 20 good requests, the candidate (8 slots) 19: within one
    # request; the rematch: 8 slots 30 against 24
    server = FakeServer(first={"16": 20, "8": 19}, again={"16": 24, "8": 30})
    report = run_tune(tmp_path, monkeypatch, server)
    assert report["winner"]["max_num_seqs"] == "8"
    assert [row["parameters"]["max_num_seqs"] for row in report["tie_break"]] == ["8", "16"]
    # the tuning levels (candidate, then config), then one round at twice the level's time,
    # starting past every request the tuning levels sent (23 = 20 good + 3)
    assert server.levels == [("8", 0, 20.0), ("16", 0, 20.0), ("16", 23, 40.0), ("8", 23, 40.0)]


def test_a_clear_winner_or_no_tie_break_asked_measures_nothing_more(tmp_path, monkeypatch):
    clear = FakeServer(first={"16": 20, "8": 12}, again={})
    assert run_tune(tmp_path, monkeypatch, clear)["tie_break"] is None
    assert len(clear.levels) == 2
    close = FakeServer(first={"16": 20, "8": 19}, again={})
    report = run_tune(tmp_path, monkeypatch, close, "--tie-break-rounds", "0")
    assert report["tie_break"] is None and report["winner"]["max_num_seqs"] == "16"
    assert len(close.levels) == 2
