"""Random strings and bytes at the tokenizer and the ensemble: every answer is a unit-length
embedding (or well-formed token ids), or a clean error naming invalid UTF-8."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tritonclient.utils import InferenceServerException

from tools.embed import EmbeddingClient, text_input
from tools.paths import MODEL_REPOSITORY
from tools.repo.model_config import load_config

pytestmark = pytest.mark.integration

TEXTS = st.one_of(
    st.text(max_size=300), st.binary(max_size=300), st.text(alphabet=st.characters(codec="utf-8"), max_size=50).map(str.encode)
)


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@pytest.fixture(scope="module")
def grpc_client(triton):
    client = EmbeddingClient("grpc", triton.grpc_url)
    yield client
    client.close()


TOKENIZER_PADDING = load_config(MODEL_REPOSITORY / "tokenizer").parameters["padding"].string_value


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(TEXTS, min_size=1, max_size=4))
def test_random_texts_give_a_normalised_embedding_or_a_clean_utf8_error(grpc_client, texts: list) -> None:
    data = [t if isinstance(t, bytes) else t.encode("utf-8", "surrogatepass") for t in texts]
    try:
        embeddings = grpc_client.embed(data)
    except InferenceServerException as exc:
        assert not all(is_utf8(d) for d in data), exc
        assert "is not valid UTF-8" in str(exc)
        return
    assert all(is_utf8(d) for d in data)
    assert embeddings.shape == (len(data), 384)
    assert np.allclose(np.linalg.norm(embeddings, axis=1), 1.0, atol=1e-3)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=TEXTS)
def test_random_input_at_the_tokenizer_gives_bounded_ids_or_a_clean_error(grpc_client, text) -> None:
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    try:
        result = grpc_client.client.infer("tokenizer", [text_input(grpc_client.module, [data])])
    except InferenceServerException as exc:
        assert not is_utf8(data) and "is not valid UTF-8" in str(exc), exc
        return
    ids, mask = result.as_numpy("INPUT_IDS"), result.as_numpy("ATTENTION_MASK")
    assert ids.shape == mask.shape and ids.shape[1] <= 256
    if TOKENIZER_PADDING == "request":  # the ragged policy: a lone text at its own length
        assert mask.all()
    else:  # batch or buckets: widths on the multiple / bucket grid
        assert ids.shape[1] % 16 == 0
    assert ids.min() >= 0 and ids.max() < 30522 and set(np.unique(mask)) <= {0, 1}
