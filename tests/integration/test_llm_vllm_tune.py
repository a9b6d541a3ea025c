"""The simulator and tuner on vLLM's engine, for real: a tiny calibration records vLLM's own steps
(in .venv-vllm, its engine core in a process of its own), and a tiny tune on the `llm` model served
by vLLM inside Triton measures each candidate live on a vLLM engine started with its knobs."""

from __future__ import annotations

import json
import re

import pytest

from tools.contract import LLM_MODEL
from tools.repo.model_config import load_config
from tools.simulate.llm.setup import VLLM_CONFIG
from tools.simulate.llm.step_cost import FEATURES

TINY_LOAD = ("--prompt-lengths", "8-24", "--output-lengths", "2-6", "--requests", "12", "--seed", "3")


@pytest.fixture(scope="module")
def tiny_vllm_cost_model(tmp_path_factory):
    """A step cost model recorded on vLLM's engine with the tiny design (about a minute: the
    engine start compiles the model, with torch.compile's cache warm for the served budget)."""
    from tools.simulate.llm.vllm_calibrate import VllmDesign, measure_vllm

    model = measure_vllm(VLLM_CONFIG, VllmDesign.tiny())
    path = tmp_path_factory.mktemp("vllm-cost") / "llm-step-cost-vllm.json"
    model.save(path)
    return path, model


@pytest.mark.timeout(300)
def test_a_calibration_on_vllm_records_every_step_and_its_times_agree_with_vllms_own(tiny_vllm_cost_model) -> None:
    _, model = tiny_vllm_cost_model
    assert model.engine_kind == "vllm" and model.engine["block_size"] == 128 and model.engine["dtype"] == "bfloat16"
    fit = model.fit
    assert fit["samples"] >= len(FEATURES)
    assert set(fit["median_rel_error_by_kind"]) == {"prefill", "decode", "mixed"}  # the design reached every kind of step
    check = fit["vllm_elapsed_check"]
    assert check["steps"] == fit["recorded_steps"]  # vLLM reported every step the recorder saw
    assert check["composition_agrees"]  # and counted the same prompt tokens in each
    assert 1.0 <= check["median_ratio"] < 1.5  # the recorder's span holds vLLM's execution and a little scheduling
    assert model.seconds(max(model_shapes(model), key=lambda shape: shape.prefill_tokens)) > model.coefficients["intercept"]


def model_shapes(model):
    from tools.simulate.llm.step_cost import StepShape

    fields = ("prefill_tokens", "decode_seqs", "kv_tokens", "prefill_pairs")
    return [StepShape(**{key: step[key] for key in fields}) for step in model.fit["steps"]]


def server_args(server) -> list[str]:
    return [
        *("--url", server.options.http_url, "--grpc-url", server.options.grpc_url),
        *(("--admin-key", server.admin_key) if server.admin_key else ()),
    ]


def started_engines(server) -> list[int]:
    """max_num_seqs of every vLLM engine the served model started, from the Triton log."""
    text = server.log_path.read_text(errors="replace")
    return [int(seqs) for seqs in re.findall(r"vLLM engine on .* started in .*max_num_seqs=(\d+)", text)]


@pytest.mark.timeout(600)
def test_a_tiny_tune_on_vllm_measures_each_candidate_on_a_vllm_engine_with_its_knobs(vllm_triton, tiny_vllm_cost_model, tmp_path) -> None:
    from tools.tune.__main__ import run

    cost_path, _ = tiny_vllm_cost_model
    before = vllm_triton.client.config(LLM_MODEL)
    engines_before = len(started_engines(vllm_triton))
    written = tmp_path / "vllm.pbtxt"
    args = [
        *("--model", "llm", "--engine", "vllm", "--slo", "ttft_p99=5s,tpot_p99=1s", "--cost-model", str(cost_path)),
        *server_args(vllm_triton),
        # budget 512, the served one: the candidate's reload finds torch.compile's cache warm
        *("--max-num-seqs", "2,4", "--max-num-batched-tokens", "512", "--long-prefill-token-threshold", "0"),
        *("--top", "1", "--tie-break-rounds", "0", "--concurrency", "4", "--seconds", "3", "--drain", "60", *TINY_LOAD),
        *("--report-dir", str(tmp_path / "report"), "--output", str(written), "-q"),
    ]
    assert run(args) == 0
    report = json.loads((tmp_path / "report" / "tune-llm.json").read_text())
    assert report["engine"] == "vllm" and report["simulated"] == 3
    assert [row["role"].split(",")[0] for row in report["measured"]] == ["top 1", "config"]
    top, config = report["measured"]
    assert top["parameters"]["max_num_seqs"] in ("2", "4") and config["parameters"]["max_num_seqs"] == "16"
    for row in report["measured"]:
        assert "max_wait_ms" not in row["parameters"]  # vLLM has no max-wait
        assert row["measured"]["completed"] == row["measured"]["requests"] >= 2
    assert report["stuck_unloads"] == 0
    # each candidate ran on a vLLM engine started with its knobs (the config's own was served already)
    started = started_engines(vllm_triton)[engines_before:]
    assert int(top["parameters"]["max_num_seqs"]) in started and 16 in started
    assert len(report["reload_s"]) >= 2  # the top candidate, and the config back for its own level
    winner = {key: value.string_value for key, value in load_config(written).parameters.items()}
    assert {key: winner[key] for key in report["winner"]} == report["winner"] and winner["engine"] == "vllm"
    assert written.read_text().startswith("# The generative model on vLLM")
    assert vllm_triton.client.config(LLM_MODEL) == before
