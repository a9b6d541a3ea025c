"""What a simulation of the `llm` model starts from: its knobs, its KV cache and its requests.

The knobs come from a config.pbtxt's `parameters` through llm.serving.knobs (the parser the
model itself uses, so a config the server refuses is refused here too); the KV block count
from `kv_cache_bytes` and the checkpoint's dimensions, as PagedKVCache computes it; request
lengths from the same seeded draws as tools.llmbench's workload.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from llm.contract import EngineConfig, SchedulerConfig
from llm.serving.knobs import KNOWN, knobs_to_parameters, parameters_from_pbtxt, parse_knobs
from tools.load.llm.workload import LengthRange, LlmRequest
from tools.paths import MODEL_REPOSITORY
from tools.simulate.llm.engine_sim import EngineShape, RequestShape, kv_bytes_per_token, num_blocks_for

DEFAULT_CONFIG = MODEL_REPOSITORY / "llm" / "config.pbtxt"
DEFAULT_CHECKPOINT = MODEL_REPOSITORY / "llm" / "1"
# SmolLM2-135M's dimensions, for a checkout without the export (make export writes llm_config.json).
SMOLLM2_DIMS = {"num_layers": 30, "num_kv_heads": 3, "head_dim": 64, "max_position_embeddings": 8192}
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def parse_overrides(text: str) -> dict[str, str]:
    """'max_num_seqs=8,policy=priority' -> {key: value}; keys must be knobs of the model."""
    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in KNOWN:
            raise ValueError(f"an override is KNOB=VALUE with a knob of {', '.join(sorted(KNOWN))}; got {part!r}")
        values[key.strip()] = value.strip()
    return values


def read_knobs(config: Path = DEFAULT_CONFIG, overrides: Mapping[str, str] | None = None) -> tuple[SchedulerConfig, EngineConfig]:
    return parse_knobs({**parameters_from_pbtxt(config), **(overrides or {})})


def checkpoint_dims(folder: Path = DEFAULT_CHECKPOINT) -> dict:
    path = Path(folder) / "llm_config.json"
    return json.loads(path.read_text()) if path.is_file() else dict(SMOLLM2_DIMS)


def engine_shape(engine: EngineConfig, dims: Mapping | None = None) -> EngineShape:
    dims = dict(dims or checkpoint_dims())
    per_token = kv_bytes_per_token(dims, DTYPE_BYTES[engine.dtype])
    return EngineShape(
        num_blocks=num_blocks_for(engine.kv_cache_bytes, engine.block_size, per_token),
        block_size=engine.block_size,
        max_model_len=min(engine.max_model_len, int(dims.get("max_position_embeddings", engine.max_model_len))),
    )


def drawn_shapes(prompt_lengths: LengthRange, output_lengths: LengthRange, count: int, seed: int) -> list[RequestShape]:
    """The lengths tools.load.llm.workload.Workload draws for the same seed (its prompts are then
    cut to the drawn count, give or take a token at the edge)."""
    rng = np.random.default_rng(seed)
    prompts = prompt_lengths.draw(rng, count)
    outputs = output_lengths.draw(rng, count)
    return [RequestShape(int(p), int(o)) for p, o in zip(prompts, outputs)]


def shapes_of(requests: Sequence[LlmRequest]) -> list[RequestShape]:
    """The exact lengths of a built workload (as our tokenizer counts the prompts)."""
    return [RequestShape(r.prompt_tokens, r.max_tokens) for r in requests]


def with_knobs(config: SchedulerConfig, **changes) -> SchedulerConfig:
    return dataclasses.replace(config, **changes)


def scheduler_parameters(config: SchedulerConfig) -> dict[str, str]:
    """The scheduler's knobs as config `parameters` strings."""
    names = {field.name for field in dataclasses.fields(SchedulerConfig)}
    return {key: value for key, value in knobs_to_parameters(config, EngineConfig()).items() if key in names}
