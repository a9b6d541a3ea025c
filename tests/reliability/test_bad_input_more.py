"""More bad input, at the ensemble and at each step, over HTTP and gRPC: each gets a clear
error naming the problem (or the documented result), and the next good request succeeds.
(tests/integration/test_bad_input.py covers names, datatypes, UTF-8, empty and long text.)"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import time
from collections.abc import Iterator

import numpy as np
import pytest
from tokenizers import Tokenizer
from tritonclient.utils import InferenceServerException

from tests.conftest import start_triton
from tools.embed import EmbeddingClient, client_module, text_input
from tools.load.requests import token_tensors
from tools.paths import MODEL_REPOSITORY
from tools.repo.model_config import load_config
from tools.serve.local_triton import ServerOptions
from tools.triton_client.stats import ModelStats

pytestmark = pytest.mark.integration


def still_serving(client: EmbeddingClient) -> None:
    assert client.embed([f"the next good request {time.time_ns()}"]).shape == (1, 384)


def texts_tensor(module, array: np.ndarray):
    tensor = module.InferInput("TEXT", list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    return tensor


def post(triton, path: str, body: bytes, headers: dict | None = None) -> tuple[int, str]:
    connection = http.client.HTTPConnection(*triton.http_url.split(":"), timeout=60)
    try:
        connection.request("POST", path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read().decode(errors="replace")
    finally:
        connection.close()


def infer_body(text: str = "hello", parameters: dict | None = None) -> bytes:
    document = {"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [text]}]}
    if parameters is not None:
        document["parameters"] = parameters
    return json.dumps(document).encode()


@pytest.mark.parametrize("model", ["embed", "tokenizer"])
@pytest.mark.parametrize("shape", [(1,), (1, 1, 1), (1, 2)])
def test_wrong_shape_or_rank_names_the_expected_shape(client, model: str, shape: tuple) -> None:
    array = np.full(shape, b"text", dtype=np.object_)
    with pytest.raises(InferenceServerException, match=r"unexpected shape for input 'TEXT'.*Expected \[-1,1\]"):
        client.client.infer(model, [texts_tensor(client.module, array)])
    still_serving(client)


def test_wrong_rank_at_the_encoder_is_named(client) -> None:
    with pytest.raises(InferenceServerException, match=r"unexpected shape for input '(INPUT_IDS|ATTENTION_MASK)' for model 'encoder'"):
        client.client.infer("encoder", token_tensors(client.module, [101, 102]))
    still_serving(client)


@pytest.mark.parametrize("model", ["embed", "tokenizer"])
def test_batch_above_max_batch_size_is_refused_with_the_limit(client, model: str) -> None:
    array = np.full((33, 1), b"text", dtype=np.object_)
    with pytest.raises(InferenceServerException, match=rf"batch-size must be <= 32 for '{model}'"):
        client.client.infer(model, [texts_tensor(client.module, array)])
    still_serving(client)


def test_whitespace_only_is_embedded_like_the_empty_text(client) -> None:
    blank, empty = client.embed([" \t\n  "]), client.embed([""])
    assert abs(float(np.linalg.norm(blank[0])) - 1.0) < 1e-4
    assert float(blank[0] @ empty[0]) > 0.9999, "whitespace tokenizes to nothing, like the empty string"


def test_a_huge_text_is_cut_before_tokenizing_so_it_returns_quickly(client) -> None:
    """Quickly means: faster than tokenizing the whole text alone takes on this machine,
    which the server would have to do (and more) if it did not cut the text first."""
    text = "word " * (4 * 1024 * 1024 // 5)  # a 4 MiB request body; the model reads 256 tokens
    text += str(time.time_ns())  # beyond the cut, but a new cache key: the response cache must not answer
    started = time.perf_counter()
    served = client.embed([text])
    served_s = time.perf_counter() - started
    tokenizer = Tokenizer.from_file(str(MODEL_REPOSITORY / "tokenizer" / "1" / "tokenizer.json"))
    started = time.perf_counter()
    tokenizer.encode(text)  # truncates to 256 tokens only after tokenizing everything
    whole_s = time.perf_counter() - started
    assert served_s < whole_s, f"served in {served_s:.2f} s; tokenizing the whole text takes {whole_s:.2f} s"
    assert float(served[0] @ client.embed(["word " * 2000])[0]) > 0.9999
    still_serving(client)


def test_unknown_version_is_named(client) -> None:
    with pytest.raises(InferenceServerException, match=r"'embed' version 7 is not found"):
        client.client.infer("embed", [text_input(client.module, ["hi"])], model_version="7")
    still_serving(client)


@pytest.mark.parametrize("priority", [3, 1000])
def test_priority_beyond_the_levels_runs_at_the_default_level(client, priority: int) -> None:
    assert client.embed([f"priority {priority} {time.time_ns()}"], priority=priority).shape == (1, 384)


def test_out_of_range_token_id_fails_with_400_naming_the_input_and_value(client) -> None:
    for bad in (999_999, -5):
        with pytest.raises(InferenceServerException, match=rf"INPUT_IDS holds {bad}, outside .* range 0\.\.30521") as error:
            client.client.infer("encoder", token_tensors(client.module, [[101, bad, 102]]))
        if client.protocol == "http":
            assert error.value.status() == "400"
    still_serving(client)


def test_a_sequence_longer_than_the_position_table_is_a_400_naming_the_limit(client) -> None:
    for length in (513, 100_000):
        ids = [[101] + [2000] * (length - 2) + [102]]
        message = rf"INPUT_IDS holds {length} tokens, more than the model's 512 positions"
        with pytest.raises(InferenceServerException, match=message) as error:
            client.client.infer("encoder", token_tensors(client.module, ids))
        if client.protocol == "http":
            assert error.value.status() == "400"
    assert client.client.infer("encoder", token_tensors(client.module, [[2000] * 512])).as_numpy("EMBEDDING").shape == (1, 384)
    still_serving(client)


PROBES = 4


@pytest.fixture(scope="module")
def joining_encoder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerOptions]:
    """The committed encoder on its own server, with one instance whose batcher holds requests
    until PROBES are queued (a preferred size, up to a 10 s delay): concurrent probes share an
    execution on any machine, with no race against other traffic."""
    server = start_triton(tmp_path_factory.mktemp("joining") / "triton.log", model_control_mode="explicit", load_models=("encoder",))
    try:
        encoder = load_config(MODEL_REPOSITORY / "encoder")
        del encoder.instance_group[1:]
        encoder.instance_group[0].count = 1
        del encoder.dynamic_batching.preferred_batch_size[:]
        encoder.dynamic_batching.preferred_batch_size.append(PROBES)
        encoder.dynamic_batching.max_queue_delay_microseconds = 10_000_000
        server.client.load("encoder", encoder)
        yield server.options
    finally:
        server.stop()


def run_as_one_batch(options: ServerOptions, probes: list[np.ndarray]) -> list:
    """Send `probes` (one-row token arrays) to the joining encoder together; each probe's
    embedding or error, once Triton's statistics confirm that they ran as one execution."""
    assert len(probes) == PROBES
    module = client_module("grpc")

    def send(ids: np.ndarray):
        client = module.InferenceServerClient(options.grpc_url)
        try:
            return client.infer("encoder", token_tensors(module, ids)).as_numpy("EMBEDDING")
        except InferenceServerException as exc:
            return str(exc)
        finally:
            client.close()

    before = ModelStats.settled(options.http_url, "encoder")
    with concurrent.futures.ThreadPoolExecutor(len(probes)) as pool:
        results = list(pool.map(send, probes))
    delta = ModelStats.settled(options.http_url, "encoder") - before
    assert delta.batch_executions == {PROBES: 1}, f"the probes did not run as one batch: {delta.batch_executions}"
    return results


