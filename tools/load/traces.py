"""Recorded arrival traces: a file of arrival offsets (seconds) for a Trace schedule.

Three shapes, told apart by the file's suffix:
- `.csv`: a header row with an `offset_s` column (seconds from the trace's start) or a
  `timestamp` column (seconds, any origin: shifted so the first arrival is at 0);
- `.jsonl`: one JSON object per line with `offset_s` or `timestamp`, as in the CSV;
- anything else: one offset per line, `#` comments allowed.
Every bad entry is named by file and line, so a long trace is fixed where it is wrong.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

OFFSET, TIMESTAMP = "offset_s", "timestamp"

Entries = list[tuple[int, object]]  # (line number, raw value)


def read_arrival_offsets(path: Path | str) -> tuple[float, ...]:
    """The trace's arrival offsets in seconds, in file order (ValueError naming the bad line)."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read the trace file {path}: {exc.strerror or exc}") from None
    suffix = path.suffix.lower()
    if suffix == ".csv":
        column, entries = _csv_entries(path, text)
    elif suffix == ".jsonl":
        column, entries = _jsonl_entries(path, text)
    else:
        column, entries = OFFSET, _plain_entries(text)
    values = []
    for number, raw in entries:
        try:
            values.append(float(raw))
        except (TypeError, ValueError):
            raise ValueError(f"{path}:{number}: {raw!r} is not a number of seconds") from None
        if column == OFFSET and values[-1] < 0:
            raise ValueError(f"{path}:{number}: an arrival offset cannot be negative ({raw})")
    if not values:
        raise ValueError(f"{path} holds no arrival offsets")
    if column == TIMESTAMP:
        first = min(values)
        values = [value - first for value in values]
    return tuple(values)


def _plain_entries(text: str) -> Entries:
    entries = []
    for number, line in enumerate(text.splitlines(), start=1):
        line = line.split("#", 1)[0].strip()
        if line:
            entries.append((number, line))
    return entries


def _column_of(path: Path, fields, number: int) -> str:
    for column in (OFFSET, TIMESTAMP):
        if column in fields:
            return column
    raise ValueError(f"{path}:{number}: a trace needs an `{OFFSET}` or a `{TIMESTAMP}` field, got {sorted(fields or ())}")


def _csv_entries(path: Path, text: str) -> tuple[str, Entries]:
    reader = csv.DictReader(text.splitlines())
    column = _column_of(path, reader.fieldnames, 1)
    return column, [(number, row[column]) for number, row in enumerate(reader, start=2)]


def _jsonl_entries(path: Path, text: str) -> tuple[str, Entries]:
    column, entries = OFFSET, []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}:{number}: not a JSON object ({exc.msg})") from None
        if not isinstance(item, dict):
            raise ValueError(f"{path}:{number}: not a JSON object")
        if not entries:
            column = _column_of(path, item, number)
        entries.append((number, item.get(column)))
    return column, entries
