"""The LLM tuner on vLLM's engine: its space (no max-wait, a chunk cap of 0), the engine chosen
by flag or config, the cost model of the right engine, and a run against a stand-in server that
checks every candidate is loaded as a vLLM config (the integration test runs the real one)."""

from __future__ import annotations

import contextlib
import json

import pytest

from llm.serving.knobs import parameters_from_pbtxt
from llm.vllm_engine.knobs import VllmKnobs
from tools.load.llm.figures import LevelFigures
from tools.load.llm.records import StreamRecord
from tools.load.llm.workload import LlmRequest
from tools.repo.model_config import load_config
from tools.simulate.llm import live
from tools.simulate.llm.live import LiveServer
from tools.simulate.llm.setup import DEFAULT_CONFIG, VLLM_CONFIG
from tools.simulate.llm.step_cost import FEATURES, StepCostModel
from tools.triton_client import Unload
from tools.tune.llm import command
from tools.tune.llm.command import LlmTuneSettings, build_parser, choose_cost_model
from tools.tune.llm.space import LlmSpace


def settings(*argv: str) -> LlmTuneSettings:
    return LlmTuneSettings.from_cli_args(build_parser().parse_args(["--model", "llm", *argv]))


def test_vllms_space_has_no_max_wait_and_a_chunk_cap_of_0_stands_for_the_whole_budget():
    space = LlmSpace.vllm().with_axes(max_num_seqs=[8], max_num_batched_tokens=[64, 256], long_prefill_token_threshold=[0, 64, 256])
    candidates = list(space.candidates())
    assert all("max_wait_ms" not in candidate for candidate in candidates)
    # budget 64: chunk 0 (64 itself would repeat it, 256 exceeds it); budget 256: 0 and 64 (256 repeats 0)
    assert [(c["max_num_batched_tokens"], c["long_prefill_token_threshold"]) for c in candidates] == [
        ("64", "0"),
        ("256", "0"),
        ("256", "64"),
    ]
    for candidate in candidates:  # every candidate is a config vLLM's own knob parser takes
        VllmKnobs.from_parameters({**parameters_from_pbtxt(VLLM_CONFIG), **candidate})
    assert space.knobs == ("max_num_seqs", "max_num_batched_tokens", "long_prefill_token_threshold", "policy")


def test_the_engine_flag_picks_vllms_config_and_space_and_a_vllm_config_picks_the_engine():
    chosen = settings("--engine", "vllm", "--quick")
    assert (chosen.engine, chosen.config, chosen.space) == ("vllm", VLLM_CONFIG, LlmSpace.vllm(quick=True))
    assert settings("--config", str(VLLM_CONFIG)).engine == "vllm"
    assert settings().engine == "native" and settings().config == DEFAULT_CONFIG
    assert settings("--engine", "vllm", "--apply").winner_output == VLLM_CONFIG
    assert settings("--engine", "vllm", "--long-prefill-token-threshold", "0,64").space.long_prefill_token_threshold == (0, 64)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--engine", "vllm", "--max-wait-ms", "0,50"), "never waits"),
        (("--engine", "native", "--config", str(VLLM_CONFIG)), "vllm engine"),
        (("--long-prefill-token-threshold", "0"), "positive"),
        (("--engine", "vllm", "--long-prefill-token-threshold", "-1"), ">= 0"),
    ],
)
def test_options_that_do_not_fit_the_engine_are_refused_with_the_reason(argv, message):
    with pytest.raises(ValueError, match=message):
        settings(*argv)


def vllm_cost_model(path) -> str:
    engine = {"engine": "vllm", "dtype": "bfloat16", "block_size": 128, "enforce_eager": False}
    StepCostModel({name: (0.030 if name == "intercept" else 0.0) for name in FEATURES}, engine=engine).save(path)
    return str(path)


def test_a_cost_model_of_the_other_engine_is_refused(tmp_path):
    native = tmp_path / "native.json"
    StepCostModel({name: 0.01 for name in FEATURES}).save(native)
    with pytest.raises(ValueError, match="native engine"):
        choose_cost_model(str(native), quick=True, engine="vllm", config=VLLM_CONFIG)
    with pytest.raises(ValueError, match="vllm engine"):
        choose_cost_model(vllm_cost_model(tmp_path / "vllm.json"), quick=True, engine="native")


class FakeVllmServer:
    """Answers every level with `good` requests per max_num_seqs; keeps what it was loaded with."""

    def __init__(self, good: dict[str, int]) -> None:
        self.good = good
        self.applied: list[dict] = []
        self.stuck_unloads = 0
        self.reload_s = [40.0]
        self.last_load_average = None
        self.last_sent = 0

    def apply(self, parameters: dict) -> None:
        self.applied.append(dict(parameters))

    def measure_records(self, requests, schedule, level):
        count = self.good[self.applied[-1]["max_num_seqs"]]
        self.last_sent = count
        records = [StreamRecord(i, 0.0, token_times=[0.2, 0.25, 0.3], end_s=0.3, tokens_in=64, tokens_out=3) for i in range(count)]
        return records, level.seconds

    def measure(self, requests, schedule, level, slo) -> LevelFigures:
        return LevelFigures.of(*self.measure_records(requests, schedule, level), slo)


