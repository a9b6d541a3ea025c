"""The local ONNX Runtime backend's execute() (backends/onnxruntime/model.py) against a
fake of Triton's Python-backend module.

The behaviour is checked on a tiny ONNX graph built here with the encoder's structure
(word and position embedding tables, masked sum), not on the exported MiniLM: its outputs
are computed exactly in numpy, so row splitting and padding (the ragged split's sub-runs
too) are checked value by value, and a variant of it reaches the run-time failure path
that the exported model's up-front checks no longer let through. The exported model is used where only it can answer: that
the limits the backend derives from a real export are the right ones."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper, save

from tests.unit import fake_pb_utils as fake
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.length_policy import policy_configs, set_encoder_policy
from tools.repo.model_config import load_config, to_override_json

BACKEND = REPO_ROOT / "backends" / "onnxruntime" / "model.py"
VOCABULARY, POSITIONS, WIDTH = 50, 12, 4
rng = np.random.default_rng(0)
WORDS = rng.normal(size=(VOCABULARY, WIDTH)).astype(np.float32)
PLACES = rng.normal(size=(POSITIONS, WIDTH)).astype(np.float32)


def tiny_encoder(checked_lookup: bool = True):
    """EMBEDDING[b] = sum_s mask[b, s] * (WORDS[ids[b, s]] + PLACES[s]). With
    `checked_lookup=False` the ids pass an Identity before the lookup, so the backend cannot
    see that they index a table and an out-of-range id fails inside ONNX Runtime instead."""
    ids = "INPUT_IDS" if checked_lookup else "ids_copy"
    nodes = [] if checked_lookup else [helper.make_node("Identity", ["INPUT_IDS"], ["ids_copy"])]
    nodes += [
        helper.make_node("Gather", ["words", ids], ["word_vectors"]),
        helper.make_node("Shape", ["INPUT_IDS"], ["shape"]),
        helper.make_node("Gather", ["shape", "one"], ["length"]),
        helper.make_node("Unsqueeze", ["length", "zero_axis"], ["end"]),
        helper.make_node("Slice", ["position_ids", "start", "end", "one_axis"], ["positions"]),
        helper.make_node("Gather", ["places", "positions"], ["place_vectors"]),
        helper.make_node("Add", ["word_vectors", "place_vectors"], ["vectors"]),
        helper.make_node("Cast", ["ATTENTION_MASK"], ["mask_float"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", ["mask_float", "two_axis"], ["mask"]),
        helper.make_node("Mul", ["vectors", "mask"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "one_axis"], ["EMBEDDING"], keepdims=0),
    ]
    initializers = [
        numpy_helper.from_array(WORDS, "words"),
        numpy_helper.from_array(PLACES, "places"),
        numpy_helper.from_array(np.arange(POSITIONS, dtype=np.int64)[None, :], "position_ids"),
        numpy_helper.from_array(np.array(1, dtype=np.int64), "one"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "start"),
        numpy_helper.from_array(np.array([0], dtype=np.int64), "zero_axis"),
        numpy_helper.from_array(np.array([1], dtype=np.int64), "one_axis"),
        numpy_helper.from_array(np.array([2], dtype=np.int64), "two_axis"),
    ]
    inputs = [helper.make_tensor_value_info(name, TensorProto.INT64, ["batch", "sequence"]) for name in ("INPUT_IDS", "ATTENTION_MASK")]
    output = helper.make_tensor_value_info("EMBEDDING", TensorProto.FLOAT, ["batch", WIDTH])
    graph = helper.make_graph(nodes, "tiny_encoder", inputs, [output], initializers)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def expected(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
    positions = PLACES[: ids.shape[1]][None, :, :]
    return ((WORDS[ids] + positions) * mask[:, :, None]).sum(axis=1)


def encoder_config(**parameters: str) -> dict:
    """The committed encoder config (as Triton hands it to initialize()) on the `batch`
    padding policy (the ragged path has tests of its own), with the tiny graph's output
    width; parameters given here replace the committed ones."""
    config = load_config(MODEL_REPOSITORY / "encoder")
    set_encoder_policy(config, "batch")
    del config.output[0].dims[:]
    config.output[0].dims.append(WIDTH)
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return json.loads(to_override_json(config))


@pytest.fixture
def backend(monkeypatch):
    return fake.load_model(BACKEND, monkeypatch)


@pytest.fixture
def make_encoder(backend, tmp_path):
    def make(checked_lookup: bool = True, config: dict | None = None):
        version = tmp_path / ("checked" if checked_lookup else "unchecked") / "1"
        version.mkdir(parents=True, exist_ok=True)
        save(tiny_encoder(checked_lookup), str(version / "model.onnx"))
        model = backend.TritonPythonModel()
        model.initialize(fake.initialize_args(config or encoder_config(), version.parent))
        return model

    return make


def token_request(ids, mask=None) -> fake.Request:
    ids = np.asarray(ids, dtype=np.int64)
    mask = np.ones_like(ids) if mask is None else np.asarray(mask, dtype=np.int64)
    return fake.Request({"INPUT_IDS": ids, "ATTENTION_MASK": mask})


def test_each_request_gets_exactly_its_rows_in_order_even_from_a_ragged_batch(make_encoder) -> None:
    model = make_encoder()
    batches = [rng.integers(0, VOCABULARY, size=(rows, length)) for rows, length in [(2, 5), (1, 12), (3, 3), (1, 1)]]
    masks = [np.ones_like(ids) for ids in batches]
    masks[0][1, 3:] = 0  # a request that carries its own padding
    responses = model.execute([token_request(ids, mask) for ids, mask in zip(batches, masks)])
    for response, ids, mask in zip(responses, batches, masks):
        assert not response.has_error()
        assert response.output("EMBEDDING").shape == (len(ids), WIDTH)
        np.testing.assert_allclose(response.output("EMBEDDING"), expected(ids, mask), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("bad", [VOCABULARY, -1])
def test_an_out_of_vocabulary_id_fails_only_its_own_request_with_invalid_arg(make_encoder, bad: int) -> None:
    model = make_encoder()
    good = rng.integers(0, VOCABULARY, size=(2, 4))
    first, broken, last = model.execute([token_request(good), token_request([[1, bad, 2, 3]]), token_request(good[:1])])
    assert broken.error().code() == fake.TritonError.INVALID_ARG
    assert broken.error().message() == f"INPUT_IDS holds {bad}, outside the embedding table's range 0..{VOCABULARY - 1}"
    np.testing.assert_allclose(first.output("EMBEDDING"), expected(good, np.ones_like(good)), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(last.output("EMBEDDING"), expected(good[:1], np.ones_like(good[:1])), rtol=1e-5, atol=1e-5)


def test_a_sequence_longer_than_the_position_table_fails_alone_naming_the_limit(make_encoder) -> None:
    model = make_encoder()
    longest = rng.integers(0, VOCABULARY, size=(1, POSITIONS))
    too_long = rng.integers(0, VOCABULARY, size=(1, POSITIONS + 1))
    fits, refused = model.execute([token_request(longest), token_request(too_long)])
    assert refused.error().code() == fake.TritonError.INVALID_ARG
    assert refused.error().message() == (
        f"INPUT_IDS holds {POSITIONS + 1} tokens, more than the model's {POSITIONS} positions (its maximum sequence length)"
    )
    np.testing.assert_allclose(fits.output("EMBEDDING"), expected(longest, np.ones_like(longest)), rtol=1e-5, atol=1e-5)


def test_a_failure_inside_onnx_runtime_is_traced_to_its_request_and_the_others_still_run(make_encoder) -> None:
    model = make_encoder(checked_lookup=False)
    assert model.bounds == {}, "the Identity hides the lookup: only the run can fail"
    good = rng.integers(0, VOCABULARY, size=(2, 3))
    first, broken, last = model.execute([token_request(good), token_request([[1, VOCABULARY + 5, 2]]), token_request(good)])
    assert broken.error().code() == fake.TritonError.INVALID_ARG, "ONNX Runtime reports INVALID_ARGUMENT for the index"
    assert broken.error().message().startswith("ONNX Runtime failed:") and "out of" in broken.error().message()
    for response in (first, last):
        np.testing.assert_allclose(response.output("EMBEDDING"), expected(good, np.ones_like(good)), rtol=1e-5, atol=1e-5)


def test_thread_counts_are_read_from_the_config_as_the_native_backend_reads_them(backend) -> None:
    options = backend._session_options(encoder_config(intra_op_thread_count="3", inter_op_thread_count="2"))
    assert (options.intra_op_num_threads, options.inter_op_num_threads) == (3, 2)
    unset = load_config(MODEL_REPOSITORY / "encoder")
    unset.ClearField("parameters")
    options = backend._session_options(json.loads(to_override_json(unset)))
    assert options.intra_op_num_threads == 0, "unset: ONNX Runtime's default (every core), as in NVIDIA's container"
    for bad in ("-1", "two"):
        with pytest.raises(fake.TritonModelException, match=rf"intra_op_thread_count must be a whole number >= 0.*{bad}"):
            backend._session_options(encoder_config(intra_op_thread_count=bad))


def test_the_committed_config_states_its_thread_count(backend) -> None:
    config = encoder_config()
    assert config["parameters"]["intra_op_thread_count"]["string_value"].isdigit()
    assert backend._session_options(config).intra_op_num_threads >= 1


def test_a_config_input_the_model_lacks_fails_the_load_naming_it(make_encoder) -> None:
    config = encoder_config()
    config["input"][1]["name"] = "TOKEN_TYPE_IDS"
    with pytest.raises(fake.TritonModelException, match=r"config inputs \['TOKEN_TYPE_IDS'\] are not inputs of model\.onnx"):
        make_encoder(config=config)


def test_the_exported_encoder_yields_its_vocabulary_and_position_limits(backend) -> None:
    path = MODEL_REPOSITORY / "encoder" / "1" / "model.onnx"
    if not path.is_file():
        pytest.skip(f"{path} is missing; `make export` writes it")
    bounds, positions = backend._inspect(path)
    assert bounds == {"INPUT_IDS": 30522}
    assert positions == ("INPUT_IDS", 1, 512)


# Ragged split (the `ragged` padding policy): 10 us per run and 1 us per token, pinned, so the
# plan is known in advance: rows of 2-3 tokens and rows of 10-12 tokens go to separate runs.
PINNED_SPLIT = {"split_cost_per_run_us": "10", "split_cost_per_token_us": "1"}


def ragged_config(pinned: bool = True, **parameters: str) -> dict:
    """The encoder config the ragged policy writes (tools.repo.length_policy), with the tiny graph's width."""
    _, config = policy_configs(MODEL_REPOSITORY, "ragged")
    del config.output[0].dims[:]
    config.output[0].dims.append(WIDTH)
    for key, value in {**(PINNED_SPLIT if pinned else {}), **parameters}.items():
        config.parameters[key].string_value = value
    return json.loads(to_override_json(config))


