"""perf_analyzer's profile export (`--profile-export-file`, decoupled streaming) as StreamRecords,
so its requests are summarised by the same figures (LoadFigures) as ours.

perf_analyzer 2.40 writes, per request, the send `timestamp` and every response's
`response_timestamps` (nanoseconds, one clock), but not the responses' contents: each
response counts as one token (true of `llm`, which sends one response per generated token
unless a step emits several) and the last response ends the request. Times come out in
seconds from the earliest send. This is how loadgen was cross-checked against
perf_analyzer on the decoupled `llm` (docs/load-testing.md).
"""

from __future__ import annotations

import json
from pathlib import Path

from tools.load.llm.records import StreamRecord

NS = 1e-9


def records_from_profile_export(path: Path | str, experiment: int = 0) -> tuple[list[StreamRecord], float]:
    """The export's requests as completed records, and the span from the first send to the last response (s)."""
    document = json.loads(Path(path).read_text())
    try:
        requests = document["experiments"][experiment]["requests"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"{path} is not a perf_analyzer profile export with experiment {experiment}") from None
    if not requests:
        raise ValueError(f"{path}: experiment {experiment} holds no requests")
    origin = min(int(r["timestamp"]) for r in requests)
    records = []
    for index, request in enumerate(sorted(requests, key=lambda r: int(r["timestamp"]))):
        record = StreamRecord(index, (int(request["timestamp"]) - origin) * NS)
        for stamp in request.get("response_timestamps", []):
            record.add_tokens((int(stamp) - origin) * NS, 1)
        record.end_s = record.token_times[-1] if record.token_times else None
        record.finish_reason = "length" if record.token_times else None
        records.append(record)
    span = max((r.end_s or r.sent_s) for r in records)
    return records, span