def test_a_vllm_tune_loads_every_candidate_as_a_vllm_config_and_writes_the_winner_into_it(tmp_path, monkeypatch):
    server = FakeVllmServer({"16": 10, "4": 20, "8": 15})
    opened = []
    monkeypatch.setattr(live, "live_server", lambda *args: opened.append(args) or contextlib.nullcontext(server))
    monkeypatch.setattr(command, "workload_requests", lambda settings: [LlmRequest(i, f"p{i}", 64, 3) for i in range(40)])
    out = tmp_path / "vllm.pbtxt"
    argv = [
        *("--model", "llm", "--engine", "vllm", "--cost-model", vllm_cost_model(tmp_path / "cost.json"), "--concurrency", "12"),
        *("--max-num-seqs", "4,8", "--max-num-batched-tokens", "512", "--long-prefill-token-threshold", "0"),
        *("--top", "2", "--tie-break-rounds", "0", "--report-dir", str(tmp_path), "--output", str(out), "-q"),
    ]
    assert command.run(argv) == 0
    assert opened[0][3] == VLLM_CONFIG  # the live server reloads from the vLLM config
    assert len(server.applied) == 3  # the top 2 and the config
    for parameters in server.applied:
        assert parameters["engine"] == "vllm" and "max_wait_ms" not in parameters
        assert (parameters["dtype"], parameters["block_size"], parameters["enforce_eager"]) == ("bfloat16", "128", "false")
        VllmKnobs.from_parameters(parameters)
    report = json.loads((tmp_path / "tune-llm.json").read_text())
    assert (report["engine"], report["reload_s"], report["winner"]["max_num_seqs"]) == ("vllm", [40.0], "4")
    written = load_config(out)
    assert written.parameters["max_num_seqs"].string_value == "4"
    assert written.parameters["EXECUTION_ENV_PATH"].string_value == load_config(VLLM_CONFIG).parameters["EXECUTION_ENV_PATH"].string_value
    assert out.read_text().startswith("# The generative model on vLLM")


class FakeControl:
    def __init__(self, served) -> None:
        self.served = served
        self.reloaded = []

    def config(self, model):
        return self.served

    def model_ready(self, model) -> bool:
        return True

    def reload(self, model, config) -> Unload:
        self.reloaded.append(config)
        self.served = config
        return Unload(0.0)


def test_a_live_server_on_vllm_reloads_from_the_vllm_config_even_when_the_native_one_is_served():
    control = FakeControl(load_config(DEFAULT_CONFIG))
    server = LiveServer(control, "127.0.0.1:1", base_config=load_config(VLLM_CONFIG))
    server.apply({"max_num_seqs": "4"})
    (config,) = control.reloaded
    assert config.parameters["engine"].string_value == "vllm"
    assert "mode" not in config.parameters  # none of the native engine's keys come along
    assert config.parameters["max_num_seqs"].string_value == "4"
    # Triton serves EXECUTION_ENV_PATH resolved; the same knobs are still the same engine: no second reload
    control.served.parameters["EXECUTION_ENV_PATH"].string_value = "/work/main/.venv-vllm"
    server.apply({"max_num_seqs": "4"})
    assert len(control.reloaded) == 1 and len(server.reload_s) == 1


def test_a_live_server_on_the_native_engine_reloads_when_a_knob_changes_and_records_the_unload():
    control = FakeControl(load_config(DEFAULT_CONFIG))
    server = LiveServer(control, "127.0.0.1:1")
    server.apply({"max_num_seqs": "2"})
    (config,) = control.reloaded
    assert config.parameters["max_num_seqs"].string_value == "2"
    assert (server.unload_s, server.stuck_unloads) == ([0.0], 0)
    server.apply({"max_num_seqs": "2"})  # served already: no second reload
    assert len(control.reloaded) == 1


def test_only_an_unload_that_never_finished_counts_as_stuck():
    class SlowThenStuck(FakeControl):
        def __init__(self, served) -> None:
            super().__init__(served)
            self.unloads = [Unload(42.0), Unload(None)]

        def reload(self, model, config) -> Unload:
            super().reload(model, config)
            return self.unloads.pop(0)

    server = LiveServer(SlowThenStuck(load_config(DEFAULT_CONFIG)), "127.0.0.1:1")
    server.apply({"max_num_seqs": "2"})
    server.apply({"max_num_seqs": "3"})
    assert (server.unload_s, server.stuck_unloads) == ([42.0, None], 1)
