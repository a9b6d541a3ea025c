"""ONNX -> TensorRT engine for the encoder, parity-checked, into the TensorRT variant repository.

Every number comes from what is committed, never typed again: the optimisation
profile's batch axis spans 1..`max_batch_size` with its optimum at the largest
`preferred_batch_size` (encoder/config.pbtxt); its sequence axis spans the tokenizer's
`pad_to_multiple_of` .. the truncation length in tokenizer.json. The engine is checked
against ONNX Runtime on the same token ids before `model.plan` is written, and it goes
to the generated repository (`tools.repo.variant --kind tensorrt`), not over the committed
configs. Needs an NVIDIA GPU plus `pip install -r requirements-gpu.txt`
(tensorrt, and polygraphy to run the engine for the parity check).
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tritonclient.grpc import model_config_pb2

from export.errors import ExportError, ParityError
from tools.paths import BUILD_DIR
from tools.repo.model_config import ModelConfig, load_config
from tools.repo.variant import PLAN_NAME, VariantError, write_variant

log = logging.getLogger(__name__)

MIN_COSINE = 0.999  # FP16 engines drift a little from the FP32 graph; more than this is a bug
WORKSPACE_BYTES = 2 << 30
DEFAULT_OUT = BUILD_DIR / "tensorrt_repository"
PARITY_TEXTS = (
    "Hello world",
    "Triton joins requests into batches to keep the GPU busy.",
    "动态批处理在延迟预算内提高推理吞吐量。",
    "Mixed 语言 text with émojis 🚀 and numbers 12345.",
    " ".join(f"Sentence {i} about queue delays, batch sizes and latency budgets." for i in range(40)),
)


class TensorRTUnavailable(ExportError):
    """This host cannot build engines (no GPU, or the GPU packages are missing)."""


@dataclass(frozen=True)
class EngineProfile:
    """One optimisation profile: (min, opt, max) for the batch and sequence axes."""

    batch: tuple[int, int, int]
    sequence: tuple[int, int, int]

    def shapes(self) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
        return tuple((b, s) for b, s in zip(self.batch, self.sequence))  # type: ignore[return-value]


def gpu_problems() -> list[str]:
    """Why this host cannot build an engine (empty when it can); cheap, imports nothing heavy."""
    problems = []
    has_device = any(Path("/dev").glob("nvidia[0-9]*")) or shutil.which("nvidia-smi") is not None
    if not has_device:
        problems.append("no NVIDIA GPU found (no /dev/nvidia* device, no nvidia-smi)")
    missing = [name for name in ("tensorrt", "polygraphy") if importlib.util.find_spec(name) is None]
    if missing:
        problems.append(f"Python packages missing: {', '.join(missing)} (pip install -r requirements-gpu.txt)")
    return problems


def profile_from_configs(encoder: ModelConfig, tokenizer: ModelConfig, tokenizer_json: Path) -> EngineProfile:
    """The profile the committed configs imply (see the module docstring)."""
    if encoder.max_batch_size < 1:
        raise ValueError("the encoder has max_batch_size 0; a TensorRT profile needs a batch axis")
    preferred = list(encoder.dynamic_batching.preferred_batch_size)
    optimum = max(preferred) if preferred else encoder.max_batch_size
    multiple = max(1, int(tokenizer.parameters["pad_to_multiple_of"].string_value or 1))
    truncation = json.loads(tokenizer_json.read_text()).get("truncation") or {}
    if not truncation.get("max_length"):
        raise ValueError(f"{tokenizer_json} sets no truncation length; re-run `make export`")
    longest = math.ceil(int(truncation["max_length"]) / multiple) * multiple  # padding may round past truncation
    typical = min(longest, max(multiple, math.ceil(longest / 2 / multiple) * multiple))
    return EngineProfile(batch=(1, optimum, encoder.max_batch_size), sequence=(multiple, typical, longest))


def build_engine(onnx_path: Path, profile: EngineProfile, input_names: list[str], fp16: bool = True) -> bytes:
    """Serialised engine from the ONNX graph (TensorRT 10 Python API)."""
    import tensorrt as trt

    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    network = builder.create_network(0)  # explicit batch is the only mode in TensorRT 10
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errors = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        raise ExportError(f"TensorRT cannot parse {onnx_path}: {errors}")
    network_inputs = {network.get_input(i).name for i in range(network.num_inputs)}
    if network_inputs != set(input_names):
        raise ExportError(f"ONNX inputs {sorted(network_inputs)} differ from the config's {sorted(input_names)}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    if fp16 and getattr(builder, "platform_has_fast_fp16", True):
        config.set_flag(trt.BuilderFlag.FP16)
        log.info("building with FP16 kernels enabled")
    else:
        log.info("building in FP32 (FP16 not requested or not fast on this GPU)")
    optimisation = builder.create_optimization_profile()
    minimum, optimum, maximum = profile.shapes()
    for name in input_names:
        optimisation.set_shape(name, minimum, optimum, maximum)
    config.add_optimization_profile(optimisation)
    serialized = builder.build_serialized_network(network, config)
    if serialized is None:
        raise ExportError("TensorRT failed to build the engine (see the TensorRT log above)")
    return bytes(serialized)


def engine_input_types(plan: bytes) -> dict[str, str]:
    """Input name -> numpy dtype name, as the engine declares them."""
    import tensorrt as trt

    engine = trt.Runtime(trt.Logger(trt.Logger.WARNING)).deserialize_cuda_engine(plan)
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    return {
        name: np.dtype(trt.nptype(engine.get_tensor_dtype(name))).name
        for name in names
        if engine.get_tensor_mode(name) == trt.TensorIOMode.INPUT
    }


_CONFIG_TYPES = {"int64": "TYPE_INT64", "int32": "TYPE_INT32"}


def check_input_types(encoder: ModelConfig, engine_types: dict[str, str]) -> None:
    """The ensemble feeds the tokenizer's tensors straight in, so the engine must take the
    types the committed config declares (TensorRT 10 keeps ONNX INT64 inputs as INT64)."""
    for tensor in encoder.input:
        declared = model_config_pb2.DataType.Name(tensor.data_type)
        actual = _CONFIG_TYPES.get(engine_types.get(tensor.name, ""), engine_types.get(tensor.name, "absent"))
        if actual != declared:
            raise ExportError(f"engine input {tensor.name} is {actual}, the config declares {declared}; use TensorRT >= 10")


def parity_batches(tokenizer_json: Path, multiple: int, profile: EngineProfile) -> list[tuple[np.ndarray, np.ndarray]]:
    """Token ids as the serving tokenizer makes them: batch 1, the optimum and the maximum,
    short and full-length, so every corner of the profile runs once."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    padding = tokenizer.padding or {}
    tokenizer.enable_padding(pad_id=padding.get("pad_id", 0), pad_token=padding.get("pad_token", "[PAD]"), pad_to_multiple_of=multiple)
    batches = []
    for size in sorted({1, profile.batch[1], profile.batch[2]}):
        mixed = [PARITY_TEXTS[(i - 1) % len(PARITY_TEXTS)] for i in range(size)]  # starts with the longest text
        for chosen in ([PARITY_TEXTS[0]] * size, mixed):  # the shortest shape, then padded to full length
            encodings = tokenizer.encode_batch(chosen)
            ids = np.array([e.ids for e in encodings], dtype=np.int64)
            mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
            batches.append((ids, mask))
    return batches


