"""Gateway pieces that need no server: Triton error mapping, chunking, model checks, settings."""

from __future__ import annotations

import asyncio
import base64

import numpy as np
import orjson
import pytest
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from gateway.errors import APIError, connection_dropped, from_triton
from gateway.schema import EmbeddingRequest, parse_request, render_response
from gateway.settings import GatewaySettings, SettingsError, keys_from, read_keys_file
from gateway.triton import ModelInfo, TritonEmbedder, chunks, model_info
from tools.paths import MODEL_REPOSITORY
from tools.repo.model_config import load_config


@pytest.mark.parametrize(
    ("message", "status", "expected", "code"),
    [
        ("[request id: <id_unknown>] Exceeds maximum queue size", "StatusCode.UNAVAILABLE", 429, "queue_full"),
        ("Request timeout expired", "StatusCode.UNAVAILABLE", 504, "timeout"),
        ("Deadline Exceeded", "StatusCode.DEADLINE_EXCEEDED", 504, "timeout"),
        ("failed to connect to all addresses", "StatusCode.UNAVAILABLE", 503, "triton_unavailable"),
        ("Request for unknown model: 'embed' is not found", "StatusCode.NOT_FOUND", 503, "triton_unavailable"),
        ("in ensemble 'embed', TEXT[0] is not valid UTF-8", "StatusCode.INVALID_ARGUMENT", 400, "invalid_value"),
        ("onnxruntime failed", "StatusCode.INTERNAL", 500, "triton_error"),
    ],
)
def test_triton_errors_map_to_the_status_an_openai_client_acts_on(message: str, status: str, expected: int, code: str) -> None:
    error = from_triton(InferenceServerException(message, status), retry_after_s=2)
    assert (error.status, error.code) == (expected, code)
    assert message in error.message
    assert ("Retry-After" in error.headers()) == (expected in (429, 503))


@pytest.mark.parametrize(
    ("message", "status", "dropped"),
    [
        ("Stream removed (Socket closed)", "StatusCode.UNAVAILABLE", True),
        ("Connection reset by peer", "StatusCode.UNAVAILABLE", True),
        ("Request timeout expired", "StatusCode.UNAVAILABLE", False),
        ("Exceeds maximum queue size", "StatusCode.UNAVAILABLE", False),
        ("Stream removed", "StatusCode.INTERNAL", False),
    ],
)
def test_only_a_dropped_connection_is_sent_again(message: str, status: str, dropped: bool) -> None:
    """A connection that went away is retried; Triton's own refusals (queue full, queue
    timeout, both UNAVAILABLE) are answered as they are."""
    assert connection_dropped(InferenceServerException(message, status=status)) is dropped


def test_chunks_cover_every_row_once_in_order() -> None:
    parts = chunks(70, 32)
    assert parts == [slice(0, 32), slice(32, 64), slice(64, 70)]
    assert chunks(32, 32) == [slice(0, 32)]


def test_model_info_reads_the_committed_ensemble() -> None:
    info = model_info(load_config(MODEL_REPOSITORY / "embed"))
    assert (info.input_name, info.output_name, info.dimensions, info.max_batch_size) == ("TEXT", "EMBEDDING", 384, 32)


def test_a_model_without_a_text_input_is_refused() -> None:
    with pytest.raises(ValueError, match="not a text embedding model"):
        model_info(load_config(MODEL_REPOSITORY / "encoder"))
    unbatched = model_config_pb2.ModelConfig()
    unbatched.CopyFrom(load_config(MODEL_REPOSITORY / "embed"))
    unbatched.max_batch_size = 0
    with pytest.raises(ValueError, match="max_batch_size 0"):
        model_info(unbatched)


def test_base64_rows_are_little_endian_float32_as_the_openai_client_decodes() -> None:
    vectors = np.array([[0.5, -1.25, 3.0]], dtype=np.float32)
    request = EmbeddingRequest(["x"], [b"x"], "embed", "base64")
    body = orjson.loads(render_response(request, vectors, 3))
    np.testing.assert_array_equal(np.frombuffer(base64.b64decode(body["data"][0]["embedding"]), dtype=np.float32), vectors[0])
    assert body["usage"] == {"prompt_tokens": 3, "total_tokens": 3}


def test_api_keys_come_from_a_private_file_or_the_environment(tmp_path) -> None:
    keys = tmp_path / "keys"
    keys.write_text("# gateway keys\nalpha\n\n beta \n")
    keys.chmod(0o600)
    assert read_keys_file(keys) == {"alpha", "beta"}
    keys.chmod(0o640)
    with pytest.raises(SettingsError, match="readable by others"):
        read_keys_file(keys)
    assert keys_from(None, {"GATEWAY_API_KEYS": "a, b,"}) == {"a", "b"}
    assert keys_from(None, {}) == frozenset()


@pytest.mark.parametrize(
    ("change", "message"),
    [({"max_inputs": 0}, "--max-inputs"), ({"request_timeout_s": 0}, "--timeout"), ({"port": 70000}, "--port")],
)
def test_unusable_settings_are_refused_with_the_flag_named(change: dict, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        GatewaySettings(**change).validate()


@pytest.mark.parametrize(("value", "param"), [("", "input"), (["ok", ""], "input[1]"), ([""], "input[0]")])
def test_an_empty_string_is_refused_as_openai_does(value, param: str) -> None:
    with pytest.raises(APIError) as refused:
        parse_request({"model": "embed", "input": value}, "embed", 2048)
    assert (refused.value.status, refused.value.param, refused.value.code) == (400, param, "invalid_value")
    assert refused.value.body()["error"]["type"] == "invalid_request_error"


class ChunksWithOneRefusal(TritonEmbedder):
    """Two chunks of two texts: the first is refused at once, the second answers later."""

    def __init__(self) -> None:
        super().__init__("127.0.0.1:1", "embed")
        self.second_chunk_ended = asyncio.Event()

    async def info(self) -> ModelInfo:
        return ModelInfo("embed", "TEXT", "EMBEDDING", 3, 2)

    async def _infer(self, info: ModelInfo, texts, priority: int, deadline: float) -> np.ndarray:
        if texts[0] == b"first":
            raise APIError(429, "Exceeds maximum queue size", "rate_limit_error", None, "queue_full")
        await asyncio.sleep(0.05)
        self.second_chunk_ended.set()
        return np.zeros((len(texts), 3), dtype=np.float32)


def test_a_refused_chunk_fails_the_call_at_once_and_leaves_the_other_chunks_uncancelled() -> None:
    """Cancelling an in-flight gRPC call races Triton 2.51's completion of it (a server crash):
    the other chunks end by themselves."""

    async def scenario() -> None:
        embedder = ChunksWithOneRefusal()
        with pytest.raises(APIError, match="Exceeds maximum queue size"):
            await embedder.embed([b"first", b"x", b"second", b"y"], priority=2, timeout_s=5.0)
        assert not embedder.second_chunk_ended.is_set(), "the call did not wait for the other chunk"
        await asyncio.wait_for(embedder.second_chunk_ended.wait(), 5.0)
        await embedder.close()

    asyncio.run(scenario())
