"""What each request carries, decided by the served model's config (`get_model_config`):
a TYPE_STRING input means texts, INT64 inputs mean token ids. No guessing from names.

Texts are made unique per request (a counter suffix) unless a repeat share is asked
for, so the response cache does not answer measurement traffic by accident.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tools.contract import EMBEDDING_OUTPUT as OUTPUT_NAME
from tools.contract import TEXT_INPUT
from tools.contract import TOKEN_INPUTS as INPUT_NAMES
from tools.load.mixed_texts import DEFAULT_TOKENIZER, LengthMix, MixedText, MixedTexts

SAMPLE_TEXTS = (
    "How do I raise inference throughput without breaking the latency budget?",
    "Dynamic batching joins requests that arrive close together into one execution.",
    "今天天气很好，我们去公园散步吧。",
    "The queue delay bounds how long a request waits for others to join its batch.",
    "A short query",
    "机器学习模型的推理服务需要低延迟和高吞吐量，动态批处理可以帮助实现这一目标。",
    "Priority levels let interactive traffic overtake bulk traffic in the queue of the model.",
    "Where is the nearest train station?",
)
TEXTS, TOKEN_IDS = "texts", "token ids"


@dataclass
class Target:
    """A model plus the factory of its request inputs for one protocol module."""

    model: str
    outputs: tuple[str, ...]
    make_inputs: Callable[[object, int], list]
    describe: str = ""
    inputs: tuple[str, ...] = ()  # input names the requests carry
    rows_per_request: int = 1
    extra: dict = field(default_factory=dict)
    # Request index -> (length class, tokens), for results per class and useful tokens/s;
    # read once per request, after make_inputs for the same index.
    request_class: Callable[[int], tuple[str, int]] | None = None
    priority: int | None = None  # every request of this target at this level (None: the mix decides)
    timeout_us: int | None = None  # and with this queue timeout (None: the mix decides)


def bytes_tensor(module, array: np.ndarray, name: str = TEXT_INPUT):
    tensor = module.InferInput(name, list(array.shape), "BYTES")
    tensor.set_data_from_numpy(array)
    return tensor


def embed_target(
    texts_per_request: int = 1, repeat_share: float = 0.0, model: str = "embed", seed: int = 0, text_input: str = TEXT_INPUT
) -> Target:
    rng = np.random.default_rng(seed)
    counter = itertools.count()
    nonce = secrets.token_hex(4)  # distinct across runs too: earlier runs' texts sit in the cache

    def make_inputs(module, index: int) -> list:
        rows = []
        for _ in range(texts_per_request):
            base = SAMPLE_TEXTS[index % len(SAMPLE_TEXTS)]
            unique = rng.random() >= repeat_share
            rows.append([f"{base} #{nonce}-{next(counter)}".encode() if unique else base.encode()])
        return [bytes_tensor(module, np.array(rows, dtype=np.object_), text_input)]

    describe = f"{model}: {texts_per_request} mixed text(s)/request"
    return Target(model, (OUTPUT_NAME,), make_inputs, describe, (text_input,), texts_per_request)


def token_tensors(module, ids, mask=None, names: tuple[str, str] = INPUT_NAMES) -> list:
    """The encoder's token ids and attention mask (INT64); the mask defaults to all ones."""
    ids = np.asarray(ids, dtype=np.int64)
    mask = np.ones_like(ids) if mask is None else np.asarray(mask, dtype=np.int64)
    tensors = []
    for name, array in zip(names, (ids, mask)):
        tensor = module.InferInput(name, list(array.shape), "INT64")
        tensor.set_data_from_numpy(array)
        tensors.append(tensor)
    return tensors


