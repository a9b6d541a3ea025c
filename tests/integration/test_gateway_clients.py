"""Real OpenAI clients through the gateway to the live Triton, and the documented examples verbatim."""

from __future__ import annotations

import base64
import re
import subprocess
import sys

import numpy as np
import openai
import pytest
from langchain_openai import OpenAIEmbeddings

from tools.paths import REPO_ROOT

pytestmark = pytest.mark.integration

MIN_COSINE = 0.9999
TEXTS = ["A man is eating food.", "今天天气很好。", "Where is the nearest train station?", "x " * 300]


def cosines(served, expected: np.ndarray) -> np.ndarray:
    served = np.asarray(served, dtype=np.float32)
    return np.sum(served * expected, axis=1) / np.linalg.norm(served, axis=1)


@pytest.fixture
def openai_client(gateway):
    client = openai.OpenAI(base_url=f"{gateway.url}/v1", api_key="none", max_retries=0)
    yield client
    client.close()


@pytest.mark.parametrize("encoding_format", ["float", "base64"])
def test_openai_client_gets_sentence_transformers_embeddings(openai_client, reference_model, encoding_format: str) -> None:
    response = openai_client.embeddings.create(model="embed", input=TEXTS, encoding_format=encoding_format)
    served = [item.embedding for item in sorted(response.data, key=lambda item: item.index)]
    if encoding_format == "base64":  # asked for explicitly, the client hands the strings over as they came
        served = [np.frombuffer(base64.b64decode(row), dtype="<f4") for row in served]
    expected = reference_model.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=True)
    assert np.min(cosines(served, expected)) >= MIN_COSINE
    assert response.model == "embed" and response.usage.prompt_tokens == response.usage.total_tokens > len(TEXTS)


def test_openai_client_default_encoding_and_a_single_string(openai_client, reference_model) -> None:
    """The client asks for base64 when no format is given and decodes it itself."""
    response = openai_client.embeddings.create(model="embed", input=TEXTS[1])
    expected = reference_model.encode([TEXTS[1]], convert_to_numpy=True, normalize_embeddings=True)
    assert cosines([response.data[0].embedding], expected)[0] >= MIN_COSINE


def test_openai_client_raises_its_own_error_classes(openai_client) -> None:
    with pytest.raises(openai.NotFoundError) as not_found:
        openai_client.embeddings.create(model="text-embedding-3-small", input="x")
    assert not_found.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError, match="dimensions"):
        openai_client.embeddings.create(model="embed", input="x", dimensions=256)
    with pytest.raises(openai.BadRequestError, match="Token-id input"):
        openai_client.embeddings.create(model="embed", input=[[101, 2023, 102]])


def test_langchain_openai_embeddings_match_sentence_transformers(gateway, reference_model) -> None:
    embeddings = OpenAIEmbeddings(model="embed", base_url=f"{gateway.url}/v1", api_key="none", check_embedding_ctx_length=False)
    documents = embeddings.embed_documents(TEXTS)
    query = embeddings.embed_query(TEXTS[2])
    expected = reference_model.encode(TEXTS, convert_to_numpy=True, normalize_embeddings=True)
    assert np.min(cosines(documents, expected)) >= MIN_COSINE
    assert cosines([query], expected[2:3])[0] >= MIN_COSINE


# ---- the examples of the README's quick start and of docs/gateway.md, verbatim but for the port ----

GATEWAY_PAGES = {name: (REPO_ROOT / name).read_text() for name in ("README.md", "docs/gateway.md")}


def blocks(language: str, text: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def python_examples() -> list[tuple[str, str]]:
    """(page, code) for every Python block that calls the gateway."""
    return [(page, block) for page, text in GATEWAY_PAGES.items() for block in blocks("python", text) if "127.0.0.1:8080" in block]


def curl_examples() -> list[tuple[str, str]]:
    return [
        (page, line)
        for page, text in GATEWAY_PAGES.items()
        for block in blocks("shell", text)
        for line in block.splitlines()
        if line.startswith("curl ") and ":8080/v1/" in line
    ]


def on_test_gateway(text: str, gateway) -> str:
    return re.sub(r"(localhost|127\.0\.0\.1):8080\b", rf"\g<1>:{gateway.port}", text)


def test_readme_and_gateway_page_show_openai_and_curl_examples() -> None:
    assert {page for page, _ in python_examples()} == set(GATEWAY_PAGES)
    assert {page for page, _ in curl_examples()} == set(GATEWAY_PAGES)
    assert any("OpenAIEmbeddings" in code for page, code in python_examples() if page == "docs/gateway.md")


@pytest.mark.parametrize(("page", "example"), [pytest.param(page, code, id=page) for page, code in python_examples()])
def test_python_example_works_verbatim(page: str, example: str, gateway) -> None:
    checks = "\nassert len(vectors) == 2 and len(vectors[0]) == 384\n"
    if "OpenAIEmbeddings" in example:
        checks += "assert len(query) == 384 and len(documents) == 2\n"
    result = subprocess.run(
        [sys.executable, "-c", on_test_gateway(example, gateway) + checks], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] == ["2", "384"]


@pytest.mark.parametrize(("page", "command"), [pytest.param(page, line, id=page) for page, line in curl_examples()])
def test_curl_example_answers_the_openai_shape(page: str, command: str, gateway) -> None:
    result = subprocess.run(on_test_gateway(command, gateway), shell=True, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert '"object":"list"' in result.stdout and '"usage":{"prompt_tokens":' in result.stdout
