"""`python -m tools.bench` (`make bench`): one run, side by side, written to Markdown + JSON.

1. the raw engine: in-process ONNX Runtime rows/s at batch sizes 1..64 (the ceiling);
2. Triton, configs applied live through the model-control API, each at several
   concurrencies and at a Poisson rate:
   - every scenario preset (tools/repo/presets.py; mixed is the committed config) beside its
     twin without dynamic batching (the same tokenizer, encoder instances and threads, no
     `dynamic_batching`), the two taking turns level by level (AB, BA, AB...), so that a
     preset and its twin meet the same neighbours' load on a shared machine;
   - the tuner's winner (if a tune report exists) and Model Analyzer's reported pick
     (max_batch_size 8, `dynamic_batching {}`), with the committed tokenizer;
3. a naive in-process "queue + thread + timeout" batcher under the same load.
`--configs` runs a subset, e.g. `--configs mixed` (the committed config and its twin).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import date
from pathlib import Path

from tools.bench.in_process import NaiveBatcher, drive_naive, open_session, raw_curve
from tools.bench.render import render_markdown
from tools.cli.logsetup import add_verbosity_flags, configure_logging
from tools.loadgen import Measurement, Traffic, embed_target, encoder_target, run_load
from tools.loadgen.report import format_ms
from tools.machine import cpu_description
from tools.paths import MODEL_REPOSITORY, REPO_ROOT
from tools.repo.artifacts import ensemble_batch_floor
from tools.repo.instances import core_budget, with_instances
from tools.repo.model_config import ModelConfig, load_config
from tools.repo.presets import PRESETS, PresetError, preset_configs
from tools.serve.local_triton import TritonStartError
from tools.serve.server_session import triton_endpoints
from tools.triton_client import TritonError

log = logging.getLogger("bench")

OTHER_CONFIGS = ("tuner-winner", "model-analyzer", "naive")
CONFIG_NAMES = (*PRESETS, *OTHER_CONFIGS)


def model_analyzer_pick(base: ModelConfig, batch_floor: int) -> ModelConfig:
    """What Model Analyzer recommended for this encoder here: max batch 8 and the default
    batcher (`dynamic_batching {}`), one instance. Where an ensemble needs a larger
    max_batch_size (Triton refuses the ensemble otherwise), batches are held to 8 by a
    preferred size."""
    config = ModelConfig()
    config.CopyFrom(base)
    config.ClearField("dynamic_batching")
    config.dynamic_batching.SetInParent()
    del config.instance_group[1:]
    config = with_instances(config, 1, core_budget(base))  # one instance on all the committed cores
    config.max_batch_size = max(8, batch_floor)
    if batch_floor > 8:
        config.dynamic_batching.preferred_batch_size.append(8)
    warmups = [w for w in config.model_warmup if w.batch_size <= config.max_batch_size]
    del config.model_warmup[:]
    config.model_warmup.extend(warmups)
    return config


def without_batching(base: ModelConfig) -> ModelConfig:
    config = ModelConfig()
    config.CopyFrom(base)
    config.ClearField("dynamic_batching")
    return config


@dataclass
class Group:
    """Encoder configs measured under one tokenizer config. A preset's group holds the preset
    and its twin without dynamic batching (`twin` names it), which take turns level by level."""

    tokenizer: ModelConfig
    encoders: dict[str, ModelConfig]  # row name -> encoder config
    preset: str | None = None
    twin: str | None = None


def preset_row(name: str) -> str:
    return f"{name} preset (committed)" if name == "mixed" else f"{name} preset"


def twin_row(name: str) -> str:
    return f"{name}: no dynamic batching"


def preset_group(name: str, source: Path = MODEL_REPOSITORY) -> Group:
    """The preset beside its twin: the same encoder (instances, threads) without dynamic batching."""
    configs = preset_configs(PRESETS[name], source)
    encoder = configs["encoder"]
    rows = {preset_row(name): encoder, twin_row(name): without_batching(encoder)}
    return Group(configs["tokenizer"], rows, preset=name, twin=twin_row(name))


def other_groups(selected: list[str], winner_path: Path | None, batch_floor: int, source: Path = MODEL_REPOSITORY) -> list[Group]:
    """The tuner's winner and Model Analyzer's pick, each with the committed tokenizer."""
    tokenizer, base = load_config(source / "tokenizer"), load_config(source / "encoder")
    groups = []
    if "tuner-winner" in selected and winner_path and winner_path.is_file():
        groups.append(Group(tokenizer, {"tuner winner": load_config(winner_path)}))
    elif "tuner-winner" in selected and winner_path:
        log.warning("no tuner winner at %s (run `make tune` first); left out", winner_path)
    if "model-analyzer" in selected:
        groups.append(Group(tokenizer, {"Model Analyzer pick": model_analyzer_pick(base, batch_floor)}))
    return groups


def parse_configs(text: str, no_model_analyzer: bool = False) -> list[str]:
    """`--configs` as a list in CONFIG_NAMES order; ValueError names what is unknown."""
    wanted = [part.strip() for part in text.split(",") if part.strip()]
    unknown = [name for name in wanted if name not in CONFIG_NAMES]
    if unknown or not wanted:
        raise ValueError(f"--configs: unknown {', '.join(unknown) or '(nothing given)'}; choose from {', '.join(CONFIG_NAMES)}")
    return [name for name in CONFIG_NAMES if name in wanted and not (no_model_analyzer and name == "model-analyzer")]


Measure = Callable[[str, Traffic], dict]
Load = Callable[[str, ModelConfig], bool]


def measure_groups(groups: list[Group], traffics: list[Traffic], rounds: int, measure: Measure, load: Load) -> dict[str, list[dict]]:
    """Every row of every group at every level, `rounds` times; each result carries its round.

    A preset and its twin take turns level by level, in alternating order (AB, BA, ...), each
    reloaded before it runs, so neither always follows the other. Other rows are loaded once.
    A config that fails to load has no results (an empty list)."""
    served: dict[str, list[dict]] = {}
    for group in groups:
        names = list(group.encoders)
        served.update({name: [] for name in names})
        if not load("tokenizer", group.tokenizer):
            continue
        if group.twin is None:
            for name in names:
                if load("encoder", group.encoders[name]):
                    served[name] = [measure(name, t) | {"round": r} for r in range(1, rounds + 1) for t in traffics]
            continue
        failed: set[str] = set()
        turns = [(r, t) for r in range(1, rounds + 1) for t in traffics]
        for turn, (round_, traffic) in enumerate(turns):
            for name in names if turn % 2 == 0 else names[::-1]:
                if name not in failed and not load("encoder", group.encoders[name]):
                    failed.add(name)
                if name not in failed:
                    served[name].append(measure(name, traffic) | {"round": round_})
        served.update({name: [] for name in failed})
    return served


def naive_results(session, base: ModelConfig, traffics: list[Traffic], seq_len: int, warmup_s: float, seconds: float) -> list[dict]:
    """The naive in-process batcher with the committed max batch size and delay, at every level."""
    delay_us = base.dynamic_batching.max_queue_delay_microseconds
    log.info("[3/3] naive in-process batcher (max batch %d, timeout %d us)", base.max_batch_size, delay_us)
    results = []
    for traffic in traffics:
        batcher = NaiveBatcher(session, base.max_batch_size, delay_us / 1e6)
        result = drive_naive(batcher, seq_len, traffic, warmup_s=warmup_s, seconds=seconds)
        batcher.close()
        log.info("%-34s %s: %.1f req/s p99 %s ms", "naive batcher", result.label, result.throughput_rps, format_ms(result.latency.p99_ms))
        results.append(asdict(result))
    return results


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m tools.bench", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--target",
        choices=("embed", "encoder"),
        default="embed",
        help="send load through the ensemble (texts; default) or straight to the encoder (fixed-length token ids)",
    )
    parser.add_argument(
        "--seq-len",
        type=int,
        default=None,
        help="tokens per request for the raw engine, the naive batcher and --target encoder "
        "(default 32 with embed: the benchmark texts pad to 16-48; 128 with encoder, as in Model Analyzer's run)",
    )
    parser.add_argument(
        "--configs",
        default=",".join(CONFIG_NAMES),
        help="what to run, comma-separated: the presets (each beside its twin without dynamic batching), "
        "tuner-winner, model-analyzer, naive (default: all)",
    )
    parser.add_argument("--concurrency", default="1,4,16", help="closed-loop levels (default %(default)s)")
    parser.add_argument("--rate", type=float, default=0.0, help="Poisson rate in req/s (default: 40%% of the raw engine's best)")
    parser.add_argument("--rounds", type=int, default=1, help="measure every level this many times (default %(default)s)")
    parser.add_argument("--batch-sizes", default="1,2,4,8,16,32,64", help="raw engine batch sizes")
    parser.add_argument("--winner", type=Path, default=REPO_ROOT / "reports" / "tune-encoder" / "config.pbtxt")
    parser.add_argument("--no-model-analyzer", action="store_true", help="leave out Model Analyzer's pick")
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "reports" / "bench")
    parser.add_argument("--window", type=float, default=2.0, help="seconds per measurement window (default %(default)s)")
    parser.add_argument("--max-windows", type=int, default=4)
    parser.add_argument("--warmup", type=float, default=1.5)
    add_verbosity_flags(parser)
    return parser


@dataclass(frozen=True)
class BenchSettings:
    """The command line as typed values; built once in `run()`, read by everything below."""

    configs: list[str]  # CONFIG_NAMES to run, in order
    target: str  # "embed" (texts through the ensemble) or "encoder" (token ids)
    seq_len: int
    levels: list[int]  # closed-loop concurrencies
    rate: float  # Poisson req/s; 0: 40% of the raw engine's best
    rounds: int
    batch_sizes: list[int]  # of the raw engine curve
    winner: Path | None
    out: Path
    warmup_s: float
    window_s: float
    max_windows: int


def settings_from_args(args: argparse.Namespace) -> BenchSettings:
    """Typed settings (ValueError or PresetError names a bad option)."""
    if args.rounds < 1:
        raise ValueError(f"--rounds must be at least 1, got {args.rounds}")
    return BenchSettings(
        configs=parse_configs(args.configs, args.no_model_analyzer),
        target=args.target,
        seq_len=args.seq_len or (32 if args.target == "embed" else 128),
        levels=[int(c) for c in args.concurrency.split(",") if c.strip()],
        rate=args.rate,
        rounds=args.rounds,
        batch_sizes=[int(b) for b in args.batch_sizes.split(",")],
        winner=args.winner,
        out=args.out,
        warmup_s=args.warmup,
        window_s=args.window,
        max_windows=args.max_windows,
    )


def measure_served(settings: BenchSettings, groups: list[Group], traffics: list[Traffic], target) -> dict[str, list[dict]]:
    """Every group's configs on one local Triton with explicit model control, level by level."""
    measurement = Measurement(settings.warmup_s, settings.window_s, 3, settings.max_windows, 0.10, ("encoder",))
    with triton_endpoints(None, explicit_control=True) as endpoints:

        def load(model: str, config: ModelConfig) -> bool:
            try:
                endpoints.client.load(model, config)
                return True
            except TritonError as exc:
                log.error("%s: %s", model, exc)
                return False

        def measure(name: str, traffic: Traffic) -> dict:
            result = run_load(target, traffic, measurement, endpoints.grpc_url, "grpc", endpoints.http_url)
            log.info("%-34s %s", name, result.one_line())
            return result.to_dict()

        return measure_groups(groups, traffics, settings.rounds, measure, load)


