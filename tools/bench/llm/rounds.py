"""Several rounds of one bench-llm run, merged into one table.

On the shared 2-core machines a level's throughput drifts by 10-20% from one minute to the next,
so targets measured once, one after another, compare the minutes as much as the engines (one run
put our served engine at 0.77x the same engine in process, the next at 1.13x). `--rounds N`
measures every target N times: the targets in turn, their order reversed every other round, so a
steady drift falls on every target alike. Each figure of a level is then the median of its rounds'
(two rounds: their mean), and the rounds' own output tokens/s are kept beside it, so the report
shows the spread a ratio rests on.
"""

from __future__ import annotations

import statistics
from collections import Counter
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

SUMMED = ("requests", "completed", "late_sends")  # counts: the rounds together
KEPT = ("target", "kind", "load", "label")  # the level's identity: the same in every round


def round_order(targets: Sequence[T], round_index: int) -> list[T]:
    """The targets in the order round `round_index` (from 0) measures them: as given, reversed on odd rounds."""
    return list(targets) if round_index % 2 == 0 else list(reversed(targets))


def level_key(entry: dict) -> tuple[str, str, float]:
    return entry["target"], entry["kind"], entry["load"]


def merge_rounds(rounds: Sequence[Sequence[dict]]) -> list[dict]:
    """Each round's level entries -> one entry per level, in the first round's order."""
    grouped: dict[tuple[str, str, float], list[dict]] = {}
    for entries in rounds:
        for entry in entries:
            grouped.setdefault(level_key(entry), []).append(entry)
    return [merge_level(entries) for entries in grouped.values()]


def merge_level(entries: Sequence[dict]) -> dict:
    """One level's entries (one per round) -> one: figures the median of the rounds' (None where
    no round had one), counts and outcomes summed, the first error kept, and `rounds` the output
    tokens/s of each round in order. A single entry is returned as it is."""
    if len(entries) == 1:
        return dict(entries[0])
    first = entries[0]
    if any(level_key(entry) != level_key(first) for entry in entries):
        raise ValueError(f"rounds of different levels cannot merge: {sorted({level_key(e) for e in entries})}")
    merged: dict = {}
    for key, value in first.items():
        values = [entry.get(key) for entry in entries]
        if key in KEPT:
            merged[key] = value
        elif key in SUMMED:
            merged[key] = sum(v or 0 for v in values)
        elif key == "outcomes":
            merged[key] = dict(sum((Counter(v or {}) for v in values), Counter()))
        elif key == "first_error":
            merged[key] = next((v for v in values if v), None)
        elif isinstance(value, int | float) or value is None:
            numbers = [v for v in values if isinstance(v, int | float) and not isinstance(v, bool)]
            merged[key] = round(statistics.median(numbers), 3) if numbers else None
        else:
            merged[key] = value
    merged["rounds"] = [entry["output_tokens_per_s"] for entry in entries]
    return merged
