"""The benchmarked targets: where each is called, what it is sent, how its answer holds the
embeddings; and the parity check that they compute the same thing."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp
import numpy as np

from tools.bench.gateway.infinity_server import INFINITY_VERSION
from tools.load.requests import SAMPLE_TEXTS


@dataclass(frozen=True)
class EmbeddingEndpoint:
    name: str
    url: str
    body: Callable[[list[str]], dict]
    vectors: Callable[[dict], np.ndarray]  # [n, d] from a decoded answer


def openai_body(texts: list[str]) -> dict:
    return {"model": "embed", "input": texts}


def openai_vectors(answer: dict) -> np.ndarray:
    return np.array([item["embedding"] for item in sorted(answer["data"], key=lambda item: item["index"])], dtype=np.float32)


def gateway_target(base: str) -> EmbeddingEndpoint:
    return EmbeddingEndpoint("gateway (OpenAI API -> gRPC)", f"{base}/v1/embeddings", openai_body, openai_vectors)


def triton_target(http_url: str) -> EmbeddingEndpoint:
    def body(texts: list[str]) -> dict:
        return {"inputs": [{"name": "TEXT", "shape": [len(texts), 1], "datatype": "BYTES", "data": texts}]}

    def vectors(answer: dict) -> np.ndarray:
        output = answer["outputs"][0]
        return np.array(output["data"], dtype=np.float32).reshape(output["shape"])

    return EmbeddingEndpoint("Triton HTTP/JSON", f"http://{http_url}/v2/models/embed/infer", body, vectors)


def infinity_target(base: str) -> EmbeddingEndpoint:
    return EmbeddingEndpoint(f"infinity-emb {INFINITY_VERSION}", f"{base}/embeddings", openai_body, openai_vectors)


async def fetch_vectors(target: EmbeddingEndpoint, texts: list[str]) -> np.ndarray:
    async with aiohttp.ClientSession() as session, session.post(target.url, json=target.body(texts)) as response:
        return target.vectors(await response.json(content_type=None))


def parity(targets: list[EmbeddingEndpoint]) -> dict[str, float]:
    """Min cosine of each target's embeddings to the first target's, on the sample texts:
    a comparison of speed only means something between servers that compute the same thing."""
    texts = list(SAMPLE_TEXTS)
    reference = asyncio.run(fetch_vectors(targets[0], texts))
    reference /= np.linalg.norm(reference, axis=1, keepdims=True)
    result = {}
    for target in targets:
        vectors = asyncio.run(fetch_vectors(target, texts))
        vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
        result[target.name] = round(float(np.min(np.sum(vectors * reference, axis=1))), 6)
    return result
