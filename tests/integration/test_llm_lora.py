"""LoRA adapters served by the real Triton: the `llm` model with a multi_lora.json listing two
random adapters and a broken one. Requests name their adapter (`lora_name`); requests for
different adapters share steps and each gets what it gets alone; an unknown adapter is a
clear error and the server keeps serving."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from llm.artifacts import CONFIG_FILE
from llm.engine.checkpoint import LlamaDims
from tests.conftest import start_triton
from tests.integration.llm_streams import generate
from tools.contract import LLM_MODEL
from tools.lora.random_adapters import write_adapter
from tools.lora.repository import repository_with_adapters
from tools.paths import MODEL_REPOSITORY

pytestmark = pytest.mark.integration

PROMPT = "Write one sentence about the sea."
ADAPTERS = ("random-0", "random-1")


@pytest.fixture(scope="module")
def lora_server(tmp_path_factory):
    """Triton serving only `llm`, whose version folder links the exported checkpoint and lists
    the adapters (made here: random, strong enough to change the greedy text)."""
    root = tmp_path_factory.mktemp("lora")
    dims = LlamaDims.from_json((MODEL_REPOSITORY / LLM_MODEL / "1" / CONFIG_FILE).read_text())
    made = {name: write_adapter(root / "adapters" / name, dims, seed, rank=8, alpha=16.0, std=0.05) for seed, name in enumerate(ADAPTERS)}
    broken = root / "adapters" / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text("{not json")
    repository = repository_with_adapters(root, {**made, "broken": broken})
    server = start_triton(
        root / "triton.log", with_llm=True, model_repository=repository, model_control_mode="explicit", load_models=(LLM_MODEL,)
    )
    try:
        yield server
    finally:
        server.stop()


def greedy(server, adapter: str | None) -> tuple[int, dict]:
    sampling = {"max_tokens": 12, "temperature": 0, "ignore_eos": True}
    if adapter is not None:
        sampling["lora_name"] = adapter
    body = {"text_input": PROMPT, "exclude_input_in_output": True, "sampling_parameters": json.dumps(sampling)}
    status, (answer,) = generate(server.options.http_url, body)
    return status, answer


def test_each_adapter_changes_the_text_and_mixed_steps_give_each_request_its_own(lora_server) -> None:
    alone = {}
    for adapter in (None, *ADAPTERS):
        status, answer = greedy(lora_server, adapter)
        assert status == 200, answer
        alone[adapter] = answer["text_output"]
    assert len(set(alone.values())) == 3, alone  # the base model and two adapters: three texts
    with ThreadPoolExecutor(6) as pool:  # two requests per adapter, sharing steps
        together = list(pool.map(lambda adapter: (adapter, greedy(lora_server, adapter)), [None, *ADAPTERS] * 2))
    for adapter, (status, answer) in together:
        assert status == 200 and answer["text_output"] == alone[adapter], adapter


def test_an_unknown_or_broken_adapter_is_refused_by_name_and_the_server_keeps_serving(lora_server) -> None:
    for name in ("no-such-adapter", "broken"):
        status, answer = greedy(lora_server, name)
        assert status == 400, answer
        assert f"unknown LoRA adapter '{name}'" in answer["error"] and "random-0, random-1" in answer["error"]
    assert "LoRA adapter 'broken' is not served" in lora_server.log_path.read_text()
    status, answer = greedy(lora_server, ADAPTERS[0])
    assert status == 200 and answer["text_output"]


def test_the_gateway_lists_the_adapters_and_routes_openais_model_to_one(lora_server, tmp_path) -> None:
    import openai

    from tests.conftest import start_gateway

    version = lora_server.options.model_repository / LLM_MODEL / "1"
    gateway = start_gateway(lora_server.options.grpc_url, tmp_path / "gateway.log", "--llm-folder", str(version))
    try:
        client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="none", max_retries=0, timeout=300)
        cards = {card.id: card for card in client.models.list().data}
        assert {"llm", *ADAPTERS} <= set(cards) and cards[ADAPTERS[0]].parent == "llm"
        expected = {adapter: greedy(lora_server, adapter)[1]["text_output"] for adapter in (None, ADAPTERS[0])}
        for model, adapter in (("llm", None), (ADAPTERS[0], ADAPTERS[0])):
            answer = client.completions.create(model=model, prompt=PROMPT, max_tokens=12, temperature=0, extra_body={"ignore_eos": True})
            assert answer.choices[0].text == expected[adapter], model
        with pytest.raises(openai.NotFoundError, match="random-1"):
            client.completions.create(model="no-such-adapter", prompt=PROMPT, max_tokens=4)
        client.close()
    finally:
        gateway.stop()


def test_an_adapter_added_or_removed_through_model_control_serves_or_goes_without_a_restart(lora_server, tmp_path) -> None:
    from tools.lora.manage import main

    version = lora_server.options.model_repository / LLM_MODEL / "1"
    common = [
        "--checkpoint",
        str(version),
        "--url",
        lora_server.options.http_url,
        "--admin-key-file",
        str(lora_server.admin_key_file),
        "-q",
    ]
    dims = LlamaDims.from_json((version / CONFIG_FILE).read_text())
    write_adapter(tmp_path / "late", dims, 7, rank=8, alpha=16.0, std=0.05)
    status, _ = greedy(lora_server, "late")
    assert status == 400
    assert main(["add", "late", str(tmp_path / "late"), *common]) == 0
    status, answer = greedy(lora_server, "late")
    assert status == 200 and answer["text_output"], answer
    assert main(["remove", ADAPTERS[0], *common]) == 0
    status, answer = greedy(lora_server, ADAPTERS[0])
    assert status == 400 and "late" in answer["error"], answer
    broken = tmp_path / "half"
    broken.mkdir()
    assert main(["add", "half", str(broken), *common]) == 2  # refused before the server is touched
    assert "half" not in (version / "multi_lora.json").read_text()
