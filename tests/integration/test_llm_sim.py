"""The LLM simulator's live side against the real Triton: validation and a tiny tune."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import start_triton
from tools.contract import LLM_MODEL
from tools.repo.model_config import load_config
from tools.simulate.llm.setup import DEFAULT_CONFIG
from tools.simulate.llm.step_cost import FEATURES, StepCostModel

# About this engine on a 2-core EPYC (tools/simulate/llm/calibrate.py measures the real one);
# the tests check the plumbing between simulation and measurement, not the model's accuracy.
HAND_MADE = dict(zip(FEATURES, (0.045, 0.0012, 0.004, 0.000002, 0.0001)))

TINY_LOAD = ("--prompt-lengths", "8-24", "--output-lengths", "2-6", "--requests", "12", "--seed", "3")


@pytest.fixture(scope="module")
def llm_triton(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A server of this module's own, not the session's: these tests reload `llm`, and the shared
    server has served the cancellation and flood tests, one of whose cancelled streams can leave
    `llm` unable to unload on Triton 2.51 (docs/llm.md, Known issues): twice an unload here never
    finished on a busy machine, each time the first after those tests."""
    log = tmp_path_factory.mktemp("llm-sim-triton") / "triton.log"
    server = start_triton(log, with_llm=True, model_control_mode="explicit", load_models=(LLM_MODEL,))
    try:
        yield server
    finally:
        server.stop()


def cost_model(tmp_path):
    path = tmp_path / "llm-step-cost.json"
    StepCostModel(HAND_MADE, machine={"model": "hand-made"}).save(path)
    return path


def server_args(server) -> list[str]:
    return [
        *("--url", server.options.http_url, "--grpc-url", server.options.grpc_url),
        *(("--admin-key", server.admin_key) if server.admin_key else ()),
    ]


def test_validation_scales_the_model_to_the_first_case_and_judges_the_held_out_one_and_restores_the_server_config(llm_triton, tmp_path):
    from tools.simulate.__main__ import run

    before = llm_triton.client.config(LLM_MODEL)
    out = tmp_path / "validation.json"
    args = [
        *("llm", "validate", "--cost-model", str(cost_model(tmp_path)), *server_args(llm_triton)),
        *(
            "--cases",
            "max_num_seqs=2;max_num_seqs=1",
            "--concurrency",
            "2",
            "--rates",
            "",
            "--seconds",
            "3",
            "--drain",
            "60",
            "--live-scale",
        ),
        *TINY_LOAD,
        *("--json", str(out), "-q"),
    ]
    assert run(args) == 0
    result = json.loads(out.read_text())
    anchor, held_out = result["rows"]
    assert (anchor["role"], anchor["overrides"]) == ("anchor", {"max_num_seqs": "2"})
    assert (held_out["role"], held_out["overrides"]) == ("held out", {"max_num_seqs": "1"})
    for row in result["rows"]:
        assert row["measured"]["completed"] == row["measured"]["requests"] >= 2
        assert row["predicted"]["completed"] == row["predicted"]["requests"] >= 2
        for figure in ("output_tokens_per_s", "ttft_p99_ms", "tpot_p50_ms"):
            assert row["errors"][figure] is not None
    assert anchor["predicted"]["mean_running"] <= 2 and held_out["predicted"]["mean_running"] <= 1  # the overrides ran
    scale = result["live_scale"]
    assert scale["measured_tpot_p50_ms"] == anchor["measured"]["tpot_p50_ms"]
    assert scale["predicted_tpot_p50_ms"] == anchor["predicted"]["tpot_p50_ms"]  # the anchor's row: before scaling
    # scaled, the anchor's simulated TPOT is no further from the measured one than before
    assert abs(scale["fitted_tpot_p50_ms"] - scale["measured_tpot_p50_ms"]) <= abs(
        scale["predicted_tpot_p50_ms"] - scale["measured_tpot_p50_ms"]
    )
    assert result["summary"]["tpot_p50_ms"]["rows"] == 1  # the held-out case only
    assert result["summary_as_calibrated"]["tpot_p50_ms"]["rows"] == 1  # its measurement against the unscaled model too
    assert set(held_out["errors_as_calibrated"]) == set(held_out["errors"])
    # every reload's old instance left the repository index, however slowly a busy machine unloads it
    assert len(result["unload_s"]) == len(result["reload_s"]) >= 1
    assert result["stuck_unloads"] == 0, f"unload times (null: never unloaded): {result['unload_s']}"
    assert llm_triton.client.config(LLM_MODEL) == before


