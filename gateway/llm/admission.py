"""A bound on the generations the gateway keeps open, refused fast with 429 beyond it.

Each open generation is a gRPC stream into Triton's `llm` model, whose own waiting bound
(`max_waiting`) answers only once the request reached the Python backend; a flood of streams
far past that bound crashed Triton 2.51's Python backend here (docs/llm.md, known issues).
The gateway therefore refuses past `--llm-max-streams` before it opens a stream at all.
"""

from __future__ import annotations

from gateway.errors import RATE_LIMIT, APIError


class Slot:
    """One admitted generation; `release()` may be called more than once (every exit path does)."""

    def __init__(self, admission: Admission) -> None:
        self._admission: Admission | None = admission

    def release(self) -> None:
        if self._admission is not None:
            self._admission.open -= 1
            self._admission = None


class Admission:
    def __init__(self, limit: int, retry_after_s: int) -> None:
        self.limit = limit
        self.retry_after_s = retry_after_s
        self.open = 0

    def admit(self) -> Slot:
        if self.open >= self.limit:
            raise APIError(
                429,
                f"The gateway has {self.open} generations open, its limit (--llm-max-streams {self.limit}); retry later.",
                RATE_LIMIT,
                None,
                "too_many_streams",
                self.retry_after_s,
            )
        self.open += 1
        return Slot(self)
