"""The `embed` ensemble on the real local Triton: correctness, batching, priority, cache."""

from __future__ import annotations

import itertools
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from tools.embed import EmbeddingClient
from tools.triton_client.stats import ModelStats

pytestmark = pytest.mark.integration

MIN_COSINE = 0.9999
SENTENCES = [
    "A man is eating food.",
    "Triton joins requests into batches.",
    "今天天气很好。",
    "机器学习模型的推理服务需要低延迟和高吞吐量。",
    "short",
    "A somewhat longer English sentence, to make the padded batch ragged before padding, about serving.",
]
_unique = itertools.count()


def unique_text(prefix: str = "text") -> str:
    """Distinct per call, so the response cache never answers a measurement request."""
    return f"{prefix} number {next(_unique)} about dynamic batching on Triton"


def cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.sum(a * b, axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


def test_embeddings_match_sentence_transformers(client, reference_model) -> None:
    served = client.embed(SENTENCES)
    expected = reference_model.encode(SENTENCES, convert_to_numpy=True)
    assert served.shape == (len(SENTENCES), 384)
    assert served.dtype == np.float32
    assert cosine(served, expected).min() >= MIN_COSINE


def test_embeddings_are_unit_length(client) -> None:
    norms = np.linalg.norm(client.embed([unique_text(), "今天天气很好。"]), axis=1)
    np.testing.assert_allclose(norms, 1.0, atol=1e-5)


def test_one_text_alone_equals_the_same_text_in_a_padded_batch(client) -> None:
    alone = client.embed(["short"])
    batched = client.embed(["short", SENTENCES[-1]])
    assert cosine(alone, batched[:1])[0] >= MIN_COSINE


@pytest.mark.parametrize("priority", [1, 2])
def test_request_priority_levels_are_served(client, priority: int) -> None:
    assert client.embed([unique_text("priority")], priority=priority).shape == (1, 384)


def test_concurrent_requests_execute_in_batches_larger_than_one(triton) -> None:
    before = ModelStats.settled(triton.http_url, "encoder")
    clients = [EmbeddingClient("grpc", triton.grpc_url) for _ in range(16)]

    def send_requests(client: EmbeddingClient) -> int:
        return sum(len(client.embed([unique_text("concurrent")])) for _ in range(6))

    with ThreadPoolExecutor(max_workers=len(clients)) as pool:
        rows = sum(pool.map(send_requests, clients))
    for client in clients:
        client.close()
    delta = ModelStats.settled(triton.http_url, "encoder") - before
    assert rows == 16 * 6
    assert delta.inferences == rows
    assert max(delta.batch_executions) > 1, delta.batch_executions
    assert delta.executions < rows, "batching saved executions"


def test_repeated_request_is_answered_from_the_response_cache(triton) -> None:
    client = EmbeddingClient("http", triton.http_url)
    text = unique_text("cached")
    before = ModelStats.settled(triton.http_url, "embed")
    first = client.embed([text])
    second = client.embed([text])
    delta = ModelStats.settled(triton.http_url, "embed") - before
    np.testing.assert_array_equal(first, second)
    assert delta.cache_hits == 1
    assert delta.cache_misses == 1