def test_a_bad_request_in_a_batch_does_not_fail_its_batch_mates(joining_encoder: ServerOptions, triton: ServerOptions) -> None:
    """An out-of-vocabulary id in one request of an executed batch (confirmed by the
    server's batch statistics): it alone fails, with a 400 naming the value; its batch mates
    get the embeddings they get alone (from the session's server)."""
    rng = np.random.default_rng(0)
    probes = [rng.integers(1000, 30_000, size=(1, 200)) for _ in range(PROBES)]
    bad = 3
    probes[bad][0, 100] = 999_999
    results = run_as_one_batch(joining_encoder, probes)
    assert "INPUT_IDS holds 999999, outside the embedding table's range" in results[bad], results[bad]
    alone = EmbeddingClient("grpc", triton.grpc_url)
    try:
        for index in (index for index in range(len(probes)) if index != bad):
            expected = alone.client.infer("encoder", token_tensors(alone.module, probes[index])).as_numpy("EMBEDDING")
            np.testing.assert_allclose(results[index], expected, atol=1e-4)
    finally:
        alone.close()


def test_invalid_utf8_at_the_tokenizer_is_a_400(triton) -> None:
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": 7}}]})
    payload = body.encode() + (3).to_bytes(4, "little") + b"a\xffb"
    status, text = post(triton, "/v2/models/tokenizer/infer", payload, {"Inference-Header-Content-Length": str(len(body))})
    assert (status, "not valid UTF-8 (byte 0xff at offset 1)" in text) == (400, True), text


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"inputs": [ {"name"', "failed to parse the request JSON buffer"),
        (json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [5]}]}).encode(), "non-string"),
        (infer_body(parameters={"priority": -1}), "Unable to parse 'priority'"),
        (infer_body(parameters={"timeout": -5}), "Unable to parse 'timeout'"),
    ],
    ids=["truncated-json", "number-for-text", "negative-priority", "negative-timeout"],
)
def test_unparsable_http_requests_are_refused_with_the_reason(triton, body: bytes, message: str) -> None:
    status, text = post(triton, "/v2/models/embed/infer", body)
    assert status in (400, 500) and message in text, (status, text)
    assert post(triton, "/v2/models/embed/infer", infer_body(f"good {time.time_ns()}"))[0] == 200


