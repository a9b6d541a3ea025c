"""Seconds per engine step as a linear function of the step's composition.

    step_s = intercept + prefill_token·p + decode_seq·d + kv_token·k + prefill_pair·q + multi_row·m
             + lora_row·r + lora_adapter·a

- `prefill_tokens`: prompt tokens fed this step (the matmuls' rows beside decodes);
- `decode_seqs`: sequences decoding one token (a row each, plus one sampled row each);
- `kv_tokens`: positions the step's attention reads (each chunk's context up to its last token);
- `prefill_pairs`: query x key pairs of the prefill chunks, in thousands (causal attention
  over a chunk grows with chunk length times context, which `kv_tokens` alone misses);
- `multi_row`: 1 when the matrix products have two rows or more. On the 2-core EPYC the
  float32 products cost 28 ms for one row (a matrix-vector product reading each weight once)
  and 44-52 ms for 2 to 8 rows: a step jumps, not grows, from one sequence to two, which a
  line through both under-predicts at light load. Optional in saved models (0 when absent);
- `lora_rows`: rows of the step's products that carry a LoRA adapter (a prompt chunk's tokens, a
  decode's one row): the `lora_delta` kernel computes each row's shrink and expand on its own,
  per layer and projection, whatever else shares the step;
- `lora_adapters`: distinct adapters in the step: each one's A and B matrices are read once per
  layer and projection (the kernel runs one adapter's rows back to back), so a step of 8 rows over
  8 adapters reads 8 adapters' matrices where 8 rows of one adapter read one. Both optional in
  saved models (0 when absent: a model measured without adapters prices an adapted step as a
  base one).

Fitted by non-negative least squares on measured steps, so no feature can make a step cheaper,
and saved with the CPU it was measured on: a cost model is only valid where it was measured.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from llm.contract import ScheduledChunk

FEATURES = ("intercept", "prefill_tokens", "decode_seqs", "kv_tokens", "prefill_pairs", "multi_row", "lora_rows", "lora_adapters")
OPTIONAL_FEATURES = frozenset({"multi_row", "lora_rows", "lora_adapters"})  # absent from cost models saved before them: 0


@dataclass(frozen=True)
class StepShape:
    """What a step costs depends on: its composition, not its token values."""

    prefill_tokens: int = 0
    decode_seqs: int = 0
    kv_tokens: int = 0
    prefill_pairs: float = 0.0  # thousands of query x key pairs in prefill chunks
    lora_rows: int = 0  # rows (tokens fed) of sequences with a LoRA adapter
    lora_adapters: int = 0  # distinct LoRA adapters among the step's sequences

    def row(self) -> list[float]:
        multi_row = 1.0 if self.prefill_tokens + self.decode_seqs >= 2 else 0.0
        counts = (self.prefill_tokens, self.decode_seqs, self.kv_tokens, self.prefill_pairs)
        return [1.0, *(float(count) for count in counts), multi_row, float(self.lora_rows), float(self.lora_adapters)]

    @classmethod
    def of(cls, chunks: Sequence[ScheduledChunk]) -> StepShape:
        """A step's shape from its chunks (a chunk of one token after cached context is a decode;
        a chunk's rows are adapted when it names an adapter slot)."""
        shape = cls.of_pieces(
            (len(chunk.token_ids), chunk.start_position, len(chunk.token_ids) == 1 and chunk.start_position > 0) for chunk in chunks
        )
        adapted = [chunk for chunk in chunks if chunk.adapter_slot >= 0]
        if not adapted:
            return shape
        rows = sum(len(chunk.token_ids) for chunk in adapted)
        return dataclasses.replace(shape, lora_rows=rows, lora_adapters=len({chunk.adapter_slot for chunk in adapted}))

    @classmethod
    def of_pieces(cls, pieces: Iterable[tuple[int, int, bool]]) -> StepShape:
        """A step's shape from (tokens fed, tokens already in the KV cache, is a decode) per
        sequence: what an engine's own step record says (tools/simulate/llm/vllm_calibrate.py)."""
        prefill = decodes = kv = 0
        pairs = 0.0
        for count, start, decode in pieces:
            kv += start + count
            if decode:
                decodes += 1
            else:
                prefill += count
                pairs += count * (start + (count + 1) / 2) / 1000.0
        return cls(prefill, decodes, kv, pairs)


