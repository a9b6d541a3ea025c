"""The LLM controller's evaluation tables and JSON, shared by the simulated and live runs."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from tools.adapt.llm.control import LlmSetting
from tools.load.llm.figures import LevelFigures


def row(label: str, figures: LevelFigures, changes: int = 0, final: LlmSetting | None = None) -> dict:
    return {"config": label, "figures": figures.as_dict(), "changes": changes, "final": None if final is None else asdict(final)}


def table(rows: list[dict], title: str) -> str:
    lines = [f"### {title}", "", "| config | goodput req/s | within SLO | TTFT p99 ms | TPOT p99 ms | tokens/s | changes | final budget |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for item in rows:
        f: dict = item["figures"]
        share = "-" if f["good_share"] is None else f"{100 * f['good_share']:.1f}%"
        final = item["final"]["max_num_batched_tokens"] if item.get("final") else "-"
        lines.append(
            f"| {item['config']} | {f['goodput_rps']:.3f} | {share} | {f['ttft_p99_ms'] or 0:.0f} | {f['tpot_p99_ms'] or 0:.0f}"
            f" | {f['output_tokens_per_s']:.1f} | {item.get('changes', 0)} | {final} |"
        )
    return "\n".join(lines)


def write_json(path: Path | None, document: dict) -> None:
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(document, indent=1, default=str) + "\n")
