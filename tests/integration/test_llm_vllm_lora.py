"""LoRA adapters on vLLM's engine inside Triton (`parameters.enable_lora: true` in
configs/vllm.pbtxt): the same multi_lora.json and the same `lora_name` as the native engine,
each trained adapter's style in its answers when requests for all of them share steps, and a
broken or unknown adapter refused by name while the others serve."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from llm.adapters import ADAPTER_LIST, read_adapter_list
from llm.tokenizer import LlmTokenizer
from tests.conftest import start_vllm_triton
from tests.integration.llm_streams import generate
from tools.contract import LLM_MODEL
from tools.lora.repository import repository_with_adapters
from tools.lora.styles import STYLES, split_prompts
from tools.paths import MODEL_REPOSITORY

pytestmark = pytest.mark.integration

VERSION = MODEL_REPOSITORY / LLM_MODEL / "1"
QUESTIONS = split_prompts()[1][2:5]  # held out from training


@pytest.fixture(scope="module")
def vllm_lora_server(tmp_path_factory):
    """Triton serving `llm` on vLLM with LoRA on: the trained adapters and a broken one listed."""
    listed = read_adapter_list(VERSION / ADAPTER_LIST) if (VERSION / ADAPTER_LIST).is_file() else {}
    if not set(STYLES) <= set(listed):
        pytest.fail(f"{VERSION / ADAPTER_LIST} does not list the trained adapters: run `make adapters` (make test does it)")
    root = tmp_path_factory.mktemp("vllm-lora")
    broken = root / "broken"
    broken.mkdir()
    (broken / "adapter_config.json").write_text('{"r": "eight"}')
    adapters = {**{name: listed[name] for name in STYLES}, "broken": broken}
    repository = repository_with_adapters(root, adapters, vllm_parameters={"enable_lora": "true"})
    server = start_vllm_triton(root / "triton.log", model_repository=repository)
    try:
        yield server
    finally:
        server.stop()


def ask(server, tokenizer: LlmTokenizer, adapter: str | None, question: str) -> tuple[int, dict]:
    sampling = {"max_tokens": 24, "temperature": 0}
    if adapter is not None:
        sampling["lora_name"] = adapter
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": question}])
    body = {"text_input": prompt, "exclude_input_in_output": True, "sampling_parameters": json.dumps(sampling)}
    status, (answer,) = generate(server.options.http_url, body)
    return status, answer


def test_requests_for_every_adapter_share_steps_and_each_answers_in_its_style(vllm_lora_server) -> None:
    tokenizer = LlmTokenizer.from_folder(VERSION)
    requests = [(adapter, question) for adapter in (None, *STYLES) for question in QUESTIONS]
    with ThreadPoolExecutor(len(requests)) as pool:
        answers = dict(zip(requests, pool.map(lambda request: ask(vllm_lora_server, tokenizer, *request), requests), strict=True))
    assert all(status == 200 for status, _ in answers.values()), answers
    for adapter in STYLES:  # vLLM runs bfloat16: each style in most answers, never in the base model's
        texts = [answers[adapter, question][1]["text_output"] for question in QUESTIONS]
        assert sum(map(STYLES[adapter].shows_in, texts)) >= len(texts) - 1, (adapter, texts)
        assert not any(STYLES[adapter].shows_in(answers[None, question][1]["text_output"]) for question in QUESTIONS), adapter


def test_an_unknown_or_broken_adapter_is_refused_by_name_and_the_others_serve(vllm_lora_server) -> None:
    tokenizer = LlmTokenizer.from_folder(VERSION)
    for name in ("no-such-adapter", "broken"):
        status, answer = ask(vllm_lora_server, tokenizer, name, QUESTIONS[0])
        assert status == 400, answer
        assert f"unknown LoRA adapter '{name}'" in answer["error"] and ", ".join(sorted(STYLES)) in answer["error"]
    assert "LoRA adapter 'broken' is not served" in vllm_lora_server.log_path.read_text()
    status, answer = ask(vllm_lora_server, tokenizer, "pirate", QUESTIONS[0])
    assert status == 200 and STYLES["pirate"].shows_in(answer["text_output"]), answer