@pytest.fixture
def make_ragged_encoder(monkeypatch, tmp_path):
    backend = fake.load_model(BACKEND, monkeypatch, metrics=True)

    def make(checked_lookup: bool = True, pinned: bool = True, **parameters: str):
        version = tmp_path / ("checked" if checked_lookup else "unchecked") / "1"
        version.mkdir(parents=True, exist_ok=True)
        save(tiny_encoder(checked_lookup), str(version / "model.onnx"))
        model = backend.TritonPythonModel()
        model.initialize(fake.initialize_args(ragged_config(pinned, **parameters), version.parent))
        return model

    return make


def padded(lengths: list[int], width: int) -> tuple[np.ndarray, np.ndarray]:
    """Random ids right-padded to `width` (pad id 0) with the mask of each row's real length."""
    ids = np.zeros((len(lengths), width), dtype=np.int64)
    mask = np.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, :length] = rng.integers(1, VOCABULARY, size=length)
        mask[row, :length] = 1
    return ids, mask


def answered(requests: list[fake.Request]) -> list[int]:
    """Request positions in the order their (single, final) responses left."""
    assert all(len(request.sent) == 1 for request in requests), "one final response per request"
    return [position for _, position in sorted((request.sent[0][0], position) for position, request in enumerate(requests))]


