"""Tokenizer step of the `embed` ensemble (Triton Python backend).

Batching policy: all texts of one execute() call (every request the dynamic batcher
joined) are padded to one length, the longest in the call rounded up to
`pad_to_multiple_of`. The encoder's dynamic batcher only joins requests of equal
shape, so the requests of one tokenizer batch travel on together and form one encoder
batch, and the rounding lets consecutive tokenizer batches share a shape as well.
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
        self.tokenizer.enable_padding(
            pad_id=padding["pad_id"],
            pad_token=padding["pad_token"],
            pad_to_multiple_of=max(1, int(_parameter(config, "pad_to_multiple_of", "16"))),
        )
        self.max_text_chars = max(1, int(_parameter(config, "max_text_chars", DEFAULT_MAX_TEXT_CHARS)))

    def execute(self, requests: list) -> list:
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

        encodings = self.tokenizer.encode_batch(texts)  # padded to one length for the whole call
        input_ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64)
        attention_mask = np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64)

        for index, first, count in owners:
            rows = slice(first, first + count)
            responses[index] = pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor("INPUT_IDS", input_ids[rows]),
                    pb_utils.Tensor("ATTENTION_MASK", attention_mask[rows]),
                ]
            )
        return responses
