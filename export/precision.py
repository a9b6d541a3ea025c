"""Reduced-precision encoders from the parity-checked fp32 ONNX graph (ONNX Runtime tooling).

What is converted was chosen by measurement on all-MiniLM-L6-v2 against the quality gate
(README, "Precision"):
  int8          weights int8 per output channel in the square hidden->hidden MatMuls
                (query, key, value, attention output), 24 of the 36 weight MatMuls.
                `dynamic` quantizes their activations per run; `static` (QDQ) uses
                ranges calibrated (MinMax) on English and Chinese texts. The feed-forward
                projections stay fp32: quantizing only the down-projection (it reads the
                GELU output, whose outliers no int8 range covers) or only the up-projection
                costs more than all square MatMuls together, mostly on short texts. The
                attention score products stay fp32 too (static ranges lose there).
  fp16          every float tensor in fp16 except the inputs, the output and the pooling
                and normalisation after the encoder's last LayerNormalization, for GPU
                hosts (CUDA provider); ONNX Runtime's CPU provider has few fp16 kernels.
Embedding lookups (Gather) and LayerNormalization stay fp32 in every variant: int8 tables
cost quality and the serving backend checks token ids against the table. The nodes are
picked by structure (weight shapes, graph position), not by name, so another BERT-style
model is treated the same way.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from export.errors import ExportError

log = logging.getLogger(__name__)

PRECISIONS = ("fp32", "fp16", "int8")
INT8_METHODS = ("dynamic", "static")
DEFAULT_INT8_METHOD = "dynamic"
CALIBRATION_BATCH = 8
INT8_QUANTIZED = "square hidden->hidden MatMuls (query, key, value, attention output), weights per channel"
INT8_KEPT_FP32 = "embeddings, LayerNorm, feed-forward projections, attention products, pooling"


@dataclass(frozen=True)
class PrecisionSpec:
    """One precision choice, as the command line and the manifest name it."""

    precision: str = "fp32"
    int8_method: str = DEFAULT_INT8_METHOD

    def __post_init__(self) -> None:
        if self.precision not in PRECISIONS:
            raise ExportError(f"unknown precision {self.precision!r}; choose one of {', '.join(PRECISIONS)}")
        if self.int8_method not in INT8_METHODS:
            raise ExportError(f"unknown int8 method {self.int8_method!r}; choose one of {', '.join(INT8_METHODS)}")

    @property
    def label(self) -> str:
        return f"int8 {self.int8_method}" if self.precision == "int8" else self.precision

    def settings(self, calibration_texts: Sequence[str] = ()) -> dict:
        """What the export manifest records: a change of any of it redoes the export."""
        if self.precision == "fp32":
            return {"precision": "fp32"}
        if self.precision == "fp16":
            return {"precision": "fp16", "kept_fp32": "inputs, outputs, pooling and normalisation"}
        settings = {"precision": "int8", "int8_method": self.int8_method, "quantized": INT8_QUANTIZED, "kept_fp32": INT8_KEPT_FP32}
        if self.int8_method == "static":
            settings["calibration"] = {"texts": len(calibration_texts), "sha256": texts_digest(calibration_texts), "method": "MinMax"}
        return settings


def texts_digest(texts: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode())
        digest.update(b"\0")
    return digest.hexdigest()


def weight_matmuls(model) -> dict[str, tuple[int, ...]]:
    """MatMul node name -> shape of its weight (an initializer); activation x activation
    products (attention scores and context) have no weight and are left out."""
    shapes = {init.name: tuple(init.dims) for init in model.graph.initializer}
    return {node.name: shapes[node.input[1]] for node in model.graph.node if node.op_type == "MatMul" and node.input[1] in shapes}


def int8_nodes(model) -> list[str]:
    """The MatMuls to quantize: those with a square 2-D weight (see the module docstring)."""
    return [name for name, shape in weight_matmuls(model).items() if len(shape) == 2 and shape[0] == shape[1]]


def pooling_nodes(model) -> list[str]:
    """Nodes after the last LayerNormalization (pooling, L2 normalisation), kept fp32 in fp16."""
    last_norm = [node for node in model.graph.node if node.op_type == "LayerNormalization"]
    if not last_norm:
        return []
    produced = set(last_norm[-1].output)
    blocked = []
    for node in model.graph.node:  # nodes are stored in topological order
        if produced & set(node.input):
            blocked.append(node.name)
            produced |= set(node.output)
    return blocked


class TokenizedCalibration:
    """Feeds ONNX Runtime's static calibration tokenized texts in serving-style batches
    (sorted by length, padded to the tokenizer's multiple), as an ONNX Runtime
    CalibrationDataReader does (`get_next()` returns None when done)."""

    def __init__(self, tokenizer, texts: Sequence[str], pad_to_multiple_of: int, batch_size: int = CALIBRATION_BATCH) -> None:
        from export.onnx_graph import INPUT_NAMES
        from export.serving_tokenizer import tokenize

        ordered = sorted(texts, key=lambda text: len(tokenizer.encode(text).ids))
        self.batches = []
        for start in range(0, len(ordered), batch_size):
            ids, mask = tokenize(tokenizer, ordered[start : start + batch_size], pad_to_multiple_of)
            self.batches.append(dict(zip(INPUT_NAMES, (ids, mask))))
        self._iterator: Iterator[dict[str, np.ndarray]] = iter(self.batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._iterator, None)

    def rewind(self) -> None:
        self._iterator = iter(self.batches)


@contextlib.contextmanager
def quiet_quantizer() -> Iterator[None]:
    """ONNX Runtime's quantizer logs on the root logger: a line per tensor at INFO, and a
    hint to pre-process the graph at WARNING. The session applies the same graph
    optimisations when it loads the model and the quality gate measures the result, so
    both are noise here; the quantizer's real warnings still come through."""

    def keep(record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING and "pre-process" not in record.getMessage()

    root = logging.getLogger()
    root.addFilter(keep)
    try:
        yield
    finally:
        root.removeFilter(keep)


def quantize_int8(source: Path, destination: Path, method: str, calibration: TokenizedCalibration | None = None) -> list[str]:
    """Write the int8 graph of `source` to `destination`; returns the quantized MatMuls."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_dynamic, quantize_static

    model = onnx.load(str(source))
    chosen = int8_nodes(model)
    if not chosen:
        raise ExportError(f"{source.name} has no MatMul with a weight to quantize; int8 does not apply to this graph")
    excluded = [node.name for node in model.graph.node if node.op_type == "MatMul" and node.name not in chosen]
    common = {"op_types_to_quantize": ["MatMul"], "per_channel": True, "nodes_to_exclude": excluded}
    with quiet_quantizer():
        if method == "dynamic":
            quantize_dynamic(source, destination, weight_type=QuantType.QInt8, **common)
        else:
            if calibration is None:
                raise ExportError("static int8 needs calibration texts")
            calibration.rewind()
            quantize_static(
                source,
                destination,
                calibration,
                quant_format=QuantFormat.QDQ,
                activation_type=QuantType.QUInt8,
                weight_type=QuantType.QInt8,
                calibrate_method=CalibrationMethod.MinMax,
                **common,
            )
    return chosen


def convert_fp16(source: Path, destination: Path) -> list[str]:
    """Write the fp16 graph of `source` to `destination`; returns the nodes kept fp32."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model = onnx.load(str(source))
    kept = pooling_nodes(model)
    converted = convert_float_to_float16(model, keep_io_types=True, node_block_list=kept)
    onnx.save(converted, str(destination))
    return kept


def convert(spec: PrecisionSpec, source: Path, destination: Path, calibration: TokenizedCalibration | None = None) -> str:
    """Build the variant `spec` names; returns a one-line description for the log."""
    if spec.precision == "int8":
        chosen = quantize_int8(source, destination, spec.int8_method, calibration)
        return f"{len(chosen)} MatMuls int8 ({spec.int8_method}, per channel); {INT8_KEPT_FP32} fp32"
    if spec.precision == "fp16":
        kept = convert_fp16(source, destination)
        return f"fp16 with inputs, outputs and {len(kept)} pooling/normalisation nodes fp32"
    raise ExportError(f"{spec.precision} needs no conversion")
