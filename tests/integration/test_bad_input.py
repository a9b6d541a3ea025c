"""Bad input gets a clear error (or a documented result) and the server keeps serving."""

from __future__ import annotations

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

from tools.embed import EmbeddingClient, client_module, text_input

pytestmark = pytest.mark.integration


def still_serving(client: EmbeddingClient) -> None:
    embedding = client.embed(["the next good request"])
    assert embedding.shape == (1, 384)


def test_unknown_model_is_named(client) -> None:
    with pytest.raises(InferenceServerException, match="no_such_model"):
        client.client.infer("no_such_model", [text_input(client.module, ["hi"])])
    still_serving(client)


def test_wrong_input_name_is_named(client) -> None:
    with pytest.raises(InferenceServerException, match="WRONG_NAME"):
        client.client.infer("embed", [text_input(client.module, ["hi"], name="WRONG_NAME")])
    still_serving(client)


def test_wrong_datatype_is_reported(client) -> None:
    module = client_module(client.protocol)
    tensor = module.InferInput("TEXT", [1, 1], "FP32")
    tensor.set_data_from_numpy(np.zeros((1, 1), dtype=np.float32))
    with pytest.raises(InferenceServerException, match=r"(?i)data.?type"):
        client.client.infer("embed", [tensor])
    still_serving(client)


def test_invalid_utf8_is_rejected_with_the_offending_byte(client) -> None:
    with pytest.raises(InferenceServerException, match=r"not valid UTF-8 \(byte 0xff at offset 3\)"):
        client.embed([b"abc\xff\xfe"])
    still_serving(client)


def test_invalid_utf8_fails_only_its_own_request_in_a_batch(client) -> None:
    module = client.module
    good, bad = text_input(module, ["fine text"]), text_input(module, [b"\xc3\x28"])
    results = []
    for tensor in (bad, good):
        try:
            results.append(client.client.infer("embed", [tensor]).as_numpy("EMBEDDING").shape)
        except InferenceServerException as exc:
            results.append(str(exc))
    assert "not valid UTF-8" in results[0]
    assert results[1] == (1, 384)


def test_empty_string_gets_the_same_embedding_as_sentence_transformers(client, reference_model) -> None:
    served = client.embed([""])
    expected = reference_model.encode([""], convert_to_numpy=True)
    assert float(served[0] @ expected[0]) >= 0.9999


def test_text_beyond_the_max_length_is_truncated_not_refused(client, reference_model) -> None:
    long_text = "word " * 50_000  # ~250k characters, ~50k tokens; the model reads the first 256
    served = client.embed([long_text])
    expected = reference_model.encode([long_text], convert_to_numpy=True)
    assert float(served[0] @ expected[0]) >= 0.9999
    still_serving(client)


def test_nul_bytes_are_text_like_any_other(client) -> None:
    assert client.embed(["before\x00after"]).shape == (1, 384)