@pytest.mark.parametrize(
    ("declared", "tail", "header", "message"),
    [
        (100, (5).to_bytes(4, "little") + b"hello", None, "unexpected size for input 'TEXT'"),
        (9, (255).to_bytes(4, "little") + b"hello", None, "incomplete string data for inference input 'TEXT'"),
        (9, b"", "99999", "inference header size should be in range"),
    ],
    ids=["fewer-bytes-than-declared", "string-length-beyond-data", "header-length-beyond-body"],
)
def test_binary_tensor_framing_errors_are_400s_naming_the_problem(triton, declared: int, tail: bytes, header, message: str) -> None:
    body = json.dumps({"inputs": [{"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "parameters": {"binary_data_size": declared}}]})
    status, text = post(
        triton, "/v2/models/embed/infer", body.encode() + tail, {"Inference-Header-Content-Length": header or str(len(body))}
    )
    assert status == 400 and message in text, (status, text)
    assert post(triton, "/v2/models/embed/infer", infer_body(f"good {time.time_ns()}"))[0] == 200


def test_a_timeout_beyond_int64_is_refused_by_the_grpc_client_and_ignored_over_http(triton) -> None:
    grpc = EmbeddingClient("grpc", triton.grpc_url)
    try:
        with pytest.raises(ValueError, match="out of range"):
            grpc.embed(["hi"], timeout_us=2**63)
    finally:
        grpc.close()
    status, _ = post(triton, "/v2/models/embed/infer", infer_body(f"t {time.time_ns()}", {"timeout": 2**63}))
    assert status == 200, "an enormous timeout means no timeout"
