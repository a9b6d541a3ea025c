"""The OpenAI-compatible gateway against the real local Triton: the API, and every error case.

Each gateway here is a real `python -m gateway` process (tests/conftest.py); the servers
that need other settings (keys, a dead Triton, small queues) are started beside it.
"""

from __future__ import annotations

import base64
import itertools
import os
import signal
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from tests.conftest import start_gateway, start_triton
from tools.ports import free_ports
from tools.repo.policy_repository import copy_repository, set_queue_policy
from tools.triton_client.stats import ModelStats

pytestmark = pytest.mark.integration

MIN_COSINE = 0.9999
TEXTS = ["A man is eating food.", "今天天气很好。", "short", "Triton joins requests into batches."]
_unique = itertools.count()


def unique_texts(count: int, words: int = 8) -> list[str]:
    """Distinct per call, so Triton's response cache never answers."""
    return [
        f"text {next(_unique)} {os.getpid()} " + " ".join(["about dynamic batching on Triton"] * (words // 5 + 1)) for _ in range(count)
    ]


def post(gateway, body: dict | bytes | str, headers: dict[str, str] | None = None, timeout: float = 120) -> httpx.Response:
    url = f"{gateway.url}/v1/embeddings"
    if isinstance(body, dict):
        return httpx.post(url, json=body, headers=headers, timeout=timeout)
    return httpx.post(url, content=body, headers={"Content-Type": "application/json", **(headers or {})}, timeout=timeout)


def assert_error(response: httpx.Response, status: int, code: str | None = None, param: str | None = None) -> dict:
    """OpenAI's error shape, and nothing that looks like a traceback."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["message"] and "Traceback" not in response.text
    if code is not None:
        assert error["code"] == code, error
    if param is not None:
        assert error["param"] == param, error
    return error


def reference(reference_model, texts: list[str]) -> np.ndarray:
    return reference_model.encode(texts, convert_to_numpy=True, normalize_embeddings=True)


def min_cosine(served: np.ndarray, expected: np.ndarray) -> float:
    served = served / np.linalg.norm(served, axis=1, keepdims=True)
    return float(np.min(np.sum(served * expected, axis=1)))


# ---- the API ------------------------------------------------------------------------


def test_embeddings_have_openais_shape_and_match_sentence_transformers(gateway, reference_model) -> None:
    response = post(gateway, {"model": "embed", "input": TEXTS, "user": "someone"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list" and body["model"] == "embed"
    assert [item["index"] for item in body["data"]] == list(range(len(TEXTS)))
    assert all(item["object"] == "embedding" and len(item["embedding"]) == 384 for item in body["data"])
    served = np.array([item["embedding"] for item in body["data"]], dtype=np.float32)
    assert min_cosine(served, reference(reference_model, TEXTS)) >= MIN_COSINE


def test_a_single_string_and_base64_encoding_give_the_same_vector(gateway) -> None:
    as_float = post(gateway, {"model": "embed", "input": TEXTS[0]}).json()["data"][0]["embedding"]
    as_base64 = post(gateway, {"model": "embed", "input": [TEXTS[0]], "encoding_format": "base64"}).json()["data"][0]["embedding"]
    decoded = np.frombuffer(base64.b64decode(as_base64), dtype="<f4")
    np.testing.assert_array_equal(decoded, np.array(as_float, dtype=np.float32))


def test_usage_counts_the_models_own_tokens_without_padding(gateway, reference_model) -> None:
    texts = [*TEXTS, "word " * 400]  # the last one is truncated to the model's 256 tokens
    usage = post(gateway, {"model": "embed", "input": texts}).json()["usage"]
    tokenizer = reference_model.tokenizer
    expected = sum(len(tokenizer(text, truncation=True, max_length=reference_model.max_seq_length)["input_ids"]) for text in texts)
    assert usage == {"prompt_tokens": expected, "total_tokens": expected}


def test_large_inputs_are_split_into_max_batch_size_requests_in_order(gateway, triton, reference_model) -> None:
    texts = unique_texts(70)
    before = ModelStats.settled(triton.http_url, "embed")
    response = post(gateway, {"model": "embed", "input": texts})
    after = ModelStats.settled(triton.http_url, "embed")
    assert response.status_code == 200, response.text
    data = response.json()["data"]
    assert [item["index"] for item in data] == list(range(70))
    served = np.array([item["embedding"] for item in data], dtype=np.float32)
    assert min_cosine(served, reference(reference_model, texts)) >= MIN_COSINE  # each row is its own text: order kept
    delta = after - before
    assert (delta.requests, delta.inferences) == (3, 70), "70 texts = 32 + 32 + 6 rows (the ensemble's max_batch_size is 32)"


def test_dimensions_equal_to_the_models_size_is_accepted(gateway) -> None:
    response = post(gateway, {"model": "embed", "input": "x", "dimensions": 384})
    assert response.status_code == 200 and len(response.json()["data"][0]["embedding"]) == 384


def test_models_lists_the_served_model_and_health_follows_triton(gateway) -> None:
    models = httpx.get(f"{gateway.url}/v1/models").json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["embed"]
    assert httpx.get(f"{gateway.url}/v1/models/embed").json()["id"] == "embed"
    assert_error(httpx.get(f"{gateway.url}/v1/models/other"), 404, "model_not_found")
    health = httpx.get(f"{gateway.url}/health")
    assert health.status_code == 200 and health.json()["status"] == "ready"


def test_metrics_count_requests_errors_and_latency(gateway) -> None:
    post(gateway, {"model": "embed", "input": "metrics"})
    post(gateway, b"{not json")
    text = httpx.get(f"{gateway.url}/metrics").text
    assert 'gateway_requests_total{method="POST",route="/v1/embeddings",status="200"}' in text
    assert 'gateway_errors_total{code="invalid_json",status="400"}' in text
    assert 'gateway_request_duration_seconds_bucket{le="+Inf",route="/v1/embeddings"}' in text
    assert "gateway_prompt_tokens_total" in text


# ---- 400 / 404 / 413: refused before Triton ----------------------------------------------

BAD_BODIES = [
    pytest.param(b"{not json", 400, "invalid_json", None, id="malformed JSON"),
    pytest.param(b"[1, 2]", 400, "invalid_json", None, id="not an object"),
    pytest.param({"model": "embed"}, 400, "missing_required_parameter", "input", id="no input"),
    pytest.param({"input": "x"}, 400, "missing_required_parameter", "model", id="no model"),
    pytest.param({"model": 3, "input": "x"}, 400, "invalid_type", "model", id="model not a string"),
    pytest.param({"model": "embed", "input": 3}, 400, "invalid_type", "input", id="input a number"),
    pytest.param({"model": "embed", "input": []}, 400, "invalid_value", "input", id="empty list"),
    pytest.param({"model": "embed", "input": ""}, 400, "invalid_value", "input", id="an empty string"),
    pytest.param({"model": "embed", "input": ["ok", ""]}, 400, "invalid_value", "input[1]", id="an empty string in the list"),
    pytest.param({"model": "embed", "input": ["ok", 5]}, 400, "invalid_type", "input[1]", id="a non-string item"),
    pytest.param({"model": "embed", "input": [101, 2023, 102]}, 400, "unsupported_input", "input", id="token ids"),
    pytest.param({"model": "embed", "input": [[101, 102], [101]]}, 400, "unsupported_input", "input", id="lists of token ids"),
    pytest.param({"model": "embed", "input": "x", "encoding_format": "int8"}, 400, "invalid_value", "encoding_format", id="encoding"),
    pytest.param({"model": "embed", "input": "x", "dimensions": 256}, 400, "invalid_value", "dimensions", id="other dimensions"),
    pytest.param({"model": "embed", "input": "x", "dimensions": "384"}, 400, "invalid_type", "dimensions", id="dimensions a string"),
    pytest.param({"model": "embed", "input": "x", "user": 7}, 400, "invalid_type", "user", id="user not a string"),
    pytest.param(b'{"model": "embed", "input": "\\ud800"}', 400, "invalid_json", None, id="lone surrogate"),
    pytest.param({"model": "text-embedding-3-small", "input": "x"}, 404, "model_not_found", "model", id="unknown model"),
    pytest.param({"model": "embed", "input": ["x"] * 2049}, 413, "too_many_inputs", "input", id="more than 2048 inputs"),
]


@pytest.mark.parametrize(("body", "status", "code", "param"), BAD_BODIES)
def test_bad_requests_get_openai_errors(gateway, body, status: int, code: str, param: str | None) -> None:
    assert_error(post(gateway, body), status, code, param)


def test_a_body_over_the_limit_is_refused_with_413(gateway) -> None:
    body = b'{"model": "embed", "input": "' + b"a" * (8 * 1024 * 1024) + b'"}'
    assert_error(post(gateway, body), 413, "request_too_large")


def test_an_unknown_priority_is_refused_and_unknown_urls_get_404(gateway) -> None:
    assert_error(post(gateway, {"model": "embed", "input": "x"}, {"X-Request-Priority": "urgent"}), 400, param="x-request-priority")
    assert_error(httpx.post(f"{gateway.url}/v1/audio/speech", json={}), 404, "unknown_url")
    assert_error(httpx.get(f"{gateway.url}/v1/embeddings"), 405, "method_not_allowed")


# ---- 401: API keys --------------------------------------------------------------------


@pytest.fixture(scope="module")
def keyed_gateway(triton, tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    env = dict(os.environ, GATEWAY_API_KEYS="first-key,second-key")
    process = start_gateway(triton.grpc_url, tmp_path_factory.mktemp("keyed") / "gateway.log", env=env)
    yield process
    process.stop()


def test_api_keys_are_required_on_v1_when_configured(keyed_gateway) -> None:
    body = {"model": "embed", "input": "x"}
    assert_error(post(keyed_gateway, body), 401, "missing_api_key")
    assert_error(post(keyed_gateway, body, {"Authorization": "Bearer wrong"}), 401, "invalid_api_key")
    assert_error(httpx.get(f"{keyed_gateway.url}/v1/models", headers={"Authorization": "Basic first-key"}), 401, "missing_api_key")
    assert post(keyed_gateway, body, {"Authorization": "Bearer second-key"}).status_code == 200
    assert httpx.get(f"{keyed_gateway.url}/health").status_code == 200, "probes carry no key"


def test_a_key_file_readable_by_others_is_refused(triton, tmp_path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("k\n")
    keys.chmod(0o644)
    with pytest.raises(RuntimeError, match="readable by others"):
        start_gateway(triton.grpc_url, tmp_path / "gateway.log", "--api-key-file", str(keys))


# ---- 503 / 504: Triton down or slow ---------------------------------------------------


@pytest.fixture(scope="module")
def orphan_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """A gateway whose Triton does not exist (nothing listens on its gRPC port)."""
    (dead_port,) = free_ports(1)
    process = start_gateway(f"127.0.0.1:{dead_port}", tmp_path_factory.mktemp("orphan") / "gateway.log")
    yield process
    process.stop()


def test_without_triton_health_and_embeddings_answer_503(orphan_gateway) -> None:
    assert_error(httpx.get(f"{orphan_gateway.url}/health", timeout=30), 503, "triton_unavailable")
    response = post(orphan_gateway, {"model": "embed", "input": "x"}, timeout=30)
    assert_error(response, 503, "triton_unavailable")
    assert response.headers["Retry-After"] == "1"
    assert httpx.get(f"{orphan_gateway.url}/health/live").status_code == 200


def test_a_request_over_the_timeout_answers_504(triton, tmp_path) -> None:
    process = start_gateway(triton.grpc_url, tmp_path / "gateway.log", "--timeout", "0.05")
    try:
        post(process, {"model": "embed", "input": "warm-up"})  # whatever it answers, the model's config is read now
        assert_error(post(process, {"model": "embed", "input": unique_texts(256, words=40)}), 504, "timeout")
    finally:
        process.stop()


# ---- 429 and priority: a Triton with a queue of one for bulk ------------------------------


@pytest.fixture(scope="module")
def small_queue_gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Bulk (the default level 2) may queue one request per step; interactive (level 1) is unbounded."""
    directory = tmp_path_factory.mktemp("small-queue")

    def bound(config) -> None:
        set_queue_policy(config, None, max_queue_size=1)
        set_queue_policy(config, 1, max_queue_size=0)

    repository = copy_repository(directory / "repository", {"tokenizer": bound, "encoder": bound})
    server = start_triton(directory / "triton.log", model_repository=repository)
    try:
        process = start_gateway(server.options.grpc_url, directory / "gateway.log")
        yield process
        process.stop()
    finally:
        server.stop()


def test_a_full_triton_queue_answers_429_with_retry_after(small_queue_gateway) -> None:
    response = post(small_queue_gateway, {"model": "embed", "input": unique_texts(256, words=100)})
    error = assert_error(response, 429, "queue_full")
    assert "Exceeds maximum queue size" in error["message"]
    assert response.headers["Retry-After"] == "1"


def test_interactive_requests_use_tritons_priority_1_queue(small_queue_gateway) -> None:
    """Same load as above, marked interactive: level 1's unbounded queue takes every chunk."""
    response = post(small_queue_gateway, {"model": "embed", "input": unique_texts(256, words=100)}, {"X-Request-Priority": "interactive"})
    assert response.status_code == 200, response.text
    assert len(response.json()["data"]) == 256


def test_a_gateway_that_died_is_started_again_by_the_launchers_watch(tmp_path) -> None:
    (dead_port,) = free_ports(1)
    process = start_gateway(f"127.0.0.1:{dead_port}", tmp_path / "gateway.log")
    try:
        assert not process.restart_if_exited(), "a running gateway is left alone"
        first = process.process.pid
        os.kill(first, signal.SIGKILL)
        process.process.wait(timeout=30)
        assert process.restart_if_exited()
        assert process.process.pid != first
        assert httpx.get(f"{process.url}/health/live").status_code == 200
    finally:
        process.stop()