@dataclass(frozen=True)
class StepCostModel:
    coefficients: dict[str, float]  # seconds per unit of each feature of FEATURES
    machine: dict = field(default_factory=dict)  # tools.machine.describe_cpu() where measured
    engine: dict = field(default_factory=dict)  # dtype, threads, checkpoint
    fit: dict = field(default_factory=dict)  # samples, median and max relative error of the fit

    def __post_init__(self) -> None:
        missing = [name for name in FEATURES if name not in self.coefficients and name not in OPTIONAL_FEATURES]
        if missing:
            raise ValueError(f"a step cost model needs a coefficient for {', '.join(missing)}")
        object.__setattr__(self, "coefficients", {**dict.fromkeys(OPTIONAL_FEATURES, 0.0), **self.coefficients})

    @property
    def engine_kind(self) -> str:
        """Which engine's steps were measured: native (ours, in process) or vllm (vLLM's engine
        core, tools/simulate/llm/vllm_calibrate.py); models saved before vLLM had no such key."""
        return str(self.engine.get("engine", "native"))

    def seconds(self, shape: StepShape) -> float:
        return float(sum(c * x for c, x in zip(self._vector(), shape.row())))

    def _vector(self) -> list[float]:
        return [self.coefficients[name] for name in FEATURES]

    @classmethod
    def fitted(cls, shapes: Sequence[StepShape], seconds: Sequence[float], **meta) -> StepCostModel:
        """Non-negative least squares, weighted by 1/seconds so short decode steps count as much
        as long prefills (the error that matters is relative). An optional feature no shape has
        (no adapted step measured) gets 0 and needs no shape of its own."""
        from scipy.optimize import nnls

        x = np.array([shape.row() for shape in shapes]) if shapes else np.zeros((0, len(FEATURES)))
        used = sum(1 for name, column in zip(FEATURES, x.T) if name not in OPTIONAL_FEATURES or column.any())
        if len(shapes) != len(seconds) or len(shapes) < used:
            raise ValueError(f"a fit needs as many times as shapes and at least {used} of them, got {len(shapes)}")
        y = np.array(seconds, dtype=float)
        if (y <= 0).any():
            raise ValueError("step times must be positive")
        weights = 1.0 / y
        solution, _ = nnls(x * weights[:, None], y * weights)
        model = cls(dict(zip(FEATURES, (float(v) for v in solution))), **meta)
        errors = np.abs(np.array([model.seconds(s) for s in shapes]) - y) / y
        quality = {
            "samples": len(shapes),
            "median_rel_error": round(float(np.median(errors)), 4),
            "max_rel_error": round(float(errors.max()), 4),
        }
        return cls(model.coefficients, model.machine, model.engine, {**model.fit, **quality})

    def scaled(self, factor: float, **note) -> StepCostModel:
        """Every coefficient times `factor` (tools/simulate/llm/live_scale.py fits it from a live
        level), with `note` recorded under fit["live_scale"]."""
        if not 0 < factor < math.inf:
            raise ValueError(f"a cost model's scale must be a positive number, got {factor}")
        coefficients = {name: value * factor for name, value in self.coefficients.items()}
        return StepCostModel(coefficients, self.machine, self.engine, {**self.fit, "live_scale": {"factor": round(factor, 4), **note}})

    def to_dict(self) -> dict:
        return asdict(self)

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"kind": "llm-step-cost", **self.to_dict()}, indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> StepCostModel:
        data = json.loads(Path(path).read_text())
        if data.get("kind") != "llm-step-cost":
            raise ValueError(f"{path} is not an LLM step cost model (python -m tools.simulate llm calibrate writes one)")
        return cls(data["coefficients"], data.get("machine", {}), data.get("engine", {}), data.get("fit", {}))

    def describe(self) -> str:
        c = self.coefficients
        return (
            f"{c['intercept'] * 1e3:.2f} ms + {c['prefill_tokens'] * 1e6:.1f} us/prefill token + {c['decode_seqs'] * 1e6:.1f} us/decode seq"
            f" + {c['kv_tokens'] * 1e9:.1f} ns/KV token + {c['prefill_pairs'] * 1e6:.2f} us/1000 prefill pairs"
            f" + {c['multi_row'] * 1e3:.2f} ms from two rows on"
            f" + {c['lora_rows'] * 1e6:.1f} us/LoRA row + {c['lora_adapters'] * 1e3:.2f} ms/LoRA adapter"
        )
