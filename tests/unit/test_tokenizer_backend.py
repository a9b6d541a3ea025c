"""The tokenizer step's execute() (model_repository/tokenizer/1/model.py) against a fake of
Triton's Python-backend module: one padded length per call, each request's own rows in
order, and a bad request failing alone; under the buckets and request policies each
request's own width, answered through the response senders narrowest first; every policy
tokenizes a call in one library call. The library's own padding is the reference."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tokenizers import Tokenizer

from tests.unit import fake_pb_utils as fake
from tools.paths import MODEL_REPOSITORY
from tools.repo.length_policy import set_tokenizer_policy
from tools.repo.model_config import load_config, to_override_json

MODEL_DIR = MODEL_REPOSITORY / "tokenizer"
TOKENIZER_JSON = MODEL_DIR / "1" / "tokenizer.json"
TEXTS = [
    "short",
    "",
    "A somewhat longer English sentence, to make the batch ragged before padding, about serving models.",
    "今天天气很好。",
    "word " * 400,  # beyond the model's 256 tokens: truncated
    "Triton joins requests into batches.",
]


def committed_config(**parameters: str) -> dict:
    """The committed tokenizer config as Triton hands it to initialize(), on the `batch`
    padding policy (whichever policy is committed) unless `padding` is given, with
    parameters changed."""
    config = load_config(MODEL_DIR)
    set_tokenizer_policy(config, "batch")
    for key, value in parameters.items():
        config.parameters[key].string_value = value
    return json.loads(to_override_json(config))


@pytest.fixture
def make_tokenizer(monkeypatch):
    if not TOKENIZER_JSON.is_file():
        pytest.skip(f"{TOKENIZER_JSON} is missing; `make export` writes it")
    module = fake.load_model(MODEL_DIR / "1" / "model.py", monkeypatch)

    def make(**parameters: str):
        model = module.TritonPythonModel()
        model.initialize(fake.initialize_args(committed_config(**parameters), MODEL_DIR))
        return model

    return make


def reference(texts: list[str], multiple: int) -> tuple[np.ndarray, np.ndarray]:
    """What the tokenizers library itself gives for these texts padded as one batch."""
    tokenizer = Tokenizer.from_file(str(TOKENIZER_JSON))
    padding = tokenizer.padding
    tokenizer.enable_padding(pad_id=padding["pad_id"], pad_token=padding["pad_token"], pad_to_multiple_of=multiple)
    encodings = tokenizer.encode_batch(texts)
    return np.array([e.ids for e in encodings], dtype=np.int64), np.array([e.attention_mask for e in encodings], dtype=np.int64)


def text_request(*texts: str | bytes) -> fake.Request:
    data = [t.encode() if isinstance(t, str) else t for t in texts]
    return fake.Request({"TEXT": np.array(data, dtype=np.object_).reshape(-1, 1)})


def split(texts: list[str], sizes: list[int]) -> list[list[str]]:
    groups, start = [], 0
    for size in sizes:
        groups.append(texts[start : start + size])
        start += size
    return groups


@pytest.mark.parametrize("texts", [TEXTS, [t for t in TEXTS if len(t) < 1000]], ids=["truncated", "short"])
@pytest.mark.parametrize("multiple", ["16", "8", "1"])
def test_every_row_of_one_call_is_padded_to_the_longest_rounded_up_to_the_multiple(make_tokenizer, multiple: str, texts) -> None:
    model = make_tokenizer(pad_to_multiple_of=multiple)
    groups = split(texts, [1, 3, len(texts) - 4])
    responses = model.execute([text_request(*group) for group in groups])
    widths = {response.output("INPUT_IDS").shape[1] for response in responses}
    assert len(widths) == 1, "one length for the whole call"
    (width,) = widths
    longest = max(int(reference([text], 1)[1].sum()) for text in texts)
    assert width % int(multiple) == 0 and width - int(multiple) < longest <= width
    ids, mask = reference(texts, int(multiple))
    np.testing.assert_array_equal(np.concatenate([r.output("INPUT_IDS") for r in responses]), ids)
    np.testing.assert_array_equal(np.concatenate([r.output("ATTENTION_MASK") for r in responses]), mask)


def test_each_request_gets_exactly_its_own_rows_in_order(make_tokenizer) -> None:
    model = make_tokenizer()
    sizes = [2, 1, 3]
    groups = split(TEXTS, sizes)
    responses = model.execute([text_request(*group) for group in groups])
    ids, mask = reference(TEXTS, 16)
    start = 0
    for response, size in zip(responses, sizes):
        assert [tensor.name() for tensor in response.output_tensors()] == ["INPUT_IDS", "ATTENTION_MASK"]
        np.testing.assert_array_equal(response.output("INPUT_IDS"), ids[start : start + size])
        np.testing.assert_array_equal(response.output("ATTENTION_MASK"), mask[start : start + size])
        assert response.output("INPUT_IDS").dtype == np.int64
        start += size


def test_the_padding_depends_only_on_the_call_not_on_how_texts_are_split_into_requests(make_tokenizer) -> None:
    model = make_tokenizer()
    alone = model.execute([text_request(*TEXTS)])[0]
    one_each = model.execute([text_request(text) for text in TEXTS])
    np.testing.assert_array_equal(np.concatenate([r.output("INPUT_IDS") for r in one_each]), alone.output("INPUT_IDS"))


def test_invalid_utf8_fails_only_its_own_request_with_invalid_arg_and_the_byte(make_tokenizer) -> None:
    model = make_tokenizer()
    requests = [text_request("fine", "also fine"), text_request("ok", b"ab\xffc"), text_request("Triton joins requests.")]
    first, bad, last = model.execute(requests)
    assert bad.has_error() and bad.error().code() == fake.TritonError.INVALID_ARG
    assert bad.error().message() == "TEXT[1] is not valid UTF-8 (byte 0xff at offset 2)"
    ids, _ = reference(["fine", "also fine", "Triton joins requests."], 16)
    np.testing.assert_array_equal(np.concatenate([first.output("INPUT_IDS"), last.output("INPUT_IDS")]), ids)


def test_a_call_of_only_bad_requests_answers_each_with_its_error(make_tokenizer) -> None:
    model = make_tokenizer()
    responses = model.execute([text_request(b"\xc3\x28"), text_request(b"\xff")])
    assert [r.error().code() for r in responses] == [fake.TritonError.INVALID_ARG] * 2
    assert all("not valid UTF-8" in r.error().message() for r in responses)


def test_a_text_is_cut_to_max_text_chars_before_tokenizing(make_tokenizer) -> None:
    model = make_tokenizer(max_text_chars="12")
    text = "abcdefgh ijk lmnop qrstuv"
    (response,) = model.execute([text_request(text)])
    np.testing.assert_array_equal(response.output("INPUT_IDS"), reference([text[:12]], 16)[0])


def test_a_missing_tokenizer_file_fails_the_load_naming_it(make_tokenizer) -> None:
    with pytest.raises(fake.TritonModelException, match=r"tokenizer file not found: .*absent\.json; run `make export`"):
        make_tokenizer(tokenizer_file="absent.json")


def reference_at(texts: list[str], width: int) -> tuple[np.ndarray, np.ndarray]:
    """The library's padding of these texts to a fixed width."""
    tokenizer = Tokenizer.from_file(str(TOKENIZER_JSON))
    padding = tokenizer.padding
    tokenizer.enable_padding(pad_id=padding["pad_id"], pad_token=padding["pad_token"], length=width)
    encodings = tokenizer.encode_batch(texts)
    return np.array([e.ids for e in encodings], dtype=np.int64), np.array([e.attention_mask for e in encodings], dtype=np.int64)


