"""What each request carries: texts for the `embed` ensemble, token ids for the `encoder`.

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

from tools.loadgen.mixed_texts import DEFAULT_TOKENIZER, LengthMix, MixedText, MixedTexts

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
    # the engine reads it once per request, after make_inputs for the same index.
    request_class: Callable[[int], tuple[str, int]] | None = None


def embed_target(texts_per_request: int = 1, repeat_share: float = 0.0, model: str = "embed", seed: int = 0) -> Target:
    rng = np.random.default_rng(seed)
    counter = itertools.count()
    nonce = secrets.token_hex(4)  # distinct across runs too: earlier runs' texts sit in the cache

    def make_inputs(module, index: int) -> list:
        rows = []
        for _ in range(texts_per_request):
            base = SAMPLE_TEXTS[index % len(SAMPLE_TEXTS)]
            unique = rng.random() >= repeat_share
            rows.append([f"{base} #{nonce}-{next(counter)}".encode() if unique else base.encode()])
        array = np.array(rows, dtype=np.object_)
        tensor = module.InferInput("TEXT", list(array.shape), "BYTES")
        tensor.set_data_from_numpy(array)
        return [tensor]

    return Target(model, ("EMBEDDING",), make_inputs, f"{model}: {texts_per_request} mixed text(s)/request", ("TEXT",), texts_per_request)


def token_tensors(module, ids, mask=None) -> list:
    """INPUT_IDS and ATTENTION_MASK (INT64) for the encoder; the mask defaults to all ones."""
    ids = np.asarray(ids, dtype=np.int64)
    mask = np.ones_like(ids) if mask is None else np.asarray(mask, dtype=np.int64)
    tensors = []
    for name, array in (("INPUT_IDS", ids), ("ATTENTION_MASK", mask)):
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
    return Target(model, ("EMBEDDING",), make_inputs, describe, ("INPUT_IDS", "ATTENTION_MASK"), 1, {"sequence_length": sequence_length})


def mixed_target(mix: LengthMix | None = None, model: str = "embed", seed: int = 0, tokenizer_path: Path = DEFAULT_TOKENIZER) -> Target:
    """One text per request from the mixed-length workload (tools/loadgen/mixed_texts.py).

    Texts are numbered across every run that uses this target (the engine's request index
    restarts at 0 per run), so a later load level or policy never resends a text the
    response cache already holds."""
    texts = MixedTexts(mix or LengthMix(), tokenizer_path, seed)
    serials = itertools.count()
    issued: dict[int, MixedText] = {}  # engine index -> its text, until the engine reads its class

    def make_inputs(module, index: int) -> list:
        issued[index] = text = texts.request(next(serials))
        array = np.array([[text.text.encode()]], dtype=np.object_)
        tensor = module.InferInput("TEXT", list(array.shape), "BYTES")
        tensor.set_data_from_numpy(array)
        return [tensor]

    def request_class(index: int) -> tuple[str, int]:
        text = issued.pop(index)
        return text.length_class, text.tokens

    describe = f"{model}: mixed lengths ({texts.mix.describe()})"
    return Target(model, ("EMBEDDING",), make_inputs, describe, ("TEXT",), 1, {}, request_class)


def check_target(http_url: str, target: Target) -> None:
    """Refuse, with the reason, a model the server does not serve or that cannot take these
    requests, before any load starts: otherwise every request fails and the statistics API
    answers 400 in the middle of the measurement."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    client = httpclient.InferenceServerClient(http_url)
    try:
        try:
            ready = client.is_model_ready(target.model)
            config = client.get_model_config(target.model) if ready else None
        except InferenceServerException as exc:
            raise ValueError(f"model {target.model!r} on the server at {http_url}: {exc.message()}") from None
    finally:
        client.close()
    if config is None:
        raise ValueError(f"model {target.model!r} is not ready on the server at {http_url} (not in its repository, or not loaded)")
    inputs = {tensor["name"] for tensor in config.get("input", [])}
    outputs = {tensor["name"] for tensor in config.get("output", [])}
    missing = [name for name in target.inputs if name not in inputs] + [name for name in target.outputs if name not in outputs]
    if missing:
        raise ValueError(
            f"model {target.model!r} has inputs {sorted(inputs)} and outputs {sorted(outputs)}; these requests send "
            f"{list(target.inputs)} and read {list(target.outputs)} (texts for an ensemble like embed, token ids for an encoder)"
        )
