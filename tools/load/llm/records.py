"""One record per streamed request: when it was sent, when each token arrived, how it ended.

Times are seconds on the run's clock (time.perf_counter() minus the level's start). A
response that carries k tokens (a server may send several per message) adds k arrivals at
its time, so ITL sees the k-1 zero gaps and TPOT divides by the real token count. An open
loop's request also keeps its arrival (when the schedule wanted it sent): a client that
falls behind shows as send minus arrival, instead of hiding inside a lower load.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field

from tools.load.outcomes import OK

CUT = "cut"  # still streaming when the level's drain limit ran out: cancelled by the client


@dataclass
class StreamRecord:
    index: int  # the workload's request index
    sent_s: float
    token_times: list[float] = field(default_factory=list)  # one entry per output token received
    end_s: float | None = None
    tokens_in: int | None = None  # as the server counted them
    tokens_out: int = 0
    outcome: str = OK
    finish_reason: str | None = None
    message: str = ""  # a failed request's error
    arrival_s: float | None = None  # when the schedule wanted it sent (open loop); None: at send (closed loop)

    def add_tokens(self, at_s: float, count: int) -> None:
        if count > 0:
            self.token_times.extend([at_s] * count)
            self.tokens_out += count

    @property
    def completed(self) -> bool:
        return self.outcome == OK and self.end_s is not None

    @property
    def ttft_s(self) -> float | None:
        return self.token_times[0] - self.sent_s if self.token_times else None

    @property
    def tpot_s(self) -> float | None:
        """Mean time per output token after the first (vLLM's TPOT); None with fewer than 2."""
        if len(self.token_times) < 2:
            return None
        return (self.token_times[-1] - self.token_times[0]) / (len(self.token_times) - 1)

    @property
    def itl_s(self) -> list[float]:
        """Gaps between successive tokens."""
        times = self.token_times
        return [later - earlier for earlier, later in itertools.pairwise(times)]

    @property
    def e2e_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.sent_s

    def shifted(self, by_s: float) -> None:
        """Move every time by `by_s` (from one clock's origin to another's)."""
        self.sent_s += by_s
        self.token_times = [t + by_s for t in self.token_times]
        if self.end_s is not None:
            self.end_s += by_s
        if self.arrival_s is not None:
            self.arrival_s += by_s

    def to_dict(self) -> dict:
        """The record as JSON data, with its derived figures (seconds; None: no sample)."""
        data = dataclasses.asdict(self)
        data.update(ttft_s=self.ttft_s, tpot_s=self.tpot_s, e2e_s=self.e2e_s)
        return data
