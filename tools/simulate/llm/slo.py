"""A TTFT/TPOT p99 SLO for the `llm` model, shared by tuning and capacity planning.

Met by a level when its TTFT p99 and TPOT p99 are inside the targets and every request
completed; its bounds are also the per-request objectives goodput counts with (DistServe).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from tools.load.llm.figures import LevelFigures, Slo

_UNITS = {"ms": 1e-3, "s": 1.0, "": 1.0}


@dataclass(frozen=True)
class LlmSlo:
    ttft_p99_s: float = 1.0
    tpot_p99_s: float = 0.100

    @classmethod
    def parse(cls, text: str) -> LlmSlo:
        """'ttft_p99=1s,tpot_p99=100ms' (a bare number is seconds)."""
        values = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            key, sep, value = part.partition("=")
            match = re.fullmatch(r"\s*([0-9.]+)\s*(ms|s)?\s*", value)
            if not sep or key.strip() not in ("ttft_p99", "tpot_p99") or not match:
                raise ValueError(f"an SLO is ttft_p99=1s,tpot_p99=100ms; got {part!r}")
            values[f"{key.strip()}_s"] = float(match[1]) * _UNITS[match[2] or ""]
        return cls(**values)

    def per_request(self) -> Slo:
        """The per-request objectives goodput counts with (the same bounds)."""
        return Slo(ttft_s=self.ttft_p99_s, tpot_s=self.tpot_p99_s)

    def met_by(self, figures: LevelFigures) -> bool:
        ttft, tpot = figures.ttft_p99_ms, figures.tpot_p99_ms
        return (
            figures.requests > 0
            and figures.completed == figures.requests
            and ttft is not None
            and ttft <= self.ttft_p99_s * 1000
            and (tpot is None or tpot <= self.tpot_p99_s * 1000)
        )

    def overshoot(self, figures: LevelFigures) -> float:
        """How far the worse percentile is above its target (0 inside; inf without figures)."""
        if figures.ttft_p99_ms is None:
            return float("inf")
        ratios = [figures.ttft_p99_ms / (self.ttft_p99_s * 1000)]
        if figures.tpot_p99_ms is not None:
            ratios.append(figures.tpot_p99_ms / (self.tpot_p99_s * 1000))
        return max(0.0, max(ratios) - 1.0)

    def describe(self) -> str:
        return f"TTFT p99 <= {self.ttft_p99_s * 1000:g} ms and TPOT p99 <= {self.tpot_p99_s * 1000:g} ms"