def encoder_target(sequence_length: int = 128, model: str = "encoder", seed: int = 0, vocabulary: int = 30_000) -> Target:
    """Full-length token ids (no padding) so every request costs the same compute."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1000, vocabulary, size=(1, sequence_length), dtype=np.int64)
    mask = np.ones_like(ids)

    def make_inputs(module, index: int) -> list:
        return token_tensors(module, ids, mask)

    describe = f"{model}: 1 x {sequence_length} tokens/request"
    return Target(model, (OUTPUT_NAME,), make_inputs, describe, INPUT_NAMES, 1, {"sequence_length": sequence_length})


def mixed_target(mix: LengthMix | None = None, model: str = "embed", seed: int = 0, tokenizer_path: Path = DEFAULT_TOKENIZER) -> Target:
    """One text per request from the mixed-length workload (tools/load/mixed_texts.py).

    Texts are numbered across every run that uses this target (the engine's request index
    restarts at 0 per run), so a later load level or policy never resends a text the
    response cache already holds."""
    texts = MixedTexts(mix or LengthMix(), tokenizer_path, seed)
    serials = itertools.count()
    issued: dict[int, MixedText] = {}  # engine index -> its text, until the engine reads its class

    def make_inputs(module, index: int) -> list:
        issued[index] = text = texts.request(next(serials))
        return [bytes_tensor(module, np.array([[text.text.encode()]], dtype=np.object_))]

    def request_class(index: int) -> tuple[str, int]:
        text = issued.pop(index)
        return text.length_class, text.tokens

    describe = f"{model}: mixed lengths ({texts.mix.describe()})"
    return Target(model, (OUTPUT_NAME,), make_inputs, describe, (TEXT_INPUT,), 1, {}, request_class)


@dataclass(frozen=True)
class RequestSettings:
    """How to fill a model's requests: tokens per request (token ids), texts per request and
    which texts (texts: short samples, or a mixed-length workload when `length_mix` is set)."""

    seq_len: int = 128
    texts_per_request: int = 1
    length_mix: LengthMix | None = None

    def __post_init__(self) -> None:
        if self.seq_len < 1:
            raise ValueError(f"--seq-len must be at least 1 token, got {self.seq_len}")
        if self.texts_per_request < 1:
            raise ValueError(f"--texts-per-request must be at least 1, got {self.texts_per_request}")
        if self.length_mix is not None and self.texts_per_request != 1:
            raise ValueError(f"--texts mixed sends one text per request, got --texts-per-request {self.texts_per_request}")


def _as_dict(model_config) -> dict:
    """The HTTP client's JSON config as is; a ModelConfig protobuf (gRPC, config.pbtxt) converted."""
    if isinstance(model_config, dict):
        return model_config.get("config", model_config)
    from google.protobuf import json_format

    config = getattr(model_config, "config", model_config) if not hasattr(model_config, "input") else model_config
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def input_kind(model_config) -> str:
    """TEXTS when the model takes a TYPE_STRING input, TOKEN_IDS when it takes INT64 inputs."""
    config = _as_dict(model_config)
    types = {tensor["name"]: tensor.get("data_type", "") for tensor in config.get("input", [])}
    if any(kind == "TYPE_STRING" for kind in types.values()):
        return TEXTS
    if types and all(kind == "TYPE_INT64" for kind in types.values()):
        return TOKEN_IDS
    raise ValueError(f"model {config.get('name', '?')!r} takes inputs {types}: neither texts (TYPE_STRING) nor token ids (INT64)")


def request_factory(model_config, settings: RequestSettings | None = None) -> Target:
    """Requests for the model this config (from `get_model_config`) describes: texts for a
    TYPE_STRING input, token ids for INT64 inputs; input and output names from the config."""
    settings = settings or RequestSettings()
    config = _as_dict(model_config)
    model = config["name"]
    kind = input_kind(config)
    if kind == TOKEN_IDS:
        if settings.length_mix is not None:
            raise ValueError(f"--texts mixed sends texts, but model {model!r} takes token ids: use it with a model that takes texts")
        names = tuple(tensor["name"] for tensor in config["input"])
        if set(names) != set(INPUT_NAMES):
            raise ValueError(f"model {model!r} takes token-id inputs {list(names)}; these requests send {list(INPUT_NAMES)}")
        return encoder_target(settings.seq_len, model=model)
    text_input = next(tensor["name"] for tensor in config["input"] if tensor.get("data_type") == "TYPE_STRING")
    if settings.length_mix is not None:
        return mixed_target(settings.length_mix, model=model)
    return embed_target(settings.texts_per_request, model=model, text_input=text_input)


def served_models(model_config) -> tuple[str, ...]:
    """The model and, for an ensemble, the models of its steps: whose statistics describe a load."""
    config = _as_dict(model_config)
    steps = config.get("ensemble_scheduling", {}).get("step", [])
    return tuple(dict.fromkeys([config["name"], *(step["model_name"] for step in steps)]))


def fetch_model_config(http_url: str, model: str) -> dict:
    """The served model's config, or a ValueError saying why there is none."""
    from tools.triton_client import TritonClient, TritonError

    try:
        config = TritonClient(http_url).config(model, strict=False)
    except TritonError as exc:
        if exc.status is None:
            raise ValueError(f"no Triton server answered at {http_url}: {exc}") from None
        reason = "not in its repository, or not loaded"
        raise ValueError(f"model {model!r} is not ready on the server at {http_url} ({reason}): {exc}") from None
    return _as_dict(config)


def check_target(http_url: str, target: Target) -> None:
    """Refuse, with the reason, a model the server does not serve or that cannot take these
    requests, before any load starts: otherwise every request fails and the statistics API
    answers 400 in the middle of the measurement."""
    config = fetch_model_config(http_url, target.model)
    inputs = {tensor["name"] for tensor in config.get("input", [])}
    outputs = {tensor["name"] for tensor in config.get("output", [])}
    missing = [name for name in target.inputs if name not in inputs] + [name for name in target.outputs if name not in outputs]
    if missing:
        raise ValueError(
            f"model {target.model!r} has inputs {sorted(inputs)} and outputs {sorted(outputs)}; these requests send "
            f"{list(target.inputs)} and read {list(target.outputs)} (texts for an ensemble like embed, token ids for an encoder)"
        )