def test_a_tiny_tune_measures_the_predicted_best_and_the_config_and_writes_the_measured_winner(llm_triton, tmp_path):
    from tools.tune.__main__ import run

    before = llm_triton.client.config(LLM_MODEL)
    written = tmp_path / "config.pbtxt"
    args = [
        *("--model", "llm", "--slo", "ttft_p99=5s,tpot_p99=1s", "--cost-model", str(cost_model(tmp_path)), *server_args(llm_triton)),
        *("--quick", "--top", "1", "--concurrency", "2", "--seconds", "3", "--drain", "60", "--live-scale", *TINY_LOAD),
        *("--report-dir", str(tmp_path / "report"), "--output", str(written), "-q"),
    ]
    assert run(args) == 0
    report = json.loads((tmp_path / "report" / "tune-llm.json").read_text())
    assert report["simulated"] > 10
    roles = [row["role"].split(",")[0] for row in report["measured"]]
    assert roles == ["config", "top 1"]  # with --live-scale the config first: the level the cost model is scaled to
    assert report["measured"][0]["role"].startswith("config, anchor")
    assert report["live_scale"]["factor"] > 0
    assert "predicted_as_calibrated" in report["measured"][1]  # after the scale: also the model as calibrated
    for row in report["measured"]:
        assert row["measured"]["completed"] >= 2
    parameters = {key: value.string_value for key, value in load_config(written).parameters.items()}
    assert {key: parameters[key] for key in report["winner"]} == report["winner"]
    if report["tie_break"]:  # the two were within one request: the rematch decided
        assert report["winner"] == report["tie_break"][0]["parameters"]
    assert llm_triton.client.config(LLM_MODEL) == before


def test_a_tiny_grid_measures_every_candidate_of_the_space_given_and_the_config(llm_triton, tmp_path):
    from tools.tune.__main__ import run

    before = llm_triton.client.config(LLM_MODEL)
    args = [
        *("--model", "llm", "--slo", "ttft_p99=5s,tpot_p99=1s", "--cost-model", str(cost_model(tmp_path)), *server_args(llm_triton)),
        *("--strategy", "grid", "--max-num-seqs", "1,2", "--max-num-batched-tokens", "64", "--long-prefill-token-threshold", "64"),
        *("--max-wait-ms", "0", "--concurrency", "2", "--seconds", "3", "--drain", "60", *TINY_LOAD),
        *("--report-dir", str(tmp_path / "report"), "-q"),
    ]
    assert run(args) == 0
    report = json.loads((tmp_path / "report" / "tune-llm.json").read_text())
    assert report["strategy"] == "grid"
    assert report["live_scale"] is None  # not asked for: the cost model as calibrated
    assert report["measured"][-1]["role"].split(",")[0] == "config"  # so the config is measured last
    measured = {(row["role"].split(",")[0], row["parameters"]["max_num_seqs"]) for row in report["measured"]}
    committed = load_config(DEFAULT_CONFIG).parameters["max_num_seqs"].string_value
    assert measured == {("grid", "1"), ("grid", "2"), ("config", committed)}
    assert all(row["measured"]["completed"] >= 2 for row in report["measured"])
    assert report["winner"] in [row["parameters"] for row in report["measured"]]
    # every stream ended by the server, so every old instance unloaded (slowly, perhaps, on a busy machine)
    assert report["stuck_unloads"] == 0, f"unload times (null: never unloaded): {report['unload_s']}"
    assert llm_triton.client.config(LLM_MODEL) == before


def test_a_rematch_measures_two_configs_in_turn_on_fresh_requests_and_pools_each_ones_levels(llm_triton, tmp_path):
    from tools.tune.llm.versus_grid import head_to_head

    before = llm_triton.client.config(LLM_MODEL)
    one, two = ({"max_num_seqs": str(n), "max_num_batched_tokens": "64", "long_prefill_token_threshold": "64"} for n in (1, 2))
    # an SLO every answered request meets, however slow the machine: with none met (TPOT over 1 s
    # beside a CPU-heavy process) the goodput is 0 and the gaps are undefined; the pooling is the point here
    slo = "ttft_p99=600s,tpot_p99=60s"
    tune_args = [*("--slo", slo, "--concurrency", "2", "--drain", "60"), *TINY_LOAD, *server_args(llm_triton)]
    rows = head_to_head(tune_args, str(cost_model(tmp_path)), [one, two], rounds=2, seconds=3.0)
    assert sorted(row["parameters"]["max_num_seqs"] for row in rows) == ["1", "2"]
    for row in rows:
        first, second = row["levels"]
        assert (first["round"], second["round"]) == (1, 2)
        assert first["first_request"] == 0 < second["first_request"]  # round 2 starts past round 1's requests
        assert row["pooled"]["requests"] == first["requests"] + second["requests"]
        assert row["pooled"]["duration_s"] == pytest.approx(first["duration_s"] + second["duration_s"], abs=0.02)
        assert row["pooled"]["completed"] == row["pooled"]["requests"]
    assert rows[0]["goodput_gap"] == 0.0 and rows[1]["goodput_gap"] <= 0.0
    assert llm_triton.client.config(LLM_MODEL) == before
