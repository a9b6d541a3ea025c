"""The quality gate a reduced-precision encoder must pass before it is written.

It compares the candidate with the fp32 graph it came from, on held-out English and
Chinese texts (never used for calibration): the cosine of every embedding to its fp32
twin, and retrieval agreement, the share of each text's 10 nearest neighbours (among
all held-out texts, fp32 ranking) that the candidate's ranking also puts in its top 10.
A mean cosine can look fine while single texts or rankings move, which is what a
search index built on these embeddings would notice, hence both figures.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from export.errors import ExportError

log = logging.getLogger(__name__)

MIN_COSINE = 0.99
MIN_NEIGHBOUR_OVERLAP = 0.9
NEIGHBOURS = 10
GATE_BATCH = 16


class QualityGateError(ExportError):
    """The variant is further from fp32 than the gate allows; nothing was written.
    `python -m export` exits 3 on it, as on a parity failure."""


@dataclass(frozen=True)
class QualityThresholds:
    min_cosine: float = MIN_COSINE
    min_neighbour_overlap: float = MIN_NEIGHBOUR_OVERLAP
    neighbours: int = NEIGHBOURS

    def __post_init__(self) -> None:
        if not 0.0 < self.min_cosine <= 1.0 or not 0.0 <= self.min_neighbour_overlap <= 1.0:
            raise ExportError(f"gate thresholds must lie in (0, 1]: cosine {self.min_cosine}, overlap {self.min_neighbour_overlap}")
        if self.neighbours < 1:
            raise ExportError(f"neighbours must be >= 1, got {self.neighbours}")


@dataclass(frozen=True)
class QualityReport:
    """Candidate vs fp32 on the held-out texts."""

    texts: int
    min_cosine: float
    mean_cosine: float
    min_cosine_by_language: dict[str, float]
    neighbour_overlap: float  # mean share of the fp32 top-k neighbours the candidate keeps
    top1_agreement: float
    neighbours: int

    def failures(self, thresholds: QualityThresholds) -> list[str]:
        problems = []
        if not self.min_cosine >= thresholds.min_cosine:  # also catches NaN
            problems.append(f"min cosine {self.min_cosine:.4f} < {thresholds.min_cosine}")
        if not self.neighbour_overlap >= thresholds.min_neighbour_overlap:
            problems.append(f"top-{self.neighbours} neighbour overlap {self.neighbour_overlap:.3f} < {thresholds.min_neighbour_overlap}")
        return problems

    def summary(self) -> str:
        languages = ", ".join(f"{language} {value:.4f}" for language, value in self.min_cosine_by_language.items())
        return (
            f"{self.texts} held-out texts: cosine to fp32 min {self.min_cosine:.4f} ({languages}), mean {self.mean_cosine:.4f}; "
            f"top-{self.neighbours} neighbour overlap {self.neighbour_overlap:.3f}, top-1 agreement {self.top1_agreement:.3f}"
        )

    def as_dict(self) -> dict:
        return asdict(self)


def nearest_neighbours(embeddings: np.ndarray, k: int) -> np.ndarray:
    """Indices of each row's k most similar other rows (cosine), most similar first."""
    unit = embeddings / np.maximum(np.linalg.norm(embeddings, axis=1, keepdims=True), 1e-12)
    similarity = unit @ unit.T
    np.fill_diagonal(similarity, -np.inf)
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


def compare(reference: np.ndarray, candidate: np.ndarray, languages: Sequence[str], neighbours: int = NEIGHBOURS) -> QualityReport:
    """Gate figures for two embeddings of the same texts (row i is text i in both)."""
    from export.parity import cosine_rows  # imports torch; kept out of the command's start-up

    if reference.shape != candidate.shape or len(languages) != len(reference):
        raise ValueError(f"shapes differ: reference {reference.shape}, candidate {candidate.shape}, {len(languages)} languages")
    k = min(neighbours, len(reference) - 1)
    if k < 1:
        raise ValueError("the gate needs at least two texts")
    cosine = cosine_rows(reference, candidate)
    expected, actual = nearest_neighbours(reference, k), nearest_neighbours(candidate, k)
    overlap = np.mean([len(set(a) & set(b)) / k for a, b in zip(expected, actual)])
    labels = np.asarray(languages)
    return QualityReport(
        texts=len(reference),
        min_cosine=float(np.min(cosine)),
        mean_cosine=float(np.mean(cosine)),
        min_cosine_by_language={language: float(np.min(cosine[labels == language])) for language in dict.fromkeys(languages)},
        neighbour_overlap=float(overlap),
        top1_agreement=float(np.mean(expected[:, 0] == actual[:, 0])),
        neighbours=k,
    )


def gate_providers() -> list[str]:
    """CUDA where this onnxruntime has it (fp16 is meant for GPUs), else the CPU."""
    import onnxruntime as ort

    available = ort.get_available_providers()
    return ["CUDAExecutionProvider", "CPUExecutionProvider"] if "CUDAExecutionProvider" in available else ["CPUExecutionProvider"]


def embed_texts(model_path: Path, tokenizer, texts: Sequence[str], pad_to_multiple_of: int, batch_size: int = GATE_BATCH) -> np.ndarray:
    """Embeddings of `texts` in input order, run in batches of similar length (little padding)."""
    import onnxruntime as ort

    from export.onnx_graph import INPUT_NAMES, OUTPUT_NAME
    from export.serving_tokenizer import tokenize

    session = ort.InferenceSession(str(model_path), providers=gate_providers())
    order = sorted(range(len(texts)), key=lambda index: len(texts[index]))
    rows: dict[int, np.ndarray] = {}
    for start in range(0, len(order), batch_size):
        chosen = order[start : start + batch_size]
        ids, mask = tokenize(tokenizer, [texts[index] for index in chosen], pad_to_multiple_of)
        output = session.run([OUTPUT_NAME], dict(zip(INPUT_NAMES, (ids, mask))))[0]
        rows.update(zip(chosen, np.asarray(output, dtype=np.float32)))
    return np.stack([rows[index] for index in range(len(texts))])


def enforce(report: QualityReport, thresholds: QualityThresholds, label: str = "variant", accept_quality_loss: bool = False) -> None:
    """Raise QualityGateError when `report` fails `thresholds`, unless the user accepted
    the loss (then only warn: the manifest still records the figures)."""
    problems = report.failures(thresholds)
    if problems and not accept_quality_loss:
        raise QualityGateError(
            f"the {label} encoder fails the quality gate ({'; '.join(problems)}): {report.summary()}. Nothing was written; "
            "choose another precision or method, or pass --accept-quality-loss to write it anyway"
        )
    if problems:
        log.warning("writing the %s encoder below the quality gate (--accept-quality-loss): %s", label, "; ".join(problems))


def check_quality(
    reference_path: Path,
    candidate_path: Path,
    tokenizer,
    pad_to_multiple_of: int,
    texts: Sequence[str],
    languages: Sequence[str],
    thresholds: QualityThresholds = QualityThresholds(),
    label: str = "variant",
    accept_quality_loss: bool = False,
) -> QualityReport:
    """Gate figures of `candidate_path` against `reference_path`, enforced (see `enforce`)."""
    reference = embed_texts(reference_path, tokenizer, texts, pad_to_multiple_of)
    candidate = embed_texts(candidate_path, tokenizer, texts, pad_to_multiple_of)
    report = compare(reference, candidate, languages, thresholds.neighbours)
    enforce(report, thresholds, label, accept_quality_loss)
    return report
