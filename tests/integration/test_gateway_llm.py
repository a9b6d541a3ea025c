"""OpenAI's completions and chat completions through the real gateway to the real `llm` model,
as the OpenAI clients people already use see them: the official `openai` client (sync, async,
streaming), LangChain's ChatOpenAI, usage, stop, seeds, refusals in OpenAI's shape, and a client
that leaves cancelling its generation in Triton (read from the model's own abort counter)."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import threading

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from gateway.settings import GatewaySettings
from llm.adapters import ADAPTER_LIST, read_adapter_list
from llm.tokenizer import LlmTokenizer
from tests.conftest import start_gateway
from tests.integration.llm_streams import LlmStream, grpc_inputs, wait_until
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.ports import free_ports
from tools.triton_client import fetch_metrics, metric_total

pytestmark = pytest.mark.integration

MODEL = "llm"
PROMPT = "The capital of France is"
QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
GREEDY = {"max_tokens": 8, "temperature": 0}


@pytest.fixture(scope="module")
def llm_gateway(llm_triton, tmp_path_factory: pytest.TempPathFactory):
    """The gateway as its own process in front of the Triton that serves `llm`."""
    process = start_gateway(llm_triton.options.grpc_url, tmp_path_factory.mktemp("llm-gateway") / "gateway.log")
    try:
        yield process
    finally:
        process.stop()


@pytest.fixture
def client(llm_gateway):
    client = openai.OpenAI(base_url=f"{llm_gateway.url}/v1", api_key="none", max_retries=0, timeout=300)
    yield client
    client.close()


def chat_prompt_tokens(messages: list[dict]) -> int:
    tokenizer = LlmTokenizer.from_folder(GatewaySettings().llm_folder)
    return len(tokenizer.encode(tokenizer.apply_chat_template(messages)))


def aborted(server) -> float:
    return metric_total(fetch_metrics(server.options.metrics_url), "vllm:request_success", finished_reason="abort")


def test_models_lists_the_llm_beside_the_embedding_model(llm_gateway) -> None:
    cards = httpx.get(f"{llm_gateway.url}/v1/models").json()["data"]
    ids = [card["id"] for card in cards]
    assert ids[:2] == ["embed", MODEL]
    listed = MODEL_REPOSITORY / MODEL / "1" / ADAPTER_LIST  # the trained adapters (make adapters), as LLM models
    assert set(ids[2:]) == set(read_adapter_list(listed) if listed.is_file() else ())
    assert all(card["parent"] == MODEL for card in cards[2:])
    assert httpx.get(f"{llm_gateway.url}/v1/models/{MODEL}").json()["id"] == MODEL


def test_openai_completion_returns_text_usage_and_finish_reason(client) -> None:
    response = client.completions.create(model=MODEL, prompt=PROMPT, **GREEDY)
    choice = response.choices[0]
    assert response.object == "text_completion" and response.model == MODEL and response.id.startswith("cmpl-")
    assert "Paris" in choice.text and choice.finish_reason == "length"
    assert response.usage.completion_tokens == 8 and response.usage.prompt_tokens == 5
    assert response.usage.total_tokens == 13


def test_openai_chat_renders_the_models_chat_template(client) -> None:
    response = client.chat.completions.create(model=MODEL, messages=QUESTION, max_completion_tokens=8, temperature=0)
    message = response.choices[0].message
    assert response.object == "chat.completion" and message.role == "assistant" and "Paris" in message.content
    assert response.usage.prompt_tokens == chat_prompt_tokens(QUESTION), "the prompt is the template's rendering, counted by Triton"
    assert 1 <= response.usage.completion_tokens <= 8 and response.choices[0].finish_reason in ("stop", "length")


def test_streamed_chat_joins_to_the_same_answer_and_ends_with_the_usage_chunk(client) -> None:
    whole = client.chat.completions.create(model=MODEL, messages=QUESTION, max_tokens=12, temperature=0)
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=QUESTION, max_tokens=12, temperature=0, stream=True, stream_options={"include_usage": True}
        )
    )
    assert chunks[0].choices[0].delta.role == "assistant" and len({chunk.id for chunk in chunks}) == 1
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == whole.choices[0].message.content
    assert [chunk.choices[0].finish_reason for chunk in chunks if chunk.choices][-1] == whole.choices[0].finish_reason
    assert all(chunk.usage is None for chunk in chunks[:-1])
    assert chunks[-1].choices == [] and chunks[-1].usage.model_dump() == whole.usage.model_dump()


def test_async_client_streams_a_completion(llm_gateway) -> None:
    async def run() -> tuple[str, list]:
        async with openai.AsyncOpenAI(base_url=f"{llm_gateway.url}/v1", api_key="none", max_retries=0) as client:
            whole = await client.completions.create(model=MODEL, prompt=PROMPT, **GREEDY)
            stream = await client.completions.create(model=MODEL, prompt=PROMPT, stream=True, **GREEDY)
            return whole.choices[0].text, [chunk async for chunk in stream]

    text, chunks = asyncio.run(run())
    assert len(chunks) > 1 and "".join(chunk.choices[0].text for chunk in chunks) == text
    assert chunks[-1].choices[0].finish_reason == "length" and all(chunk.usage is None for chunk in chunks)


def test_a_stop_sequence_ends_the_answer_before_it(client) -> None:
    plain = client.completions.create(model=MODEL, prompt=PROMPT, **GREEDY).choices[0].text
    assert "." in plain, "precondition: the greedy answer holds the stop sequence"
    stopped = client.completions.create(model=MODEL, prompt=PROMPT, stop=["."], **GREEDY).choices[0]
    assert stopped.text == plain[: plain.index(".")] and stopped.finish_reason == "stop"


def test_a_seed_makes_sampling_reproducible(client) -> None:
    def sample(seed: int) -> str:
        return client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=12, temperature=1.0, seed=seed).choices[0].text

    assert sample(7) == sample(7)
    assert len({sample(seed) for seed in (1, 2, 3)}) > 1, "different seeds sample different text"


def test_n_above_one_is_refused_with_an_openai_error(client) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        client.chat.completions.create(model=MODEL, messages=QUESTION, n=2, max_tokens=4)
    assert refused.value.param == "n" and refused.value.code == "unsupported_value"


@pytest.mark.parametrize(
    ("route", "body", "param"),
    [
        ("completions", {"model": MODEL}, "prompt"),
        ("completions", {"model": MODEL, "prompt": "Hi", "temperature": 5}, "temperature"),
        ("completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 0}, "max_tokens"),
        ("completions", {"model": MODEL, "prompt": "Hi", "max_tokens": 100_000}, "max_tokens"),  # refused by the model (INVALID_ARG)
        ("completions", {"model": MODEL, "prompt": "Hi", "logprobs": 2}, "logprobs"),
        ("chat/completions", {"model": MODEL, "messages": []}, "messages"),
        ("chat/completions", {"model": MODEL, "messages": [{"role": "robot", "content": "Hi"}]}, "messages[0].role"),
        ("chat/completions", {"model": MODEL, "messages": QUESTION, "stop": 3}, "stop"),
        ("chat/completions", {"model": MODEL, "messages": QUESTION, "tools": [{"type": "function"}]}, "tools"),
        ("chat/completions", {"model": MODEL, "messages": QUESTION, "stream_options": {"include_usage": True}}, "stream_options"),
        ("chat/completions", {"model": MODEL, "messages": QUESTION, "frobnicate": 1}, "frobnicate"),
    ],
)
def test_bad_input_is_a_400_in_openais_shape_naming_the_field(llm_gateway, route: str, body: dict, param: str) -> None:
    response = httpx.post(f"{llm_gateway.url}/v1/{route}", json=body, timeout=60)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param


def test_an_unknown_model_is_a_404_and_a_bad_priority_a_400(llm_gateway) -> None:
    unknown = httpx.post(f"{llm_gateway.url}/v1/completions", json={"model": "gpt-4o", "prompt": "Hi"})
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "model_not_found"
    bad = httpx.post(f"{llm_gateway.url}/v1/completions", json={"model": MODEL, "prompt": "Hi"}, headers={"X-Request-Priority": "urgent"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "x-request-priority"


def test_langchain_chat_openai_invokes_and_streams(llm_gateway) -> None:
    chat = ChatOpenAI(model=MODEL, base_url=f"{llm_gateway.url}/v1", api_key="none", temperature=0, max_tokens=8, max_retries=0)
    answer = chat.invoke("What is the capital of France? Answer in one word.")
    streamed = list(chat.stream("What is the capital of France? Answer in one word."))
    assert "Paris" in answer.content
    assert "".join(chunk.content for chunk in streamed) == answer.content
    assert answer.usage_metadata["output_tokens"] <= 8 and answer.usage_metadata["input_tokens"] > 0


@pytest.mark.parametrize("stream", [True, False], ids=["streaming", "waiting"])
def test_a_client_that_leaves_cancels_its_generation_in_triton(llm_gateway, llm_triton, stream: bool) -> None:
    """256 greedy tokens take tens of seconds here: an `abort` counted by the model within the
    test's wait proves the gateway cancelled the Triton stream when the client left."""
    before = aborted(llm_triton)
    body = {"model": MODEL, "prompt": "Count from one to a thousand: one, two,", "max_tokens": 256, "temperature": 0, "stream": stream}
    with httpx.Client(timeout=httpx.Timeout(120, read=3 if not stream else 120)) as http:
        if stream:
            with http.stream("POST", f"{llm_gateway.url}/v1/completions", json=body) as response:
                events = (line for line in response.iter_lines() if line.startswith("data: "))
                assert next(events) and next(events), "precondition: the generation is under way"
        else:
            with pytest.raises(httpx.ReadTimeout):  # the client gives up before the answer
                http.post(f"{llm_gateway.url}/v1/completions", json=body)
    assert wait_until(lambda: aborted(llm_triton) > before), "the model never counted an aborted request"
    assert aborted(llm_triton) == before + 1
    assert wait_until(lambda: metric_total(fetch_metrics(llm_triton.options.metrics_url), "vllm:num_requests_running") == 0)
    gateway_metrics = httpx.get(f"{llm_gateway.url}/metrics").text
    assert re.search(r"^gateway_llm_cancelled_generations_total [1-9]", gateway_metrics, flags=re.M)