def check_parity(plan: bytes, onnx_path: Path, batches: list[tuple[np.ndarray, np.ndarray]], names: tuple[str, str, str]) -> float:
    """Smallest cosine between engine and ONNX Runtime rows; raises ParityError below MIN_COSINE
    (export's exit status 3) and ExportError when the engine cannot run at all."""
    import onnxruntime as ort
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    ids_name, mask_name, output_name = names
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    input_types = engine_input_types(plan)
    worst = 1.0
    with _engine_step("running the engine for the parity check"), TrtRunner(EngineFromBytes(plan)) as runner:
        for ids, mask in batches:
            expected = session.run([output_name], {ids_name: ids, mask_name: mask})[0]
            feed = {ids_name: ids.astype(input_types[ids_name]), mask_name: mask.astype(input_types[mask_name])}
            actual = np.asarray(runner.infer(feed_dict=feed)[output_name], dtype=np.float32)
            if actual.shape != expected.shape:
                raise ParityError(f"TensorRT engine returns shape {actual.shape} for batch {ids.shape}, ONNX Runtime {expected.shape}")
            cosine = np.sum(actual * expected, axis=1) / (np.linalg.norm(actual, axis=1) * np.linalg.norm(expected, axis=1))
            worst = min(worst, float(np.min(cosine)))
            log.info("parity batch %s: min cosine %.6f", ids.shape, float(np.min(cosine)))
    if not worst >= MIN_COSINE:  # also catches NaN
        raise ParityError(f"TensorRT engine disagrees with ONNX Runtime: min cosine {worst:.6f} < {MIN_COSINE}")
    return worst


