"""Numeric parity of the exported ONNX graph before anything is written.

The ONNX embedding must match both the torch module it was traced from (same token
ids) and sentence-transformers' own `encode` (its own tokenisation and truncation),
on English and Chinese, short and long texts, batched with serving-style padding and
one at a time (so the dynamic batch and sequence axes are exercised).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from export.errors import ParityError
from export.onnx_graph import INPUT_NAMES, OUTPUT_NAME, PooledEncoder
from export.serving_tokenizer import tokenize
from export.source_model import SourceModel

log = logging.getLogger(__name__)

MIN_COSINE = 0.9999

_LONG_ENGLISH = " ".join(f"Sentence {i} of a long document about dynamic batching, queue delays and latency budgets." for i in range(60))
_LONG_CHINESE = "动态批处理在延迟预算内提高推理吞吐量。" * 40

PARITY_SENTENCES = (
    "Hello world",
    "A man is eating food.",
    "The quick brown fox jumps over the lazy dog while the server batches requests.",
    "Triton Inference Server joins requests into batches to raise GPU throughput.",
    "今天天气很好。",
    "机器学习模型的推理服务需要低延迟和高吞吐量。",
    "Mixed 语言 text with émojis 🚀 and numbers 12345.",
    "",
    _LONG_ENGLISH,
    _LONG_CHINESE,
)


@dataclass(frozen=True)
class ParityReport:
    min_cosine_vs_torch: float
    min_cosine_vs_sentence_transformers: float
    min_cosine_unbatched: float
    sentences: int

    def summary(self) -> str:
        return (
            f"{self.sentences} sentences: min cosine vs torch {self.min_cosine_vs_torch:.6f}, "
            f"vs sentence-transformers {self.min_cosine_vs_sentence_transformers:.6f}, "
            f"batched vs one-by-one {self.min_cosine_unbatched:.6f}"
        )


def cosine_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return np.sum(a * b, axis=1)


def check_parity(
    onnx_path: Path,
    encoder: PooledEncoder,
    tokenizer,
    model: SourceModel,
    pad_to_multiple_of: int,
    sentences: tuple[str, ...] = PARITY_SENTENCES,
    min_cosine: float = MIN_COSINE,
) -> ParityReport:
    import onnxruntime as ort
    from sentence_transformers import SentenceTransformer

    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])

    def run_onnx(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
        return session.run([OUTPUT_NAME], dict(zip(INPUT_NAMES, (ids, mask))))[0]

    ids, mask = tokenize(tokenizer, list(sentences), pad_to_multiple_of)
    served = run_onnx(ids, mask)
    with torch.no_grad():
        traced_reference = encoder(torch.from_numpy(ids), torch.from_numpy(mask)).numpy()
    one_by_one = np.concatenate([run_onnx(*tokenize(tokenizer, [text])) for text in sentences])
    library = SentenceTransformer(str(model.path), device="cpu").encode(list(sentences), convert_to_numpy=True)
    if library.shape != served.shape:
        raise ParityError(f"sentence-transformers returns shape {library.shape}, the ONNX graph {served.shape}")

    report = ParityReport(
        min_cosine_vs_torch=float(cosine_rows(served, traced_reference).min()),
        min_cosine_vs_sentence_transformers=float(cosine_rows(served, library).min()),
        min_cosine_unbatched=float(cosine_rows(served, one_by_one).min()),
        sentences=len(sentences),
    )
    worst = min(report.min_cosine_vs_torch, report.min_cosine_vs_sentence_transformers, report.min_cosine_unbatched)
    if not worst >= min_cosine:
        raise ParityError(f"parity check failed (need cosine >= {min_cosine}): {report.summary()}")
    return report