def running_and_waiting(server) -> tuple[float, float]:
    metrics = fetch_metrics(server.options.metrics_url)
    return metric_total(metrics, "vllm:num_requests_running"), metric_total(metrics, "vllm:num_requests_waiting")


def test_a_full_waiting_queue_is_a_429_with_retry_after(llm_gateway, llm_triton) -> None:
    """One running slot and one waiting place, both taken by direct gRPC streams: the model
    refuses the next request as busy (UNAVAILABLE), which the gateway answers as 429."""
    committed = llm_triton.client.config(MODEL)
    small = type(committed)()
    small.CopyFrom(committed)
    small.parameters["max_num_seqs"].string_value = "1"
    small.parameters["max_waiting"].string_value = "1"
    with llm_triton.client.restoring(MODEL, committed):
        llm_triton.client.load(MODEL, small)
        holders = LlmStream(llm_triton.options.grpc_url)
        try:
            # One at a time: sent together, the second can find the first still waiting and be
            # refused by the bound of one waiting place.
            _, running = holders.send(grpc_inputs("Hi", sampling={"max_tokens": 256, "ignore_eos": True}))
            holders.wait(lambda: len(running.times) >= 1)
            holders.send(grpc_inputs("Hi", sampling={"max_tokens": 256, "ignore_eos": True}))
            assert wait_until(lambda: running_and_waiting(llm_triton) == (1, 1)), "precondition: one request running and one waiting"
            response = httpx.post(f"{llm_gateway.url}/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 4}, timeout=60)
        finally:
            holders.close(cancel=True)
    assert response.status_code == 429 and response.headers["Retry-After"] == "1", response.text
    assert response.json()["error"]["code"] == "queue_full"


def test_an_interactive_request_overtakes_a_waiting_bulk_one_under_the_priority_policy(llm_gateway, llm_triton) -> None:
    """X-Request-Priority reaches the model's scheduler: with one running slot held by a direct
    gRPC stream, a bulk request waits; an interactive one sent after it finishes first (under
    `fcfs` it would wait behind the bulk one)."""
    committed = llm_triton.client.config(MODEL)
    ranked = type(committed)()
    ranked.CopyFrom(committed)
    ranked.parameters["policy"].string_value = "priority"
    ranked.parameters["max_num_seqs"].string_value = "1"
    finished: list[str] = []

    def ask(name: str, priority: str) -> None:
        body = {"model": MODEL, "prompt": f"{name}: the capital of France is", "max_tokens": 4, "temperature": 0}
        response = httpx.post(f"{llm_gateway.url}/v1/completions", json=body, headers={"X-Request-Priority": priority}, timeout=300)
        finished.append(name if response.status_code == 200 else f"{name} failed: {response.text}")

    def waiting() -> float:
        return metric_total(fetch_metrics(llm_triton.options.metrics_url), "vllm:num_requests_waiting")

    with llm_triton.client.restoring(MODEL, committed):
        llm_triton.client.load(MODEL, ranked)
        holder = LlmStream(llm_triton.options.grpc_url)
        try:
            _, held = holder.send(grpc_inputs("Hi", sampling={"max_tokens": 48, "ignore_eos": True}))
            holder.wait(lambda: len(held.times) >= 1)
            bulk = threading.Thread(target=ask, args=("bulk", "bulk"))
            bulk.start()
            assert wait_until(lambda: waiting() == 1), "precondition: the bulk request waits behind the running one"
            interactive = threading.Thread(target=ask, args=("interactive", "interactive"))
            interactive.start()
            for thread in (bulk, interactive):
                thread.join(300)
        finally:
            holder.close(cancel=True)
    assert finished == ["interactive", "bulk"]


def test_past_its_stream_limit_the_gateway_refuses_with_429_until_a_stream_ends(llm_triton, tmp_path) -> None:
    """--llm-max-streams 1: while one generation streams, the next is refused before Triton sees
    it; once the first client left, its slot is free again."""
    body = {"model": MODEL, "prompt": "Count from one to a thousand: one, two,", "max_tokens": 256, "temperature": 0, "stream": True}
    body["ignore_eos"] = True  # the holder must still stream when the second request comes
    with start_gateway(llm_triton.options.grpc_url, tmp_path / "gateway.log", "--llm-max-streams", "1") as gateway:
        url = f"{gateway.url}/v1/completions"
        with httpx.Client(timeout=120) as http:
            with http.stream("POST", url, json=body) as holder:
                lines = holder.iter_lines()  # kept: a closed line iterator closes the response, and the client is gone
                assert next(line for line in lines if line.startswith("data: ")), "precondition: one stream open"
                refused = http.post(url, json={"model": MODEL, "prompt": "Hi", "max_tokens": 2})
            assert wait_until(lambda: "gateway_llm_open_generations 0.0" in http.get(f"{gateway.url}/metrics").text)
            after = http.post(url, json={"model": MODEL, "prompt": "Hi", "max_tokens": 2})
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "1", refused.text
    assert refused.json()["error"]["code"] == "too_many_streams"
    assert after.status_code == 200, after.text


# ---- the README's and docs/gateway.md's LLM examples (```bash blocks), run against the test gateway ----


def llm_curl_examples(page: str = "docs/gateway.md") -> list[str]:
    text = (REPO_ROOT / page).read_text()
    blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
    return [line.strip() for block in blocks for line in block.splitlines() if line.strip().startswith("curl ") and "completions" in line]


def test_the_gateway_page_shows_curl_examples_for_both_llm_routes() -> None:
    examples = llm_curl_examples()
    assert any("/v1/completions" in line for line in examples) and any("/v1/chat/completions" in line for line in examples)
    assert any("/v1/chat/completions" in line for line in llm_curl_examples("README.md"))


@pytest.mark.parametrize("command", llm_curl_examples() + llm_curl_examples("README.md"))
def test_curl_example_answers_in_openais_shape(command: str, llm_gateway) -> None:
    command = re.sub(r"(localhost|127\.0\.0\.1):8080\b", rf"\g<1>:{llm_gateway.port}", command)
    result = subprocess.run(command, shell=True, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    if '"stream": true' in command:
        assert result.stdout.rstrip().endswith("data: [DONE]") and '"usage":{"prompt_tokens":' in result.stdout
    else:
        assert '"choices":[{"index":0' in result.stdout and '"usage":{"prompt_tokens":' in result.stdout


def test_python_example_works_verbatim(llm_gateway) -> None:
    text = (REPO_ROOT / "docs" / "gateway.md").read_text()
    (example,) = [block for block in re.findall(r"```python\n(.*?)```", text, flags=re.S) if "ChatOpenAI" in block]
    example = re.sub(r"localhost:8080\b", f"localhost:{llm_gateway.port}", example)
    result = subprocess.run([sys.executable, "-c", example], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Paris" in result.stdout


def test_without_triton_the_llm_routes_answer_503_with_retry_after(tmp_path) -> None:
    (dead_port,) = free_ports(1)
    with start_gateway(f"127.0.0.1:{dead_port}", tmp_path / "gateway.log") as gateway:
        body = {"model": MODEL, "messages": QUESTION, "max_tokens": 2}
        response = httpx.post(f"{gateway.url}/v1/chat/completions", json=body, timeout=60)
        models = httpx.get(f"{gateway.url}/v1/models").json()
    assert response.status_code == 503 and response.headers["Retry-After"] == "1", response.text
    assert response.json()["error"]["code"] == "triton_unavailable"
    assert [card["id"] for card in models["data"]] == ["embed"], "a model Triton does not serve is not listed"