def test_a_ragged_execution_answers_every_request_exactly_with_short_requests_first(make_ragged_encoder) -> None:
    model = make_ragged_encoder()
    inputs = [padded([11, 12], 12), padded([2], 2), padded([10, 3], 10), padded([3, 2], 3)]
    requests = [token_request(ids, mask) for ids, mask in inputs]
    assert model.execute(requests) is None, "answered through the response senders"
    for request, (ids, mask) in zip(requests, inputs):
        np.testing.assert_allclose(request.response.output("EMBEDDING"), expected(ids, mask), rtol=1e-5, atol=1e-5)
    order = answered(requests)
    assert set(order[:2]) == {1, 3}, "the requests of short rows only leave with the first run"
    assert set(order[2:]) == {0, 2}, "a request with one long row waits for the long run"
    families = fake.MetricFamily.families
    real = sum(int(mask.sum()) for _, mask in inputs)
    assert families["ort_tokens_real_total"].metrics[0].value() == real
    # runs: [2, 2, 3, 3] at width 3 (2 padding tokens), [10, 11, 12] at width 12 (3 padding tokens)
    assert families["ort_tokens_padding_total"].metrics[0].value() == 5
    assert families["ort_session_runs_total"].metrics[0].value() == 2
    assert families["ort_ragged_executions_total"].metrics[0].value() == 1


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (token_request([[1, VOCABULARY, 2]]), f"INPUT_IDS holds {VOCABULARY}, outside the embedding table's range 0..{VOCABULARY - 1}"),
        (
            token_request(rng.integers(0, VOCABULARY, size=(1, POSITIONS + 1))),
            f"INPUT_IDS holds {POSITIONS + 1} tokens, more than the model's {POSITIONS} positions (its maximum sequence length)",
        ),
    ],
    ids=["vocabulary", "positions"],
)
def test_the_vocabulary_and_position_checks_refuse_a_request_on_the_ragged_path_too(make_ragged_encoder, bad, message: str) -> None:
    model = make_ragged_encoder()
    inputs = [padded([3], 3), padded([9, 4], 9)]
    requests = [token_request(*inputs[0]), bad, token_request(*inputs[1])]
    model.execute(requests)
    assert answered(requests)[0] == 1, "refused before anything runs"
    assert bad.response.error().code() == fake.TritonError.INVALID_ARG
    assert bad.response.error().message() == message
    for request, (ids, mask) in zip((requests[0], requests[2]), inputs):
        np.testing.assert_allclose(request.response.output("EMBEDDING"), expected(ids, mask), rtol=1e-5, atol=1e-5)


def test_a_failure_inside_onnx_runtime_on_the_ragged_path_fails_only_its_request(make_ragged_encoder) -> None:
    model = make_ragged_encoder(checked_lookup=False)
    good = [padded([2], 2), padded([3, 2], 3)]
    broken = token_request([[1, VOCABULARY + 5, 2]])
    requests = [token_request(*good[0]), broken, token_request(*good[1])]
    model.execute(requests)
    assert broken.response.error().code() == fake.TritonError.INVALID_ARG
    assert broken.response.error().message().startswith("ONNX Runtime failed:")
    for request, (ids, mask) in zip((requests[0], requests[2]), good):
        np.testing.assert_allclose(request.response.output("EMBEDDING"), expected(ids, mask), rtol=1e-5, atol=1e-5)


def test_without_pinned_terms_the_cost_curve_is_calibrated_within_the_position_table_at_load(make_ragged_encoder) -> None:
    model = make_ragged_encoder(pinned=False)
    assert model.split_cost.adaptive, "a calibrated curve is refitted from served runs"
    (line,) = [line for level, line in fake.Logger.lines if level == "info" and "calibrated on" in line]
    assert f"1x{POSITIONS}:" in line and "1x16:" not in line, "no calibration run is longer than the model's positions"
