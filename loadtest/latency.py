"""Latency of successful requests only, per locust stats row.

Locust's own percentiles mix in failed requests; under overload those are fast
rejections that make a class look quicker than the requests it actually served. This
recorder keeps the successful ones apart and writes `<csv prefix>_success_latency.csv`.

Run distributed (`--processes N`, or `--master` with `--worker`s), the requests happen in
the workers while the master writes the reports. Each worker then hands its new samples
to the master inside locust's own periodic stats report (`report_to_master` /
`worker_report`), the message that carries locust's counters, including the final
report a worker sends when it quits: the master's samples match its stats rows exactly.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import numpy as np

from tools.load.results import percentile

SUCCESS_SUFFIX = "_success_latency.csv"
PERCENTILES = (50, 95, 99)
FIELDS = ("Type", "Name", "Count", *(f"p{p}_ms" for p in PERCENTILES), "Max_ms")


class SuccessLatency:
    def __init__(self) -> None:
        self.samples: dict[tuple[str, str], list[float]] = defaultdict(list)

    def record(self, request_type: str, name: str, response_time: float, exception: object = None, **_: object) -> None:
        """An `events.request` listener."""
        if exception is None:
            self.samples[(request_type, name)].append(float(response_time))

    def clear(self, **_: object) -> None:
        self.samples.clear()

    def take_report(self) -> list[list]:
        """A worker's samples since its last report, as plain lists (locust's messages are msgpack), then forgotten."""
        report = [[request_type, name, values] for (request_type, name), values in self.samples.items()]
        self.samples.clear()
        return report

    def merge_report(self, report: list[list]) -> None:
        """The master's side of `take_report`."""
        for request_type, name, values in report:
            self.samples[(request_type, name)].extend(float(value) for value in values)

    def rows(self) -> list[dict[str, object]]:
        rows = []
        for (request_type, name), values in sorted(self.samples.items()):
            data = np.asarray(values)
            row: dict[str, object] = {"Type": request_type, "Name": name, "Count": len(values)}
            for p in PERCENTILES:
                row[f"p{p}_ms"] = round(percentile(data, p), 1)
            row["Max_ms"] = round(float(data.max()), 1)
            rows.append(row)
        return rows

    def write(self, csv_prefix: str) -> Path:
        path = Path(f"{csv_prefix}{SUCCESS_SUFFIX}")
        with path.open("w", newline="") as handle:
            writer = csv.DictWriter(handle, fieldnames=FIELDS)
            writer.writeheader()
            writer.writerows(self.rows())
        return path
