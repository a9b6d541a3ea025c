"""The tokenizer.json the serving tokenizer loads: the model's own, with the model's
maximum length as truncation and its pad token recorded, so the Triton tokenizer and
the parity check tokenize exactly as sentence-transformers does."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from export.source_model import SourceModel


def serving_tokenizer(model: SourceModel) -> Tokenizer:
    tokenizer = Tokenizer.from_file(str(model.tokenizer_file))
    tokenizer.enable_truncation(max_length=model.max_seq_length)
    pad_token = _pad_token(model)
    pad_id = tokenizer.token_to_id(pad_token)
    if pad_id is None:
        raise ValueError(f"pad token {pad_token!r} is not in the vocabulary of {model.tokenizer_file}")
    tokenizer.enable_padding(pad_id=pad_id, pad_token=pad_token)
    return tokenizer


def _pad_token(model: SourceModel) -> str:
    config_path = model.path / "tokenizer_config.json"
    if config_path.is_file():
        token = json.loads(config_path.read_text()).get("pad_token")
        if isinstance(token, dict):
            token = token.get("content")
        if token:
            return token
    return "[PAD]"


def tokenize(tokenizer: Tokenizer, texts: list[str], pad_to_multiple_of: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and attention mask for one batch, padded as the serving tokenizer pads."""
    padding = tokenizer.padding
    tokenizer.enable_padding(pad_id=padding["pad_id"], pad_token=padding["pad_token"], pad_to_multiple_of=pad_to_multiple_of)
    try:
        encodings = tokenizer.encode_batch(texts)
    finally:
        tokenizer.enable_padding(pad_id=padding["pad_id"], pad_token=padding["pad_token"])
    ids = np.array([encoding.ids for encoding in encodings], dtype=np.int64)
    mask = np.array([encoding.attention_mask for encoding in encodings], dtype=np.int64)
    return ids, mask


def write_tokenizer(tokenizer: Tokenizer, destination: Path) -> None:
    destination.parent.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(destination))
