"""reports/bench-lora/: the LoRA benchmark as JSON (every figure) and Markdown (every level,
then the comparisons it exists for: mixed-adapter batching against the base model and against
one adapter per step)."""

from __future__ import annotations

import json
from pathlib import Path

from tools.bench.llm.report import COLUMNS, _cell, _ratio
from tools.machine import cpu_summary
from tools.serve.llm.engine import LLM_ENGINES

BASE, MIXED, ONE_PER_STEP = "base", "mixed", "one adapter per step"
NATIVE, VLLM = LLM_ENGINES  # ours, and vLLM's engine inside Triton


def level_table(levels: list[dict]) -> list[str]:
    headers = ["streams", "served as", *(name for name, _, _ in COLUMNS)]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    for level in sorted(levels, key=lambda lv: (lv["load"], lv["adapters"], lv["popularity"], lv["way"])):
        cells = [str(level["load"]), level["target"], *(_cell(level, key, spec, name) for name, key, spec in COLUMNS)]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def engine_of(level: dict) -> str:
    return level.get("engine", NATIVE)  # reports from before vLLM was measured: ours


def find(levels: list[dict], way: str, load: int, adapters: int = 0, popularity: str = "", engine: str = NATIVE) -> dict | None:
    wanted = (way, load, adapters, popularity, engine)
    return next((lv for lv in levels if (lv["way"], lv["load"], lv["adapters"], lv["popularity"], engine_of(lv)) == wanted), None)


def comparison_table(levels: list[dict], engine: str = NATIVE) -> list[str]:
    """Per streams, adapter count and popularity: the three ways' output tokens/s and goodput
    on one engine (vLLM's has no one-per-step row)."""
    levels = [lv for lv in levels if engine_of(lv) == engine]

    lines = [
        "| streams | adapters | popularity | mixed tok/s | one per step tok/s | base tok/s | mixed / base | mixed / one per step "
        "| goodput req/s (mixed, one per step, base) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for level in sorted((lv for lv in levels if lv["way"] == MIXED), key=lambda lv: (lv["load"], lv["adapters"], lv["popularity"])):
        load, adapters, popularity = level["load"], level["adapters"], level["popularity"]
        single = find(levels, ONE_PER_STEP, load, adapters, popularity) if adapters > 1 else level
        base = find(levels, BASE, load, engine=engine)
        tok = [lv["output_tokens_per_s"] if lv else None for lv in (level, single, base)]
        good = ", ".join("-" if lv is None else f"{lv['goodput_rps']:.3f}" for lv in (level, single, base))
        cells = [str(load), str(adapters), popularity, *("-" if t is None else f"{t:.1f}" for t in tok)]
        cells += [_ratio(tok[0], tok[2]), _ratio(tok[0], tok[1]), good]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def engines_table(levels: list[dict]) -> list[str]:
    """Our engine against vLLM's on the same load: output tokens/s of each way both measured."""
    lines = ["| streams | served as | ours tok/s | vLLM tok/s | ours / vLLM |", "|---|---|---|---|---|"]
    for level in sorted((lv for lv in levels if engine_of(lv) == VLLM), key=lambda lv: (lv["load"], lv["adapters"], lv["popularity"])):
        ours = find(levels, level["way"], level["load"], level["adapters"], level["popularity"])
        served = BASE if level["way"] == BASE else f"{level['way']}, {level['adapters']} adapters, {level['popularity']}"
        mine = None if ours is None else ours["output_tokens_per_s"]
        cells = [str(level["load"]), served, "-" if mine is None else f"{mine:.1f}", f"{level['output_tokens_per_s']:.1f}"]
        lines.append("| " + " | ".join([*cells, _ratio(mine, level["output_tokens_per_s"])]) + " |")
    return lines


def markdown(report: dict) -> str:
    settings, adapters = report["settings"], report["adapters"]
    knobs = ", ".join(f"{key}={value}" for key, value in settings["overrides"].items()) or "the committed config"
    lines = [
        "# bench-lora: many LoRA adapters of one model, batched together or apart",
        "",
        f"- Date: {report['date']}; runs: 1 (the ways one after another on one server)",
        f"- CPU: {cpu_summary(report['cpu'])}; load average at the start: {report['load_average']}",
        f"- Workload: {report['workload']['description']}; mean prompt {report['workload']['mean_prompt_tokens']:.0f} tokens, "
        f"mean output {report['workload']['mean_output_tokens']:.0f} tokens; each request names an adapter drawn by popularity "
        "(uniform, or Zipf's 1/rank), the same draw for both ways of a mix",
        f"- Adapters: random, rank {adapters['rank']}, on {', '.join(adapters['target_modules'])} of every layer; "
        f"the engine's knobs: {knobs}, "
        "max_loras = the adapters (mixed) or 1 (one adapter per step)",
        f"- Load: closed loop at {', '.join(str(c) for c in settings['concurrency'])} streams; {settings['warmup_s']:g} s of warm-up, "
        f"then {settings['seconds']:g} s scored, then at most {settings['drain_s']:g} s of drain",
        f"- SLO: {report['slo']}",
        "",
        "## Mixed-adapter batching against the base model and one adapter per step",
        "",
        *comparison_table(report["levels"]),
        "",
    ]
    if VLLM in report.get("engines", ()):
        lines += [
            "## vLLM's engine in Triton (enable_lora, max_loras = the adapters; its base with LoRA on too)",
            "",
            *comparison_table(report["levels"], VLLM),
            "",
            "## Our engine against vLLM's",
            "",
            *engines_table(report["levels"]),
            "",
        ]
    lines += [
        "## Every level",
        "",
        *level_table(report["levels"]),
        "",
    ]
    return "\n".join(lines)


def write_report(report: dict, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out / "bench-lora.json", out / "bench-lora.md"
    json_path.write_text(json.dumps(report, indent=2) + "\n")
    md_path.write_text(markdown(report))
    return [json_path, md_path]
