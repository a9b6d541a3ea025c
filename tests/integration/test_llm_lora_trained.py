"""The trained adapters (`make adapters`: tools/lora/train.py) as the committed repository serves
them: in one mixed batch, each request's greedy text equals that of transformers with its
adapter merged into the float32 weights, and each adapter's style shows in its answers."""

from __future__ import annotations

import copy
import json
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from llm.adapters import ADAPTER_LIST, read_adapter_list
from llm.tokenizer import LlmTokenizer
from tests.integration.llm_streams import generate
from tools.contract import LLM_MODEL
from tools.lora.styles import STYLES, split_prompts
from tools.paths import MODEL_REPOSITORY

pytestmark = pytest.mark.integration

VERSION = MODEL_REPOSITORY / LLM_MODEL / "1"
ANSWER_TOKENS = 24
QUESTIONS = split_prompts()[1][:2]  # held out from training


@pytest.fixture(scope="module")
def trained() -> dict:
    """name -> adapter folder of every style, as the committed repository lists them."""
    listed = read_adapter_list(VERSION / ADAPTER_LIST) if (VERSION / ADAPTER_LIST).is_file() else {}
    missing = sorted(set(STYLES) - set(listed))
    if missing:
        pytest.fail(f"{VERSION / ADAPTER_LIST} does not list the trained adapters {missing}: run `make adapters` (make test does it)")
    return {name: listed[name] for name in STYLES}


@pytest.fixture(scope="module")
def tokenizer() -> LlmTokenizer:
    return LlmTokenizer.from_folder(VERSION)


def chat_text(tokenizer: LlmTokenizer, question: str) -> str:
    return tokenizer.apply_chat_template([{"role": "user", "content": question}])


def merged_model(base, folder):
    """A copy of `base` with the adapter merged into its weights (W + scale B A), by PEFT."""
    from peft import PeftModel

    return PeftModel.from_pretrained(copy.deepcopy(base), str(folder)).merge_and_unload().eval()


@pytest.fixture(scope="module")
def reference_texts(trained, tokenizer) -> dict[tuple[str | None, str], str]:
    """transformers' greedy text per (adapter or None, question), one request at a time."""
    from export.llm.source import default_gguf, load_gguf

    base = load_gguf(default_gguf()).model
    texts = {}
    threads = torch.get_num_threads()
    # one thread: beside another CPU-heavy process, two OpenMP threads wait on each other for a
    # scheduler slice per operator, and these 8 generations outlasted the 300 s test limit
    torch.set_num_threads(1)
    try:
        for adapter in (None, *trained):
            model = base if adapter is None else merged_model(base, trained[adapter])
            for question in QUESTIONS:
                ids = torch.tensor([tokenizer.encode(chat_text(tokenizer, question))])
                with torch.no_grad():
                    out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=ANSWER_TOKENS, do_sample=False)
                texts[adapter, question] = tokenizer.decode(out[0, ids.shape[1] :].tolist())
    finally:
        torch.set_num_threads(threads)
    return texts


def served(server, tokenizer, adapter: str | None, question: str) -> str:
    sampling = {"max_tokens": ANSWER_TOKENS, "temperature": 0}
    if adapter is not None:
        sampling["lora_name"] = adapter
    body = {"text_input": chat_text(tokenizer, question), "exclude_input_in_output": True, "sampling_parameters": json.dumps(sampling)}
    status, (answer,) = generate(server.options.http_url, body)
    assert status == 200, answer
    return answer["text_output"]


def test_a_mixed_adapter_batch_gives_each_request_transformers_merged_greedy_text(llm_triton, tokenizer, trained, reference_texts) -> None:
    requests = [(adapter, question) for adapter in (None, *trained) for question in QUESTIONS]
    with ThreadPoolExecutor(len(requests)) as pool:  # every adapter and the base model in the same steps
        texts = dict(zip(requests, pool.map(lambda request: served(llm_triton, tokenizer, *request), requests), strict=True))
    for request in requests:
        assert texts[request] == reference_texts[request], request
    for name in trained:
        answers = [texts[name, question] for question in QUESTIONS]
        assert any(map(STYLES[name].shows_in, answers)), (name, answers)  # quality.json holds the share (>= 80%)
        assert not any(STYLES[name].shows_in(texts[None, question]) for question in QUESTIONS), name


def test_the_quality_report_shows_every_style_in_most_held_out_answers(trained) -> None:
    """The trainer's own check on all held-out questions (quality.json beside the adapters)."""
    report = json.loads((next(iter(trained.values())).parent / "quality.json").read_text())
    for name in trained:
        entry = report["adapters"][name]
        assert entry["style_share"] >= 0.8 and entry["base_style_share"] <= 0.1, (name, entry)