@contextlib.contextmanager
def _engine_step(what: str) -> Iterator[None]:
    """TensorRT and polygraphy fail with their own exception types (RuntimeError, TypeError,
    polygraphy's PolygraphyException...): end as one ExportError naming the step, so the
    command prints a message, not a traceback. Ours (ExportError, ParityError) pass as they are."""
    try:
        yield
    except (ExportError, ParityError):
        raise
    except Exception as exc:
        log.debug("%s failed", what, exc_info=True)
        raise ExportError(f"{what} failed: {type(exc).__name__}: {exc} (run with -v for the traceback)") from exc


def export_tensorrt(repository: Path, encoder_name: str, tokenizer_name: str, out: Path = DEFAULT_OUT, fp16: bool = True) -> Path:
    """Build, check and write the engine; returns the variant repository it went into."""
    problems = gpu_problems()
    if problems:
        raise TensorRTUnavailable("TensorRT export needs a GPU host: " + "; ".join(problems))
    encoder = load_config(repository / encoder_name)
    tokenizer = load_config(repository / tokenizer_name)
    onnx_path = repository / encoder_name / "1" / (encoder.default_model_filename or "model.onnx")
    tokenizer_json = repository / tokenizer_name / "1" / tokenizer.parameters["tokenizer_file"].string_value
    for path in (onnx_path, tokenizer_json):
        if not path.is_file():
            raise ExportError(f"{path} is missing; run `make export` (the ONNX export) first")
    input_names = [tensor.name for tensor in encoder.input]
    if len(input_names) != 2 or len(encoder.output) != 1:
        raise ExportError(f"{encoder_name}: expected two inputs (ids, mask) and one output, got {input_names}")
    try:
        profile = profile_from_configs(encoder, tokenizer, tokenizer_json)
    except ValueError as exc:
        raise ExportError(str(exc)) from exc
    log.info("profile: batch min/opt/max %s, sequence %s", profile.batch, profile.sequence)

    started = time.perf_counter()
    with _engine_step("building the TensorRT engine"):
        plan = build_engine(onnx_path, profile, input_names, fp16=fp16)
    log.info("engine built in %.0f s (%.1f MB)", time.perf_counter() - started, len(plan) / 1e6)
    with _engine_step("reading the engine's inputs"):
        engine_types = engine_input_types(plan)
    check_input_types(encoder, engine_types)
    multiple = profile.sequence[0]
    batches = parity_batches(tokenizer_json, multiple, profile)
    worst = check_parity(plan, onnx_path, batches, (input_names[0], input_names[1], encoder.output[0].name))
    log.info("parity ok: min cosine %.6f >= %.3f over %d batches", worst, MIN_COSINE, len(batches))

    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent) as scratch:
        plan_path = Path(scratch) / PLAN_NAME
        plan_path.write_bytes(plan)
        try:
            write_variant("tensorrt", out, repository, plans={encoder_name: plan_path})
        except VariantError as exc:
            raise ExportError(str(exc)) from exc
    log.info("wrote %s and its config (platform tensorrt_plan)", out / encoder_name / "1" / PLAN_NAME)
    return out