def write_report(out: Path, report: dict) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    (out / "report.md").write_text(render_markdown(report))
    print((out / "report.md").read_text())
    log.info("wrote %s and %s in %.0f s", out / "report.md", out / "report.json", report["seconds"])


def bench(settings: BenchSettings) -> int:
    started = time.perf_counter()
    presets = [preset_group(name) for name in settings.configs if name in PRESETS]
    base = load_config(MODEL_REPOSITORY / "encoder")
    session = open_session(MODEL_REPOSITORY / "encoder" / "1" / "model.onnx")

    log.info("[1/3] raw engine curve at %d tokens", settings.seq_len)
    raw = raw_curve(session, settings.seq_len, settings.batch_sizes, min_seconds=settings.window_s / 2)
    rate = settings.rate or max(1.0, round(0.4 * max(p.rows_per_s for p in raw)))
    traffics = [Traffic(concurrency=c) for c in settings.levels] + [Traffic(rate=rate, seed=11)]
    target = embed_target() if settings.target == "embed" else encoder_target(settings.seq_len)
    floor = ensemble_batch_floor(MODEL_REPOSITORY, "encoder")[0] if settings.target == "embed" else 0
    groups = presets + other_groups(settings.configs, settings.winner, floor)
    rows = ", ".join(name for group in groups for name in group.encoders) or "nothing"
    log.info("[2/3] Triton: %s, under %s", rows, ", ".join(t.label() for t in traffics))
    try:
        served = measure_served(settings, groups, traffics, target)
    except TritonStartError as exc:
        log.error("%s", exc)
        return 1
    naive = []
    if "naive" in settings.configs:
        naive = naive_results(session, base, traffics, settings.seq_len, settings.warmup_s, settings.window_s * 2)
    run_settings = {
        "target": target.describe,
        "sequence_length": settings.seq_len,
        "concurrency": settings.levels,
        "poisson_rate": rate,
        "window_s": settings.window_s,
        "max_windows": settings.max_windows,
        "runs": 1,
        "rounds": settings.rounds,
        "configs": settings.configs,
    }
    write_report(
        settings.out,
        {
            "settings": run_settings,
            "cpu": cpu_description(),
            "date": date.today().isoformat(),
            "pairs": {group.preset: {"preset": preset_row(group.preset), "twin": group.twin} for group in presets},
            "raw_engine": [asdict(p) for p in raw],
            "served": served,
            "naive_batcher": naive,
            "seconds": time.perf_counter() - started,
        },
    )
    return 0


def run(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args)
    try:
        settings = settings_from_args(args)
        for name in settings.configs:  # a preset's configs must build before any load starts
            if name in PRESETS:
                preset_group(name)
    except (ValueError, PresetError) as exc:
        log.error("%s", exc)
        return 2
    return bench(settings)


def main() -> None:
    sys.exit(run())


if __name__ == "__main__":
    main()
