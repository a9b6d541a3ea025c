"""The in-process naive batcher: a failing batch fails each of its requests, and the
worker serves the next batch. Batches form deterministically: the delay is far longer
than the test, so a batch leaves exactly when `max_batch` requests have arrived."""

from __future__ import annotations

import numpy as np
import pytest

from tools.bench.in_process import NaiveBatcher

WAIT_S = 60.0


class FlakySession:
    """Raises on its first run, then returns one row per input row (or `rows` rows)."""

    def __init__(self, rows: int | None = None) -> None:
        self.calls, self.rows = 0, rows

    def run(self, _outputs: object, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        self.calls += 1
        if self.calls == 1:
            raise ValueError("out-of-range token id")
        ids = feeds["INPUT_IDS"]
        return [np.arange(self.rows if self.rows is not None else len(ids), dtype=np.float32)[:, None]]


def submit_batch(batcher: NaiveBatcher, size: int) -> list:
    return [batcher.submit({"INPUT_IDS": np.full((1, 4), i, dtype=np.int64)}) for i in range(size)]


def test_a_failing_batch_fails_every_request_of_it_and_the_next_batch_is_served() -> None:
    batcher = NaiveBatcher(FlakySession(), max_batch=3, timeout_s=WAIT_S)
    try:
        failed = submit_batch(batcher, 3)
        for future in failed:
            with pytest.raises(ValueError, match="out-of-range token id"):
                future.result(timeout=WAIT_S)
        served = submit_batch(batcher, 3)
        assert [float(future.result(timeout=WAIT_S)[0, 0]) for future in served] == [0.0, 1.0, 2.0]
        assert batcher.batches == [3], "only the served batch counts"
    finally:
        batcher.close()


def test_a_session_that_returns_another_number_of_rows_fails_the_batch() -> None:
    session = FlakySession(rows=1)
    session.calls = 1  # no first failure: straight to the short answer
    batcher = NaiveBatcher(session, max_batch=2, timeout_s=WAIT_S)
    try:
        for future in submit_batch(batcher, 2):
            with pytest.raises(RuntimeError, match="1 rows for a batch of 2"):
                future.result(timeout=WAIT_S)
    finally:
        batcher.close()
