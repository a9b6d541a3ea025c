"""`python -m tools.bench.precision` (`make bench-precision`): fp32 vs int8 vs fp16, speed and quality in one run.

Builds each variant from the exported fp32 encoder exactly as `python -m export --precision`
does (into build/precision/, never into the model repository), scores it with the export's
quality gate, then measures in-process ONNX Runtime rows/s at batch 1 and 16, sequence
length 32 and 128. The CPU is shared, so the variants are interleaved: every round
measures each shape on all variants back to back, in alternating order (ABBA), and each
variant's speed-up is the median of its per-round ratios to fp32 with their spread.
Writes reports/precision/report.{md,json}; names the CPU and its int8/fp16 instructions.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from export.precision import PrecisionSpec
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.paths import BUILD_DIR, MODEL_REPOSITORY, REPO_ROOT

log = logging.getLogger("bench.precision")

VARIANTS = {
    "fp32": PrecisionSpec("fp32"),
    "int8-dynamic": PrecisionSpec("int8", "dynamic"),
    "int8-static": PrecisionSpec("int8", "static"),
    "fp16": PrecisionSpec("fp16"),
    # ONNX Runtime's quantize_dynamic with its defaults (every MatMul and the embedding
    # table, per-tensor): what int8 could gain if quality allowed; the gate refuses it.
    "int8-ort-default": None,
}
SHAPES = ((1, 32), (16, 32), (1, 128), (16, 128))
# CPU flags that decide whether int8 / fp16 kernels have hardware support (Linux /proc/cpuinfo names).
INT8_FLAGS = ("amx_int8", "avx512_vnni", "avx_vnni")
FP16_FLAGS = ("avx512_fp16", "amx_fp16", "f16c", "avx512_bf16")


@dataclass(frozen=True)
class CpuInfo:
    model: str
    cores: int
    flags: tuple[str, ...]  # the int8/fp16-relevant flags present

    @classmethod
    def here(cls) -> CpuInfo:
        fields: dict[str, str] = {}
        try:
            for line in Path("/proc/cpuinfo").read_text().splitlines():
                key, _, value = line.partition(":")
                fields.setdefault(key.strip(), value.strip())  # the first processor's
        except OSError:
            pass
        model = fields.get("model name") or platform.processor() or platform.machine()
        if "cpu family" in fields:  # virtual machines often hide the exact model name
            model += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
        flags = set(fields.get("flags", "").split())
        relevant = tuple(flag for flag in ("avx2", "avx512f", *INT8_FLAGS, *FP16_FLAGS) if flag in flags)
        return cls(model, os.cpu_count() or 1, relevant)

    @property
    def int8_instructions(self) -> str:
        present = [flag for flag in INT8_FLAGS if flag in self.flags]
        return ", ".join(present) if present else "none (no VNNI/AMX: u8s8 int8 MatMuls run on AVX2 multiply-adds)"


def build_variants(names: list[str], source: Path, work: Path) -> dict[str, Path]:
    """The variants `python -m export --precision` would write, built from the fp32 graph."""
    from export.precision import TokenizedCalibration, convert
    from export.quality_texts import text_sets

    tokenizer, multiple = _tokenizer()
    work.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name in names:
        spec = VARIANTS[name]
        if spec is None:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            from export.precision import quiet_quantizer

            paths[name] = work / f"{name}.onnx"
            with quiet_quantizer():
                quantize_dynamic(source, paths[name], weight_type=QuantType.QInt8)
            continue
        if spec.precision == "fp32":
            paths[name] = source
            continue
        static = spec.precision == "int8" and spec.int8_method == "static"
        calibration = TokenizedCalibration(tokenizer, text_sets().calibration, multiple) if static else None
        paths[name] = work / f"{name}.onnx"
        started = time.perf_counter()
        log.info("%s: %s (%.0f s)", name, convert(spec, source, paths[name], calibration), time.perf_counter() - started)
    return paths


def _tokenizer():
    from export.serving_tokenizer import serving_tokenizer
    from export.source_model import default_model_dir, inspect_model
    from tools.repo.model_config import load_config

    tokenizer = serving_tokenizer(inspect_model(default_model_dir()))
    multiple = int(load_config(MODEL_REPOSITORY / "tokenizer").parameters["pad_to_multiple_of"].string_value or 1)
    return tokenizer, multiple


def gate_figures(paths: dict[str, Path]) -> dict[str, dict]:
    """Each variant against fp32 on the gate's held-out texts, with the gate's verdict."""
    from export.quality_gate import QualityThresholds, compare, embed_texts
    from export.quality_texts import text_sets

    tokenizer, multiple = _tokenizer()
    sets = text_sets()
    reference = embed_texts(paths["fp32"], tokenizer, sets.held_out, multiple)
    figures = {}
    for name, path in paths.items():
        report = compare(reference, embed_texts(path, tokenizer, sets.held_out, multiple), sets.held_out_languages)
        figures[name] = {**report.as_dict(), "passes_gate": not report.failures(QualityThresholds())}
        log.info("%s: %s", name, report.summary())
    return figures


def measure_speed(paths: dict[str, Path], threads: int, rounds: int, seconds: float) -> dict[str, dict[str, list[float]]]:
    """rows/s per round: {variant: {"b16s128": [round 1, round 2, ...]}}."""
    os.environ["OMP_NUM_THREADS"] = str(threads)  # open_session's thread budget
    from tools.bench.in_process import open_session, raw_curve

    sessions = {name: open_session(path) for name, path in paths.items()}
    samples: dict[str, dict[str, list[float]]] = {name: {} for name in paths}
    order = list(paths)
    for round_index in range(rounds):
        for batch, length in SHAPES:
            for name in order if round_index % 2 == 0 else order[::-1]:
                (point,) = raw_curve(sessions[name], length, [batch], min_seconds=seconds)
                samples[name].setdefault(f"b{batch}s{length}", []).append(point.rows_per_s)
        log.info("round %d/%d: %s", round_index + 1, rounds, _round_line(samples, round_index))
    return samples


def _round_line(samples: dict[str, dict[str, list[float]]], index: int) -> str:
    return "; ".join(f"{name} " + " ".join(f"{values[index]:.0f}" for values in shapes.values()) for name, shapes in samples.items())


def summarise(samples: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, dict]]:
    """Median rows/s with its range, and the median of the per-round ratios to fp32 with theirs."""
    summary: dict[str, dict[str, dict]] = {}
    for name, shapes in samples.items():
        summary[name] = {}
        for shape, values in shapes.items():
            ratios = [value / base for value, base in zip(values, samples["fp32"][shape])]
            summary[name][shape] = {
                "median_rows_per_s": statistics.median(values),
                "min_rows_per_s": min(values),
                "max_rows_per_s": max(values),
                "median_ratio_to_fp32": statistics.median(ratios),
                "min_ratio_to_fp32": min(ratios),
                "max_ratio_to_fp32": max(ratios),
            }
    return summary


def render_markdown(report: dict) -> str:
    cpu = report["cpu"]
    shapes = [f"b{b}s{s}" for b, s in SHAPES]
    lines = [
        f"# Encoder precision: speed and quality ({report['date']})",
        "",
        f"CPU: {cpu['model']}, {cpu['cores']} cores; flags: {', '.join(cpu['flags']) or 'none of interest'}; "
        f"int8 dot-product instructions: {cpu['int8_instructions']}. ONNX Runtime {report['onnxruntime']}, "
        f"{report['threads']} intra-op thread(s), in-process, full-length inputs.",
        f"Speed: {report['rounds']} interleaved rounds of {report['seconds']} s per variant and shape; "
        "rows/s median [min-max]; x = median of the per-round ratios to fp32 [min-max].",
        "",
        "| variant | " + " | ".join(f"batch {s.split('s')[0][1:]}, {s.split('s')[1]} tokens" for s in shapes) + " |",
        "|---|" + "---|" * len(shapes),
    ]
    for name, per_shape in report["speed"].items():
        cells = []
        for shape in shapes:
            cell = per_shape[shape]
            text = f"{cell['median_rows_per_s']:.0f} [{cell['min_rows_per_s']:.0f}-{cell['max_rows_per_s']:.0f}]"
            if name != "fp32":
                text += f" x{cell['median_ratio_to_fp32']:.2f} [{cell['min_ratio_to_fp32']:.2f}-{cell['max_ratio_to_fp32']:.2f}]"
            cells.append(text)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if not report["quality"]:
        return "\n".join(lines) + "\n"
    texts = next(iter(report["quality"].values()))["texts"]
    lines += [
        "",
        f"Quality against fp32 on the gate's {texts} held-out texts (gate: min cosine >= 0.99, top-10 neighbour overlap >= 0.9):",
        "",
        "| variant | min cosine | english / chinese min | mean cosine | top-10 overlap | top-1 agreement | gate |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, figures in report["quality"].items():
        by_language = " / ".join(f"{value:.4f}" for value in figures["min_cosine_by_language"].values())
        verdict = "passes" if figures["passes_gate"] else "refused"
        lines.append(
            f"| {name} | {figures['min_cosine']:.4f} | {by_language} | {figures['mean_cosine']:.4f} | "
            f"{figures['neighbour_overlap']:.3f} | {figures['top1_agreement']:.3f} | {verdict} |"
        )
    return "\n".join(lines) + "\n"


def fp32_source(repository: Path) -> Path:
    """The exported encoder, which must be the fp32 export (the reference for everything)."""
    from export.manifest import IMPLICIT_SETTINGS, MANIFEST_NAME, ExportManifest

    source = repository / "encoder" / "1" / "model.onnx"
    manifest = ExportManifest.load(source.with_name(MANIFEST_NAME))
    if not source.is_file() or manifest is None:
        raise ValueError(f"{source} is not exported; run `make export` first")
    precision = {**IMPLICIT_SETTINGS, **manifest.settings}["precision"]
    if precision != "fp32":
        raise ValueError(f"{source} is a {precision} export; the comparison starts from fp32: run `make export PRECISION=fp32`")
    return source


def run(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench.precision", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated, from %(default)s (fp32 is always included)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved speed rounds (default %(default)s)")
    parser.add_argument("--seconds", type=float, default=0.5, help="seconds per variant, shape and round (default %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads, as one served instance gets (default %(default)s)")
    parser.add_argument("--no-quality", action="store_true", help="speed only")
    parser.add_argument("--repository", type=Path, default=MODEL_REPOSITORY)
    parser.add_argument("--work", type=Path, default=BUILD_DIR / "precision", help="where the variants are built")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "precision")
    add_verbosity_flags(parser)
    args = parser.parse_args(argv)
    configure_logging(args)
    names = ["fp32", *[name for name in dict.fromkeys(args.variants.split(",")) if name and name != "fp32"]]
    unknown = [name for name in names if name not in VARIANTS]
    try:
        if unknown:
            raise ValueError(f"unknown variant(s) {', '.join(unknown)}; choose from {', '.join(VARIANTS)}")
        if args.rounds < 1 or args.seconds <= 0 or args.threads < 1:
            raise ValueError("--rounds and --threads must be >= 1 and --seconds > 0")
        source = fp32_source(args.repository.resolve())
        started = time.perf_counter()
        log.info("[1/3] building %s from %s", ", ".join(names[1:]) or "nothing", source)
        paths = build_variants(names, source, args.work)
        log.info("[2/3] quality against fp32 on the gate's held-out texts")
        quality = {} if args.no_quality else gate_figures(paths)
        log.info("[3/3] speed: %d rounds x %d shapes x %d variants x %.1f s", args.rounds, len(SHAPES), len(names), args.seconds)
        samples = measure_speed(paths, args.threads, args.rounds, args.seconds)
    except ValueError as exc:
        log.error("%s", exc)
        return 2
    import onnxruntime

    cpu = CpuInfo.here()
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "cpu": {"model": cpu.model, "cores": cpu.cores, "flags": list(cpu.flags), "int8_instructions": cpu.int8_instructions},
        "onnxruntime": onnxruntime.__version__,
        "threads": args.threads,
        "rounds": args.rounds,
        "seconds": args.seconds,
        "samples": samples,
        "speed": summarise(samples),
        "quality": quality,
        "elapsed_s": time.perf_counter() - started,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.json").write_text(json.dumps(report, indent=1))
    markdown = render_markdown(report)
    (args.out / "report.md").write_text(markdown)
    print(markdown)
    log.info("wrote %s and %s in %.0f s", args.out / "report.md", args.out / "report.json", report["elapsed_s"])
    return 0


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
