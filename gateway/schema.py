"""The OpenAI embeddings request and response (https://platform.openai.com/docs/api-reference/embeddings).

Validated by hand rather than by a schema library, so each refusal names the field and
says what was wrong in OpenAI's words and shape. Token-id input (`[1, 2, 3]` or
`[[1, 2], [3]]`) is refused: the served model takes text, and ids from another
tokenizer would embed garbage. An empty string is refused as OpenAI refuses it (the
model would embed nothing but its special tokens).
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from gateway.errors import APIError, bad_request

ENCODINGS = ("float", "base64")


@dataclass(frozen=True)
class EmbeddingRequest:
    texts: list[str]
    encoded: list[bytes]  # UTF-8, what Triton receives
    model: str
    encoding_format: str = "float"
    dimensions: int | None = None  # checked against the model's size once Triton said it

    def check_dimensions(self, size: int) -> None:
        """This model has one size; asking for another is refused rather than silently ignored."""
        if self.dimensions is not None and self.dimensions != size:
            raise bad_request(f"This model has {size} dimensions and cannot return {self.dimensions}.", "dimensions")


def parse_json(body: bytes) -> dict:
    try:
        payload = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise bad_request(f"We could not parse the JSON body of your request ({exc}).", None, "invalid_json") from None
    if not isinstance(payload, dict):
        raise bad_request("The request body must be a JSON object.", None, "invalid_json")
    return payload


def _texts(value: object, max_inputs: int) -> list[str]:
    if isinstance(value, str):
        if not value:
            raise bad_request("'input' must not be an empty string.", "input")
        return [value]
    if not isinstance(value, list):
        raise bad_request("'input' must be a string or an array of strings.", "input", "invalid_type")
    if not value:
        raise bad_request("'input' must not be an empty array.", "input")
    if len(value) > max_inputs:
        raise APIError(
            413, f"'input' has {len(value)} items; at most {max_inputs} are allowed per request.", param="input", code="too_many_inputs"
        )
    if all(isinstance(item, int) and not isinstance(item, bool) for item in value) or all(isinstance(item, list) for item in value):
        raise bad_request(
            "Token-id input is not supported by this server; send the text as a string or an array of strings.",
            "input",
            "unsupported_input",
        )
    for index, item in enumerate(value):
        if not isinstance(item, str):
            raise bad_request(f"'input[{index}]' must be a string, not {type(item).__name__}.", f"input[{index}]", "invalid_type")
        if not item:
            raise bad_request(f"'input[{index}]' must not be an empty string.", f"input[{index}]")
    return value


def _utf8(texts: Sequence[str]) -> list[bytes]:
    encoded = []
    for index, text in enumerate(texts):
        try:
            encoded.append(text.encode("utf-8"))
        except UnicodeEncodeError as exc:  # a lone surrogate such as "\ud800" in the JSON
            raise bad_request(
                f"'input[{index}]' is not valid Unicode ({exc.reason} at character {exc.start}).", f"input[{index}]"
            ) from None
    return encoded


def parse_request(payload: dict, model_name: str, max_inputs: int) -> EmbeddingRequest:
    if "input" not in payload:
        raise bad_request("'input' is a required property.", "input", "missing_required_parameter")
    model = payload.get("model")
    if model is None:
        raise bad_request("'model' is a required property.", "model", "missing_required_parameter")
    if not isinstance(model, str):
        raise bad_request("'model' must be a string.", "model", "invalid_type")
    if model != model_name:
        raise APIError(
            404, f"The model '{model}' does not exist; this server serves '{model_name}'.", param="model", code="model_not_found"
        )
    encoding = payload.get("encoding_format")
    if encoding is None:
        encoding = "float"
    if encoding not in ENCODINGS:
        raise bad_request(f"'encoding_format' must be 'float' or 'base64', not {encoding!r}.", "encoding_format")
    user = payload.get("user")
    if user is not None and not isinstance(user, str):
        raise bad_request("'user' must be a string.", "user", "invalid_type")
    dimensions = payload.get("dimensions")
    if dimensions is not None and (not isinstance(dimensions, int) or isinstance(dimensions, bool) or dimensions < 1):
        raise bad_request("'dimensions' must be a positive integer.", "dimensions", "invalid_type")
    texts = _texts(payload["input"], max_inputs)
    return EmbeddingRequest(texts, _utf8(texts), model, encoding, dimensions)


def render_response(request: EmbeddingRequest, embeddings: np.ndarray, prompt_tokens: int) -> bytes:
    """JSON bytes; floats are written from the float32 array directly (orjson), base64 as
    the little-endian float32 bytes the `openai` client decodes."""
    if request.encoding_format == "base64":
        rows: Sequence = [base64.b64encode(row.astype("<f4").tobytes()).decode("ascii") for row in embeddings]
    else:
        rows = embeddings.astype(np.float32, copy=False)
    data = [{"object": "embedding", "index": index, "embedding": row} for index, row in enumerate(rows)]
    body = {
        "object": "list",
        "data": data,
        "model": request.model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
    }
    return orjson.dumps(body, option=orjson.OPT_SERIALIZE_NUMPY)
