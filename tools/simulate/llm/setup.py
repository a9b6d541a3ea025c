"""What a simulation of the `llm` model starts from: its knobs, its KV cache and its requests.

The knobs come from a config.pbtxt's `parameters` through llm.serving.knobs (the parser the
model itself uses, so a config the server refuses is refused here too); the KV block count
from `kv_cache_bytes` and the checkpoint's dimensions, as PagedKVCache computes it; request
lengths from the same seeded draws as tools.bench.llm's workload.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from llm.contract import EngineConfig, SchedulerConfig
from llm.serving.knobs import KNOWN, engine_of, knobs_to_parameters, parameters_from_pbtxt, parse_knobs
from llm.vllm_engine.knobs import VllmKnobs
from tools.load.llm.workload import LengthRange, LlmRequest
from tools.paths import BUILD_DIR, MODEL_REPOSITORY
from tools.simulate.llm.engine_sim import DTYPE_BYTES, EngineShape, RequestShape, kv_bytes_per_token, num_blocks_for
from tools.simulate.llm.vllm_setup import vllm_simulation

DEFAULT_CONFIG = MODEL_REPOSITORY / "llm" / "config.pbtxt"
VLLM_CONFIG = MODEL_REPOSITORY / "llm" / "configs" / "vllm.pbtxt"
DEFAULT_CHECKPOINT = MODEL_REPOSITORY / "llm" / "1"
ENGINES = ("native", "vllm")
# Per engine: the committed config a command starts from, and where its step cost model goes.
ENGINE_CONFIGS = {"native": DEFAULT_CONFIG, "vllm": VLLM_CONFIG}
ENGINE_COST_MODELS = {"native": BUILD_DIR / "simulate" / "llm-step-cost.json", "vllm": BUILD_DIR / "simulate" / "llm-step-cost-vllm.json"}
# SmolLM2-135M's dimensions, for a checkout without the export (make export writes llm_config.json).
SMOLLM2_DIMS = {"num_layers": 30, "num_kv_heads": 3, "head_dim": 64, "max_position_embeddings": 8192}
VLLM_KNOWN = frozenset(VllmKnobs.__dataclass_fields__)


def parse_overrides(text: str, engine: str = "native") -> dict[str, str]:
    """'max_num_seqs=8,policy=priority' -> {key: value}; keys must be knobs of the engine's model."""
    known = VLLM_KNOWN if engine == "vllm" else KNOWN
    values: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or key.strip() not in known:
            raise ValueError(f"an override is KNOB=VALUE with a knob of {', '.join(sorted(known))}; got {part!r}")
        values[key.strip()] = value.strip()
    return values


def resolve_engine(engine: str | None, config: Path | None) -> tuple[str, Path]:
    """The engine a command works on and the config it starts from: `--engine` picks its
    committed config, `--config` names one whose parameters.engine says which; both given,
    they must agree (ValueError). Neither: the native engine and config.pbtxt."""
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"--engine is one of {', '.join(ENGINES)}, got {engine!r}")
    if config is None:
        engine = engine or "native"
        return engine, ENGINE_CONFIGS[engine]
    says = engine_of(parameters_from_pbtxt(config))
    if engine is not None and engine != says:
        raise ValueError(f"--engine {engine} but {config} is a config of the {says} engine (parameters.engine)")
    return says, Path(config)


def simulation_of(parameters: Mapping[str, str], dims: Mapping | None = None) -> tuple[SchedulerConfig, EngineShape]:
    """The scheduler knobs and engine a config's parameters give the simulator, for either
    engine (parameters.engine): ours as parsed by the model itself, vLLM's mapped onto our
    scheduler (tools/simulate/llm/vllm_setup.py)."""
    if engine_of(parameters) == "vllm":
        return vllm_simulation(parameters, dims or checkpoint_dims())
    config, engine = parse_knobs(parameters)
    return config, engine_shape(engine, dims)


def read_knobs(config: Path = DEFAULT_CONFIG, overrides: Mapping[str, str] | None = None) -> tuple[SchedulerConfig, EngineConfig]:
    return parse_knobs({**parameters_from_pbtxt(config), **(overrides or {})})


def checkpoint_dims(folder: Path = DEFAULT_CHECKPOINT) -> dict:
    path = Path(folder) / "llm_config.json"
    return json.loads(path.read_text()) if path.is_file() else dict(SMOLLM2_DIMS)


def engine_shape(engine: EngineConfig, dims: Mapping | None = None) -> EngineShape:
    dims = dict(dims or checkpoint_dims())
    from llm.engine.precision import resolve_dtype

    per_token = kv_bytes_per_token(dims, DTYPE_BYTES[resolve_dtype(engine.dtype, engine.device)])
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
    """The exact lengths of a built workload (as our tokenizer counts the prompts), and the
    adapter each request names."""
    return [RequestShape(r.prompt_tokens, r.max_tokens, r.lora_name) for r in requests]


@dataclasses.dataclass(frozen=True)
class AdapterMix:
    """How many LoRA adapters a workload asks for and how popular each is: what
    tools.bench.llm.lora serves (its adapters' names, its seeded draw), so a simulated workload
    names the adapters the benchmark's requests name for the same seed."""

    adapters: int = 0  # 0: every request runs on the base model
    popularity: str = "uniform"  # uniform or zipf (1/rank)

    def __post_init__(self) -> None:
        if self.adapters < 0:
            raise ValueError(f"a workload asks for 0 adapters or more, got {self.adapters}")
        if not self.adapters:
            return
        from tools.bench.llm.lora import POPULARITY  # (it loads torch: only for a workload with adapters)

        if self.popularity not in POPULARITY:
            raise ValueError(f"adapter popularity is one of {', '.join(POPULARITY)}, got {self.popularity!r}")

    @property
    def names(self) -> list[str]:
        return [f"random-{index}" for index in range(self.adapters)]

    def write(self, folder: Path, dims) -> dict[str, Path]:
        """The mix's adapters as tools.bench.llm.lora writes them (random, its rank, seed = the
        adapter's index), all seven projections adapted, in `folder`: name -> its folder."""
        from tools.bench.llm.lora import RANK
        from tools.lora.random_adapters import write_adapter

        return {name: write_adapter(Path(folder) / name, dims, seed, RANK, 2.0 * RANK) for seed, name in enumerate(self.names)}

    def apply(self, requests: Sequence, seed: int) -> list:
        """`requests` (RequestShape or LlmRequest), each naming an adapter drawn from the mix."""
        from tools.bench.llm.lora import MIXED, Variant, with_adapters

        if not self.adapters:
            return list(requests)
        return with_adapters(requests, Variant(MIXED, self.adapters, self.popularity), self.names, seed)


def with_knobs(config: SchedulerConfig, **changes) -> SchedulerConfig:
    return dataclasses.replace(config, **changes)


def scheduler_parameters(config: SchedulerConfig) -> dict[str, str]:
    """The scheduler's knobs as config `parameters` strings."""
    names = {field.name for field in dataclasses.fields(SchedulerConfig)}
    return {key: value for key, value in knobs_to_parameters(config, EngineConfig()).items() if key in names}