def token_count(text: str) -> int:
    return int(reference([text], 1)[1].sum())


def sent_in_order(requests: list[fake.Request]) -> list[tuple[int, fake.InferenceResponse]]:
    """(request position, response) in the order the responses left, each request answered once."""
    assert all(len(request.sent) == 1 for request in requests), "one final response per request"
    return [(position, sent[1]) for sent, position in sorted((request.sent[0], position) for position, request in enumerate(requests))]


@pytest.mark.parametrize("policy", ["buckets", "request"])
def test_bucket_and_request_padding_give_each_request_its_own_width_with_the_librarys_ids(make_tokenizer, policy: str) -> None:
    model = make_tokenizer(padding=policy)
    groups = [[TEXTS[2], TEXTS[0]], [TEXTS[0]], [TEXTS[4]], [TEXTS[3], TEXTS[5]]]
    requests = [text_request(*group) for group in groups]
    assert model.execute(requests) is None, "answered through the response senders"
    for group, request in zip(groups, requests):
        longest = max(token_count(text) for text in group)
        width = model.policy.widths([longest])[0]
        assert width == (longest if policy == "request" else next(b for b in (16, 32, 64, 128, 256) if longest <= b))
        ids, mask = reference_at(group, width)
        np.testing.assert_array_equal(request.response.output("INPUT_IDS"), ids)
        np.testing.assert_array_equal(request.response.output("ATTENTION_MASK"), mask)
        assert request.response.output("INPUT_IDS").flags["C_CONTIGUOUS"]


def test_buckets_send_responses_narrowest_first_and_a_bad_request_before_them(make_tokenizer) -> None:
    model = make_tokenizer(padding="buckets")
    requests = [text_request(TEXTS[4]), text_request(TEXTS[2]), text_request(b"\xff"), text_request(TEXTS[0])]
    model.execute(requests)
    order = sent_in_order(requests)
    assert [position for position, _ in order] == [2, 3, 1, 0]
    assert order[0][1].error().code() == fake.TritonError.INVALID_ARG
    assert [response.output("INPUT_IDS").shape[1] for _, response in order[1:]] == [16, 32, 256]


def test_bucket_boundaries_come_from_the_config(make_tokenizer) -> None:
    model = make_tokenizer(padding="buckets", length_buckets="8,24,256")
    texts = ["short", TEXTS[5], TEXTS[2], TEXTS[4]]
    requests = [text_request(text) for text in texts]
    model.execute(requests)
    widths = [request.response.output("INPUT_IDS").shape[1] for request in requests]
    assert widths == [next(b for b in (8, 24, 256) if token_count(text) <= b) for text in texts]
    assert widths[0] == 8 and widths[-1] == 256 and len(set(widths)) >= 2


@pytest.mark.parametrize("policy", ["batch", "buckets", "request"])
def test_every_policy_tokenizes_a_call_in_one_library_call(make_tokenizer, policy: str) -> None:
    """The lean hot path: one `encode_batch_fast` over every text of the execution, whatever the policy."""
    model = make_tokenizer(padding=policy)
    calls = []
    fast = model.encode

    def counted(texts):
        calls.append(len(texts))
        return fast(texts)

    model.encode = counted
    model.execute([text_request(*group) for group in split(TEXTS, [2, 1, 3])])
    assert calls == [len(TEXTS)]
    assert fast.__name__ == "encode_batch_fast"


def test_an_unknown_padding_policy_fails_the_load_naming_it(make_tokenizer) -> None:
    with pytest.raises(fake.TritonModelException, match="tokenizer config: padding 'fixed' is not one of batch, buckets, request"):
        make_tokenizer(padding="fixed")
