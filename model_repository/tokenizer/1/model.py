"""Tokenizer step of the `embed` ensemble (Triton Python backend).

Padding policy (config parameter `padding`, see padding_policy.py): `batch` (committed)
pads all texts of one execute() call (every request the dynamic batcher joined) to one
length, the longest in the call rounded up to `pad_to_multiple_of`. The encoder's
dynamic batcher only joins requests of equal shape, so the requests of one tokenizer
batch travel on together and form one encoder batch, and the rounding lets consecutive
tokenizer batches share a shape as well. `buckets` pads each request to its length
bucket, `request` to its own length (for an encoder that allows ragged batches).
Truncation to the model's maximum length and the pad token are set inside
tokenizer.json by the export step (the model's own `max_seq_length`).

Bad input fails only its own request, with INVALID_ARG (HTTP 400) and the offending
byte. A text is cut to `max_text_chars` characters before tokenizing: the model reads
at most a few hundred tokens, and tokenizing megabytes to keep 256 of them would let
one huge request hold the step (and every request queued behind it) for seconds.
"""

import json
from pathlib import Path

import numpy as np
import triton_python_backend_utils as pb_utils
from padding_policy import PaddingPolicy, pad_rows
from tokenizers import Tokenizer


def _parameter(config: dict, key: str, default: str) -> str:
    return config.get("parameters", {}).get(key, {}).get("string_value", default)


# A WordPiece token spans at most 100 characters (longer words become [UNK]); 64 Ki
# characters cover the model's 256 tokens for anything but pathological whitespace runs.
DEFAULT_MAX_TEXT_CHARS = "65536"


def _invalid_argument(message: str):
    code = getattr(pb_utils.TritonError, "INVALID_ARG", None)
    return pb_utils.TritonError(message) if code is None else pb_utils.TritonError(message, code)


def _decode_texts(raw: np.ndarray) -> list[str]:
    """TYPE_STRING arrives as bytes objects; reject non-UTF-8 with the offending position."""
    texts = []
    for index, item in enumerate(raw.reshape(-1)):
        data = item if isinstance(item, bytes) else str(item).encode()
        try:
            texts.append(data.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise ValueError(f"TEXT[{index}] is not valid UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    return texts


class TritonPythonModel:
    def initialize(self, args: dict) -> None:
        config = json.loads(args["model_config"])
        version_dir = Path(args["model_repository"]) / args["model_version"]
        path = version_dir / _parameter(config, "tokenizer_file", "tokenizer.json")
        if not path.is_file():
            raise pb_utils.TritonModelException(f"tokenizer file not found: {path}; run `make export`")
        try:
            self.tokenizer = Tokenizer.from_file(str(path))
        except Exception as exc:  # the tokenizers library raises plain Exception on a bad file
            raise pb_utils.TritonModelException(f"cannot load tokenizer file {path}: {exc}; run `make export`") from exc
        padding = self.tokenizer.padding
        if not self.tokenizer.truncation or not padding:
            raise pb_utils.TritonModelException("tokenizer.json lacks truncation or padding settings; re-run `make export`")
        self.pad_id = padding["pad_id"]
        self.tokenizer.no_padding()  # each request is padded to its policy's width below
        parameters = {key: value.get("string_value", "") for key, value in config.get("parameters", {}).items()}
        try:
            self.policy = PaddingPolicy.from_parameters(parameters)
        except ValueError as exc:
            raise pb_utils.TritonModelException(f"tokenizer config: {exc}") from exc
        self.max_text_chars = max(1, int(_parameter(config, "max_text_chars", DEFAULT_MAX_TEXT_CHARS)))

    def execute(self, requests: list) -> list | None:
        responses: list = [None] * len(requests)
        texts: list[str] = []
        owners: list[tuple[int, int, int]] = []  # (request index, first text, text count)
        for index, request in enumerate(requests):
            raw = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            try:
                decoded = _decode_texts(raw)
            except ValueError as exc:
                responses[index] = pb_utils.InferenceResponse(error=_invalid_argument(str(exc)))
                continue
            owners.append((index, len(texts), len(decoded)))
            texts.extend(text[: self.max_text_chars] for text in decoded)
        if not texts:
            return responses

        rows = [encoding.ids for encoding in self.tokenizer.encode_batch(texts)]
        widths = self.policy.widths([max((len(row) for row in rows[first : first + count]), default=0) for _, first, count in owners])
        for (index, first, count), width in zip(owners, widths):
            input_ids, attention_mask = pad_rows(rows[first : first + count], width, self.pad_id)
            responses[index] = pb_utils.InferenceResponse(
                output_tensors=[pb_utils.Tensor("INPUT_IDS", input_ids), pb_utils.Tensor("ATTENTION_MASK", attention_mask)]
            )
        if not self.policy.sends_by_width:
            return responses
        width_of = {index: width for (index, _, _), width in zip(owners, widths)}
        for index in sorted(range(len(requests)), key=lambda i: width_of.get(i, 0)):
            requests[index].get_response_sender().send(responses[index], flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
        return None
